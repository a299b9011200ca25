#!/usr/bin/env bash
# credentials-projector benchmark (not a test): 1,000 tenant namespaces holding copies; time from a
# source rotation to the last copy updated; time from BackupJob creation to CredentialsProjected=True
# (median and p99 over 500 jobs); the projector's RSS. Prints the figures; asserts nothing.
# Pass --debug for an unoptimised build (faster to build, slower to run).
set -euo pipefail
cd "$(dirname "$0")/../../.."
profile=(--release)
dir=release
if [[ "${1:-}" == "--debug" ]]; then profile=(); dir=debug; fi
cargo build "${profile[@]}" -p credentials-projector --bin credentials-projector
cargo build "${profile[@]}" -p bench --bin credentials-projector-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/credentials-projector-bench"
