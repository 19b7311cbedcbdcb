#!/usr/bin/env bash
# One frontend shard against two on this machine's cores, side by side:
# `baton serve` (engine-tiny.toml) with `--frontend-shards 1 --cores 0` and
# with `--frontend-shards 2 --cores 0,1`, `baton load` (4 connections) on
# core 1 in both, the two interleaved at each rate:
#   perf/scripts/frontend_shards.sh BATON SECS RATE...
# Prints each run's bad rate, unanswered and duplicated answers. On a
# 2-core machine the second shard shares core 1 with the generator: this
# shows what a second shard costs or gives there, not how shards scale on
# cores of their own.
set -euo pipefail
baton=$1 secs=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
scenario=$here/scenarios/engine-tiny.toml
port=${PORT:-7890}
out=$(mktemp /tmp/fe-shards.XXXXXX)
trap 'rm -f "$out"' EXIT
echo "# $(date -u +%F) $(nproc) cores; uptime before: $(uptime | sed 's/.*load/load/')"
for rate in "$@"; do
  for shards in 1 2; do
    cores=0
    [ "$shards" = 2 ] && cores=0,1
    "$baton" serve --scenario "$scenario" --listen "127.0.0.1:$port" --frontend-shards "$shards" --cores "$cores" \
      > /dev/null 2>&1 &
    server=$!
    sleep 1
    "$baton" load "$scenario" --target "127.0.0.1:$port" --rate "$rate" --duration "$secs" --warmup 0 \
      --connections 4 --cores 1 --json > "$out" 2>/dev/null || true
    kill -TERM "$server"
    wait "$server" || true
    python3 - "$out" "$rate" "$shards" "$cores" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("%7s r/s  frontend shards %s (engine cores %s, generator core 1): sent %d  bad rate %.4f  unanswered %d  duplicates %d"
      % (sys.argv[2], sys.argv[3], sys.argv[4], d["sent"], d["bad_rate"], d["unanswered"], d["duplicates"]))
PY
    port=$((port + 1))
  done
done
