// Shared output for benchmarks: a printed table, JSON and Markdown under bench/results/<run>/.
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';

export interface Table {
  title: string;
  columns: string[];
  rows: Array<Array<string | number>>;
}

export function machine(): Record<string, string | number> {
  const c = cpus();
  return {
    cpu: c[0]?.model ?? 'unknown',
    cores: c.length,
    memGiB: Math.round(totalmem() / 2 ** 30),
    node: process.version,
  };
}

export function renderTable(t: Table): string {
  const cells = [t.columns, ...t.rows.map((r) => r.map((v) => (typeof v === 'number' ? fmt(v) : v)))];
  const widths = t.columns.map((_, i) => Math.max(...cells.map((r) => String(r[i] ?? '').length)));
  const line = (r: Array<string | number>) => '| ' + r.map((v, i) => String(v).padEnd(widths[i])).join(' | ') + ' |';
  return [
    `### ${t.title}`,
    '',
    line(cells[0]),
    '|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|',
    ...cells.slice(1).map(line),
    '',
  ].join('\n');
}

export function fmt(v: number): string {
  if (!Number.isFinite(v)) return String(v);
  if (Number.isInteger(v)) return v.toLocaleString('en-US');
  if (Math.abs(v) >= 100) return v.toFixed(0);
  if (Math.abs(v) >= 1) return v.toFixed(2);
  return v.toPrecision(3);
}

/** Print tables and write `<dir>/<name>.json` and `.md`. Returns the directory. */
/** `notes`: lines printed under the machine, before the tables (how the figures were taken). */
export function writeReport(
  name: string,
  data: unknown,
  tables: Table[],
  outDir?: string,
  notes: string[] = [],
): string {
  const dir = outDir ?? join('bench', 'results', `${name}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
  mkdirSync(dir, { recursive: true });
  const md = [
    `# ${name} benchmark`,
    '',
    `Machine: ${JSON.stringify(machine())}`,
    '',
    ...notes.flatMap((n) => [n, '']),
    ...tables.map(renderTable),
  ].join('\n');
  process.stdout.write(md + '\n');
  writeFileSync(
    join(dir, `${name}.json`),
    JSON.stringify(
      { machine: machine(), date: new Date().toISOString(), ...(data as object) },
      (_k, v) => (typeof v === 'bigint' ? v.toString() : v),
      2,
    ),
  );
  writeFileSync(join(dir, `${name}.md`), md + '\n');
  process.stdout.write(`report written to ${dir}\n`);
  return dir;
}

/** Percentile of a sorted array (nearest rank). */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}
