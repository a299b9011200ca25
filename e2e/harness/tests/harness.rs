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
