#!/usr/bin/env bash
# The project's one test command (README "Test it"; CI runs exactly this through .ci/run):
#   1. cargo fmt --check
#   2. cargo clippy --workspace --all-targets -D warnings
#   3. a short fuzz run of the TAKBAK1 archive reader (skip with SKIP_FUZZ=1)
#   4. doc tests, then every unit, integration and end-to-end test with cargo-nextest,
#      ending with nextest's summary line.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

if [[ "${SKIP_FUZZ:-0}" == "1" ]]; then
  step "fuzz: skipped (SKIP_FUZZ=1)"
elif ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  step "fuzz: skipped, no nightly toolchain on this machine (cargo-fuzz needs one)"
else
  step "fuzz the TAKBAK1 reader (${FUZZ_SECONDS:-20}s)"
  hack/fuzz-takbak.sh --seconds "${FUZZ_SECONDS:-20}"
fi

step "doc tests"
cargo test --workspace --doc --locked --quiet

step "unit, integration and end-to-end tests"
cargo nextest run --workspace --locked --profile "${NEXTEST_PROFILE:-default}"
