// A spike on a limited drop (seed 000): every request at once, k6.
//
//   loadtest/run.sh drop-spike.js -e REQUESTS=4000 -e VUS=400 -e TOTAL=2000
//
// setup() creates one member per request and a fresh coupon, and seeds the
// drop (REDIS_LUA_GATE) with the coupon's total; then VUS virtual users send the REQUESTS
// issue requests back to back, each from a distinct member with its own
// idempotency key, so the server holds about VUS requests at every moment.
// With RETRIES > 0 a client answered 503 tries again with the same key,
// after RETRY_MS, up to RETRIES times.
// teardown() prints how long the spike took to be answered (setup done to
// the last answer) and the coupon's result: outcomes (ISSUED, THROTTLED,
// SOLD_OUT), the gate's verdicts (labels.gate) and how long admitted
// requests spent in the database step (labels.confirmMs, in milliseconds).
// Environment:
//   BASE_URL  http://127.0.0.1:8080     METHOD    REDIS_LUA_GATE
//   REQUESTS  issue requests (4000)     VUS       requests in flight (400)
//   TOTAL     the coupon's total (2000)
//   RETRIES   retries of a 503 (0)      RETRY_MS  pause before one (100)
import http from 'k6/http';
import { check, sleep } from 'k6';
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';
import { BASE_URL, TREND_STATS, issue, post } from './lib/common.js';

const METHOD = __ENV.METHOD || 'REDIS_LUA_GATE';
const REQUESTS = parseInt(__ENV.REQUESTS || '4000', 10);
const VUS = parseInt(__ENV.VUS || '400', 10);
const TOTAL = parseInt(__ENV.TOTAL || '2000', 10);
const RETRIES = parseInt(__ENV.RETRIES || '0', 10);
const RETRY_MS = parseInt(__ENV.RETRY_MS || '100', 10);

const answers = new Counter('issue_answers');

export const options = {
  scenarios: {
    spike: {
      executor: 'shared-iterations',
      vus: VUS,
      iterations: REQUESTS,
      maxDuration: '5m',
    },
  },
  summaryTrendStats: TREND_STATS,
};

export function setup() {
  const members = post('/lab/members', { count: REQUESTS });
  const coupon = post('/lab/coupons', { name: `k6 spike ${METHOD}`, totalCount: TOTAL });
  if (METHOD === 'REDIS_LUA_GATE') {
    post(`/lab/drop/coupons/${coupon.id}/seed`, { quantity: TOTAL });
  }
  return { firstMember: members.firstId, coupon: coupon.id, started: Date.now() };
}

export default function (data) {
  const n = exec.scenario.iterationInTest;
  const memberId = data.firstMember + n;
  const body = { memberId, method: METHOD, idempotencyKey: `spike-${memberId}` };
  for (let attempt = 0; ; attempt++) {
    const res = issue(data.coupon, body);
    answers.add(1, { status: String(res.status) });
    check(res, { 'answered in the envelope': (r) => r.json('success') !== undefined });
    if (res.status !== 503 || attempt >= RETRIES) break;
    sleep(RETRY_MS / 1000);
  }
}

export function teardown(data) {
  const res = http.get(`${BASE_URL}/lab/coupons/${data.coupon}/result`);
  const result = res.json().response;
  const seconds = (Date.now() - data.started) / 1000;
  console.log(`spike answered in ${seconds.toFixed(2)} s`);
  console.log(`coupon ${data.coupon} (${METHOD}): ${JSON.stringify(result)}`);
}
