//! Benchmark of backup-runner (not a test; run through hack/bench/backup-runner/run.sh).
//!
//! Against an in-process emulator, with the real daemon binaries (runner, strategy-renderer,
//! credentials-projector, lease-server, the simulated mariadb-operator completing every backup at
//! once), two measurements, each on a fresh emulator:
//!
//! * **Burst throughput**: 1,000 BackupJobs created back to back across 100 namespaces; jobs per
//!   second from the first create to the last success, the latency of each job (create call →
//!   a watch showing it `Succeeded`, so it includes the queue the burst builds) and the runners'
//!   RSS. Once with one replica (single-replica mode: the baseline) and once with three replicas
//!   sharing the work through the lease-server; the ratios compare the two.
//! * **Paced latency**: open-loop arrivals at 20, 50 and 100 jobs/s for 15 s each (every job is
//!   created at its scheduled instant whatever the earlier ones are doing, so a slow runner cannot
//!   slow the arrivals down), one replica; per rate the latency from the scheduled instant to
//!   `Succeeded` (median, p99, max) and how late the generator was at worst.
//!
//! Everything shares the machine's cores (the emulator runs in this process), so absolute figures
//! include the emulator's and the simulators' cost; the ratios are what to compare across machines.

#[path = "../../../../bins/backup-runner/tests/operators/mod.rs"]
mod operators;
#[path = "../../../../bins/backup-runner/tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::backups::BackupJob;
use futures::StreamExt;
use harness::DaemonSpec;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use operators::Platform;
use serde_json::json;
use support::bin;

const NAMESPACES: usize = 100;
const PER_NAMESPACE: usize = 10;
const JOBS: usize = NAMESPACES * PER_NAMESPACE;

