//! Benchmark (not a test; `hack/bench/catalog/run.sh`): the backup-runner's catalog sync
//! re-creating 10,000 Backups from their signed records in the S3 server into an empty cluster
//! (10 namespaces of 1,000), against a baseline in the same invocation that creates the same
//! 10,000 Backups with a plain sequential client loop (the API's own cost, no bucket). Prints the
//! sync's wall time, Backups/s, the ratio to the baseline, the S3 and API requests the runner made
//! and its RSS; asserts nothing.

use std::time::{Duration, Instant};

use api::backups::{Backup, BackupArtifact, BackupStatus};
use backup_storage::catalog as record;
use backup_storage::catalog_backup::{self as sealed, KEY_DATA};
use backup_storage::s3::{S3Client, S3Config};
use futures::StreamExt;
use harness::{DaemonSpec, Harness};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams, PostParams};

const NAMESPACES: usize = 10;
const PER_NAMESPACE: usize = 1_000;

fn backup(ns: &str, i: usize) -> Backup {
    let name = format!("orders-db-{i:05}");
    let mut b = Backup::test(&name)
        .namespace(ns)
        .for_app("Postgres", "orders-db")
        .driver_metadata(&[
            ("cnpg.io/backup-name", name.as_str()),
            ("cnpg.io/server-name", "postgres-orders-db"),
            (
                "cnpg.io/destination-path",
                "s3://bucket/postgres-orders-db/",
            ),
        ])
        .build();
    b.status = Some(BackupStatus {
        phase: Some("Ready".into()),
        artifact: Some(BackupArtifact {
            uri: format!("cnpg://postgres-orders-db/{name}"),
            size_bytes: Some(20_000_000),
            checksum: None,
        }),
        ..Default::default()
    });
    b
}

fn binary(name: &str) -> std::path::PathBuf {
    // The benchmark runs from target/<profile>/, next to the daemons it starts.
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(name)))
        .filter(|p| p.exists())
        .unwrap_or_else(|| harness::locate_binary(name).unwrap())
}

