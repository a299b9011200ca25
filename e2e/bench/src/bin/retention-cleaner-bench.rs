//! Benchmark (not a test; `hack/bench/retention-cleaner/run.sh`): one sweep over 10,000 Backups in
//! 500 Plans by the real daemon against the in-process emulator, against a baseline that deletes
//! the same Backups with a plain client loop.

use std::time::{Duration, Instant};

use api::LocalObjectReference;
use api::backups::{Backup, Plan, RetentionPolicy};
use chrono::{DateTime, Utc};
use harness::{DaemonSpec, Harness};
use kube::api::{Api, DeleteParams, ListParams, PostParams};

const NAMESPACES: usize = 50;
const PLANS_PER_NAMESPACE: usize = 10;
const BACKUPS_PER_PLAN: i64 = 20;
const KEEP_LAST: i32 = 15;

fn namespace(i: usize) -> String {
    format!("bench-{i:02}")
}

fn plan(ns: &str, p: usize) -> Plan {
    let mut plan = Plan::test(&format!("nightly-{p}"), "0 2 * * *")
        .namespace(ns)
        .for_app("MariaDB", &format!("db-{p}"))
        .build();
    plan.spec.retention_policy = Some(RetentionPolicy {
        keep_last: Some(KEEP_LAST),
        ..Default::default()
    });
    plan
}

/// The Backups of Plan `p`: one a day, the newest yesterday.
fn backups(ns: &str, p: usize, now: DateTime<Utc>) -> Vec<Backup> {
    (1..=BACKUPS_PER_PLAN)
        .map(|day| {
            let t = now - chrono::Duration::days(day);
            let plan = format!("nightly-{p}");
            let mut b = Backup::test(&schedule::backup_job_name(&plan, t))
                .namespace(ns)
                .for_app("MariaDB", &format!("db-{p}"))
                .strategy(
                    "strategy.backups.cozystack.io",
                    "MariaDB",
                    "cozy-default-mariadb",
                )
                .build();
            b.spec.plan_ref = Some(LocalObjectReference::new(&plan));
            b.status = Some(api::backups::BackupStatus {
                phase: Some("Ready".into()),
                ..Default::default()
            });
            b.spec.taken_at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                t.to_rfc3339().parse().unwrap(),
            );
            b
        })
        .collect()
}

/// Creates the Backups (phase Ready) of every Plan; returns how many.
async fn create_backups(
    client: &kube::Client,
    only: Option<&[(String, String)]>,
    now: DateTime<Utc>,
) -> anyhow::Result<usize> {
    let mut n = 0;
    for i in 0..NAMESPACES {
        let ns = namespace(i);
        let api: Api<Backup> = Api::namespaced(client.clone(), &ns);
        for p in 0..PLANS_PER_NAMESPACE {
            for b in backups(&ns, p, now) {
                let name = b.metadata.name.clone().unwrap_or_default();
                if only.is_some_and(|o| !o.iter().any(|(n2, b2)| *n2 == ns && *b2 == name)) {
                    continue;
                }
                // Backups have no status subresource: the phase is created with the object.
                api.create(&PostParams::default(), &b).await?;
                n += 1;
            }
        }
    }
    Ok(n)
}

async fn count(client: &kube::Client) -> anyhow::Result<usize> {
    let api: Api<Backup> = Api::all(client.clone());
    Ok(api.list(&ListParams::default()).await?.items.len())
}

