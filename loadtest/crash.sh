#!/usr/bin/env bash
# What a server crash costs an asynchronous method: MEMBERS distinct members
# ask at once for a coupon of MEMBERS, the server is killed with SIGKILL the
# moment the last request is answered (while it is still confirming the
# 202s), started again, and the coupon's result is read once nothing moves.
#
#   cargo build --release -p couponlab && cargo xtask strategies
#   loadtest/crash.sh REDIS_ASYNC            # or REDIS_PUBSUB, REDIS_STREAM, ... [MEMBERS, default 20000]
#
# The server is one of its own: port 18100, database couponlab_crash and Redis
# database 9, all emptied first; its log goes to target/crash-<METHOD>.log.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
method="${1:?usage: loadtest/crash.sh <METHOD> [members]}"
members="${2:-20000}"
port=18100
base="http://127.0.0.1:$port"
bin="$root/target/release/couponlab"
log="$root/target/crash-$method.log"
[ -x "$bin" ] || { echo "build first: cargo build --release -p couponlab" >&2; exit 1; }
command -v jq >/dev/null || { echo "crash.sh reads the API's JSON with jq; install jq first" >&2; exit 1; }
export COUPONLAB_BIND="127.0.0.1:$port" \
  DATABASE_URL="mysql://root@127.0.0.1:3306/couponlab_crash" \
  REDIS_URL="redis://127.0.0.1:6379/9" \
  COUPONLAB_STRATEGY_DIR="${COUPONLAB_STRATEGY_DIR:-$root/strategies/dist}" \
  RUST_LOG="${RUST_LOG:-warn}"

pid=""
trap '[ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null; true' EXIT
serve() {
  "$bin" serve >>"$log" 2>&1 &
  pid=$!
  until curl -sf "$base/lab/strategies" >/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "the server exited; see $log" >&2; exit 1; }
    sleep 0.1
  done
}
post() { curl -sf -XPOST "$base$1" -H 'content-type: application/json' -d "$2"; }
result() { curl -sf "$base/lab/coupons/$coupon/result"; }
figures() {
  result | jq -c '.response | {accepted, pending, asyncResults, issueRows, issuedCount,
    redisOnly: .redis.redisOnlyMembers.count, stream}'
}

: >"$log"
serve
curl -sf -XDELETE "$base/lab/data" >/dev/null
first=$(post /lab/members "{\"count\": $members}" | jq .response.firstId)
coupon=$(post /lab/coupons "{\"name\": \"crash $method\", \"totalCount\": $members}" | jq .response.id)
echo "$members members ask at once for coupon $coupon by $method"
"$here/run.sh" issue.js --quiet -e BASE_URL="$base" -e METHOD="$method" -e COUPON_ID="$coupon" \
  -e FIRST_MEMBER="$first" -e MEMBERS="$members" -e MODE=spike -e SUMMARY=/dev/null >/dev/null
kill -KILL "$pid"
wait "$pid" 2>/dev/null || true
echo "killed with SIGKILL; restarting"
serve
echo "at restart: $(figures)"
# Wait until the figures stop changing for 10 s: stream consumers reclaim
# what the killed process held after 5 s of idleness.
previous="" same=0
while [ "$same" -lt 10 ]; do
  sleep 1
  now=$(figures)
  if [ "$now" = "$previous" ]; then same=$((same + 1)); else same=0; previous="$now"; fi
done
echo "settled:    $now"
result | jq '.response | {accepted, pending, asyncResults, issueRows, issuedCount,
  redisOnlyMembers: .redis.redisOnlyMembers.count, stream,
  lost: (.accepted - .issueRows)}'
