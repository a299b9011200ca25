//! End to end, the Etcd driver: the real runner, renderer and projector against the emulator with
//! the simulated etcd-operator. A tenant's BackupJob through `cozy-default` ends `Succeeded` with the
//! catalog Backup in upstream's shape (the operator's artifact passed through); a failed snapshot, a
//! hanging one, a missing application, an EtcdCluster without quorum that recovers, unprojected
//! credentials and a strategy missing in the bootstrap window each end as upstream words them.
//! The EtcdCluster is a singleton per namespace, so each case has its own tenant.

use crate::operators;
use crate::support;

use api::thirdparty::etcd::{EtcdCluster, EtcdSnapshot};
use operators::{Platform, app};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::{FAIL, HANG, catalog_json};

/// Tenant `ns` with an Etcd application and its EtcdCluster `etcd` carrying `annotations`.
async fn tenant(p: &Platform, ns: &str, annotations: Value) {
    p.put::<api::thirdparty::apps::Etcd>(ns, app("Etcd", ns, "etcd", json!({"replicas": 3})))
        .await;
    p.put::<EtcdCluster>(
        ns,
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
               "metadata": {"name": "etcd", "namespace": ns, "annotations": annotations},
               "spec": {"replicas": 3}}),
    )
    .await;
}

async fn snapshot_of(p: &Platform, ns: &str, job: &str) -> kube::api::DynamicObject {
    let mut owned = p.owned::<EtcdSnapshot>(ns, job).await;
    assert_eq!(owned.len(), 1, "one EtcdSnapshot per job");
    owned.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_snapshots_succeed_fail_hang_and_wait_for_quorum() {
    let ns = ["tenant-a", "tenant-b", "tenant-c", "tenant-d", "tenant-e"];
    let mut p = Platform::start(&ns, "etcd", &[], true).await;
    let platform = p
        .platform_strategy::<api::strategy::Etcd>("cozy-default-etcd")
        .await;
    p.class(
        "quick",
        "Etcd",
        "Etcd",
        "cozy-default-etcd",
        &[("backupDeadline", "8s")],
    )
    .await;
    tenant(&p, "tenant-a", json!({})).await;
    tenant(&p, "tenant-b", json!({FAIL: "true"})).await;
    tenant(&p, "tenant-c", json!({HANG: "true"})).await;
    tenant(
        &p,
        "tenant-e",
        json!({"operator-sims.cozy-backups.io/unavailable": "2 of 3 members down"}),
    )
    .await;
    p.backup("tenant-a", "ok", "Etcd", "etcd", "cozy-default")
        .await;
    p.backup("tenant-b", "broken", "Etcd", "etcd", "cozy-default")
        .await;
    p.backup("tenant-c", "stuck", "Etcd", "etcd", "quick").await;
    p.backup("tenant-d", "ghost", "Etcd", "etcd", "cozy-default")
        .await;
    p.backup("tenant-e", "quorum", "Etcd", "etcd", "cozy-default")
        .await;

    // Success: the catalog entry as a whole, the artifact as the operator reported it.
    let (job, backup) = p
        .succeeded(
            "tenant-a",
            "ok",
            "etcd-operator.cozystack.io/EtcdSnapshot reached phase=Complete",
        )
        .await;
    let snap = snapshot_of(&p, "tenant-a", "ok").await;
    let snap_name = snap.metadata.name.clone().unwrap();
    assert!(snap.metadata.owner_references.is_none());
    let s3 = platform["spec"]["template"]["destination"]["s3"].clone();
    let mut destination = json!({"s3": {
        "bucket": s3["bucket"], "endpoint": s3["endpoint"], "key": "tenant-a/etcd/",
        "forcePathStyle": s3["forcePathStyle"], "credentialsSecretRef": {"name": "cozy-backups-creds"}}});
    let mut metadata = json!({
        "etcd.aenix.io/backup-name": snap_name,
        "etcd.aenix.io/bucket": s3["bucket"],
        "etcd.aenix.io/endpoint": s3["endpoint"],
        "etcd.aenix.io/key": "tenant-a/etcd/",
        "etcd.aenix.io/force-path-style": s3["forcePathStyle"].as_bool().unwrap().to_string(),
        "etcd.aenix.io/credentials-secret-name": "cozy-backups-creds",
    });
    if let Some(region) = s3["region"].as_str().filter(|r| !r.is_empty()) {
        destination["s3"]["region"] = json!(region);
        metadata["etcd.aenix.io/region"] = json!(region);
    }
    assert_eq!(
        snap.data["spec"],
        json!({"clusterRef": {"name": "etcd"}, "destination": destination})
    );
    let artifact = snap.data["status"]["artifact"].clone();
    assert_eq!(
        artifact["uri"],
        format!(
            "s3://{}/tenant-a/etcd/{snap_name}.db",
            s3["bucket"].as_str().unwrap()
        )
    );
    assert_eq!(
        catalog_json(&backup),
        json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": "ok", "namespace": "tenant-a"},
            "spec": {
                "applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "Etcd", "name": "etcd"},
                "strategyRef": {"apiGroup": "strategy.backups.cozystack.io", "kind": "Etcd",
                                "name": "cozy-default-etcd"},
                "takenAt": job.status.as_ref().unwrap().completed_at,
                "driverMetadata": metadata,
            },
            "status": {
                "phase": "Ready",
                "artifact": artifact,
                "underlyingResources": {"kind": "EtcdBackupSnapshot",
                    "apiVersion": "backups.cozystack.io/v1alpha1", "destination": destination},
            },
        })
    );
    p.assert_clean("tenant-a", "ok").await;

    // The operator's failure, with its condition's message.
    let message = p.failed("tenant-b", "broken").await;
    let broken = snapshot_of(&p, "tenant-b", "broken").await;
    assert_eq!(
        message,
        format!(
            "etcd-operator.cozystack.io/EtcdSnapshot tenant-b/{} reached phase=Failed (snapshot job failed)",
            broken.metadata.name.unwrap()
        )
    );
    // A snapshot that never completes ends at the route's backup deadline.
    let message = p.failed("tenant-c", "stuck").await;
    let stuck = snapshot_of(&p, "tenant-c", "stuck").await;
    assert_eq!(
        message,
        format!(
            "etcd-operator.cozystack.io/EtcdSnapshot tenant-c/{} did not reach phase=Complete within 8s (current phase=\"Started\")",
            stuck.metadata.name.unwrap()
        )
    );
    // No application.
    assert_eq!(
        p.failed("tenant-d", "ghost").await,
        "Etcd application not found: tenant-d/etcd"
    );
    // No quorum: the job runs and waits; the cluster recovering wakes it.
    let waiting = p
        .reason("tenant-e", "quorum", "EtcdClusterNotAvailable")
        .await;
    assert_eq!(
        support::ready(&waiting).unwrap().message,
        "waiting for etcd-operator.cozystack.io/EtcdCluster tenant-e/etcd to become Available"
    );
    assert_eq!(waiting.status.unwrap().phase.as_deref(), Some("Running"));
    assert!(
        p.owned::<EtcdSnapshot>("tenant-e", "quorum")
            .await
            .is_empty()
    );
    p.annotate::<EtcdCluster>(
        "tenant-e",
        "etcd",
        "operator-sims.cozy-backups.io/unavailable",
        None,
    )
    .await;
    p.succeeded(
        "tenant-e",
        "quorum",
        "etcd-operator.cozystack.io/EtcdSnapshot reached phase=Complete",
    )
    .await;
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_waits_for_credentials_then_for_its_strategy() {
    let mut p = Platform::start(&["tenant-a"], "etcd", &["--projection-grace=1s"], false).await;
    let platform = p
        .platform_strategy::<api::strategy::Etcd>("cozy-default-etcd")
        .await;
    tenant(&p, "tenant-a", json!({})).await;
    p.class("late-class", "Etcd", "Etcd", "late-etcd", &[])
        .await;
    p.backup("tenant-a", "early", "Etcd", "etcd", "late-class")
        .await;

    p.projection_pending("tenant-a", "early").await;
    p.start_projector().await;
    p.strategy_not_ready("tenant-a", "early", "late-etcd", "late-class")
        .await;
    assert!(
        p.owned::<EtcdSnapshot>("tenant-a", "early")
            .await
            .is_empty()
    );
    p.strategy::<api::strategy::Etcd>("late-etcd", platform["spec"]["template"].clone())
        .await;
    p.succeeded(
        "tenant-a",
        "early",
        "etcd-operator.cozystack.io/EtcdSnapshot reached phase=Complete",
    )
    .await;
    p.h.cleanup().await.unwrap();
}
