//! Every overlay renders with `kubectl kustomize` into a complete, hardened installation, and each
//! overlay has the shape it promises (replicas, lease endpoint, strategy, anti-affinity, budgets).
//! The checks themselves are in `deploy_checks::checks`, shared with the Helm chart's (`helm.rs`).

use deploy_checks::{OVERLAYS, Rendered, checks, overlay_dir, render};

fn rendered(overlay: &str) -> Rendered {
    render(&overlay_dir(overlay)).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn every_overlay_installs_the_crds_the_namespace_and_every_daemon() {
    for overlay in OVERLAYS {
        checks::installation(&rendered(overlay), overlay);
    }
}

#[test]
fn every_pod_is_hardened_and_has_requests_and_limits() {
    for overlay in OVERLAYS {
        checks::hardened_pods(&rendered(overlay), overlay);
    }
}

#[test]
fn single_replica_runs_one_replica_each_without_a_lease_server() {
    checks::single_replica(&rendered("single-replica"), "single-replica");
}

#[test]
fn ha_runs_two_replicas_each_on_the_lease_server_on_different_nodes() {
    checks::ha(&rendered("ha"), "ha");
}

#[test]
fn ha_admits_only_cozy_backups_pods_to_the_lease_server() {
    checks::ha_network_policy(&rendered("ha"), "ha");
}
