// The folders under src/ form a DAG: no folder imports (directly or through others) one that
// imports it back. A cycle means a concept lives in the wrong folder.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, normalize, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/procs.js';

const SRC = join(ROOT, 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? sourceFiles(p) : p.endsWith('.ts') ? [p] : [];
  });
}

/** folder -> folder -> one import that makes the edge (for the failure message). */
function folderGraph(): Map<string, Map<string, string>> {
  const folder = (p: string) => relative(SRC, p).split('/')[0];
  const graph = new Map<string, Map<string, string>>();
  for (const f of sourceFiles(SRC)) {
    for (const m of readFileSync(f, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'(\.[^']+)'/g)) {
      const [a, b] = [folder(f), folder(normalize(join(dirname(f), m[1])))];
      if (a === b || a.endsWith('.ts') || b.endsWith('.js')) continue;
      if (!graph.has(a)) graph.set(a, new Map());
      if (!graph.get(a)!.has(b)) graph.get(a)!.set(b, `${relative(SRC, f)} imports ${m[1]}`);
    }
  }
  return graph;
}

/** Every cycle found by a depth-first walk, as the path of imports that closes it. */
function cycles(graph: Map<string, Map<string, string>>): string[][] {
  const out: string[][] = [];
  const state = new Map<string, 'open' | 'done'>();
  const walk = (v: string, path: string[]) => {
    state.set(v, 'open');
    for (const [w, why] of graph.get(v) ?? []) {
      if (state.get(w) === 'open') out.push([...path, why]);
      else if (!state.has(w)) walk(w, [...path, why]);
    }
    state.set(v, 'done');
  };
  for (const v of graph.keys()) if (!state.has(v)) walk(v, []);
  return out;
}

describe('src/ import graph', () => {
  it('has no cycles between folders', () => {
    const g = folderGraph();
    expect(g.size).toBeGreaterThan(8); // the scan found the folders
    expect(cycles(g)).toEqual([]);
  });

  it('finds a cycle when there is one (the check can fail)', () => {
    const g = new Map([
      ['a', new Map([['b', 'a/x.ts imports ../b/y.js']])],
      ['b', new Map([['a', 'b/y.ts imports ../a/x.js']])],
    ]);
    expect(cycles(g)).toEqual([['a/x.ts imports ../b/y.js', 'b/y.ts imports ../a/x.js']]);
  });
});
