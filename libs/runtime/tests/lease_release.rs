//! A graceful shutdown hands leases back: `LeaseClient::release_all` releases the leader lease
//! and every work lease of a replica (whoever still holds a handle to them), and the standby
//! learns it by push: its elector leads and its `WorkLeaseKeeper::freed` stream yields the object,
//! both well within a second, although the TTL is ten seconds (so expiry cannot explain it).
//! A replica refused a lease asks the server once, not on every event of the object.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use lease::{ClientOptions, Epoch, LeaseClient, LeaseService, LeaseTable, Limits};
use runtime::WorkLeaseKeeper;
use tokio::time::Instant;

pub(crate) const TTL: Duration = Duration::from_secs(10);
/// What "at once" means here: a release, one pushed Watch event and one Acquire on loopback.
const PROMPT: Duration = Duration::from_secs(1);

/// Counts the Acquire calls a server answers (a layer in front of the lease service).
#[derive(Clone)]
struct CountAcquires<S> {
    inner: S,
    acquires: Arc<AtomicUsize>,
}

impl<S, B> tower::Service<http::Request<B>> for CountAcquires<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path().ends_with("/Acquire") {
            self.acquires.fetch_add(1, Ordering::SeqCst);
        }
        self.inner.call(request)
    }
}

/// Serves a fresh lease table (its quiet period already over) on a loopback port.
async fn serve() -> String {
    serve_counting(Arc::default()).await
}

/// As [`serve`], counting the Acquire calls answered in `acquires`.
pub(crate) async fn serve_counting(acquires: Arc<AtomicUsize>) -> String {
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
            .layer(tower::layer::layer_fn(move |inner| CountAcquires {
                inner,
                acquires: acquires.clone(),
            }))
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

/// The next object the freed stream announces other than the warm-up object `job-0`: the warm-up
/// may be announced twice (the resync when B's watch is established, and A's release), and a
/// repeated announcement is harmless by the stream's contract (it only wakes the object).
async fn next_after_warm_up<S>(
    freed: &mut S,
) -> Option<kube::runtime::reflector::ObjectRef<ConfigMap>>
where
    S: futures::Stream<Item = kube::runtime::reflector::ObjectRef<ConfigMap>> + Unpin,
{
    loop {
        match freed.next().await {
            Some(o) if o.name == "job-0" => continue,
            other => return other,
        }
    }
}

pub(crate) fn cm(ns: &str, name: &str) -> ConfigMap {
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
    let object = within(
        "B learning the object is free",
        PROMPT,
        next_after_warm_up(&mut freed),
    )
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_replica_asks_once_and_again_only_when_the_lease_is_freed() {
    let acquires = Arc::new(AtomicUsize::new(0));
    let addr = serve_counting(acquires.clone()).await;
    let options = ClientOptions::with_ttl(TTL);
    let a = LeaseClient::connect_lazy(&addr, "replica-a", options).unwrap();
    let b = LeaseClient::connect_lazy(&addr, "replica-b", options).unwrap();
    let a_keeper = WorkLeaseKeeper::new("probe", a.work_leases());
    let b_keeper = WorkLeaseKeeper::new("probe", b.work_leases());
    let mut freed = Box::pin(b_keeper.freed::<ConfigMap>());
    // Warm-up, as above: once the warm-up object comes back, B's watch of releases is up.
    let warm_up = cm("tenant", "job-0");
    assert!(
        a_keeper.hold(&warm_up).await.unwrap().is_some(),
        "a free lease"
    );
    assert!(b_keeper.hold(&warm_up).await.unwrap().is_none());
    a_keeper.release(&warm_up);
    let object = within("the warm-up object", Duration::from_secs(10), freed.next()).await;
    assert_eq!(object.unwrap().name, "job-0");

    let job = cm("tenant", "job-1");
    assert!(a_keeper.hold(&job).await.unwrap().is_some(), "a free lease");
    let before = acquires.load(Ordering::SeqCst);
    // Every event of the object on B: one Acquire (refused), then none while A holds it.
    for _ in 0..20 {
        assert!(b_keeper.hold(&job).await.unwrap().is_none(), "A holds it");
    }
    assert_eq!(acquires.load(Ordering::SeqCst) - before, 1, "B asked once");

    // A gives it back: B learns it by push, asks again and holds it.
    a_keeper.release(&job);
    let object = within(
        "B learning the object is free",
        PROMPT,
        next_after_warm_up(&mut freed),
    )
    .await;
    assert_eq!(object.unwrap().name, "job-1");
    assert!(b_keeper.hold(&job).await.unwrap().is_some(), "freed by A");
    assert_eq!(acquires.load(Ordering::SeqCst) - before, 2);
}
