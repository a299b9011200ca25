//! End to end, the MariaDB restore: the real orchestrator, runner and projector against the
//! emulator with the simulated mariadb-operator. A real Backup is taken first; restores from it
//! in place and into a copy succeed through one operator `Restore` each; the operator's failure
//! (`Complete=True/JobFailed`), a restore that never completes (the deadline), and malformed options
//! (a Warning, then the defaults) end as the decision documents them.

use crate::support;

use api::thirdparty::{apps, mariadb};
use kube::core::ApiResource;
use serde_json::json;
use support::{FAIL_RESTORE, HANG_RESTORE, Platform, TENANT, name_of, ready};

fn restores() -> ApiResource {
    ApiResource::erase::<mariadb::Restore>(&())
}

/// MariaDB application `name` and the operator MariaDB its chart renders, with `annotations`.
async fn mariadb(p: &Platform, name: &str, annotations: serde_json::Value) {
    p.app::<apps::MariaDB>(name, json!({"replicas": 1})).await;
    p.apply(
        &ApiResource::erase::<mariadb::MariaDB>(&()),
        json!({"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "MariaDB",
               "metadata": {"name": format!("mariadb-{name}"), "namespace": TENANT,
                            "annotations": annotations},
               "spec": {"replicas": 1}}),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_restores_succeed_fail_time_out_and_tolerate_malformed_options() {
    let p = Platform::start(
        "mariadb",
        &[],
        vec![api::thirdparty::permissive_crd::<apps::MariaDB>(true)],
    )
    .await;
    p.strategy(
        &ApiResource::erase::<api::strategy::MariaDB>(&()),
        "mariadb",
        json!({"storage": {"s3": {
            "bucket": "bucket-cozy-backups", "endpoint": "seaweedfs-s3.tenant-root.svc:8333",
            "prefix": "{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/",
            "accessKeyIdSecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"},
            "secretAccessKeySecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_SECRET_ACCESS_KEY"},
            "tls": {"enabled": false}}}, "compression": "gzip"}),
    )
    .await;
    p.class("mariadb", "MariaDB", "MariaDB", "mariadb", &[])
        .await;
    mariadb(&p, "shop", json!({})).await;
    mariadb(&p, "shop-copy", json!({})).await;
    mariadb(&p, "broken", json!({FAIL_RESTORE: "true"})).await;
    mariadb(&p, "stuck", json!({HANG_RESTORE: "true"})).await;
    let backup = p
        .backup(TENANT, "nightly", "MariaDB", "shop", "mariadb")
        .await;
    let operator_backup =
        backup.spec.driver_metadata.as_ref().unwrap()["k8s.mariadb.com/backup-name"].clone();

    let target = |app| Some(("MariaDB", app));
    p.restore(TENANT, "in-place", "nightly", None, json!(null))
        .await;
    p.restore(TENANT, "to-copy", "nightly", target("shop-copy"), json!({}))
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
        "malformed",
        "nightly",
        None,
        json!({"restoreTimeoutSeconds": "soon"}),
    )
    .await;

    // In place and to a copy: one operator Restore each, on the right server, then Succeeded.
    for (job, server) in [
        ("in-place", "mariadb-shop"),
        ("to-copy", "mariadb-shop-copy"),
    ] {
        let done = p.succeeded(TENANT, job).await;
        let restore = p.one_restored_by(&restores(), TENANT, job).await;
        let name = name_of(&restore);
        assert!(name.starts_with(&format!("{job}-")), "{name}");
        assert_eq!(restore["spec"]["mariaDbRef"], json!({"name": server}));
        assert_eq!(
            restore["spec"]["backupRef"],
            json!({"kind": "Backup", "name": operator_backup})
        );
        assert_eq!(
            ready(&done).unwrap(),
            (
                "RestoreCompleted".to_owned(),
                format!("k8s.mariadb.com/Restore {TENANT}/{name} completed")
            )
        );
    }

    // The operator marks the failed restore Job Complete=True/JobFailed "Failed": the job fails
    // with the operator's message.
    assert_eq!(
        p.failed(TENANT, "broken").await,
        ("RestoreFailed".to_owned(), "Failed".to_owned())
    );
    let broken = p.one_restored_by(&restores(), TENANT, "broken").await;
    assert_eq!(broken["status"]["conditions"][0]["reason"], "JobFailed");

    // A restore that never completes ends at the job's own deadline.
    assert_eq!(
        p.failed(TENANT, "stuck").await,
        (
            "RestoreFailed".to_owned(),
            "k8s.mariadb.com/Restore did not complete within 3s (Complete=False/JobRunning; override via spec.options.restoreTimeoutSeconds)".to_owned()
        )
    );

    // Malformed options: one Warning, then the defaults (the restore goes ahead).
    p.succeeded(TENANT, "malformed").await;
    let warnings: Vec<_> = p
        .events(TENANT, "malformed")
        .await
        .into_iter()
        .filter(|(_, r, _)| r == "MalformedOptions")
        .collect();
    assert_eq!(
        warnings,
        [(
            "Warning".to_owned(),
            "MalformedOptions".to_owned(),
            "spec.options is not valid JSON; falling back to defaults: decode restoreJob.spec.options: restoreTimeoutSeconds: expected an integer, got a string".to_owned()
        )]
    );
    assert!(
        p.events(TENANT, "in-place")
            .await
            .iter()
            .all(|(_, r, _)| r != "MalformedOptions")
    );
    p.finish(&[TENANT]).await;
}
