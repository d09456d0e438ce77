// The dashboard's browser script: compiled by tsconfig.browser.json (DOM types, no Node types) and
// inlined into the page by page.ts. No framework: it reads the SSE stream (snapshot every second,
// each decision as it happens), derives rates from consecutive snapshots, and redraws small tables
// with textContent only (instance ids and errors come from configs and engines: never parsed as
// HTML). Falls back to polling /dashboard/snapshot when the stream is refused.
import type { CandidateView, DashboardSnapshot, DecisionRecord, SnapshotEvent, SnapshotResponse } from '../source.js';

const STATUSES = ['ok', 'replayed', 'orphan', 'rejected', 'gap', 'purged', 'decode_error'];
const GOOD = ['ok', 'replayed'];
const WINDOW_MS = 60000;
const POINTS = 60;
const KEEP = 50;
const SHOWN = 20;
const base = location.pathname.replace(/\/+$/, '');
const recent: DashboardSnapshot[] = []; // snapshots of the last WINDOW_MS (windowed rates)
let prev: DashboardSnapshot | null = null;
const eventSeries: Array<{ good: number; bad: number }> = []; // per interval
const hitSeries: Array<number | null> = []; // hit ratio per interval (null: no traffic)
let decisions: DecisionRecord[] = []; // newest last
let selected: DecisionRecord | null = null;
let dropped = 0;
let renderQueued = false;

function $<T extends Element = HTMLElement>(id: string): T {
  const e = document.querySelector<T>(`#${id}`);
  if (!e) throw new Error(`dashboard: no #${id} in the page`);
  return e;
}
function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  cls?: string,
  text?: string | number | null,
): HTMLElementTagNameMap[K] {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}
const td = (text: string | number | null, cls?: string) => el('td', cls, text);
const num = (n: number) => Math.round(n).toLocaleString('en-US');
const rate = (x: number) => (x < 10 ? x.toFixed(1) : num(x));
const pct = (a: number, b: number) => (b > 0 ? `${((100 * a) / b).toFixed(1)}%` : '-');
const pad = (n: number, width = 2) => String(n).padStart(width, '0');
function clock(t: number): string {
  const d = new Date(t);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}
const bytes = (b: number) => (b >= 1048576 ? `${(b / 1048576).toFixed(1)} MiB` : `${(b / 1024).toFixed(0)} KiB`);
function sum(o: Record<string, number>, keys: string[]): number {
  let s = 0;
  for (const k of keys) s += o[k] || 0;
  return s;
}
function bar(value: number, max: number, cls?: string): HTMLSpanElement {
  const b = el('span', `bar ${cls || ''}`);
  b.style.width = `${max > 0 ? Math.max(value > 0 ? 2 : 0, Math.round((60 * value) / max)) : 0}px`;
  return b;
}
function numCell(value: number, max: number, cls?: string): HTMLTableCellElement {
  const c = td(num(value), 'num');
  c.appendChild(bar(value, max, cls));
  return c;
}
function replaceRows(
  tbody: HTMLTableSectionElement,
  rows: HTMLTableRowElement[],
  emptyText: string,
  cols: number,
): void {
  tbody.textContent = '';
  if (rows.length === 0) {
    const tr = el('tr');
    const c = td(emptyText, 'empty');
    c.colSpan = cols;
    tr.appendChild(c);
    tbody.appendChild(tr);
    return;
  }
  for (const r of rows) tbody.appendChild(r);
}
function setConn(state: string): void {
  const c = $('conn');
  c.dataset.state = state;
  c.textContent = state;
}
const tbodyOf = (tableId: string) => $<HTMLTableElement>(tableId).tBodies[0];

interface Series {
  values: Array<number | null>;
  color: string;
  max: number;
}

