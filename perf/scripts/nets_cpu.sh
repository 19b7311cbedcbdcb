#!/bin/sh
# The whole networks on the CPU (issue: full-size models on the GPU, its
# CPU side): `baton profile --executor cpu --nets` — ResNet-50 on 224x224
# images, BERT-base on 128 tokens and the ResNet-50-shaped supernet's whole
# network, FP32, one thread pinned to core 1, l(b) for b = 1..4 (median of
# 3 runs after 3 warm-ups), with each network's weights, multiply-
# accumulates and the arithmetic rate reached; then the scenario it wrote
# under `baton sim` at its own rate. Writes perf/results/nets_cpu.txt.
set -e
cd "$(dirname "$0")/../.."
cargo build --release -p baton-tools --bin baton
out=perf/results/nets_cpu.txt
scenario=$(mktemp)
{
  echo "# perf/scripts/nets_cpu.sh, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), load average $(cut -d' ' -f1 /proc/loadavg), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  echo "## baton profile --executor cpu --nets --max-batch 4 --core 1"
  target/release/baton profile --executor cpu --nets --max-batch 4 --core 1 --out "$scenario" 2>&1
  echo "## the written scenario"
  cat "$scenario"
  echo "## baton sim on it"
  target/release/baton sim "$scenario" 2>&1
} > $out
rm -f "$scenario"
cat $out
