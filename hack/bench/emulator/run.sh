#!/usr/bin/env bash
# Emulator benchmark (not a test): 10,000 ConfigMaps across 1,000 namespaces and 50 concurrent watchers;
# prints list latency, watch fan-out latency and the emulator's RSS. Pass --debug for an unoptimised build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
profile=(--release)
dir=release
if [[ "${1:-}" == "--debug" ]]; then profile=(); dir=debug; fi
cargo build "${profile[@]}" -p kube-emulator --bin kube-emulator --example emulator-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/examples/emulator-bench"