struct Figures {
    replicas: usize,
    jobs_per_second: f64,
    p50: Duration,
    p99: Duration,
    max: Duration,
    rss: Vec<(String, String)>,
    failures: Vec<(String, String)>,
    /// Work-lease calls (Acquire, Renew, Release) the lease-server answered per job during the
    /// burst, by method; empty with one replica (no lease-server).
    lease_calls: Vec<(&'static str, f64)>,
}

/// The lease methods a job's work lease costs.
const LEASE_METHODS: [&str; 3] = ["Acquire", "Renew", "Release"];

/// The lease-server's answered requests of each of [`LEASE_METHODS`], if it runs.
async fn lease_requests(p: &mut Platform) -> anyhow::Result<Option<[f64; 3]>> {
    if p.h.daemon("lease-server").is_err() {
        return Ok(None);
    }
    let m = p.h.metrics_of("lease-server").await?;
    Ok(Some(LEASE_METHODS.map(|method| {
        m.sum(
            "cozy_backups_lease_server_grpc_requests_total",
            &[("method", method)],
        )
    })))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Seconds of arrivals per rate in the paced measurement.
const PACED_SECONDS: f64 = 15.0;
/// The rates of the paced measurement (jobs per second).
const PACED_RATES: [f64; 3] = [20.0, 50.0, 100.0];

/// When each job was first seen `Succeeded` (`namespace/name`), filled by a watch.
type Done = Arc<Mutex<HashMap<String, Instant>>>;

/// The platform with `replicas` runners and a MariaDB application in each bench namespace, in
/// steady state, and a watch that records when each job is first seen `Succeeded`.
async fn platform(replicas: usize) -> anyhow::Result<(Platform, Vec<String>, Done)> {
    let names: Vec<String> = (0..NAMESPACES).map(|i| format!("bench-{i:03}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut p = Platform::start_with(
        &refs,
        "mariadb",
        async |h: &mut harness::Harness| {
            let base = DaemonSpec::new("runner-0", bin("backup-runner"));
            if replicas == 1 {
                return vec![base];
            }
            let grpc = operators::lease_server(h, "15s").await;
            (0..replicas)
                .map(|i| operators::replica(&format!("runner-{i}"), &grpc, &[]))
                .collect()
        },
        true,
    )
    .await;
    for ns in &names {
        p.mariadb(ns, "db", json!({})).await;
    }

    // Steady state: a fresh lease-server grants nothing for one max TTL (its quiet period); wait
    // until it granted the runners' leadership lease.
    if replicas > 1 {
        let admin = p.h.daemon("lease-server")?.admin().await?;
        harness::eventually_within(
            "the lease-server granting",
            Duration::from_secs(60),
            || async {
                (admin
                    .metrics()
                    .value("cozy_backups_lease_server_leases_held", &[])
                    >= 1.0)
                    .then_some(())
            },
        )
        .await;
    }

    let done: Done = Arc::default();
    {
        let done = done.clone();
        let jobs: Api<BackupJob> = Api::all(p.h.client());
        tokio::spawn(async move {
            let mut events = watcher(jobs, watcher::Config::default())
                .applied_objects()
                .boxed();
            while let Some(Ok(job)) = events.next().await {
                if job.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Succeeded") {
                    let key = format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any());
                    done.lock().unwrap().entry(key).or_insert_with(Instant::now);
                }
            }
        });
    }
    Ok((p, names, done))
}

/// Waits (up to 15 minutes) until every job of `keys` was seen `Succeeded`.
async fn all_done<'a>(
    done: &Done,
    keys: impl Iterator<Item = &'a String> + Clone,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(900);
    loop {
        if keys.clone().all(|k| done.lock().unwrap().contains_key(k)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("jobs not Succeeded within 15 minutes");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Median, p99 and max of `latencies` (sorted here).
fn spread(mut latencies: Vec<Duration>) -> (Duration, Duration, Duration) {
    latencies.sort();
    (
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        *latencies.last().unwrap_or(&Duration::ZERO),
    )
}

async fn run(replicas: usize) -> anyhow::Result<Figures> {
    let (mut p, names, done) = platform(replicas).await?;
    let leases_before = lease_requests(&mut p).await?;
    let mut created = HashMap::new();
    let first = Instant::now();
    for i in 0..PER_NAMESPACE {
        for ns in &names {
            let name = format!("job-{i}");
            created.insert(format!("{ns}/{name}"), Instant::now());
            p.backup(ns, &name, "MariaDB", "db", "cozy-default").await;
        }
    }
    all_done(&done, created.keys()).await?;
    let done = done.lock().unwrap().clone();
    let last = done.values().max().copied().unwrap_or(first);
    let latencies: Vec<Duration> = done
        .iter()
        .filter_map(|(k, t)| created.get(k).map(|c| t.saturating_duration_since(*c)))
        .collect();
    let (p50, p99, max) = spread(latencies);
    let lease_calls = match (leases_before, lease_requests(&mut p).await?) {
        (Some(before), Some(after)) => LEASE_METHODS
            .iter()
            .zip(before.iter().zip(after))
            .map(|(m, (b, a))| (*m, (a - b) / JOBS as f64))
            .collect(),
        _ => Vec::new(),
    };
    let mut h = p.h;
    let mut rss_of = Vec::new();
    let mut failures = Vec::new();
    for (name, admin) in &p.runners {
        rss_of.push((name.clone(), harness::rss(h.daemon(name)?.pid())));
        let m = admin.metrics();
        let by_kind: Vec<String> = m
            .samples()
            .iter()
            .filter(|s| {
                s.name == "cozy_backups_backup_runner_reconcile_failures_total" && s.value > 0.0
            })
            .map(|s| format!("{:?}={}", s.labels, s.value))
            .collect();
        let behind = m.sum(
            "cozy_backups_backup_runner_reconciles_behind_own_write_total",
            &[],
        );
        failures.push((
            name.clone(),
            format!(
                "{}; skipped behind its own write: {behind}",
                if by_kind.is_empty() {
                    "none".to_string()
                } else {
                    by_kind.join(", ")
                }
            ),
        ));
    }
    Ok(Figures {
        replicas,
        jobs_per_second: JOBS as f64 / last.duration_since(first).as_secs_f64(),
        p50,
        p99,
        max,
        rss: rss_of,
        failures,
        lease_calls,
    })
}

/// The paced measurement with one replica: per rate, open-loop arrivals for [`PACED_SECONDS`],
/// then the latency spread from each job's scheduled instant to `Succeeded`.
async fn paced() -> anyhow::Result<()> {
    use futures::stream::FuturesUnordered;
    let (p, names, done) = platform(1).await?;
    for rate in PACED_RATES {
        let count = (rate * PACED_SECONDS) as usize;
        let start = Instant::now() + Duration::from_millis(200);
        let arrivals: FuturesUnordered<_> = (0..count)
            .map(|i| {
                let at = start + Duration::from_secs_f64(i as f64 / rate);
                let ns = &names[i % NAMESPACES];
                let name = format!("paced-{rate}-{i}");
                let p = &p;
                async move {
                    tokio::time::sleep_until(at.into()).await;
                    let late = at.elapsed();
                    p.backup(ns, &name, "MariaDB", "db", "cozy-default").await;
                    (format!("{ns}/{name}"), at, late)
                }
            })
            .collect();
        let arrivals: Vec<(String, Instant, Duration)> = arrivals.collect().await;
        all_done(&done, arrivals.iter().map(|(k, _, _)| k)).await?;
        let seen = done.lock().unwrap().clone();
        let latencies: Vec<Duration> = arrivals
            .iter()
            .filter_map(|(k, at, _)| seen.get(k).map(|t| t.saturating_duration_since(*at)))
            .collect();
        let late = arrivals
            .iter()
            .map(|(_, _, l)| *l)
            .max()
            .unwrap_or_default();
        let (p50, p99, max) = spread(latencies);
        println!(
            "  paced {rate:.0} jobs/s ({count} jobs over {PACED_SECONDS:.0} s, 1 replica): scheduled arrival → Succeeded median {p50:?}, p99 {p99:?}, max {max:?}; arrivals late by at most {late:?}"
        );
    }
    Ok(())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    println!(
        "backup-runner: {JOBS} BackupJobs across {NAMESPACES} namespaces (MariaDB, simulated operator)"
    );
    // `backup-runner-bench 3` runs only the three-replica burst (for profiling);
    // `backup-runner-bench paced` only the paced measurement.
    let arg = std::env::args().nth(1);
    if arg.as_deref() == Some("paced") {
        return paced().await;
    }
    let counts: Vec<usize> = match &arg {
        Some(n) => vec![n.parse()?],
        None => vec![1, 3],
    };
    let mut all = Vec::new();
    for replicas in counts {
        let f = run(replicas).await?;
        println!(
            "  {} replica(s): {:.1} jobs/s; creation → Succeeded median {:?}, p99 {:?}, max {:?}",
            f.replicas, f.jobs_per_second, f.p50, f.p99, f.max
        );
        for ((name, rss), (_, failures)) in f.rss.iter().zip(&f.failures) {
            println!("    {name}: {rss}; reconcile failures: {failures}");
        }
        if !f.lease_calls.is_empty() {
            let total: f64 = f.lease_calls.iter().map(|(_, n)| n).sum();
            let each: Vec<String> = f
                .lease_calls
                .iter()
                .map(|(m, n)| format!("{m} {n:.2}"))
                .collect();
            println!("    lease calls per job: {total:.2} ({})", each.join(", "));
        }
        all.push(f);
    }
    let [one, three] = all.as_slice() else {
        return Ok(());
    };
    println!(
        "  ratio 3 replicas / 1 replica: throughput ×{:.2}, median latency ×{:.2}, p99 latency ×{:.2}",
        three.jobs_per_second / one.jobs_per_second,
        three.p50.as_secs_f64() / one.p50.as_secs_f64(),
        three.p99.as_secs_f64() / one.p99.as_secs_f64(),
    );
    println!("backup-runner: paced arrivals, latency");
    paced().await
}
