//! The manifests in deploy/restore-orchestrator/ stay consistent with the code: every env var the
//! Deployment sets is one the binary reads, and the RBAC is least privilege. (That the RBAC allows
//! every call the orchestrator makes is checked against the emulator's audit log in the end-to-end
//! tests, with `harness::rbac::assert_allowed`.)

use std::collections::BTreeSet;

use clap::CommandFactory;

const COMPONENT: &str = "restore-orchestrator";

#[test]
fn deployment_env_is_what_the_binary_reads() {
    let known: BTreeSet<String> = restore_orchestrator::Args::command()
        .get_arguments()
        .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
        .collect();
    harness::rbac::assert_scaled_out_deployment(COMPONENT, &known);
}

#[test]
fn rbac_is_least_privilege() {
    let rules = harness::rbac::assert_least_privilege(COMPONENT);
    // Reading recovery logs is the one pods/log grant, read-only.
    let logs: Vec<_> = rules
        .iter()
        .filter(|r| r.resources.iter().any(|x| x == "pods/log"))
        .collect();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].verbs, ["get"]);
    // Restore drills read the scratch copy's `-app` Secret: one rule, `get` only.
    let secrets: Vec<_> = rules
        .iter()
        .filter(|r| r.resources.iter().any(|x| x == "secrets"))
        .collect();
    assert_eq!(secrets.len(), 1);
    assert_eq!(secrets[0].verbs, ["get"]);
}
