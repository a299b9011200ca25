//! The runtime's lease integration against an in-process lease service: a daemon leads and gets
//! work leases while the server answers, and when the server goes away its elector reads
//! `Following`, its work lease reports lost and `/ready` (the `lease` check) turns false, all by the
//! client's own deadline; when the server is back, readiness returns.

use std::time::{Duration, Instant};

use lease::{Epoch, LeaseService, LeaseTable, Limits};
use runtime::{LeaseArgs, Readiness};

const TTL: Duration = Duration::from_millis(1000);

/// Serves a fresh lease table (its quiet period already over) on `addr` until `stop` fires.
async fn serve(
    listener: tokio::net::TcpListener,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<()> {
    let started = Instant::now()
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
        let closing = {
            let service = service.clone();
            async move {
                let _ = stop.await;
                service.close();
            }
        };
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming_shutdown(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                closing,
            )
            .await
            .unwrap();
    })
}

async fn poll(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_readiness_follows_the_lease_server() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel();
    let server = serve(listener, stopped).await;

    let args = LeaseArgs {
        lease_endpoint: addr.to_string(),
        identity: Some("replica-1".into()),
        lease_ttl: TTL,
        lease_ca_file: None,
        lease_server_name: None,
        lease_token_file: "/nonexistent".into(),
    };
    let readiness = Readiness::default();
    let (elector, work) = runtime::leases(&args, "probe", &readiness).await.unwrap();
    poll("leadership and readiness", || {
        elector.current().is_leading() && readiness.is_ready()
    })
    .await;
    assert_eq!(readiness.report(), "ok lease\n");
    let token = elector.current().token().unwrap();
    assert!(token > 0, "networked tokens are real fencing tokens");
    let mut job = work
        .try_acquire("probe/ConfigMap/ns/a")
        .await
        .unwrap()
        .expect("a free work lease is granted");
    assert!(job.token() > token);
    assert!(!job.is_lost());
    assert!(
        work.try_acquire("probe/ConfigMap/ns/a")
            .await
            .unwrap()
            .is_none(),
        "another task of the same replica does not get a held work lease"
    );
    // Dropping a work lease releases it: it can be acquired again.
    let other = work
        .try_acquire("probe/ConfigMap/ns/b")
        .await
        .unwrap()
        .unwrap();
    drop(other);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let again = loop {
        if let Some(lease) = work.try_acquire("probe/ConfigMap/ns/b").await.unwrap() {
            break lease;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the dropped lease was not released"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(again.token() > job.token(), "a new grant after the release");

    // The lease server goes away: everything this replica holds is lost by its own deadline.
    stop.send(()).unwrap();
    server.await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), job.lost())
        .await
        .expect("the work lease reports lost");
    poll("following and not ready", || {
        !elector.current().is_leading() && !readiness.is_ready()
    })
    .await;
    assert!(
        readiness
            .report()
            .starts_with("not ready lease: no answer from the lease server"),
        "{}",
        readiness.report()
    );

    // Back on the same address (a restarted server would be in its quiet period; this one is
    // not): readiness and leadership return.
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let (_stop, stopped) = tokio::sync::oneshot::channel();
    let _server = serve(listener, stopped).await;
    poll("leadership and readiness again", || {
        elector.current().is_leading() && readiness.is_ready()
    })
    .await;
}

#[tokio::test]
async fn single_replica_mode_is_ready_at_once() {
    let args = LeaseArgs {
        lease_endpoint: "none".into(),
        identity: None,
        lease_ttl: runtime::LEASE_TTL,
        lease_ca_file: None,
        lease_server_name: None,
        lease_token_file: "/nonexistent".into(),
    };
    let readiness = Readiness::default();
    let (elector, _) = runtime::leases(&args, "probe", &readiness).await.unwrap();
    assert!(elector.current().is_leading());
    assert_eq!(
        readiness.report(),
        "ok lease: single-replica mode (--lease-endpoint=none)\n"
    );
}
