#!/usr/bin/env bash
# Where the one-core stress harness's time goes, by the part of a request's
# path each sample was in:
#   perf/scripts/stress_profile.sh STRESS RATE [FILE]
# runs STRESS (perf's `stress` binary) on FILE (default stress-64.toml,
# 4,000 GPUs) pinned to core 0 at RATE for 5 s after 2 s of warm-up,
# samples its engine thread (`baton-clients-0`) for 3 s with call chains,
# and prints each part's share of the samples: a sample counts for the
# first part in the list below found on its stack (the generator's sends
# hold the frontend's admission, so parts do not nest twice). Needs `perf`
# and a release build with debug info (the workspace's release profile).
set -euo pipefail
stress=$1 rate=$2 file=${3:-perf/scenarios/stress-64.toml}
data=$(mktemp /tmp/stress-profile.XXXXXX)
trap 'rm -f "$data" "$data.txt"' EXIT
taskset -c 0 "$stress" "$file" --gpus 4000 --rates "$rate" --secs 5 --warmup 2 2>/dev/null | grep 'rate ' &
# The simulator runs first (its time varies with the machine): wait for
# the engine's thread, then for the warm-up.
tid= pid=
for _ in $(seq 120); do
  sleep 0.5
  pid=$(pgrep -n -f "^$stress ") || continue
  tid=$(ps -L -o tid=,comm= -p "$pid" | awk '$2 ~ /clients-0/ {print $1}' | paste -sd,)
  [ -n "$tid" ] && break
done
sleep 2.5
[ -n "$tid" ] || { echo "stress_profile: no engine thread (baton-clients-0) in process $pid" >&2; exit 1; }
perf record -q -F 199 --call-graph dwarf,16384 -t "$tid" -o "$data" -- sleep 3 > /dev/null 2>&1
wait
perf script -i "$data" 2> /dev/null > "$data.txt"
python3 - "$data.txt" <<'PY'
import collections, re, sys
parts = [
    ("generator: send and the frontend's admission", r"Generator::send"),
    ("generator: answers read", r"Generator::answer"),
    ("frontend: results into answers", r"Frontend::on_results"),
    ("frontend: inputs for a backend", r"Frontend::inputs"),
    ("frontend: other messages", r"Frontend::on_message"),
    ("scheduler: timers", r"SchedulerRole::on_timeout"),
    ("scheduler: requests and completions", r"SchedulerRole::on_message"),
    ("scheduler: plans taken", r"SchedulerRole as .*Part>::take"),
    ("backends: start, run, finish", r"BackendRole::poll"),
    ("backends: messages", r"BackendRole::on_message"),
    ("shard: message delivery", r"State::deliver"),
    ("shard: timers fired", r"State::fire"),
    ("shard: timers re-armed", r"rearm"),
    ("rings between roles", r"ShardLinks|Link::"),
    ("shard: the rest of a round", r"Pump::round"),
    ("rounds' ends (lead, park, yield)", r"end_round"),
    ("clock reads", r"Clock::now|clock_gettime"),
    ("the clients' loop, the rest", r"Generator::drive"),
    ("glommio", r"glommio"),
]
counts, n = collections.Counter(), 0
for sample in open(sys.argv[1]).read().split("\n\n"):
    frames = [l.strip() for l in sample.strip().split("\n")[1:] if l.strip()]
    if not frames:
        continue
    n += 1
    hit = next((name for name, pat in parts if any(re.search(pat, f) for f in frames)), "other")
    counts[hit] += 1
for name, c in counts.most_common():
    print("%5.1f%%  %s" % (100 * c / n, name))
print("%d samples" % n)
PY
