#!/bin/sh
# The operator's command under load: `baton cluster` serves nexus-shift.toml
# under Symphony in two sub-clusters (the partitioner's plan for the rate),
# its controller re-planning every 2 s, while `baton load` sends at RATE
# (default 3000) from DELAY seconds after the cluster started (default 2:
# the controller's epochs then fall 2 s off the load's, where
# repartition_engine starts both together). Writes
# perf/results/cluster.txt: the load's summary with its bad answers per
# second, `baton sim` on the same file, rate and seed (partitioned the
# same way, the plan kept and re-planned every 2 s), and the cluster's log
# (each re-plan) and final report.
set -e
cd "$(dirname "$0")/../.."
rate=${RATE:-3000}
delay=${DELAY:-2}
cargo build --release -p baton-tools --bin baton
scenario=perf/scenarios/nexus-shift.toml
log=$(mktemp)
report=$(mktemp)
trap 'rm -f "$log" "$report"' EXIT
target/release/baton cluster --scenario $scenario --policy symphony --schedulers 2 --plan-rate "$rate" \
  --listen 127.0.0.1:7830,127.0.0.1:7831 --epoch-s 2 --duration 75 --json > "$report" 2> "$log" &
cluster=$!
sleep "$delay"
out=perf/results/cluster.txt
{
  echo "# perf/scripts/cluster.sh, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), $(nproc) cores; uptime before: $(uptime)"
  echo "# baton cluster: $scenario, symphony, 2 schedulers, plan for $rate r/s, re-planned every 2 s; baton load from ${delay} s after it started"
  target/release/baton load $scenario --target 127.0.0.1:7830,127.0.0.1:7831 --rate "$rate" --duration 60 --warmup 2 \
    --connections 2 --json | python3 -c '
import json, sys
v = json.load(sys.stdin)
keys = ["offered_rps", "sent", "ok", "late", "dropped", "errors", "unanswered", "duplicates", "bad_rate"]
print("load: " + "  ".join("%s %s" % (k, v[k]) for k in keys))
print("load: bad answers by second of the window: " + " ".join(str(n) for n in v["bad_by_second"]))'
  kill -TERM $cluster
  wait $cluster || true
  echo "# baton sim on the same file, rate and seed: the plan kept, and re-planned every 2 s (the engine's epochs fall as the load starts there)"
  for epochs in "" "--epoch-s 2"; do
    target/release/baton sim $scenario --policy symphony --rate "$rate" --schedulers 2 $epochs --json 2>/dev/null | python3 -c '
import json, sys
v = json.load(sys.stdin)
print("sim: %s  sent %d  ok %d  late %d  dropped %d  bad_rate %s" % (v["policy"], v["sent"], v["ok"], v["late"], v["dropped"], v["bad_rate"]))'
  done
  echo "# the cluster's log (stderr) and its final report (stdout)"
  cat "$log" "$report"
} > $out
cat $out
