#!/bin/sh
# The engine's dispatcher stress test beside Symphony's own (perf/src/bin/stress.rs):
# 64 and 16 models, on one core (taskset) and on two; then 64 models on 4,000
# fake GPUs, whose bound (3.5 M r/s) is far above the dispatcher's, where the
# file's 1,000 cap every dispatcher at 876,000 r/s. Writes perf/results/stress.txt.
# Run on an otherwise idle machine (check `uptime`).
set -e
cd "$(dirname "$0")/../.."
cargo build --release -p baton-perf --bin stress
out=perf/results/stress.txt
{
  echo "# perf/scripts/stress.sh, $(date -u +%Y-%m-%d), $(nproc) cores; uptime before: $(uptime)"
  for n in 64 16; do
    echo "## $n models, one core (taskset -c 0)"
    taskset -c 0 target/release/stress perf/scenarios/stress-$n.toml --from 400000 --probes 7
    echo "## $n models, two cores"
    target/release/stress perf/scenarios/stress-$n.toml --from 800000 --probes 7
  done
  echo "## 64 models, two cores, Symphony split (--model-shards 1)"
  target/release/stress perf/scenarios/stress-64.toml --from 800000 --probes 6 --model-shards 1
  echo "## 64 models on 4,000 GPUs, one core (taskset -c 0)"
  taskset -c 0 target/release/stress perf/scenarios/stress-64.toml --gpus 4000 --from 800000 --probes 6
  echo "## 64 models on 4,000 GPUs, two cores"
  target/release/stress perf/scenarios/stress-64.toml --gpus 4000 --from 1000000 --probes 6
} > $out 2>/dev/null
cat $out
