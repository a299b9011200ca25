//! The manifests in deploy/backup-runner/ stay consistent with the code: every env var the
//! Deployment sets is one the binary reads, and the RBAC is least privilege. (That the RBAC allows
//! every call the runner makes is checked against the emulator's audit log in the end-to-end
//! tests, with `harness::rbac::assert_allowed`.)

use std::collections::BTreeSet;

use clap::CommandFactory;
use serde_yaml::Value;

fn docs(file: &str) -> Vec<Value> {
    let path = harness::workspace_root()
        .join("deploy/backup-runner")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

#[test]
fn deployment_env_is_what_the_binary_reads() {
    let known: BTreeSet<String> = backup_runner::Args::command()
        .get_arguments()
        .filter_map(|a| a.get_env().map(|e| e.to_string_lossy().into_owned()))
        .collect();
    let deployment = &docs("deployment.yaml")[0];
    let env: BTreeSet<String> = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_owned())
        .collect();
    let unknown: Vec<&String> = env.difference(&known).collect();
    assert!(unknown.is_empty(), "env the binary ignores: {unknown:?}");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "backup-runner"
    );
    // Scaled out: several replicas need the lease service.
    assert!(deployment["spec"]["replicas"].as_u64().unwrap() > 1);
    assert!(env.contains("LEASE_ENDPOINT") && env.contains("POD_NAME"));
}

#[test]
fn rbac_is_least_privilege() {
    for rule in harness::rbac::assert_least_privilege("backup-runner") {
        if rule.verbs.iter().any(|v| v == "delete") {
            // Only the Backup finalizer deletes, and only CNPG's operator-side backups.
            assert_eq!(
                (rule.groups.as_slice(), rule.resources.as_slice()),
                (
                    &["postgresql.cnpg.io".to_owned()][..],
                    &["backups".to_owned()][..]
                ),
            );
        }
    }
}
