#!/usr/bin/env bash
# Interleaved A/B of two `baton` binaries serving as role processes —
# `baton scheduler`, `baton frontend` and `baton backend`, one process
# each, all on core 0, sharing one cluster secret — loaded by NEW's
# `baton load` on core 1, old then new in turn at each rate, REPS
# (default 3) times:
#   perf/scripts/roles_ab.sh OLD_BATON NEW_BATON SECS FILE RATE...
# Prints each run's bad rate, client latency and the p50/p99 µs of the
# time the engine adds beyond its plan (ingress, split where the frontend
# reads the request; start lag; completion; egress). Every hop between
# roles is a TCP connection on loopback; on a 2-core machine the three
# processes share one core, so their tails are each other's. Check
# `uptime` first.
set -euo pipefail
[ $# -ge 5 ] || { echo "usage: $0 OLD_BATON NEW_BATON SECS FILE RATE..." >&2; exit 2; }
old=$1 new=$2 secs=$3 file=$4
shift 4
dir=$(mktemp -d /tmp/roles-ab.XXXXXX)
trap 'rm -rf "$dir"' EXIT
head -c 48 /dev/urandom | base64 > "$dir/secret"
port=${PORT:-7930}
echo "# $(date -u +%F), $(nproc) cores; uptime before: $(uptime | sed 's/.*load/load/')"
for rate in "$@"; do
  for rep in $(seq "${REPS:-3}"); do
    for side in old new; do
      bin=$old; [ "$side" = new ] && bin=$new
      sched=127.0.0.1:$port fe=127.0.0.1:$((port + 1)) peers=127.0.0.1:$((port + 2))
      port=$((port + 3))
      common=(--scenario "$file" --cores 0 --cluster-secret-file "$dir/secret" --duration $((secs + 60)))
      "$bin" scheduler "${common[@]}" --listen "$sched" > /dev/null 2>&1 &
      pids=($!)
      sleep 0.5
      "$bin" frontend "${common[@]}" --listen "$fe" --peer-listen "$peers" --scheduler "$sched" > /dev/null 2>&1 &
      pids+=($!)
      sleep 0.5
      "$bin" backend "${common[@]}" --scheduler "$sched" --frontends "$peers" > /dev/null 2>&1 &
      pids+=($!)
      sleep 1
      "$new" load "$file" --target "$fe" --rate "$rate" --duration "$secs" --warmup 0 --cores 1 --json \
        > "$dir/out.json" 2> /dev/null || true
      kill -TERM "${pids[@]}" 2> /dev/null || true
      wait "${pids[@]}" 2> /dev/null || true
      python3 - "$dir/out.json" "$rate" "$rep" "$side" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
o = d["overhead"]
parts = " ".join("%s %.0f/%.0f" % (k, o[k]["p50_us"], o[k]["p99_us"])
                 for k in ["ingress", "ingress_until_read", "ingress_after_read", "start_lag", "completion", "egress"])
print("%7s r/s rep %s %s: bad %.4f unanswered %d latency p50/p99 %.3f/%.3f ms  %s" % (
    sys.argv[2], sys.argv[3], sys.argv[4], d["bad_rate"], d["unanswered"], d["p50_ms"], d["p99_ms"], parts))
PY
    done
  done
done
