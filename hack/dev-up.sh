#!/usr/bin/env bash
# Dev control plane: builds every binary, then starts the kube emulator with deploy/crds/ loaded, writes
# .dev/kubeconfig, starts every daemon listed in e2e/devcluster/src/lib.rs (DAEMONS), seeds tenant-acme,
# prints what to run next, and stays in the foreground until Ctrl-C. Extra arguments go to `devcluster`
# (e.g. --port 6443, --persist, --check, --exit-after 30).
#
#   hack/dev-up.sh --real-api   the same plane on kube-apiserver + etcd + kube-controller-manager
#                               (docs/real-api.md), built first by hack/install-kube.sh when missing
#                               (minutes the first time on a machine; a hash check afterwards)
set -euo pipefail
cd "$(dirname "$0")/.."
# The simulated data plane runs real PostgreSQL 15 and barman-cloud, MariaDB and etcd (docs/dataplane.md).
hack/install-dataplane.sh
for a in "$@"; do
  if [[ $a == --real-api && -z ${COZY_KUBE_BIN:-} ]]; then
    COZY_KUBE_BIN=$(hack/install-kube.sh | tail -n1)
    export COZY_KUBE_BIN
  fi
done
cargo build --quiet --workspace --bins
target="${CARGO_TARGET_DIR:-target}"
exec "$target/debug/devcluster" "$@"
