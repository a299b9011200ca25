#!/usr/bin/env bash
# Lease-server benchmark (not a test): the real lease-server binary against the in-process kube
# emulator, 1,000 leases over 50 clients; prints grants/s and renewals/s with p50/p99 latency and
# the server's RSS. Pass --debug for an unoptimised build; other arguments go to the benchmark
# (--clients N, --leases N, --seconds S).
set -euo pipefail
cd "$(dirname "$0")/../../.."
profile=(--release)
dir=release
if [[ "${1:-}" == "--debug" ]]; then profile=(); dir=debug; shift; fi
cargo build "${profile[@]}" -p lease-server --bin lease-server
cargo build "${profile[@]}" -p bench --bin lease-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/lease-bench" "$@"