async fn count(client: &kube::Client, prefix: &str) -> anyhow::Result<usize> {
    let all: Api<Backup> = Api::all(client.clone());
    Ok(all
        .list_metadata(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|b| {
            b.metadata
                .namespace
                .as_deref()
                .unwrap_or("")
                .starts_with(prefix)
        })
        .count())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut h = Harness::start().await?;
    let client = h.client();
    let synced: Vec<String> = (0..NAMESPACES).map(|i| format!("sync-{i:02}")).collect();
    let base: Vec<String> = (0..NAMESPACES).map(|i| format!("base-{i:02}")).collect();
    let mut all = vec!["tenant-root", "cozy-velero", "cozy-backup-controller"];
    all.extend(synced.iter().map(String::as_str));
    all.extend(base.iter().map(String::as_str));
    h.create_namespaces(&all).await?;
    let dp = h
        .spawn_dataplane("s3,cosi", &["--cosi-delay-ms=10"])
        .await?;
    h.spawn_ready(
        DaemonSpec::new("strategy-renderer", binary("strategy-renderer"))
            .args([format!("--endpoint={}", dp.http)]),
        Duration::from_secs(60),
    )
    .await?;
    let creds = harness::eventually_within(
        "the system bucket's credentials",
        Duration::from_secs(60),
        || async {
            h.secret_data("tenant-root", "bucket-cozy-backups-system-credentials")
                .await
        },
    )
    .await;
    let s3 = S3Client::new(S3Config {
        endpoint: dp.https.clone(),
        bucket: creds["bucketName"].clone(),
        region: String::new(),
        access_key: creds["accessKey"].clone(),
        secret_key: creds["secretKey"].clone(),
        ca_pem: Some(std::fs::read(&dp.ca_file)?),
    })?;
    // The key the lost cluster used, installed before the runner starts.
    let key: [u8; 32] = rand::random();
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "cozy-backups-catalog-key", "namespace": "cozy-backup-controller"}}))?;
    let secret = Secret {
        data: Some([(KEY_DATA.to_owned(), ByteString(key.to_vec()))].into()),
        ..secret
    };
    Api::<Secret>::namespaced(client.clone(), "cozy-backup-controller")
        .create(&PostParams::default(), &secret)
        .await?;
    let total = NAMESPACES * PER_NAMESPACE;
    // Baseline: the same Backups created by a plain sequential client loop.
    // The records are sealed from these Backups as the API returned them, as the runner seals
    // what its cache holds.
    let t = Instant::now();
    let mut created = Vec::with_capacity(NAMESPACES * PER_NAMESPACE);
    for ns in &base {
        let api: Api<Backup> = Api::namespaced(client.clone(), ns);
        for i in 0..PER_NAMESPACE {
            created.push(api.create(&PostParams::default(), &backup(ns, i)).await?);
        }
    }
    let baseline = t.elapsed();
    println!(
        "baseline: {total} Backups created by a sequential client loop in {:.2} s ({:.0}/s)",
        baseline.as_secs_f64(),
        total as f64 / baseline.as_secs_f64()
    );

    let t = Instant::now();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(created)
        .map(|mut b| {
            let s3 = s3.clone();
            async move {
                let ns = b
                    .metadata
                    .namespace
                    .take()
                    .unwrap_or_default()
                    .replace("base-", "sync-");
                let name = b.metadata.name.clone().unwrap_or_default();
                b.metadata.namespace = Some(ns.clone());
                let (bytes, _) = sealed::seal(&key, &b);
                s3.put(&record::object_key(&ns, &name), bytes).await?;
                Ok(())
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    println!(
        "setup: {total} signed records in the bucket in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    // The baseline's Backups go before the runner starts: a runner seeing them would write
    // their records in its catch-up pass, which is not the sync being measured.
    for ns in &base {
        let api: Api<Backup> = Api::namespaced(client.clone(), ns);
        api.delete_collection(&Default::default(), &ListParams::default())
            .await?;
    }
    anyhow::ensure!(
        count(&client, "base-").await? == 0,
        "the baseline's Backups are still listed after their deletion"
    );

    // The runner: one sync pass on start (the next one an hour later).
    let audit_before = h.audit().requests.len();
    let t = Instant::now();
    let runner = h
        .spawn_ready(
            DaemonSpec::new("backup-runner", binary("backup-runner")).args([
                "--catalog=true".to_owned(),
                format!("--catalog-ca-file={}", dp.ca_file.display()),
                "--catalog-sync-interval=1h".to_owned(),
            ]),
            Duration::from_secs(60),
        )
        .await?;
    let pid = runner.pid();
    let admin = runner.admin().await?;
    let restored_metric = "cozy_backups_backup_runner_catalog_records_restored_total";
    loop {
        let m = admin.metrics();
        if m.get(restored_metric, &[]).unwrap_or(0.0) >= total as f64 {
            break;
        }
        anyhow::ensure!(
            t.elapsed() < Duration::from_secs(1800),
            "the sync did not finish within 30 minutes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sync = t.elapsed();
    let rss = harness::rss(pid);
    let present = count(&client, "sync-").await?;
    let m = admin.metrics();
    let s3_requests = m.value(
        "cozy_backups_backup_runner_catalog_sync_s3_requests_total",
        &[],
    );
    // Requests of the runner while it synced, from the API's audit log (creates, Events,
    // the finalizer's patches that follow each create).
    let audit = h.audit();
    let runner_requests: Vec<_> = audit.requests[audit_before..]
        .iter()
        .filter(|r| r.user_agent.starts_with("backup-runner/"))
        .collect();
    let creates = runner_requests
        .iter()
        .filter(|r| r.verb == "create" && r.resource == "backups")
        .count();
    println!(
        "sync: {present} Backups re-created from {total} records in {:.2} s ({:.0}/s), {:.2}x the baseline",
        sync.as_secs_f64(),
        total as f64 / sync.as_secs_f64(),
        sync.as_secs_f64() / baseline.as_secs_f64()
    );
    println!(
        "requests: S3 {s3_requests:.0} ({:.3} per record), API {} by the runner ({creates} Backup creates)",
        s3_requests / total as f64,
        runner_requests.len()
    );
    println!(
        "records written by the runner during the sync: {:.0} (0: each re-created Backup seals to its record's bytes)",
        m.value(
            "cozy_backups_backup_runner_catalog_records_written_total",
            &[]
        )
    );
    println!("runner: {rss}");
    Ok(())
}