function spark(id: string, series: Series[]): void {
  const svg = $<SVGSVGElement>(id);
  const ns = 'http://www.w3.org/2000/svg';
  svg.textContent = '';
  for (const y of [2, 67]) {
    const g = document.createElementNS(ns, 'line');
    g.setAttribute('x1', '0');
    g.setAttribute('x2', '300');
    g.setAttribute('y1', String(y));
    g.setAttribute('y2', String(y));
    svg.appendChild(g);
  }
  for (const s of series) {
    let pts: string[] = [];
    const off = POINTS - s.values.length;
    const flush = () => {
      if (pts.length > 1) {
        const p = document.createElementNS(ns, 'polyline');
        p.setAttribute('points', pts.join(' '));
        p.setAttribute('stroke', s.color);
        svg.appendChild(p);
      }
      pts = [];
    };
    s.values.forEach((v, i) => {
      if (v === null) {
        flush();
        return;
      }
      const x = (300 * (off + i)) / (POINTS - 1);
      const y = 67 - (s.max > 0 ? (64 * v) / s.max : 0);
      pts.push(`${x.toFixed(1)},${y.toFixed(1)}`);
    });
    flush();
  }
}

const TIERS = [
  ['GPU', 'gpu'],
  ['CPU', 'cpu'],
  ['DISK', 'disk'],
  ['EXTERNAL', 'ext'],
] as const;

function renderInstances(s: DashboardSnapshot): void {
  let maxLoad = 1;
  let maxCached = 1;
  for (const i of s.instances) {
    maxLoad = Math.max(maxLoad, i.load.active_prefill_tokens, i.load.active_blocks);
    maxCached = Math.max(
      maxCached,
      i.cached_blocks.GPU,
      i.cached_blocks.CPU,
      i.cached_blocks.DISK,
      i.cached_blocks.EXTERNAL,
    );
  }
  const rows = s.instances.map((i) => {
    const tr = el('tr');
    tr.dataset.instance = i.id;
    const name = td(i.id);
    name.title = i.url;
    if (i.dp_size > 1) name.appendChild(el('span', 'muted', ` x${i.dp_size} dp`));
    if (i.role !== 'both') name.appendChild(el('span', 'muted', ` ${i.role}`));
    tr.appendChild(name);
    tr.appendChild(td(i.model, 'muted'));
    const st = td('');
    st.appendChild(el('span', `badge ${i.state}`, i.state));
    st.className = 'state';
    tr.appendChild(st);
    const reqs = td(num(i.load.active_requests), 'num requests');
    if (i.engine_load) {
      // What the engine itself reports (scraped): load the router did not book shows here.
      const e = i.engine_load;
      reqs.appendChild(el('span', 'muted engine-load', ` / ${num(e.running + e.waiting)}`));
      reqs.title = `booked by the router: ${i.load.active_requests}; the engine reports ${e.running} running, ${e.waiting} waiting${e.kv_usage === null ? '' : `, KV ${Math.round(100 * e.kv_usage)}% used`}`;
    }
    tr.appendChild(reqs);
    const p = numCell(i.load.active_prefill_tokens, maxLoad);
    p.classList.add('prefill');
    tr.appendChild(p);
    const b = numCell(i.load.active_blocks, maxLoad);
    b.classList.add('blocks');
    tr.appendChild(b);
    for (const [tier, cls] of TIERS) {
      const c = numCell(i.cached_blocks[tier], maxCached, cls);
      c.classList.add(`cached-${cls}`);
      tr.appendChild(c);
    }
    const hc = i.hit_check;
    const judged = hc.agree + hc.over + hc.under;
    const check = td(judged ? `${Math.round((100 * hc.agree) / judged)}%` : '-', 'num hit-check');
    check.title = `${hc.agree} agree, ${hc.over} over-predicted, ${hc.under} under-predicted${hc.distrusted ? '; distrusted: routed on load only' : ''}`;
    if (hc.alarm) check.appendChild(el('span', 'badge ejected', hc.distrusted ? 'distrusted' : 'alarm'));
    tr.appendChild(check);
    // A prediction alarm says more than a transport error: it shows first.
    const err = hc.alarm ?? i.last_error ?? '';
    const e = td(err, 'err');
    e.title = err;
    tr.appendChild(e);
    return tr;
  });
  replaceRows(tbodyOf('instances'), rows, 'no instances', 12);
}

