// Stage 3: the Redis reservation methods side by side, one coupon per method,
// the same load for each (k6).
//
//   loadtest/run.sh redis-methods.js --log-format raw -e BURST=800 -e TOTAL=200
//   loadtest/run.sh redis-methods.js --log-format raw -e RATE=500 -e DURATION=20s -e TOTAL=5000
//
// (`--log-format raw` prints the server-side table, a console.log, as is.)
//
// Each method runs alone, one after the other (a GAP apart); every request
// comes from a distinct member. The load is either a burst (BURST requests
// sent at once, as when a sale opens) or a constant arrival rate (RATE per
// second for DURATION). setup() creates the members and one fresh coupon per
// method; at the end the script prints one table from the client's side
// (throughput, latency, requests k6 could not send because the server was
// behind) and one from the server's result endpoint (outcomes,
// SOLD_OUT_AT_DB, 503s, WATCH retries, compensations, the Redis set against
// the issue rows). Environment:
//   BASE_URL  http://127.0.0.1:8080
//   METHODS   REDIS_SET_ONLY,REDIS_MULTI_EXEC,REDIS_WATCH,REDIS_LUA
//   TOTAL     each coupon's total (default 200)      GAP  between methods (default 5s)
//   BURST     requests sent at once per method; when unset:
//   RATE      requests per second (default 500)      DURATION  per method (default 20s)
//   VUS       pre-allocated VUs for RATE (default RATE / 4, at least 50; at most 4x that)
import http from 'k6/http';
import exec from 'k6/execution';
import { BASE_URL, constantRate as arrivalRate, issue as sendIssue, post, seconds } from './lib/common.js';

const METHODS = (__ENV.METHODS || 'REDIS_SET_ONLY,REDIS_MULTI_EXEC,REDIS_WATCH,REDIS_LUA')
  .split(',')
  .map((m) => m.trim())
  .filter((m) => m);
const TOTAL = parseInt(__ENV.TOTAL || '200', 10);
const GAP = __ENV.GAP || '5s';
const BURST = parseInt(__ENV.BURST || '0', 10);
const RATE = parseInt(__ENV.RATE || '500', 10);
const DURATION = __ENV.DURATION || '20s';
const VUS = parseInt(__ENV.VUS || String(Math.max(Math.ceil(RATE / 4), 50)), 10);

// The most requests one method can be sent; members are created for that many.
const PER_METHOD = BURST > 0 ? BURST : Math.ceil(RATE * seconds(DURATION)) + 10;
// How long one method's load lasts, for spacing the methods.
const SPAN = BURST > 0 ? 15 : seconds(DURATION) + 10;

// One burst: every VU sends one request, all at once.
function burst() {
  return { executor: 'per-vu-iterations', vus: BURST, iterations: 1, maxDuration: `${SPAN}s` };
}

function constantRate() {
  return Object.assign(arrivalRate(RATE, DURATION, VUS, VUS * 4), { gracefulStop: '10s' });
}

const scenarios = {};
const thresholds = {};
METHODS.forEach((method, i) => {
  scenarios[method] = Object.assign(BURST > 0 ? burst() : constantRate(), {
    exec: 'issue',
    env: { METHOD: method },
    startTime: `${i * (SPAN + seconds(GAP))}s`,
  });
  // Thresholds that always pass: they make k6 keep per-method figures.
  thresholds[`http_req_duration{scenario:${method}}`] = ['max>=0'];
  thresholds[`iterations{scenario:${method}}`] = ['count>=0'];
  thresholds[`dropped_iterations{scenario:${method}}`] = ['count>=0'];
});

export const options = {
  scenarios,
  thresholds,
  summaryTrendStats: ['med', 'p(99)', 'max'],
  setupTimeout: '120s',
};

export function setup() {
  // Members can hold one coupon of each method, so the methods share them.
  const members = post('/lab/members', { count: PER_METHOD }, '120s');
  const coupons = {};
  for (const method of METHODS) {
    coupons[method] = post('/lab/coupons', { name: `k6 ${method}`, totalCount: TOTAL }, '120s').id;
  }
  return { firstMember: members.firstId, coupons };
}

export function issue(data) {
  const method = __ENV.METHOD;
  // Unique within the scenario, so every request comes from a distinct member.
  const memberId = data.firstMember + (exec.scenario.iterationInTest % PER_METHOD);
  sendIssue(data.coupons[method], { memberId, method }, {});
}

function table(header, rows) {
  const line = (cells) => `| ${cells.join(' | ')} |`;
  return [line(header), line(header.map(() => '---')), ...rows.map(line)].join('\n');
}

export function teardown(data) {
  const rows = METHODS.map((method) => {
    const result = http.get(`${BASE_URL}/lab/coupons/${data.coupons[method]}/result`).json().response;
    const requests = result.requests.byMethod[method] || { byOutcome: {}, latencyMs: {} };
    const outcomes = requests.byOutcome;
    const count = (...names) => names.reduce((sum, name) => sum + (outcomes[name] || 0), 0);
    const redis = result.redis.readable
      ? `${result.redis.setSize} / ${result.redis.redisOnlyMembers.count} / ${result.redis.dbOnlyMembers.count}`
      : result.redis.error;
    return [
      method,
      result.issueRows,
      count('SOLD_OUT'),
      count('SOLD_OUT_AT_DB'),
      count('VERSION_CONFLICT', 'DEADLOCK', 'LOCK_WAIT_TIMEOUT', 'SERIALIZATION_FAILURE', 'UNAVAILABLE', 'BUSY', 'THROTTLED', 'QUEUE_FULL'),
      requests.retries || 0,
      requests.compensations || 0,
      (requests.latencyMs.p99 || 0).toFixed(1),
      redis,
      result.invariants.neverOverIssued && result.invariants.onePerMember ? 'kept' : 'BROKEN',
    ];
  });
  console.log(
    `\nserver side (result endpoint), total ${TOTAL} per coupon:\n` +
      table(
        ['method', 'issued', 'SOLD_OUT', 'SOLD_OUT_AT_DB', '503s', 'WATCH retries', 'compensations', 'server p99 ms', 'Redis set / Redis-only / DB-only', 'invariants'],
        rows,
      ),
  );
}

export function handleSummary(data) {
  // A metric with no sample (no request dropped) is absent.
  const metric = (name, method) => (data.metrics[`${name}{scenario:${method}}`] || { values: { count: 0 } }).values;
  const rows = METHODS.map((method) => {
    const durations = metric('http_req_duration', method);
    const answered = metric('iterations', method).count;
    // A burst is answered when its slowest request is.
    const elapsed = BURST > 0 ? durations.max / 1000 : seconds(DURATION);
    return [
      method,
      answered,
      (answered / elapsed).toFixed(0),
      metric('dropped_iterations', method).count,
      durations.med.toFixed(1),
      durations['p(99)'].toFixed(1),
      durations.max.toFixed(1),
    ];
  });
  const text = table(
    ['method', 'answered', 'answered/s', 'not sent (server behind)', 'p50 ms', 'p99 ms', 'max ms'],
    rows,
  );
  const load = BURST > 0 ? `a burst of ${BURST} requests` : `${RATE} requests/s for ${DURATION}`;
  return { stdout: `\nclient side (k6), ${load} per method:\n${text}\n` };
}
