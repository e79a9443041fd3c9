// The couponlab console: the lab's own JSON routes, read on a short poll and
// drawn as tables and SVG charts. Every figure shown is one the API answers;
// the charts over time are those answers sampled since the page opened.
'use strict';

const TICK_MS = 1000; // coupons, strategies and reports
const COUPON_TICK_MS = 500; // the coupon whose charts are open
const SHOWN = 20; // coupons whose results are read every tick
const SAMPLES = 600; // five minutes of the open coupon at COUPON_TICK_MS
const LISTED = 200; // traces listed for the open coupon, the first by start

/** The open coupon; its traces as last listed (by id), and the one drawn. */
const selected = { id: null, samples: [], busy: false, traces: new Map(), trace: null };

/** A whole number past 2^53 (an id from a large AUTO_INCREMENT) kept as
 *  its digits: as a JavaScript number it would name another coupon. */
function exact(key, value, context) {
  const digits = context && context.source;
  const unsafe = typeof value === 'number' && !Number.isSafeInteger(value);
  return unsafe && /^\d+$/.test(digits || '') ? digits : value;
}

/** One call to the API: `{ok, response}` or `{ok: false, status, message}`;
 *  a POST when given a body. */
async function api(path, payload) {
  const post = { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(payload) };
  const reply = await fetch(path, payload === undefined ? { cache: 'no-store' } : post);
  const body = JSON.parse(await reply.text(), exact);
  if (body.success) return { ok: true, response: body.response };
  return { ok: false, status: reply.status, message: body.error ? body.error.message : `HTTP ${reply.status}` };
}

