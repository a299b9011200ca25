//! The gRPC glue over a real loopback connection: every refusal maps to its precise status code,
//! and Watch delivers the snapshot, SYNCED, then acquisitions, releases and expiries under its
//! prefix only. The service runs on a stepped clock, so expiry is driven by the test, not by time.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lease::pb::lease_service_client::LeaseServiceClient;
use lease::pb::{self, watch_event::Type};
use lease::{Epoch, LeaseService, LeaseTable, Limits, Now};
use tonic::Code;

const TTL_MS: u64 = 10_000;

struct Fixture {
    rpc: LeaseServiceClient<tonic::transport::Channel>,
    endpoint: String,
    clock: Arc<Mutex<Now>>,
    service: LeaseService,
}

impl Fixture {
    async fn start() -> Self {
        let start = Now {
            mono: Instant::now(),
            unix_ms: 1_700_000_000_000,
        };
        let max_ttl = Duration::from_millis(TTL_MS);
        // The table started one max TTL before the clock's first reading: no quiet period left.
        let clock = Arc::new(Mutex::new(start.after(max_ttl)));
        let table = LeaseTable::new(
            Epoch {
                number: 5,
                proof_key: vec![1; 32],
            },
            Limits { max_ttl },
            start.mono,
        );
        let read = clock.clone();
        let service = LeaseService::with_clock(table, Arc::new(move || *read.lock().unwrap()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = service.clone().into_server();
        tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(server)
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
                .await
                .unwrap();
        });
        let endpoint = format!("http://{addr}");
        let rpc = LeaseServiceClient::connect(endpoint.clone()).await.unwrap();
        Self {
            rpc,
            endpoint,
            clock,
            service,
        }
    }

    fn step(&self, d: Duration) {
        let mut now = self.clock.lock().unwrap();
        *now = now.after(d);
    }

    async fn acquire(&mut self, name: &str, holder: &str) -> pb::AcquireResponse {
        self.rpc
            .acquire(pb::AcquireRequest {
                name: name.into(),
                holder: holder.into(),
                ttl_ms: TTL_MS,
            })
            .await
            .unwrap()
            .into_inner()
    }
}

