//! Replicas and failover: two `strategy-renderer` replicas on the real `lease-server` binary with a
//! 3 s lease TTL. Only the leader renders; after a `kill -9` of the leader the standby leads within
//! one TTL, after a SIGTERM within a second (the leader releases its lease on the way out), and a
//! `kill -9` plus restart of the lease server never shows two leaders. In each case the renderer's
//! work is done exactly once: the emulator's audit log counts the renderer's applies per object.

use std::path::PathBuf;
use std::time::Duration;

use harness::failover::Failover;
use harness::{DaemonSpec, Harness, until};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;

const COMPONENT: &str = "strategy-renderer";
const TTL: Duration = Duration::from_secs(3);
const CLASS: &str = "cozy-default";

fn renderer(name: &str) -> DaemonSpec {
    DaemonSpec::new(name, PathBuf::from(env!("CARGO_BIN_EXE_strategy-renderer")))
        .args(["--log-level", "info"])
}

fn classes(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::erase::<api::backups::BackupClass>(&()),
    )
}

/// Applies of the BackupClass `cozy-default` itself (not its status) by any renderer replica
/// (they share a User-Agent).
fn class_applies(h: &Harness) -> usize {
    h.audit()
        .writes(Some("patch"), "backupclasses", None, Some(CLASS))
        .filter(|r| r.user_agent.starts_with(COMPONENT) && r.subresource.is_none())
        .count()
}

/// A fresh platform (no COSI: the renderer's work is the Bucket and the BackupClass) with two
/// renderer replicas; waits until the leader rendered the BackupClass.
async fn plane() -> (Harness, Failover) {
    let mut h = Harness::start().await.unwrap();
    h.create_namespaces(&["tenant-root", "cozy-velero", "cozy-backup-controller"])
        .await
        .unwrap();
    let crds: Vec<_> = [operator_sims::Sim::Cosi, operator_sims::Sim::Velero]
        .iter()
        .flat_map(|s| s.crds())
        .collect();
    operator_sims::install_crds(&h.client(), &crds)
        .await
        .unwrap();
    let f = Failover::start(
        &mut h,
        COMPONENT,
        "cozy-backup-controller",
        2,
        TTL,
        renderer,
    )
    .await
    .unwrap();
    rendered(&h).await;
    (h, f)
}

/// Waits until `cozy-default` exists and carries the leader's Ready condition. The condition is
/// written after the apply's answer arrived, in the same pass, and the emulator records a write in
/// its audit log before it answers: so once the condition shows, the apply is in the audit log. The
/// object alone is not enough: the store shows it to a reader a moment before the audit entry of
/// the write that created it is recorded, and a count read in that moment misses the apply.
async fn rendered(h: &Harness) {
    let api = classes(&h.client());
    until(
        "the leader to render cozy-default and report its Ready condition",
        || {
            let api = api.clone();
            async move {
                api.get_opt(CLASS).await.unwrap().is_some_and(|class| {
                    class.data["status"]["conditions"]
                        .as_array()
                        .is_some_and(|c| {
                            c.iter()
                                .any(|c| c["type"] == api::contract::condition_types::READY)
                        })
                })
            }
        },
    )
    .await;
}

/// Deletes `cozy-default` (drift only the leader repairs) and waits until it is back.
async fn drift_repaired(h: &Harness) {
    let api = classes(&h.client());
    api.delete(CLASS, &Default::default()).await.unwrap();
    rendered(h).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_leader_hands_over_within_one_ttl() {
    let (mut h, f) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let before = class_applies(&h);
    assert_eq!(before, 1, "one replica rendered, once");
    let (next, took) = f.kill_leader(&mut h, &leader).await.unwrap();
    assert_ne!(next, leader);
    assert!(took <= TTL + harness::failover::MARGIN, "{took:?}");
    // The new leader's first pass finds everything in place and writes nothing; a drift after the
    // takeover is repaired exactly once.
    drift_repaired(&h).await;
    assert_eq!(class_applies(&h), before + 1);
    assert_eq!(f.leaders(&mut h).unwrap(), [next]);
    h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_leader_hands_over_at_once() {
    let (mut h, f) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let before = class_applies(&h);
    let (next, took) = f.terminate_leader(&mut h, &leader).await.unwrap();
    assert!(
        took < harness::failover::GRACEFUL_TAKEOVER + harness::failover::MARGIN,
        "{took:?}"
    );
    drift_repaired(&h).await;
    assert_eq!(class_applies(&h), before + 1);
    assert_eq!(f.leaders(&mut h).unwrap(), [next]);
    h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_server_restart_never_makes_two_leaders() {
    let (mut h, f) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let before = class_applies(&h);
    let monitor = f.monitor(&mut h).unwrap();
    // Work in flight across the restart: drift made just before the server dies.
    classes(&h.client())
        .delete(CLASS, &Default::default())
        .await
        .unwrap();
    let killed = f.restart_lease_server(&mut h).await.unwrap();
    rendered(&h).await;
    // Past the quiet period, so a new grant would have had its chance.
    tokio::time::sleep_until((killed + TTL + harness::failover::MARGIN).into()).await;
    let seen = monitor.finish();
    seen.check_restart(&leader, killed, TTL).unwrap();
    assert!(seen.samples > 10, "{seen:?}");
    assert_eq!(class_applies(&h), before + 1, "repaired exactly once");
    assert_eq!(f.leaders(&mut h).unwrap().len(), 1);
    h.cleanup().await.unwrap();
}
