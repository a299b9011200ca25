//! End to end, the Etcd restore (in place only): the real orchestrator, runner and projector
//! against the emulator with the simulated etcd-operator. A real Backup is taken first in each
//! tenant (the EtcdCluster is a singleton per namespace). The restore captures the live spec,
//! suspends the HelmRelease, purges the cluster and its member PVCs, recreates it with
//! `bootstrap.restore` pointing at the snapshot, and succeeds once the operator reports it
//! Available, resuming the HelmRelease. A snapshot the operator cannot restore and a restore that
//! never finishes end at the deadline with the HelmRelease resumed; malformed options are refused
//! before anything is touched.

use crate::support;

use api::thirdparty::{apps, etcd, flux};
use kube::core::ApiResource;
use serde_json::{Value, json};
use support::{FAIL_RESTORE, HANG_RESTORE, Platform, condition, ready};

fn clusters() -> ApiResource {
    ApiResource::erase::<etcd::EtcdCluster>(&())
}

fn releases() -> ApiResource {
    ApiResource::erase::<flux::HelmRelease>(&())
}

fn pvcs() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(&())
}

/// Tenant `ns`: the Etcd application, its HelmRelease, its EtcdCluster `etcd` and two member
/// PVCs, then a Backup `nightly` of it; returns the Backup's artifact URI.
async fn tenant(p: &Platform, ns: &str) -> String {
    p.app_of(
        &ApiResource::erase::<apps::Etcd>(&()),
        ns,
        "etcd",
        json!({"replicas": 3}),
    )
    .await;
    p.apply(
        &releases(),
        json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
               "metadata": {"name": "etcd", "namespace": ns}, "spec": {"chart": {"spec": {"chart": "etcd"}}}}),
    )
    .await;
    let cluster = p
        .apply(
            &clusters(),
            json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
                   "metadata": {"name": "etcd", "namespace": ns},
                   "spec": {"replicas": 3, "storage": {"size": "1Gi"}}}),
        )
        .await;
    // Member volumes go with their cluster (the operator's StatefulSet deletes its claims): here
    // through an owner reference and the API server's garbage collector.
    let owner = json!([{"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
                        "name": "etcd", "uid": cluster.metadata.uid}]);
    for i in 0..2 {
        p.apply(
            &pvcs(),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "metadata": {"name": format!("data-etcd-{i}"), "namespace": ns,
                                "labels": {"app.kubernetes.io/instance": "etcd"},
                                "ownerReferences": owner},
                   "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .await;
    }
    let backup = p.backup(ns, "nightly", "Etcd", "etcd", "etcd").await;
    backup.status.unwrap().artifact.unwrap().uri
}

/// The snapshot `nightly` took (the object the restore controls sit on).
async fn snapshot_of(p: &Platform, ns: &str) -> String {
    let s = p
        .one_restored_by(
            &ApiResource::erase::<etcd::EtcdSnapshot>(&()),
            ns,
            "nightly",
        )
        .await;
    support::name_of(&s).to_owned()
}

