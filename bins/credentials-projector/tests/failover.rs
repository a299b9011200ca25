//! Replicas and failover: two `credentials-projector` replicas on the real `lease-server` binary
//! with a 3 s lease TTL. Only the leader projects the system copies; after a `kill -9` of the
//! leader the standby leads within one TTL, after a SIGTERM within a second (the leader releases its
//! lease on the way out), and a `kill -9` plus restart of the lease server never shows two leaders.
//! Each source rotation is written to the system namespace exactly once (writes of the copy counted
//! from the audit log). Per-job projection under work leases shares the backup-runner's mechanism
//! (`WorkLeaseKeeper::freed`), tested there.

use crate::common;

use std::time::Duration;

use common::*;
use harness::failover::{Failover, GRACEFUL_TAKEOVER, MARGIN};
use harness::{DaemonSpec, Harness, until};

const TTL: Duration = Duration::from_secs(3);

struct Plane {
    h: Harness,
    f: Failover,
    src: String,
    velero: String,
}

/// Writes of the projected copy in the system namespace (the audit log names no object on a
/// create; the copy is the only Secret created there).
fn copy_writes(p: &Plane) -> usize {
    p.h.audit()
        .writes(None, "secrets", Some(&p.velero), Some(TARGET))
        .count()
        + p.h
            .audit()
            .writes(Some("create"), "secrets", Some(&p.velero), None)
            .count()
}

/// Rotates the source to access key `key` and waits until the system copy carries it.
async fn rotated(p: &Plane, key: &str) {
    rotate(p, key).await;
    until(&format!("the system copy to carry {key}"), || async {
        target(&p.h, &p.velero)
            .await
            .is_some_and(|s| data_of(&s).values().any(|v| v.contains(key)))
    })
    .await;
}

async fn rotate(p: &Plane, key: &str) {
    set_source(
        &p.h,
        &p.src,
        &[
            ("accessKey", key),
            ("secretKey", "failover-secret-key"),
            ("endpoint", "s3.example.com"),
        ],
    )
    .await;
}

async fn plane() -> Plane {
    let mut h = Harness::start().await.unwrap();
    let src = h.temp_namespace("src").await.unwrap();
    let velero = h.temp_namespace("velero").await.unwrap();
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_credentials-projector"));
    // The lease server keeps its epoch where its Role lets it: its own namespace.
    let f = Failover::start(&mut h, NAME, "cozy-backup-controller", 2, TTL, |name| {
        DaemonSpec::new(name, bin.clone())
            .env("BACKUP_STORAGE_SECRET_NAMESPACE", &src)
            .env("BACKUP_STORAGE_SECRET_NAME", SOURCE)
            .env(
                "BACKUP_STORAGE_ENDPOINT",
                "http://seaweedfs-s3.tenant-root.svc:8333",
            )
            .env("BACKUP_STORAGE_REGION", "us-east-1")
            .env("BACKUP_STORAGE_FORCE_PATH_STYLE", "true")
            .env("BACKUP_STORAGE_SYSTEM_NAMESPACES", &velero)
            .env("SYSTEM_TICK", "1h")
    })
    .await
    .unwrap();
    let p = Plane { h, f, src, velero };
    rotated(&p, "AKFIRST").await;
    assert_eq!(copy_writes(&p), 1, "one replica projected, once");
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_leader_hands_over_within_one_ttl() {
    let mut p = plane().await;
    let leader = p.f.leader(&mut p.h).await.unwrap();
    let (next, took) = p.f.kill_leader(&mut p.h, &leader).await.unwrap();
    assert!(took <= TTL + MARGIN, "{took:?}");
    rotated(&p, "AKSECOND").await;
    assert_eq!(copy_writes(&p), 2, "the takeover itself wrote nothing");
    assert_eq!(p.f.leaders(&mut p.h).unwrap(), [next]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_leader_hands_over_at_once() {
    let mut p = plane().await;
    let leader = p.f.leader(&mut p.h).await.unwrap();
    let (next, took) = p.f.terminate_leader(&mut p.h, &leader).await.unwrap();
    assert!(took < GRACEFUL_TAKEOVER + MARGIN, "{took:?}");
    rotated(&p, "AKSECOND").await;
    assert_eq!(copy_writes(&p), 2);
    assert_eq!(p.f.leaders(&mut p.h).unwrap(), [next]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_server_restart_never_makes_two_leaders() {
    let mut p = plane().await;
    let leader = p.f.leader(&mut p.h).await.unwrap();
    let monitor = p.f.monitor(&mut p.h).unwrap();
    // Work in flight across the restart: a rotation just before the server dies.
    rotate(&p, "AKDURING").await;
    let killed = p.f.restart_lease_server(&mut p.h).await.unwrap();
    until("the rotation projected", || async {
        target(&p.h, &p.velero)
            .await
            .is_some_and(|s| data_of(&s).values().any(|v| v.contains("AKDURING")))
    })
    .await;
    tokio::time::sleep_until((killed + TTL + MARGIN).into()).await;
    let seen = monitor.finish();
    seen.check_restart(&leader, killed, TTL).unwrap();
    assert_eq!(copy_writes(&p), 2, "projected exactly once");
    assert_eq!(p.f.leaders(&mut p.h).unwrap().len(), 1);
}
