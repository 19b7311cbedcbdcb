#!/usr/bin/env bash
# Nexus's queries and prefix batching and glet's partitions served by the
# engine next to `baton sim` on the same file and seed (issue 14):
#   perf/scripts/engine_nexus_glet.sh > perf/results/engine_nexus_glet.txt
# 1. nexus-forkjoin and glet-game: the simulator's goodput, the engine's
#    found the same way from the client's side, and the engine at the
#    simulator's rate (exactly-once counts, the four parts of the time the
#    engine adds, failed queries by stage); then nexus-shift planned once
#    and re-planned every 2 s (nexus-shift-epochs), and glet's partitions
#    planned once and re-partitioned every 2 s (glet-shift, -epochs);
# 2. prefix batching (one GPU, k ResNet-50 variants sharing their prefix):
#    goodput batched and apart, simulator and engine.
# Check `uptime` first: a build on the other core halves what the engine shows.
set -euo pipefail
cargo build --release -q -p baton-perf --bin engine_goodput --bin engine_prefix
uptime
target/release/engine_goodput perf/scenarios/nexus-forkjoin.toml perf/scenarios/glet-game.toml --secs 10 --probes 6 2>&1 | grep -v "^ *[0-9]* s "
target/release/engine_goodput perf/scenarios/nexus-shift.toml perf/scenarios/nexus-shift-epochs.toml --secs 20 --probes 6 2>&1 | grep -v "^ *[0-9]* s "
target/release/engine_goodput perf/scenarios/glet-shift.toml perf/scenarios/glet-shift-epochs.toml --secs 30 --probes 6 2>&1 | grep -v "^ *[0-9]* s "
target/release/engine_prefix --secs 5 --probes 5 1 2 4 6 8 10 2>&1 | grep -v "probe"