async fn suspended(p: &Platform, ns: &str) -> Value {
    p.get(&releases(), Some(ns), "etcd").await.unwrap()["spec"]["suspend"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_restores_in_place_fail_time_out_and_refuse_malformed_options() {
    let tenants = ["tenant-a", "tenant-b", "tenant-c", "tenant-d"];
    let p = Platform::start(
        "etcd",
        &tenants,
        vec![
            api::thirdparty::permissive_crd::<apps::Etcd>(true),
            api::thirdparty::permissive_crd::<flux::HelmRelease>(true),
        ],
    )
    .await;
    p.strategy(
        &ApiResource::erase::<api::strategy::Etcd>(&()),
        "etcd",
        json!({"destination": {"s3": {
            "bucket": "bucket-cozy-backups", "endpoint": "http://seaweedfs-s3.tenant-root.svc:8333",
            "key": "{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/",
            "region": "us-east-1", "forcePathStyle": true,
            "credentialsSecretRef": {"name": "cozy-backups-creds"}}}}),
    )
    .await;
    p.class("etcd", "Etcd", "Etcd", "etcd", &[]).await;
    let mut uris = Vec::new();
    for ns in tenants {
        uris.push(tenant(&p, ns).await);
    }
    let broken = snapshot_of(&p, "tenant-b").await;
    let stuck = snapshot_of(&p, "tenant-c").await;
    let snapshot_ar = ApiResource::erase::<etcd::EtcdSnapshot>(&());
    p.annotate(
        &snapshot_ar,
        Some("tenant-b"),
        &broken,
        FAIL_RESTORE,
        Some("snapshot checksum mismatch"),
    )
    .await;
    p.annotate(
        &snapshot_ar,
        Some("tenant-c"),
        &stuck,
        HANG_RESTORE,
        Some("true"),
    )
    .await;

    let quick = json!({"restoreTimeoutSeconds": 4});
    p.restore("tenant-a", "restore", "nightly", None, json!(null))
        .await;
    p.restore("tenant-b", "restore", "nightly", None, quick.clone())
        .await;
    p.restore("tenant-c", "restore", "nightly", None, quick)
        .await;
    p.restore(
        "tenant-d",
        "restore",
        "nightly",
        None,
        json!({"restoreTimeoutSeconds": 1.5}),
    )
    .await;

    // Success: recreated from the captured spec with bootstrap.restore, purged PVCs, resumed.
    let done = p.succeeded("tenant-a", "restore").await;
    assert_eq!(
        ready(&done).unwrap(),
        (
            "RestoreCompleted".to_owned(),
            "etcd-operator.cozystack.io/EtcdCluster tenant-a/etcd became Available after bootstrap.restore".to_owned()
        )
    );
    assert_eq!(condition(&done, "TargetPurged").unwrap().1, "ClusterPurged");
    assert_eq!(
        condition(&done, "EtcdClusterSpecCaptured").unwrap().1,
        "SpecCaptured"
    );
    let cluster = p.get(&clusters(), Some("tenant-a"), "etcd").await.unwrap();
    assert_eq!(cluster["spec"]["replicas"], 3, "the captured spec");
    let source = &cluster["spec"]["bootstrap"]["restore"]["source"]["s3"];
    assert_eq!(
        format!(
            "s3://{}/{}",
            source["bucket"].as_str().unwrap(),
            source["key"].as_str().unwrap()
        ),
        uris[0]
    );
    assert_eq!(
        source["credentialsSecretRef"],
        json!({"name": "cozy-backups-creds"})
    );
    assert_eq!(
        cluster["status"]["conditions"][0]["reason"],
        "QuorumHealthy"
    );
    let left = p
        .api(&pvcs(), Some("tenant-a"))
        .list(&Default::default())
        .await
        .unwrap();
    assert!(
        left.items.is_empty(),
        "the member PVCs were purged: {:?}",
        left.items
    );
    assert_eq!(suspended(&p, "tenant-a").await, json!(false));

    // A snapshot the operator cannot restore, and a restore that never finishes: the deadline,
    // the HelmRelease resumed.
    for (ns, reason, current) in [
        (
            "tenant-b",
            "RestoreFailed",
            "snapshot checksum mismatch".to_owned(),
        ),
        (
            "tenant-c",
            "Restoring",
            format!("restoring members from snapshot {}", uris[2]),
        ),
    ] {
        assert_eq!(
            p.failed(ns, "restore").await,
            (
                "RestoreFailed".to_owned(),
                format!(
                    "etcd-operator.cozystack.io/EtcdCluster {ns}/etcd did not become Available within 4s after recreation with bootstrap.restore (current Available condition: Available=False/{current}) (override via spec.options.restoreTimeoutSeconds)"
                )
            )
        );
        let cluster = p.get(&clusters(), Some(ns), "etcd").await.unwrap();
        assert_eq!(cluster["status"]["conditions"][0]["reason"], reason, "{ns}");
        assert_eq!(suspended(&p, ns).await, json!(false), "{ns}");
    }
    let broken = p.get(&clusters(), Some("tenant-b"), "etcd").await.unwrap();
    assert_eq!(
        broken["status"]["conditions"][0]["message"],
        "snapshot checksum mismatch"
    );

    // Malformed options: Warning, Failed, the live cluster untouched.
    let (reason, message) = p.failed("tenant-d", "restore").await;
    assert_eq!(reason, "RestoreFailed");
    assert_eq!(
        message,
        "malformed restoreJob.spec.options: decode restoreJob.spec.options: restoreTimeoutSeconds: expected an integer, got a number (clear the field or supply a valid EtcdRestoreOptions JSON object)"
    );
    assert_eq!(
        p.event("tenant-d", "restore", "MalformedOptions").await.0,
        "Warning"
    );
    let untouched = p.get(&clusters(), Some("tenant-d"), "etcd").await.unwrap();
    assert_eq!(untouched["spec"].get("bootstrap"), None);
    assert_eq!(suspended(&p, "tenant-d").await, Value::Null);
    p.finish(&tenants).await;
}
