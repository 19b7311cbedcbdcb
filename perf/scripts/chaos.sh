#!/bin/sh
# The chaos campaign (perf/src/bin/chaos.rs): 10,000 seeded cluster
# simulations of the role engines under injected faults. Writes
# perf/results/chaos.txt; a failing seed prints the command that replays it.
set -e
cd "$(dirname "$0")/../.."
cargo build --release -p baton-perf --bin chaos
out=perf/results/chaos.txt
{
  echo "# perf/scripts/chaos.sh, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)"
  target/release/chaos --seeds 10000
} > $out
cat $out
