#!/usr/bin/env bash
# Whether the one-core engine comes back from a stall (roles/overload.rs,
# `Aged`): runs STRESS (perf's `stress` binary) on stress-64.toml with
# 4,000 GPUs pinned to core 0 at RATE, 5 s measured after 2 s of warm-up,
# and 3 s after the engine's thread appears (about 1 s into the measured
# window) a busy loop shares core 0 for STALL seconds. Once per SHARE
# (`--shed-aged`; 1 turns nothing away), interleaved, REPS rounds:
#   perf/scripts/stress_stall.sh STRESS RATE STALL REPS SHARE...
# e.g. `perf/scripts/stress_stall.sh target/release/stress 450000 0.4 2 1 0.8`.
# Each line: the bad rate, its parts and the bad requests by second of the
# window; a loop that did not come back shows every second after the stall
# bad. Run on an otherwise idle machine (check `uptime`).
set -euo pipefail
[ $# -ge 5 ] || { echo "usage: $0 STRESS RATE STALL REPS SHARE..." >&2; exit 2; }
stress=$1 rate=$2 stall=$3 reps=$4
shift 4
echo "# perf/scripts/stress_stall.sh $stress $rate $stall $reps $*, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores; uptime before: $(uptime)"
for rep in $(seq "$reps"); do
  for share in "$@"; do
    taskset -c 0 "$stress" perf/scenarios/stress-64.toml --gpus 4000 --rates "$rate" --secs 5 --warmup 2 \
      --shed-aged "$share" 2>/dev/null | grep 'rate ' | sed "s/^/share $share rep $rep: /" &
    # The simulator runs first (its time varies): wait for the engine's thread.
    pid= n=0
    for _ in $(seq 300); do
      sleep 0.2
      pid=$(pgrep -n -f "^$stress ") || continue
      n=$(ps -L -o comm= -p "$pid" | grep -c clients || true)
      [ "$n" -gt 0 ] && break
    done
    [ "$n" -gt 0 ] || { echo "stress_stall: no engine thread (baton-clients-0)" >&2; exit 1; }
    sleep 3
    taskset -c 0 timeout "$stall" sh -c 'while :; do :; done' || true
    wait
  done
done
