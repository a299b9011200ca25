//! Replicas and failover: two `restore-orchestrator` replicas on the real `lease-server` binary with
//! a 3 s lease TTL. The orchestrator has no leader loop: each RestoreJob is driven under a work
//! lease, whose fencing token the holder records on the job. A `kill -9` of the holder moves the
//! job within one TTL, a SIGTERM within a second (the holder releases its leases on the way out and
//! the server pushes the release to the other replica), and a `kill -9` plus restart of the lease
//! server never gives the job a second holder. Writes are counted from the audit log.
//!
//! The job waits for the credentials projection (no projector runs here): its holder adds the
//! finalizer, fences the job and waits, which makes the holder observable and any second write
//! visible.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use api::backups::{Backup, RestoreJob};
use harness::failover::{Failover, Fenced, MARGIN};
use harness::{DaemonSpec, Harness, until};
use kube::api::Api;

const COMPONENT: &str = "restore-orchestrator";
const NS: &str = "tenant-failover";
const TTL: Duration = Duration::from_secs(3);
const JOB: &str = "waiting";
const TOKEN: &str = "backups.cozystack.io/restore-orchestrator-lease-token";
const IN_FLIGHT: &str = "cozy_backups_restore_orchestrator_restores_in_flight";

fn orchestrator(name: &str) -> DaemonSpec {
    DaemonSpec::new(
        name,
        PathBuf::from(env!("CARGO_BIN_EXE_restore-orchestrator")),
    )
}

fn job(h: &Harness) -> Fenced<RestoreJob> {
    Fenced::new(Api::namespaced(h.client(), NS), JOB, TOKEN)
}

/// Writes of the job: `(patches of the object, writes of its status)`. The object is patched
/// once for the finalizer and once per holder for the fence; a new holder derives the same
/// status as the first and writes none.
fn writes(h: &Harness) -> (usize, usize) {
    let audit = h.audit();
    let (mut object, mut status) = (0, 0);
    for r in audit.writes(None, "restorejobs", Some(NS), Some(JOB)) {
        match r.subresource.as_deref() {
            None if r.verb == "patch" || r.verb == "update" => object += 1,
            Some("status") => status += 1,
            _ => {}
        }
    }
    (object, status)
}

/// The new holder's fence in the audit log: the emulator records a request after the write is
/// visible, so the job can show the new token a moment before its patch is listed.
async fn refence_recorded(h: &Harness, before: (usize, usize)) {
    until("the second fence in the audit log", || async {
        writes(h).0 > before.0
    })
    .await;
}

/// Two replicas, and a job held (fenced) by one of them; answers the plane, the holder, its token
/// and the job's writes so far.
async fn plane() -> (Harness, Failover, String, u64, (usize, usize)) {
    let mut h = Harness::start().await.unwrap();
    h.create_namespaces(&[NS]).await.unwrap();
    let f = Failover::start(
        &mut h,
        COMPONENT,
        "cozy-backup-controller",
        2,
        TTL,
        orchestrator,
    )
    .await
    .unwrap();
    h.create(NS, &Backup::test("nightly").build()).await;
    h.create(NS, &RestoreJob::test(JOB, "nightly").build())
        .await;
    let first = job(&h).fenced().await;
    let holder = f.single_reporting(&mut h, IN_FLIGHT).await.unwrap();
    // The holder has added the finalizer and fenced the job, then waits: its writes stop.
    let before = settled(&h).await;
    assert_eq!(before.0, 2, "the finalizer and one fence");
    (h, f, holder, first, before)
}

/// The job's writes once the finalizer and the fence are in the audit log and nothing more was
/// written for half a second.
async fn settled(h: &Harness) -> (usize, usize) {
    let deadline = Instant::now() + harness::DEADLINE;
    loop {
        let seen = writes(h);
        tokio::time::sleep(Duration::from_millis(500)).await;
        if seen.0 >= 2 && writes(h) == seen {
            return seen;
        }
        assert!(
            Instant::now() < deadline,
            "the job's writes never settled: {seen:?}"
        );
    }
}

/// After a takeover: one more fence, and nothing else written twice.
async fn one_more_fence(h: &Harness, before: (usize, usize)) {
    refence_recorded(h, before).await;
    // Give a wrongly repeated write time to show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        writes(h),
        (before.0 + 1, before.1),
        "(object, status) writes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_hands_the_job_over_within_one_ttl() {
    let (mut h, f, holder, first, before) = plane().await;
    job(&h)
        .kill_holder(&mut h, &holder, first, TTL)
        .await
        .unwrap();
    one_more_fence(&h, before).await;
    let now = f.reporting(&mut h, IN_FLIGHT).unwrap();
    assert!(now.len() == 1 && now[0] != holder, "{now:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_the_job_over_at_once() {
    let (mut h, f, holder, first, before) = plane().await;
    job(&h)
        .terminate_holder(&mut h, &holder, first)
        .await
        .unwrap();
    one_more_fence(&h, before).await;
    let now = f.reporting(&mut h, IN_FLIGHT).unwrap();
    assert!(now.len() == 1 && now[0] != holder, "{now:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_server_restart_never_makes_two_holders() {
    let (mut h, f, holder, first, before) = plane().await;
    let killed = f.restart_lease_server(&mut h).await.unwrap();
    // Sample the holders through the outage and the server's quiet period (one TTL).
    let until_t = killed + TTL + MARGIN;
    while Instant::now() < until_t {
        let holders = f.reporting(&mut h, IN_FLIGHT).unwrap();
        assert!(holders.len() <= 1, "two holders: {holders:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The holder restored its lease (or, had it lost it, one replica fenced the job again): never
    // two holders, the token never went backwards, and nothing but a fence was written again.
    let holders = f.reporting(&mut h, IN_FLIGHT).unwrap();
    assert!(holders.len() <= 1, "{holders:?}");
    let now = job(&h).token().await.unwrap();
    assert!(now >= first);
    if now == first {
        assert_eq!(holders, [holder]);
        assert_eq!(writes(&h), before);
    } else {
        one_more_fence(&h, before).await;
    }
}
