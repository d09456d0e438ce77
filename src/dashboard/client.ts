// The dashboard's browser script, inlined into the page. Plain ES2017, no framework: it reads the
// SSE stream (snapshot every second, each decision as it happens), derives rates from consecutive
// snapshots, and redraws small tables with textContent only (instance ids and errors come from
// configs and engines: never parsed as HTML). Falls back to polling /dashboard/snapshot when the
// stream is refused.
// Kept free of backticks and dollar-brace so it can live in this template literal.
export const CLIENT_SCRIPT = String.raw`
(function () {
  'use strict';
  var STATUSES = ['ok', 'replayed', 'orphan', 'rejected', 'gap', 'purged', 'decode_error'];
  var GOOD = ['ok', 'replayed'];
  var WINDOW_MS = 60000, POINTS = 60, KEEP = 50, SHOWN = 20;
  var base = location.pathname.replace(/\/+$/, '');
  var history = [];      // recent snapshots (for windowed rates)
  var prev = null;       // previous snapshot
  var eventSeries = [];  // {good, bad} per interval
  var hitSeries = [];    // hit ratio per interval (null: no traffic)
  var decisions = [];    // newest last
  var selected = null;
  var dropped = 0;
  var renderQueued = false;

  function $(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function td(text, cls) { return el('td', cls, text); }
  function num(n) { return Math.round(n).toLocaleString('en-US'); }
  function rate(x) { return x < 10 ? x.toFixed(1) : num(x); }
  function pct(a, b) { return b > 0 ? (100 * a / b).toFixed(1) + '%' : '-'; }
  function pad(n, w) { n = String(n); while (n.length < (w || 2)) n = '0' + n; return n; }
  function clock(t) { var d = new Date(t); return pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + '.' + pad(d.getMilliseconds(), 3); }
  function bytes(b) { return b >= 1048576 ? (b / 1048576).toFixed(1) + ' MiB' : (b / 1024).toFixed(0) + ' KiB'; }
  function sum(o, keys) { var s = 0; keys.forEach(function (k) { s += o[k] || 0; }); return s; }
  function bar(value, max, cls) {
    var b = el('span', 'bar ' + (cls || ''));
    b.style.width = (max > 0 ? Math.max(value > 0 ? 2 : 0, Math.round(60 * value / max)) : 0) + 'px';
    return b;
  }
  function numCell(value, max, cls) {
    var c = td(num(value), 'num');
    c.appendChild(bar(value, max, cls));
    return c;
  }
  function replaceRows(tbody, rows, emptyText, cols) {
    tbody.textContent = '';
    if (rows.length === 0) {
      var tr = el('tr'); var c = td(emptyText, 'empty'); c.colSpan = cols; tr.appendChild(c); tbody.appendChild(tr);
      return;
    }
    rows.forEach(function (r) { tbody.appendChild(r); });
  }
  function setConn(state) { var c = $('conn'); c.dataset.state = state; c.textContent = state; }

  function spark(id, series) {
    var svg = $(id), ns = 'http://www.w3.org/2000/svg';
    svg.textContent = '';
    [2, 67].forEach(function (y) {
      var g = document.createElementNS(ns, 'line');
      g.setAttribute('x1', '0'); g.setAttribute('x2', '300'); g.setAttribute('y1', String(y)); g.setAttribute('y2', String(y));
      svg.appendChild(g);
    });
    series.forEach(function (s) {
      var pts = [], off = POINTS - s.values.length;
      function flush() {
        if (pts.length > 1) { var p = document.createElementNS(ns, 'polyline'); p.setAttribute('points', pts.join(' ')); p.setAttribute('stroke', s.color); svg.appendChild(p); }
        pts = [];
      }
      s.values.forEach(function (v, i) {
        if (v === null) return flush();
        var x = (300 * (off + i)) / (POINTS - 1), y = 67 - (s.max > 0 ? (64 * v) / s.max : 0);
        pts.push(x.toFixed(1) + ',' + y.toFixed(1));
      });
      flush();
    });
  }

  function renderInstances(s) {
    var maxLoad = 1, maxCached = 1;
    s.instances.forEach(function (i) {
      maxLoad = Math.max(maxLoad, i.load.active_prefill_tokens, i.load.active_blocks);
      maxCached = Math.max(maxCached, i.cached_blocks.GPU, i.cached_blocks.CPU, i.cached_blocks.DISK, i.cached_blocks.EXTERNAL);
    });
    var rows = s.instances.map(function (i) {
      var tr = el('tr'); tr.dataset.instance = i.id;
      var name = td(i.id); name.title = i.url; if (i.dp_size > 1) name.appendChild(el('span', 'muted', ' x' + i.dp_size + ' dp'));
      tr.appendChild(name);
      tr.appendChild(td(i.model, 'muted'));
      var st = td(''); st.appendChild(el('span', 'badge ' + i.state, i.state)); st.className = 'state'; tr.appendChild(st);
      tr.appendChild(td(num(i.load.active_requests), 'num requests'));
      var p = numCell(i.load.active_prefill_tokens, maxLoad); p.classList.add('prefill'); tr.appendChild(p);
      var b = numCell(i.load.active_blocks, maxLoad); b.classList.add('blocks'); tr.appendChild(b);
      [['GPU', 'gpu'], ['CPU', 'cpu'], ['DISK', 'disk'], ['EXTERNAL', 'ext']].forEach(function (t) {
        var c = numCell(i.cached_blocks[t[0]], maxCached, t[1]); c.classList.add('cached-' + t[1]); tr.appendChild(c);
      });
      var e = td(i.last_error || '', 'err'); e.title = i.last_error || ''; tr.appendChild(e);
      return tr;
    });
    replaceRows($('instances').tBodies[0], rows, 'no instances', 11);
  }

  function onSnapshot(msg) {
    var s = msg.snapshot;
    if (!s || s.error) { $('models').textContent = 'snapshot failed: ' + (s ? s.error : 'empty'); return; }
    dropped += msg.dropped_decisions || 0;
    var dt = prev ? Math.max(0.001, (s.time - prev.time) / 1000) : 0;
    function delta(cur, old) { return prev ? Math.max(0, cur - old) : 0; }

    $('models').textContent = s.models.map(function (m) { return m.name + '  (' + m.policy + ', block ' + m.block_size + ')'; }).join('  |  ');
    $('updated').textContent = 'updated ' + clock(s.time);

    history.push(s);
    while (history.length > 1 && s.time - history[0].time > WINDOW_MS) history.shift();
    var first = history[0];
    var wPrompt = s.prefix.prompt_tokens - first.prefix.prompt_tokens, wHit = s.prefix.overlap_tokens - first.prefix.overlap_tokens;
    if (history.length === 1) { wPrompt = s.prefix.prompt_tokens; wHit = s.prefix.overlap_tokens; }
    $('hit-rate').textContent = wPrompt > 0 ? pct(wHit, wPrompt) : pct(s.prefix.overlap_tokens, s.prefix.prompt_tokens);
    $('hit-rate-sub').textContent = s.prefix.prompt_tokens > 0 ? 'last 60 s; ' + pct(s.prefix.overlap_tokens, s.prefix.prompt_tokens) + ' since start' : 'no traffic yet';
    var hw = $('hit-window').cells, ht = $('hit-total').cells;
    hw[1].textContent = num(wPrompt); hw[2].textContent = num(wHit); hw[3].textContent = pct(wHit, wPrompt);
    ht[1].textContent = num(s.prefix.prompt_tokens); ht[2].textContent = num(s.prefix.overlap_tokens); ht[3].textContent = pct(s.prefix.overlap_tokens, s.prefix.prompt_tokens);

    var reqRate = dt ? delta(s.requests.total, prev.requests.total) / dt : 0;
    $('requests-total').textContent = num(s.requests.total);
    $('requests-sub').textContent = rate(reqRate) + '/s, ' + num(s.requests.errors) + ' errors';
    $('bookings').textContent = num(s.bookings);
    $('queue-depth').textContent = 'open; queue ' + num(s.queue_depth);
    var l = s.listeners;
    $('listeners-active').textContent = num(l.active || 0);
    $('listeners-sub').textContent = 'active; ' + num(l.pending || 0) + ' pending, ' + num(l.paused || 0) + ' paused, ' + num(l.failed || 0) + ' failed';
    $('tile-listeners').classList.toggle('warn', (l.failed || 0) + (l.paused || 0) > 0);
    $('index-blocks').textContent = num(s.index.blocks);
    $('index-sub').textContent = 'blocks; ' + num(s.index.records) + ' holders, ' + bytes(s.index.bytes) + ', ' + s.index.namespaces + ' ns';

    var rows = STATUSES.concat(Object.keys(s.events).filter(function (k) { return STATUSES.indexOf(k) < 0; })).map(function (k) {
      var r = dt ? delta(s.events[k] || 0, prev.events[k] || 0) / dt : 0;
      var tr = el('tr'); tr.dataset.status = k;
      tr.appendChild(td(k.replace('_', ' ')));
      tr.appendChild(td(rate(r), 'num rate'));
      tr.appendChild(td(num(s.events[k] || 0), 'num total'));
      if (GOOD.indexOf(k) < 0 && (s.events[k] || 0) > 0) tr.className = 'problem';
      return tr;
    });
    replaceRows($('events').tBodies[0], rows, '', 3);
    var good = dt ? (delta(sum(s.events, GOOD), sum(prev.events, GOOD))) / dt : 0;
    var all = Object.keys(s.events), bad = dt ? (delta(sum(s.events, all), sum(prev.events, all))) / dt - good : 0;
    $('events-rate').textContent = rate(good) + '/s';
    $('events-sub').textContent = num(sum(s.events, GOOD)) + ' applied; ' + num(sum(s.events, all) - sum(s.events, GOOD)) + ' problems';

    if (prev) {
      eventSeries.push({ good: good, bad: Math.max(0, bad) });
      var dp = delta(s.prefix.prompt_tokens, prev.prefix.prompt_tokens);
      hitSeries.push(dp > 0 ? delta(s.prefix.overlap_tokens, prev.prefix.overlap_tokens) / dp : null);
      if (eventSeries.length > POINTS) eventSeries.shift();
      if (hitSeries.length > POINTS) hitSeries.shift();
    }
    var emax = 1; eventSeries.forEach(function (p) { emax = Math.max(emax, p.good, p.bad); });
    spark('events-spark', [
      { values: eventSeries.map(function (p) { return p.good; }), color: 'var(--ok)', max: emax },
      { values: eventSeries.map(function (p) { return p.bad; }), color: 'var(--bad)', max: emax },
    ]);
    spark('hit-spark', [{ values: hitSeries, color: 'var(--gpu)', max: 1 }]);

    renderInstances(s);
    prev = s;
    if (dropped > 0) $('decisions-note').textContent = 'newest first; ' + num(dropped) + ' decisions not streamed (rate limit); click a row for details';
  }

  function label(d, c) {
    var multi = d.candidates.some(function (x) { return x.dp_rank > 0; });
    return multi ? c.instance + '#' + c.dp_rank : c.instance;
  }
  function chosenCandidate(d) {
    var best = null;
    d.candidates.forEach(function (c) {
      if (c.instance !== d.chosen) return;
      if (d.chosen_dp_rank !== undefined && d.chosen_dp_rank !== null ? c.dp_rank === d.chosen_dp_rank : (!best || c.cost < best.cost)) best = c;
    });
    return best;
  }
  function cached(c) { return Math.max(c.overlap.disk, c.overlap.shared); }

  function renderDecisions() {
    renderQueued = false;
    var shown = decisions.slice(-SHOWN).reverse();
    var rows = shown.map(function (d) {
      var tr = el('tr'); if (d === selected) tr.className = 'selected';
      tr.dataset.chosen = d.chosen || '';
      tr.appendChild(td(clock(d.time), 'muted'));
      tr.appendChild(td(d.model));
      tr.appendChild(td(d.policy));
      tr.appendChild(td(num(d.prompt_tokens), 'num'));
      tr.appendChild(td(d.chosen || '-', 'chosen'));
      tr.appendChild(td(num(d.overlap_tokens) + ' (' + pct(d.overlap_tokens, d.prompt_tokens) + ')', 'num cached'));
      tr.appendChild(td(d.attempt + 1, 'num'));
      var cands = td('', 'candidates'), win = chosenCandidate(d);
      d.candidates.slice().sort(function (a, b) { return a.cost - b.cost; }).forEach(function (c) {
        var chip = el('span', 'chip' + (c === win ? ' chosen' : '') + (c.busy ? ' busy' : ''), label(d, c) + ' ' + c.cost.toFixed(2));
        if (cached(c) > 0) chip.appendChild(el('span', 'hit', num(cached(c))));
        chip.title = 'gpu ' + c.overlap.gpu + ', cpu ' + c.overlap.cpu + ', disk ' + c.overlap.disk + ', shared ' + c.overlap.shared + ' cached tokens; ' +
          c.load.active_prefill_tokens + ' prefill tokens, ' + c.load.active_blocks + ' blocks in flight' + (c.busy ? '; busy' : '');
        cands.appendChild(chip);
      });
      tr.appendChild(cands);
      tr.addEventListener('click', function () { selected = d; renderDecisions(); });
      return tr;
    });
    replaceRows($('decisions').tBodies[0], rows, 'no routing decisions yet: send a request', 8);
    renderDetail(selected && decisions.indexOf(selected) >= 0 ? selected : decisions[decisions.length - 1]);
  }

  function renderDetail(d) {
    var tbody = $('detail').tBodies[0];
    if (!d) { replaceRows(tbody, [], 'no decision yet', 10); return; }
    $('detail-title').textContent = clock(d.time) + ', ' + d.model + ', ' + num(d.prompt_tokens) + ' prompt tokens, policy ' + d.policy + ', chosen ' + (d.chosen || '-');
    var win = chosenCandidate(d);
    var rows = d.candidates.slice().sort(function (a, b) { return a.cost - b.cost; }).map(function (c) {
      var tr = el('tr'); if (c === win) tr.style.fontWeight = '600';
      tr.appendChild(td(c.instance)); tr.appendChild(td(c.dp_rank, 'num'));
      tr.appendChild(td(num(c.overlap.gpu), 'num')); tr.appendChild(td(num(c.overlap.cpu), 'num'));
      tr.appendChild(td(num(c.overlap.disk), 'num')); tr.appendChild(td(num(c.overlap.shared), 'num'));
      tr.appendChild(td(num(c.load.active_prefill_tokens), 'num')); tr.appendChild(td(num(c.load.active_blocks), 'num'));
      var cost = td(c.cost.toFixed(3), 'num cost');
      if (c.prefill_blocks !== undefined) cost.title = 'prefill ' + c.prefill_blocks.toFixed(2) + ' blocks (credited ' + c.credited_blocks.toFixed(2) + ') + decode ' + c.decode_blocks + ' blocks';
      tr.appendChild(cost); tr.appendChild(td(c.busy ? 'busy' : ''));
      return tr;
    });
    replaceRows(tbody, rows, 'no candidates', 10);
  }

  function queueRender() {
    if (renderQueued) return;
    renderQueued = true;
    requestAnimationFrame(renderDecisions);
  }
  function setDecisions(list) { decisions = list.slice(-KEEP); if (selected && decisions.indexOf(selected) < 0) selected = null; queueRender(); }
  function addDecision(d) { decisions.push(d); if (decisions.length > KEEP) decisions.shift(); queueRender(); }

  var es = null, pollTimer = null;
  function poll() {
    fetch(base + '/snapshot' + location.search).then(function (r) { return r.json(); }).then(function (body) {
      onSnapshot({ snapshot: body.snapshot, dropped_decisions: 0 });
      setDecisions(body.decisions);
    }).catch(function () { setConn('offline'); });
  }
  function connect() {
    if (pollTimer) { clearInterval(pollTimer); pollTimer = null; }
    es = new EventSource(base + '/stream' + location.search); // carries ?token= when auth is on
    es.onopen = function () { setConn('live'); };
    es.onerror = function () {
      if (es.readyState !== 2) { setConn('reconnecting'); return; }
      // Refused (too many streams) or gone: poll, and try the stream again later.
      setConn('polling');
      poll();
      pollTimer = setInterval(poll, 2000);
      setTimeout(connect, 15000);
    };
    es.addEventListener('snapshot', function (e) { onSnapshot(JSON.parse(e.data)); });
    es.addEventListener('decisions', function (e) { setDecisions(JSON.parse(e.data)); });
    es.addEventListener('decision', function (e) { addDecision(JSON.parse(e.data)); });
  }
  renderDecisions();
  connect();
})();
`;
