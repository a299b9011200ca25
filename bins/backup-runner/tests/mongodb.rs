//! End to end, the MongoDB driver: the real `backup-runner` and `credentials-projector` against the
//! emulator, with the simulated Percona operator (`operator-sims --sims=psmdb`). Success with the
//! catalog Backup as upstream shapes it; the transient waits (application, cluster, backups
//! disabled) and their deadline; an operator-side error; a hanging backup; the bootstrap window;
//! unprojected credentials.

use crate::sim_platform;
use crate::support;

use api::thirdparty::apps;
use api::thirdparty::percona::{PerconaServerMongoDB, PerconaServerMongoDBBackup};
use kube::core::ApiResource;
use serde_json::{Value, json};
use sim_platform::{Platform, TENANT};
use support::{FAIL, HANG, ready_of};

fn clusters() -> ApiResource {
    ApiResource::erase::<PerconaServerMongoDB>(&())
}

fn backups() -> ApiResource {
    ApiResource::erase::<PerconaServerMongoDBBackup>(&())
}

fn strategies() -> ApiResource {
    ApiResource::erase::<api::strategy::MongoDB>(&())
}

fn s3() -> Value {
    json!({"bucket": "bucket-cozy-backups", "prefix": "tenant-acme/orders", "region": "us-east-1",
           "endpointUrl": "http://seaweedfs-s3.tenant-root.svc:8333",
           "credentialsSecret": "mongodb-orders-s3-creds", "insecureSkipTLSVerify": false})
}

async fn platform() -> Platform {
    let p = Platform::start("psmdb", &[]).await;
    p.strategy(
        &strategies(),
        "mongo",
        json!({"storageName": "s3-storage", "type": "logical", "compressionType": "gzip"}),
    )
    .await;
    p.classes("mongo", "MongoDB", "mongo").await;
    p
}

/// The platform with application `orders` and its cluster, backups enabled.
async fn platform_with_orders() -> Platform {
    let p = platform().await;
    app(&p, "orders").await;
    cluster(&p, "orders", true).await;
    p
}

async fn app(p: &Platform, name: &str) {
    p.apply(
        &ApiResource::erase::<apps::MongoDB>(&()),
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "MongoDB",
               "metadata": {"name": name, "namespace": TENANT},
               "spec": {"replicas": 3, "backup": {"enabled": true}}}),
    )
    .await;
}

/// The Percona cluster the MongoDB chart renders for `app`.
async fn cluster(p: &Platform, app: &str, enabled: bool) {
    p.apply(
        &clusters(),
        json!({"apiVersion": "psmdb.percona.com/v1", "kind": "PerconaServerMongoDB",
               "metadata": {"name": format!("mongodb-{app}"), "namespace": TENANT},
               "spec": {"crVersion": "1.20.1", "backup": {"enabled": enabled,
                        "storages": {"s3-storage": {"type": "s3", "s3": s3()}}}}}),
    )
    .await;
}

