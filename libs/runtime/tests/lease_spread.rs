//! Spreading work leases over replicas by a stable hash (`WorkLeaseKeeper::spread`): three
//! replicas that all see every object (as every replica sees every event) take each object once,
//! with one Acquire per object and no contention; an object whose preferred replica does not take
//! it (a member that is stuck) is taken by another replica after the grace period.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use lease::{ClientOptions, LeaseClient};
use runtime::{SPREAD_GRACE, WorkLeaseKeeper};

use crate::lease_release::{TTL, cm, serve_counting};
use harness::eventually_within;

/// The deadline of every wait here.
const WITHIN: Duration = Duration::from_secs(20);

/// A spreading keeper for `identity`, its freed stream drained in the background (the
/// controller's job in a daemon: it carries the grants the other replicas were given).
fn replica(addr: &str, identity: &str) -> Arc<WorkLeaseKeeper> {
    let client = LeaseClient::connect_lazy(addr, identity, ClientOptions::with_ttl(TTL)).unwrap();
    let keeper = Arc::new(WorkLeaseKeeper::new("probe", client.work_leases()).spread());
    let mut freed = Box::pin(keeper.freed::<ConfigMap>());
    tokio::spawn(async move { while freed.next().await.is_some() {} });
    keeper
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_take_each_object_once_with_one_acquire() {
    let acquires = Arc::new(AtomicUsize::new(0));
    let addr = serve_counting(acquires.clone()).await;
    let names = ["replica-a", "replica-b", "replica-c"];
    let keepers: Vec<_> = names.iter().map(|n| replica(&addr, n)).collect();
    for k in &keepers {
        let k = k.clone();
        eventually_within(
            "every replica knowing the three members",
            WITHIN,
            move || {
                let k = k.clone();
                async move { (k.members().len() == 3).then_some(()) }
            },
        )
        .await;
    }
    let before = acquires.load(Ordering::SeqCst);

    let mut taken = [0usize; 3];
    for i in 0..60 {
        let object = cm("tenant", &format!("job-{i}"));
        // Every replica sees the object at once.
        let (a, b, c) = tokio::join!(
            keepers[0].hold(&object),
            keepers[1].hold(&object),
            keepers[2].hold(&object)
        );
        let held: Vec<bool> = [a, b, c]
            .into_iter()
            .map(|h| h.unwrap().is_some())
            .collect();
        assert_eq!(
            held.iter().filter(|h| **h).count(),
            1,
            "job-{i}: one holder"
        );
        taken[held.iter().position(|h| *h).unwrap()] += 1;
    }
    assert_eq!(
        acquires.load(Ordering::SeqCst) - before,
        60,
        "one Acquire per object"
    );
    assert!(taken.iter().all(|n| *n >= 8), "spread: {taken:?}");

    // The preferred replica of an object stays silent (stuck): the others leave it alone for the
    // grace period, then one of them takes it.
    let silent = (0..)
        .map(|i| cm("tenant", &format!("stuck-{i}")))
        .find(|o| keepers[0].preferred(o).as_deref() == Some("replica-c"))
        .unwrap();
    let started = std::time::Instant::now();
    assert!(keepers[0].hold(&silent).await.unwrap().is_none());
    assert!(keepers[1].hold(&silent).await.unwrap().is_none());
    let others = [keepers[0].clone(), keepers[1].clone()];
    eventually_within(
        "another replica taking the stuck object",
        WITHIN,
        move || {
            let (others, silent) = (others.clone(), silent.clone());
            async move {
                for k in &others {
                    if k.hold(&silent).await.unwrap().is_some() {
                        return Some(());
                    }
                }
                None
            }
        },
    )
    .await;
    assert!(started.elapsed() >= SPREAD_GRACE, "{:?}", started.elapsed());
}
