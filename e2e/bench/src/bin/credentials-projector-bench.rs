//! Benchmark of credentials-projector (not a test; run through hack/bench/credentials-projector/run.sh).
//!
//! Against an in-process emulator, with the real daemon binary:
//! 1. 1,000 tenant namespaces hold a projected copy; the source rotates; time until the last copy
//!    carries the new keys (observed through a watch on the copies).
//! 2. 500 BackupJobs created back to back in those namespaces; per job, time from its create call to
//!    the watch showing `CredentialsProjected=True`; median and p99.
//! 3. The projector's RSS (VmRSS now, VmHWM peak) after each phase.
//!
//! The emulator runs in this process and shares the machine's cores with the daemon, so absolute
//! figures include the emulator's own cost.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use api::backups::{BackupClass, BackupJob};
use futures::StreamExt;
use harness::{DaemonSpec, Harness};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;

const TENANTS: usize = 1000;
const JOBS: usize = 500;
const SOURCE: &str = "bucket-cozy-backups-system-credentials";
const TARGET: &str = "cozy-backups-creds";
const LABEL: &str = "apps.cozystack.io/managed-by=cozystack-backups";

fn source(ak: &str) -> Secret {
    let data: BTreeMap<String, ByteString> = [
        ("accessKey", ak),
        ("secretKey", "bench-secret"),
        ("endpoint", "https://s3.example.com"),
        ("bucketName", "bucket-1"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(SOURCE.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ak_of(s: &Secret) -> Option<String> {
    s.data
        .as_ref()?
        .get("accessKey")
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut h = Harness::start().await?;
    let client = h.client();
    h.create_namespaces(&["bench-src", "bench-velero"]).await?;
    let src_api: Api<Secret> = Api::namespaced(client.clone(), "bench-src");
    src_api
        .create(&PostParams::default(), &source("AK-0"))
        .await?;
    let class: BackupClass = serde_json::from_value(json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupClass",
        "metadata": {"name": "cozy-default"},
        "spec": {"strategies": [{
            "strategyRef": {"apiGroup": "strategy.backups.cozystack.io", "kind": "CNPG", "name": "cozy-default-cnpg"},
            "application": {"kind": "Postgres"},
        }]},
    }))?;
    Api::<BackupClass>::all(client.clone())
        .create(&PostParams::default(), &class)
        .await?;

    // 1,000 tenant namespaces, each holding a projected copy (created here as the projector would).
    let setup = Instant::now();
    let tenants: Vec<String> = (0..TENANTS).map(|i| format!("bench-t{i:04}")).collect();
    futures::stream::iter(tenants.iter().cloned())
        .map(|name| {
            let client = client.clone();
            async move {
                let ns = Namespace {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                Api::<Namespace>::all(client.clone())
                    .create(&PostParams::default(), &ns)
                    .await?;
                let mut copy = source("AK-0");
                copy.metadata.name = Some(TARGET.into());
                copy.metadata.labels = Some(BTreeMap::from([(
                    "apps.cozystack.io/managed-by".to_owned(),
                    "cozystack-backups".to_owned(),
                )]));
                Api::<Secret>::namespaced(client, &name)
                    .create(&PostParams::default(), &copy)
                    .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect::<Result<Vec<_>, _>>()?;
    println!(
        "setup: {TENANTS} tenant namespaces with a copy in {:.2?}",
        setup.elapsed()
    );

    let bin = harness::locate_binary("credentials-projector")?;
    let spec = DaemonSpec::new("credentials-projector", bin)
        .env("BACKUP_STORAGE_SECRET_NAMESPACE", "bench-src")
        .env("BACKUP_STORAGE_SECRET_NAME", SOURCE)
        .env("BACKUP_STORAGE_REGION", "us-east-1")
        .env("BACKUP_STORAGE_FORCE_PATH_STYLE", "true")
        .env("BACKUP_STORAGE_SYSTEM_NAMESPACES", "bench-velero")
        .env("SYSTEM_TICK_SECONDS", "3600")
        .env("LOG_LEVEL", "warn");
    let started = Instant::now();
    let daemon = h.spawn_ready(spec, Duration::from_secs(300)).await?;
    let pid = daemon.pid().unwrap_or(0);
    println!(
        "start: ready (first round over {TENANTS} copies done) after {:.2?}; {}",
        started.elapsed(),
        harness::rss(Some(pid))
    );

    // Rotation: watch every copy, change the source, wait until all carry the new key.
    let copies: Api<Secret> = Api::all(client.clone());
    let mut events = std::pin::pin!(
        watcher(copies, watcher::Config::default().labels(LABEL))
            .default_backoff()
            .applied_objects()
    );
    let mut fresh: HashSet<String> = HashSet::new();
    // Drain the initial list first so only post-rotation updates count.
    let initial = Api::<Secret>::all(client.clone())
        .list(&kube::api::ListParams::default().labels(LABEL))
        .await?
        .items
        .len();
    let mut seen = 0;
    while seen < initial {
        if events.next().await.transpose()?.is_some() {
            seen += 1;
        }
    }
    let mut rotated = source("AK-1");
    rotated.metadata.resource_version = src_api.get(SOURCE).await?.metadata.resource_version;
    let t0 = Instant::now();
    src_api
        .replace(SOURCE, &PostParams::default(), &rotated)
        .await?;
    let want = TENANTS + 1; // tenants + the system namespace
    while fresh.len() < want {
        let Some(s) = events.next().await.transpose()? else {
            anyhow::bail!("copy watch ended");
        };
        if ak_of(&s).as_deref() == Some("AK-1") {
            fresh.insert(s.metadata.namespace.unwrap_or_default());
        }
    }
    println!(
        "rotation: source change -> last of {want} copies updated in {:.2?}; {}",
        t0.elapsed(),
        harness::rss(Some(pid))
    );

    // 500 jobs: create back to back, observe CredentialsProjected=True through a watch.
    let jobs_api: Api<BackupJob> = Api::all(client.clone());
    let watch = tokio::spawn(async move {
        let mut done: HashMap<String, Instant> = HashMap::new();
        let mut events = std::pin::pin!(
            watcher(jobs_api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
        );
        while done.len() < JOBS {
            let Some(Ok(job)) = events.next().await else {
                break;
            };
            let projected = job.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "CredentialsProjected" && c.is_true())
            });
            if projected {
                done.entry(job.metadata.namespace.unwrap_or_default())
                    .or_insert_with(Instant::now);
            }
        }
        done
    });
    let mut created: HashMap<String, Instant> = HashMap::new();
    for ns in tenants.iter().take(JOBS) {
        let job: BackupJob = serde_json::from_value(json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
            "metadata": {"name": "bench"},
            "spec": {"applicationRef": {"kind": "Postgres", "name": "db"}, "backupClassName": "cozy-default"},
        }))?;
        created.insert(ns.clone(), Instant::now());
        Api::<BackupJob>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &job)
            .await?;
    }
    let done = tokio::time::timeout(Duration::from_secs(600), watch).await??;
    let mut latencies: Vec<Duration> = done
        .iter()
        .filter_map(|(ns, t)| created.get(ns).map(|c| t.saturating_duration_since(*c)))
        .collect();
    latencies.sort();
    anyhow::ensure!(
        latencies.len() == JOBS,
        "only {} jobs projected",
        latencies.len()
    );
    println!(
        "jobs: {JOBS} BackupJobs, creation -> CredentialsProjected=True: median {:.2?}, p99 {:.2?}, max {:.2?}; {}",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[latencies.len() - 1],
        harness::rss(Some(pid))
    );
    h.kill("credentials-projector").await?;
    Ok(())
}
