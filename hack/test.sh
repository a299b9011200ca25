#!/usr/bin/env bash
# The project's one test command (README "Test it"; CI runs exactly this through .ci/run):
#   0. installs what the tests run when it is missing (hack/install-dataplane.sh, hack/install-tools.sh)
#   1. cargo fmt --check
#   2. cargo clippy --workspace --all-targets -D warnings
#   3. a short fuzz run of the TAKBAK1 archive reader (skip with SKIP_FUZZ=1)
#   4. the images: every binary static, FROM scratch, run in its own root (skip with SKIP_IMAGES=1;
#      skipped without root or buildah unless IMAGES_REQUIRED=1)
#   5. doc tests, then every unit, integration and end-to-end test with cargo-nextest,
#      ending with nextest's summary line. The Helm chart's tests need the pinned helm
#      (hack/install-helm.sh): built in the background from the start of the run, only when its
#      cache lacks it, and waited for before the tests.
#   5b. the real-API suites (hack/test-real-api.sh, docs/real-api.md): named end-to-end tests of
#      every daemon on kube-apiserver + etcd; the control plane is built (hack/install-kube.sh) in
#      the background from the start of the run, only when its cache lacks it (skip with
#      SKIP_REAL_API=1)
#   6. the unused-rule report: every RBAC grant in deploy/*/rbac.yaml was needed by a request its
#      daemon made in the end-to-end tests, on the emulator or in the real-API suites (their
#      records come from kube-apiserver's audit log), or says why it stays (docs/security.md);
#      then nextest's summary line again, so that it is the last line.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> [%d s] %s\n' "$SECONDS" "$*"; }

step "tools: PostgreSQL 15, barman-cloud, buildah (installed when missing)"
hack/install-dataplane.sh
hack/install-tools.sh

# The real control plane takes minutes to build the first time on a machine (a no-op once
# cached in ~/.cache/cozy-backups/kube): start it now, at low priority, and wait for it before the
# real-API suites.
kube_build_log="$(mktemp)"
if [[ "${SKIP_REAL_API:-0}" != "1" ]]; then
  step "real control plane: building in the background when missing (log: $kube_build_log)"
  nice -n 10 hack/install-kube.sh >"$kube_build_log" 2>&1 &
  kube_build_pid=$!
fi
# helm, for the chart's tests (deploy/helm/cozy-backups): the same, a no-op once cached in
# ~/.cache/cozy-backups/helm.
helm_build_log="$(mktemp)"
step "helm: building in the background when missing (log: $helm_build_log)"
nice -n 10 hack/install-helm.sh >"$helm_build_log" 2>&1 &
helm_build_pid=$!

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

if [[ "${SKIP_FUZZ:-0}" == "1" ]]; then
  step "fuzz: skipped (SKIP_FUZZ=1)"
elif ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  step "fuzz: skipped, no nightly toolchain on this machine (cargo-fuzz needs one)"
else
  step "fuzz the TAKBAK1 reader (${FUZZ_SECONDS:-20}s)"
  hack/fuzz-takbak.sh --seconds "${FUZZ_SECONDS:-20}"
fi

if [[ "${SKIP_IMAGES:-0}" == "1" ]]; then
  step "images: skipped (SKIP_IMAGES=1)"
elif [[ $(id -u) != 0 ]] || ! command -v buildah >/dev/null; then
  if [[ "${IMAGES_REQUIRED:-0}" == "1" ]]; then
    echo "IMAGES_REQUIRED=1 but this run is not root or has no buildah" >&2
    exit 1
  fi
  step "images: skipped (needs root and buildah; hack/install-tools.sh installs buildah)"
else
  step "images: static binaries FROM scratch, each run in its own root (hack/images.sh --check)"
  hack/images.sh --check --profile image-check
fi

step "doc tests"
cargo test --workspace --doc --locked --quiet

step "helm: waiting for hack/install-helm.sh"
if ! wait "$helm_build_pid"; then
  cat "$helm_build_log"
  echo "hack/install-helm.sh failed" >&2
  exit 1
fi
cat "$helm_build_log"
COZY_HELM_BIN=$(tail -n1 "$helm_build_log")
export COZY_HELM_BIN

step "unit, integration and end-to-end tests"
# Each harness records its daemons' requests here (target/rbac-usage/<component>/; the real-API
# suites below add theirs as real.*.jsonl); start empty so that the report below sees this run only.
rm -rf "${CARGO_TARGET_DIR:-target}/rbac-usage"
# Library, binary and test targets; the benchmark examples are compiled by clippy above, not
# linked again here. The output is kept so that nextest's summary line can end the run.
nextest_out="$(mktemp)"
trap 'rm -f "$nextest_out" "$kube_build_log" "$helm_build_log"' EXIT
set +e
cargo nextest run --workspace --lib --bins --tests --locked --profile "${NEXTEST_PROFILE:-default}" \
  2>&1 | tee "$nextest_out"
nextest_rc=${PIPESTATUS[0]}
set -e

real_rc=0
if [[ "${SKIP_REAL_API:-0}" == "1" ]]; then
  step "real-API suites: skipped (SKIP_REAL_API=1)"
elif [[ $nextest_rc == 0 ]]; then
  step "real control plane: waiting for hack/install-kube.sh"
  if wait "$kube_build_pid"; then
    cat "$kube_build_log"
    step "real-API suites on kube-apiserver (hack/test-real-api.sh)"
    hack/test-real-api.sh || real_rc=$?
  else
    cat "$kube_build_log"
    echo "hack/install-kube.sh failed" >&2
    real_rc=1
  fi
else
  step "real-API suites skipped (the tests failed)"
fi

report_rc=0
if [[ $nextest_rc == 0 ]]; then
  step "RBAC: unused-rule report over this run's requests (nextest and the real-API suites)"
  # The binary nextest built (`--bins`): `cargo run -p harness` would rebuild the harness with that
  # one package's features.
  "${CARGO_TARGET_DIR:-target}/debug/rbac-usage" --strict || report_rc=$?
else
  step "RBAC: unused-rule report skipped (the tests failed, so their requests are incomplete)"
fi

# nextest's summary line, last.
echo
grep -E '^ +Summary \[' "$nextest_out" | tail -n 1 || true
if [[ $nextest_rc != 0 ]]; then exit "$nextest_rc"; fi
if [[ $real_rc != 0 ]]; then exit "$real_rc"; fi
exit "$report_rc"