function onSnapshot(msg: SnapshotEvent): void {
  const s = msg.snapshot;
  if (!s || 'error' in s) {
    $('models').textContent = `snapshot failed: ${s ? s.error : 'empty'}`;
    return;
  }
  dropped += msg.dropped_decisions || 0;
  const last = prev;
  const dt = last ? Math.max(0.001, (s.time - last.time) / 1000) : 0;
  const delta = (cur: number, old: number) => (last ? Math.max(0, cur - old) : 0);

  $('models').textContent = s.models.map((m) => `${m.name}  (${m.policy}, block ${m.block_size})`).join('  |  ');
  $('updated').textContent = `updated ${clock(s.time)}`;

  recent.push(s);
  while (recent.length > 1 && s.time - recent[0].time > WINDOW_MS) recent.shift();
  const first = recent[0];
  let wPrompt = s.prefix.prompt_tokens - first.prefix.prompt_tokens;
  let wHit = s.prefix.overlap_tokens - first.prefix.overlap_tokens;
  if (recent.length === 1) {
    wPrompt = s.prefix.prompt_tokens;
    wHit = s.prefix.overlap_tokens;
  }
  $('hit-rate').textContent = wPrompt > 0 ? pct(wHit, wPrompt) : pct(s.prefix.overlap_tokens, s.prefix.prompt_tokens);
  $('hit-rate-sub').textContent =
    s.prefix.prompt_tokens > 0
      ? `last 60 s; ${pct(s.prefix.overlap_tokens, s.prefix.prompt_tokens)} since start`
      : 'no traffic yet';
  const hw = $<HTMLTableRowElement>('hit-window').cells;
  const ht = $<HTMLTableRowElement>('hit-total').cells;
  hw[1].textContent = num(wPrompt);
  hw[2].textContent = num(wHit);
  hw[3].textContent = pct(wHit, wPrompt);
  ht[1].textContent = num(s.prefix.prompt_tokens);
  ht[2].textContent = num(s.prefix.overlap_tokens);
  ht[3].textContent = pct(s.prefix.overlap_tokens, s.prefix.prompt_tokens);

  const reqRate = last ? delta(s.requests.total, last.requests.total) / dt : 0;
  $('requests-total').textContent = num(s.requests.total);
  $('requests-sub').textContent = `${rate(reqRate)}/s, ${num(s.requests.errors)} errors`;
  $('bookings').textContent = num(s.bookings);
  $('queue-depth').textContent = `open; queue ${num(s.queue_depth)}`;
  const l = s.listeners;
  $('listeners-active').textContent = num(l.active || 0);
  $('listeners-sub').textContent =
    `active; ${num(l.pending || 0)} pending, ${num(l.paused || 0)} paused, ${num(l.failed || 0)} failed`;
  $('tile-listeners').classList.toggle('warn', (l.failed || 0) + (l.paused || 0) > 0);
  $('index-blocks').textContent = num(s.index.blocks);
  $('index-sub').textContent =
    `blocks; ${num(s.index.records)} holders, ${bytes(s.index.bytes)}, ${s.index.namespaces} ns`;

  const outcomes = STATUSES.concat(Object.keys(s.events).filter((k) => STATUSES.indexOf(k) < 0));
  const rows = outcomes.map((k) => {
    const r = last ? delta(s.events[k] || 0, last.events[k] || 0) / dt : 0;
    const tr = el('tr');
    tr.dataset.status = k;
    tr.appendChild(td(k.replace('_', ' ')));
    tr.appendChild(td(rate(r), 'num rate'));
    tr.appendChild(td(num(s.events[k] || 0), 'num total'));
    if (GOOD.indexOf(k) < 0 && (s.events[k] || 0) > 0) tr.className = 'problem';
    return tr;
  });
  replaceRows(tbodyOf('events'), rows, '', 3);
  const all = Object.keys(s.events);
  const good = last ? delta(sum(s.events, GOOD), sum(last.events, GOOD)) / dt : 0;
  const bad = last ? delta(sum(s.events, all), sum(last.events, all)) / dt - good : 0;
  $('events-rate').textContent = `${rate(good)}/s`;
  $('events-sub').textContent =
    `${num(sum(s.events, GOOD))} applied; ${num(sum(s.events, all) - sum(s.events, GOOD))} problems`;

  if (last) {
    eventSeries.push({ good, bad: Math.max(0, bad) });
    const dp = delta(s.prefix.prompt_tokens, last.prefix.prompt_tokens);
    hitSeries.push(dp > 0 ? delta(s.prefix.overlap_tokens, last.prefix.overlap_tokens) / dp : null);
    if (eventSeries.length > POINTS) eventSeries.shift();
    if (hitSeries.length > POINTS) hitSeries.shift();
  }
  let emax = 1;
  for (const p of eventSeries) emax = Math.max(emax, p.good, p.bad);
  spark('events-spark', [
    { values: eventSeries.map((p) => p.good), color: 'var(--ok)', max: emax },
    { values: eventSeries.map((p) => p.bad), color: 'var(--bad)', max: emax },
  ]);
  spark('hit-spark', [{ values: hitSeries, color: 'var(--gpu)', max: 1 }]);

  renderInstances(s);
  prev = s;
  if (dropped > 0)
    $('decisions-note').textContent =
      `newest first; ${num(dropped)} decisions not streamed (rate limit); click a row for details`;
}

