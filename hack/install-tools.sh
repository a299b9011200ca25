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
# shellcheck source=hack/lib/apt-install.sh
source "$(dirname "$0")/lib/apt-install.sh"
apt_install "${missing[@]}"
command -v promtool >/dev/null || { echo "the prometheus package did not install promtool" >&2; exit 1; }
