#!/usr/bin/env bash
# Symphony's own dispatcher benchmark on this machine, beside `stress`:
#   perf/scripts/symphony_stress.sh RUN_RANKMT MODELS GPUS CORES RATE...
# RUN_RANKMT is nexuslb's `tools/bench_dispatcher/run_rankmt` (public
# repository abcdabcd987/nexuslb; this project does not ship it: build it
# with `cmake -DUSE_GPU=OFF -DUSE_TENSORFLOW=OFF` and `make run_rankmt`,
# which needs Debian's cmake, libboost-system-dev, libboost-filesystem-dev,
# libprotobuf-dev, protobuf-compiler, libgoogle-glog-dev, libgflags-dev,
# libgtest-dev, libyaml-cpp-dev, libopencv-dev and libibverbs-dev).
# For each RATE it writes the workload `stress` runs (perf/scenarios/
# stress-64.toml): MODELS models of l(b) = 5,204 + 1,082 b us, a 100 ms
# SLO, Poisson arrivals split equally, GPUS fake GPUs, 3 s warm-up, 10 s
# measured, `multithread: false` (one event loop holds the generator, the
# ranks, the models and the GPUs), runs it pinned to CORES (taskset -c) and
# prints its bad rate over all requests (noreply, dropped and timed out:
# its TOTAL line's avg) and over the worst model. `stress` passes a rate at
# <= 1% bad over all requests. Check `uptime` first.
set -euo pipefail
[ $# -ge 5 ] || { echo "usage: $0 RUN_RANKMT MODELS GPUS CORES RATE..." >&2; exit 2; }
bin=$1 models=$2 gpus=$3 cores=$4
shift 4
[ -x "$bin" ] || { echo "symphony_stress: $bin is not an executable" >&2; exit 2; }
# Its model database: none of its models, only the sleep profile named
# in each model's framework.
root=$(mktemp -d /tmp/symphony-stress.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/store" "$root/db" "$root/profiles"
printf 'models: []\nshare_prefix: []\ntf_share: []\n' > "$root/db/model_db.yml"
echo "# Symphony's run_rankmt ($bin): $models models, $gpus GPUs, cores $cores, warm-up 3 s, measured 10 s"
for rate in "$@"; do
  per=$(python3 -c "print($rate / $models)")
  yaml=$({
    echo "seed: 0xabcdabcd987"
    echo "multithread: false"
    echo "dump_schedule: false"
    echo "gpus: $gpus"
    echo "models:"
    for ((m = 0; m < models; m++)); do
      echo "- framework: sleep#1082,5204,0,0"
      echo "  model: resnet_$m"
      echo "  slo: 100"
      echo "  gap: exp"
      echo "  warmup: [{duration: 3, rps: $per}]"
      echo "  bench: [{duration: 10, rps: $per}]"
      echo "  cooldown: []"
    done
  })
  total=$(taskset -c "$cores" "$bin" --model_root "$root" <<< "$yaml" 2>&1 | grep -E 'TOTAL .*\(avg' || true)
  if [ -z "$total" ]; then
    echo "  rate $rate r/s: no TOTAL line (the run failed)"
  else
    echo "  rate $rate r/s: ${total#*] }"
  fi
done
