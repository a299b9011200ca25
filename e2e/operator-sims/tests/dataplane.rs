//! The data plane end to end, simulators only (no project daemon): the `operator-sims` binary with
//! the S3 server, COSI and CNPG against the kube emulator, real PostgreSQL and real barman-cloud.
//!
//! One scenario, in the order a tenant would live it: a bucket with real keys; a Cluster wired to
//! the barman-cloud plugin archives WAL; a plugin Backup completes and its files are in the bucket
//! under the ObjectStore's path; a point-in-time recovery into a new Cluster returns exactly the
//! rows committed before the target; a target after the last archived WAL loops with PostgreSQL's
//! FATAL in the recovery pod's log (read with `kubectl logs`); a wrong secret key makes archiving
//! and a backup fail with the S3 server's error; and no PostgreSQL process outlives its Cluster or
//! the simulator.

use crate::common;

use std::path::PathBuf;

use common::*;
use harness::Harness;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};

fn object_store(name: &str, bucket: &str, endpoint: &str, path: &str) -> Value {
    json!({
        "apiVersion": "barmancloud.cnpg.io/v1", "kind": "ObjectStore",
        "metadata": {"name": name},
        "spec": {
            "configuration": {
                "destinationPath": format!("s3://{bucket}/{path}/"),
                "endpointURL": format!("https://{endpoint}"),
                "s3Credentials": {
                    "accessKeyId": {"name": "pg-s3", "key": "AWS_ACCESS_KEY_ID"},
                    "secretAccessKey": {"name": "pg-s3", "key": "AWS_SECRET_ACCESS_KEY"},
                },
                "wal": {"compression": "gzip"},
            },
            "instanceSidecarConfiguration": {"env": [
                {"name": "AWS_REQUEST_CHECKSUM_CALCULATION", "value": "when_required"}]},
        },
    })
}

