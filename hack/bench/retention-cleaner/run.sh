#!/usr/bin/env bash
# retention-cleaner benchmark (not a test): one sweep over 10,000 successful Backups in 500 Plans
# (50 namespaces), keepLast 15 of 20 each, so 2,500 deletions with their Events, by the real daemon
# against the in-process emulator; the baseline in the same invocation deletes the same 2,500
# Backups with a plain sequential client loop. Prints the decision time, the sweep's wall time,
# deletions/s, the ratio to the baseline and the daemon's RSS; asserts nothing.
# Pass --debug for an unoptimised build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
profile=(--release)
dir=release
if [[ "${1:-}" == "--debug" ]]; then profile=(); dir=debug; fi
cargo build "${profile[@]}" -p retention-cleaner --bin retention-cleaner
cargo build "${profile[@]}" -p bench --bin retention-cleaner-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/retention-cleaner-bench"
