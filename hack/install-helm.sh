#!/usr/bin/env bash
# Builds the pinned helm that the chart tests run (deploy/helm/cozy-backups, docs/helm.md), from
# the Go module in hack/helm (its go.mod pins helm and every dependency; go.sum is committed).
#
# The binary goes to a cache outside the work tree:
#   ${COZY_HELM_CACHE:-~/.cache/cozy-backups/helm}/<helm version>/bin/helm
# helm is built with the same flags (-trimpath, CGO_ENABLED=0) and into the same Go build cache as
# the control plane (hack/install-kube.sh, ~/.cache/cozy-backups/kube/go-build; override with
# COZY_HELM_GOCACHE): both pin the k8s.io modules at the same versions, so the packages that the
# control plane's build compiled are not compiled again.
# Nothing is built when the binary is there and was built from the same go.mod and go.sum.
#
# Prints the path of the binary as its last line, so that
#   helm=$(hack/install-helm.sh | tail -n1)
# works. Needs Go 1.26 and the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")/helm"

export GOTOOLCHAIN=local
helm_module=helm.sh/helm/v4
helm_version=$(awk -v m="$helm_module" '$1 == "require" { $1 = "" ; $0 = $0 } $1 == m && $2 ~ /^v/ { print $2; exit }' go.mod)
[[ -n $helm_version ]] || { echo "hack/helm/go.mod pins no $helm_module version" >&2; exit 1; }

cache=${COZY_HELM_CACHE:-$HOME/.cache/cozy-backups/helm}
bin=$cache/$helm_version/bin
stamp=$bin/.built-from
want=$(sha256sum go.mod go.sum | sha256sum | cut -d' ' -f1)

echo "helm $helm_version ($helm_module)" >&2
if [[ -x $bin/helm && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  echo "already built in $bin" >&2
  echo "$bin/helm"
  exit 0
fi

# helm's version string: the module version, as a release build prints it.
ldflags="-s -w -X $helm_module/internal/version.version=$helm_version -X $helm_module/internal/version.gitTreeState=clean"

export GOCACHE=${COZY_HELM_GOCACHE:-$HOME/.cache/cozy-backups/kube/go-build}
export CGO_ENABLED=0
mkdir -p "$cache/$helm_version"
tmp=$cache/$helm_version/bin.tmp.$$
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
echo "building into $bin (Go build cache $GOCACHE); a cold build takes a few minutes on 2 cores" >&2
start=$SECONDS
go build -trimpath -ldflags="$ldflags" -o "$tmp/helm" "$helm_module/cmd/helm"
echo "$want" >"$tmp/.built-from"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "built in $((SECONDS - start)) s" >&2
"$bin/helm" version >&2
du -sh "$bin" >&2
echo "$bin/helm"
