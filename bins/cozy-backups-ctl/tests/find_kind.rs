//! `cozy-backups-ctl find-kind` as an operator runs it: the real binary against the emulator.

use harness::Harness;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};
use std::process::Output;

/// Runs the CLI without blocking the runtime that serves the in-process emulator.
async fn ctl(h: &Harness, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_cozy-backups-ctl"))
        .args(args)
        .env("KUBECONFIG", h.kubeconfig_path())
        .env_remove("COZY_BACKUPS_CTL_OUTPUT")
        .output()
        .await
        .expect("run cozy-backups-ctl")
}

#[tokio::test]
async fn finds_acronym_kinds_and_explains_failures() {
    let h = Harness::start().await.unwrap();
    let api: Api<DynamicObject> = Api::all_with(h.client(), &appdef::api_resource());
    for (name, kind) in [
        ("tcp-balancer", "TCPBalancer"),
        ("http-cache", "HTTPCache"),
        ("vm-disk", "VMDisk"),
    ] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
            "metadata": {"name": name},
            "spec": {"application": {"kind": kind, "openAPISchema": "{\"type\":\"object\"}",
                                     "plural": format!("{}s", kind.to_lowercase()), "singular": kind.to_lowercase()},
                     "release": {"prefix": "", "chartRef": {"kind": "ExternalArtifact", "name": name}}}
        }))
        .unwrap();
        api.create(&PostParams::default(), &obj).await.unwrap();
    }

    let out = ctl(&h, &["find-kind", "HTTPCache", "-o", "json"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["metadata"]["name"], "http-cache");
    assert_eq!(printed["kind"], "ApplicationDefinition");
    assert_eq!(
        printed["spec"]["application"]["openAPISchema"],
        "{\"type\":\"object\"}"
    );

    let out = ctl(&h, &["find-kind", "VMDisk"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let yaml = String::from_utf8(out.stdout).unwrap();
    assert!(yaml.contains("name: vm-disk"), "{yaml}");
    assert!(yaml.contains("kind: VMDisk"), "{yaml}");

    let out = ctl(&h, &["find-kind", "tcpbalancer"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("find-kind \"tcpbalancer\"")
            && err.contains("no ApplicationDefinition with spec.application.kind \"tcpbalancer\" found under cozystack.io/v1alpha1/applicationdefinitions"),
        "{err}"
    );

    let out = ctl(&h, &["find-kind", ""]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kind must not be empty"));
}

#[tokio::test]
async fn a_list_failure_names_the_resource() {
    // An emulator without CRDs: the resource is not served.
    let h = Harness::start_with(harness::EmulatorMode::InProcess, None)
        .await
        .unwrap();
    let out = ctl(&h, &["find-kind", "Postgres"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "find-kind \"Postgres\": list cozystack.io/v1alpha1/applicationdefinitions: the API \
             server does not serve that resource (Cozystack's ApplicationDefinitions are not \
             installed in this cluster)"
        ),
        "{err}"
    );
}
