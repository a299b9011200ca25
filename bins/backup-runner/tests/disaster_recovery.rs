//! Disaster recovery on the real data plane (PostgreSQL, barman-cloud, the S3 server, the
//! simulated CNPG, COSI and Flux), as docs/disaster-recovery.md's runbook describes it: cluster 1
//! backs up `orders-db` twice with rows written between; the cluster is lost (every daemon and the
//! data plane's PostgreSQL servers killed; the bucket survives on disk); cluster 2 is a fresh API
//! (another emulator) installed with the same bucket (its credentials Secret and claim restored,
//! the S3 server on the same address over the same files) and the same HMAC key. The two Backups
//! come back on their own once the operator re-creates the tenant namespace, identical to the
//! originals but for the restored-from-catalog label, and a PITR restore from them returns the
//! rows, checked by SQL. The same for a MariaDB application (a real `mariadbd`, its dump in the
//! bucket): its Backup comes back and restores the dump into the re-created, empty server.

use crate::support::{WAIT, bin};

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use api::backups::{Backup, RestoreJob};
use backup_runner::records::{KEY_DATA, RECORD_ANNOTATION, RESTORED_LABEL};
use harness::dataplane::{DATAPLANE_DEADLINE, DataPlane, MariaDbConn, apply, psql};
use harness::{DaemonSpec, Harness, eventually_within};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

const TENANT: &str = "tenant-acme";
const SYSTEM_SECRET: &str = "bucket-cozy-backups-system-credentials";

/// The simulators of a PostgreSQL cluster, and of one with MariaDB too.
const PG_SIMS: &str = "s3,cosi,cnpg,flux";
const MARIADB_SIMS: &str = "s3,cosi,cnpg,flux,mariadb";

