#!/bin/sh
# Symphony over K sub-clusters, one scheduler each (baton_sched::partitioned),
# against one scheduler: goodput on the mixed zoo (37 models) at 64 and 256
# GPUs for K = 1, 2, 4, 8, all on the same arrivals (the file's seed), and
# how long `baton partition` takes to plan. Writes perf/results/partitioned.txt.
set -e
cd "$(dirname "$0")/../.."
cargo build --release -p baton-tools --bin baton
zoo=perf/scenarios/zoo-a100-all.toml
MILP=5000
out=perf/results/partitioned.txt
{
  echo "# perf/scripts/partitioned.sh, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)"
  echo "# $zoo, policy symphony, seed from the file; goodput: highest rate with every model's bad rate <= 1% (bisection, 1%)"
  echo "# plan: baton partition at the goodput rate (greedy, then the MILP within $MILP nodes); gap: the solver's"
  echo "gpus schedulers goodput_rps relative plan_ms milp_gap"
  for gpus in 64 256; do
    one=""
    for k in 1 2 4 8; do
      g=$(target/release/baton sim $zoo --find-goodput --gpus $gpus --schedulers $k --json 2>/dev/null \
        | python3 -c 'import json,sys; print(json.load(sys.stdin)["goodput_rps"])')
      [ -z "$one" ] && one=$g
      start=$(date +%s%N)
      plan=$(target/release/baton partition $zoo --schedulers $k --rate "$g" --json)
      ms=$(( ($(date +%s%N) - start) / 1000000 ))
      gap=$(echo "$plan" | python3 -c 'import json,sys; s=json.load(sys.stdin)["solver"]; print("%.4f" % s["gap"] if s.get("gap") is not None else "-")')
      python3 -c "print('$gpus $k %.1f %.3f $ms $gap' % ($g, $g / $one))"
    done
  done
} > $out
cat $out