function esc(value) {
  return String(value).replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** Whole numbers as they are (the API's own digits), others to 0.1. */
function num(value) {
  if (value === undefined || value === null) return '—';
  if (typeof value === 'string') return value;
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

function cell(field, value, numeric = true) {
  return `<td data-field="${field}"${numeric ? ' class="num"' : ''}>${esc(num(value))}</td>`;
}

function time(iso) {
  const at = new Date(iso);
  return Number.isNaN(at.getTime()) ? iso : at.toLocaleTimeString();
}

function basename(path) {
  return String(path).split(/[\\/]/).pop();
}

function outcomeName(name) {
  return `<span class="swatch" data-outcome="${esc(name)}" aria-hidden="true"></span>${esc(name)}`;
}

/** The invariants as words, each broken one marked in bold with ✗. */
function invariants(result) {
  const broken = Object.entries(result.invariants).filter(([, held]) => !held).map(([name]) => name);
  if (broken.length === 0) return '<span class="good">held</span>';
  return broken.map((name) => `<span class="bad">${esc(name)}</span>`).join(' ');
}

/** The server's state, announced only when it changes; the time of the
 *  last reading beside it, not announced. */
function setStatus(up, text) {
  const status = document.getElementById('status');
  if (status.textContent !== text) status.textContent = text;
  status.dataset.state = up ? 'up' : 'down';
  if (up) document.getElementById('updated').textContent = `updated ${new Date().toLocaleTimeString()}`;
}

async function refreshCoupons() {
  const listed = await api('/lab/coupons');
  const note = document.getElementById('coupons-note');
  const body = document.querySelector('#coupons tbody');
  if (!listed.ok) {
    body.innerHTML = `<tr><td colspan="10" class="error">${esc(listed.message)}</td></tr>`;
    return;
  }
  const coupons = listed.response.coupons.slice(0, SHOWN);
  const results = await Promise.all(coupons.map((c) => api(`/lab/coupons/${c.id}/result`).catch((e) => ({ ok: false, message: String(e) }))));
  const count = listed.response.count;
  note.textContent = `${count} coupon${count === 1 ? '' : 's'}; the newest ${coupons.length} shown, each figure its result's, read every second. Pick a coupon for its charts.`;
  body.innerHTML = coupons.map((coupon, i) => {
    const current = String(coupon.id) === selected.id ? ' aria-current="true"' : '';
    const head = `<tr data-coupon="${coupon.id}"${current}><th scope="row"><a href="#/coupons/${coupon.id}">${coupon.id}</a></th><td>${esc(coupon.name)}</td>${cell('totalCount', coupon.totalCount)}`;
    const reply = results[i];
    if (!reply.ok) return `${head}<td colspan="7">${esc(reply.message)}</td></tr>`;
    const r = reply.response;
    return head
      + cell('issueRows', r.issueRows)
      + cell('setSize', r.redis && r.redis.readable ? r.redis.setSize : null)
      + cell('pending', r.pending)
      + cell('overIssued', r.overIssued)
      + cell('duplicateMembers', r.duplicateMembers)
      + cell('outOfTurn', r.requests.fairness.servedAfterEarlierSoldOut)
      + `<td data-field="invariants">${invariants(r)}</td></tr>`;
  }).join('') || '<tr><td colspan="10">No coupon yet: <code>POST /lab/coupons</code>, or run <code>cargo xtask loadtest</code>.</td></tr>';
}

// A served component's canary as a cell of one line: whether it passed,
// and when; how long it took and its calls' p50 on hover (the title).
function canary(report) {
  if (!report) return '<td data-field="canary">off</td>';
  const when = report.remembered ? `passed before (${time(report.ranAt)})` : `passed ${time(report.ranAt)}`;
  const detail = `${when}, ${report.tookMs} ms, p50 ${report.p50Ms.toFixed(2)} ms`;
  return `<td data-field="canary" title="${esc(detail)}">${esc(report.remembered ? 'passed before' : when)}</td>`;
}

// The database components' SQL runs on: name, version, settings.
function engineName(engine) {
  const settings = Object.entries(engine.settings).map(([name, value]) => `${name}=${value}`);
  return `${engine.name} ${engine.version}${settings.length ? ` (${settings.join(', ')})` : ''}`;
}

async function refreshStrategies() {
  const reply = await api('/lab/strategies');
  if (!reply.ok) {
    document.getElementById('strategies-note').textContent = reply.message;
    return;
  }
  const listing = reply.response;
  const trials = listing.onTrial.map((t) => `${esc(t.method)} (${esc(basename(t.file))})`).join(', ');
  const proving = listing.awaiting.length
    ? ` Proving before they serve (their canary): ${trials || 'next'}; ${listing.awaiting.length} waiting.`
    : '';
  document.getElementById('strategies-note').innerHTML =
    `${listing.strategies.length} loaded from <code>${esc(listing.directory)}</code>; drop, replace or remove a <code>.wasm</code> there and this list follows. `
    + `Their SQL runs on <span id="engine">${esc(engineName(listing.engine))}</span>.${proving}`;
  document.querySelector('#strategies tbody').innerHTML = listing.strategies.map((s) => {
    const refused = s.lastError ? ` <span class="bad" title="${esc(s.lastError)}">replacement refused</span>` : '';
    const quarantined = s.quarantined
      ? ` <span class="bad quarantined" title="since ${esc(time(s.quarantined.since))}: ${esc(s.quarantined.reason)}">quarantined</span>`
      : '';
    return `<tr data-method="${esc(s.method)}"><th scope="row" title="${esc(s.summary)}">${esc(s.method)}${refused}${quarantined}</th>`
      + `<td title="${esc(s.claims.join(' '))}">${esc(s.claims.join(' ')) || 'none'}</td>${canary(s.canary)}`
      + `<td title="${esc(s.world)}">${esc(s.world)}</td><td class="mono" title="${esc(s.file)}">${esc(basename(s.file))}</td>`
      + `<td class="mono" title="${esc(s.sha256)}">${esc(s.sha256.slice(0, 12))}</td><td>${esc(time(s.loadedAt))}</td></tr>`;
  }).join('') || '<tr><td colspan="7">None: run <code>cargo xtask strategies</code>.</td></tr>';
  document.querySelector('#rejected tbody').innerHTML = listing.rejected.map((r) =>
    `<tr data-file="${esc(basename(r.file))}"><th scope="row" class="mono" title="${esc(r.file)}">${esc(basename(r.file))}</th>`
    + `<td class="reason">${esc(r.reason)}</td><td>${esc(time(r.at))}</td></tr>`).join('')
    || '<tr><td colspan="3">None.</td></tr>';
}

async function refreshReports() {
  const reply = await api('/lab/reports');
  const note = document.getElementById('reports-note');
  if (!reply.ok) {
    note.textContent = reply.message;
    return;
  }
  const { directory, reports } = reply.response;
  note.innerHTML = `${reports.length} run${reports.length === 1 ? '' : 's'} in <code>${esc(directory)}</code>, newest first.`;
  document.querySelector('#reports tbody').innerHTML = reports.map((r) => {
    const base = `/lab/reports/${encodeURIComponent(r.run)}/`;
    const run = r.html ? `<a href="${base}${encodeURIComponent(r.html)}">${esc(r.run)}</a>` : esc(r.run);
    const files = r.files.map((f) => `<a href="${base}${encodeURIComponent(f)}">${esc(f)}</a>`).join(' ');
    return `<tr data-run="${esc(r.run)}"><th scope="row">${run}</th><td>${esc(r.title || '—')}</td><td class="files">${files}</td></tr>`;
  }).join('') || '<tr><td colspan="3">No report yet: <code>cargo xtask loadtest spike --methods REDIS_LUA</code> writes one.</td></tr>';
}

/** The coupon named by the page's address (`#/coupons/{id}`), or null. */
function couponInHash() {
  const match = /^#\/coupons\/(.+)$/.exec(window.location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

function openCoupon() {
  selected.id = couponInHash();
  selected.samples = [];
  selected.traces = new Map();
  selected.trace = null;
  // Nothing of the coupon open before stays on show under this one's name.
  delete document.getElementById('anomalies').dataset.count;
  for (const part of ['#anomalies', '#traces tbody', '#waterfall']) redraw(document.querySelector(part), '');
  document.getElementById('coupon').hidden = selected.id === null;
  refreshCoupon();
}

async function refreshCoupon() {
  if (selected.id === null || selected.busy) return;
  selected.busy = true;
  const id = selected.id;
  try {
    const reply = await api(`/lab/coupons/${encodeURIComponent(id)}/result`);
    if (id !== selected.id) return;
    const error = document.getElementById('coupon-error');
    document.getElementById('coupon-title').textContent = `Coupon ${id}`;
    error.hidden = reply.ok;
    document.getElementById('coupon-body').hidden = !reply.ok;
    if (!reply.ok) {
      error.textContent = reply.message;
      error.dataset.status = reply.status;
      return;
    }
    const r = reply.response;
    document.getElementById('coupon-title').textContent = `Coupon ${r.couponId}: ${r.name}`;
    selected.samples.push({ t: performance.now() / 1000, result: r });
    if (selected.samples.length > SAMPLES) selected.samples.shift();
    showCoupon(r);
    await refreshGate(id, r);
    await refreshTraces(id, r);
  } catch (e) {
    setStatus(false, `the server does not answer: ${e}`);
  } finally {
    selected.busy = false;
  }
}

function showCoupon(r) {
  const figures = [
    ['totalCount', 'total', r.totalCount], ['issuedCount', 'issued_count column', r.issuedCount],
    ['issueRows', 'issue rows', r.issueRows], ['distinctMembers', 'distinct members', r.distinctMembers],
    ['overIssued', 'over-issued', r.overIssued], ['duplicateMembers', 'duplicate members', r.duplicateMembers],
    ['countMismatch', 'column − rows', r.countMismatch],
    ['outOfTurn', 'served out of turn', r.requests.fairness.servedAfterEarlierSoldOut],
    ['requests', 'requests', r.requests.total],
  ];
  if (r.redis && r.redis.readable) {
    figures.push(['setSize', 'Redis reservations', r.redis.setSize],
      ['redisOnlyMembers', 'reserved in Redis only', r.redis.redisOnlyMembers.count],
      ['strandedMembers', 'stranded reservations', r.redis.strandedMembers.count]);
  }
  if (r.accepted !== undefined) figures.push(['accepted', 'accepted (202)', r.accepted], ['pending', 'pending', r.pending]);
  if (r.stream) figures.push(['streamPending', 'stream pending', r.stream.pending], ['deadLetters', 'dead letters', r.stream.deadLetters]);
  if (r.brokerEvents) {
    figures.push(['brokerRedelivered', 'broker redeliveries', r.brokerEvents.redelivered || 0],
      ['brokerDeadLettered', 'broker dead letters', r.brokerEvents.deadLettered || 0]);
  }
  if (r.servedBy) {
    figures.push(['servedByGate', 'served by the drop gate', r.servedBy.gate || 0],
      ['servedByFallback', 'served by the database path', r.servedBy.fallback || 0]);
  }
  document.querySelector('#coupon-figures tbody').innerHTML =
    figures.map(([field, label, value]) => `<tr><th scope="row">${esc(label)}</th>${cell(field, value)}</tr>`).join('')
    + `<tr><th scope="row">invariants</th><td data-field="invariants">${invariants(r)}</td></tr>`;
  const counts = (table, map) => {
    document.querySelector(`${table} tbody`).innerHTML = Object.entries(map || {}).map(([name, count]) =>
      `<tr data-outcome="${esc(name)}"><th scope="row">${outcomeName(name)}</th><td class="num count">${count}</td></tr>`).join('')
      || '<tr><td colspan="2">none</td></tr>';
  };
  counts('#outcome-counts', r.requests.byOutcome);
  counts('#async-results', r.asyncResults);
  document.getElementById('async-results').hidden = r.asyncResults === undefined;
  drawIssued();
  drawRates();
  const methods = Object.entries(r.requests.byMethod).map(([method, m]) => ({ label: method, figures: m.latencyMs }));
  document.getElementById('chart-latency').innerHTML = percentiles(methods);
  document.getElementById('chart-lag').innerHTML = r.confirmationLagMs
    ? percentiles([{ label: 'issued 202s', figures: r.confirmationLagMs }])
    : '<p class="note">No 202 confirmed for this coupon.</p>';
}

/** The drop gate's switch, for a coupon REDIS_LUA_GATE served: its state
 *  as `GET /lab/drop/coupons/{id}/gate` answers it, and a button that
 *  turns it the other way. */
async function refreshGate(id, r) {
  const line = document.getElementById('drop-gate');
  line.hidden = !r.requests.byMethod.REDIS_LUA_GATE;
  if (line.hidden) return;
  const reply = await api(`/lab/drop/coupons/${encodeURIComponent(id)}/gate`);
  if (id !== selected.id) return;
  const state = document.getElementById('drop-gate-state');
  const button = document.getElementById('drop-gate-switch');
  button.hidden = !reply.ok;
  if (!reply.ok) {
    state.textContent = `drop gate: ${reply.message}`;
    return;
  }
  const on = reply.response.enabled;
  state.textContent = on ? 'drop gate: on (Redis decides)' : 'drop gate: off (every request takes the database path)';
  button.textContent = on ? 'turn the gate off' : 'turn the gate on';
  button.dataset.enable = String(!on);
}

async function switchGate(button) {
  const id = selected.id;
  button.disabled = true;
  try {
    const reply = await api(`/lab/drop/coupons/${encodeURIComponent(id)}/gate`, { enabled: button.dataset.enable === 'true' });
    if (!reply.ok) document.getElementById('drop-gate-state').textContent = `drop gate: ${reply.message}`;
  } finally {
    button.disabled = false;
  }
  refreshCoupon();
}

function drawIssued() {
  const samples = selected.samples;
  const points = (pick) => samples.map((s) => [s.t, pick(s.result)]);
  const series = [{ name: 'issue rows', outcome: 'ISSUED', points: points((r) => r.issueRows) }];
  if (samples[samples.length - 1].result.accepted !== undefined) {
    series.push({ name: 'accepted (202)', outcome: 'ACCEPTED', points: points((r) => r.accepted) });
  }
  const total = samples[samples.length - 1].result.totalCount;
  timeSeries('chart-issued', series, { line: total, lineLabel: `total ${total}` });
}

function drawRates() {
  const samples = selected.samples;
  const names = new Set();
  samples.forEach((s) => Object.keys(s.result.requests.byOutcome).forEach((n) => names.add(n)));
  const series = [...names].sort().map((name) => ({
    name,
    outcome: name,
    points: samples.slice(1).map((s, i) => {
      const before = samples[i];
      const count = (x) => x.result.requests.byOutcome[name] || 0;
      return [s.t, (count(s) - count(before)) / Math.max(s.t - before.t, 0.001)];
    }),
  }));
  if (samples.length < 2) {
    delete plots['chart-rates'];
    document.getElementById('chart-rates').innerHTML = '<p class="note">Needs two readings.</p>';
    return;
  }
  timeSeries('chart-rates', series, { unit: '/s' });
}

// The time series are uPlot charts (vendor/uplot/, served beside this
// script), made once and given new data each second; made again only when
// their lines change (a new outcome appears). Kept on window.consolePlots
// for whoever inspects them, the browser tests among them.
const plots = {};
window.consolePlots = plots;

// An outcome's colour, from outcomes.css.
function outcomeColour(outcome) {
  const probe = document.createElement('span');
  probe.dataset.outcome = outcome;
  document.body.appendChild(probe);
  const colour = getComputedStyle(probe).getPropertyValue('--outcome').trim();
  probe.remove();
  return colour || '#555';
}

/** Lines over time into the element `id`; x is seconds of the samples. */
function timeSeries(id, series, { line = null, lineLabel = '', unit = '' } = {}) {
  const el = document.getElementById(id);
  const shown = series.filter((s) => s.points.length > 0);
  if (shown.length === 0) {
    delete plots[id];
    el.innerHTML = '<p class="note">No request yet.</p>';
    return;
  }
  const xs = [...new Set(shown.flatMap((s) => s.points.map((p) => p[0])))].sort((a, b) => a - b);
  const columns = [xs.map((x) => x - xs[0])];
  for (const s of shown) {
    const at = new Map(s.points);
    columns.push(xs.map((x) => (at.has(x) ? at.get(x) : null)));
  }
  if (line !== null) columns.push(xs.map(() => line));
  const key = shown.map((s) => s.name).concat(line !== null ? [lineLabel] : []).join('|');
  if (plots[id] && plots[id].key === key) {
    plots[id].plot.setData(columns);
    return;
  }
  const value = (u, v) => (v == null ? '—' : `${num(v)}${unit}`);
  const lines = shown.map((s) => ({ label: s.name, stroke: outcomeColour(s.outcome), width: 2, spanGaps: true, value }));
  if (line !== null) lines.push({ label: lineLabel, stroke: '#1a1a1a', dash: [6, 3], value });
  el.innerHTML = '';
  const plot = new uPlot({
    width: Math.max(300, Math.min(el.clientWidth || 620, 640)),
    height: 220,
    series: [{ label: 'since the first reading', value: (u, v) => (v == null ? '—' : `${num(v)} s`) }, ...lines],
    scales: { x: { time: false } },
    axes: [{ label: 'seconds' }, { size: 56 }],
  }, columns, el);
  plots[id] = { plot, key };
}

/** Horizontal bars of p50, p95, p99 and max for each group, value written. */
function percentiles(groups) {
  const keys = ['p50', 'p95', 'p99', 'max'];
  const [w, left, barW, row] = [600, 210, 320, 16];
  if (groups.length === 0) return '<p class="note">No request yet.</p>';
  const max = niceMax(Math.max(...groups.flatMap((g) => keys.map((k) => g.figures[k] || 0))));
  let svg = '';
  let at = 4;
  for (const group of groups) {
    svg += `<text x="0" y="${at + 11}" font-weight="bold">${esc(group.label)}</text>`;
    at += row;
    for (const key of keys) {
      const value = group.figures[key] || 0;
      const bar = (value / max) * barW;
      svg += `<text x="${left - 6}" y="${at + 11}" text-anchor="end">${key}</text><rect class="bar" x="${left}" y="${at + 2}" width="${bar.toFixed(1)}" height="${row - 5}"/><text x="${left + bar + 4}" y="${at + 11}">${num(value)} ms</text>`;
      at += row;
    }
  }
  return `<svg viewBox="0 0 ${w} ${at + 4}" role="img" aria-label="latency percentiles">${svg}</svg>`;
}

function niceMax(value) {
  if (!(value > 0)) return 1;
  const step = 10 ** Math.floor(Math.log10(value));
  return [1, 2, 2.5, 5, 10].map((m) => m * step).find((m) => m >= value);
}

// Anomalies and traces: why the figures are what they are. The result names
// each anomaly with its witnesses; `GET /lab/coupons/{id}/traces` lists the
// requests' capability calls, one of which is drawn as a waterfall.

/** The anomaly kinds the traces route filters by. */
const KINDS = ['lost-update', 'check-then-act', 'out-of-turn', 'stranded-stock', 'acked-lost', 'refused-but-issued'];

const drawn = new WeakMap();

/** Sets `element`'s markup only when it changed: a button being pressed or
 *  focused is not replaced by its double every tick. */
function redraw(element, html) {
  if (drawn.get(element) === html) return;
  element.innerHTML = html;
  drawn.set(element, html);
}

/** A span of microseconds, readable: µs, ms or s. */
function micros(value) {
  const size = Math.abs(value);
  if (size < 1000) return `${value} µs`;
  if (size < 1e6) return `${(value / 1000).toFixed(size < 1e4 ? 2 : 1)} ms`;
  return `${(value / 1e6).toFixed(2)} s`;
}

/** The integers a call or a witness read: an integer reply as `→ n`. */
function readValues(read) {
  return Object.entries(read || {}).map(([name, value]) => (name === 'reply' ? `→ ${value}` : `${name}=${value}`)).join(' ');
}

/** Microseconds after `base`, signed, or — when there is no time. */
function after(at, base) {
  if (at === undefined || at === null) return '—';
  const delta = at - base;
  return delta > 0 ? `+${delta}` : String(delta);
}

function showAnomalies(r) {
  const anomalies = r.anomalies || [];
  const container = document.getElementById('anomalies');
  container.dataset.count = anomalies.length;
  document.getElementById('anomalies-note').textContent = anomalies.length === 0
    ? 'None: the traces this server kept explain no figure of this coupon as an anomaly.'
    : `${anomalies.length} found in the traces this server kept. Pick a witness's trace to draw its calls.`;
  redraw(container, anomalies.map((anomaly, index) => {
    const witnesses = anomaly.witnesses;
    const first = witnesses[0];
    const base = first ? (first.readAtUs ?? first.arrivedUs) : 0;
    const from = first ? `µs after member ${first.memberId} ${first.readAtUs !== undefined ? 'read' : 'arrived'}` : '';
    const rows = witnesses.map((w) => `<tr data-trace="${w.traceId}" data-member="${w.memberId}" data-role="${esc(w.role)}">`
      + `<td data-field="role">${esc(w.role)}</td>${cell('memberId', w.memberId)}`
      + `<td data-field="outcome">${outcomeName(w.outcome)}</td><td data-field="read" class="mono">${esc(readValues(w.read) || '—')}</td>`
      + cell('arrived', after(w.arrivedUs, base)) + cell('readAt', after(w.readAtUs, base)) + cell('wroteAt', after(w.wroteAtUs, base))
      + `<td data-field="isolation">${esc(w.isolation || '—')}</td>`
      + `<td><button type="button" data-trace="${w.traceId}" data-kind="${esc(anomaly.kind)}">trace ${w.traceId}</button></td></tr>`).join('');
    const taxonomy = anomaly.taxonomy ? ` <span class="taxonomy">(${esc(anomaly.taxonomy)})</span>` : '';
    return `<article class="anomaly" data-kind="${esc(anomaly.kind)}" data-index="${index}">`
      + `<h4>${esc(anomaly.kind)}${taxonomy}</h4><p class="explanation">${esc(anomaly.explanation)}</p>`
      + (witnesses.length === 0 ? '<p class="note">No trace of this server witnesses it.</p>' : '<div class="scroll"><table class="witnesses">'
        + `<caption class="note">witnesses; times in ${esc(from)}</caption>`
        + '<thead><tr><th scope="col">role</th><th scope="col" class="num">member</th><th scope="col">outcome</th><th scope="col">read</th>'
        + '<th scope="col" class="num">arrived</th><th scope="col" class="num">read at</th><th scope="col" class="num">wrote at</th>'
        + `<th scope="col">isolation</th><th scope="col">trace</th></tr></thead><tbody>${rows}</tbody></table></div>`)
      + '</article>';
  }).join(''));
}

/** A select's choices, `''` (any) first; the one picked stays picked. */
function choices(select, names) {
  const wanted = ['', ...names];
  if ([...select.options].map((o) => o.value).join() === wanted.join()) return;
  const picked = select.value;
  select.innerHTML = wanted.map((name) => `<option value="${esc(name)}">${esc(name || 'any')}</option>`).join('');
  select.value = wanted.includes(picked) ? picked : '';
}

async function refreshTraces(id, r) {
  showAnomalies(r);
  const outcome = document.getElementById('trace-outcome');
  const anomaly = document.getElementById('trace-anomaly');
  choices(outcome, Object.keys({ ...r.requests.byOutcome, ...(r.asyncResults || {}) }).sort());
  choices(anomaly, KINDS);
  const query = new URLSearchParams({ limit: String(LISTED) });
  if (outcome.value) query.set('outcome', outcome.value);
  if (anomaly.value) query.set('anomaly', anomaly.value);
  const reply = await api(`/lab/coupons/${encodeURIComponent(id)}/traces?${query}`);
  if (id !== selected.id) return;
  const note = document.getElementById('traces-note');
  if (!reply.ok) {
    note.textContent = reply.message;
    return;
  }
  const { held, traces } = reply.response;
  // The trace drawn stays drawn when the list no longer holds it.
  const open = selected.trace && selected.traces.get(selected.trace.id);
  selected.traces = new Map(traces.map((t) => [String(t.id), t]));
  if (open && !selected.traces.has(selected.trace.id)) selected.traces.set(selected.trace.id, open);
  note.textContent = `${held} trace${held === 1 ? '' : 's'} held on this server; ${traces.length === LISTED ? `the first ${LISTED}` : traces.length} of them listed by start`
    + `${outcome.value || anomaly.value ? ' among those that pass the filters' : ''}. Pick one to draw its calls.`;
  redraw(document.querySelector('#traces tbody'), traces.map((t) => {
    const current = selected.trace && String(t.id) === selected.trace.id ? ' aria-current="true"' : '';
    return `<tr data-trace="${t.id}" data-kept="${esc(t.kept)}"${current}>`
      + `<th scope="row"><button type="button" data-trace="${t.id}">trace ${t.id}</button></th>${cell('memberId', t.memberId)}`
      + `<td>${esc(t.method)}</td><td data-field="outcome">${outcomeName(t.outcome)}</td><td data-field="kept">${esc(t.kept)}</td>`
      + `${cell('calls', t.calls.length + t.callsDropped)}<td class="num">${esc(micros(t.durationUs))}</td>`
      + `<td data-field="anomalies">${esc(t.anomalies.join(' ') || '—')}</td></tr>`;
  }).join('') || '<tr><td colspan="8">None held: a request of this coupon on this server is traced when it ends.</td></tr>');
  await showTrace();
}

/** Draws trace `id`; `kind`, an anomaly it witnesses, finds it when the
 *  list does not hold it. */
async function pickTrace(id, kind) {
  selected.trace = { id: String(id), kind };
  document.querySelectorAll('#traces tbody tr[data-trace]').forEach((tr) => {
    if (tr.dataset.trace === selected.trace.id) tr.setAttribute('aria-current', 'true');
    else tr.removeAttribute('aria-current');
  });
  await showTrace();
  document.getElementById('waterfall').scrollIntoView({ block: 'nearest' });
}

async function showTrace() {
  const container = document.getElementById('waterfall');
  const picked = selected.trace;
  if (picked === null) {
    redraw(container, '<p class="note">No trace drawn: pick one in the list above or a witness of an anomaly.</p>');
    return;
  }
  const coupon = selected.id;
  if (!selected.traces.has(picked.id) && picked.kind) {
    const reply = await api(`/lab/coupons/${encodeURIComponent(coupon)}/traces?anomaly=${encodeURIComponent(picked.kind)}&limit=1000`);
    if (coupon !== selected.id || picked !== selected.trace) return;
    const found = reply.ok && reply.response.traces.find((t) => String(t.id) === picked.id);
    if (found) selected.traces.set(picked.id, found);
  }
  const trace = selected.traces.get(picked.id);
  container.dataset.trace = picked.id;
  if (!trace) {
    redraw(container, `<p class="note">Trace ${esc(picked.id)} is not listed: pick another, or clear the filters.</p>`);
    return;
  }
  let html = waterfall(trace, 'request', `Trace ${trace.id}`);
  if (trace.confirmation) {
    const lag = trace.confirmation.startedUs - trace.startedUs;
    html += waterfall(trace.confirmation, 'confirmation', `Its confirmation, trace ${trace.confirmation.id}, started ${micros(lag)} after this call started`);
  }
  redraw(container, html);
}

/** One trace's calls as bars on its own time: one row a call. */
function waterfall(trace, part, title) {
  const [w, left, barW, row, top] = [940, 96, 380, 18, 22];
  const label = left + barW + 10;
  const span = Math.max(trace.durationUs, ...trace.calls.map((c) => c.startUs + c.durationUs), 1);
  const x = (at) => left + (at / span) * barW;
  const waited = trace.startedUs - trace.arrivedUs;
  const facts = [`member ${trace.memberId}`, trace.method, trace.sequence !== undefined ? `arrived ${ordinal(trace.sequence)}` : null,
    waited > 0 ? `waited ${micros(waited)} before its call started` : null, `took ${micros(trace.durationUs)}`,
    `kept: ${trace.kept}`, trace.anomalies && trace.anomalies.length ? `witnesses ${trace.anomalies.join(', ')}` : null]
    .filter(Boolean).map(esc).join(' · ');
  let svg = '';
  for (let i = 0; i <= 4; i += 1) {
    const at = (span * i) / 4;
    svg += `<line class="grid" x1="${x(at)}" x2="${x(at)}" y1="${top - 4}" y2="${top + trace.calls.length * row}"/>`
      + `<text x="${x(at)}" y="${top - 8}" text-anchor="${i === 0 ? 'start' : i === 4 ? 'end' : 'middle'}">${esc(micros(Math.round(at)))}</text>`;
  }
  trace.calls.forEach((call, i) => {
    const y = top + i * row;
    const width = Math.max((call.durationUs / span) * barW, 1.5);
    const text = callLabel(call);
    const phase = call.phase ? ` data-phase="${esc(call.phase)}"` : '';
    const failed = call.reply !== 'ok' ? ' data-failed="true"' : '';
    const detail = `${call.capability} ${text}; started ${micros(call.startUs)}, took ${micros(call.durationUs)}`
      + `${call.transaction ? `; transaction ${call.transaction} (${call.isolation})` : ''}${call.phase ? `; ${call.phase}` : ''}`;
    svg += `<g class="call" data-index="${i}" data-capability="${esc(call.capability)}" data-op="${esc(call.op)}"${phase}${failed}`
      + ` data-start="${call.startUs}" data-duration="${call.durationUs}"><title>${esc(detail)}</title>`
      + `<text class="capability" x="0" y="${y + 12}">${esc(call.capability)}</text>`
      + `<rect x="${x(call.startUs).toFixed(1)}" y="${y + 3}" width="${width.toFixed(1)}" height="${row - 6}"/>`
      + `<text class="label" x="${label}" y="${y + 12}">${esc(text.length > 80 ? `${text.slice(0, 79)}…` : text)}</text></g>`;
  });
  const height = top + trace.calls.length * row + 6;
  const calls = trace.calls.length === 0 ? '<p class="note">It made no capability call.</p>'
    : `<svg viewBox="0 0 ${w} ${height}" role="img" aria-label="${esc(`${trace.calls.length} capability calls: ${trace.calls.map((c) => c.op).join(', ')}`)}">${svg}</svg>`;
  const dropped = trace.callsDropped > 0 ? `<p class="note">${trace.callsDropped} more call${trace.callsDropped === 1 ? '' : 's'} past the trace's cap, counted and not kept.</p>` : '';
  return `<figure class="trace" id="waterfall-${part}" data-trace="${trace.id}" data-outcome-name="${esc(trace.outcome)}">`
    + `<figcaption><strong>${esc(title)}</strong>: ${outcomeName(trace.outcome)}<br><span class="note">${facts}</span></figcaption>`
    + `${calls}${dropped}${legend(trace.calls)}</figure>`;
}

function ordinal(n) {
  const tens = n % 100;
  const suffix = tens >= 11 && tens <= 13 ? 'th' : ['th', 'st', 'nd', 'rd'][n % 10] || 'th';
  return `${n}${suffix}`;
}

/** What a bar says: the op, its keys or table, its rows, what it read,
 *  its isolation when it begins a transaction, its error. */
function callLabel(call) {
  const parts = [call.phase === 'compensate' ? `↺ ${call.op}` : call.op];
  if (call.target) parts.push(call.target);
  if (call.op === 'BEGIN' && call.isolation) parts.push(`(${call.isolation})`);
  if (call.rows !== undefined) parts.push(`${call.rows} row${call.rows === 1 ? '' : 's'}`);
  const read = readValues(call.read);
  if (read) parts.push(read);
  if (call.reply !== 'ok') parts.push(`✗ ${call.reply}`);
  return parts.join(' ');
}

/** The capabilities a waterfall uses, each its colour named. */
function legend(calls) {
  const used = [...new Set(calls.map((c) => c.capability))];
  const compensated = calls.some((c) => c.phase === 'compensate');
  const items = used.map((name) => `<li><span class="swatch" data-capability="${esc(name)}" aria-hidden="true"></span>${esc(name)}</li>`);
  if (compensated) items.push('<li><span class="swatch" data-phase="compensate" aria-hidden="true"></span>↺ compensation</li>');
  return items.length ? `<ul class="legend">${items.join('')}</ul>` : '';
}

let ticking = false;

async function tick() {
  // A slow server must not pile up reads: one tick at a time.
  if (ticking) return;
  ticking = true;
  try {
    await Promise.all([refreshCoupons(), refreshStrategies(), refreshReports()]);
    setStatus(true, 'live');
  } catch (e) {
    setStatus(false, `the server does not answer: ${e}`);
  } finally {
    ticking = false;
  }
}

window.addEventListener('hashchange', openCoupon);
document.addEventListener('click', (event) => {
  const button = event.target.closest('button[data-trace]');
  if (button) pickTrace(button.dataset.trace, button.dataset.kind);
});
for (const filter of ['trace-outcome', 'trace-anomaly']) document.getElementById(filter).addEventListener('change', refreshCoupon);
document.getElementById('drop-gate-switch').addEventListener('click', (event) => switchGate(event.currentTarget));
openCoupon();
tick();
setInterval(tick, TICK_MS);
setInterval(refreshCoupon, COUPON_TICK_MS);
