#!/usr/bin/env bash
# The engine beside the simulator on scenario files nobody tuned for:
#   perf/scripts/heldout.sh SEED [PER_FAMILY] [SECS] [PROBES]
# writes PER_FAMILY (default 2) random variants of each family the engine
# serves (heldout.py: static policies, Orloj, Nexus queries, glet
# partitions, SuperServe supernets, Nexus prefix groups, mixes that shift
# under a policy that re-plans every epoch) from SEED, then for each file runs
# `engine_goodput` (the simulator's goodput by search, then the engine's
# by search from the client's side, SECS s a probe, default 8 — with 4, a
# host stall of a few milliseconds decided the probes of tight-SLO files,
# results/heldout.txt —, at most PROBES probes, default 6, and one run at
# the simulator's rate). Prints
# one summary line per file after the engine_goodput output. Check `uptime`
# first: the engine needs both cores.
set -euo pipefail
seed=$1 per=${2:-2} secs=${3:-8} probes=${4:-6}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/heldout.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cargo build -q --release -p baton-perf --bin engine_goodput
echo "# $(date -u +%F) perf/scripts/heldout.sh $seed $per $secs $probes; uptime: $(uptime | sed 's/.*load/load/')"
mapfile -t files < <(python3 "$here/heldout.py" "$seed" "$dir" "$per")
out=$("$here/../../target/release/engine_goodput" "${files[@]}" --secs "$secs" --probes "$probes" 2>&1)
echo "$out"
echo "## summary: engine goodput / simulator goodput"
grep -oE '^[^ ]+ / [^:]+: sim goodput [0-9.]+ r/s, engine goodput [0-9.]+ r/s \(ratio [0-9.]+' <<< "$out" |
  sed -E 's/ r\/s, engine goodput / -> /; s/ r\/s \(ratio / ratio /; s/sim goodput //'
grep -E 'the engine not run' <<< "$out" || true
