#!/usr/bin/env bash
# backup-runner benchmark (not a test), through the MariaDB driver, the simulated operator
# completing each backup at once, asserting nothing:
#  * burst: 1,000 BackupJobs created at once across 100 namespaces; jobs/s, creation → Succeeded
#    latency (median, p99) and the runners' RSS, for one replica (the baseline) and three replicas
#    with the lease-server, in the same invocation, and the ratios;
#  * paced: open-loop arrivals at 20, 50 and 100 jobs/s for 15 s each, one replica; per rate the
#    latency from each job's scheduled arrival to Succeeded (median, p99, max).
# Pass --debug for an unoptimised build (faster to build, slower to run); --paced for the paced
# measurement alone.
set -euo pipefail
cd "$(dirname "$0")/../../.."
profile=(--release)
dir=release
mode=()
for a in "$@"; do
  case $a in
    --debug) profile=(); dir=debug ;;
    --paced) mode=(paced) ;;
    *) echo "usage: $0 [--debug] [--paced]" >&2; exit 2 ;;
  esac
done
cargo build "${profile[@]}" -p backup-runner -p strategy-renderer -p credentials-projector \
  -p lease-server -p operator-sims --bins
cargo build "${profile[@]}" -p bench --bin backup-runner-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/backup-runner-bench" "${mode[@]}"
