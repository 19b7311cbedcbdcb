#!/bin/sh
# The partitioning MILP on its two solvers: microlp (pure Rust, the default,
# within a node budget) and HiGHS (the `highs` feature, under a time limit),
# on the mixed zoo at the goodput rates of perf/results/partitioned.txt, for
# K = 2, 4, 8 (the rates one scheduler sustains there, read from that
# file): the plan's objective (ΔR + w·ΔS), the solver's gap and the wall
# time of `baton partition`. Writes perf/results/partition_solvers.txt.
set -e
cd "$(dirname "$0")/../.."
cargo build --release -p baton-tools --features highs --target-dir target/highs --bin baton
baton=target/highs/release/baton
zoo=perf/scenarios/zoo-a100-all.toml
LIMIT=10
out=perf/results/partition_solvers.txt
{
  echo "# perf/scripts/partition_solvers.sh, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)"
  echo "# $zoo at the goodput rates of perf/results/partitioned.txt; microlp within 5000 nodes, HiGHS within $LIMIT s (one thread)"
  echo "gpus rate schedulers solver objective gap plan_ms"
  awk '$2 == 1 { print $1, $3 }' perf/results/partitioned.txt | while read -r gpus rate; do
    for k in 2 4 8; do
      for solver in microlp highs; do
        start=$(date +%s%N)
        plan=$($baton partition $zoo --schedulers $k --rate "$rate" --solver $solver --time-limit $LIMIT --json)
        ms=$(( ($(date +%s%N) - start) / 1000000 ))
        echo "$plan" | python3 -c "
import json, sys
p = json.load(sys.stdin); s = p['solver']
gap = '%.4f' % s['gap'] if s.get('gap') is not None else '-'
print('$gpus $rate $k', s.get('by', 'greedy'), '%.4f' % p['objective'], gap, $ms)"
      done
    done
  done
} > $out
cat $out
