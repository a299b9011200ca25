//! The simulated Flux helm-controller end to end: a Postgres application becomes HelmRelease
//! `postgres-<app>` and the Cluster the Cozystack chart renders; a deleted Cluster comes back
//! unless the HelmRelease is suspended; `reconcile.fluxcd.io/requestedAt` triggers a reconcile; the
//! chart's render failures show on the HelmRelease. Then, with CNPG and real PostgreSQL, the
//! restore-in-place choreography the restore-orchestrator will drive (suspend, patch the app,
//! delete the Cluster and its PVCs, resume) brings the data back from the bucket.

use crate::common;

use common::*;
use harness::Harness;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use api::thirdparty::{apps::Postgres, cnpg::Cluster, flux::HelmRelease};

fn condition(obj: &Value, t: &str) -> Option<Value> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == t)
        .cloned()
}

async fn merge(api: &kube::Api<kube::api::DynamicObject>, name: &str, patch: Value) {
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_or_else(|e| panic!("patching {name}: {e}"));
}

/// Waits until the HelmRelease has handled `requestedAt` = `token`: every HelmRelease is evaluated
/// in the same pass, so this is a barrier for what Flux decided about all of them.
async fn reconcile_barrier(
    releases: &kube::Api<kube::api::DynamicObject>,
    name: &str,
    token: &str,
) {
    merge(
        releases,
        name,
        json!({"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": token}}}),
    )
    .await;
    eventually(&format!("{name} handled {token}"), || {
        let releases = releases.clone();
        async move {
            let hr = get(&releases, name).await?;
            (hr["status"]["lastHandledReconcileAt"] == token).then_some(())
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_releases_render_recreate_suspend_and_fail_like_flux() {
    let mut h = Harness::start().await.unwrap();
    let ns = h.temp_namespace("flux").await.unwrap();
    spawn_sims(&mut h, "flux", &[]).await;
    let apps = api::<Postgres>(&h, &ns);
    let releases = api::<HelmRelease>(&h, &ns);
    let clusters = api::<Cluster>(&h, &ns);
    for app in ["db", "other"] {
        apply(
            &apps,
            json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres",
                   "metadata": {"name": app}, "spec": {"size": "1Gi", "replicas": 1}}),
        )
        .await;
    }
    let hr = eventually("the release installed", || {
        let releases = releases.clone();
        async move {
            let hr = get(&releases, "postgres-db").await?;
            (condition(&hr, "Ready")?["status"] == "True").then_some(hr)
        }
    })
    .await;
    let ready = condition(&hr, "Ready").unwrap();
    assert_eq!(ready["reason"], "InstallSucceeded");
    assert_eq!(
        ready["message"],
        format!(
            "Helm install succeeded for release {ns}/postgres-db.v1 with chart postgres@0.0.0-sim"
        )
    );
    assert_eq!(hr["spec"]["values"], json!({"size": "1Gi", "replicas": 1}));
    assert_eq!(
        hr["metadata"]["labels"]["apps.cozystack.io/application.name"],
        "db"
    );
    let cluster = get(&clusters, "postgres-db").await.unwrap();
    assert_eq!(cluster["spec"]["instances"], 1);
    assert_eq!(cluster["spec"]["storage"]["size"], "1Gi");

    // Not suspended: a deleted Cluster is re-created.
    let old_uid = cluster["metadata"]["uid"].clone();
    clusters
        .delete("postgres-db", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the Cluster re-created", || {
        let clusters = clusters.clone();
        let old_uid = old_uid.clone();
        async move {
            let c = get(&clusters, "postgres-db").await?;
            (c["metadata"]["uid"] != old_uid).then_some(())
        }
    })
    .await;

    // Suspended: neither a deletion nor a values change is acted on.
    merge(&releases, "postgres-db", json!({"spec": {"suspend": true}})).await;
    clusters
        .delete("postgres-db", &DeleteParams::default())
        .await
        .unwrap();
    merge(&apps, "db", json!({"spec": {"replicas": 3}})).await;
    reconcile_barrier(&releases, "postgres-other", "barrier-1").await;
    assert!(get(&clusters, "postgres-db").await.is_none());
    let hr = get(&releases, "postgres-db").await.unwrap();
    assert_eq!(
        hr["spec"]["values"]["replicas"], 3,
        "values still follow the app"
    );
    assert_eq!(hr["status"]["history"].as_array().unwrap().len(), 2);

    // Resumed: the new values are rendered (an upgrade).
    merge(
        &releases,
        "postgres-db",
        json!({"spec": {"suspend": false}}),
    )
    .await;
    let c = eventually("the Cluster rendered with the new values", || {
        let clusters = clusters.clone();
        async move { get(&clusters, "postgres-db").await }
    })
    .await;
    assert_eq!(c["spec"]["instances"], 3);
    reconcile_barrier(&releases, "postgres-db", "after-resume").await;
    let hr = get(&releases, "postgres-db").await.unwrap();
    assert_eq!(
        condition(&hr, "Ready").unwrap()["reason"],
        "UpgradeSucceeded"
    );

    // The chart's render failures surface as helm-controller reports them.
    merge(
        &apps,
        "db",
        json!({"spec": {"bootstrap": {"enabled": true, "oldName": "postgres-src"}}}),
    )
    .await;
    let failed = eventually("the upgrade failed", || {
        let releases = releases.clone();
        async move {
            let hr = get(&releases, "postgres-db").await?;
            let ready = condition(&hr, "Ready")?;
            (ready["status"] == "False").then_some(ready)
        }
    })
    .await;
    assert_eq!(failed["reason"], "UpgradeFailed");
    assert!(
        failed["message"].as_str().unwrap().contains(
            "postgres: bootstrap.enabled=true requires S3 credentials: set backup.s3AccessKey+backup.s3SecretKey, backup.s3CredentialsSecret.name, or backup.useSystemBucket=true"
        ),
        "{failed}"
    );
    merge(
        &apps,
        "db",
        json!({"spec": {"backup": {"useSystemBucket": true}}}),
    )
    .await;
    let failed = eventually("the system-bucket refusal", || {
        let releases = releases.clone();
        async move {
            let hr = get(&releases, "postgres-db").await?;
            let ready = condition(&hr, "Ready")?;
            ready["message"]
                .as_str()?
                .contains("incompatible with backup.useSystemBucket=true")
                .then_some(ready)
        }
    })
    .await;
    assert_eq!(failed["status"], "False");
    assert_eq!(
        condition(&get(&releases, "postgres-db").await.unwrap(), "Released").unwrap()["status"],
        "False"
    );
    h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restore_in_place_through_flux_brings_the_data_back() {
    let mut h = Harness::start().await.unwrap();
    let ns = h.temp_namespace("restore").await.unwrap();
    let data_dir = spawn_sims(&mut h, "s3,cosi,cnpg,flux", &[]).await;
    let creds = bucket_credentials(&h, &ns, "backups").await;
    Api::<Secret>::namespaced(h.client(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "cozy-backups-creds"},
                "stringData": {"AWS_ACCESS_KEY_ID": creds["accessKey"],
                               "AWS_SECRET_ACCESS_KEY": creds["secretKey"]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    let apps = api::<Postgres>(&h, &ns);
    let releases = api::<HelmRelease>(&h, &ns);
    let clusters = api::<Cluster>(&h, &ns);
    apply(
        &apps,
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres",
               "metadata": {"name": "orders"}, "spec": {"size": "1Gi", "replicas": 1}}),
    )
    .await;
    wait_healthy(&h, &ns, "postgres-orders").await;
    let app_uri = cluster_uri(&h, &ns, "postgres-orders-app").await;
    psql(&app_uri, "CREATE TABLE orders (id int PRIMARY KEY)");
    psql(&app_uri, "INSERT INTO orders VALUES (1), (2)");

    // What the backup driver does: the plugin entry and ObjectStore, then a plugin Backup.
    let destination = format!("s3://{}/{ns}/orders/", creds["bucketName"]);
    let endpoint = format!("https://{}", creds["endpoint"]);
    let driver = PatchParams::apply("cozystack-cnpg-backup-driver").force();
    api::<api::thirdparty::barman::ObjectStore>(&h, &ns)
        .patch("postgres-orders", &driver, &Patch::Apply(json!({
            "apiVersion": "barmancloud.cnpg.io/v1", "kind": "ObjectStore",
            "metadata": {"name": "postgres-orders"},
            "spec": {"configuration": {"destinationPath": destination, "endpointURL": endpoint,
                "s3Credentials": {
                    "accessKeyId": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"},
                    "secretAccessKey": {"name": "cozy-backups-creds", "key": "AWS_SECRET_ACCESS_KEY"}}}},
        })))
        .await
        .unwrap();
    clusters
        .patch("postgres-orders", &driver, &Patch::Apply(json!({
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
            "metadata": {"name": "postgres-orders"},
            "spec": {"plugins": [{"name": "barman-cloud.cloudnative-pg.io", "isWALArchiver": true,
                "parameters": {"barmanObjectName": "postgres-orders", "serverName": "postgres-orders"}}]},
        })))
        .await
        .unwrap();
    let backups = api::<api::thirdparty::cnpg::Backup>(&h, &ns);
    apply(
        &backups,
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Backup", "metadata": {"name": "adhoc"},
               "spec": {"method": "plugin", "cluster": {"name": "postgres-orders"},
                        "pluginConfiguration": {"name": "barman-cloud.cloudnative-pg.io"}}}),
    )
    .await;
    let phase = backup_finished(&backups, "adhoc").await;
    assert_eq!(phase["phase"], "completed", "{phase}");
    // A Flux re-render keeps the driver's plugin entry (different field managers).
    reconcile_barrier(&releases, "postgres-orders", "keep-plugins").await;
    let c = get(&clusters, "postgres-orders").await.unwrap();
    assert_eq!(
        c["spec"]["plugins"][0]["name"],
        "barman-cloud.cloudnative-pg.io"
    );
    // A row after the backup, archived: recovery to the end of the archive brings it back.
    psql(&app_uri, "INSERT INTO orders VALUES (3)");
    let admin = cluster_uri(&h, &ns, "postgres-orders-superuser")
        .await
        .replace("/*", "/postgres");
    archive_current_wal("the last WAL archived", &admin).await;

    // The restore-orchestrator's choreography, by hand.
    merge(
        &releases,
        "postgres-orders",
        json!({"spec": {"suspend": true}}),
    )
    .await;
    merge(
        &apps,
        "orders",
        json!({"spec": {
            "bootstrap": {"enabled": true, "oldName": "postgres-orders", "serverName": "postgres-orders",
                          "recoveryTime": ""},
            "backup": {"destinationPath": destination, "endpointURL": endpoint,
                       "s3CredentialsSecret": {"name": "cozy-backups-creds",
                           "accessKeyIDKey": "AWS_ACCESS_KEY_ID", "secretAccessKeyKey": "AWS_SECRET_ACCESS_KEY"}},
        }}),
    )
    .await;
    clusters
        .delete("postgres-orders", &DeleteParams::default())
        .await
        .unwrap();
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(h.client(), &ns);
    let by_cluster = ListParams::default().labels("cnpg.io/cluster=postgres-orders");
    for pvc in pvcs.list(&by_cluster).await.unwrap().items {
        let _ = pvcs
            .delete(&pvc.metadata.name.unwrap(), &DeleteParams::default())
            .await;
    }
    eventually("the Cluster and its PVCs gone", || {
        let clusters = clusters.clone();
        let pvcs = pvcs.clone();
        let by_cluster = by_cluster.clone();
        async move {
            let gone = get(&clusters, "postgres-orders").await.is_none()
                && pvcs.list(&by_cluster).await.ok()?.items.is_empty();
            gone.then_some(())
        }
    })
    .await;
    merge(
        &releases,
        "postgres-orders",
        json!({"spec": {"suspend": false}}),
    )
    .await;
    let recovered = eventually("the recovery Cluster healthy", || {
        let clusters = clusters.clone();
        async move {
            let c = get(&clusters, "postgres-orders").await?;
            (c["status"]["phase"] == "Cluster in healthy state"
                && !c["spec"]["bootstrap"]["recovery"].is_null())
            .then_some(c)
        }
    })
    .await;
    assert_eq!(
        recovered["spec"]["externalClusters"][0]["plugin"]["parameters"]["barmanObjectName"],
        "postgres-orders-recovery"
    );
    let app_uri = cluster_uri(&h, &ns, "postgres-orders-app").await;
    assert_eq!(
        psql(
            &app_uri,
            "SELECT string_agg(id::text, ',' ORDER BY id) FROM orders"
        ),
        "1,2,3"
    );
    h.kill("operator-sims").await.unwrap();
    no_processes_under("no PostgreSQL left", &data_dir).await;
    h.cleanup().await.unwrap();
}
