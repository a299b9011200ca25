//! A graceful shutdown hands leases back: `LeaseClient::release_all` releases the leader lease
//! and every work lease of a replica (whoever still holds a handle to them), and the standby
//! learns it by push: its elector leads and its `WorkLeaseKeeper::freed` stream yields the object,
//! both well within a second, although the TTL is ten seconds (so expiry cannot explain it).

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use lease::{ClientOptions, Epoch, LeaseClient, LeaseService, LeaseTable, Limits};
use runtime::WorkLeaseKeeper;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(10);
/// What "at once" means here: a release, one pushed Watch event and one Acquire on loopback.
const PROMPT: Duration = Duration::from_secs(1);

/// Serves a fresh lease table (its quiet period already over) on a loopback port.
async fn serve() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let started = std::time::Instant::now()
        .checked_sub(TTL)
        .expect("monotonic clock past TTL");
    let table = LeaseTable::new(
        Epoch {
            number: 1,
            proof_key: vec![7; 32],
        },
        Limits { max_ttl: TTL },
        started,
    );
    let service = LeaseService::new(table);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    addr
}

async fn within<T>(what: &str, limit: Duration, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("{what} took longer than {limit:?}"))
}

fn cm(ns: &str, name: &str) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.namespace = Some(ns.into());
    cm.metadata.name = Some(name.into());
    cm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_all_hands_leadership_and_work_to_the_standby_at_once() {
    let addr = serve().await;
    let options = ClientOptions::with_ttl(TTL);
    let a = LeaseClient::connect_lazy(&addr, "replica-a", options).unwrap();
    let b = LeaseClient::connect_lazy(&addr, "replica-b", options).unwrap();

    // A leads and drives one object.
    let a_elector = a.elector("probe/leader");
    let mut a_leadership = a_elector.subscribe();
    within("A's leadership", Duration::from_secs(10), async {
        a_leadership.wait_for(|l| l.is_leading()).await.unwrap();
    })
    .await;
    let a_keeper = WorkLeaseKeeper::new("probe", a.work_leases());
    let job = cm("tenant", "job-1");
    let a_held = a_keeper.hold(&job).await.unwrap().expect("a free lease");

    // B follows and is refused the object; it waits for the object to be freed.
    let b_elector = b.elector("probe/leader");
    let mut b_leadership = b_elector.subscribe();
    let b_keeper = WorkLeaseKeeper::new("probe", b.work_leases());
    let mut freed = Box::pin(b_keeper.freed::<ConfigMap>());
    // Warm-up: the stream's first answer (a resync when its watch is established, or the
    // release itself) proves the watch is up, so the next answer can only come from a release.
    let warm_up = cm("tenant", "job-0");
    a_keeper
        .hold(&warm_up)
        .await
        .unwrap()
        .expect("a free lease");
    assert!(
        b_keeper.hold(&warm_up).await.unwrap().is_none(),
        "A holds it"
    );
    a_keeper.release(&warm_up);
    let object = within("the warm-up object", Duration::from_secs(10), freed.next()).await;
    assert_eq!(object.unwrap().name, "job-0");
    assert!(b_keeper.hold(&job).await.unwrap().is_none(), "A holds it");
    assert!(!b_leadership.borrow().is_leading());

    let released = Instant::now();
    assert!(
        within("release_all", PROMPT, a.release_all(PROMPT)).await,
        "every holding of A ended"
    );
    assert!(
        !a_leadership.borrow().is_leading(),
        "A follows after release_all"
    );
    assert!(
        a_held.is_lost(),
        "A's work lease reads lost after release_all"
    );
    within("B's leadership", PROMPT, async {
        b_leadership.wait_for(|l| l.is_leading()).await.unwrap();
    })
    .await;
    let object = within("B learning the object is free", PROMPT, freed.next())
        .await
        .expect("the stream lives while the keeper's client does");
    assert_eq!(
        (object.name.as_str(), object.namespace.as_deref()),
        ("job-1", Some("tenant"))
    );
    let b_held = b_keeper.hold(&job).await.unwrap().expect("freed by A");
    assert!(
        b_held.token() > a_held.token(),
        "a new grant, fenced above A's"
    );
    let took = released.elapsed();
    assert!(took < PROMPT, "takeover took {took:?}");

    // A released for good: it acquires nothing any more, even a free lease.
    assert!(
        a_keeper
            .hold(&cm("tenant", "job-2"))
            .await
            .unwrap()
            .is_none(),
        "a released client takes no new lease"
    );
    assert!(!a_leadership.borrow().is_leading());
}
