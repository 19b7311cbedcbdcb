#!/usr/bin/env bash
# Where the engine's core goes under the sustained-rate load:
#   perf/scripts/engine_profile.sh BATON RATE [SECS]
# `baton serve` (engine-tiny.toml) on core 0, `baton load` on core 1, one
# connection; after a 2 s start, `perf record --call-graph dwarf` samples
# the server for 2 s. Prints the share of the server's samples under each
# part of a request's path (inclusive; parts nest, so they do not sum to
# 100%), then the top self-time symbols. Needs `perf` and a release build
# with debug info (the workspace's release profile has it).
set -euo pipefail
baton=$1 rate=$2 secs=${3:-6}
port=${PORT:-7870}
. "$(dirname "$0")/tiny_server.sh"
data=$(mktemp /tmp/engine-profile.XXXXXX)
cleanup=("$data" "$data.load")
start_tiny_server "$baton" "$port"
"$baton" load "$scenario" --target "127.0.0.1:$port" --rate "$rate" --duration "$secs" --warmup 0 \
  --connections 1 --cores 1 --json > "$data.load" 2>/dev/null &
load=$!
sleep 2
perf record -q --call-graph dwarf,16384 -F 999 -p "$server" -o "$data" -- sleep 2 > /dev/null 2>&1
wait $load
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("# %s r/s offered: bad rate %.4f, unanswered %d" % (sys.argv[2], d["bad_rate"], d["unanswered"]))' "$data.load" "$rate"
echo "## the server's samples by part (inclusive)"
report=$(perf report -i "$data" --children --sort sym --stdio -g none 2>/dev/null | grep '%')
part() { # label, symbol pattern
  printf '%7s  %s\n' "$(grep -m1 -E "$2" <<< "$report" | awk '{print $1}')" "$1"
}
part "scheduler and GPUs (one pump round)" 'sched_shard::Pump::round$'
part "  of it, the emulated GPUs" 'BackendRole::poll$'
part "reading requests (socket, verify, admit)" 'frontend_shard::serve_connection'
part "  of it, verifying frames" 'framing::FrameBuf::next_(frame|view)$'
part "answering (encode into the outbox)" 'frontend_shard::Shard::answer$'
part "  of it, encoding" 'baton_wire::(message::encode_into|answer::write)$'
part "writing answers (send system calls)" 'glommio::net::yolo_send$'
part "io_uring submissions and waits" 'glommio::sys::uring::Reactor::wait$'
part "clock reads (clock_gettime)" '__vdso_clock_gettime$'
part "malloc" '__GI___libc_malloc \(inlined\)$'
part "free" '__GI___libc_free \(inlined\)$'
echo "## self time (top 15)"
perf report -i "$data" --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep '%' | head -15
