//! Replicas and failover: two `backup-runner` replicas on the real `lease-server` binary with a
//! 3 s lease TTL. Leadership (the Plan and catalog loops) moves within one TTL after a `kill -9` of
//! the leader and within a second after a SIGTERM; a BackupJob driven under a work lease moves the
//! same way: the replica that was refused the lease learns by push that it was freed and fences
//! the job with its own, higher token. A `kill -9` plus restart of the lease server never shows two
//! leaders and never moves the job to a second holder. Writes are counted from the audit log.
//!
//! The job waits for a BackupClass that does not exist: the holder keeps its work lease, records
//! its token on the job (the fencing annotation) and waits, which makes the holder observable.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use api::backups::BackupJob;
use harness::failover::{Failover, Fenced, GRACEFUL_TAKEOVER, MARGIN};
use harness::{DaemonSpec, Harness, until};
use kube::api::Api;

const COMPONENT: &str = "backup-runner";
const NS: &str = "tenant-failover";
const TTL: Duration = Duration::from_secs(3);
const JOB: &str = "waiting";
const TOKEN: &str = "backups.cozystack.io/runner-lease-token";
const IN_FLIGHT: &str = "cozy_backups_backup_runner_jobs_in_flight";

fn runner(name: &str) -> DaemonSpec {
    DaemonSpec::new(name, PathBuf::from(env!("CARGO_BIN_EXE_backup-runner")))
        .args(["--require-credentials-projection=false"])
}

fn job(h: &Harness) -> Fenced<BackupJob> {
    Fenced::new(Api::namespaced(h.client(), NS), JOB, TOKEN)
}

/// The new holder's fence in the audit log: the emulator records a request after the write is
/// visible, so the job can show the new token a moment before its patch is listed.
async fn refence_recorded(h: &Harness) {
    until("the second fence in the audit log", || async {
        fences(h) >= 2
    })
    .await;
}

/// Fencing writes of the job: patches that set the token annotation (each holder fences once).
fn fences(h: &Harness) -> usize {
    h.audit()
        .writes(Some("patch"), "backupjobs", Some(NS), Some(JOB))
        .filter(|r| r.subresource.is_none())
        .count()
}

/// Two replicas, and a job held (fenced) by one of them; answers the plane and the holder.
async fn plane() -> (Harness, Failover, String, u64) {
    let mut h = Harness::start().await.unwrap();
    h.create_namespaces(&[NS]).await.unwrap();
    // The lease server keeps its epoch where its Role lets it: its own namespace.
    let f = Failover::start(&mut h, COMPONENT, "cozy-backup-controller", 2, TTL, runner)
        .await
        .unwrap();
    // Once a replica leads, the server's quiet period is over and work leases are granted.
    f.leader(&mut h).await.unwrap();
    h.create(NS, &BackupJob::test(JOB).class("no-such-class").build())
        .await;
    let first = job(&h).fenced().await;
    let holder = f.single_reporting(&mut h, IN_FLIGHT).await.unwrap();
    assert_eq!(fences(&h), 1, "one replica fenced the job, once");
    (h, f, holder, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_hands_leadership_and_the_job_over_within_one_ttl() {
    let (mut h, f, holder, first) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let killed = Instant::now();
    job(&h)
        .kill_holder(&mut h, &holder, first, TTL)
        .await
        .unwrap();
    refence_recorded(&h).await;
    assert_eq!(fences(&h), 2, "the new holder fenced once");
    if leader == holder {
        let (next, _) = f
            .takeover(&mut h, &leader, killed, TTL + MARGIN)
            .await
            .unwrap();
        assert_ne!(next, leader);
    } else {
        // The other replica leads (and now holds the job): bring a standby back, then kill it.
        h.restart(&holder, harness::DEADLINE).await.unwrap();
        let (_, took) = f.kill_leader(&mut h, &leader).await.unwrap();
        assert!(took <= TTL + MARGIN, "{took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_leadership_and_the_job_over_at_once() {
    let (mut h, f, holder, first) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let bound = GRACEFUL_TAKEOVER + MARGIN;
    let signalled = Instant::now();
    job(&h)
        .terminate_holder(&mut h, &holder, first)
        .await
        .unwrap();
    refence_recorded(&h).await;
    assert_eq!(fences(&h), 2, "the new holder fenced once");
    if leader == holder {
        let (next, took) = f.takeover(&mut h, &leader, signalled, bound).await.unwrap();
        assert_ne!(next, leader);
        assert!(took < bound, "{took:?}");
    } else {
        // The other replica leads (and now holds the job): bring a standby back, then stop it.
        h.restart(&holder, harness::DEADLINE).await.unwrap();
        let (_, took) = f.terminate_leader(&mut h, &leader).await.unwrap();
        assert!(took < bound, "{took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_server_restart_never_makes_two_leaders_or_holders() {
    let (mut h, f, holder, first) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let monitor = f.monitor(&mut h).unwrap();
    let killed = f.restart_lease_server(&mut h).await.unwrap();
    tokio::time::sleep_until((killed + TTL + MARGIN).into()).await;
    let seen = monitor.finish();
    seen.check_restart(&leader, killed, TTL).unwrap();
    // The holder restored its lease (or, had it lost it, one replica fenced it again): never two
    // holders, and the token never went backwards.
    let holders = f.reporting(&mut h, IN_FLIGHT).unwrap();
    assert!(holders.len() <= 1, "{holders:?}");
    let now = job(&h).token().await.unwrap();
    assert!(now >= first);
    if now == first {
        assert_eq!(holders, [holder]);
        assert_eq!(fences(&h), 1);
    } else {
        assert_eq!(fences(&h), 2);
    }
    assert_eq!(f.leaders(&mut h).unwrap().len(), 1);
}
