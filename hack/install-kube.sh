#!/usr/bin/env bash
# Builds the pinned Kubernetes control plane that the real-API test backend runs
# (COZY_E2E_API=real, docs/real-api.md): kube-apiserver, kube-controller-manager and etcd,
# from the Go module in hack/kube (its go.mod pins every version; go.sum is committed).
#
# The binaries go to a cache outside the work tree:
#   ${COZY_KUBE_CACHE:-~/.cache/cozy-backups/kube}/<kubernetes version>/bin
# The Go build cache of this build is kept beside them (…/kube/go-build), so its disk cost is
# measurable and removable on its own; the module downloads go to the machine's module cache.
# Nothing is built when the binaries are there and were built from the same go.sum.
#
# Prints the directory of the binaries as its last line, so that
#   bin=$(hack/install-kube.sh | tail -n1)
# works. Needs Go 1.26 and the Go module proxy.
set -euo pipefail
cd "$(dirname "$0")/kube"

export GOTOOLCHAIN=local
mod_version() { awk -v m="$1" '$1 == "require" { $1 = "" ; $0 = $0 } $1 == m && $2 ~ /^v/ { print $2; exit }' go.mod; }
kube_version=$(mod_version k8s.io/kubernetes)
etcd_version=$(mod_version go.etcd.io/etcd/server/v3)
[[ -n $kube_version && -n $etcd_version ]] || { echo "hack/kube/go.mod pins no kubernetes or etcd version" >&2; exit 1; }

cache=${COZY_KUBE_CACHE:-$HOME/.cache/cozy-backups/kube}
bin=$cache/$kube_version/bin
stamp=$bin/.built-from
want=$(sha256sum go.mod go.sum etcd/main.go | sha256sum | cut -d' ' -f1)

echo "kubernetes $kube_version (kube-apiserver, kube-controller-manager), etcd $etcd_version" >&2
if [[ -x $bin/kube-apiserver && -x $bin/kube-controller-manager && -x $bin/etcd && -f $stamp && $(cat "$stamp") == "$want" ]]; then
  echo "already built in $bin" >&2
  echo "$bin"
  exit 0
fi

minor=${kube_version#v1.}
minor=${minor%%.*}
version_pkg=k8s.io/component-base/version
ldflags="-s -w -X $version_pkg.gitVersion=$kube_version -X $version_pkg.gitMajor=1 -X $version_pkg.gitMinor=$minor -X $version_pkg.gitTreeState=clean -X $version_pkg.buildDate=1970-01-01T00:00:00Z"

export GOCACHE=$cache/go-build
export CGO_ENABLED=0
tmp=$cache/$kube_version/bin.tmp.$$
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
echo "building into $bin (Go build cache $GOCACHE); a cold build takes tens of minutes on 2 cores" >&2
start=$SECONDS
go build -trimpath -ldflags="$ldflags" -o "$tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  ./etcd
echo "$want" >"$tmp/.built-from"
rm -rf "$bin"
mv "$tmp" "$bin"
trap - EXIT
echo "built in $((SECONDS - start)) s" >&2
"$bin/kube-apiserver" --version >&2
"$bin/etcd" --version 2>&1 | head -n1 >&2
du -sh "$bin" "$GOCACHE" >&2
echo "$bin"
