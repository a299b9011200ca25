//! End to end, the FoundationDB restore: the real orchestrator, runner and projector against the
//! emulator with the simulated FoundationDB operator. A real Backup is taken first; restores in
//! place and into a copy succeed through one `FoundationDBRestore` each with the backup's blob
//! store coordinates; a restore the operator stops short of `Completed` (it has no failure state)
//! and one that keeps running both end at the deadline naming the state the operator reported;
//! malformed options are refused before anything is created.

use crate::support;

use api::thirdparty::{apps, fdb};
use kube::core::ApiResource;
use serde_json::{Value, json};
use support::{FAIL_RESTORE, HANG_RESTORE, Platform, TENANT, name_of, ready};

fn restores() -> ApiResource {
    ApiResource::erase::<fdb::FoundationDBRestore>(&())
}

/// The platform's FoundationDB strategy (the agents read the projected `cozy-backups-creds`).
pub(crate) fn template() -> Value {
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
            "volumes": [{"name": "blob-credentials", "secret": {"secretName": "cozy-backups-creds"}}],
        }},
    })
}

/// FoundationDB application `name` and the cluster its chart renders, with `annotations`.
pub(crate) async fn foundationdb(p: &Platform, name: &str, annotations: Value) {
    p.app::<apps::FoundationDB>(name, json!({"replicas": 3}))
        .await;
    p.apply(
        &ApiResource::erase::<fdb::FoundationDBCluster>(&()),
        json!({"apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBCluster",
               "metadata": {"name": format!("foundationdb-{name}"), "namespace": TENANT,
                            "annotations": annotations},
               "spec": {"version": "7.3.63", "processCounts": {"storage": 3}}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foundationdb_restores_succeed_stop_short_time_out_and_refuse_malformed_options() {
    let p = Platform::start("fdb", &[], vec![]).await;
    p.strategy(
        &ApiResource::erase::<api::strategy::FoundationDB>(&()),
        "fdb",
        template(),
    )
    .await;
    p.class("fdb", "FoundationDB", "FoundationDB", "fdb", &[])
        .await;
    foundationdb(&p, "ledger", json!({})).await;
    foundationdb(&p, "ledger-copy", json!({})).await;
    foundationdb(&p, "aborted", json!({FAIL_RESTORE: "Aborted"})).await;
    foundationdb(&p, "stuck", json!({HANG_RESTORE: "true"})).await;
    let backup = p
        .backup(TENANT, "nightly", "FoundationDB", "ledger", "fdb")
        .await;
    let meta = backup.spec.driver_metadata.clone().unwrap();

    let target = |app| Some(("FoundationDB", app));
    let quick = json!({"restoreTimeoutSeconds": 3});
    p.restore(TENANT, "in-place", "nightly", None, json!(null))
        .await;
    p.restore(
        TENANT,
        "to-copy",
        "nightly",
        target("ledger-copy"),
        json!({}),
    )
    .await;
    p.restore(
        TENANT,
        "aborted",
        "nightly",
        target("aborted"),
        quick.clone(),
    )
    .await;
    p.restore(TENANT, "stuck", "nightly", target("stuck"), quick)
        .await;
    p.restore(
        TENANT,
        "malformed",
        "nightly",
        None,
        json!({"restoreTimeoutSeconds": "soon"}),
    )
    .await;

    // In place and to a copy: the backup's blob store, the snapshot's parameters.
    for (job, cluster) in [
        ("in-place", "foundationdb-ledger"),
        ("to-copy", "foundationdb-ledger-copy"),
    ] {
        let done = p.succeeded(TENANT, job).await;
        let restore = p.one_restored_by(&restores(), TENANT, job).await;
        let name = name_of(&restore);
        assert!(name.starts_with(&format!("{job}-")), "{name}");
        assert_eq!(restore["spec"]["destinationClusterName"], cluster);
        let blob = &restore["spec"]["blobStoreConfiguration"];
        assert_eq!(
            blob["accountName"],
            json!(meta["apps.foundationdb.org/account-name"])
        );
        assert_eq!(blob["bucket"], json!(meta["apps.foundationdb.org/bucket"]));
        assert_eq!(
            blob["backupName"],
            json!(meta["apps.foundationdb.org/blob-backup-name"])
        );
        assert_eq!(
            restore["spec"]["customParameters"],
            json!(["--blob_credentials=/var/fdb-blob-credentials/blob_credentials.json"])
        );
        assert_eq!(
            ready(&done).unwrap(),
            (
                "RestoreCompleted".to_owned(),
                format!("apps.foundationdb.org/FoundationDBRestore {TENANT}/{name} completed")
            )
        );
    }

    // The operator stops the restore short of Completed: the deadline names what it reported.
    assert_eq!(
        p.failed(TENANT, "aborted").await,
        (
            "RestoreFailed".to_owned(),
            "apps.foundationdb.org/FoundationDBRestore did not complete within 3s (state=\"Aborted\" running=false; override via spec.options.restoreTimeoutSeconds)".to_owned()
        )
    );
    // A restore that keeps running.
    assert_eq!(
        p.failed(TENANT, "stuck").await,
        (
            "RestoreFailed".to_owned(),
            "apps.foundationdb.org/FoundationDBRestore did not complete within 3s (state=\"Running\" running=true; override via spec.options.restoreTimeoutSeconds)".to_owned()
        )
    );

    // Malformed options: a Warning and a terminal failure, nothing created.
    let (reason, message) = p.failed(TENANT, "malformed").await;
    assert_eq!(reason, "RestoreFailed");
    assert_eq!(
        message,
        "malformed restoreJob.spec.options: decode restoreJob.spec.options: restoreTimeoutSeconds: expected an integer, got a string (clear the field or supply a valid FoundationDBRestoreOptions JSON object)"
    );
    assert_eq!(
        p.event(TENANT, "malformed", "MalformedOptions").await,
        (
            "Warning".to_owned(),
            "spec.options is not valid JSON: decode restoreJob.spec.options: restoreTimeoutSeconds: expected an integer, got a string".to_owned()
        )
    );
    assert!(
        p.restored_by(&restores(), TENANT, "malformed")
            .await
            .is_empty()
    );
    p.finish(&[TENANT]).await;
}
