#!/usr/bin/env bash
# Scale benchmark (not a test): every daemon's release binary against the kube emulator (release
# binary, started from a snapshot) holding 10,000 relevant objects across 1,000 namespaces. Per
# daemon: process start → /ready, start → caught up (its first pass over the objects done), CPU and
# API requests over 60 idle seconds, RSS after catching up and peak, the emulator's LIST / watch-open
# time and RSS, and a minimal client's LIST+WATCH of the same objects as the baseline, with the
# ratio. Prints the figures and a Markdown table; asserts nothing.
#
# Usage: hack/bench/scale/run.sh [--only DAEMON[,DAEMON…]] [--objects N] [--idle-seconds S] [--debug]
#   --only          strategy-renderer, credentials-projector, apidef-restarter, backup-runner,
#                   restore-orchestrator, retention-cleaner (default: all, each in its own process)
#   --objects N     relevant objects (default 10000; ten per namespace)
#   --idle-seconds  the idle window (default 60)
#   --debug         an unoptimised build (faster to build, slower to run)
set -euo pipefail
cd "$(dirname "$0")/../../.."
profile=(--release)
dir=release
args=()
for a in "$@"; do
  if [[ "$a" == "--debug" ]]; then profile=(); dir=debug; else args+=("$a"); fi
done
cargo build "${profile[@]}" -p strategy-renderer -p credentials-projector -p apidef-restarter \
  -p backup-runner -p restore-orchestrator -p retention-cleaner -p kube-emulator --bins
cargo build "${profile[@]}" -p bench --bin scale-bench
target="${CARGO_TARGET_DIR:-target}"
exec "$target/$dir/scale-bench" "${args[@]}"
