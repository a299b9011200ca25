#!/usr/bin/env bash
# strategy-renderer benchmark (not a test): over 50 fresh control planes (RUNS=n to change), the time
# from BucketClaim status.bucketName being set to the last default object present, and from a
# configuration edit to its effect, printed next to upstream's documented behaviour.
# Pass --debug for an unoptimised build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
profile=(--release)
dir=release
if [[ "${1:-}" == "--debug" ]]; then profile=(); dir=debug; fi
cargo build "${profile[@]}" -p strategy-renderer --bin strategy-renderer
cargo build "${profile[@]}" -p bench --bin strategy-renderer-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/strategy-renderer-bench"
