#!/usr/bin/env bash
# Installs the tools the checks need beyond the data plane: promtool, from Debian's `prometheus`
# package (the monitoring checks in e2e/monitoring-checks run it). Does nothing when promtool is on
# PATH; otherwise needs root (or sudo) and Debian's package archive. The package is large (the
# Prometheus server comes with it); only promtool is used.
set -euo pipefail
command -v promtool >/dev/null && exit 0
echo "installing prometheus (for promtool; apt-get)" >&2
sudo=()
[[ $(id -u) == 0 ]] || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v promtool >/dev/null || { echo "the prometheus package did not install promtool" >&2; exit 1; }
