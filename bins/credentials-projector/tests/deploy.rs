//! The manifests in deploy/credentials-projector/ stay consistent with the code: every env var the
//! Deployment sets is one the binary reads, upstream's variable names are all there, and the RBAC is
//! least privilege (no delete anywhere, Secrets limited by name to the source and the copies).

use std::collections::BTreeSet;

use clap::CommandFactory;
use serde_yaml::Value;

fn docs(file: &str) -> Vec<Value> {
    let path = harness::workspace_root()
        .join("deploy/credentials-projector")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect()
}

fn strings(v: &Value) -> BTreeSet<String> {
    v.as_sequence()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

#[test]
fn deployment_env_is_what_the_binary_reads() {
    let command = credentials_projector::Args::command();
    let known: BTreeSet<String> = command
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
    for upstream in [
        "BACKUP_STORAGE_SECRET_NAMESPACE",
        "BACKUP_STORAGE_SECRET_NAME",
        "BACKUP_STORAGE_CREDS_SECRET_NAME",
        "BACKUP_STORAGE_ENDPOINT",
        "BACKUP_STORAGE_REGION",
        "BACKUP_STORAGE_FORCE_PATH_STYLE",
        "BACKUP_STORAGE_SYSTEM_NAMESPACES",
    ] {
        assert!(env.contains(upstream), "{upstream} missing");
        assert!(
            known.contains(upstream),
            "the binary does not read {upstream}"
        );
    }
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"],
        "credentials-projector"
    );
}

#[test]
fn rbac_is_least_privilege() {
    let rbac = docs("rbac.yaml");
    let role = rbac.iter().find(|d| d["kind"] == "ClusterRole").unwrap();
    let mut secrets = Vec::new();
    for rule in role["rules"].as_sequence().unwrap() {
        let verbs = strings(&rule["verbs"]);
        for forbidden in [
            "delete",
            "deletecollection",
            "*",
            "escalate",
            "bind",
            "impersonate",
        ] {
            assert!(!verbs.contains(forbidden), "{forbidden} granted: {rule:?}");
        }
        assert!(!strings(&rule["resources"]).contains("*"));
        if strings(&rule["resources"]).contains("secrets") {
            secrets.push((verbs, strings(&rule["resourceNames"])));
        }
    }
    // Secrets: reads of the source and the copies by name only (lists and watches carry a name
    // selector), updates of the copies only, and create (which RBAC cannot limit by name).
    let set = |xs: &[&str]| -> BTreeSet<String> { xs.iter().map(|x| x.to_string()).collect() };
    assert_eq!(
        secrets,
        vec![
            (
                set(&["get", "list", "watch"]),
                set(&[
                    "bucket-cozy-backups-system-credentials",
                    "cozy-backups-creds"
                ])
            ),
            (set(&["update"]), set(&["cozy-backups-creds"])),
            (set(&["create"]), set(&[])),
        ]
    );
    let binding = rbac
        .iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .unwrap();
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert_eq!(binding["subjects"][0]["name"], "credentials-projector");
}
