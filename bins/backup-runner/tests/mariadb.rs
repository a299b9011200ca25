//! End to end, the MariaDB driver: the real runner, renderer and projector against the emulator
//! with the simulated mariadb-operator. A tenant's BackupJob through the platform's `cozy-default`
//! class ends `Succeeded` with the catalog Backup in upstream's shape; the operator-side failure, a
//! hang past the deadline, a missing application, an operator MariaDB that appears late, unprojected
//! credentials and a strategy missing in the bootstrap window each end as upstream words them.

use crate::operators;
use crate::support;

use api::thirdparty::mariadb::Backup as MariaDBBackup;
use operators::{Platform, app};
use pretty_assertions::assert_eq;
use serde_json::json;
use support::{FAIL, HANG, catalog_json};

const TENANT: &str = "tenant-acme";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_backups_succeed_fail_hang_and_wait_for_their_server() {
    let mut p = Platform::start(&[TENANT], "mariadb", &[], true).await;
    let platform = p
        .platform_strategy::<api::strategy::MariaDB>("cozy-default-mariadb")
        .await;
    p.class(
        "quick",
        "MariaDB",
        "MariaDB",
        "cozy-default-mariadb",
        &[("backupDeadline", "8s")],
    )
    .await;
    p.mariadb(TENANT, "shop", json!({})).await;
    p.mariadb(TENANT, "broken", json!({FAIL: "true"})).await;
    p.mariadb(TENANT, "stuck", json!({HANG: "true"})).await;
    p.put::<api::thirdparty::apps::MariaDB>(TENANT, app("MariaDB", TENANT, "late", json!({})))
        .await;
    p.backup(TENANT, "ok", "MariaDB", "shop", "cozy-default")
        .await;
    p.backup(TENANT, "broken", "MariaDB", "broken", "cozy-default")
        .await;
    p.backup(TENANT, "stuck", "MariaDB", "stuck", "quick").await;
    p.backup(TENANT, "ghost", "MariaDB", "ghost", "cozy-default")
        .await;
    p.backup(TENANT, "late", "MariaDB", "late", "cozy-default")
        .await;

    // Success: one operator Backup labelled with the job, and the catalog entry as a whole.
    let (job, backup) = p
        .succeeded(TENANT, "ok", "k8s.mariadb.com Backup completed")
        .await;
    let operator = p.owned::<MariaDBBackup>(TENANT, "ok").await;
    assert_eq!(operator.len(), 1);
    let op = &operator[0];
    let op_name = op.metadata.name.clone().unwrap();
    assert!(op_name.starts_with("ok-"), "{op_name}");
    assert!(op.metadata.owner_references.is_none());
    let s3 = &platform["spec"]["template"]["storage"]["s3"];
    let mut storage = json!({"s3": {
        "bucket": s3["bucket"], "endpoint": s3["endpoint"], "prefix": "tenant-acme/shop/",
        "accessKeyIdSecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"},
        "secretAccessKeySecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_SECRET_ACCESS_KEY"},
        "tls": {"enabled": true}}});
    if let Some(region) = s3["region"].as_str().filter(|r| !r.is_empty()) {
        storage["s3"]["region"] = json!(region);
    }
    assert_eq!(
        op.data["spec"],
        json!({"mariaDbRef": {"name": "mariadb-shop"}, "storage": storage, "compression": "gzip"})
    );
    let completed_at = op.data["status"]["conditions"][0]["lastTransitionTime"].clone();
    let uri = format!(
        "s3://{}/tenant-acme/shop/{op_name}",
        s3["bucket"].as_str().unwrap()
    );
    assert_eq!(
        catalog_json(&backup),
        json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": "ok", "namespace": TENANT},
            "spec": {
                "applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "MariaDB", "name": "shop"},
                "strategyRef": {"apiGroup": "strategy.backups.cozystack.io", "kind": "MariaDB",
                                "name": "cozy-default-mariadb"},
                "takenAt": completed_at,
                "driverMetadata": {
                    "k8s.mariadb.com/backup-name": op_name,
                    "k8s.mariadb.com/backup-namespace": TENANT,
                    "k8s.mariadb.com/storage-uri": uri,
                },
            },
            "status": {
                "phase": "Ready",
                "artifact": {"uri": uri},
                "underlyingResources": {"kind": "MariaDBBackupSnapshot",
                    "apiVersion": "backups.cozystack.io/v1alpha1", "storage": storage},
            },
        })
    );
    assert!(job.status.unwrap().started_at.is_some());
    p.assert_clean(TENANT, "ok").await;

    // The operator's failure (it marks a failed dump Job Complete=True/JobFailed "Failed").
    assert_eq!(p.failed(TENANT, "broken").await, "Failed");
    assert_eq!(
        p.owned::<MariaDBBackup>(TENANT, "broken").await[0].data["status"]["conditions"][0]["reason"],
        "JobFailed"
    );
    // A dump that never finishes ends at the route's backup deadline.
    assert_eq!(
        p.failed(TENANT, "stuck").await,
        "k8s.mariadb.com Backup did not complete within 8s (Complete=False/JobRunning)"
    );
    // No application: Failed at once, nothing created.
    assert_eq!(
        p.failed(TENANT, "ghost").await,
        "MariaDB application not found: tenant-acme/ghost"
    );
    assert!(p.owned::<MariaDBBackup>(TENANT, "ghost").await.is_empty());
    // The operator MariaDB is not there yet: the job waits, and its appearance wakes it.
    let waiting = p.reason(TENANT, "late", "MariaDBNotReady").await;
    assert_eq!(
        support::ready(&waiting).unwrap().message,
        "waiting for k8s.mariadb.com/MariaDB tenant-acme/mariadb-late to exist"
    );
    p.mariadb_server(TENANT, "late", json!({})).await;
    p.succeeded(TENANT, "late", "k8s.mariadb.com Backup completed")
        .await;
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_waits_for_credentials_then_for_its_strategy() {
    let mut p = Platform::start(&[TENANT], "mariadb", &["--projection-grace=1s"], false).await;
    let platform = p
        .platform_strategy::<api::strategy::MariaDB>("cozy-default-mariadb")
        .await;
    p.mariadb(TENANT, "shop", json!({})).await;
    p.class("late-class", "MariaDB", "MariaDB", "late-mariadb", &[])
        .await;
    p.backup(TENANT, "early", "MariaDB", "shop", "late-class")
        .await;

    // No projector yet: nothing is dispatched and the job says why.
    p.projection_pending(TENANT, "early").await;
    assert!(p.owned::<MariaDBBackup>(TENANT, "early").await.is_empty());

    // Projected: the strategy the class names does not exist yet (the bootstrap window).
    p.start_projector().await;
    let waiting = p
        .strategy_not_ready(TENANT, "early", "late-mariadb", "late-class")
        .await;
    assert_eq!(
        waiting.status.unwrap().phase,
        None,
        "phaseless while waiting"
    );

    // The strategy appears: its watch event carries the job through.
    p.strategy::<api::strategy::MariaDB>("late-mariadb", platform["spec"]["template"].clone())
        .await;
    let (_, backup) = p
        .succeeded(TENANT, "early", "k8s.mariadb.com Backup completed")
        .await;
    assert_eq!(backup.spec.strategy_ref.name, "late-mariadb");
    p.h.cleanup().await.unwrap();
}