function label(d: DecisionRecord, c: CandidateView): string {
  const multi = d.candidates.some((x) => x.dp_rank > 0);
  return multi ? `${c.instance}#${c.dp_rank}` : c.instance;
}
function chosenCandidate(d: DecisionRecord): CandidateView | null {
  let best: CandidateView | null = null;
  for (const c of d.candidates) {
    if (c.instance !== d.chosen) continue;
    if (
      d.chosen_dp_rank !== undefined && d.chosen_dp_rank !== null
        ? c.dp_rank === d.chosen_dp_rank
        : !best || c.cost < best.cost
    )
      best = c;
  }
  return best;
}
const cached = (c: CandidateView) => Math.max(c.overlap.disk, c.overlap.shared);
const byCost = (a: CandidateView, b: CandidateView) => a.cost - b.cost;

function renderDecisions(): void {
  renderQueued = false;
  const shown = decisions.slice(-SHOWN).reverse();
  const rows = shown.map((d) => {
    const tr = el('tr');
    if (d === selected) tr.className = 'selected';
    tr.dataset.chosen = d.chosen || '';
    tr.appendChild(td(clock(d.time), 'muted'));
    tr.appendChild(td(d.model));
    tr.appendChild(td(d.policy));
    tr.appendChild(td(num(d.prompt_tokens), 'num'));
    tr.appendChild(td(d.chosen || '-', 'chosen'));
    tr.appendChild(td(`${num(d.overlap_tokens)} (${pct(d.overlap_tokens, d.prompt_tokens)})`, 'num cached'));
    tr.appendChild(td(d.attempt + 1, 'num'));
    const cands = td('', 'candidates');
    const win = chosenCandidate(d);
    for (const c of d.candidates.slice().sort(byCost)) {
      const chip = el(
        'span',
        `chip${c === win ? ' chosen' : ''}${c.busy ? ' busy' : ''}`,
        `${label(d, c)} ${c.cost.toFixed(2)}`,
      );
      if (cached(c) > 0) chip.appendChild(el('span', 'hit', num(cached(c))));
      chip.title =
        `gpu ${c.overlap.gpu}, cpu ${c.overlap.cpu}, disk ${c.overlap.disk}, shared ${c.overlap.shared} cached tokens; ` +
        `${c.load.active_prefill_tokens} prefill tokens, ${c.load.active_blocks} blocks in flight${c.busy ? '; busy' : ''}`;
      cands.appendChild(chip);
    }
    tr.appendChild(cands);
    tr.addEventListener('click', () => {
      selected = d;
      renderDecisions();
    });
    return tr;
  });
  replaceRows(tbodyOf('decisions'), rows, 'no routing decisions yet: send a request', 8);
  renderDetail(selected && decisions.indexOf(selected) >= 0 ? selected : decisions[decisions.length - 1]);
}

