#!/usr/bin/env bash
# Interleaved A/B of two `baton` binaries on `engine-tiny.toml`, the time
# each engine adds beyond its plan: `baton serve` on core 0, the second
# binary's `baton load` (one connection) on core 1, old then new in turn at
# each rate, REPS (default 3) times:
#   perf/scripts/overhead_ab.sh OLD_BATON NEW_BATON SECS RATE...
# Prints each run's bad rate and the p50/p99 µs of ingress, start lag,
# completion and egress (`baton load --json`'s `overhead`). Build an older
# engine as engine_ab.sh says. POLL_US=N serves with `--poll-us N`;
# SPIN=1 loads with `--spin` (the generator busy-polls its core);
# GEN=BATON loads with another binary's generator; SERVER=BATON serves
# both sides with that binary and compares OLD's and NEW's generators;
# NICE=N runs the generator at nice N (`baton load --nice`, 0 on its own
# core; the binaries before it took no such flag and ran at 10);
# SCENARIO=FILE serves and loads another file.
set -euo pipefail
old=$1 new=$2 secs=$3
shift 3
scenario=${SCENARIO:-$(cd "$(dirname "$0")/.." && pwd)/scenarios/engine-tiny.toml}
port=${PORT:-7830}
out=$(mktemp /tmp/overhead-ab.XXXXXX)
trap 'rm -f "$out"' EXIT
echo "# $(date -u +%F), $(nproc) cores; uptime before: $(uptime | sed 's/.*load/load/')"
for rate in "$@"; do
  for rep in $(seq "${REPS:-3}"); do
    for side in old new; do
      bin=$old; [ "$side" = new ] && bin=$new
      srv=$bin gen=${GEN:-$new}
      if [ -n "${SERVER:-}" ]; then srv=$SERVER gen=$bin; fi
      "$srv" serve --scenario "$scenario" --listen "127.0.0.1:$port" --cores 0 --poll-us "${POLL_US:-0}" > /dev/null 2>&1 &
      server=$!
      sleep 1
      "$gen" load "$scenario" --target "127.0.0.1:$port" --rate "$rate" --duration "$secs" --warmup 0 \
        --connections 1 --cores 1 ${SPIN:+--spin} ${NICE:+--nice "$NICE"} --json > "$out" 2>/dev/null || true
      kill -TERM "$server"; wait "$server" || true
      python3 - "$out" "$rate" "$rep" "$side" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
o = d["overhead"]
parts = " ".join("%s %.0f/%.0f" % (k, o[k]["p50_us"], o[k]["p99_us"]) for k in ["ingress", "start_lag", "completion", "egress"])
print("%7s r/s rep %s %s: bad %.4f unanswered %d lag %.1f ms  %s  bad by second %s" % (sys.argv[2], sys.argv[3], sys.argv[4], d["bad_rate"], d["unanswered"], d["max_send_lag_ms"], parts, d["bad_by_second"]))
PY
      port=$((port + 1))
    done
  done
done
