//! The manifests in deploy/retention-cleaner/ stay consistent with the code: every env var the
//! Deployment sets is one the binary reads, and the RBAC is least privilege. (That the RBAC allows
//! every call the orchestrator makes is checked against the emulator's audit log in the end-to-end
//! tests, with `harness::rbac::assert_allowed`.)

use std::collections::BTreeSet;

use clap::CommandFactory;

const COMPONENT: &str = "retention-cleaner";

#[test]
fn deployment_env_is_what_the_binary_reads() {
    let known: BTreeSet<String> = retention_cleaner::Args::command()
        .get_arguments()
        .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
        .collect();
    harness::rbac::assert_scaled_out_deployment(COMPONENT, &known);
}

#[test]
fn rbac_is_least_privilege() {
    let rules = harness::rbac::assert_least_privilege(COMPONENT);
    // The cleaner never writes a status and creates nothing but Events and Velero requests.
    for r in &rules {
        assert!(!r.resources.iter().any(|x| x.ends_with("/status")), "{r:?}");
        if r.verbs.iter().any(|v| v == "create") {
            assert!(
                r.resources == ["events"] || r.resources == ["deletebackuprequests"],
                "{r:?}"
            );
        }
    }
}
