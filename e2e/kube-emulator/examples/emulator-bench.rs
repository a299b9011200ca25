//! Emulator benchmark (not a test): 10,000 ConfigMaps across 1,000 namespaces, 50 concurrent watchers.
//! Reports list latency, watch fan-out latency and the emulator process's RSS.
//! Run with `hack/bench/emulator/run.sh` (release build); the emulator runs as a separate process so its
//! RSS is measured alone.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

const NAMESPACES: usize = 1_000;
const PER_NAMESPACE: usize = 10;
const WATCHERS: usize = 50;
const UPDATES: usize = 100;

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

fn percentiles(mut v: Vec<Duration>) -> String {
    v.sort();
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q) as usize];
    format!(
        "p50 {:?}  p95 {:?}  max {:?}  (n={})",
        p(0.5),
        p(0.95),
        p(1.0),
        v.len()
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(|p| p.parent())
        .map(|p| p.join("kube-emulator"))
        .expect("target dir");
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let kubeconfig = std::env::temp_dir().join(format!("emulator-bench-{port}.kubeconfig"));
    let mut child = tokio::process::Command::new(&bin)
        .args(["--port", &port.to_string(), "--kubeconfig-out"])
        .arg(&kubeconfig)
        .args(["--history-size", "50000"])
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id().expect("pid");
    let url = format!("http://127.0.0.1:{port}");
    let client = Client::try_from(kube::Config::new(url.parse()?))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while client.apiserver_version().await.is_err() {
        anyhow::ensure!(Instant::now() < deadline, "emulator did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!("emulator pid {pid}, RSS at start: {} KiB", rss_kib(pid));

    let t = Instant::now();
    let nss: Api<Namespace> = Api::all(client.clone());
    stream::iter(0..NAMESPACES)
        .map(|i| {
            let nss = nss.clone();
            async move {
                let ns: Namespace =
                    serde_json::from_value(json!({"metadata": {"name": format!("bench-{i}")}}))?;
                nss.create(&PostParams::default(), &ns).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    stream::iter(0..NAMESPACES * PER_NAMESPACE)
        .map(|i| {
            let client = client.clone();
            async move {
                let api: Api<ConfigMap> =
                    Api::namespaced(client, &format!("bench-{}", i % NAMESPACES));
                let cm: ConfigMap = serde_json::from_value(
                    json!({"metadata": {"name": format!("cm-{i}"), "labels": {"bench": "yes"}},
                    "data": {"payload": "x".repeat(256)}}),
                )?;
                api.create(&PostParams::default(), &cm).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<_>>()
        .await?;
    println!(
        "created {NAMESPACES} namespaces and {} ConfigMaps in {:?}",
        NAMESPACES * PER_NAMESPACE,
        t.elapsed()
    );
    println!("RSS after load: {} KiB", rss_kib(pid));

    let all: Api<ConfigMap> = Api::all(client.clone());
    let mut full = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let n = all.list(&ListParams::default()).await?.items.len();
        full.push(t.elapsed());
        assert_eq!(n, NAMESPACES * PER_NAMESPACE);
    }
    println!("list all 10,000 ConfigMaps: {}", percentiles(full));
    let mut small = Vec::new();
    for i in 0..100 {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), &format!("bench-{i}"));
        let t = Instant::now();
        api.list(&ListParams::default()).await?;
        small.push(t.elapsed());
    }
    println!("list one namespace (10 items): {}", percentiles(small));

    let rv = all
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    for _ in 0..WATCHERS {
        let all = all.clone();
        let tx = tx.clone();
        let rv = rv.clone();
        tokio::spawn(async move {
            let mut s = all
                .watch(&WatchParams::default().timeout(290), &rv)
                .await
                .expect("watch")
                .boxed();
            while let Ok(Some(ev)) = s.try_next().await {
                if let WatchEvent::Modified(cm) = ev
                    && let Some(i) = cm
                        .annotations()
                        .get("bench/seq")
                        .and_then(|s| s.parse().ok())
                {
                    let _ = tx.send((i, Instant::now()));
                }
            }
        });
    }
    drop(tx);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "bench-0");
    // Watchers start from `rv`, so none misses an update; the first sample includes watch setup.
    let mut fanout = Vec::new();
    for i in 0..UPDATES {
        let sent = Instant::now();
        let p = json!({"metadata": {"annotations": {"bench/seq": i.to_string()}}});
        api.patch("cm-0", &PatchParams::default(), &Patch::Merge(&p))
            .await?;
        let mut got = 0;
        let mut last = sent;
        while got < WATCHERS {
            let (seq, at) = rx.recv().await.expect("watchers alive");
            if seq == i {
                got += 1;
                last = last.max(at);
            }
        }
        fanout.push(last - sent);
    }
    println!(
        "watch fan-out to {WATCHERS} watchers (patch sent → last watcher received): {}",
        percentiles(fanout)
    );
    println!("RSS with {WATCHERS} watchers: {} KiB", rss_kib(pid));
    child.kill().await?;
    let _ = std::fs::remove_file(&kubeconfig);
    Ok(())
}
