//! End to end over the real data plane, MariaDB: the simulated mariadb-operator runs a real
//! `mariadbd` per operator `MariaDB`, its Backup runs `mariadb-dump` and uploads the dump to the
//! project's S3 server over TLS, and its Restore replays the dump with `mariadb`. Driven through
//! the real strategy-renderer, credentials-projector, backup-runner and restore-orchestrator on
//! the platform's `cozy-default` class: the dump is an object in the bucket, the rows come back
//! (into a copy and in place), a restore whose dump is gone from the bucket fails with the Job's
//! words, and a dump uploaded with a wrong secret key fails the BackupJob with the S3 server's
//! refusal.

use std::time::Duration;

use api::backups::BackupJob;
use api::thirdparty::{apps, mariadb};
use harness::dataplane::{DATAPLANE_DEADLINE, DataPlane, MariaDbConn, apply};
use harness::{DaemonSpec, Harness, eventually_within};
use kube::api::{Api, PostParams};
use kube::core::ApiResource;
use serde_json::json;

use crate::support;

const TENANT: &str = "tenant-acme";
const READY: Duration = Duration::from_secs(60);

fn bin(name: &str) -> std::path::PathBuf {
    harness::locate_binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The emulator, the data plane with the mariadb simulator, the renderer, the projector, the
/// runner and the orchestrator.
async fn start() -> (support::Platform, DataPlane) {
    start_with(&[]).await
}

/// [`start`], with the orchestrator's extra arguments (it always trusts the data plane's CA).
pub(crate) async fn start_with(orchestrator: &[&str]) -> (support::Platform, DataPlane) {
    let mut h = Harness::start().await.unwrap();
    h.create_namespaces(&[
        "tenant-root",
        "cozy-velero",
        "cozy-backup-controller",
        TENANT,
    ])
    .await
    .unwrap();
    Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(h.client())
        .create(
            &PostParams::default(),
            &api::thirdparty::permissive_crd::<apps::MariaDB>(true),
        )
        .await
        .unwrap();
    let dp = h
        .spawn_dataplane("s3,cosi,mariadb", &["--cosi-delay-ms=10"])
        .await
        .unwrap();
    h.spawn_renderer_and_projector(&dp, READY).await.unwrap();
    h.spawn_ready(
        DaemonSpec::new("backup-runner", bin("backup-runner")),
        READY,
    )
    .await
    .unwrap();
    h.spawn_ready(
        DaemonSpec::new("restore-orchestrator", bin("restore-orchestrator"))
            .args([format!("--storage-ca-file={}", dp.ca_file.display())])
            .args(orchestrator.iter().copied()),
        READY,
    )
    .await
    .unwrap();
    (support::Platform { h }, dp)
}

/// Applies the operator MariaDB the chart renders for application `name`, with `annotations`.
async fn apply_server(p: &support::Platform, name: &str, annotations: serde_json::Value) {
    let server = format!("mariadb-{name}");
    apply(
        &p.h.dynamic::<mariadb::MariaDB>(TENANT),
        json!({"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "MariaDB",
               "metadata": {"name": server, "namespace": TENANT, "annotations": annotations},
               "spec": {"replicas": 1,
                        "rootPasswordSecretKeyRef": {"name": format!("{server}-credentials"), "key": "root"}}}),
    )
    .await;
}

/// MariaDB application `name` and the operator MariaDB its chart renders; returns the server's
/// connection once it accepts connections.
pub(crate) async fn mariadb_app(p: &support::Platform, name: &str) -> MariaDbConn {
    p.app::<apps::MariaDB>(name, json!({"replicas": 1})).await;
    p.h.ready_mariadb(TENANT, name).await
}

/// The rows of `shop.orders`, by id.
pub(crate) fn rows(db: &MariaDbConn) -> String {
    db.sql("SELECT GROUP_CONCAT(item ORDER BY id) FROM shop.orders")
}

/// The objects under `prefix` in the platform bucket, as files of the S3 server.
fn objects(dp: &DataPlane, prefix: &str) -> Vec<std::path::PathBuf> {
    let buckets = dp.data_dir.join("s3").join("buckets");
    let mut found = Vec::new();
    for bucket in std::fs::read_dir(&buckets).into_iter().flatten().flatten() {
        let dir = bucket.path().join(prefix);
        for f in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if f.path().is_file() {
                found.push(f.path());
            }
        }
    }
    found.sort();
    found
}

