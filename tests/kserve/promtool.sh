#!/usr/bin/env bash
# Prints the path of a promtool, fetching Debian's (package `prometheus`)
# into target/tools the first time: the package is downloaded and unpacked,
# not installed, so no service starts and nothing outside target/ changes.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
if command -v promtool >/dev/null; then command -v promtool; exit 0; fi
out="$root/target/tools/promtool"
if [ -x "$out" ]; then echo "$out"; exit 0; fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
if ! apt-get download prometheus >/dev/null 2>&1; then
  apt-get update -qq >/dev/null
  apt-get download prometheus >/dev/null
fi
dpkg-deb -x prometheus_*.deb unpacked
mkdir -p "$(dirname "$out")"
cp unpacked/usr/bin/promtool "$out"
echo "$out"
