// Stages 1-2: every database-only method at the same constant arrival rate,
// one after another, each on a fresh coupon; writes a table of outcomes per
// method (k6).
//
//   loadtest/run.sh mysql-methods.js -e RATE=400 -e DURATION=10s -e TOTAL=2000
//
// setup() creates one member per planned request of a method (every request
// of a method comes from a distinct member; the methods share the members,
// each on its own coupon) and one coupon per method. handleSummary() reads
// each coupon's result from the server and writes the table to OUT and to
// stdout. Environment:
//   BASE_URL  http://127.0.0.1:8080   RATE      requests per second (400)
//   DURATION  per method (10s)        TOTAL     each coupon's total (2000)
//   PAUSE     between methods (5s)    METHODS   comma-separated (the six)
//   VUS       pre-allocated VUs per method (50); up to 10x that are added
//   DUPLICATE_CHECK  false skips the member check of the isolation methods
//   OUT       the table's file (mysql-methods.md)
import http from 'k6/http';
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';
import { BASE_URL, TREND_STATS, constantRate, issue as sendIssue, post, seconds } from './lib/common.js';

const RATE = parseInt(__ENV.RATE || '400', 10);
const DURATION = __ENV.DURATION || '10s';
const TOTAL = parseInt(__ENV.TOTAL || '2000', 10);
const PAUSE = __ENV.PAUSE || '5s';
const VUS = parseInt(__ENV.VUS || '50', 10);
const DUPLICATE_CHECK = (__ENV.DUPLICATE_CHECK || 'true') !== 'false';
const OUT = __ENV.OUT || 'mysql-methods.md';
const METHODS = (
  __ENV.METHODS ||
  'READ_COMMITTED,REPEATABLE_READ,SERIALIZABLE,PESSIMISTIC,OPTIMISTIC,OPTIMISTIC_RETRY'
)
  .split(',')
  .map((m) => m.trim())
  .filter((m) => m);

// Status classes a client sees; "other" is anything else, 0 included (no answer).
const STATUSES = ['200', '409', '503', 'other'];
const answers = new Counter('issue_answers');

const scenarios = {};
// A threshold that always passes makes k6 keep the per-method sub-metric.
const thresholds = {};
METHODS.forEach((method, i) => {
  scenarios[method] = Object.assign(constantRate(RATE, DURATION, VUS, VUS * 10), {
    startTime: `${i * (seconds(DURATION) + seconds(PAUSE))}s`,
    env: { METHOD: method },
    exec: 'issue',
  });
  thresholds[`http_req_duration{scenario:${method}}`] = ['max>=0'];
  thresholds[`dropped_iterations{scenario:${method}}`] = ['count>=0'];
  for (const status of STATUSES) {
    thresholds[`issue_answers{scenario:${method},status:${status}}`] = ['count>=0'];
  }
});

export const options = {
  scenarios,
  thresholds,
  summaryTrendStats: TREND_STATS,
};

export function setup() {
  const planned = Math.ceil(RATE * seconds(DURATION) * 1.1) + 10;
  const members = post('/lab/members', { count: planned });
  const coupons = {};
  for (const method of METHODS) {
    coupons[method] = post('/lab/coupons', { name: `k6 ${method}`, totalCount: TOTAL }).id;
  }
  return { firstMember: members.firstId, members: planned, coupons };
}

export function issue(data) {
  const method = __ENV.METHOD;
  // Unique within the scenario across VUs: one distinct member per request.
  const n = exec.scenario.iterationInTest;
  const res = sendIssue(data.coupons[method], {
    memberId: data.firstMember + (n % data.members),
    method,
    duplicateCheck: DUPLICATE_CHECK,
  });
  const status = STATUSES.includes(String(res.status)) ? String(res.status) : 'other';
  answers.add(1, { status });
}

function metric(data, name, stat) {
  const found = data.metrics[name];
  return found ? found.values[stat] || 0 : 0;
}

function row(data, method) {
  const coupon = data.setup_data.coupons[method];
  const res = http.get(`${BASE_URL}/lab/coupons/${coupon}/result`);
  const result = res.status === 200 ? res.json().response : null;
  const count = (status) => metric(data, `issue_answers{scenario:${method},status:${status}}`, 'count');
  const sent = STATUSES.reduce((sum, status) => sum + count(status), 0);
  const latency = (stat) => metric(data, `http_req_duration{scenario:${method}}`, stat).toFixed(1);
  const server = result ? result.requests.byMethod[method] || { byOutcome: {}, retries: 0 } : null;
  const outcome = (name) => (server ? server.byOutcome[name] || 0 : '?');
  return [
    method,
    coupon,
    sent,
    metric(data, `dropped_iterations{scenario:${method}}`, 'count'),
    (sent / seconds(DURATION)).toFixed(0),
    latency('med'),
    latency('p(99)'),
    count('200'),
    count('409'),
    count('503'),
    count('other'),
    result ? result.issueRows : '?',
    result ? result.overIssued : '?',
    result ? result.countMismatch : '?',
    outcome('SOLD_OUT'),
    outcome('DUPLICATE'),
    outcome('DEADLOCK'),
    outcome('LOCK_WAIT_TIMEOUT'),
    outcome('SERIALIZATION_FAILURE'),
    outcome('VERSION_CONFLICT'),
    server ? server.retries : '?',
  ];
}

export function handleSummary(data) {
  const header = [
    'method', 'coupon', 'sent', 'dropped', 'answered/s', 'p50 ms', 'p99 ms',
    '200', '409', '503', 'other', 'rows', 'over-issued', 'count mismatch',
    'sold out', 'duplicate', 'deadlock', 'lock timeout', 'serialization failure', 'version conflict', 'retries',
  ];
  const lines = [
    `RATE=${RATE}/s for ${DURATION} per method, TOTAL=${TOTAL} per coupon, ` +
      `duplicateCheck=${DUPLICATE_CHECK}; latency and statuses as k6 saw them, ` +
      'rows and outcomes from the result endpoint',
    '',
    `| ${header.join(' | ')} |`,
    `|${header.map(() => '---').join('|')}|`,
    ...METHODS.map((method) => `| ${row(data, method).join(' | ')} |`),
    '',
  ];
  const table = lines.join('\n');
  return { stdout: table, [OUT]: table };
}
