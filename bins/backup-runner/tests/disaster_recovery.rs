//! Disaster recovery on the real data plane (PostgreSQL, barman-cloud, the S3 server, the
//! simulated CNPG, COSI and Flux), as docs/disaster-recovery.md's runbook describes it: cluster 1
//! backs up `orders-db` twice with rows written between; the cluster is lost (every daemon and the
//! data plane's PostgreSQL servers killed; the bucket survives on disk); cluster 2 is a fresh API
//! (another emulator) installed with the same bucket (its credentials Secret and claim restored,
//! the S3 server on the same address over the same files) and the same HMAC key. The two Backups
//! come back on their own once the operator re-creates the tenant namespace, identical to the
//! originals but for the restored-from-catalog label, and a PITR restore from them returns the
//! rows, checked by SQL.

use crate::support::{WAIT, bin};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use api::backups::{Backup, BackupJob, RestoreJob};
use backup_runner::records::{KEY_DATA, RECORD_ANNOTATION, RESTORED_LABEL};
use harness::dataplane::{DATAPLANE_DEADLINE, DataPlane, apply, psql};
use harness::{DaemonSpec, Harness, eventually_within};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const TENANT: &str = "tenant-acme";
const SYSTEM_SECRET: &str = "bucket-cozy-backups-system-credentials";

/// Data plane (extra simulator arguments `extra`), renderer, projector, the runner with the
/// catalog, and the restore-orchestrator.
async fn install(h: &mut Harness, extra: &[String]) -> DataPlane {
    let mut args = vec!["--cosi-delay-ms=10".to_owned()];
    args.extend_from_slice(extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dp = h.spawn_dataplane("s3,cosi,cnpg,flux", &args).await.unwrap();
    h.spawn_ready(
        DaemonSpec::new("strategy-renderer", bin("strategy-renderer"))
            .args([format!("--endpoint={}", dp.http)]),
        WAIT,
    )
    .await
    .unwrap();
    h.spawn_ready(crate::support::projector(&dp.http), WAIT)
        .await
        .unwrap();
    h.spawn_ready(crate::catalog::runner_spec(&dp), WAIT)
        .await
        .unwrap();
    h.spawn_ready(
        DaemonSpec::new("restore-orchestrator", bin("restore-orchestrator")),
        WAIT,
    )
    .await
    .unwrap();
    dp
}

async fn app(h: &Harness, name: &str) {
    apply(
        &h.dynamic::<api::thirdparty::apps::Postgres>(TENANT),
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres",
               "metadata": {"name": name, "namespace": TENANT},
               "spec": {"size": "1Gi", "replicas": 1}}),
    )
    .await;
}

async fn backup(h: &Harness, name: &str) {
    let job = BackupJob::test(name)
        .for_app("Postgres", "orders-db")
        .class("cozy-default")
        .build();
    h.create(TENANT, &job).await;
    let jobs: Api<BackupJob> = Api::namespaced(h.client(), TENANT);
    let done = eventually_within(
        &format!("BackupJob {name} done"),
        DATAPLANE_DEADLINE,
        || async {
            let j = jobs.get(name).await.ok()?;
            j.status.as_ref()?.completed_at.as_ref()?;
            Some(j)
        },
    )
    .await;
    assert_eq!(
        done.status.unwrap().phase.as_deref(),
        Some("Succeeded"),
        "{name}"
    );
}

fn rows(uri: &str) -> String {
    psql(uri, "SELECT string_agg(item, ',' ORDER BY id) FROM orders")
}

