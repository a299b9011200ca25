#!/usr/bin/env bash
# Regenerates deploy/crds/ from the Rust types in libs/api.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --quiet -p crdgen -- --out deploy/crds "$@"