function renderDetail(d: DecisionRecord | undefined): void {
  const tbody = tbodyOf('detail');
  if (!d) {
    replaceRows(tbody, [], 'no decision yet', 10);
    return;
  }
  $('detail-title').textContent =
    `${clock(d.time)}, ${d.model}, ${num(d.prompt_tokens)} prompt tokens, policy ${d.policy}, chosen ${d.chosen || '-'}`;
  const win = chosenCandidate(d);
  const rows = d.candidates
    .slice()
    .sort(byCost)
    .map((c) => {
      const tr = el('tr');
      if (c === win) tr.style.fontWeight = '600';
      tr.appendChild(td(c.instance));
      tr.appendChild(td(c.dp_rank, 'num'));
      tr.appendChild(td(num(c.overlap.gpu), 'num'));
      tr.appendChild(td(num(c.overlap.cpu), 'num'));
      tr.appendChild(td(num(c.overlap.disk), 'num'));
      tr.appendChild(td(num(c.overlap.shared), 'num'));
      tr.appendChild(td(num(c.load.active_prefill_tokens), 'num'));
      tr.appendChild(td(num(c.load.active_blocks), 'num'));
      const cost = td(c.cost.toFixed(3), 'num cost');
      if (c.prefill_blocks !== undefined)
        cost.title = `prefill ${c.prefill_blocks.toFixed(2)} blocks (credited ${c.credited_blocks.toFixed(2)}) + decode ${c.decode_blocks} blocks`;
      tr.appendChild(cost);
      tr.appendChild(td(c.busy ? 'busy' : ''));
      return tr;
    });
  replaceRows(tbody, rows, 'no candidates', 10);
}

function queueRender(): void {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(renderDecisions);
}
function setDecisions(list: DecisionRecord[]): void {
  decisions = list.slice(-KEEP);
  if (selected && decisions.indexOf(selected) < 0) selected = null;
  queueRender();
}
function addDecision(d: DecisionRecord): void {
  decisions.push(d);
  if (decisions.length > KEEP) decisions.shift();
  queueRender();
}

let pollTimer: number | null = null;
function poll(): void {
  fetch(`${base}/snapshot${location.search}`)
    .then((r) => r.json() as Promise<SnapshotResponse>)
    .then((body) => {
      onSnapshot({ snapshot: body.snapshot, dropped_decisions: 0 });
      setDecisions(body.decisions);
    })
    .catch(() => setConn('offline'));
}
const data = <T>(e: MessageEvent<string>) => JSON.parse(e.data) as T;
function connect(): void {
  if (pollTimer) {
    clearInterval(pollTimer);
    pollTimer = null;
  }
  const es = new EventSource(`${base}/stream${location.search}`); // carries ?token= when auth is on
  es.onopen = () => setConn('live');
  es.onerror = () => {
    if (es.readyState !== EventSource.CLOSED) {
      setConn('reconnecting');
      return;
    }
    // Refused (too many streams) or gone: poll, and try the stream again later.
    setConn('polling');
    poll();
    pollTimer = setInterval(poll, 2000);
    setTimeout(connect, 15000);
  };
  es.addEventListener('snapshot', (e) => onSnapshot(data<SnapshotEvent>(e)));
  es.addEventListener('decisions', (e) => setDecisions(data<DecisionRecord[]>(e)));
  es.addEventListener('decision', (e) => addDecision(data<DecisionRecord>(e)));
}
renderDecisions();
connect();
