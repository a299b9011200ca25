//! End to end, the FoundationDB driver: the real `backup-runner` and `credentials-projector`
//! against the emulator, with the simulated FoundationDB operator (`operator-sims --sims=fdb`).
//! Success (the previous backup of the cluster stopped, the catalog Backup as upstream shapes it),
//! the cluster gates, a chart-rendered backup in the way, an operator that
//! never reaches a restorable snapshot, a hanging one, the bootstrap window, a missing application
//! and unprojected credentials.

use crate::sim_platform;
use crate::support;

use api::thirdparty::apps;
use api::thirdparty::fdb::{FoundationDBBackup, FoundationDBCluster};
use kube::core::ApiResource;
use serde_json::{Value, json};
use sim_platform::{Platform, TENANT, time};
use support::{FAIL, HANG, ready_of};

const UNAVAILABLE: &str = "operator-sims.cozy-backups.io/unavailable";

fn clusters() -> ApiResource {
    ApiResource::erase::<FoundationDBCluster>(&())
}

fn backups() -> ApiResource {
    ApiResource::erase::<FoundationDBBackup>(&())
}

fn strategies() -> ApiResource {
    ApiResource::erase::<api::strategy::FoundationDB>(&())
}

/// The platform's FoundationDB strategy (the agents read the projected `cozy-backups-creds`, named
/// `secret` here).
fn template(secret: &str) -> Value {
    json!({
        "blobStoreConfiguration": {
            "accountName": "seaweedfs-s3.tenant-root.svc:8333",
            "bucket": "bucket-cozy-backups",
            "urlParameters": [
                "secure_connection=0",
                "region=us-east-1",
                "bucket_path={{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}",
            ],
        },
        "snapshotPeriodSeconds": 3600,
        "customParameters": ["--blob_credentials=/var/fdb-blob-credentials/blob_credentials.json"],
        "backupDeploymentPodTemplateSpec": {"spec": {
            "containers": [{
                "name": "foundationdb",
                "volumeMounts": [{"name": "blob-credentials", "mountPath": "/var/fdb-blob-credentials", "readOnly": true}],
            }],
            "volumes": [{"name": "blob-credentials", "secret": {"secretName": secret}}],
        }},
    })
}

async fn platform() -> Platform {
    let p = Platform::start("fdb", &[]).await;
    p.strategy(&strategies(), "fdb", template("cozy-backups-creds"))
        .await;
    p.classes("fdb", "FoundationDB", "fdb").await;
    p
}

/// The platform with application `ledger` and its healthy cluster.
async fn platform_with_ledger() -> Platform {
    let p = platform().await;
    app(&p, "ledger").await;
    cluster(&p, "ledger", "7.3.63", json!({})).await;
    p
}

async fn app(p: &Platform, name: &str) {
    p.apply(
        &ApiResource::erase::<apps::FoundationDB>(&()),
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "FoundationDB",
               "metadata": {"name": name, "namespace": TENANT}, "spec": {"replicas": 3}}),
    )
    .await;
}

async fn cluster(p: &Platform, app: &str, version: &str, annotations: Value) {
    let mut spec = json!({"processCounts": {"storage": 3}});
    if !version.is_empty() {
        spec["version"] = json!(version);
    }
    p.apply(
        &clusters(),
        json!({"apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBCluster",
               "metadata": {"name": format!("foundationdb-{app}"), "namespace": TENANT,
                            "annotations": annotations},
               "spec": spec}),
    )
    .await;
}

/// The FoundationDBBackups labelled with the job.
async fn backups_of(p: &Platform, job: &str) -> Vec<Value> {
    p.owned(&backups(), TENANT, job).await
}

