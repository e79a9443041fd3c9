// What the k6 scripts of loadtest/ share: the server's address, the lab API's
// JSON POST, the issue request, duration strings and the constant-arrival-rate
// scenario. Imported as `import { ... } from './lib/common.js'`; k6 resolves
// the path from the importing script, so the scripts run from any directory.
import http from 'k6/http';

export const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8080';

// The end-of-test trend columns most scripts print.
export const TREND_STATS = ['med', 'p(95)', 'p(99)', 'max'];

const JSON_HEADERS = { 'Content-Type': 'application/json' };

// Seconds in a k6 duration string: 500ms, 20s or 2m.
export function seconds(duration) {
  const match = /^(\d+)(ms|s|m)$/.exec(duration);
  if (!match) throw new Error(`durations look like 500ms, 20s or 2m, got ${duration}`);
  const n = parseInt(match[1], 10);
  return match[2] === 'ms' ? n / 1000 : match[2] === 's' ? n : n * 60;
}

// POSTs `body` as JSON to a lab route (members, coupons, drop seeds) and
// returns the envelope's `response`; any status of 300 or more ends the
// script, since nothing measured after a failed setup would mean anything.
// `timeout` (e.g. '5m') is for setups that create many rows in one request.
export function post(path, body, timeout) {
  const params = { headers: JSON_HEADERS };
  if (timeout) params.timeout = timeout;
  const res = http.post(`${BASE_URL}${path}`, JSON.stringify(body), params);
  if (res.status >= 300) throw new Error(`${path} answered ${res.status}: ${res.body}`);
  return res.json().response;
}

// One issue request for `coupon` with `body` (memberId, method, ...), tagged
// name=issue so its URLs of every coupon count as one; pass `params` to tag
// it otherwise, and `host` to send it to another of the lab's hosts. The
// response is the caller's to count: a refusal is a result.
export function issue(coupon, body, params = { tags: { name: 'issue' } }, host = BASE_URL) {
  return http.post(
    `${host}/lab/coupons/${coupon}/issue`,
    JSON.stringify(body),
    Object.assign({ headers: JSON_HEADERS }, params),
  );
}

// A constant-arrival-rate scenario: `rate` requests a second for `duration`,
// with `vus` VUs allocated up front and at most `maxVUs`.
export function constantRate(rate, duration, vus, maxVUs) {
  return {
    executor: 'constant-arrival-rate',
    rate,
    timeUnit: '1s',
    duration,
    preAllocatedVUs: vus,
    maxVUs,
  };
}
