//! The mariadb simulator over the real data plane, driven directly: a MariaDB is a real server with
//! its Secret; Backup options reach `mariadb-dump` (`databases`, `compression` bzip2 and none);
//! `maxRetention` prunes older dumps under the prefix; a dump the tool refuses ends
//! `Complete=True/JobFailed` with its words; a Restore from the Backup's storage brings the rows
//! back; a deleted MariaDB's server stops and its directory goes; no server outlives a SIGKILLed
//! simulator.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use api::thirdparty::mariadb::{Backup, MariaDB, Restore};
use harness::Harness;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};

use crate::common::{api, apply, bucket_credentials, eventually, get, secret_data, spawn_sims};

/// Runs SQL with the `mariadb` client over TCP as root, as a user would with the Secret.
fn sql(secret: &BTreeMap<String, String>, sql: &str) -> String {
    let out = std::process::Command::new("mariadb")
        .env("MYSQL_PWD", &secret["root"])
        .args([
            "--no-defaults",
            "--protocol=tcp",
            "-h",
            &secret["host"],
            "-P",
        ])
        .arg(&secret["port"])
        .args(["-u", "root", "--batch", "--skip-column-names", "-e", sql])
        .output()
        .expect("mariadb");
    assert!(
        out.status.success(),
        "mariadb {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The dumps under `prefix` in `bucket`, as the S3 server's files, by name.
fn dumps(data_dir: &Path, bucket: &str, prefix: &str) -> Vec<PathBuf> {
    let dir = data_dir.join("s3/buckets").join(bucket).join(prefix);
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("backup."))
        })
        .collect();
    found.sort();
    found
}

