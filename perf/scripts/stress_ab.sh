#!/usr/bin/env bash
# Interleaved A/B of two builds of the stress harness (perf/src/bin/stress.rs)
# on one core (taskset -c 0; CORES=0,1 for two): old then new at each rate, REPS (default 2)
# times, each a fresh engine with SECS s measured after WARM s:
#   perf/scripts/stress_ab.sh OLD_STRESS NEW_STRESS FILE SECS WARM RATE...
# ARGS="--gpus 4000" passes more options to both (unquoted, split on spaces).
# Build an older harness in a worktree (engine_ab.sh says how, with
# `--bin stress`). Run on an otherwise idle machine.
set -euo pipefail
old=$1 new=$2 file=$3 secs=$4 warm=$5
shift 5
cores=${CORES:-0}
echo "# $(date -u +%F), $(nproc) cores, $file on cores $cores; uptime before: $(uptime | sed 's/.*load/load/')"
for rate in "$@"; do
  for rep in $(seq "${REPS:-2}"); do
    for side in old new; do
      bin=$old; [ "$side" = new ] && bin=$new
      line=$(taskset -c "$cores" "$bin" "$file" --rates "$rate" --secs "$secs" --warmup "$warm" ${ARGS:-} 2>/dev/null | grep 'rate ')
      echo "$side rep $rep: $(sed -E 's/ +baton sim bad [0-9.]+//; s/  longest turn part ms:.*loop busy ([0-9.]+) of its core/  busy \1/' <<< "$line")"
    done
  done
done
