#!/usr/bin/env bash
# The load generator's CPU per request: `baton serve` (engine-tiny.toml) on
# core 0, `baton load` on core 1 under `perf stat -e task-clock`, one
# connection:  perf/scripts/load_cpu.sh BATON RATE SECS
# Prints the generator's CPU ns per request sent (its sender and reader
# threads together) and the run's bad rate. (The server's own CPU time says
# nothing here: a busy shard yields and runs again, so it reads ~1 core.)
set -euo pipefail
baton=$1 rate=$2 secs=$3
port=${PORT:-7880}
. "$(dirname "$0")/tiny_server.sh"
out=$(mktemp /tmp/load-cpu.XXXXXX)
cleanup=("$out" "$out.stat")
start_tiny_server "$baton" "$port"
perf stat -x, -e task-clock -o "$out.stat" "$baton" load "$scenario" --target "127.0.0.1:$port" --rate "$rate" \
  --duration "$secs" --warmup 0 --connections 1 --cores 1 --json > "$out" 2>/dev/null
python3 - "$out" "$out.stat" "$rate" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ms = next(float(l.split(',')[0]) for l in open(sys.argv[2]) if ',task-clock,' in l)
print("%s r/s: sent %d, bad rate %.4f, generator %.0f ns CPU per request" % (sys.argv[3], d["sent"], d["bad_rate"], ms * 1e6 / d["sent"]))
PY
