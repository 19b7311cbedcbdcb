#!/bin/sh
# The dispatcher stress test from 1 core to all of this machine's (up to 16):
# for n cores (taskset), one clients' loop with n-2 model shards (from 4
# cores on; the first runs of perf/results/stress_scaling_16.txt), then n/2
# clients' loops with the rest of the cores split between model shards and
# backend shards (not yet run on a machine of many cores). 64 models on
# 4,000 fake GPUs (their bound 3.5 M r/s), 2 s measured per probe.
# Writes perf/results/stress_scaling.txt. Run on an otherwise idle machine.
set -e
cd "$(dirname "$0")/../.."
cargo build --release -p baton-perf --bin stress
out=perf/results/stress_scaling.txt
top=$(nproc)
{
  echo "# perf/scripts/scaling.sh, $(date -u +%Y-%m-%d), $top cores; uptime before: $(uptime)"
  for n in 1 2 4 8 16; do
    [ "$n" -le "$top" ] || break
    k=0; [ "$n" -ge 4 ] && k=$((n - 2))
    echo "## $n cores (taskset -c 0-$((n - 1))), one clients' loop, $k model shards"
    taskset -c 0-$((n - 1)) target/release/stress perf/scenarios/stress-64.toml --gpus 4000 --secs 2 --warmup 1 \
      --from 1000000 --probes 4 --model-shards $k 2>/dev/null
    if [ "$n" -ge 4 ]; then
      f=$((n / 2)); rest=$((n - f - 1)); m=$((rest / 2)); b=$((rest - m))
      echo "## $n cores, $f clients' loops, $m model shards, $b backend shards"
      taskset -c 0-$((n - 1)) target/release/stress perf/scenarios/stress-64.toml --gpus 4000 --secs 2 --warmup 1 \
        --from 1000000 --probes 4 --frontends $f --model-shards $m --backend-shards $b 2>/dev/null
    fi
  done
} > $out
cat $out
