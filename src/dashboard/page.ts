// The dashboard page: one self-contained HTML document (inline CSS and script, nothing fetched from
// elsewhere), rendered once at mount. Element ids are stable: the browser test and operators'
// scripts may rely on them.
import { readFileSync } from 'node:fs';
import { builtFile } from '../common/built-file.js';

/** The compiled browser script (browser/client.ts), to inline as the page's module script. */
function clientScript(): string {
  const path = builtFile(import.meta.url, 'browser/client.js');
  if (!path) throw new Error('dashboard script browser/client.js is not built: run `npm run build`');
  const js = readFileSync(path, 'utf8').replace(/^\/\/# sourceMappingURL=.*$/m, ''); // the map is not served
  if (/<\/script/i.test(js)) throw new Error(`${path} contains "</script": it cannot be inlined`);
  return js;
}

const CSS = String.raw`
:root { --bg:#f5f6f8; --card:#fff; --ink:#1d2330; --muted:#6b7385; --line:#e3e6ec; --accent:#2563eb;
  --ok:#15803d; --ok-bg:#dcfce7; --warn:#b45309; --warn-bg:#fef3c7; --bad:#b91c1c; --bad-bg:#fee2e2;
  --gpu:#2563eb; --cpu:#7c3aed; --disk:#d97706; --ext:#0d9488; }
* { box-sizing: border-box; }
body { margin:0; font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif; background:var(--bg); color:var(--ink); }
header { display:flex; align-items:center; gap:16px; padding:12px 24px; background:#111827; color:#f9fafb; }
header h1 { font-size:18px; margin:0; font-weight:600; letter-spacing:.2px; }
header .models { color:#cbd5e1; font-size:13px; flex:1; }
#conn { font-size:13px; padding:2px 10px; border-radius:999px; background:#374151; }
#conn[data-state=live] { background:#166534; } #conn[data-state=reconnecting] { background:#92400e; } #conn[data-state=polling] { background:#1e40af; }
#updated { color:#9ca3af; font-size:12px; font-variant-numeric:tabular-nums; }
main { padding:16px 24px 32px; display:grid; gap:16px; }
.tiles { display:grid; grid-template-columns:repeat(6, minmax(150px,1fr)); gap:12px; }
.tile, .card { background:var(--card); border:1px solid var(--line); border-radius:8px; }
.tile { padding:12px 14px; }
.tile.warn { border-color:#fcd34d; background:#fffbeb; }
.tile .label { color:var(--muted); font-size:12px; text-transform:uppercase; letter-spacing:.5px; }
.tile .value { font-size:26px; font-weight:600; font-variant-numeric:tabular-nums; margin-top:2px; }
.tile .sub { color:var(--muted); font-size:12px; font-variant-numeric:tabular-nums; }
.card { padding:12px 16px; overflow-x:auto; }
.card h2 { font-size:14px; margin:0 0 8px; font-weight:600; }
.card h2 small { color:var(--muted); font-weight:400; margin-left:6px; }
.row { display:grid; grid-template-columns:1fr 1fr; gap:16px; }
table { border-collapse:collapse; width:100%; font-variant-numeric:tabular-nums; }
th { text-align:left; color:var(--muted); font-weight:500; font-size:12px; border-bottom:1px solid var(--line); padding:4px 8px; white-space:nowrap; }
td { padding:5px 8px; border-bottom:1px solid #f0f1f4; vertical-align:middle; white-space:nowrap; }
td.num, th.num { text-align:right; }
tr:last-child td { border-bottom:none; }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:12px; font-weight:500; }
.badge.healthy { background:var(--ok-bg); color:var(--ok); } .badge.probation { background:var(--warn-bg); color:var(--warn); } .badge.ejected { background:var(--bad-bg); color:var(--bad); }
.bar { display:inline-block; height:6px; border-radius:3px; vertical-align:middle; margin-left:6px; background:var(--accent); opacity:.75; }
.bar.gpu { background:var(--gpu); } .bar.cpu { background:var(--cpu); } .bar.disk { background:var(--disk); } .bar.ext { background:var(--ext); }
.err { color:var(--bad); font-size:12px; max-width:320px; overflow:hidden; text-overflow:ellipsis; }
.muted { color:var(--muted); }
td.candidates { white-space:normal; min-width:320px; }
.chip { display:inline-block; white-space:nowrap; margin:1px 4px 1px 0; padding:1px 7px; border-radius:4px; background:#f1f3f7; border:1px solid var(--line); font-size:12px; }
.chip.chosen { background:var(--ok-bg); border-color:#86efac; color:var(--ok); font-weight:600; }
.chip.busy { background:var(--warn-bg); border-color:#fcd34d; }
.chip .hit { color:var(--gpu); margin-left:4px; }
#decisions tbody tr { cursor:pointer; } #decisions tbody tr:hover { background:#f8fafc; } #decisions tbody tr.selected { background:#eff6ff; }
svg.spark { width:100%; height:70px; display:block; margin-top:8px; }
#hit-spark { height:150px; }
svg.spark polyline { fill:none; stroke-width:2; vector-effect:non-scaling-stroke; }
svg.spark line { stroke:var(--line); stroke-width:1; vector-effect:non-scaling-stroke; }
.legend { font-size:12px; color:var(--muted); } .legend span { margin-right:12px; }
.legend i { display:inline-block; width:10px; height:3px; vertical-align:middle; margin-right:4px; }
.empty { color:var(--muted); padding:8px; font-style:italic; }
@media (max-width: 1100px) { .tiles { grid-template-columns:repeat(3,1fr); } .row { grid-template-columns:1fr; } }
`;

const BODY = String.raw`
<header>
  <h1>kvrouter</h1>
  <div class="models" id="models">connecting...</div>
  <span id="updated"></span>
  <span id="conn" data-state="connecting">connecting</span>
</header>
<main>
  <section class="tiles">
    <div class="tile" id="tile-hit"><div class="label">Prefix hit rate</div><div class="value" id="hit-rate">-</div><div class="sub" id="hit-rate-sub">no traffic yet</div></div>
    <div class="tile" id="tile-requests"><div class="label">Requests</div><div class="value" id="requests-total">0</div><div class="sub" id="requests-sub">0.0/s &middot; 0 errors</div></div>
    <div class="tile" id="tile-inflight"><div class="label">Bookings</div><div class="value" id="bookings">0</div><div class="sub" id="queue-depth">queue 0</div></div>
    <div class="tile" id="tile-events"><div class="label">KV events</div><div class="value" id="events-rate">0.0/s</div><div class="sub" id="events-sub">0 applied</div></div>
    <div class="tile" id="tile-listeners"><div class="label">Event listeners</div><div class="value" id="listeners-active">0</div><div class="sub" id="listeners-sub">active</div></div>
    <div class="tile" id="tile-index"><div class="label">Index</div><div class="value" id="index-blocks">0</div><div class="sub" id="index-sub">blocks</div></div>
  </section>
  <section class="card">
    <h2>Instances <small>load is what the router has booked; cached blocks are what KV events reported</small></h2>
    <table id="instances">
      <thead><tr><th>Instance</th><th>Model</th><th>State</th><th class="num">Requests</th><th class="num">Prefill tokens</th><th class="num">Decode blocks</th>
      <th class="num">GPU blocks</th><th class="num">CPU</th><th class="num">DISK</th><th class="num">EXT</th><th class="num" title="Share of judged responses whose engine-reported cached tokens agreed with the router's prediction">Hit check</th><th>Last error</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
  <section class="row">
    <div class="card">
      <h2>KV events per second <small>by outcome, from the index's event applier</small></h2>
      <table id="events"><thead><tr><th>Outcome</th><th class="num">per second</th><th class="num">total</th></tr></thead><tbody></tbody></table>
      <svg class="spark" id="events-spark" viewBox="0 0 300 70" preserveAspectRatio="none"></svg>
      <div class="legend"><span><i style="background:var(--ok)"></i>applied (ok + replayed)</span><span><i style="background:var(--bad)"></i>problems (gap, purged, orphan, rejected, decode error)</span></div>
    </div>
    <div class="card">
      <h2>Prefix hit rate <small>cached prompt tokens / prompt tokens routed, per second</small></h2>
      <table id="hit"><thead><tr><th></th><th class="num">prompt tokens</th><th class="num">cached tokens</th><th class="num">hit rate</th></tr></thead><tbody>
        <tr id="hit-window"><td>last 60 s</td><td class="num">0</td><td class="num">0</td><td class="num">-</td></tr>
        <tr id="hit-total"><td>since start</td><td class="num">0</td><td class="num">0</td><td class="num">-</td></tr>
      </tbody></table>
      <svg class="spark" id="hit-spark" viewBox="0 0 300 70" preserveAspectRatio="none"></svg>
      <div class="legend"><span><i style="background:var(--gpu)"></i>hit rate per interval (0-100%)</span></div>
    </div>
  </section>
  <section class="card">
    <h2>Recent routing decisions <small id="decisions-note">newest first; every candidate with its cost (lower wins); click a row for details</small></h2>
    <table id="decisions">
      <thead><tr><th>Time</th><th>Model</th><th>Policy</th><th class="num">Prompt</th><th>Chosen</th><th class="num">Cached</th><th class="num">Attempt</th><th>Candidates: cost (cached tokens)</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
  <section class="card">
    <h2>Decision detail <small id="detail-title">no decision yet</small></h2>
    <table id="detail">
      <thead><tr><th>Instance</th><th class="num">DP</th><th class="num">GPU tokens</th><th class="num">CPU tokens</th><th class="num">DISK tokens</th><th class="num">Shared tokens</th>
      <th class="num">Active prefill tokens</th><th class="num">Active blocks</th><th class="num">Cost</th><th>Busy</th></tr></thead>
      <tbody></tbody>
    </table>
  </section>
</main>
`;

export function dashboardHtml(): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>kvrouter dashboard</title>
<style>${CSS}</style>
</head>
<body>${BODY}
<script type="module">${clientScript()}</script>
</body>
</html>
`;
}
