//! The storage breaker end to end on the real data plane (PostgreSQL, barman-cloud, the S3 server
//! with its fault switches, the simulated CNPG, COSI and Flux) and the real daemons: Plans due every
//! minute back up two PostgreSQL applications; the S3 server stops; the runner's breaker opens,
//! the jobs wait with `Ready=False StorageUnavailable` and none fails; the runner is killed with
//! SIGKILL mid-outage and the new process picks the outage up from the jobs' conditions; probes
//! follow the backoff steps (one per step); when S3 comes back the waiting jobs resume with bounded
//! concurrency and every Plan backs up again. The same, shorter and without the kill, with S3
//! answering 503 to everything. The time from S3's return to the last waiting job's
//! success is printed (docs/reliability.md records it).
//!
//! Scale: in the suite, 6 Plans over 2 PostgreSQL clusters (the simulated CNPG runs one base
//! backup per cluster at a time). Fifty Plans mean fifty real base backups a minute, which a
//! 2-core machine cannot run next to the rest of the suite, so the fifty-Plan run is the same test
//! run by hand with `COZY_OUTAGE_APPS=10 COZY_OUTAGE_PLANS_PER_APP=5` (docs/reliability.md records
//! what it printed).

use crate::support::{self, WAIT};

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use api::backups::{BackupJob, Plan};
use harness::dataplane::apply;
use harness::{Admin, Harness, eventually_within};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::json;

const TENANT: &str = "tenant-acme";
/// The PostgreSQL applications: `shop-db` and `blog-db`, or `COZY_OUTAGE_APPS` of them.
fn apps() -> Vec<String> {
    match std::env::var("COZY_OUTAGE_APPS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        Some(n) => (0..n).map(|i| format!("app{i}-db")).collect(),
        None => vec!["shop-db".into(), "blog-db".into()],
    }
}

/// Plans per application, each due every minute: 3, or `COZY_OUTAGE_PLANS_PER_APP`.
fn plans_per_app() -> usize {
    std::env::var("COZY_OUTAGE_PLANS_PER_APP")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(3)
}
/// `--storage-recovery-concurrency` of the runner under test.
const CONCURRENCY: usize = 2;
/// Failed probes the `stop` outage lasts for after the runner's restart (at once, then after 5,
/// 10, 20, 40 and 60 s): with the time the breaker takes to open, about three minutes of outage.
/// `COZY_OUTAGE_PROBES` sets another count (each one more is another minute).
fn probes_after_restart() -> f64 {
    std::env::var("COZY_OUTAGE_PROBES")
        .ok()
        .and_then(|n| n.parse::<f64>().ok())
        .unwrap_or(6.0)
}
/// Failed probes the `unavailable` (503) outage lasts for (at once, then after 5 and 10 s).
const PROBES_503: f64 = 3.0;
/// The deadline of each phase of the scenario (a Plan slot is a minute; a base backup some
/// seconds; barman-cloud retries a refused connection for a while before it gives up).
const PHASE: Duration = Duration::from_secs(300);

const AVAILABLE: &str = "cozy_backups_backup_runner_storage_available";
const PROBES: &str = "cozy_backups_backup_runner_storage_probes_total";

fn ready(job: &BackupJob) -> Option<(String, String)> {
    support::ready(job).map(|c| (c.reason, c.message))
}

