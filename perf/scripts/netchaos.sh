#!/bin/sh
# Real processes across network namespaces with a fault-injecting proxy on
# every link between roles, backend and scheduler processes SIGKILLed and restarted,
# under `baton load` (tools/tests/netchaos.rs), over seeds 1..N (default 10),
# each S seconds of load (default 15) with F faults (default 15). Needs root.
# Writes perf/results/netchaos.txt.
set -e
cd "$(dirname "$0")/../.."
n=${1:-10}; secs=${2:-15}; faults=${3:-15}
cargo test --release -p baton-tools --test netchaos --no-run
out=perf/results/netchaos.txt
{
  echo "# perf/scripts/netchaos.sh $n $secs $faults, $(date -u +%Y-%m-%d), $(nproc) cores; uptime before: $(uptime)"
  for seed in $(seq 1 "$n"); do
    BATON_NETCHAOS_SEED=$seed BATON_NETCHAOS_SECS=$secs BATON_NETCHAOS_FAULTS=$faults \
      cargo test -q --release -p baton-tools --test netchaos -- --nocapture 2>&1 | grep -E "^netchaos seed [0-9]+: ([0-9]+ backend|after)|test result"
  done
} > $out
cat $out
