#!/bin/sh
# Where the stress harness's stalls are (perf/src/bin/stress.rs): 64 models
# on one core (taskset -c 0) at 600,000 and 700,000 r/s, three times each,
# every line with the longest the clients' loop spent in one turn on each
# part — its own work, the hosted shards' round, the yield to the executor
# after a busy round, parked after an idle one. Writes
# perf/results/stress_stalls.txt. Run on an otherwise idle machine.
set -e
cd "$(dirname "$0")/../.."
cargo build --release -p baton-perf --bin stress
out=perf/results/stress_stalls.txt
{
  echo "# perf/scripts/stress_stalls.sh, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), $(nproc) cores; uptime before: $(uptime)"
  for i in 1 2 3; do
    taskset -c 0 target/release/stress perf/scenarios/stress-64.toml --rates 600000,700000 --secs 6 --warmup 3
  done
} > $out 2>/dev/null
cat $out