/// Waits for BackupJob `name` to end and returns it.
async fn finished(p: &support::Platform, name: &str) -> BackupJob {
    let jobs: Api<BackupJob> = Api::namespaced(p.h.client(), TENANT);
    eventually_within(
        &format!("BackupJob {name} finished"),
        DATAPLANE_DEADLINE,
        || {
            let jobs = jobs.clone();
            async move {
                let j = jobs.get_opt(name).await.ok()??;
                api::contract::phases::is_terminal(j.status.as_ref()?.phase.as_deref()).then_some(j)
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_dump_lands_in_s3_and_restores_into_a_copy_and_in_place() {
    let (p, dp) = start().await;
    let shop = mariadb_app(&p, "shop").await;
    let copy = mariadb_app(&p, "shop-copy").await;
    shop.sql(
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id int PRIMARY KEY, item text);
         INSERT INTO shop.orders VALUES (1, 'apples'), (2, 'pears'), (3, 'plums')",
    );

    // The backup: a gzip dump of the server, an object under the application's prefix.
    let backup = p
        .backup(TENANT, "nightly", "MariaDB", "shop", "cozy-default")
        .await;
    let dumps = objects(&dp, "tenant-acme/shop");
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    let name = dumps[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("backup.") && name.ends_with(".gzip.sql"),
        "{name}"
    );
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(&dumps[0])
        .output()
        .unwrap();
    assert!(out.status.success());
    let sql = String::from_utf8_lossy(&out.stdout);
    assert!(sql.contains("INSERT INTO `orders` VALUES"), "{sql}");
    assert!(sql.contains("'plums'"), "{sql}");
    let operator = &backup.spec.driver_metadata.as_ref().unwrap()["k8s.mariadb.com/backup-name"];
    let condition = p
        .get(
            &ApiResource::erase::<mariadb::Backup>(&()),
            Some(TENANT),
            operator,
        )
        .await
        .unwrap()["status"]["conditions"][0]
        .clone();
    assert_eq!(
        (condition["status"].as_str(), condition["reason"].as_str()),
        (Some("True"), Some("JobComplete"))
    );

    // A row written after the backup, then a restore into the copy: the backed-up rows only.
    shop.sql("INSERT INTO shop.orders VALUES (4, 'later')");
    p.restore(
        TENANT,
        "to-copy",
        "nightly",
        Some(("MariaDB", "shop-copy")),
        serde_json::Value::Null,
    )
    .await;
    p.succeeded(TENANT, "to-copy").await;
    assert_eq!(rows(&copy), "apples,pears,plums");
    assert_eq!(
        rows(&shop),
        "apples,pears,plums,later",
        "the source untouched"
    );

    // In place: the later row is gone.
    p.restore(TENANT, "in-place", "nightly", None, serde_json::Value::Null)
        .await;
    p.succeeded(TENANT, "in-place").await;
    assert_eq!(rows(&shop), "apples,pears,plums");

    // The dump gone from the bucket: the restore Job finds nothing and the RestoreJob fails with
    // its words; the server keeps its rows.
    std::fs::remove_file(&dumps[0]).unwrap();
    p.restore(TENANT, "no-dump", "nightly", None, serde_json::Value::Null)
        .await;
    let (_, message) = p.failed(TENANT, "no-dump").await;
    assert!(
        message.contains("no valid backup files were found under \"tenant-acme/shop/\""),
        "{message}"
    );
    assert_eq!(rows(&shop), "apples,pears,plums");
    let mut p = p;
    p.h.cleanup().await.unwrap();
}

/// Class `wrong-key`: the platform's MariaDB strategy, but reading the secret key from a Secret
/// that holds a wrong one.
async fn wrong_key_class(p: &support::Platform) {
    let strategies = Api::<kube::api::DynamicObject>::all_with(
        p.h.client(),
        &ApiResource::erase::<api::strategy::MariaDB>(&()),
    );
    let platform = eventually_within("cozy-default-mariadb", READY, || {
        let strategies = strategies.clone();
        async move { strategies.get_opt("cozy-default-mariadb").await.ok()? }
    })
    .await;
    let mut template = platform.data["spec"]["template"].clone();
    template["storage"]["s3"]["secretAccessKeySecretKeyRef"] =
        json!({"name": "wrong-s3-key", "key": "AWS_SECRET_ACCESS_KEY"});
    p.strategy(
        &ApiResource::erase::<api::strategy::MariaDB>(&()),
        "wrong-key",
        template,
    )
    .await;
    p.class("wrong-key", "MariaDB", "MariaDB", "wrong-key", &[])
        .await;
    let wrong = k8s_openapi::api::core::v1::Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("wrong-s3-key".into()),
            namespace: Some(TENANT.into()),
            ..Default::default()
        },
        data: Some(
            [(
                "AWS_SECRET_ACCESS_KEY".to_owned(),
                k8s_openapi::ByteString(b"not-the-secret-key-0000".to_vec()),
            )]
            .into(),
        ),
        ..Default::default()
    };
    p.h.create(TENANT, &wrong).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_dump_with_a_wrong_secret_key_fails_with_the_s3_refusal() {
    let (p, dp) = start().await;
    let _shop = mariadb_app(&p, "shop").await;
    wrong_key_class(&p).await;
    let job = BackupJob::test("bad-key")
        .for_app("MariaDB", "shop")
        .class("wrong-key")
        .build();
    p.h.create(TENANT, &job).await;
    let status = finished(&p, "bad-key").await.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"), "{status:?}");
    // The upload's refusal, in the words the operator's Job would log: the object and S3's code.
    let message = status.message.unwrap_or_default();
    assert!(
        message.starts_with("S3 put tenant-acme/shop/backup.")
            && message.ends_with(".gzip.sql: HTTP 403 SignatureDoesNotMatch"),
        "{message}"
    );
    let operator =
        p.h.dynamic::<mariadb::Backup>(TENANT)
            .list(&Default::default())
            .await
            .unwrap()
            .items;
    assert_eq!(operator.len(), 1);
    let complete = &operator[0].data["status"]["conditions"][0];
    assert_eq!(
        (
            &complete["status"],
            &complete["reason"],
            &complete["message"]
        ),
        (&json!("True"), &json!("JobFailed"), &json!(message)),
        "what the operator writes for a Job out of retries"
    );
    assert!(objects(&dp, "tenant-acme/shop").is_empty());
    let mut p = p;
    p.h.cleanup().await.unwrap();
}

/// The backup-runner SIGKILLed while the operator Backup is `JobRunning` (held there by the hang
/// control) and restarted: the job adopts the operator Backup it created, the dump runs once when
/// the hold is released, and the bucket holds exactly one dump.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_runner_killed_mid_backup_leaves_exactly_one_dump() {
    let (mut p, dp) = start().await;
    let shop = mariadb_app(&p, "shop").await;
    shop.sql(
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id int PRIMARY KEY, item text);
         INSERT INTO shop.orders VALUES (1, 'apples')",
    );
    apply_server(&p, "shop", json!({support::HANG: "true"})).await;
    let job = BackupJob::test("killed")
        .for_app("MariaDB", "shop")
        .class("cozy-default")
        .build();
    p.h.create(TENANT, &job).await;
    let backups = p.h.dynamic::<mariadb::Backup>(TENANT);
    eventually_within("the operator Backup JobRunning", DATAPLANE_DEADLINE, || {
        let backups = backups.clone();
        async move {
            let list = backups.list(&Default::default()).await.ok()?.items;
            list.iter()
                .any(|b| b.data["status"]["conditions"][0]["reason"] == "JobRunning")
                .then_some(())
        }
    })
    .await;
    p.h.kill("backup-runner").await.unwrap();
    p.h.restart("backup-runner", READY).await.unwrap();
    apply_server(&p, "shop", json!({support::HANG: "false"})).await;
    let status = finished(&p, "killed").await.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
    assert_eq!(
        backups.list(&Default::default()).await.unwrap().items.len(),
        1,
        "one operator Backup"
    );
    let dumps = objects(&dp, "tenant-acme/shop");
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    p.h.cleanup().await.unwrap();
}