/// Data plane (simulators `sims`, extra arguments `extra`), renderer, projector, the runner with
/// the catalog, and the restore-orchestrator.
async fn install(h: &mut Harness, sims: &str, extra: &[String]) -> DataPlane {
    if sims.contains("mariadb") {
        // The application kind is served before the daemons start, as on a platform (a kind
        // that appears later is listed again only after the watch's backoff).
        mariadb_app_kind(h).await;
    }
    let mut args = vec!["--cosi-delay-ms=10".to_owned()];
    args.extend_from_slice(extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dp = h.spawn_dataplane(sims, &args).await.unwrap();
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
    backup_of(h, name, "Postgres", "orders-db").await;
}

async fn backup_of(h: &Harness, name: &str, kind: &str, app: &str) {
    h.backup_succeeded(
        TENANT,
        name,
        (kind, app),
        "cozy-default",
        DATAPLANE_DEADLINE,
    )
    .await;
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
    run_restore(
        h,
        name,
        backup,
        ("Postgres", target),
        json!({"recoveryTime": time}),
    )
    .await
}

async fn restore_latest(h: &Harness, name: &str, backup: &str, target: &str) -> RestoreJob {
    run_restore(h, name, backup, ("Postgres", target), json!({})).await
}

async fn run_restore(
    h: &Harness,
    name: &str,
    backup: &str,
    (kind, target): (&str, &str),
    options: serde_json::Value,
) -> RestoreJob {
    let job: RestoreJob = serde_json::from_value(json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
        "metadata": {"name": name, "namespace": TENANT},
        "spec": {"backupRef": {"name": backup},
                 "targetApplicationRef": {"apiGroup": "apps.cozystack.io", "kind": kind, "name": target},
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

/// Cluster 1: the emulator with the platform's and the tenant's namespaces, and everything
/// [`install`] starts.
async fn cluster_1(sims: &str) -> (Harness, DataPlane) {
    let mut h = Harness::start().await.unwrap();
    h.create_namespaces(&[
        "tenant-root",
        "cozy-velero",
        "cozy-backup-controller",
        TENANT,
    ])
    .await
    .unwrap();
    let dp = install(&mut h, sims, &[]).await;
    (h, dp)
}

/// The tenant's Backups `names` once the runner has written their records.
async fn recorded(h: &Harness, names: &[&str]) -> BTreeMap<String, Backup> {
    let backups: Api<Backup> = Api::namespaced(h.client(), TENANT);
    let mut originals = BTreeMap::new();
    for name in names {
        let b = eventually_within(&format!("the record of {name}"), WAIT, || async {
            backups
                .get_opt(name)
                .await
                .ok()
                .flatten()
                .filter(|b| b.annotations().contains_key(RECORD_ANNOTATION))
        })
        .await;
        originals.insert((*name).to_owned(), b);
    }
    originals
}

/// Each of `originals` is back in the recovered cluster, labelled restored-from-catalog and
/// otherwise identical (spec and status).
async fn come_back(h2: &Harness, originals: &BTreeMap<String, Backup>) {
    let backups: Api<Backup> = Api::namespaced(h2.client(), TENANT);
    for (name, original) in originals {
        let b = eventually_within(&format!("{name} back"), WAIT, || async {
            backups.get_opt(name).await.ok().flatten()
        })
        .await;
        assert_eq!(b.labels()[RESTORED_LABEL], "true");
        assert_eq!(b.spec, original.spec, "{name}");
        assert_eq!(b.status, original.status, "{name}");
    }
}

/// The `apps.cozystack.io` MariaDB kind, served.
async fn mariadb_app_kind(h: &Harness) {
    let crds: Api<CustomResourceDefinition> = Api::all(h.client());
    match crds
        .create(
            &PostParams::default(),
            &api::thirdparty::permissive_crd::<api::thirdparty::apps::MariaDB>(true),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("the MariaDB application CRD: {e}"),
    }
    let apps = h.dynamic::<api::thirdparty::apps::MariaDB>(TENANT);
    eventually_within("the MariaDB application kind served", WAIT, || async {
        apps.list(&Default::default()).await.ok().map(|_| ())
    })
    .await;
}

/// MariaDB application `name` and the operator server its chart renders; returns the server's
/// connection once it accepts connections.
async fn mariadb_app(h: &Harness, name: &str) -> MariaDbConn {
    let apps = h.dynamic::<api::thirdparty::apps::MariaDB>(TENANT);
    apply(
        &apps,
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "MariaDB",
               "metadata": {"name": name, "namespace": TENANT},
               "spec": {"replicas": 1}}),
    )
    .await;
    h.ready_mariadb(TENANT, name).await
}

/// The cluster behind `h1` is lost: the operator keeps the HMAC key and the bucket (its name,
/// keys and files) outside it, every daemon and database server stops. A fresh API (cluster 2)
/// is installed with the same bucket and key and the simulators `sims`; once its runner has made
/// a sync pass (nothing comes back into a namespace that does not exist), the operator re-creates
/// the tenant namespace.
async fn lose_and_recover(h1: &mut Harness, dp1: &DataPlane, sims: &str) -> Harness {
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
        sims,
        &[
            format!("--s3-http-addr={}", addr(&dp1.http)),
            format!("--s3-https-addr={}", addr(&dp1.https)),
        ],
    )
    .await;

    // Nothing comes back into a namespace that does not exist; the operator re-creates it.
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
    h2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_catalog_survives_the_cluster_and_its_backups_restore_by_sql() {
    // Cluster 1: two backups with rows written between them.
    let (mut h1, dp1) = cluster_1(PG_SIMS).await;
    app(&h1, "orders-db").await;
    let uri = h1.healthy_cluster_uri(TENANT, "postgres-orders-db").await;
    psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    psql(&uri, "INSERT INTO orders VALUES (1, 'tea'), (2, 'cups')");
    backup(&h1, "orders-db-1").await;
    psql(&uri, "INSERT INTO orders VALUES (3, 'marker')");
    let t = mark(&uri).await;
    psql(&uri, "INSERT INTO orders VALUES (4, 'after')");
    backup(&h1, "orders-db-2").await;
    let originals = recorded(&h1, &["orders-db-1", "orders-db-2"]).await;
    let h2 = lose_and_recover(&mut h1, &dp1, PG_SIMS).await;
    come_back(&h2, &originals).await;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mariadb_backup_survives_the_cluster_and_restores_its_dump_by_sql() {
    // Cluster 1: a real mariadbd; its dump goes to the bucket through the operator's Backup.
    let (mut h1, dp1) = cluster_1(MARIADB_SIMS).await;
    let shop = mariadb_app(&h1, "shop").await;
    shop.sql(
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id int PRIMARY KEY, item text); \
         INSERT INTO shop.orders VALUES (1, 'tea'), (2, 'cups')",
    );
    backup_of(&h1, "shop-1", "MariaDB", "shop").await;
    let originals = recorded(&h1, &["shop-1"]).await;

    // The cluster and its server are lost; cluster 2 gets the Backup back from its record.
    let h2 = lose_and_recover(&mut h1, &dp1, MARIADB_SIMS).await;
    come_back(&h2, &originals).await;

    // The operator re-creates the application (an empty server); the recovered Backup restores
    // the dump into it.
    let shop = mariadb_app(&h2, "shop").await;
    assert_eq!(
        shop.sql("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = 'shop'"),
        "0",
        "the re-created server starts empty"
    );
    let job = run_restore(&h2, "shop-from-1", "shop-1", ("MariaDB", "shop"), json!({})).await;
    assert_eq!(
        job.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded"),
        "{:?}",
        job.status
    );
    assert_eq!(
        shop.sql("SELECT GROUP_CONCAT(item ORDER BY id) FROM shop.orders"),
        "tea,cups"
    );
}
