//! The harness proves its own contract: emulator in-process and as a process, CRDs from deploy/crds,
//! temporary namespaces, a daemon spawned with the kubeconfig, readiness, kill -9 and restart, dumps.

use std::time::Duration;

use harness::{DaemonSpec, EmulatorMode, Harness};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams, PostParams};

fn probe() -> DaemonSpec {
    DaemonSpec::new(
        "probe",
        std::path::PathBuf::from(env!("CARGO_BIN_EXE_harness-probe-daemon")),
    )
}

async fn probe_pid(h: &Harness) -> String {
    let cms: Api<ConfigMap> = Api::default_namespaced(h.client());
    let cm = cms.get("harness-probe").await.unwrap();
    cm.data.unwrap()["pid"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_emulator_daemons_namespaces_and_dump() {
    let mut h = Harness::start().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(h.client());
    let on_disk = kube_emulator::read_manifests(&harness::crd_dir())
        .unwrap()
        .len();
    assert_eq!(
        crds.list(&ListParams::default()).await.unwrap().items.len(),
        on_disk
    );

    let ns = h.temp_namespace("probe").await.unwrap();
    assert!(ns.starts_with("e2e-probe-"));
    let cms: Api<ConfigMap> = Api::namespaced(h.client(), &ns);
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({"metadata": {"name": "marker"}})).unwrap();
    cms.create(&PostParams::default(), &cm).await.unwrap();

    let d = h
        .spawn_ready(probe(), Duration::from_secs(30))
        .await
        .unwrap();
    let first_pid = d.pid().unwrap().to_string();
    assert_eq!(probe_pid(&h).await, first_pid);

    h.kill("probe").await.unwrap();
    assert!(!h.daemon("probe").unwrap().is_running());
    h.restart("probe", Duration::from_secs(30)).await.unwrap();
    let second_pid = h.daemon("probe").unwrap().pid().unwrap().to_string();
    assert_ne!(first_pid, second_pid);
    assert_eq!(probe_pid(&h).await, second_pid);
    assert_eq!(h.daemon("probe").unwrap().starts, 2);

    let dump = h.dump();
    assert!(
        dump.contains("\"name\": \"marker\""),
        "objects in the test namespace are dumped"
    );
    assert!(
        dump.contains("harness-probe-daemon pid"),
        "daemon logs are dumped"
    );
    assert!(
        dump.contains("\"verb\":\"create\""),
        "the audit log is dumped"
    );

    h.cleanup().await.unwrap();
    assert!(cms.get_opt("marker").await.is_err() || cms.get_opt("marker").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emulator_as_a_process() {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_harness-kube-emulator"));
    let mut h = Harness::start_with(EmulatorMode::Process(bin), Some(harness::crd_dir()))
        .await
        .unwrap();
    assert!(h.emulator().is_none());
    let ns = h.temp_namespace("proc").await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(h.client());
    assert!(
        !crds
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
            || harness::crd_dir().read_dir().unwrap().next().is_none()
    );
    h.spawn_ready(probe(), Duration::from_secs(30))
        .await
        .unwrap();
    assert!(h.audit_log().contains("\"resource\":\"namespaces\""));
    assert!(ns.starts_with("e2e-proc-"));
    h.cleanup().await.unwrap();
}

/// A daemon that is one of the project's components runs as its ServiceAccount with the RBAC of
/// `deploy/<component>/`, so a request its rules do not allow is refused with the API server's
/// 403; the same binary as the admin is not.
#[tokio::test]
async fn a_component_runs_as_its_service_account_under_its_rbac() {
    let mut h = Harness::start().await.unwrap();
    // The probe lists namespaces and writes a ConfigMap in `default`: the lease server's
    // identity (one ConfigMap of its own namespace, and TokenReviews) allows neither.
    let as_lease_server = DaemonSpec {
        name: "probe-as-lease-server".into(),
        ..probe()
    }
    .identity("lease-server");
    assert_eq!(as_lease_server.component().as_deref(), Some("lease-server"));
    assert_eq!(probe().component(), None, "not a project component");
    let err = h
        .spawn_ready(as_lease_server, Duration::from_secs(30))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("exited"), "{err}");
    let log = h.daemon("probe-as-lease-server").unwrap().log();
    // The probe prints the error with Debug, so its quotes are escaped.
    let forbidden = "namespaces is forbidden: User \"system:serviceaccount:cozy-backup-controller:\
                     lease-server\" cannot list resource \"namespaces\" in API group \"\" at the \
                     cluster scope";
    assert!(log.contains(&format!("{forbidden:?}")), "{log}");
    // Its kubeconfig carries its own token, never the admin's.
    let kubeconfig =
        std::fs::read_to_string(&h.daemon("probe-as-lease-server").unwrap().kubeconfig).unwrap();
    assert!(!kubeconfig.contains(h.admin_token()));
    assert!(kubeconfig.contains("namespace: cozy-backup-controller"));

    // The manifests were applied as written, namespaces included.
    let out = h.kubectl(&[
        "get",
        "serviceaccount/lease-server",
        "role/lease-server",
        "rolebinding/lease-server",
        "-n",
        "cozy-backup-controller",
        "-o",
        "name",
    ]);
    assert_eq!(out.lines().count(), 3, "{out}");
    let can = h.kubectl(&[
        "auth",
        "can-i",
        "create",
        "tokenreviews.authentication.k8s.io",
        "--as=system:serviceaccount:cozy-backup-controller:lease-server",
    ]);
    assert_eq!(can.trim(), "yes");

    // The same binary as the admin starts (the admin bypasses RBAC).
    h.spawn_ready(probe(), Duration::from_secs(30))
        .await
        .unwrap();
    h.cleanup().await.unwrap();

    // The identity's requests are recorded for the unused-rule report when the harness ends.
    let dir = harness::usage::usage_dir().join("lease-server");
    let pid = format!(".{}.", std::process::id());
    drop(h);
    let recorded: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(&pid))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert_eq!(recorded.len(), 1, "one record for this harness in {dir:?}");
    let audit = harness::Audit::parse(&recorded[0]);
    assert!(!audit.requests.is_empty());
    assert!(
        audit
            .requests
            .iter()
            .all(|r| r.user == "system:serviceaccount:cozy-backup-controller:lease-server")
    );
    assert!(
        audit
            .requests
            .iter()
            .any(|r| r.code == 403 && r.resource == "namespaces")
    );
}

/// The leak check looks at Events, project objects' status and what the test saw, in every form
/// a value takes there, and names the place without printing the value.
#[tokio::test]
async fn the_secret_leak_check_finds_values_in_events_status_and_errors() {
    use base64::Engine as _;
    let h = Harness::start().await.unwrap();
    let secret = "hunter2-\"quoted\"";
    h.assert_no_secret_leaks(&[secret], &[("an error", "access denied")]);
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(h.client(), "default");
    let ev: k8s_openapi::api::core::v1::Event = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "e1"},
        "involvedObject": {"kind": "Secret", "name": "s", "namespace": "default"},
        "reason": "Copied",
        "message": format!("copied {}", base64::engine::general_purpose::STANDARD.encode(secret)),
    }))
    .unwrap();
    events.create(&PostParams::default(), &ev).await.unwrap();
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        h.assert_no_secret_leaks(&[secret], &[("an error", "failed: hunter2-\\\"quoted\\\"")])
    }))
    .unwrap_err();
    let message = caught.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("Event default/e1"), "{message}");
    assert!(message.contains("an error"), "{message}");
    assert!(
        !message.contains("hunter2"),
        "the value itself is never printed: {message}"
    );
}
