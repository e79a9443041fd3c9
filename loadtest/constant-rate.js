// One issuance method at a constant arrival rate (k6).
//
//   k6 run -e METHOD=REDIS_LUA -e RATE=500 -e DURATION=20s -e TOTAL=1000 loadtest/constant-rate.js
//
// setup() creates the members (one per planned request, so every request
// comes from a distinct member) and a fresh coupon; teardown() prints the
// coupon's result from the server. Environment:
//   BASE_URL  http://127.0.0.1:8080     METHOD    REDIS_LUA
//   RATE      requests per second       DURATION  e.g. 20s
//   TOTAL     the coupon's total        VUS       pre-allocated VUs (default RATE)
import http from 'k6/http';
import { check } from 'k6';
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';
import { BASE_URL, TREND_STATS, constantRate, issue, post, seconds } from './lib/common.js';

const METHOD = __ENV.METHOD || 'REDIS_LUA';
const RATE = parseInt(__ENV.RATE || '200', 10);
const DURATION = __ENV.DURATION || '10s';
const TOTAL = parseInt(__ENV.TOTAL || '100', 10);
const VUS = parseInt(__ENV.VUS || String(Math.max(RATE, 10)), 10);

const answers = new Counter('issue_answers');

export const options = {
  scenarios: {
    issue: constantRate(RATE, DURATION, VUS, VUS * 4),
  },
  summaryTrendStats: TREND_STATS,
};

export function setup() {
  const planned = Math.ceil(RATE * seconds(DURATION) * 1.1) + 10;
  const members = post('/lab/members', { count: planned });
  const coupon = post('/lab/coupons', { name: `k6 ${METHOD}`, totalCount: TOTAL });
  return { firstMember: members.firstId, members: planned, coupon: coupon.id };
}

export default function (data) {
  // Unique across VUs, so every request comes from a distinct member.
  const n = exec.scenario.iterationInTest;
  const memberId = data.firstMember + (n % data.members);
  const res = issue(data.coupon, { memberId, method: METHOD });
  answers.add(1, { status: String(res.status) });
  check(res, { 'answered in the envelope': (r) => r.json('success') !== undefined });
}

export function teardown(data) {
  const res = http.get(`${BASE_URL}/lab/coupons/${data.coupon}/result`);
  const result = res.json().response;
  console.log(`coupon ${data.coupon} (${METHOD}): ${JSON.stringify(result)}`);
}