fn recovery_cluster(name: &str, source: &str, target_time: Option<&str>) -> Value {
    let mut recovery = json!({"source": source});
    if let Some(t) = target_time {
        recovery["recoveryTarget"] = json!({"targetTime": t});
    }
    json!({
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
        "metadata": {"name": name},
        "spec": {
            "instances": 1,
            "storage": {"size": "1Gi"},
            "bootstrap": {"recovery": recovery},
            "externalClusters": [{"name": source, "plugin": {
                "name": "barman-cloud.cloudnative-pg.io",
                "parameters": {"barmanObjectName": format!("{name}-recovery"), "serverName": source}}}],
        },
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn archive_backup_pitr_unreachable_target_and_wrong_keys() {
    let mut h = Harness::start().await.unwrap();
    let ns = h.temp_namespace("dataplane").await.unwrap();
    let data_dir = spawn_sims(&mut h, "s3,cosi,cnpg", &[]).await;

    // A bucket with real keys, copied into the Secret the ObjectStores name.
    let creds = bucket_credentials(&h, &ns, "pg").await;
    let (bucket, endpoint) = (creds["bucketName"].clone(), creds["endpoint"].clone());
    let secrets: Api<Secret> = Api::namespaced(h.client(), &ns);
    let s3_secret = |secret_key: &str| -> Secret {
        serde_json::from_value(json!({
            "metadata": {"name": "pg-s3"},
            "stringData": {"AWS_ACCESS_KEY_ID": creds["accessKey"], "AWS_SECRET_ACCESS_KEY": secret_key},
        }))
        .unwrap()
    };
    secrets
        .create(&PostParams::default(), &s3_secret(&creds["secretKey"]))
        .await
        .unwrap();

    // The source Cluster archives WAL through the plugin.
    let stores = api::<api::thirdparty::barman::ObjectStore>(&h, &ns);
    let clusters = api::<api::thirdparty::cnpg::Cluster>(&h, &ns);
    apply(
        &stores,
        object_store("postgres-src", &bucket, &endpoint, &ns),
    )
    .await;
    apply(
        &clusters,
        json!({
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
            "metadata": {"name": "postgres-src"},
            "spec": {"instances": 2, "storage": {"size": "1Gi"}, "plugins": [{
                "name": "barman-cloud.cloudnative-pg.io", "isWALArchiver": true,
                "parameters": {"barmanObjectName": "postgres-src", "serverName": "postgres-src"}}]},
        }),
    )
    .await;
    wait_healthy(&h, &ns, "postgres-src").await;
    let pvcs =
        Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(h.client(), &ns)
            .list(&ListParams::default().labels("cnpg.io/cluster=postgres-src"))
            .await
            .unwrap();
    assert_eq!(pvcs.items.len(), 2, "one PVC per instance");
    let app = cluster_uri(&h, &ns, "postgres-src-app").await;
    // The superuser Secret names database "*" (as CloudNativePG writes it): connect to postgres.
    let admin = cluster_uri(&h, &ns, "postgres-src-superuser")
        .await
        .replace("/*", "/postgres");
    psql(&app, "CREATE TABLE orders (id int PRIMARY KEY, note text)");
    psql(&app, "INSERT INTO orders VALUES (1, 'one'), (2, 'two')");
    psql(&admin, "SELECT pg_switch_wal()");
    eventually("WAL archiving reported working", || {
        let clusters = clusters.clone();
        async move {
            let c = get(&clusters, "postgres-src").await?;
            let conds = c["status"]["conditions"].as_array()?.clone();
            conds
                .iter()
                .any(|c| c["type"] == "ContinuousArchiving" && c["status"] == "True")
                .then_some(())
        }
    })
    .await;
    assert_ne!(
        psql(&admin, "SELECT archived_count FROM pg_stat_archiver"),
        "0"
    );

    // A plugin Backup completes; its files are in the bucket under the ObjectStore's path.
    let backups = api::<api::thirdparty::cnpg::Backup>(&h, &ns);
    let plugin_backup = |name: &str| {
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Backup", "metadata": {"name": name},
               "spec": {"method": "plugin", "cluster": {"name": "postgres-src"},
                        "pluginConfiguration": {"name": "barman-cloud.cloudnative-pg.io"}}})
    };
    apply(&backups, plugin_backup("first")).await;
    let status = backup_finished(&backups, "first").await;
    assert_eq!(status["phase"], "completed", "{status}");
    for field in [
        "backupId",
        "beginWal",
        "endWal",
        "beginLSN",
        "endLSN",
        "startedAt",
        "stoppedAt",
    ] {
        assert!(
            status[field].as_str().is_some_and(|s| !s.is_empty()),
            "{field} in {status}"
        );
    }
    assert_eq!(status["serverName"], "postgres-src");
    assert_eq!(status["destinationPath"], format!("s3://{bucket}/{ns}/"));
    let server_dir = data_dir
        .join("s3/buckets")
        .join(&bucket)
        .join(&ns)
        .join("postgres-src");
    let backup_id = status["backupId"].as_str().unwrap();
    assert!(
        server_dir
            .join("base")
            .join(backup_id)
            .join("backup.info")
            .is_file(),
        "base backup files under {}",
        server_dir.display()
    );
    assert!(
        std::fs::read_dir(server_dir.join("wals")).unwrap().count() > 0,
        "archived WAL under the server's prefix"
    );
    let store = get(&stores, "postgres-src").await.unwrap();
    let window = &store["status"]["serverRecoveryWindow"]["postgres-src"];
    assert!(
        window["firstRecoverabilityPoint"].is_string()
            && window["lastSuccessfulBackupTime"].is_string(),
        "{store}"
    );

    // Point in time: rows before the target come back, the row after it does not.
    psql(&app, "INSERT INTO orders VALUES (10, 'before')");
    let target = psql(
        &admin,
        "SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')",
    );
    psql(&app, "INSERT INTO orders VALUES (11, 'after')");
    archive_current_wal("the WAL holding the target archived", &admin).await;
    apply(
        &stores,
        object_store("postgres-pitr-recovery", &bucket, &endpoint, &ns),
    )
    .await;
    apply(
        &clusters,
        recovery_cluster("postgres-pitr", "postgres-src", Some(&target)),
    )
    .await;
    wait_healthy(&h, &ns, "postgres-pitr").await;
    let pitr = cluster_uri(&h, &ns, "postgres-pitr-app").await;
    assert_eq!(
        psql(
            &pitr,
            "SELECT string_agg(id::text, ',' ORDER BY id) FROM orders"
        ),
        "1,2,10"
    );
    let pods: Api<Pod> = Api::namespaced(h.client(), &ns);
    let recovery_pods = pods
        .list(
            &ListParams::default()
                .labels("cnpg.io/cluster=postgres-pitr,cnpg.io/jobRole=full-recovery"),
        )
        .await
        .unwrap();
    let pod = recovery_pods.items[0].metadata.name.clone().unwrap();
    assert!(pod.starts_with("postgres-pitr-1-full-recovery-"), "{pod}");
    let log = kubectl_logs(&h, &ns, &pod, "full-recovery");
    assert!(
        log.contains("recovery stopping before commit of transaction"),
        "{log}"
    );

    // A target after the last archived WAL never converges: the real FATAL, and a new recovery
    // pod after each failure.
    let late = (chrono::Utc::now() + chrono::Duration::hours(1))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    apply(
        &stores,
        object_store("postgres-late-recovery", &bucket, &endpoint, &ns),
    )
    .await;
    apply(
        &clusters,
        recovery_cluster("postgres-late", "postgres-src", Some(&late)),
    )
    .await;
    let failed_pods = eventually("two failed recovery attempts", || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(
                    &ListParams::default()
                        .labels("cnpg.io/cluster=postgres-late,cnpg.io/jobRole=full-recovery"),
                )
                .await
                .ok()?;
            let failed: Vec<String> = list
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
                .filter_map(|p| p.metadata.name.clone())
                .collect();
            (failed.len() >= 2).then_some(failed)
        }
    })
    .await;
    for pod in &failed_pods {
        let log = kubectl_logs(&h, &ns, pod, "full-recovery");
        assert!(
            log.contains("FATAL:  recovery ended before configured recovery target was reached"),
            "{pod}: {log}"
        );
    }
    let late_cluster = get(&clusters, "postgres-late").await.unwrap();
    assert_eq!(late_cluster["status"]["phase"], "Setting up primary");
    clusters
        .delete("postgres-late", &DeleteParams::default())
        .await
        .unwrap();

    // Test controls: a failing backup, a hanging backup, a slow archiver.
    let annotate = |key: &str, value: Value| {
        let clusters = clusters.clone();
        let patch = json!({"metadata": {"annotations": {key: value}}});
        async move {
            clusters
                .patch(
                    "postgres-src",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(&patch),
                )
                .await
                .unwrap();
        }
    };
    let finished = |name: &'static str| backup_finished(&backups, name);
    annotate(
        "operator-sims.cozy-backups.io/fail-backup",
        json!("injected failure"),
    )
    .await;
    apply(&backups, plugin_backup("injected")).await;
    let status = finished("injected").await;
    assert_eq!(
        (status["phase"].as_str(), status["error"].as_str()),
        (Some("failed"), Some("injected failure"))
    );
    annotate("operator-sims.cozy-backups.io/fail-backup", Value::Null).await;
    annotate("operator-sims.cozy-backups.io/hang", json!("true")).await;
    apply(&backups, plugin_backup("hung")).await;
    eventually("the hung Backup started", || {
        let backups = backups.clone();
        async move { (get(&backups, "hung").await?["status"]["phase"] == "started").then_some(()) }
    })
    .await;
    annotate("operator-sims.cozy-backups.io/archive-delay", json!("1s")).await;
    annotate("operator-sims.cozy-backups.io/hang", Value::Null).await;
    assert_eq!(finished("hung").await["phase"], "completed");
    eventually("the slow archiver in the server log", || {
        let log = kubectl_logs(&h, &ns, "postgres-src-1", "postgres");
        async move {
            log.contains("cnpg-sim: slow archiver: waiting 1s before archiving")
                .then_some(())
        }
    })
    .await;
    annotate("operator-sims.cozy-backups.io/archive-delay", Value::Null).await;

    // Wrong keys: archiving and a backup fail with the S3 server's own error.
    secrets
        .replace("pg-s3", &PostParams::default(), &{
            let mut s = s3_secret("not-the-secret-key");
            s.metadata.resource_version = secrets
                .get("pg-s3")
                .await
                .unwrap()
                .metadata
                .resource_version;
            s
        })
        .await
        .unwrap();
    // The simulator notices the Secret through its watch; give archive_command a WAL to ship.
    let failing = eventually("archiving reported failing", || {
        let clusters = clusters.clone();
        let admin = admin.clone();
        async move {
            psql(
                &admin,
                "SELECT pg_switch_wal() FROM (SELECT txid_current()) t",
            );
            let c = get(&clusters, "postgres-src").await?;
            let conds = c["status"]["conditions"].as_array()?.clone();
            conds
                .into_iter()
                .find(|c| c["type"] == "ContinuousArchiving" && c["status"] == "False")
        }
    })
    .await;
    assert_eq!(failing["reason"], "ContinuousArchivingFailing");
    // barman-cloud first checks the bucket with HEAD, whose 403 answer has no body to name the
    // S3 error code: what boto3 reports is the status line.
    let message = failing["message"].as_str().unwrap();
    assert!(
        message.contains("ERROR: Barman cloud WAL archiver exception")
            && message.contains("(403)")
            && message.contains("Forbidden"),
        "{failing}"
    );
    apply(&backups, plugin_backup("wrong-keys")).await;
    let status = backup_finished(&backups, "wrong-keys").await;
    assert_eq!(status["phase"], "failed", "{status}");
    let error = status["error"].as_str().unwrap();
    assert!(
        error.starts_with("barman-cloud-backup failed: ") && error.contains("403"),
        "{status}"
    );

    // No secret reached the simulator's log.
    let log = h.daemon("operator-sims").unwrap().log();
    assert!(
        !log.contains(creds["secretKey"].as_str()),
        "a secret key was logged"
    );

    // Everything stops: with the Clusters, then with the simulator.
    let late_dirs: Vec<PathBuf> = std::fs::read_dir(data_dir.join("pg").join(&ns))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("postgres-late-")
        })
        .collect();
    for dir in late_dirs {
        eventually("the deleted Cluster's instance removed", || {
            let dir = dir.clone();
            async move { (!dir.exists() && processes_under(&dir).is_empty()).then_some(()) }
        })
        .await;
    }
    h.kill("operator-sims").await.unwrap();
    no_processes_under(
        "no PostgreSQL left after the simulator was killed",
        &data_dir,
    )
    .await;
    h.cleanup().await.unwrap();
}