/// A BackupJob that failed with the real tool (the upload refused for a wrong secret key) expires
/// under the real retention-cleaner's `--failed-backup-ttl`: the job and its operator Backup go;
/// the dump an earlier job put in the bucket is byte for byte what it was, its operator Backup
/// stays, and the only catalog Backup is that earlier job's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_failed_dump_expires_with_its_operator_backup_and_the_bucket_untouched() {
    let (mut p, dp) = start().await;
    let shop = mariadb_app(&p, "shop").await;
    shop.sql(
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id int PRIMARY KEY, item text);
         INSERT INTO shop.orders VALUES (1, 'apples')",
    );
    let good = p
        .backup(TENANT, "nightly", "MariaDB", "shop", "cozy-default")
        .await;
    let kept = good.spec.driver_metadata.as_ref().unwrap()["k8s.mariadb.com/backup-name"].clone();
    let dumps = objects(&dp, "tenant-acme/shop");
    assert_eq!(dumps.len(), 1, "{dumps:?}");
    let bytes = std::fs::read(&dumps[0]).unwrap();

    wrong_key_class(&p).await;
    let job = BackupJob::test("bad-key")
        .for_app("MariaDB", "shop")
        .class("wrong-key")
        .build();
    p.h.create(TENANT, &job).await;
    let status = finished(&p, "bad-key").await.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"), "{status:?}");
    assert!(
        status
            .message
            .as_deref()
            .is_some_and(|m| m.ends_with("HTTP 403 SignatureDoesNotMatch")),
        "{status:?}"
    );
    let operator = p.h.dynamic::<mariadb::Backup>(TENANT);
    let names = || async {
        let mut names: Vec<String> = operator
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|b| b.metadata.name)
            .collect();
        names.sort();
        names
    };
    assert_eq!(
        names().await.len(),
        2,
        "the failed job's operator Backup is left"
    );

    crate::dataplane::spawn_failed_job_cleaner(&mut p.h).await;
    let jobs: Api<BackupJob> = Api::namespaced(p.h.client(), TENANT);
    eventually_within(
        "the failed BackupJob and its operator Backup deleted",
        DATAPLANE_DEADLINE,
        || async {
            let gone = jobs.get_opt("bad-key").await.ok()?.is_none();
            (gone && names().await == [kept.clone()]).then_some(())
        },
    )
    .await;
    assert!(jobs.get_opt("nightly").await.unwrap().is_some());
    let catalog: Vec<String> = Api::<api::backups::Backup>::namespaced(p.h.client(), TENANT)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|b| b.metadata.name)
        .collect();
    assert_eq!(catalog, ["nightly"], "no catalog Backup of the failed job");
    assert_eq!(
        objects(&dp, "tenant-acme/shop"),
        dumps,
        "the bucket untouched"
    );
    assert_eq!(std::fs::read(&dumps[0]).unwrap(), bytes);
    harness::rbac::assert_allowed(&p.h.audit(), "retention-cleaner");
    p.h.cleanup().await.unwrap();
}

