#!/usr/bin/env bash
# Interleaved A/B of two load generators against one server build on
# `engine-tiny.toml`: `SERVER serve` on core 0, then OLD's and NEW's
# `baton load` (one connection) on core 1 in turn at each rate, REPS
# (default 3) times, SECS s each, WARM s of warm-up (default 0):
#   perf/scripts/generator_ab.sh SERVER OLD_BATON NEW_BATON SECS RATE...
# Prints each run's bad rate, the generator's longest send lag, bad by
# second and the p50/p99 µs of the four overhead parts.
set -euo pipefail
srv=$1 old=$2 new=$3 secs=$4
shift 4
scenario=$(cd "$(dirname "$0")/.." && pwd)/scenarios/engine-tiny.toml
port=${PORT:-7960}
out=$(mktemp /tmp/generator-ab.XXXXXX)
trap 'rm -f "$out"' EXIT
echo "# $(date -u +%F), $(nproc) cores; uptime before: $(uptime | sed 's/.*load/load/')"
for rate in "$@"; do
  for rep in $(seq "${REPS:-3}"); do
    for side in old new; do
      gen=$old; [ "$side" = new ] && gen=$new
      "$srv" serve --scenario "$scenario" --listen "127.0.0.1:$port" --cores 0 > /dev/null 2>&1 &
      server=$!
      sleep 1
      "$gen" load "$scenario" --target "127.0.0.1:$port" --rate "$rate" --duration "$secs" --warmup "${WARM:-0}" \
        --connections 1 --cores 1 --json > "$out" 2>/dev/null || true
      kill -TERM "$server"; wait "$server" || true
      python3 - "$out" "$rate" "$rep" "$side" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
o = d["overhead"]
parts = " ".join("%s %.0f/%.0f" % (k, o[k]["p50_us"], o[k]["p99_us"]) for k in ["ingress", "start_lag", "completion", "egress"])
print("%7s r/s rep %s generator %s: bad %.4f unanswered %d lag %.1f ms bad by second %s  %s" % (sys.argv[2], sys.argv[3], sys.argv[4], d["bad_rate"], d["unanswered"], d["max_send_lag_ms"], d["bad_by_second"], parts))
PY
      port=$((port + 1))
    done
  done
done
