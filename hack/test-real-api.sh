#!/usr/bin/env bash
# Runs the real-API suites: named end-to-end tests of every daemon on kube-apiserver + etcd +
# kube-controller-manager (COZY_E2E_API=real, docs/real-api.md) instead of the emulator.
# Builds the control plane and helm first when they are missing (hack/install-kube.sh,
# hack/install-helm.sh).
#
#   hack/test-real-api.sh            every suite
#   hack/test-real-api.sh runner     the suites whose name contains "runner"
#
# One test process, and so one control plane, per suite (two suites at a time, REAL_API_JOBS): its
# tests run one after the other, and the harness puts the server back to its freshly started state
# between two tests (e2e/harness src/reset.rs), so a test that uses fixed namespaces or counts
# cluster-scoped objects (the cozy-default BackupClass) sees only what it makes.
set -euo pipefail
cd "$(dirname "$0")/.."

# name | package | test filters (substrings of test names, as cargo test takes them); the longest
# suites first, so that the last to start are short
SUITES=(
  "restorer CNPG PITR into a copy and in place, to two seconds ago, every other driver once, a restore drill|restore-orchestrator|cnpg::the_seed_pitr_restores_into_a_copy_and_in_place_twice_with_a_safety_backup cnpg::a_target_two_seconds_ago_restores_into_a_copy_and_in_place_without_archive_timeout every_driver::every_driver_restores_once drills::a_plan_drill_restores_into_a_scratch_copy_checks_it_records_passed_and_cleans_up drills::bad_verification_is_refused_by_the_api_or_reported_on_the_plan_naming_the_field"
  "projector projection and rotation|credentials-projector|projection::stale_keys_go_foreign_keys_stay_and_an_unchanged_source_writes_nothing rotation::rotation_reaches_every_copy_and_a_killed_projector_converges least_privilege::"
  "runner CNPG backup, a Plan slot, every other driver once|backup-runner|cnpg::the_seed_backupjob_succeeds_with_its_base_backup_in_the_bucket plans::due_slots_create_upstreams_job_once_or_are_forbidden every_driver::every_driver_backs_up_once_and_deleting_backups_cleans_up_upstream"
  "takeover from upstream's objects|deploy-checks|takeover::"
  "deploy checks|deploy-checks|real_api::"
  "the backend itself and its differences from the emulator|harness|real_api::"
  "renderer bootstrap, drift, configuration changes|strategy-renderer|e2e::bootstrap_renders_everything_once_the_bucket_is_bound e2e::drift_is_reverted_at_once e2e::configuration_changes_prune_and_rerender e2e::an_invalid_configuration_keeps_the_last_good_render"
  "lease-server TokenReview|lease-server|real_api::"
  "retention sweep|retention-cleaner|sweeps::keep_last_keeps_exactly_the_newest sweeps::failed_backup_jobs_past_the_ttl_go_with_their_leftovers sweeps::the_foundationdb_backup_stops_with_its_last_backup"
  "Helm chart install, upgrade, uninstall|deploy-checks|helm::helm_installs_upgrades_and_uninstalls_on_kube_apiserver"
  "kubectl plugin status, window, backup, restore|cozy-backups-ctl|status::bad_input_is_named status::json_carries_every_field status::tables_match_the_golden_files window::prints_the_window_of_the_live_server_and_explains_a_missing_one jobs::backup_creates_a_job_and_waits_for_its_end jobs::restore_checks_the_window_before_creating_anything jobs::restore_errors_name_what_was_wrong kubectl_plugin::kubectl_runs_the_plugin"
  "apidef roll|apidef-restarter|e2e::one_edit_patches_exactly_once_after_the_debounce"
)

filter=${1:-}
bin=$(hack/install-kube.sh | tail -n1)
export COZY_KUBE_BIN=$bin COZY_E2E_API=real
# The chart's suite runs the pinned helm (a no-op once built; hack/install-helm.sh).
COZY_HELM_BIN=$(hack/install-helm.sh | tail -n1)
export COZY_HELM_BIN HELM_REQUIRED=1

# The test binaries exactly as nextest builds them (a no-op after the suite's nextest run): a
# `cargo test -p <package>` would resolve the workspace's features for that one package and
# rebuild it, the harness and the simulators, minutes in all. Each suite then runs its binary
# directly, in the package's directory, as cargo would.
command -v jq >/dev/null || { echo "jq is missing (apt-get install -y jq)" >&2; exit 1; }
list=$(mktemp)
cargo nextest list --workspace --lib --bins --tests --locked --message-format json >"$list"
# The harness rebuilds a daemon binary older than its sources through cargo (e2e/harness binary.rs).
CARGO=${CARGO:-$(command -v cargo)}
export CARGO

# One suite: its tests in one process of its package's test binary, output to stdout.
run_suite() {
  local name=$1 pkg=$2 tests=$3 suite="$2::integration" bin dir names=()
  bin=$(jq -r --arg s "$suite" '."rust-suites"[$s]."binary-path" // empty' "$list")
  dir=$(jq -r --arg s "$suite" '."rust-suites"[$s].cwd // empty' "$list")
  # shellcheck disable=SC2086 # the filters are words
  mapfile -t names < <(jq -r --arg s "$suite" \
    '."rust-suites"[$s].testcases // {} | keys[] | select(. as $n | $ARGS.positional | any(. as $f | $n | contains($f)))' \
    "$list" --args $tests)
  if [[ -z $bin ]]; then
    echo "=== real API: nextest lists no test binary $suite"
    return 1
  elif ((${#names[@]} == 0)); then
    echo "=== real API: no test of $suite matched $tests"
    return 1
  fi
  echo "=== real API: $name ($pkg): ${#names[@]} tests"
  (cd "$dir" && "$bin" --quiet --exact --test-threads=1 "${names[@]}")
}

# The suites run REAL_API_JOBS at a time (default 2), each with a control plane of its own (about
# 600 MB); they mostly wait on the daemons and the data plane, so two at a time take little more
# than half the time of one after the other. Each suite's output is printed whole when it ends.
jobs_max=${REAL_API_JOBS:-2}
logs=$(mktemp -d)
trap 'rm -rf "$list" "$logs"' EXIT
started=$SECONDS
i=0
declare -A names_of=()
for s in "${SUITES[@]}"; do
  IFS='|' read -r name pkg tests <<<"$s"
  [[ -z $filter || $name == *"$filter"* ]] || continue
  while (($(jobs -rp | wc -l) >= jobs_max)); do
    wait -n || true
  done
  i=$((i + 1))
  names_of[$i]=$name
  (
    start=$SECONDS
    if run_suite "$name" "$pkg" "$tests" >"$logs/$i.log" 2>&1; then
      echo "=== real API: $name passed in $((SECONDS - start)) s" >>"$logs/$i.log"
      touch "$logs/$i.ok"
    else
      echo "=== real API: $name FAILED after $((SECONDS - start)) s" >>"$logs/$i.log"
    fi
    cat "$logs/$i.log"
  ) &
done
wait
failed=()
for ((n = 1; n <= i; n++)); do
  [[ -e $logs/$n.ok ]] || failed+=("${names_of[$n]}")
done
echo "=== real API: $i suites in $((SECONDS - started)) s, $jobs_max at a time"
if ((${#failed[@]})); then
  printf 'real-API suites failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
