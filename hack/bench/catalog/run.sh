#!/usr/bin/env bash
# Catalog sync benchmark (not a test): the backup-runner's leader re-creates 10,000 Backups (10
# namespaces of 1,000) from their signed records in the simulated S3 server into an empty cluster
# (the in-process emulator); the baseline in the same invocation creates the same 10,000 Backups
# with a plain sequential client loop. Prints the sync's wall time, Backups/s, the ratio to the
# baseline, the S3 and API requests the runner made and its RSS; asserts nothing.
# Pass --debug for an unoptimised build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
profile=(--release)
dir=release
if [[ "${1:-}" == "--debug" ]]; then profile=(); dir=debug; fi
cargo build "${profile[@]}" -p backup-runner --bin backup-runner
cargo build "${profile[@]}" -p strategy-renderer --bin strategy-renderer
cargo build "${profile[@]}" -p operator-sims --bin operator-sims
cargo build "${profile[@]}" -p bench --bin catalog-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/catalog-bench"
