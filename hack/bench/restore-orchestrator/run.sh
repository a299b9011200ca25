#!/usr/bin/env bash
# restore-orchestrator benchmark (not a test): a point-in-time restore of a small PostgreSQL
# database through a RestoreJob, against the same restore done by hand with the barman-cloud
# commands in the same invocation (the baseline); prints both medians, the ratio and the
# orchestrator's RSS, asserts nothing. Needs PostgreSQL 15 and barman-cloud
# (hack/install-dataplane.sh). Pass --debug for an unoptimised build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
hack/install-dataplane.sh
profile=(--release)
dir=release
if [[ "${1:-}" == "--debug" ]]; then profile=(); dir=debug; fi
cargo build "${profile[@]}" -p restore-orchestrator -p backup-runner -p strategy-renderer \
  -p credentials-projector -p operator-sims --bins
cargo build "${profile[@]}" -p bench --bin restore-orchestrator-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/restore-orchestrator-bench"
