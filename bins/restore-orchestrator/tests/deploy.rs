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
    let env = harness::rbac::deployment_env(COMPONENT);
    let unknown: Vec<&String> = env.difference(&known).collect();
    assert!(unknown.is_empty(), "env the binary ignores: {unknown:?}");
    let deployment = &harness::rbac::manifests(COMPONENT, "deployment.yaml")[0];
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        COMPONENT
    );
    // Scaled out: several replicas need the lease service.
    assert!(deployment["spec"]["replicas"].as_u64().unwrap() > 1);
    assert!(env.contains("LEASE_ENDPOINT") && env.contains("POD_NAME"));
}

#[test]
fn rbac_is_least_privilege() {
    let path = harness::workspace_root().join("deploy/restore-orchestrator/rbac.yaml");
    let rules = harness::rbac::cluster_role_rules(&path);
    let has = |list: &[String], x: &str| list.iter().any(|v| v == x);
    for rule in &rules {
        assert!(
            !has(&rule.groups, "*") && !has(&rule.verbs, "*"),
            "wildcard in {rule:?}"
        );
        if has(&rule.resources, "*") {
            // The one exception: the batch restores read a target application of any kind.
            assert_eq!(
                (rule.groups.as_slice(), rule.verbs.as_slice()),
                (
                    &["apps.cozystack.io".to_owned()][..],
                    &["get".to_owned()][..]
                ),
            );
        }
        for forbidden in [
            "deletecollection",
            "escalate",
            "bind",
            "impersonate",
            "update",
        ] {
            assert!(!has(&rule.verbs, forbidden), "{forbidden} in {rule:?}");
        }
        assert!(
            !has(&rule.resources, "secrets"),
            "the orchestrator reads no credentials: {rule:?}"
        );
    }
    // Reading recovery logs is the one pods/log grant, read-only.
    let logs: Vec<_> = rules
        .iter()
        .filter(|r| has(&r.resources, "pods/log"))
        .collect();
    assert_eq!(logs.len(), 1);
    assert_eq!(logs[0].verbs, ["get"]);
    let binding = harness::rbac::manifests(COMPONENT, "rbac.yaml")
        .into_iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .unwrap();
    assert_eq!(
        binding["roleRef"]["name"],
        "cozy-backups:restore-orchestrator"
    );
    assert_eq!(binding["subjects"][0]["name"], COMPONENT);
}
