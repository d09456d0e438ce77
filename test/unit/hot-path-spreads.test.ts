// On the request path, no object literal adds keys after a leading spread (`{ ...x, added: 1 }`):
// on Node 20 that is V8's slow path, measured at 1.6 us for a 9-key object against 22 ns when the
// keys after the spread only override keys `x` already has (docs/profile.md, round three). Without
// types the scan cannot tell the two apart, so overrides are listed here by file and key; anything
// else must be written as a clone then assignments (`const o = { ...x }; o.added = 1`), or with the
// new keys first and the spread last.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseAst } from 'rolldown/parseAst';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/procs.js';

const SRC = join(ROOT, 'src');

/** What every proxied request runs through (folders whole, or single files). */
const HOT = [
  'api/body.ts',
  'api/openai.ts',
  'api/token-body.ts',
  'common/lean-metrics.ts',
  'disagg',
  'epp/exchange.ts',
  'epp/picker.ts',
  'hashing',
  'indexer/block-index.ts',
  'indexer/groups.ts',
  'indexer/namespaces.ts',
  'indexer/namespace.ts',
  'proxy',
  'router/completions.ts',
  'router/decision-log.ts',
  'router/hot-path.ts',
  'router/metrics.ts',
  'router/overrides.ts',
  'scheduler',
  'tokenizer',
];

/** Keys after a leading spread that the spread object always has (overrides: the fast path). */
const OVERRIDES: Record<string, string[]> = {
  'router/completions.ts': ['model'], // a validated body always has `model`
  'epp/exchange.ts': ['subset', 'chosen'],
  'proxy/disagg.ts': ['weights', 'model', 'trackActiveBlocks', 'prefixAffinity', 'loadBound', 'policy', 'target'],
  // PickLoads' fields are all required: the eligible subset's and saturation's copies only override them.
  'scheduler/scheduler.ts': ['of', 'n', 'names'],
  'scheduler/policies/kv.ts': ['cost'],
};

function files(rel: string): string[] {
  const p = join(SRC, rel);
  if (!statSync(p).isDirectory()) return [p];
  // The AssemblyScript sources (src/hashing/wasm) are not TypeScript the parser reads.
  return readdirSync(p)
    .flatMap((f) => (f === 'wasm' ? [] : files(join(rel, f))))
    .filter((f) => f.endsWith('.ts'));
}

interface Node {
  type: string;
  start: number;
  properties?: Array<{ type: string; key?: { type: string; name?: string; value?: unknown } }>;
}

/** `file:line key` for each key added after a leading spread and not listed as an override. */
function addedAfterSpread(file: string): string[] {
  const src = readFileSync(file, 'utf8');
  const rel = relative(SRC, file);
  const allowed = new Set(OVERRIDES[rel] ?? []);
  const out: string[] = [];
  const visit = (n: unknown): void => {
    if (n === null || typeof n !== 'object') return;
    if (Array.isArray(n)) return n.forEach(visit);
    const node = n as Node;
    const props = node.properties;
    if (node.type === 'ObjectExpression' && props && props.length > 1 && props[0].type === 'SpreadElement') {
      for (const p of props.slice(1)) {
        if (p.type !== 'Property') continue;
        const key = p.key?.type === 'Identifier' ? p.key.name : String(p.key?.value ?? '?');
        if (!allowed.has(key!)) out.push(`${rel}:${src.slice(0, node.start).split('\n').length} ${key}`);
      }
    }
    for (const [k, v] of Object.entries(node)) if (k !== 'type' && typeof v === 'object') visit(v);
  };
  visit(parseAst(src, { lang: 'ts' }, file));
  return out;
}

describe('request-path object literals', () => {
  it('add no keys after a leading spread (V8 slow path)', () => {
    const scanned = HOT.flatMap(files);
    expect(scanned.length).toBeGreaterThan(30);
    expect(scanned.flatMap(addedAfterSpread)).toEqual([]);
  });

  it('catches the pattern (the scan can fail)', () => {
    const dir = join(ROOT, 'test', 'fixtures');
    const probe = join(dir, 'spread-probe.ts');
    expect(addedAfterSpread(probe).map((h) => h.split(' ')[1])).toEqual(['added', 'also']);
  });
});
