#!/usr/bin/env bash
# backup-runner benchmark (not a test): 1,000 BackupJobs across 100 namespaces through the MariaDB
# driver, the simulated operator completing each backup at once; jobs/s, creation → Succeeded
# latency (median, p99) and the runners' RSS, for one replica (the baseline) and three replicas
# with the lease-server, in the same invocation; prints the figures and the ratios, asserts nothing.
# Pass --debug for an unoptimised build (faster to build, slower to run).
set -euo pipefail
cd "$(dirname "$0")/../../.."
profile=(--release)
dir=release
if [[ "${1:-}" == "--debug" ]]; then profile=(); dir=debug; fi
cargo build "${profile[@]}" -p backup-runner -p strategy-renderer -p credentials-projector \
  -p lease-server -p operator-sims --bins
cargo build "${profile[@]}" -p bench --bin backup-runner-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/backup-runner-bench"
