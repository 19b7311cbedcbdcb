#!/bin/sh
# glet-shift in the simulator, beside the engine's figures in
# perf/results/engine_nexus_glet.txt: goodput planned once and re-planned
# every 2 s on the files' own 60 s, and on the 30 s the engine ran, the
# simulator's bad rate at the rates both goodput searches returned (its
# own and the engine's). Writes perf/results/glet_shift_sim.txt.
set -e
cd "$(dirname "$0")/../.."
cargo build --release -q -p baton-tools --bin baton
baton=target/release/baton
out=perf/results/glet_shift_sim.txt
dir=perf/scenarios
# 30 s copies beside the originals (their traces and profiles are relative paths).
trap 'rm -f $dir/.glet-shift-30s-$$*.toml' EXIT
for f in glet-shift glet-shift-epochs; do
  sed 's/^duration_s = 60$/duration_s = 30/' $dir/$f.toml > $dir/.glet-shift-30s-$$-$f.toml
done
json() { python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"; }
{
  echo "# perf/scripts/glet_shift_sim.sh, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD)"
  echo "file seconds goodput_rps"
  for f in glet-shift glet-shift-epochs; do
    echo "$f 60 $($baton sim $dir/$f.toml --find-goodput --json 2>/dev/null | json goodput_rps)"
    echo "$f 30 $($baton sim $dir/.glet-shift-30s-$$-$f.toml --find-goodput --json 2>/dev/null | json goodput_rps)"
  done
  echo "file seconds rate_rps bad_rate"
  # The rates the searches returned in engine_nexus_glet.txt: the simulator's, then the engine's.
  grep '^glet-shift' perf/results/engine_nexus_glet.txt | while read -r name _ _ _ _ sim _ _ _ engine _; do
    f=${name%%/*}
    for r in $sim $engine; do
      bad=$($baton sim $dir/.glet-shift-30s-$$-$f.toml --rate "$r" --json 2>/dev/null | json bad_rate)
      echo "$f 30 $r $bad"
    done
  done
} > $out
cat $out
