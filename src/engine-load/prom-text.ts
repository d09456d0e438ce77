// The Prometheus text exposition format, as far as the router and the benchmarks read it: sample
// lines `name{labels} value [timestamp]`, comments skipped. Label values may hold escaped quotes.

export interface PromSample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parsePromSamples(text: string): PromSample[] {
  const out: PromSample[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line[0] === '#') continue;
    const brace = line.indexOf('{');
    const close = brace >= 0 ? line.lastIndexOf('}') : -1;
    const space = line.indexOf(' ');
    if (brace < 0 && space < 0) continue; // a name without a value
    const name = brace >= 0 ? line.slice(0, brace) : line.slice(0, space);
    const rest = (close >= 0 ? line.slice(close + 1) : line.slice(name.length)).trim().split(/\s+/);
    const value = Number(rest[0]);
    if (!name || !Number.isFinite(value)) continue;
    const labels: Record<string, string> = {};
    if (brace >= 0 && close > brace) {
      const body = line.slice(brace + 1, close);
      for (let m = LABEL.exec(body); m; m = LABEL.exec(body))
        labels[m[1]] = m[2].replace(/\\(.)/g, (_x, c: string) => (c === 'n' ? '\n' : c));
      LABEL.lastIndex = 0;
    }
    out.push({ name, labels, value });
  }
  return out;
}

/** Sum every sample of each metric name (over all labels). */
export function parseProm(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const s of parsePromSamples(text)) out.set(s.name, (out.get(s.name) ?? 0) + s.value);
  return out;
}
