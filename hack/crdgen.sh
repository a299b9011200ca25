#!/usr/bin/env bash
# Regenerates deploy/crds/ from the Rust types in libs/api, then refreshes the Helm chart's copies
# of the CRDs it installs (deploy/helm/cozy-backups/files/crds: those deploy/crds/Kustomization
# lists; a deploy-checks test keeps them identical).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo run --quiet -p crdgen -- --out deploy/crds "$@"
chart_crds=deploy/helm/cozy-backups/files/crds
rm -f "$chart_crds"/*.yaml
sed -n 's/^ *- \(.*\.yaml\)$/\1/p' deploy/crds/Kustomization | while read -r f; do
  cp "deploy/crds/$f" "$chart_crds/$f"
done