/// A kind served moments before its first BackupJob: the runner's watch of a kind it found not
/// served lists it again only after its backoff (up to half a minute), so the application is not
/// in the cache yet; the runner reads it from the API server before failing the job, and the job
/// succeeds. A job whose application the API server does not have either still fails at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_created_as_its_kind_is_served_reads_the_application_before_failing() {
    use api::thirdparty::{apps, permissive_crd};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::Api;

    let mut p = Platform::start(&[TENANT], "mariadb", &[], true).await;
    p.platform_strategy::<api::strategy::MariaDB>("cozy-default-mariadb")
        .await;
    let crds: Api<CustomResourceDefinition> = Api::all(p.h.client());
    let crd = permissive_crd::<apps::MariaDB>(true);
    let crd_name = crd.metadata.name.clone().unwrap();
    crds.delete(&crd_name, &Default::default()).await.unwrap();
    let runner = p.runner.clone();
    harness::eventually(
        "the runner's watch finds the MariaDB kind not served",
        || {
            let report = runner.ready_report();
            let line = report
                .lines()
                .find(|l| l.contains("apps.MariaDB"))
                .map(str::to_owned);
            async move { line.filter(|l| l.contains("kind not served")) }
        },
    )
    .await;

    // Served again, and at once an application, its server and two BackupJobs.
    crds.create(&Default::default(), &crd).await.unwrap();
    p.mariadb(TENANT, "shop", json!({})).await;
    p.backup(TENANT, "first", "MariaDB", "shop", "cozy-default")
        .await;
    p.backup(TENANT, "nobody", "MariaDB", "nobody", "cozy-default")
        .await;
    p.succeeded(TENANT, "first", "k8s.mariadb.com Backup completed")
        .await;
    assert_eq!(
        p.failed(TENANT, "nobody").await,
        format!("MariaDB application not found: {TENANT}/nobody")
    );
    p.h.cleanup().await.unwrap();
}