/// User + system CPU seconds of a process (`/proc/<pid>/stat`, clock ticks of 1/100 s).
fn cpu_seconds(pid: Option<u32>) -> f64 {
    let stat = pid
        .and_then(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .unwrap_or_default();
    // Fields after the command name (which may contain spaces) start at field 3.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15: indexes 11 and 12 after the name.
    (ticks(11) + ticks(12)) / 100.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let now = Utc::now();
    let mut h = Harness::start().await?;
    let client = h.client();
    let names: Vec<String> = (0..NAMESPACES).map(namespace).collect();
    h.create_namespaces(&names.iter().map(String::as_str).collect::<Vec<_>>())
        .await?;
    for ns in &names {
        let api: Api<Plan> = Api::namespaced(client.clone(), ns);
        for p in 0..PLANS_PER_NAMESPACE {
            api.create(&PostParams::default(), &plan(ns, p)).await?;
        }
    }
    let t = Instant::now();
    let total = create_backups(&client, None, now).await?;
    println!(
        "setup: {total} Backups in {} Plans over {NAMESPACES} namespaces in {:.1} s",
        NAMESPACES * PLANS_PER_NAMESPACE,
        t.elapsed().as_secs_f64()
    );

    // The decisions alone, in process, over the same objects.
    let all_plans: Vec<Plan> = Api::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let all_backups: Vec<Backup> = Api::all(client.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let config = retention::Config {
        max_deletions_per_namespace: 100_000,
        max_delete_percent: 100,
        ..Default::default()
    };
    let t = Instant::now();
    let mut doomed = Vec::new();
    for ns in &names {
        let of = |o: &Option<String>| o.as_deref() == Some(ns.as_str());
        let plans: Vec<Plan> = all_plans
            .iter()
            .filter(|p| of(&p.metadata.namespace))
            .cloned()
            .collect();
        let backups: Vec<Backup> = all_backups
            .iter()
            .filter(|b| of(&b.metadata.namespace))
            .cloned()
            .collect();
        let observed = retention::Observed {
            namespace: ns,
            plans: &plans,
            backups: &backups,
            backup_jobs: &[],
            restore_jobs: &[],
            foundationdb_backups: &[],
        };
        let sweep = retention::decide(&observed, &config, Utc::now());
        doomed.extend(sweep.to_delete().map(|d| (ns.clone(), d.name.clone())));
    }
    let decide = t.elapsed();
    println!(
        "decide (pure, in process): {} deletions decided in {:.1} ms",
        doomed.len(),
        decide.as_secs_f64() * 1e3
    );

    // Baseline: the same deletions with a plain sequential client loop.
    let t = Instant::now();
    for (ns, name) in &doomed {
        let api: Api<Backup> = Api::namespaced(client.clone(), ns);
        api.delete(name, &DeleteParams::default()).await?;
    }
    let baseline = t.elapsed();
    println!(
        "baseline (plain client loop): {} deletions in {:.2} s, {:.0} deletions/s",
        doomed.len(),
        baseline.as_secs_f64(),
        doomed.len() as f64 / baseline.as_secs_f64()
    );
    let recreated = create_backups(&client, Some(&doomed), now).await?;
    anyhow::ensure!(
        recreated == doomed.len(),
        "re-created {recreated} of {}",
        doomed.len()
    );

    // Baseline 2: the same loop reading each Backup and recording one Event per deletion, as the
    // daemon does.
    let recorder = kube::runtime::events::Recorder::new(
        client.clone(),
        kube::runtime::events::Reporter {
            controller: "bench".into(),
            instance: None,
        },
    );
    // With a watcher of every Backup open, as the daemon has.
    let watcher = {
        use futures::StreamExt;
        let stream = kube::runtime::watcher(Api::<Backup>::all(client.clone()), Default::default());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while stream.next().await.is_some() {}
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t = Instant::now();
    for (ns, name) in &doomed {
        let api: Api<Backup> = Api::namespaced(client.clone(), ns);
        let b = api.get(name).await?;
        api.delete(name, &DeleteParams::default()).await?;
        let event = kube::runtime::events::Event {
            type_: kube::runtime::events::EventType::Normal,
            reason: "RetentionExpired".into(),
            note: Some(format!("Backup {name} deleted")),
            action: "Retention".into(),
            secondary: None,
        };
        recorder
            .publish(&event, &kube::Resource::object_ref(&b, &()))
            .await?;
    }
    let with_events = t.elapsed();
    watcher.abort();
    println!(
        "baseline with Events (get, delete, one Event each; a watch of every Backup open): {:.2} s, {:.0} deletions/s",
        with_events.as_secs_f64(),
        doomed.len() as f64 / with_events.as_secs_f64()
    );
    let recreated = create_backups(&client, Some(&doomed), now).await?;
    anyhow::ensure!(
        recreated == doomed.len(),
        "re-created {recreated} of {}",
        doomed.len()
    );

    // The daemon: start → every doomed Backup gone.
    let target = total - doomed.len();
    let t = Instant::now();
    h.spawn_ready(
        DaemonSpec::new(
            "retention-cleaner",
            harness::locate_binary("retention-cleaner")?,
        )
        .args([
            "--max-deletions-per-sweep=100000",
            "--max-delete-percent=100",
            "--debounce=200ms",
        ]),
        Duration::from_secs(120),
    )
    .await?;
    let ready = t.elapsed();
    let mut peak_rss = String::new();
    loop {
        if let Ok(d) = h.daemon("retention-cleaner") {
            peak_rss = harness::rss(d.pid());
        }
        if count(&client).await? <= target {
            break;
        }
        anyhow::ensure!(
            t.elapsed() < Duration::from_secs(600),
            "the sweep did not finish in 600 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let sweep = t.elapsed();
    println!(
        "retention-cleaner: ready (caches listed) after {:.2} s; {} deletions with their Events done {:.2} s after start, {:.0} deletions/s",
        ready.as_secs_f64(),
        doomed.len(),
        sweep.as_secs_f64(),
        doomed.len() as f64 / sweep.as_secs_f64()
    );
    println!(
        "ratio daemon / plain loop: {:.2}x; daemon / loop with Events: {:.2}x (the daemon also starts, lists everything and decides first)",
        sweep.as_secs_f64() / baseline.as_secs_f64(),
        sweep.as_secs_f64() / with_events.as_secs_f64()
    );
    println!("daemon RSS at the end of the sweep: {peak_rss}");
    let pid = h.daemon("retention-cleaner")?.pid();
    println!(
        "daemon CPU time (start, list, decide, 2,500 deletions and Events): {:.2} s; the rest of the wall time is the in-process emulator",
        cpu_seconds(pid)
    );
    let d = h.daemon("retention-cleaner")?;
    let metrics = d.admin().await?.metrics();
    let name = "cozy_backups_retention_cleaner_reconcile_duration_seconds";
    println!(
        "sweep passes: {} taking {:.2} s in all",
        metrics.sum(&format!("{name}_count"), &[]),
        metrics.sum(&format!("{name}_sum"), &[])
    );
    for line in d
        .log()
        .lines()
        .filter(|l| l.contains("pass done") || l.contains("pass failed"))
    {
        println!("  {}", &line[..line.len().min(300)]);
    }
    h.cleanup().await?;
    Ok(())
}
