#!/usr/bin/env bash
# The KServe gateway's cost beside the binary protocol: Triton's stock
# perf_analyzer drives `baton serve` over HTTP and over gRPC at a fixed
# rate (Poisson arrivals, as `baton load` draws them), and `baton load`
# drives it over the binary protocol at the same rate, on one scenario
# (perf/scenarios/kserve-one-model.toml); then `baton sim` on the same
# file, rate and seed. Writes
# perf/results/kserve.txt. Run on an otherwise idle machine (`uptime`).
#
# perf_analyzer comes from PyPI's tritonclient 2.41.0 wheel (the last whose
# wheel carries the binary; PyPI's `perf-analyzer` package is an empty
# placeholder). It links libb64 (Debian's libb64-0d, downloaded and unpacked
# here, not installed) and libcudart.so.12 (PyPI's nvidia-cuda-runtime-cu12;
# no GPU is used). Everything lands under target/perf-analyzer.
set -euo pipefail
cd "$(dirname "$0")/../.."
rate=${RATE:-500}
secs=${SECS:-10}
env_dir=target/perf-analyzer
if [ ! -x "$env_dir/venv/bin/perf_analyzer" ]; then
  python3 -m venv "$env_dir/venv"
  "$env_dir/venv/bin/pip" install -q "tritonclient[all]==2.41.0" nvidia-cuda-runtime-cu12
fi
if [ ! -e "$env_dir/lib/libb64.so.0d" ]; then
  tmp=$(mktemp -d)
  (cd "$tmp" && { apt-get download libb64-0d >/dev/null 2>&1 || { apt-get update -qq && apt-get download libb64-0d >/dev/null; }; } && dpkg-deb -x libb64-0d_*.deb x)
  mkdir -p "$env_dir/lib"
  cp "$tmp"/x/usr/lib/x86_64-linux-gnu/libb64.so.0d "$env_dir/lib/"
  rm -rf "$tmp"
fi
cudart=$(dirname "$(find "$env_dir/venv" -name 'libcudart.so.12' | head -1)")
export LD_LIBRARY_PATH="$PWD/$env_dir/lib:$cudart"
cargo build --release -p baton-tools
scenario=perf/scenarios/kserve-one-model.toml
serve_log=$(mktemp)
target/release/baton serve --scenario "$scenario" --listen 127.0.0.1:0 \
  --http-listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --duration 600 2>"$serve_log" >/dev/null &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
until grep -q "^baton serve:" "$serve_log"; do sleep 0.1; done
addr() { grep "$1" "$serve_log" | head -1 | sed 's/.* on //'; }
binary=$(addr "^baton serve:"); http=$(addr "gateway: http"); grpc=$(addr "gateway: grpc")
pa() {
  "$env_dir/venv/bin/perf_analyzer" -m ResNet50 -u "$1" -i "$2" --request-rate-range "$rate" \
    --measurement-interval $((secs * 1000)) --percentile 99 --max-threads 32 --request-distribution poisson 2>&1 | sed -n '/^Request Rate/,$p'
}
out=perf/results/kserve.txt
{
  echo "# perf/scripts/kserve.sh, $(date -u +%Y-%m-%d), $(nproc) cores, rate $rate r/s; uptime before: $(uptime)"
  echo "## perf_analyzer, KServe v2 over HTTP"
  pa "$http" http
  echo "## perf_analyzer, KServe v2 over gRPC"
  pa "$grpc" grpc
  echo "## baton load, the binary protocol"
  target/release/baton load "$scenario" --target "$binary" --rate "$rate" --duration "$secs"
  echo "## baton sim, the same file, rate and seed"
  target/release/baton sim "$scenario" --rate "$rate" 2>&1
} > $out
cat $out
