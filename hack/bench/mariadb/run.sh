#!/usr/bin/env bash
# MariaDB data-plane benchmark (not a test): a ~100 MB MariaDB table backed up through a BackupJob
# and restored into a copy through a RestoreJob, against the same `mariadb-dump | gzip`, upload,
# download and `gunzip | mariadb` done by hand in the same invocation (the baseline); prints the
# times, the ratios and the daemons' RSS, asserts nothing. Needs Debian's mariadb-server and
# mariadb-client (hack/install-dataplane.sh). MARIADB_BENCH_ROUNDS sets the rounds (default 2).
# Pass --debug for an unoptimised build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
hack/install-dataplane.sh
profile=(--release)
dir=release
if [[ "${1:-}" == "--debug" ]]; then profile=(); dir=debug; fi
cargo build "${profile[@]}" -p restore-orchestrator -p backup-runner -p strategy-renderer \
  -p credentials-projector -p operator-sims --bins
cargo build "${profile[@]}" -p bench --bin mariadb-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/mariadb-bench"