fn phase(job: &BackupJob) -> &str {
    job.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn plan_of(job: &BackupJob) -> Option<String> {
    job.owner_references()
        .iter()
        .find(|o| o.kind == "Plan")
        .map(|o| o.name.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_outage_jobs_wait_explained_probe_with_backoff_survive_kill_and_resume_bounded() {
    outage("stop", true, probes_after_restart()).await;
}

/// The same with S3 answering 503 `ServiceUnavailable` to every request (barman-cloud's `An error
/// occurred (503)`, the probe's `HTTP 503`), without the restart and shorter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_answering_503_jobs_wait_and_resume_bounded() {
    outage("unavailable", false, PROBES_503).await;
}

/// The scenario with S3's fault switch at `mode`, the runner killed mid-outage when `kill`, the
/// outage lasting until the (last) runner process failed `probes` probes.
async fn outage(mode: &str, kill: bool, probes: f64) {
    let mut h = Harness::start().await.unwrap();
    h.create_namespaces(&[
        "tenant-root",
        "cozy-velero",
        "cozy-backup-controller",
        TENANT,
    ])
    .await
    .unwrap();
    let dp = h
        .spawn_dataplane("s3,cosi,cnpg,flux", &["--cosi-delay-ms=10"])
        .await
        .unwrap();
    h.spawn_renderer_and_projector(&dp, WAIT).await.unwrap();
    h.spawn_ready(
        crate::catalog::runner_spec(&dp).args([
            "--storage-breaker-failures=2".to_owned(),
            format!("--storage-recovery-concurrency={CONCURRENCY}"),
            "--log-format=json".to_owned(),
        ]),
        WAIT,
    )
    .await
    .unwrap();
    let apps = apps();
    for app in &apps {
        apply(
            &h.dynamic::<api::thirdparty::apps::Postgres>(TENANT),
            json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres",
                   "metadata": {"name": app, "namespace": TENANT},
                   "spec": {"size": "1Gi", "replicas": 1}}),
        )
        .await;
    }
    for app in &apps {
        h.healthy_cluster_uri(TENANT, &format!("postgres-{app}"))
            .await;
    }
    let mut plan_names = Vec::new();
    for app in &apps {
        for i in 0..plans_per_app() {
            let name = format!("{app}-every-minute-{i}");
            let mut plan = Plan::test(&name, "* * * * *")
                .namespace(TENANT)
                .for_app("Postgres", app)
                .build();
            // One job per Plan at a time: slots due while one waits are skipped (docs/plans.md).
            plan.spec.concurrency_policy = Some("Forbid".into());
            h.create(TENANT, &plan).await;
            plan_names.push(name);
        }
    }
    let jobs: Api<BackupJob> = Api::namespaced(h.client(), TENANT);
    let list = |jobs: Api<BackupJob>| async move {
        jobs.list(&ListParams::default())
            .await
            .ok()
            .map(|l| l.items)
    };

    // A round over all Plans (each a real base backup; the simulated CNPG runs one per cluster at
    // a time): about 12 s per Plan on this machine, at least a phase.
    let round = PHASE.max(Duration::from_secs(12 * plan_names.len() as u64));
    // Storage up: every Plan backs up once.
    eventually_within("every Plan has a Succeeded job", round, || async {
        let all = list(jobs.clone()).await?;
        let done: BTreeSet<String> = all
            .iter()
            .filter(|j| phase(j) == "Succeeded")
            .filter_map(plan_of)
            .collect();
        (done.len() == plan_names.len()).then_some(())
    })
    .await;

    // S3 stops. The breaker opens once two jobs failed for storage reasons, and jobs wait with
    // the explained condition.
    let stopped_at = k8s_openapi::jiff::Timestamp::now();
    dp.s3_mode(mode).await;
    let mut runner: Admin = h.daemon("backup-runner").unwrap().admin().await.unwrap();
    let endpoint = eventually_within("the storage breaker opens", PHASE, || async {
        runner
            .metrics()
            .samples()
            .iter()
            .find(|s| s.name == AVAILABLE && s.value == 0.0)
            .map(|s| s.labels["endpoint"].clone())
    })
    .await;
    let waiting = eventually_within("a job waits StorageUnavailable", PHASE, || async {
        list(jobs.clone())
            .await?
            .into_iter()
            .find(|j| ready(j).is_some_and(|(r, _)| r == "StorageUnavailable"))
    })
    .await;
    let (_, message) = ready(&waiting).unwrap();
    println!("waiting job: {}: {message}", waiting.name_any());
    assert!(
        message.contains(&format!("object storage at {endpoint} is unavailable")),
        "{message}"
    );
    assert_eq!(phase(&waiting), "Running");
    let system: k8s_openapi::api::core::v1::Secret = Api::namespaced(h.client(), "tenant-root")
        .get("bucket-cozy-backups-system-credentials")
        .await
        .unwrap();
    let secret_key = system
        .data
        .as_ref()
        .and_then(|d| {
            d.iter()
                .find(|(k, _)| k.to_ascii_lowercase().contains("secret"))
                .map(|(_, v)| String::from_utf8_lossy(&v.0).into_owned())
        })
        .unwrap();
    assert!(!message.contains(&secret_key), "a secret key in a status");

    // kill -9 mid-outage: the new process opens the breaker from the jobs' conditions and probes
    // from the first step again.
    if kill {
        h.restart("backup-runner", WAIT).await.unwrap();
        runner = h.daemon("backup-runner").unwrap().admin().await.unwrap();
    }
    eventually_within("failed probes", PHASE, || async {
        let m = runner.metrics();
        (m.get(AVAILABLE, &[("endpoint", &endpoint)]) == Some(0.0)
            && m.sum(PROBES, &[("result", "error")]) >= probes)
            .then_some(())
    })
    .await;
    let during = list(jobs.clone()).await.unwrap();
    let failed: Vec<_> = during
        .iter()
        .filter(|j| phase(j) == "Failed")
        .map(|j| (j.name_any(), ready(j)))
        .collect();
    assert!(
        failed.is_empty(),
        "jobs failed during the outage: {failed:?}"
    );
    let pending: BTreeSet<String> = during
        .iter()
        .filter(|j| !matches!(phase(j), "Succeeded" | "Failed"))
        .map(|j| j.name_any())
        .collect();
    assert!(!pending.is_empty());

    // S3 returns: the waiting jobs resume, at most CONCURRENCY base backups at once.
    dp.s3_mode("none").await;
    let back = Instant::now();
    let back_wall = k8s_openapi::jiff::Timestamp::now();
    let cnpg: Api<DynamicObject> = h.dynamic::<api::thirdparty::cnpg::Backup>(TENANT);
    let most_at_once = Arc::new(AtomicUsize::new(0));
    let last_done = eventually_within("every waiting job Succeeded", PHASE, || {
        let jobs = jobs.clone();
        let cnpg = cnpg.clone();
        let pending = pending.clone();
        let most = most_at_once.clone();
        async move {
            // cnpg Backups taken since S3 returned that are still running.
            let running = cnpg
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .iter()
                .filter(|b| {
                    b.creation_timestamp().is_some_and(|c| c.0 >= back_wall)
                        && !matches!(
                            b.data["status"]["phase"].as_str(),
                            Some("completed" | "failed")
                        )
                })
                .count();
            most.fetch_max(running, Ordering::Relaxed);
            let all = list(jobs).await?;
            let of_pending: Vec<&BackupJob> = all
                .iter()
                .filter(|j| pending.contains(&j.name_any()))
                .collect();
            let failed: Vec<_> = of_pending
                .iter()
                .filter(|j| phase(j) == "Failed")
                .map(|j| (j.name_any(), ready(j)))
                .collect();
            assert!(
                failed.is_empty(),
                "jobs failed after the outage: {failed:?}"
            );
            if of_pending.iter().any(|j| phase(j) != "Succeeded") {
                return None;
            }
            of_pending
                .iter()
                .filter_map(|j| j.status.as_ref()?.completed_at.clone())
                .max_by_key(|t| t.0)
        }
    })
    .await;
    let most_at_once = most_at_once.load(Ordering::Relaxed);
    let recovered_in = (last_done.0 - back_wall).get_seconds();
    println!(
        "S3 {mode} for {} s; S3 back → last waiting job Succeeded: {recovered_in} s ({} jobs waiting, concurrency {CONCURRENCY}; observed in {:?}); most cnpg Backups running at once: {most_at_once}",
        (back_wall - stopped_at).get_seconds(),
        pending.len(),
        back.elapsed()
    );
    assert!(
        most_at_once <= CONCURRENCY,
        "{most_at_once} base backups at once"
    );

    // Every Plan backs up again: a job created since the outage began succeeded. A Plan whose
    // job was already running when S3 stopped needs a later slot's job, which queues behind the
    // others at the recovery concurrency: another round over all Plans.
    eventually_within("every Plan resumed", round, || async {
        let all = list(jobs.clone()).await?;
        let resumed: BTreeSet<String> = all
            .iter()
            .filter(|j| phase(j) == "Succeeded")
            .filter(|j| j.creation_timestamp().is_some_and(|c| c.0 >= stopped_at))
            .filter_map(plan_of)
            .collect();
        (resumed.len() == plan_names.len()).then_some(())
    })
    .await;

    // The probe audit: per process, one probe per backoff step (steps 0, 1, 2, … in order; the
    // restart starts over at 0), and never two in flight.
    let daemon = h.daemon("backup-runner").unwrap();
    let log = daemon.log();
    let steps: Vec<u64> = daemon
        .json_lines("storage probe failed")
        .iter()
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    println!("failed probe steps: {steps:?}");
    let mut restarts = 0;
    for pair in steps.windows(2) {
        if pair[1] == 0 {
            restarts += 1;
        } else {
            assert_eq!(pair[1], pair[0] + 1, "probe steps {steps:?}");
        }
    }
    assert!(restarts <= usize::from(kill), "probe steps {steps:?}");
    let started = daemon
        .json_lines("storage probe: HEAD of the system bucket")
        .len();
    let succeeded = daemon
        .json_lines("storage probe succeeded: the object store answers; waiting jobs resume")
        .len();
    assert!(
        started <= steps.len() + succeeded + 1,
        "{started} probes started, {} failed, {succeeded} succeeded",
        steps.len()
    );
    // Resumes: never more than the concurrency at once.
    let resumed: Vec<u64> = daemon
        .json_lines("storage recovered: job resumes")
        .iter()
        .map(|v| v["resumed"].as_u64().unwrap())
        .collect();
    assert!(!resumed.is_empty());
    assert!(
        resumed.iter().all(|n| *n as usize <= CONCURRENCY),
        "{resumed:?}"
    );
    assert!(
        !log.contains(&secret_key),
        "a secret key in the runner's log"
    );
    h.cleanup().await.unwrap();
}
