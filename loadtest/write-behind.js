// Accept throughput of a 202 method (stages 6, 9, 10), and exact request
// counts for the statement and over-issue measurements of docs/learning/09
// and 10 (k6).
//
//   loadtest/run.sh write-behind.js -e METHOD=REDIS_WRITE_BEHIND -e VUS=50 -e DURATION=20s
//   loadtest/run.sh write-behind.js -e METHOD=REDIS_WRITE_BEHIND -e ITERATIONS=200 -e TOTAL=100
//   loadtest/run.sh write-behind.js -e METHOD=REDIS_WRITE_BEHIND -e ITERATIONS=200 -e COUPON=7
//   loadtest/run.sh write-behind.js -e METHOD=REDIS_WRITE_BEHIND -e ITERATIONS=2000 -e COUPON=7 -e FIRST_MEMBER=1
//
// setup() creates fresh members (one per request, so no request is a
// duplicate) unless FIRST_MEMBER names the first of existing ones, and a
// coupon unless COUPON names one; with both given, the run sends nothing
// but issue requests (and one result read at the end). Without ITERATIONS,
// VUS virtual users send requests back to back for DURATION (a closed
// model: the rate is what the server sustains); with it, exactly ITERATIONS
// requests are shared among the VUS. teardown() prints the coupon's result.
// Environment:
//   BASE_URL    http://127.0.0.1:8080       METHOD     REDIS_WRITE_BEHIND
//   VUS         concurrent users (50)       DURATION   e.g. 20s (closed model)
//   ITERATIONS  exact number of requests    MEMBERS    members to create (closed model; 300000)
//   TOTAL       the new coupon's total (default: every member can be accepted)
//   COUPON      an existing coupon to issue instead of creating one
//   FIRST_MEMBER  the first of MEMBERS (or ITERATIONS) existing members to use instead of creating them
import http from 'k6/http';
import exec from 'k6/execution';
import { Counter } from 'k6/metrics';
import { BASE_URL, TREND_STATS, issue, post } from './lib/common.js';

const METHOD = __ENV.METHOD || 'REDIS_WRITE_BEHIND';
const VUS = parseInt(__ENV.VUS || '50', 10);
const DURATION = __ENV.DURATION || '20s';
const ITERATIONS = __ENV.ITERATIONS ? parseInt(__ENV.ITERATIONS, 10) : null;
const MEMBERS = ITERATIONS || parseInt(__ENV.MEMBERS || '300000', 10);
const TOTAL = parseInt(__ENV.TOTAL || String(MEMBERS), 10);
const COUPON = __ENV.COUPON ? parseInt(__ENV.COUPON, 10) : null;
const FIRST_MEMBER = __ENV.FIRST_MEMBER ? parseInt(__ENV.FIRST_MEMBER, 10) : null;

const answers = new Counter('issue_answers');

export const options = {
  scenarios: {
    issue: ITERATIONS
      ? { executor: 'shared-iterations', vus: VUS, iterations: ITERATIONS, maxDuration: '10m' }
      : { executor: 'constant-vus', vus: VUS, duration: DURATION },
  },
  // setup creates up to MEMBERS rows in one request.
  setupTimeout: '5m',
  summaryTrendStats: TREND_STATS,
  thresholds: {
    // One entry per status seen, so the end-of-test summary lists them.
    'issue_answers{status:202}': ['count>=0'],
    'issue_answers{status:409}': ['count>=0'],
    'issue_answers{status:503}': ['count>=0'],
  },
};

export function setup() {
  const firstMember = FIRST_MEMBER || post('/lab/members', { count: MEMBERS }, '5m').firstId;
  const coupon = COUPON || post('/lab/coupons', { name: `k6 ${METHOD}`, totalCount: TOTAL }, '5m').id;
  console.log(`coupon ${coupon}, members ${firstMember}..${firstMember + MEMBERS - 1}`);
  return { firstMember, coupon };
}

export default function (data) {
  const n = exec.scenario.iterationInTest;
  if (n >= MEMBERS) {
    // Out of fresh members: a duplicate would measure a different path.
    exec.test.abort(`all ${MEMBERS} members have asked; raise MEMBERS`);
  }
  const res = issue(data.coupon, { memberId: data.firstMember + n, method: METHOD });
  answers.add(1, { status: String(res.status) });
}

export function teardown(data) {
  const result = http.get(`${BASE_URL}/lab/coupons/${data.coupon}/result`).json().response;
  const { totalCount, issuedCount, issueRows, distinctMembers, overIssued, requests } = result;
  console.log(
    `coupon ${data.coupon} (${METHOD}): ${JSON.stringify({
      totalCount,
      issuedCount,
      issueRows,
      distinctMembers,
      overIssued,
      byOutcome: requests.byOutcome,
    })}`,
  );
}
