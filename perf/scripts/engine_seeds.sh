#!/usr/bin/env bash
# Orloj's and SuperServe's scenarios served by the engine next to `baton
# sim` on the same file, rate and seed (`baton demo` runs server, load and
# simulator in one invocation):
#   perf/scripts/engine_seeds.sh [BATON] > perf/results/engine_seeds.txt
# 1. orloj-bimodal at the simulator's goodput rate (found by search);
# 2. superserve-bursty (SlackFit, bursty arrivals) at its file's rate, three
#    times (its attainment sits at the 0.999 goal), and
#    superserve-faults (half the GPUs failing one by one, as the file says);
# 3. the CPU dynamic DNN (cpu-varlen, `--executor cpu`): Orloj and
#    Clockwork at two rates, engine and simulator;
# 4. a CPU prefix group (cpu-prefix, `--executor cpu`, Nexus): a shared
#    trunk run once per batch, each variant's head over its own rows.
# `baton demo` gives the CPU executor's compute thread a core of its own
# (on two cores: shards and generator share the other).
# Check `uptime` first: a build on the other core halves what the engine shows.
set -euo pipefail
baton=${1:-target/release/baton}
s=perf/scenarios
show() { grep -E "^(baton demo|sent|in SLO|mean accuracy|engine overhead|drops|baton sim)"; }
uptime
rate=$("$baton" sim $s/orloj-bimodal.toml --find-goodput --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["goodput_rps"])')
echo "== orloj-bimodal at the simulator's goodput, $rate r/s"
"$baton" demo --scenario $s/orloj-bimodal.toml --rate "$rate" --duration 20 2>&1 | show
acc=$("$baton" sim $s/superserve-bursty.toml --json 2>/dev/null | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["mean_accuracy"], 2))')
for run in 1 2 3; do
  echo "== superserve-bursty, run $run (simulator's mean accuracy: $acc%)"
  "$baton" demo --scenario $s/superserve-bursty.toml --duration 20 2>&1 | show
done
echo "== superserve-faults (simulator's mean accuracy: $("$baton" sim $s/superserve-faults.toml --json 2>/dev/null | python3 -c 'import json,sys; print(round(json.load(sys.stdin)["mean_accuracy"], 2))')%)"
"$baton" demo --scenario $s/superserve-faults.toml --duration 25 2>&1 | show
for rate in 250 492; do
  for policy in orloj clockwork; do
    echo "== cpu-varlen --executor cpu, $policy at $rate r/s"
    "$baton" demo --executor cpu --scenario $s/cpu-varlen.toml --policy $policy --rate $rate --duration 20 2>&1 | show
  done
done
echo "== cpu-prefix --executor cpu, nexus at 1000 r/s"
"$baton" demo --executor cpu --scenario $s/cpu-prefix.toml --rate 1000 --duration 20 2>&1 | show
