//! End to end, the MongoDB restore: the real orchestrator, runner and projector against the
//! emulator with the simulated Percona operator. A real Backup is taken first; a snapshot restore in
//! place and a point-in-time restore (`recoveryTime`) into a copy succeed through one
//! `PerconaServerMongoDBRestore` each; the operator's `error` state, a restore that stays `running`
//! past the deadline, and malformed options (a `recoveryTime` of the wrong type is refused, other
//! decode errors and unknown keys are Warnings) end as the decision documents them.

use crate::support;

use api::thirdparty::{apps, percona};
use kube::core::ApiResource;
use serde_json::{Value, json};
use support::{FAIL_RESTORE, HANG_RESTORE, Platform, TENANT, name_of, ready};

fn restores() -> ApiResource {
    ApiResource::erase::<percona::PerconaServerMongoDBRestore>(&())
}

/// MongoDB application `name` and the Percona cluster its chart renders, with `annotations`.
pub(crate) async fn mongodb(p: &Platform, name: &str, annotations: Value) {
    p.app::<apps::MongoDB>(name, json!({"replicas": 3, "backup": {"enabled": true}}))
        .await;
    let s3 = json!({"bucket": "bucket-cozy-backups", "prefix": format!("{TENANT}/{name}"),
                    "region": "us-east-1", "endpointUrl": "http://seaweedfs-s3.tenant-root.svc:8333",
                    "credentialsSecret": format!("mongodb-{name}-s3-creds")});
    p.apply(
        &ApiResource::erase::<percona::PerconaServerMongoDB>(&()),
        json!({"apiVersion": "psmdb.percona.com/v1", "kind": "PerconaServerMongoDB",
               "metadata": {"name": format!("mongodb-{name}"), "namespace": TENANT,
                            "annotations": annotations},
               "spec": {"crVersion": "1.20.1", "backup": {"enabled": true,
                        "storages": {"s3-storage": {"type": "s3", "s3": s3}}}}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mongodb_restores_snapshot_and_point_in_time_fail_time_out_and_check_options() {
    let p = Platform::start("psmdb", &[], vec![]).await;
    p.strategy(
        &ApiResource::erase::<api::strategy::MongoDB>(&()),
        "mongo",
        json!({"storageName": "s3-storage", "type": "logical", "compressionType": "gzip"}),
    )
    .await;
    p.class("mongo", "MongoDB", "MongoDB", "mongo", &[]).await;
    mongodb(&p, "orders", json!({})).await;
    mongodb(&p, "orders-copy", json!({})).await;
    mongodb(
        &p,
        "broken",
        json!({FAIL_RESTORE: "pbm: restore failed: no such file"}),
    )
    .await;
    mongodb(&p, "stuck", json!({HANG_RESTORE: "true"})).await;
    let backup = p
        .backup(TENANT, "nightly", "MongoDB", "orders", "mongo")
        .await;
    let destination = backup
        .status
        .as_ref()
        .unwrap()
        .artifact
        .as_ref()
        .unwrap()
        .uri
        .clone();

    let target = |app| Some(("MongoDB", app));
    p.restore(TENANT, "in-place", "nightly", None, json!(null))
        .await;
    // A point in time after the backup was taken (the restore replays forward from it), written
    // with an offset that the Percona date turns into UTC.
    let taken = backup.spec.taken_at.0;
    let offset = k8s_openapi::jiff::tz::TimeZone::fixed(k8s_openapi::jiff::tz::offset(2));
    let recovery_time = taken
        .to_zoned(offset)
        .strftime("%Y-%m-%dT%H:%M:%S%:z")
        .to_string();
    let percona_date = taken.strftime("%Y-%m-%d %H:%M:%S").to_string();
    p.restore(
        TENANT,
        "pitr-copy",
        "nightly",
        target("orders-copy"),
        json!({"recoveryTime": recovery_time}),
    )
    .await;
    p.restore(TENANT, "broken", "nightly", target("broken"), json!({}))
        .await;
    p.restore(
        TENANT,
        "stuck",
        "nightly",
        target("stuck"),
        json!({"restoreTimeoutSeconds": 3}),
    )
    .await;
    p.restore(
        TENANT,
        "bad-time",
        "nightly",
        target("orders-copy"),
        json!({"recoveryTime": 5}),
    )
    .await;
    p.restore(
        TENANT,
        "sloppy",
        "nightly",
        target("orders-copy"),
        json!({"restoreTimeoutSeconds": "soon", "zeta": true}),
    )
    .await;

    // A snapshot restore in place: no pitr, the live backup's source, the cluster's own Secret.
    let done = p.succeeded(TENANT, "in-place").await;
    let restore = p.one_restored_by(&restores(), TENANT, "in-place").await;
    let name = name_of(&restore);
    assert!(name.starts_with("in-place-"), "{name}");
    assert_eq!(restore["spec"]["clusterName"], "mongodb-orders");
    assert_eq!(restore["spec"].get("pitr"), None);
    assert_eq!(
        restore["spec"]["backupSource"]["destination"],
        json!(destination)
    );
    assert_eq!(restore["spec"]["backupSource"]["type"], "logical");
    assert_eq!(
        restore["spec"]["backupSource"]["s3"]["credentialsSecret"],
        "mongodb-orders-s3-creds"
    );
    assert_eq!(
        ready(&done).unwrap(),
        (
            "RestoreCompleted".to_owned(),
            format!("psmdb.percona.com/PerconaServerMongoDBRestore {TENANT}/{name} completed")
        )
    );

    // Point in time into a copy: Percona's date in UTC, the copy's storage Secret.
    p.succeeded(TENANT, "pitr-copy").await;
    let restore = p.one_restored_by(&restores(), TENANT, "pitr-copy").await;
    assert_eq!(restore["spec"]["clusterName"], "mongodb-orders-copy");
    assert_eq!(
        restore["spec"]["pitr"],
        json!({"type": "date", "date": percona_date})
    );
    assert_eq!(restore["status"]["pitrTarget"], json!(percona_date));
    assert_eq!(
        restore["spec"]["backupSource"]["s3"]["credentialsSecret"],
        "mongodb-orders-copy-s3-creds"
    );

    // The operator's error, with its message.
    assert_eq!(
        p.failed(TENANT, "broken").await,
        (
            "RestoreFailed".to_owned(),
            "pbm: restore failed: no such file".to_owned()
        )
    );
    // A restore that stays running ends at the job's deadline.
    assert_eq!(
        p.failed(TENANT, "stuck").await,
        (
            "RestoreFailed".to_owned(),
            "psmdb.percona.com/PerconaServerMongoDBRestore did not complete within 3s (state=running; override via spec.options.restoreTimeoutSeconds)".to_owned()
        )
    );

    // A recoveryTime that does not decode is refused before anything is created.
    assert_eq!(
        p.failed(TENANT, "bad-time").await,
        (
            "RestoreFailed".to_owned(),
            "restoreJob.spec.options carries a recoveryTime but is malformed (decode restoreJob.spec.options: recoveryTime: expected a string, got a number); refusing to fall back to a plain snapshot restore, which would silently ignore the requested point-in-time".to_owned()
        )
    );
    assert!(
        p.restored_by(&restores(), TENANT, "bad-time")
            .await
            .is_empty()
    );
    // Other decode errors and unknown keys: Warnings, then the defaults.
    p.succeeded(TENANT, "sloppy").await;
    let warnings: Vec<_> = p
        .events(TENANT, "sloppy")
        .await
        .into_iter()
        .filter(|(t, _, _)| t == "Warning")
        .map(|(_, r, n)| (r, n))
        .collect();
    assert_eq!(
        warnings,
        [
            (
                "MalformedOptions".to_owned(),
                "spec.options is not valid JSON; falling back to defaults: decode restoreJob.spec.options: restoreTimeoutSeconds: expected an integer, got a string".to_owned()
            ),
            (
                "UnknownRestoreOption".to_owned(),
                "spec.options.zeta is not a recognised MongoDB restore option and was ignored (known: recoveryTime, restoreTimeoutSeconds)".to_owned()
            ),
        ]
    );
    p.finish(&[TENANT]).await;
}
