#!/usr/bin/env bash
# Runs the real-API suites: named end-to-end tests of every daemon on kube-apiserver + etcd +
# kube-controller-manager (COZY_E2E_API=real, docs/real-api.md) instead of the emulator.
# Builds the control plane and helm first when they are missing (hack/install-kube.sh,
# hack/install-helm.sh).
#
#   hack/test-real-api.sh            every suite
#   hack/test-real-api.sh runner     the suites whose name contains "runner"
#
# One test process, and so one control plane, per suite: its tests run one after the other, and
# the harness puts the server back to its freshly started state between two tests (e2e/harness
# src/reset.rs), so a test that uses fixed namespaces or counts cluster-scoped objects (the
# cozy-default BackupClass) sees only what it makes.
set -euo pipefail
cd "$(dirname "$0")/.."

# name | package | test filters (substrings of test names, as cargo test takes them)
SUITES=(
  "renderer bootstrap, drift, configuration changes|strategy-renderer|e2e::bootstrap_renders_everything_once_the_bucket_is_bound e2e::drift_is_reverted_at_once e2e::configuration_changes_prune_and_rerender e2e::an_invalid_configuration_keeps_the_last_good_render"
  "projector projection and rotation|credentials-projector|projection::stale_keys_go_foreign_keys_stay_and_an_unchanged_source_writes_nothing rotation::rotation_reaches_every_copy_and_a_killed_projector_converges least_privilege::"
  "runner CNPG backup, a Plan slot, every other driver once|backup-runner|cnpg::the_seed_backupjob_succeeds_with_its_base_backup_in_the_bucket plans::due_slots_create_upstreams_job_once_or_are_forbidden every_driver::every_driver_backs_up_once_and_deleting_backups_cleans_up_upstream"
  "restorer CNPG PITR into a copy and in place, to two seconds ago, every other driver once, a restore drill|restore-orchestrator|cnpg::the_seed_pitr_restores_into_a_copy_and_in_place_twice_with_a_safety_backup cnpg::a_target_two_seconds_ago_restores_into_a_copy_and_in_place_without_archive_timeout every_driver::every_driver_restores_once drills::a_plan_drill_restores_into_a_scratch_copy_checks_it_records_passed_and_cleans_up drills::bad_verification_is_refused_by_the_api_or_reported_on_the_plan_naming_the_field"
  "retention sweep|retention-cleaner|sweeps::keep_last_keeps_exactly_the_newest sweeps::failed_backup_jobs_past_the_ttl_go_with_their_leftovers sweeps::the_foundationdb_backup_stops_with_its_last_backup"
  "apidef roll|apidef-restarter|e2e::one_edit_patches_exactly_once_after_the_debounce"
  "lease-server TokenReview|lease-server|real_api::"
  "kubectl plugin status, window, backup, restore|cozy-backups-ctl|status::bad_input_is_named status::json_carries_every_field status::tables_match_the_golden_files window::prints_the_window_of_the_live_server_and_explains_a_missing_one jobs::backup_creates_a_job_and_waits_for_its_end jobs::restore_checks_the_window_before_creating_anything jobs::restore_errors_name_what_was_wrong kubectl_plugin::kubectl_runs_the_plugin"
  "deploy checks|deploy-checks|real_api::"
  "Helm chart install, upgrade, uninstall|deploy-checks|helm::helm_installs_upgrades_and_uninstalls_on_kube_apiserver"
  "takeover from upstream's objects|deploy-checks|takeover::"
  "the backend itself and its differences from the emulator|harness|real_api::"
)

filter=${1:-}
bin=$(hack/install-kube.sh | tail -n1)
export COZY_KUBE_BIN=$bin COZY_E2E_API=real
# The chart's suite runs the pinned helm (a no-op once built; hack/install-helm.sh).
COZY_HELM_BIN=$(hack/install-helm.sh | tail -n1)
export COZY_HELM_BIN HELM_REQUIRED=1

failed=()
for s in "${SUITES[@]}"; do
  IFS='|' read -r name pkg tests <<<"$s"
  [[ -z $filter || $name == *"$filter"* ]] || continue
  echo "=== real API: $name ($pkg)"
  start=$SECONDS
  cargo test --locked -q -p "$pkg" --test integration --no-run
  ok=1
  names=()
  for t in $tests; do
    # shellcheck disable=SC2086 # the filters are words
    mapfile -t -O "${#names[@]}" names < <(cargo test --locked -q -p "$pkg" --test integration -- --list "$t" 2>/dev/null | sed -n 's/: test$//p')
  done
  if ((${#names[@]} == 0)); then
    echo "=== real API: no test matched $tests"
    ok=0
  elif ! cargo test --locked -q -p "$pkg" --test integration -- --exact --test-threads=1 "${names[@]}"; then
    ok=0
  fi
  if ((ok)); then
    echo "=== real API: $name passed in $((SECONDS - start)) s"
  else
    echo "=== real API: $name FAILED after $((SECONDS - start)) s"
    failed+=("$name")
  fi
done
if ((${#failed[@]})); then
  printf 'real-API suites failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
