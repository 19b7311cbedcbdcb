#!/bin/sh
# Hostile and careless clients against the engine with well-behaved load
# meanwhile (perf/src/bin/hostile.rs). Writes perf/results/hostile.txt.
# Run on an otherwise idle machine (check `uptime`).
set -e
cd "$(dirname "$0")/../.."
cargo build --release -p baton-perf --bin hostile
out=perf/results/hostile.txt
{
  echo "# perf/scripts/hostile.sh, $(date -u +%Y-%m-%d), $(nproc) cores; uptime before: $(uptime)"
  target/release/hostile "$@"
} > $out 2>/dev/null
cat $out