/// The PerconaServerMongoDBBackups labelled with the job.
async fn backups_of(p: &Platform, job: &str) -> Vec<Value> {
    p.owned(&backups(), TENANT, job).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_succeeds_with_the_catalog_entry_upstream_writes() {
    let mut p = platform_with_orders().await;
    p.job("ad-hoc", "MongoDB", "orders", "mongo").await;
    let job = p.succeeded("ad-hoc").await;
    assert_eq!(
        ready_of(&job),
        (
            "BackupCompleted".into(),
            "psmdb.percona.com PerconaServerMongoDBBackup completed".into()
        )
    );
    let ours = backups_of(&p, "ad-hoc").await;
    assert_eq!(ours.len(), 1);
    let b = &ours[0];
    let name = b["metadata"]["name"].as_str().unwrap();
    assert!(name.starts_with("ad-hoc-"), "{name}");
    assert_eq!(b["metadata"].get("ownerReferences"), None);
    assert_eq!(
        b["spec"],
        json!({"clusterName": "mongodb-orders", "storageName": "s3-storage", "type": "logical",
               "compressionType": "gzip"})
    );
    let destination = b["status"]["destination"].as_str().unwrap();
    assert_eq!(
        destination,
        format!(
            "s3://bucket-cozy-backups/tenant-acme/orders/{}",
            b["status"]["pbmName"].as_str().unwrap()
        )
    );
    assert_eq!(
        p.catalog("ad-hoc").await,
        json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": "ad-hoc", "namespace": TENANT},
            "spec": {
                "applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "MongoDB", "name": "orders"},
                "strategyRef": {"apiGroup": "strategy.backups.cozystack.io", "kind": "MongoDB", "name": "mongo"},
                "takenAt": b["status"]["completed"],
                "driverMetadata": {
                    "psmdb.percona.com/backup-name": name,
                    "psmdb.percona.com/backup-namespace": TENANT,
                    "psmdb.percona.com/destination": destination,
                },
            },
            "status": {
                "phase": "Ready",
                "artifact": {"uri": destination},
                "underlyingResources": {
                    "kind": "MongoDBBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                    "destination": destination, "type": "logical", "storageName": "s3-storage",
                    "s3": {"bucket": "bucket-cozy-backups", "prefix": "tenant-acme/orders", "region": "us-east-1",
                           "endpointUrl": "http://seaweedfs-s3.tenant-root.svc:8333",
                           "credentialsSecret": "mongodb-orders-s3-creds"},
                },
            },
        })
    );
    // Each Event is waited for: the success's is recorded after the status write seen above.
    for reason in ["BackupRunning", "BackupCreated", "BackupSucceeded"] {
        p.event("ad-hoc", reason).await;
    }
    p.assert_clean("ad-hoc").await;
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_waits_proceed_when_their_object_appears_and_fail_at_the_deadline() {
    let mut p = platform().await;
    p.job("patient", "MongoDB", "orders", "mongo").await;
    let waiting = p.reason("patient", "MongoDBApplicationNotReady").await;
    assert_eq!(
        ready_of(&waiting).1,
        "waiting for MongoDB application tenant-acme/orders to exist"
    );
    assert_eq!(waiting.status.unwrap().phase, None);
    app(&p, "orders").await;
    let waiting = p.reason("patient", "PerconaServerMongoDBNotReady").await;
    assert_eq!(
        ready_of(&waiting).1,
        "waiting for psmdb.percona.com/PerconaServerMongoDB tenant-acme/mongodb-orders to exist"
    );
    cluster(&p, "orders", false).await;
    let waiting = p
        .reason("patient", "PerconaServerMongoDBBackupsDisabled")
        .await;
    assert_eq!(
        ready_of(&waiting).1,
        "spec.backup.enabled is false; on-demand backups need the percona-backup-mongodb agents running"
    );
    assert!(backups_of(&p, "patient").await.is_empty());
    cluster(&p, "orders", true).await;
    p.succeeded("patient").await;

    // The same waits end at the (short) deadline with upstream's explanations.
    p.job("ghost", "MongoDB", "ghost", "mongo-quick").await;
    assert_eq!(
        p.failed("ghost").await,
        "MongoDB application tenant-acme/ghost not found within 5s"
    );
    app(&p, "lonely").await;
    p.job("lonely", "MongoDB", "lonely", "mongo-quick").await;
    assert_eq!(
        p.failed("lonely").await,
        "psmdb.percona.com/PerconaServerMongoDB tenant-acme/mongodb-lonely never reached existence within 5s"
    );
    app(&p, "off").await;
    cluster(&p, "off", false).await;
    p.job("off", "MongoDB", "off", "mongo-quick").await;
    assert_eq!(
        p.failed("off").await,
        "psmdb.percona.com/PerconaServerMongoDB tenant-acme/mongodb-off not ready for backups within 5s: spec.backup.enabled is false; on-demand backups need the percona-backup-mongodb agents running (set backup.enabled=true on the MongoDB application)"
    );
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_error_and_a_hang_end_failed() {
    let mut p = platform_with_orders().await;

    p.annotate(
        &clusters(),
        TENANT,
        "mongodb-orders",
        FAIL,
        Some("write data: upload to S3: AccessDenied: Access Denied"),
    )
    .await;
    p.job("broken", "MongoDB", "orders", "mongo").await;
    assert_eq!(
        p.failed("broken").await,
        "write data: upload to S3: AccessDenied: Access Denied"
    );
    let job = p.jobs().get("broken").await.unwrap();
    assert_eq!(ready_of(&job).0, "BackupFailed");
    p.annotate(&clusters(), TENANT, "mongodb-orders", FAIL, None)
        .await;

    p.annotate(&clusters(), TENANT, "mongodb-orders", HANG, Some("true"))
        .await;
    p.job("stuck", "MongoDB", "orders", "mongo-quick").await;
    assert_eq!(
        p.failed("stuck").await,
        "psmdb.percona.com PerconaServerMongoDBBackup did not complete within 5s (state=running)"
    );
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_window_and_unprojected_credentials() {
    let mut p = platform_with_orders().await;

    p.class("late", "MongoDB", "MongoDB", "late-mongo", &[])
        .await;
    p.job("early", "MongoDB", "orders", "late").await;
    p.strategy_not_ready("early", "late-mongo", "late").await;
    p.strategy(&strategies(), "late-mongo", json!({"type": "logical"}))
        .await;
    p.succeeded("early").await;
    assert_eq!(
        backups_of(&p, "early").await[0]["spec"],
        json!({"clusterName": "mongodb-orders", "storageName": "s3-storage", "type": "logical"}),
        "storage and type default as upstream"
    );

    p.waits_for_the_projector("patient", "MongoDB", "orders", "mongo", &backups(), TENANT)
        .await;
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}
