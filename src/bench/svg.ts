// Charts as plain SVG strings (no charting dependency): a line chart (CDFs) and grouped bars.

const PALETTE = [
  '#1f77b4',
  '#ff7f0e',
  '#2ca02c',
  '#d62728',
  '#9467bd',
  '#8c564b',
  '#e377c2',
  '#7f7f7f',
  '#bcbd22',
  '#17becf',
];
const W = 760;
const H = 420;
const M = { top: 40, right: 170, bottom: 56, left: 70 };
const PW = W - M.left - M.right;
const PH = H - M.top - M.bottom;

export const color = (i: number): string => PALETTE[i % PALETTE.length];

function esc(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function text(x: number, y: number, s: string, attrs = ''): string {
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" ${attrs}>${esc(s)}</text>`;
}

function num(v: number): string {
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1000) return `${+(v / 1000).toPrecision(3)}k`;
  if (a >= 1) return String(+v.toPrecision(3));
  return String(+v.toPrecision(2));
}

/** About `n` round ticks covering [lo, hi]. */
export function niceTicks(lo: number, hi: number, n = 5): number[] {
  if (!(hi > lo)) return [lo];
  const raw = (hi - lo) / n;
  const mag = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((k) => k * mag).find((s) => s >= raw) ?? 10 * mag;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
  return out;
}

function logTicks(lo: number, hi: number): number[] {
  const out: number[] = [];
  for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    for (const k of [1, 2, 5]) {
      const v = k * 10 ** e;
      if (v >= lo && v <= hi) out.push(v);
    }
  }
  return out;
}

function frame(title: string, xLabel: string, yLabel: string, body: string[]): string {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${W}" height="${H}" viewBox="0 0 ${W} ${H}" font-family="sans-serif" font-size="12">`,
    `<rect width="${W}" height="${H}" fill="white"/>`,
    text(M.left, 22, title, 'font-size="15" font-weight="bold"'),
    text(M.left + PW / 2, H - 14, xLabel, 'text-anchor="middle"'),
    text(16, M.top + PH / 2, yLabel, `text-anchor="middle" transform="rotate(-90 16 ${M.top + PH / 2})"`),
    ...body,
    `<rect x="${M.left}" y="${M.top}" width="${PW}" height="${PH}" fill="none" stroke="#333"/>`,
    '</svg>',
    '',
  ].join('\n');
}

function legend(names: string[]): string[] {
  return names.map((n, i) => {
    const y = M.top + 8 + i * 18;
    return (
      `<rect x="${M.left + PW + 14}" y="${y - 9}" width="12" height="12" fill="${color(i)}"/>` +
      text(M.left + PW + 32, y + 1, n)
    );
  });
}

export interface Series {
  name: string;
  points: ReadonlyArray<readonly [number, number]>;
}

