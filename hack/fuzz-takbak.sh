#!/usr/bin/env bash
# Fuzz the TAKBAK1 archive reader with cargo-fuzz (libFuzzer) on the nightly toolchain.
#
# Usage: hack/fuzz-takbak.sh [--seconds N]     (default 60; CI uses a short run)
#
# Seeds the corpus with the committed reference vector. Installs cargo-fuzz if it is missing.
set -euo pipefail
seconds=60
while [[ $# -gt 0 ]]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    *) echo "usage: $0 [--seconds N]" >&2; exit 2 ;;
  esac
done
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz_dir="$root/libs/takbak/fuzz"
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
corpus="$fuzz_dir/corpus/archive_reader"
mkdir -p "$corpus"
cp "$root/libs/takbak/tests/vectors/reference.takbak" "$corpus/reference.takbak"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target-takbak-fuzz}"
cd "$fuzz_dir"
exec cargo +nightly fuzz run archive_reader "$corpus" -- -max_total_time="$seconds" -rss_limit_mb=512 -max_len=65536
