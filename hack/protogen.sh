#!/usr/bin/env bash
# Regenerates the checked-in gRPC code of the lease service (libs/lease/src/gen/) from
# proto/lease/v1/lease.proto with protox + tonic-prost-build (no protoc needed). The test
# `cargo test -p lease --test integration protogen::` fails whenever the checked-in code is stale.
set -euo pipefail
cd "$(dirname "$0")/.."
LEASE_PROTOGEN_WRITE=1 cargo test -p lease --test integration --quiet protogen::
echo "regenerated libs/lease/src/gen/cozy.lease.v1.rs"
