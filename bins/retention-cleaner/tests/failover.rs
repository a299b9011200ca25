//! Replicas and failover: two `retention-cleaner` replicas on the real `lease-server` binary with a
//! 3 s lease TTL. Only the leader sweeps; after a `kill -9` of the leader the standby leads within
//! one TTL, after a SIGTERM within a second (the leader releases its lease on the way out), and a
//! `kill -9` plus restart of the lease server never shows two leaders. Each failed BackupJob is
//! deleted exactly once, whoever leads (counted from the emulator's audit log).

use crate::support;

use std::time::Duration;

use chrono::Utc;
use harness::failover::{Failover, GRACEFUL_TAKEOVER, MARGIN};
use harness::{DaemonSpec, Harness, until};
use support::*;

const TTL: Duration = Duration::from_secs(3);

fn cleaner(name: &str) -> DaemonSpec {
    DaemonSpec::new(name, harness::locate_binary(COMPONENT).unwrap()).args(["--debounce=200ms"])
}

fn job_deletes(h: &Harness, name: &str) -> usize {
    cleaner_deletes(&h.audit(), "backups.cozystack.io", "backupjobs")
        .iter()
        .filter(|(n, ok)| n == name && *ok)
        .count()
}

/// A failed BackupJob old enough to be deleted at once; waits until it is gone.
async fn swept(h: &Harness, name: &str) {
    failed_job(
        h,
        name,
        None,
        Utc::now() - chrono::Duration::days(2),
        "disk quota exceeded",
    )
    .await;
    until(&format!("{name} deleted"), || async {
        !jobs(h).await.contains(name)
    })
    .await;
}

async fn plane() -> (Harness, Failover) {
    let mut h = start(leftover_crds()).await;
    // The lease server keeps its epoch where its Role lets it: its own namespace.
    let f = Failover::start(&mut h, COMPONENT, "cozy-backup-controller", 2, TTL, cleaner)
        .await
        .unwrap();
    swept(&h, "failed-first").await;
    assert_eq!(job_deletes(&h, "failed-first"), 1);
    (h, f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_leader_hands_over_within_one_ttl() {
    let (mut h, f) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let (next, took) = f.kill_leader(&mut h, &leader).await.unwrap();
    assert!(took <= TTL + MARGIN, "{took:?}");
    swept(&h, "failed-after").await;
    assert_eq!(job_deletes(&h, "failed-after"), 1);
    assert_eq!(job_deletes(&h, "failed-first"), 1);
    assert_eq!(f.leaders(&mut h).unwrap(), [next]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_leader_hands_over_at_once() {
    let (mut h, f) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let (next, took) = f.terminate_leader(&mut h, &leader).await.unwrap();
    assert!(took < GRACEFUL_TAKEOVER + MARGIN, "{took:?}");
    swept(&h, "failed-after").await;
    assert_eq!(job_deletes(&h, "failed-after"), 1);
    assert_eq!(f.leaders(&mut h).unwrap(), [next]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_server_restart_never_makes_two_leaders() {
    let (mut h, f) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let monitor = f.monitor(&mut h).unwrap();
    // Work in flight across the restart: a failure created just before the server dies.
    failed_job(
        &h,
        "failed-during",
        None,
        Utc::now() - chrono::Duration::days(2),
        "disk quota exceeded",
    )
    .await;
    let killed = f.restart_lease_server(&mut h).await.unwrap();
    until("failed-during deleted", || async {
        !jobs(&h).await.contains("failed-during")
    })
    .await;
    tokio::time::sleep_until((killed + TTL + MARGIN).into()).await;
    let seen = monitor.finish();
    seen.check_restart(&leader, killed, TTL).unwrap();
    assert_eq!(job_deletes(&h, "failed-during"), 1);
    assert_eq!(f.leaders(&mut h).unwrap().len(), 1);
}
