#!/bin/sh
# Input fetch over TCP vs one-sided READs on the loopback fabric, side by
# side in one run: `baton demo` (engine under `baton load`, then `baton sim`
# on the same file, rate and seed) on Table 4's ResNet50 at 4,000 r/s for
# 10 s, once per transport. All roles in one process, 2 cores: this shows
# what the data path removes (the fetch round trip), not a NIC's bandwidth.
# Writes perf/results/rdma_loopback.txt.
set -e
cd "$(dirname "$0")/../.."
cargo build --release -p baton-tools --bin baton
file=perf/scenarios/table4-resnet50-uniform.toml
out=perf/results/rdma_loopback.txt
{
  echo "# perf/scripts/rdma_loopback.sh, $(date -u +%Y-%m-%d), commit $(git rev-parse --short HEAD), load average $(cut -d' ' -f1 /proc/loadavg)"
  for t in tcp loopback; do
    echo "## transport $t"
    if [ $t = tcp ]; then extra=""; else extra="--transport rdma --rdma-device loopback"; fi
    target/release/baton demo --scenario $file --rate 4000 --duration 10 $extra 2>/dev/null
  done
} > $out
cat $out