/** Lines through points; `xLog` puts x on a log scale (values <= 0 are dropped). */
export function lineChart(o: {
  title: string;
  xLabel: string;
  yLabel: string;
  series: Series[];
  xLog?: boolean;
  yMax?: number;
}): string {
  const pts = o.series.flatMap((s) => s.points).filter(([x]) => !o.xLog || x > 0);
  const xs = pts.map(([x]) => x);
  const ys = pts.map(([, y]) => y);
  let x0 = xs.length ? Math.min(...xs) : 0;
  let x1 = xs.length ? Math.max(...xs) : 1;
  if (o.xLog) {
    x0 = 10 ** Math.floor(Math.log10(x0 || 1));
    x1 = 10 ** Math.ceil(Math.log10(x1 || 10));
  } else {
    x0 = Math.min(0, x0);
  }
  if (x1 <= x0) x1 = x0 + 1;
  const y1 = o.yMax ?? (ys.length ? Math.max(...ys) : 1);
  const sx = (x: number) =>
    M.left +
    (o.xLog ? (Math.log10(x) - Math.log10(x0)) / (Math.log10(x1) - Math.log10(x0)) : (x - x0) / (x1 - x0)) * PW;
  const sy = (y: number) => M.top + PH - (y / (y1 || 1)) * PH;
  const body: string[] = [];
  for (const t of o.xLog ? logTicks(x0, x1) : niceTicks(x0, x1)) {
    body.push(
      `<line x1="${sx(t).toFixed(1)}" y1="${M.top}" x2="${sx(t).toFixed(1)}" y2="${M.top + PH}" stroke="#e5e5e5"/>`,
      text(sx(t), M.top + PH + 16, num(t), 'text-anchor="middle"'),
    );
  }
  for (const t of niceTicks(0, y1)) {
    body.push(
      `<line x1="${M.left}" y1="${sy(t).toFixed(1)}" x2="${M.left + PW}" y2="${sy(t).toFixed(1)}" stroke="#e5e5e5"/>`,
      text(M.left - 6, sy(t) + 4, num(t), 'text-anchor="end"'),
    );
  }
  o.series.forEach((s, i) => {
    const p = s.points.filter(([x]) => !o.xLog || x > 0).map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`);
    if (p.length) body.push(`<polyline fill="none" stroke="${color(i)}" stroke-width="2" points="${p.join(' ')}"/>`);
  });
  body.push(...legend(o.series.map((s) => s.name)));
  return frame(o.title, o.xLabel, o.yLabel, body);
}

/** Bars per category: one per series side by side, or `stacked` into one; optional horizontal reference lines. */
export function barChart(o: {
  title: string;
  yLabel: string;
  xLabel?: string;
  categories: string[];
  series: Array<{ name: string; values: number[] }>;
  stacked?: boolean;
  /** One value per category drawn as a diamond over its bars. */
  markers?: number[];
  refs?: Array<{ value: number; label: string }>;
  yMax?: number;
}): string {
  const totals = o.categories.map((_, ci) =>
    o.series.reduce((a, s) => a + (Number.isFinite(s.values[ci]) ? s.values[ci] : 0), 0),
  );
  const all = [
    ...(o.stacked ? totals : o.series.flatMap((s) => s.values)),
    ...(o.markers ?? []),
    ...(o.refs ?? []).map((r) => r.value),
  ].filter(Number.isFinite);
  const y1 = o.yMax ?? (Math.max(0, ...all) * 1.1 || 1);
  const sy = (y: number) => M.top + PH - (Math.min(y, y1) / y1) * PH;
  const gw = PW / Math.max(1, o.categories.length);
  const bw = o.stacked ? gw * 0.6 : (gw * 0.8) / Math.max(1, o.series.length);
  const body: string[] = [];
  for (const t of niceTicks(0, y1)) {
    body.push(
      `<line x1="${M.left}" y1="${sy(t).toFixed(1)}" x2="${M.left + PW}" y2="${sy(t).toFixed(1)}" stroke="#e5e5e5"/>`,
      text(M.left - 6, sy(t) + 4, num(t), 'text-anchor="end"'),
    );
  }
  o.categories.forEach((c, ci) => {
    const gx = M.left + ci * gw + (o.stacked ? gw * 0.2 : gw * 0.1);
    let base = 0;
    o.series.forEach((s, si) => {
      const v = s.values[ci];
      if (!Number.isFinite(v)) return;
      const x = o.stacked ? gx : gx + si * bw;
      const top = o.stacked ? base + v : v;
      const bottom = o.stacked ? base : 0;
      body.push(
        `<rect x="${x.toFixed(1)}" y="${sy(top).toFixed(1)}" width="${Math.max(1, bw - 2).toFixed(1)}" height="${(sy(bottom) - sy(top)).toFixed(1)}" fill="${color(si)}"><title>${esc(`${c} ${s.name}: ${num(v)}`)}</title></rect>`,
      );
      if (o.series.length === 1) body.push(text(x + bw / 2, sy(v) - 4, num(v), 'text-anchor="middle" font-size="11"'));
      base = top;
    });
    if (o.stacked)
      body.push(text(gx + bw / 2, sy(totals[ci]) - 4, num(totals[ci]), 'text-anchor="middle" font-size="11"'));
    const m = o.markers?.[ci];
    if (m !== undefined && Number.isFinite(m)) {
      const cx = M.left + ci * gw + gw / 2;
      const cy = sy(m);
      body.push(
        `<path d="M${(cx - 6).toFixed(1)},${cy.toFixed(1)} L${cx.toFixed(1)},${(cy - 6).toFixed(1)} L${(cx + 6).toFixed(1)},${cy.toFixed(1)} L${cx.toFixed(1)},${(cy + 6).toFixed(1)} Z" fill="#000"><title>${esc(`${c}: ${num(m)}`)}</title></path>`,
      );
    }
    body.push(text(M.left + ci * gw + gw / 2, M.top + PH + 16, c, 'text-anchor="middle"'));
  });
  for (const r of o.refs ?? []) {
    body.push(
      `<line x1="${M.left}" y1="${sy(r.value).toFixed(1)}" x2="${M.left + PW}" y2="${sy(r.value).toFixed(1)}" stroke="#000" stroke-dasharray="6 4"/>`,
      text(M.left + PW + 6, sy(r.value) + 4, `${r.label} ${num(r.value)}`),
    );
  }
  if (o.series.length > 1) body.push(...legend(o.series.map((s) => s.name)));
  return frame(o.title, o.xLabel ?? '', o.yLabel, body);
}