/// The restore-orchestrator SIGKILLed while the operator Restore into a copy is `JobRunning`
/// (held there by the hang-restore control on the copy, so the kill cannot miss the window) and
/// restarted: it adopts that Restore; once released, the dump is replayed once, and the copy
/// holds the backed-up rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_orchestrator_killed_mid_restore_converges_to_one_restore() {
    let (mut p, _dp) = start().await;
    let shop = mariadb_app(&p, "shop").await;
    let copy = mariadb_app(&p, "shop-copy").await;
    shop.sql(
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id int PRIMARY KEY, item text);
         INSERT INTO shop.orders VALUES (1, 'apples'), (2, 'pears')",
    );
    p.backup(TENANT, "nightly", "MariaDB", "shop", "cozy-default")
        .await;
    shop.sql("INSERT INTO shop.orders VALUES (3, 'later')");
    apply_server(&p, "shop-copy", json!({support::HANG_RESTORE: "true"})).await;
    p.restore(
        TENANT,
        "to-copy",
        "nightly",
        Some(("MariaDB", "shop-copy")),
        serde_json::Value::Null,
    )
    .await;
    let restores = p.h.dynamic::<mariadb::Restore>(TENANT);
    eventually_within(
        "the operator Restore JobRunning",
        DATAPLANE_DEADLINE,
        || {
            let restores = restores.clone();
            async move {
                let list = restores.list(&Default::default()).await.ok()?.items;
                list.iter()
                    .any(|r| r.data["status"]["conditions"][0]["reason"] == "JobRunning")
                    .then_some(())
            }
        },
    )
    .await;
    p.h.kill("restore-orchestrator").await.unwrap();
    p.h.restart("restore-orchestrator", READY).await.unwrap();
    apply_server(&p, "shop-copy", json!({support::HANG_RESTORE: "false"})).await;
    p.succeeded(TENANT, "to-copy").await;
    let list = restores.list(&Default::default()).await.unwrap().items;
    assert_eq!(list.len(), 1, "one operator Restore: {list:?}");
    assert_eq!(
        list[0].data["spec"]["mariaDbRef"]["name"],
        "mariadb-shop-copy"
    );
    assert_eq!(rows(&copy), "apples,pears");
    assert_eq!(rows(&shop), "apples,pears,later", "the source untouched");
    p.h.cleanup().await.unwrap();
}