async fn backup_state(p: &Platform, name: &str) -> String {
    p.get(&backups(), Some(TENANT), name).await.unwrap()["spec"]["backupState"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_succeeds_after_stopping_the_previous_one_of_the_cluster() {
    let mut p = platform_with_ledger().await;
    // The agents of an earlier job still stream to the bucket.
    p.apply(
        &backups(),
        json!({"apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
               "metadata": {"name": "nightly-0-abcde", "namespace": TENANT, "labels": {
                   "backups.cozystack.io/owned-by.BackupJobName": "nightly-0",
                   "backups.cozystack.io/owned-by.BackupJobNamespace": TENANT,
                   "backups.cozystack.io/foundationdb-cluster": "foundationdb-ledger"}},
               "spec": {"clusterName": "foundationdb-ledger", "version": "7.3.63", "backupState": "Running",
                        "blobStoreConfiguration": {"accountName": "seaweedfs-s3.tenant-root.svc:8333",
                                                   "backupName": "nightly-0"}}}),
    )
    .await;

    p.job("ad-hoc", "FoundationDB", "ledger", "fdb").await;
    let job = p.succeeded("ad-hoc").await;
    assert_eq!(
        ready_of(&job),
        (
            "BackupCompleted".into(),
            "apps.foundationdb.org/FoundationDBBackup reached a restorable snapshot".into()
        )
    );
    assert_eq!(backup_state(&p, "nightly-0-abcde").await, "Stopped");

    let ours = backups_of(&p, "ad-hoc").await;
    assert_eq!(ours.len(), 1, "{ours:?}");
    let fdb = &ours[0];
    let fdb_name = fdb["metadata"]["name"].as_str().unwrap();
    assert!(fdb_name.starts_with("ad-hoc-"), "{fdb_name}");
    assert_eq!(fdb["metadata"].get("ownerReferences"), None);
    assert_eq!(
        fdb["metadata"]["labels"]["backups.cozystack.io/foundationdb-cluster"],
        "foundationdb-ledger"
    );
    assert_eq!(
        fdb["spec"],
        json!({
            "clusterName": "foundationdb-ledger", "version": "7.3.63", "backupState": "Running",
            "blobStoreConfiguration": {
                "accountName": "seaweedfs-s3.tenant-root.svc:8333",
                "bucket": "bucket-cozy-backups",
                "backupName": "ad-hoc",
                "urlParameters": ["secure_connection=0", "region=us-east-1", "bucket_path=tenant-acme/ledger"],
            },
            "snapshotPeriodSeconds": 3600,
            "customParameters": ["--blob_credentials=/var/fdb-blob-credentials/blob_credentials.json"],
            "backupDeploymentSpec": {"podTemplateSpec": template("cozy-backups-creds")["backupDeploymentPodTemplateSpec"]},
        })
    );

    // The catalog entry, whole. takenAt is the wall clock of the success (snapshotTime is an FDB
    // version, not a time).
    let status = job.status.clone().unwrap();
    let url = "blobstore://seaweedfs-s3.tenant-root.svc:8333/ad-hoc?bucket=bucket-cozy-backups&bucket_path=tenant-acme%2Fledger&region=us-east-1&secure_connection=0";
    assert_eq!(
        p.catalog("ad-hoc").await,
        json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": "ad-hoc", "namespace": TENANT},
            "spec": {
                "applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "FoundationDB", "name": "ledger"},
                "strategyRef": {"apiGroup": "strategy.backups.cozystack.io", "kind": "FoundationDB", "name": "fdb"},
                "takenAt": time(&status.completed_at),
                "driverMetadata": {
                    "apps.foundationdb.org/backup-name": fdb_name,
                    "apps.foundationdb.org/backup-namespace": TENANT,
                    "apps.foundationdb.org/account-name": "seaweedfs-s3.tenant-root.svc:8333",
                    "apps.foundationdb.org/bucket": "bucket-cozy-backups",
                    "apps.foundationdb.org/blob-backup-name": "ad-hoc",
                    "apps.foundationdb.org/storage-uri": url,
                },
            },
            "status": {
                "phase": "Ready",
                "artifact": {"uri": url},
                "underlyingResources": {
                    "kind": "FoundationDBBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                    "storage": {
                        "accountName": "seaweedfs-s3.tenant-root.svc:8333",
                        "bucket": "bucket-cozy-backups",
                        "backupName": "ad-hoc",
                        "urlParameters": ["secure_connection=0", "region=us-east-1", "bucket_path=tenant-acme/ledger"],
                    },
                    "customParameters": ["--blob_credentials=/var/fdb-blob-credentials/blob_credentials.json"],
                },
            },
        })
    );

    // Each Event is waited for: the success's is recorded after the status write seen above.
    for reason in ["BackupRunning", "BackupCreated", "BackupSucceeded"] {
        p.event("ad-hoc", reason).await;
    }
    let m = p.runner.metrics();
    assert_eq!(
        m.value(
            "cozy_backups_backup_runner_backups_total",
            &[
                ("namespace", TENANT),
                ("kind", "FoundationDB"),
                ("strategy", "FoundationDB"),
                ("result", "succeeded")
            ]
        ),
        1.0
    );
    p.assert_clean("ad-hoc").await;

    // The next job of the cluster stops this one's agents in turn.
    p.job("ad-hoc-2", "FoundationDB", "ledger", "fdb").await;
    p.succeeded("ad-hoc-2").await;
    assert_eq!(backup_state(&p, fdb_name).await, "Stopped");
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_gates_wait_then_proceed() {
    let mut p = platform().await;
    app(&p, "ledger").await;
    p.job("gated", "FoundationDB", "ledger", "fdb").await;
    let waiting = p.reason("gated", "FoundationDBClusterNotReady").await;
    assert_eq!(
        ready_of(&waiting).1,
        "waiting for apps.foundationdb.org/FoundationDBCluster tenant-acme/foundationdb-ledger to exist"
    );
    assert_eq!(waiting.status.unwrap().phase, None, "phaseless while gated");

    cluster(&p, "ledger", "", json!({UNAVAILABLE: "true"})).await;
    let waiting = p.reason("gated", "FoundationDBClusterNotAvailable").await;
    assert_eq!(
        ready_of(&waiting).1,
        "waiting for apps.foundationdb.org/FoundationDBCluster tenant-acme/foundationdb-ledger to become available"
    );
    p.annotate(
        &clusters(),
        TENANT,
        "foundationdb-ledger",
        UNAVAILABLE,
        None,
    )
    .await;
    let waiting = p.reason("gated", "FoundationDBClusterVersionUnknown").await;
    assert_eq!(
        ready_of(&waiting).1,
        "apps.foundationdb.org/FoundationDBCluster tenant-acme/foundationdb-ledger does not yet report spec.version"
    );
    assert!(
        backups_of(&p, "gated").await.is_empty(),
        "nothing created while gated"
    );
    cluster(&p, "ledger", "7.3.63", json!({})).await;
    p.succeeded("gated").await;

    // The same gate ends at the deadline.
    app(&p, "orphan").await;
    p.job("orphan", "FoundationDB", "orphan", "fdb-quick").await;
    assert_eq!(
        p.failed("orphan").await,
        "apps.foundationdb.org/FoundationDBCluster tenant-acme/foundationdb-orphan did not appear within 5s"
    );
    p.assert_clean("gated").await;
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chart_backup_in_the_way_an_operator_failure_and_a_hang_end_failed() {
    let mut p = platform_with_ledger().await;

    // A chart-rendered backup (no driver label) streams to the cluster: terminal at once.
    p.apply(
        &backups(),
        json!({"apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
               "metadata": {"name": "ledger-backup", "namespace": TENANT},
               "spec": {"clusterName": "foundationdb-ledger", "version": "7.3.63", "backupState": "Running",
                        "blobStoreConfiguration": {"accountName": "s3.example"}}}),
    )
    .await;
    p.job("clash", "FoundationDB", "ledger", "fdb").await;
    assert_eq!(
        p.failed("clash").await,
        "conflicting in-chart FoundationDBBackup tenant-acme/ledger-backup is Running against cluster \"foundationdb-ledger\"; disable the chart's backup.enabled and delete that CR before using the BackupClass flow"
    );
    assert!(backups_of(&p, "clash").await.is_empty());
    assert_eq!(
        backup_state(&p, "ledger-backup").await,
        "Running",
        "never stopped by the driver"
    );
    p.api(&backups(), Some(TENANT))
        .delete("ledger-backup", &Default::default())
        .await
        .unwrap();

    // The agents run but never start the backup: the job explains the operator's state, fails at
    // its deadline and stops its backup.
    p.annotate(
        &clusters(),
        TENANT,
        "foundationdb-ledger",
        FAIL,
        Some("true"),
    )
    .await;
    p.job("broken", "FoundationDB", "ledger", "fdb-quick").await;
    let waiting = p.reason("broken", "FoundationDBBackupRunning").await;
    let detail = "operator has not reconciled the spec yet (reconciled=0, generation=1)";
    assert_eq!(ready_of(&waiting).1, detail);
    assert_eq!(waiting.status.unwrap().phase.as_deref(), Some("Running"));
    assert_eq!(
        p.failed("broken").await,
        format!(
            "apps.foundationdb.org/FoundationDBBackup did not reach a restorable snapshot within 5s ({detail})"
        )
    );
    let broken = backups_of(&p, "broken").await;
    let broken_name = broken[0]["metadata"]["name"].as_str().unwrap().to_owned();
    harness::until("the failed job's backup stopped", || async {
        backup_state(&p, &broken_name).await == "Stopped"
    })
    .await;
    p.annotate(&clusters(), TENANT, "foundationdb-ledger", FAIL, None)
        .await;

    // The agent Deployment never comes up.
    p.annotate(
        &clusters(),
        TENANT,
        "foundationdb-ledger",
        HANG,
        Some("true"),
    )
    .await;
    p.job("stuck", "FoundationDB", "ledger", "fdb-quick").await;
    assert_eq!(
        p.failed("stuck").await,
        "apps.foundationdb.org/FoundationDBBackup did not reach a restorable snapshot within 5s (no backupDetails observed)"
    );
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_window_a_missing_application_and_unprojected_credentials() {
    let mut p = platform_with_ledger().await;

    p.class("late", "FoundationDB", "FoundationDB", "late-fdb", &[])
        .await;
    p.job("early", "FoundationDB", "ledger", "late").await;
    let waiting = p.strategy_not_ready("early", "late-fdb", "late").await;
    assert_eq!(waiting.status.unwrap().phase, None);
    p.strategy(&strategies(), "late-fdb", template("cozy-backups-creds"))
        .await;
    p.succeeded("early").await;

    p.job("ghost", "FoundationDB", "ghost", "fdb").await;
    assert_eq!(
        p.failed("ghost").await,
        "FoundationDB application not found: tenant-acme/ghost"
    );

    p.waits_for_the_projector(
        "patient",
        "FoundationDB",
        "ledger",
        "fdb",
        &backups(),
        TENANT,
    )
    .await;
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}