/// The SQL text of a dump file, decompressed by the tool its name says.
fn dump_text(path: &Path) -> String {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let bytes = if name.ends_with(".bzip2.sql") || name.ends_with(".gzip.sql") {
        let tool = if name.ends_with(".bzip2.sql") {
            "bzip2"
        } else {
            "gzip"
        };
        let out = std::process::Command::new(tool)
            .arg("-dc")
            .arg(path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{tool} -dc {name}");
        out.stdout
    } else {
        std::fs::read(path).unwrap()
    };
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Waits for Backup or Restore `name` to be `Complete=True`; returns `(reason, message)`.
async fn complete(objects: &Api<DynamicObject>, name: &str) -> (String, String) {
    eventually(&format!("{name} Complete"), || async move {
        let o = get(objects, name).await?;
        let c = o["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Complete" && c["status"] == "True")?
            .clone();
        Some((
            c["reason"].as_str()?.to_owned(),
            c["message"].as_str()?.to_owned(),
        ))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_dump_options_retention_failures_restore_and_teardown() {
    let mut h = Harness::start().await.unwrap();
    let ns = h.temp_namespace("mariadb").await.unwrap();
    let data_dir = spawn_sims(&mut h, "s3,cosi,mariadb", &[]).await;
    let creds = bucket_credentials(&h, &ns, "maria").await;
    let bucket = creds["bucketName"].clone();
    let s3_keys: Secret = serde_json::from_value(json!({
        "metadata": {"name": "maria-s3"},
        "stringData": {"AWS_ACCESS_KEY_ID": creds["accessKey"],
                       "AWS_SECRET_ACCESS_KEY": creds["secretKey"]},
    }))
    .unwrap();
    Api::<Secret>::namespaced(h.client(), &ns)
        .create(&PostParams::default(), &s3_keys)
        .await
        .unwrap();
    let storage = |prefix: &str| {
        json!({"s3": {"bucket": bucket, "endpoint": creds["endpoint"], "prefix": prefix,
            "accessKeyIdSecretKeyRef": {"name": "maria-s3", "key": "AWS_ACCESS_KEY_ID"},
            "secretAccessKeySecretKeyRef": {"name": "maria-s3", "key": "AWS_SECRET_ACCESS_KEY"},
            "tls": {"enabled": true}}})
    };

    // A MariaDB without a password Secret: the simulator writes `<name>-credentials`.
    let servers = api::<MariaDB>(&h, &ns);
    apply(
        &servers,
        json!({"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "MariaDB",
               "metadata": {"name": "mariadb-db"}, "spec": {"replicas": 1}}),
    )
    .await;
    eventually("MariaDB Ready", || async {
        let s = get(&servers, "mariadb-db").await?;
        (s["status"]["conditions"][0]["reason"] == "StatefulSetReady").then_some(())
    })
    .await;
    let secret = secret_data(&h, &ns, "mariadb-db-credentials")
        .await
        .unwrap();
    assert_eq!(secret["host"], "127.0.0.1");
    assert_eq!(secret["root"].len(), 24);
    sql(
        &secret,
        "CREATE DATABASE a; CREATE TABLE a.t (v text); INSERT INTO a.t VALUES ('in-a');
         CREATE DATABASE b; CREATE TABLE b.t (v text); INSERT INTO b.t VALUES ('in-b')",
    );

    let backups = api::<Backup>(&h, &ns);
    let backup = |name: &str, prefix: &str, extra: Value| {
        let mut spec = json!({"mariaDbRef": {"name": "mariadb-db"}, "storage": storage(prefix)});
        for (k, v) in extra.as_object().unwrap() {
            spec[k] = v.clone();
        }
        json!({"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "Backup",
               "metadata": {"name": name}, "spec": spec})
    };

    // `databases` and bzip2: only database a, in a .bzip2.sql object.
    apply(
        &backups,
        backup(
            "only-a",
            "only-a",
            json!({"databases": ["a"], "compression": "bzip2"}),
        ),
    )
    .await;
    assert_eq!(
        complete(&backups, "only-a").await,
        ("JobComplete".into(), "Success".into())
    );
    let only_a = dumps(&data_dir, &bucket, "only-a");
    assert_eq!(only_a.len(), 1, "{only_a:?}");
    assert!(only_a[0].to_string_lossy().ends_with(".bzip2.sql"));
    let text = dump_text(&only_a[0]);
    assert!(
        text.contains("'in-a'") && !text.contains("'in-b'"),
        "{text}"
    );

    // No compression, no databases: every user database, in a plain .sql object.
    apply(&backups, backup("plain", "plain/", json!({}))).await;
    complete(&backups, "plain").await;
    let plain = dumps(&data_dir, &bucket, "plain");
    assert_eq!(plain.len(), 1, "{plain:?}");
    let name = plain[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("backup.") && name.ends_with("Z.sql"),
        "{name}"
    );
    let text = dump_text(&plain[0]);
    assert!(text.contains("'in-a'") && text.contains("'in-b'"));
    assert!(
        !text.contains("`global_priv`"),
        "the mysql schema is left out"
    );

    // A database the server does not have: mariadb-dump's own words.
    apply(
        &backups,
        backup("missing", "missing", json!({"databases": ["nope"]})),
    )
    .await;
    let (reason, message) = complete(&backups, "missing").await;
    assert_eq!(reason, "JobFailed");
    assert!(
        message.starts_with("mariadb-dump failed:") && message.contains("Unknown database 'nope'"),
        "{message}"
    );
    assert!(dumps(&data_dir, &bucket, "missing").is_empty());

    // maxRetention: a second dump a few seconds later with a 1s retention prunes the first.
    apply(&backups, backup("ret-1", "ret", json!({}))).await;
    complete(&backups, "ret-1").await;
    let first = dumps(&data_dir, &bucket, "ret");
    assert_eq!(first.len(), 1);
    // Dumps are named to the second: wait until the clock is two seconds past the first.
    let started = std::time::Instant::now();
    eventually("two seconds on the clock", || async {
        (started.elapsed() >= std::time::Duration::from_secs(2)).then_some(())
    })
    .await;
    apply(
        &backups,
        backup("ret-2", "ret", json!({"maxRetention": "1s"})),
    )
    .await;
    complete(&backups, "ret-2").await;
    let after = dumps(&data_dir, &bucket, "ret");
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after, first, "the older dump is gone, the new one stays");

    // A Restore from `only-a` into the same server after a change: database a comes back.
    sql(&secret, "DELETE FROM a.t; INSERT INTO b.t VALUES ('later')");
    let restores = api::<Restore>(&h, &ns);
    apply(
        &restores,
        json!({"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "Restore",
               "metadata": {"name": "back"},
               "spec": {"mariaDbRef": {"name": "mariadb-db"},
                        "backupRef": {"kind": "Backup", "name": "only-a"}}}),
    )
    .await;
    assert_eq!(
        complete(&restores, "back").await,
        ("JobComplete".into(), "Success".into())
    );
    assert_eq!(sql(&secret, "SELECT v FROM a.t"), "in-a");
    assert_eq!(
        sql(&secret, "SELECT GROUP_CONCAT(v ORDER BY v) FROM b.t"),
        "in-b,later",
        "database b was not in that dump"
    );

    // The MariaDB deleted: its server stops and its directory goes.
    let root = data_dir.join("mariadb").join(&ns);
    assert!(!crate::common::processes_under(&root).is_empty());
    servers
        .delete("mariadb-db", &DeleteParams::default())
        .await
        .unwrap();
    crate::common::no_processes_under("the server stopped", &root).await;
    eventually("the server directory removed", || async {
        std::fs::read_dir(&root)
            .map_or(true, |mut d| d.next().is_none())
            .then_some(())
    })
    .await;
    h.cleanup().await.unwrap();
}

/// No `mariadbd` outlives a simulator that is SIGKILLed: the kernel ends it (`--pdeathsig`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_mariadb_server_outlives_a_killed_simulator() {
    let mut h = Harness::start().await.unwrap();
    let ns = h.temp_namespace("mariadb").await.unwrap();
    let data_dir = spawn_sims(&mut h, "s3,mariadb", &[]).await;
    let servers = api::<MariaDB>(&h, &ns);
    apply(
        &servers,
        json!({"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "MariaDB",
               "metadata": {"name": "mariadb-db"}, "spec": {"replicas": 1}}),
    )
    .await;
    eventually("MariaDB Ready", || async {
        let s = get(&servers, "mariadb-db").await?;
        (s["status"]["conditions"][0]["reason"] == "StatefulSetReady").then_some(())
    })
    .await;
    let root = data_dir.join("mariadb");
    assert!(!crate::common::processes_under(&root).is_empty());
    h.kill("operator-sims").await.unwrap();
    crate::common::no_processes_under("no mariadbd left", &root).await;
    h.cleanup().await.unwrap();
}
