#!/usr/bin/env bash
# What one stall of the engine's host does to a policy, in the simulator:
#   perf/scripts/stall_grid.sh BATON FILE POLICY RATES STALLS_MS [ATS_S]
# for each rate (comma-separated) and stall length (ms, comma-separated)
# runs `baton sim FILE --policy POLICY --stall AT,MS` at each start time
# (default 1.5,2,...,5 s) and prints the bad rates in a row: a policy that
# recovers loses about what fell in the stall; one that collapses for
# good loses the rest of the run.
set -euo pipefail
baton=$1 file=$2 policy=$3 rates=$4 stalls=$5 ats=${6:-1.5,2.0,2.5,3.0,3.5,4.0,4.5,5.0}
echo "# $(date -u +%F) perf/scripts/stall_grid.sh $file $policy; stalls at ${ats} s"
for rate in ${rates//,/ }; do
  for ms in ${stalls//,/ }; do
    row="rate $rate r/s, one ${ms} ms stall: bad"
    for at in ${ats//,/ }; do
      json=$("$baton" sim "$file" --policy "$policy" --rate "$rate" --stall "$at,$ms" --json 2>/dev/null)
      bad=$(grep '"bad_rate"' <<< "$json" | head -1 | tr -d ',' | awk '{print $2}')
      row="$row $(printf %.3f "$bad")"
    done
    echo "$row"
  done
done
