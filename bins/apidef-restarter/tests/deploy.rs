//! `deploy/apidef-restarter/` stays least-privilege and in step with the binary's flags.

use clap::Parser;
use serde_json::{Value, json};
use std::path::PathBuf;

fn manifests() -> Vec<Value> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/apidef-restarter");
    let mut docs = Vec::new();
    for file in [
        "serviceaccount.yaml",
        "rbac.yaml",
        "deployment.yaml",
        "service.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v: Value = serde::Deserialize::deserialize(doc).unwrap();
            if !v.is_null() {
                docs.push(v);
            }
        }
    }
    docs
}

fn find<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
}

#[test]
fn rbac_is_least_privilege() {
    let docs = manifests();
    assert_eq!(
        find(&docs, "ClusterRole")["rules"],
        json!([{"apiGroups": ["cozystack.io"], "resources": ["applicationdefinitions"], "verbs": ["list", "watch"]}])
    );
    let role = find(&docs, "Role");
    assert_eq!(role["metadata"]["namespace"], "cozy-system");
    assert_eq!(
        role["rules"],
        json!([{"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["cozystack-api"],
                "verbs": ["get", "list", "watch", "patch"]}])
    );
    for binding in ["ClusterRoleBinding", "RoleBinding"] {
        assert_eq!(
            find(&docs, binding)["subjects"],
            json!([{"kind": "ServiceAccount", "name": "apidef-restarter", "namespace": "cozy-system"}])
        );
    }
}

#[test]
fn deployment_args_parse_and_match_the_rbac_target() {
    let docs = manifests();
    let container = &find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<String> = serde_json::from_value(container["args"].clone()).unwrap();
    let parsed = apidef_restarter::Args::try_parse_from(
        std::iter::once("apidef-restarter".to_string()).chain(args),
    )
    .unwrap();
    let c = parsed.config();
    assert_eq!(
        (c.namespace.as_str(), c.deployment.as_str()),
        ("cozy-system", "cozystack-api")
    );
    assert_eq!(container["ports"][0]["containerPort"], 8080);
    assert_eq!(
        find(&docs, "Service")["spec"]["ports"][0]["targetPort"],
        "admin"
    );
}
