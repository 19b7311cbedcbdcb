#!/usr/bin/env bash
# Interleaved A/B of two `baton` binaries serving the same scenario under the
# same load generator (the second binary's `baton load`), one connection:
#   perf/scripts/engine_ab.sh OLD_BATON NEW_BATON SCENARIO SECONDS RATE...
# Each rate runs REPS (default 2) times, old then new in turn, so machine
# noise falls on both sides alike. Prints: rate rep side bad-rate late
# dropped client-p99 client-p99.9. Build an older engine with e.g.
#   git worktree add /tmp/old REV && (cd /tmp/old && CARGO_TARGET_DIR=/tmp/old/target cargo build --release --bin baton)
set -euo pipefail
old=$1 new=$2 scenario=$3 secs=$4
shift 4
port=${PORT:-7810}
for rate in "$@"; do
  for rep in $(seq "${REPS:-2}"); do
    for side in old new; do
      bin=$old; [ "$side" = new ] && bin=$new
      "$bin" serve --scenario "$scenario" --listen "127.0.0.1:$port" > /dev/null 2>&1 &
      server=$!
      sleep 1
      "$new" load "$scenario" --target "127.0.0.1:$port" --rate "$rate" --duration "$secs" --connections 1 --json 2>/dev/null |
        python3 -c 'import json,sys; d=json.load(sys.stdin); print("%s %s %s bad %.4f late %d dropped %d p99 %.2f ms p999 %.2f ms" % (sys.argv[1], sys.argv[2], sys.argv[3], d["bad_rate"], d["late"], d["dropped"], d["p99_ms"], d["p999_ms"]))' "$rate" "$rep" "$side"
      kill -TERM "$server"; wait "$server" || true
    done
  done
done
