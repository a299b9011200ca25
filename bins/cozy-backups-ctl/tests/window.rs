//! `cozy-backups-ctl window` as an operator runs it: the real binary against the emulator, over a
//! Postgres application's Cluster, ObjectStore and catalog Backups.

use api::backups::Backup;
use api::thirdparty::{barman, cnpg, permissive_crd};
use harness::Harness;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use std::process::Output;

const NS: &str = "tenant-acme";

async fn ctl(h: &Harness, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_cozy-backups-ctl"))
        .args(args)
        .env("KUBECONFIG", h.kubeconfig_path())
        .output()
        .await
        .expect("run cozy-backups-ctl")
}

async fn create<K: kube::Resource<DynamicType = ()>>(h: &Harness, body: Value) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(h.client(), NS, &ApiResource::erase::<K>(&()));
    let obj: DynamicObject = serde_json::from_value(body.clone()).unwrap();
    harness::eventually("the object is accepted", || {
        let (api, obj) = (api.clone(), obj.clone());
        async move { api.create(&PostParams::default(), &obj).await.ok() }
    })
    .await;
    // The status subresource ignores status on create, as a real API server does.
    let name = body["metadata"]["name"].as_str().unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": body["status"]})),
    )
    .await
    .unwrap();
}

async fn catalog(h: &Harness, name: &str, server: &str, stopped: &str) {
    let backup = Backup::test(name)
        .namespace(NS)
        .for_app("Postgres", "orders-db")
        .driver_metadata(&[
            ("cnpg.io/server-name", server),
            ("cnpg.io/stopped-at", stopped),
        ])
        .build();
    Api::<Backup>::namespaced(h.client(), NS)
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
}

#[tokio::test]
async fn prints_the_window_of_the_live_server_and_explains_a_missing_one() {
    let h = Harness::start().await.unwrap();
    h.create_namespaces(&[NS]).await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(h.client());
    for crd in [
        permissive_crd::<cnpg::Cluster>(true),
        permissive_crd::<barman::ObjectStore>(true),
    ] {
        crds.create(&PostParams::default(), &crd).await.unwrap();
    }

    // Nothing known yet: a clear error naming the application and where it looked.
    let out = ctl(&h, &["window", "-n", NS, "orders-db"]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no recoverable window known for Postgres tenant-acme/orders-db")
            && err.contains("ObjectStore tenant-acme/postgres-orders-db"),
        "{err}"
    );

    // The Cluster archives as server "orders-v2" (a restore gave it a new name); the catalog holds
    // one backup of the old server and two of the live one; the ObjectStore reports the archive.
    create::<cnpg::Cluster>(
        &h,
        json!({
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
            "metadata": {"name": "postgres-orders-db", "namespace": NS},
            "spec": {"plugins": [{"name": "barman-cloud.cloudnative-pg.io", "isWALArchiver": true,
                                  "parameters": {"barmanObjectName": "postgres-orders-db",
                                                 "serverName": "orders-v2"}}]},
            "status": {"lastArchivedWALTime": "2026-12-01T12:30:00Z"},
        }),
    )
    .await;
    catalog(&h, "old", "postgres-orders-db", "2026-11-01T00:00:00Z").await;
    catalog(&h, "nightly-1", "orders-v2", "2026-12-01T02:00:00Z").await;
    catalog(&h, "nightly-2", "orders-v2", "2026-12-01T03:00:00Z").await;

    // Without ObjectStore status: the oldest catalog backup of the live server starts the window.
    let out = ctl(&h, &["window", "-n", NS, "orders-db", "-o", "json"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["server"], "orders-v2");
    assert_eq!(printed["from"], "2026-12-01T02:00:00Z");
    assert_eq!(printed["to"], "2026-12-01T12:30:00Z");
    assert_eq!(
        printed["backups"],
        json!([{"name": "nightly-1", "stoppedAt": "2026-12-01T02:00:00Z"},
               {"name": "nightly-2", "stoppedAt": "2026-12-01T03:00:00Z"}])
    );

    // The plugin's own report wins for the start (base backups may have been retired).
    create::<barman::ObjectStore>(
        &h,
        json!({
            "apiVersion": "barmancloud.cnpg.io/v1", "kind": "ObjectStore",
            "metadata": {"name": "postgres-orders-db", "namespace": NS},
            "spec": {"configuration": {"destinationPath": "s3://bucket/orders"}},
            "status": {"serverRecoveryWindow": {"orders-v2": {
                "firstRecoverabilityPoint": "2026-12-01T03:00:00Z",
                "lastSuccessfulBackupTime": "2026-12-01T03:00:00Z"}}},
        }),
    )
    .await;
    let out = ctl(&h, &["window", "-n", NS, "orders-db"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("server       orders-v2\n")
            && text.contains("recoverable  2026-12-01T03:00:00Z … 2026-12-01T12:30:00Z\n")
            && text.contains("base backups 2 in the catalog\n"),
        "{text}"
    );
}