#[tokio::test]
async fn refusals_map_to_precise_status_codes() {
    let mut f = Fixture::start().await;
    let granted = f.acquire("x/leader", "a").await;
    assert!(granted.acquired);
    let lease = granted.lease.unwrap();
    assert_eq!(lease.token, (5 << 40) | 1);
    assert_eq!(
        (lease.holder.as_str(), lease.ttl_ms, lease.remaining_ms),
        ("a", TTL_MS, TTL_MS)
    );

    let refused = f.acquire("x/leader", "b").await;
    assert!(!refused.acquired);
    assert_eq!(refused.lease.unwrap().holder, "a");
    assert_eq!(refused.retry_after_ms, TTL_MS);

    let renew = |holder: &str, token: u64, ttl_ms: u64| pb::RenewRequest {
        name: "x/leader".into(),
        holder: holder.into(),
        token,
        ttl_ms,
        proof: Vec::new(),
    };
    let code = |r: Result<tonic::Response<pb::RenewResponse>, tonic::Status>| r.unwrap_err().code();
    assert_eq!(
        code(f.rpc.renew(renew("a", lease.token, 0)).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(f.rpc.renew(renew("a", lease.token, TTL_MS + 1)).await),
        Code::InvalidArgument
    );
    assert_eq!(
        code(f.rpc.renew(renew("b", lease.token, TTL_MS)).await),
        Code::FailedPrecondition
    );
    assert_eq!(
        code(f.rpc.renew(renew("a", lease.token + 1, TTL_MS)).await),
        Code::FailedPrecondition
    );
    let renewed = f
        .rpc
        .renew(renew("a", lease.token, TTL_MS))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(renewed.lease.unwrap().token, lease.token);
    assert!(!renewed.proof.is_empty());

    let release = |holder: &str, token: u64| pb::ReleaseRequest {
        name: "x/leader".into(),
        holder: holder.into(),
        token,
    };
    assert_eq!(
        f.rpc
            .release(release("b", lease.token))
            .await
            .unwrap_err()
            .code(),
        Code::FailedPrecondition
    );
    f.rpc.release(release("a", lease.token)).await.unwrap();
    assert_eq!(
        f.rpc
            .release(release("a", lease.token))
            .await
            .unwrap_err()
            .code(),
        Code::NotFound
    );
    assert_eq!(
        code(f.rpc.renew(renew("a", lease.token, TTL_MS)).await),
        Code::NotFound
    );
    let get = f
        .rpc
        .get(pb::GetRequest {
            name: "x/leader".into(),
        })
        .await;
    assert_eq!(get.unwrap_err().code(), Code::NotFound);
    let empty = f
        .rpc
        .get(pb::GetRequest {
            name: String::new(),
        })
        .await;
    assert_eq!(empty.unwrap_err().code(), Code::InvalidArgument);
}

#[tokio::test]
async fn watch_streams_snapshot_then_changes_under_its_prefix() {
    let mut f = Fixture::start().await;
    let held = f.acquire("w/Job/ns/a", "h1").await.lease.unwrap();
    f.acquire("other/leader", "h1").await;
    let mut stream = f
        .rpc
        .watch(pb::WatchRequest {
            prefix: "w/".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let mut next = async || {
        let e = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("an event")
            .expect("the stream is open")
            .expect("no error");
        (
            Type::try_from(e.r#type).unwrap(),
            e.lease.map(|l| (l.name, l.holder, l.token)),
        )
    };
    assert_eq!(
        next().await,
        (
            Type::Snapshot,
            Some(("w/Job/ns/a".into(), "h1".into(), held.token))
        )
    );
    assert_eq!(next().await, (Type::Synced, None));

    // Outside the prefix: not streamed. Inside: acquired, released, expired.
    f.acquire("other/Job/ns/x", "h2").await;
    let b = f.acquire("w/Job/ns/b", "h2").await.lease.unwrap();
    assert_eq!(
        next().await,
        (
            Type::Acquired,
            Some(("w/Job/ns/b".into(), "h2".into(), b.token))
        )
    );
    f.rpc
        .release(pb::ReleaseRequest {
            name: "w/Job/ns/b".into(),
            holder: "h2".into(),
            token: b.token,
        })
        .await
        .unwrap();
    assert_eq!(
        next().await,
        (
            Type::Released,
            Some(("w/Job/ns/b".into(), "h2".into(), b.token))
        )
    );
    f.step(Duration::from_millis(TTL_MS));
    let list = f
        .rpc
        .list(pb::ListRequest {
            prefix: "w/".into(),
        })
        .await
        .unwrap();
    assert!(
        list.into_inner().leases.is_empty(),
        "the list expires what is due"
    );
    assert_eq!(
        next().await,
        (
            Type::Expired,
            Some(("w/Job/ns/a".into(), "h1".into(), held.token))
        )
    );

    // Closing the service ends the stream with UNAVAILABLE.
    f.service.close();
    let end = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("the stream ends")
        .expect("with an item");
    assert_eq!(end.unwrap_err().code(), Code::Unavailable);
}

#[tokio::test]
async fn the_client_keeps_the_grpc_code_of_a_refusal() {
    let f = Fixture::start().await;
    // A TTL above the server's maximum is refused with INVALID_ARGUMENT; the client's error says
    // so in its type, not only in text.
    let client = lease::LeaseClient::connect_lazy(
        &f.endpoint,
        "too-greedy",
        lease::ClientOptions::with_ttl(Duration::from_millis(TTL_MS * 2)),
    )
    .unwrap();
    let err = client
        .work_leases()
        .try_acquire("x/BackupJob/ns/a")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(matches!(err, lease::LeaseError::Refused { .. }), "{err}");
    // No server at all: no answer, retryable.
    let dead = lease::LeaseClient::connect_lazy(
        "http://127.0.0.1:1",
        "nobody",
        lease::ClientOptions::with_ttl(Duration::from_millis(TTL_MS)),
    )
    .unwrap();
    let err = dead.work_leases().try_acquire("x/y").await.unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err}");
}
