# Sourced by the engine-tiny harnesses (engine_profile.sh, load_cpu.sh):
# `start_tiny_server BATON PORT` serves perf/scenarios/engine-tiny.toml with
# BATON on core 0 and sets `scenario` and `server`; the server is stopped
# when the script exits, and the paths in `cleanup` are removed.
here=$(cd "$(dirname "$0")/.." && pwd)
scenario=$here/scenarios/engine-tiny.toml
cleanup=()
start_tiny_server() {
  "$1" serve --scenario "$scenario" --listen "127.0.0.1:$2" --cores 0 > /dev/null 2>&1 &
  server=$!
  trap 'kill -TERM $server 2>/dev/null || true; rm -f "${cleanup[@]}"' EXIT
  sleep 1
}
