#!/usr/bin/env bash
# apidef-restarter benchmark (not a test): hashing 100 and 1,000 ApplicationDefinitions with ~30 KB
# openAPISchemas, and the latency from the end of the debounce window to the patched annotation with
# the real daemon against the in-process emulator. Pass --debug for an unoptimised build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
profile=(--release)
dir=release
if [[ "${1:-}" == "--debug" ]]; then profile=(); dir=debug; fi
cargo build "${profile[@]}" -p apidef-restarter --bin apidef-restarter
cargo build "${profile[@]}" -p bench --bin apidef-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/apidef-bench"
