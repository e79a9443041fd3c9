// One method on one coupon: the k6 half of `cargo xtask loadtest`, which
// creates the members and the coupon first, waits for asynchronous methods
// to drain afterwards, reads the coupon's result and writes the report.
// It also runs alone against members and a coupon that exist:
//
//   loadtest/run.sh issue.js -e METHOD=REDIS_LUA -e COUPON_ID=1 -e FIRST_MEMBER=1 -e MEMBERS=3000 -e RATE=300 -e DURATION=10s
//
// Every request comes from a distinct member (FIRST_MEMBER, FIRST_MEMBER+1, ...).
// Environment:
//   BASE_URL      http://127.0.0.1:8080
//   BASE_URLS     the hosts to spread the requests over, comma separated
//                 (request n goes to host n mod hosts; default BASE_URL)
//   METHOD        the method to drive            COUPON_ID   its coupon
//   FIRST_MEMBER  the first member id            MEMBERS     members available
//   MODE          rate: constant arrival rate; spike: MEMBERS requests at second zero
//   RATE          requests per second (rate)     DURATION    e.g. 10s (rate)
//   VUS           virtual users (rate: pre-allocated, 10x at most; spike: all at once)
//   SUMMARY       where handleSummary writes the figures as JSON
//   CLIENT_TIMEOUT_MS  clients give up after this long (k6's request timeout; default 60 s)
//   START_AT_MS   hold the load until this Unix time in ms: several k6 processes
//                 (`--execution-segment`) start one spike together
//
// What every client was told goes out as one `issue_request` sample per
// request (value: its latency in ms; tags: status, outcome; metadata: member,
// the error message),
// which `--out json=FILE` writes line by line: the runner joins those records
// with the database after the run.
import exec from 'k6/execution';
import { Counter, Trend } from 'k6/metrics';
import { sleep } from 'k6';
import { BASE_URL, TREND_STATS, constantRate, issue } from './lib/common.js';

const METHOD = __ENV.METHOD || 'REDIS_LUA';
const COUPON_ID = __ENV.COUPON_ID;
const FIRST_MEMBER = parseInt(__ENV.FIRST_MEMBER || '1', 10);
const MEMBERS = parseInt(__ENV.MEMBERS || '1000', 10);
const MODE = __ENV.MODE || 'rate';
const RATE = parseInt(__ENV.RATE || '200', 10);
const DURATION = __ENV.DURATION || '10s';
const VUS = parseInt(__ENV.VUS || (MODE === 'spike' ? '300' : '50'), 10);
const SUMMARY = __ENV.SUMMARY || 'summary.json';
const CLIENT_TIMEOUT_MS = __ENV.CLIENT_TIMEOUT_MS;
const HOSTS = (__ENV.BASE_URLS || BASE_URL).split(',');
const START_AT_MS = parseInt(__ENV.START_AT_MS || '0', 10);

if (!COUPON_ID) throw new Error('COUPON_ID is required (cargo xtask loadtest creates one)');

// The statuses a client can see; "0" is no answer at all.
const STATUSES = ['200', '202', '400', '404', '409', '422', '500', '503', '504', '0'];
const answers = new Counter('issue_answers');
const record = new Trend('issue_request', true);
// k6's error code for a request that passed its timeout.
const REQUEST_TIMEOUT = 1050;
const PARAMS = { tags: { name: 'issue' } };
if (CLIENT_TIMEOUT_MS) PARAMS.timeout = `${parseInt(CLIENT_TIMEOUT_MS, 10)}ms`;

const scenario =
  MODE === 'spike'
    ? { executor: 'shared-iterations', vus: Math.min(VUS, MEMBERS), iterations: MEMBERS, maxDuration: '5m' }
    : constantRate(RATE, DURATION, VUS, VUS * 10);

// A threshold that always passes makes k6 keep each sub-metric in the summary.
const thresholds = { dropped_iterations: ['count>=0'] };
for (const status of STATUSES) thresholds[`issue_answers{status:${status}}`] = ['count>=0'];

export const options = {
  scenarios: { issue: scenario },
  thresholds,
  summaryTrendStats: TREND_STATS,
};

// What a client read: the envelope's `outcome` on success, else the name
// an error message starts with (`SOLD_OUT: ...`) or the status, with the
// message; a request with no status got no answer or gave up waiting. A
// 503 whose message says the outcome is unknown (its COMMIT's or its
// script's answer was lost; the server settles it later) is OUTCOME_UNKNOWN.
function told(res) {
  if (res.status === 0) {
    return { outcome: res.error_code === REQUEST_TIMEOUT ? 'TIMED_OUT' : 'NO_ANSWER', message: res.error || '' };
  }
  let body = null;
  try {
    body = res.json();
  } catch (_) {
    return { outcome: `HTTP_${res.status}`, message: String(res.body || '').slice(0, 200) };
  }
  if (body && body.success && body.response && body.response.outcome) {
    return { outcome: body.response.outcome, message: '' };
  }
  const message = (body && body.error && body.error.message) || '';
  const named = /^([A-Z][A-Z_]+):/.exec(message);
  if (named && named[1] === 'UNAVAILABLE' && message.includes('outcome unknown')) {
    return { outcome: 'OUTCOME_UNKNOWN', message };
  }
  return { outcome: named ? named[1] : `HTTP_${res.status}`, message };
}

// The runner counts its faults' times from this line: setup() runs once
// every VU is initialised, right before the first request (starting 300
// VUs takes k6 a few hundred milliseconds).
const LOAD_STARTS = 'couponlab: the load starts';
export function setup() {
  const wait = START_AT_MS - Date.now();
  if (wait > 0) sleep(wait / 1000);
  console.log(LOAD_STARTS);
}

export default function () {
  const n = exec.scenario.iterationInTest;
  const memberId = FIRST_MEMBER + (n % MEMBERS);
  const started = Date.now();
  const res = issue(COUPON_ID, { memberId, method: METHOD }, PARAMS, HOSTS[n % HOSTS.length]);
  const latency = res.status === 0 ? Date.now() - started : res.timings.duration;
  const answer = told(res);
  // Metadata, not tags: one value per member would make a time series each.
  exec.vu.metrics.metadata.member = String(memberId);
  exec.vu.metrics.metadata.message = answer.message;
  record.add(latency, { status: String(res.status), outcome: answer.outcome });
  delete exec.vu.metrics.metadata.member;
  delete exec.vu.metrics.metadata.message;
  answers.add(1, { status: STATUSES.includes(String(res.status)) ? String(res.status) : '0' });
}

export function handleSummary(data) {
  const metric = (name) => (data.metrics[name] ? data.metrics[name].values : {});
  const duration = metric('http_req_duration');
  const statuses = {};
  for (const status of STATUSES) {
    const count = metric(`issue_answers{status:${status}}`).count || 0;
    if (count > 0) statuses[status] = count;
  }
  // From the moment the load starts: a process that held its load for
  // START_AT_MS counts from then, not from its own start.
  const loadMs = START_AT_MS > 0 ? Date.now() - START_AT_MS : data.state.testRunDurationMs;
  const requests = metric('http_reqs').count || 0;
  const figures = {
    method: METHOD,
    mode: MODE,
    requests,
    requestsPerSecond: loadMs > 0 ? requests / (loadMs / 1000) : 0,
    loadMs,
    latencyMs: { p50: duration.med, p95: duration['p(95)'], p99: duration['p(99)'], max: duration.max },
    statuses,
    dropped: metric('dropped_iterations').count || 0,
  };
  return { [SUMMARY]: JSON.stringify(figures, null, 2), stdout: '' };
}