/// A time strictly between the writes before and after it (PostgreSQL's clock, RFC 3339).
async fn mark(uri: &str) -> String {
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t = psql(
        uri,
        "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    t
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

async fn restore(h: &Harness, name: &str, backup: &str, target: &str, time: &str) -> RestoreJob {
    run_restore(h, name, backup, target, json!({"recoveryTime": time})).await
}

async fn restore_latest(h: &Harness, name: &str, backup: &str, target: &str) -> RestoreJob {
    run_restore(h, name, backup, target, json!({})).await
}

async fn run_restore(
    h: &Harness,
    name: &str,
    backup: &str,
    target: &str,
    options: serde_json::Value,
) -> RestoreJob {
    let job: RestoreJob = serde_json::from_value(json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
        "metadata": {"name": name, "namespace": TENANT},
        "spec": {"backupRef": {"name": backup},
                 "targetApplicationRef": {"apiGroup": "apps.cozystack.io", "kind": "Postgres", "name": target},
                 "options": options}}))
    .unwrap();
    let api: Api<RestoreJob> = Api::namespaced(h.client(), TENANT);
    api.create(&PostParams::default(), &job).await.unwrap();
    eventually_within(
        &format!("RestoreJob {name} finished"),
        DATAPLANE_DEADLINE,
        || async {
            let j = api.get(name).await.ok()?;
            j.is_terminal().then_some(j)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_survives_the_cluster_and_its_backups_restore_by_sql() {
    // Cluster 1: two backups with rows written between them.
    let mut h1 = Harness::start().await.unwrap();
    h1.create_namespaces(&[
        "tenant-root",
        "cozy-velero",
        "cozy-backup-controller",
        TENANT,
    ])
    .await
    .unwrap();
    let dp1 = install(&mut h1, &[]).await;
    app(&h1, "orders-db").await;
    let uri = h1.healthy_cluster_uri(TENANT, "postgres-orders-db").await;
    psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    psql(&uri, "INSERT INTO orders VALUES (1, 'tea'), (2, 'cups')");
    backup(&h1, "orders-db-1").await;
    psql(&uri, "INSERT INTO orders VALUES (3, 'marker')");
    let t = mark(&uri).await;
    psql(&uri, "INSERT INTO orders VALUES (4, 'after')");
    backup(&h1, "orders-db-2").await;
    let backups1: Api<Backup> = Api::namespaced(h1.client(), TENANT);
    let mut originals = BTreeMap::new();
    for name in ["orders-db-1", "orders-db-2"] {
        let b = eventually_within(&format!("the record of {name}"), WAIT, || async {
            backups1
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .filter(|b| b.annotations().contains_key(RECORD_ANNOTATION))
        })
        .await;
        originals.insert(name, b);
    }
    // What the operator keeps outside the cluster: the HMAC key; and the bucket (its name and keys).
    let key = Api::<Secret>::namespaced(h1.client(), "cozy-backup-controller")
        .get("cozy-backups-catalog-key")
        .await
        .unwrap()
        .data
        .unwrap()[KEY_DATA]
        .clone();
    let creds = h1.secret_data("tenant-root", SYSTEM_SECRET).await.unwrap();
    let bucket_name = creds["bucketName"].clone();

    // The cluster is lost: every daemon and PostgreSQL server stops; the bucket's files remain.
    for d in [
        "restore-orchestrator",
        "backup-runner",
        "credentials-projector",
        "strategy-renderer",
        "operator-sims",
    ] {
        h1.kill(d).await.unwrap();
    }

    // Cluster 2: a fresh API with the same bucket and the same key.
    let mut h2 = Harness::start().await.unwrap();
    h2.create_namespaces(&["tenant-root", "cozy-velero", "cozy-backup-controller"])
        .await
        .unwrap();
    let secret = |ns: &str, name: &str, data: BTreeMap<String, ByteString>| Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    Api::<Secret>::namespaced(h2.client(), "cozy-backup-controller")
        .create(
            &PostParams::default(),
            &secret(
                "cozy-backup-controller",
                "cozy-backups-catalog-key",
                BTreeMap::from([(KEY_DATA.to_owned(), key)]),
            ),
        )
        .await
        .unwrap();
    let mut system = secret(
        "tenant-root",
        SYSTEM_SECRET,
        creds
            .iter()
            .map(|(k, v)| (k.clone(), ByteString(v.clone().into_bytes())))
            .collect(),
    );
    system.metadata.labels = Some(BTreeMap::from([(
        "apps.cozystack.io/user-secret".to_owned(),
        "true".to_owned(),
    )]));
    Api::<Secret>::namespaced(h2.client(), "tenant-root")
        .create(&PostParams::default(), &system)
        .await
        .unwrap();
    // The claim bound to the old bucket (its CRD first: the simulator installs it only later).
    Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(h2.client())
        .create(
            &PostParams::default(),
            &api::thirdparty::permissive_crd::<api::thirdparty::cosi::BucketClaim>(true),
        )
        .await
        .unwrap();
    let claims = h2.dynamic::<api::thirdparty::cosi::BucketClaim>("tenant-root");
    eventually_within("the BucketClaim kind served", WAIT, || async {
        claims.list(&Default::default()).await.ok().map(|_| ())
    })
    .await;
    apply(
        &claims,
        json!({"apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketClaim",
               "metadata": {"name": "bucket-cozy-backups", "namespace": "tenant-root"},
               "spec": {"bucketClassName": "seaweedfs", "protocols": ["s3"]}}),
    )
    .await;
    claims
        .patch_status(
            "bucket-cozy-backups",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"bucketName": bucket_name, "bucketReady": true}})),
        )
        .await
        .unwrap();
    copy_dir(
        &dp1.data_dir.join("s3").join("buckets").join(&bucket_name),
        &h2.work_dir()
            .join("dataplane")
            .join("s3")
            .join("buckets")
            .join(&bucket_name),
    );
    let addr = |url: &str| url.split("://").nth(1).unwrap().to_owned();
    let _dp2 = install(
        &mut h2,
        &[
            format!("--s3-http-addr={}", addr(&dp1.http)),
            format!("--s3-https-addr={}", addr(&dp1.https)),
        ],
    )
    .await;

    // Nothing comes back into a namespace that does not exist; the operator re-creates it.
    let backups2: Api<Backup> = Api::namespaced(h2.client(), TENANT);
    let admin = h2.daemon("backup-runner").unwrap().admin().await.unwrap();
    eventually_within("a sync pass", WAIT, || async {
        (admin.metrics().value(
            "cozy_backups_backup_runner_catalog_syncs_total",
            &[("result", "ok")],
        ) >= 1.0)
            .then_some(())
    })
    .await;
    h2.create_namespaces(&[TENANT]).await.unwrap();
    for (name, original) in &originals {
        let b = eventually_within(&format!("{name} back"), WAIT, || async {
            backups2.get_opt(name).await.ok().flatten()
        })
        .await;
        assert_eq!(b.labels()[RESTORED_LABEL], "true");
        assert_eq!(b.spec, original.spec, "{name}");
        assert_eq!(b.status, original.status, "{name}");
    }

    // The operator re-creates the application; a PITR restore from the recovered Backups.
    app(&h2, "orders-db").await;
    app(&h2, "orders-db-copy").await;
    h2.healthy_cluster_uri(TENANT, "postgres-orders-db-copy")
        .await;
    let job = restore(&h2, "pitr-from-2", "orders-db-2", "orders-db-copy", &t).await;
    assert_eq!(
        job.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded"),
        "{:?}",
        job.status
    );
    let copy = h2
        .healthy_cluster_uri(TENANT, "postgres-orders-db-copy")
        .await;
    assert_eq!(rows(&copy), "tea,cups,marker");
    // The first Backup, replayed to the end of the archive: every row.
    app(&h2, "orders-db-copy2").await;
    h2.healthy_cluster_uri(TENANT, "postgres-orders-db-copy2")
        .await;
    let job = restore_latest(&h2, "latest-from-1", "orders-db-1", "orders-db-copy2").await;
    assert_eq!(
        job.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded"),
        "{:?}",
        job.status
    );
    let copy2 = h2
        .healthy_cluster_uri(TENANT, "postgres-orders-db-copy2")
        .await;
    assert_eq!(rows(&copy2), "tea,cups,marker,after");
}
