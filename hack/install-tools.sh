#!/usr/bin/env bash
# Installs the tools the test run checks the shipped artifacts with, when they are missing:
# buildah (the images, hack/images.sh) and promtool from Debian's `prometheus` package (the
# monitoring checks in e2e/monitoring-checks; the package brings the Prometheus server too, only
# promtool is used). Does nothing when they are present; otherwise needs root (or sudo) and
# Debian's package archive.
set -euo pipefail
missing=()
command -v buildah >/dev/null || missing+=(buildah)
command -v promtool >/dev/null || missing+=(prometheus)
((${#missing[@]} == 0)) && exit 0
echo "installing ${missing[*]} (apt-get)" >&2
sudo=()
[[ $(id -u) == 0 ]] || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
command -v promtool >/dev/null || { echo "the prometheus package did not install promtool" >&2; exit 1; }
