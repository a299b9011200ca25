//! The secured transport end to end, in process: the server's TLS acceptor (certificate files
//! generated like the harness does) and a guarded service with a fake token reviewer, reached by
//! the real client (`LeaseClient::connect_lazy_with`, https, CA file, token file). A client
//! that does not trust the CA, or expects another server name, gets no answer (UNAVAILABLE); a
//! forged token is refused with UNAUTHENTICATED, a foreign prefix with PERMISSION_DENIED.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use harness::LeaseTls;
use lease::{
    Authenticator, Authorization, CacheSettings, ClientOptions, Epoch, Guard, LeaseClient,
    LeaseService, LeaseTable, Limits, Review, ReviewError, Security, TokenReviewer,
};
use lease_server::tls;
use tonic::Code;

const USER: &str = "system:serviceaccount:ns:c1";

struct Reviewer;

#[tonic::async_trait]
impl TokenReviewer for Reviewer {
    async fn review(&self, token: &str) -> Result<Review, ReviewError> {
        Ok(if token == "good-token" {
            Review::Authenticated {
                username: USER.into(),
                expires_unix_ms: None,
            }
        } else {
            Review::Rejected {
                reason: "invalid bearer token".into(),
            }
        })
    }
}

async fn serve(tls_files: &LeaseTls) -> String {
    // Started one max TTL ago: no quiet period.
    let max_ttl = Duration::from_secs(10);
    let table = LeaseTable::new(
        Epoch {
            number: 1,
            proof_key: vec![3; 32],
        },
        Limits { max_ttl },
        Instant::now() - max_ttl,
    );
    let service = LeaseService::new(table).with_guard(Guard {
        authenticator: Authenticator::new(Arc::new(Reviewer), CacheSettings::default()),
        authorization: Authorization::from_rules(&[format!("{USER}=x/")]).unwrap(),
    });
    let provider = tls::provider();
    let cert = Arc::new(
        tls::ReloadingCert::new(
            tls::CertFiles {
                cert: tls_files.cert_file.clone(),
                key: tls_files.key_file.clone(),
            },
            provider.clone(),
        )
        .unwrap(),
    );
    let config = tls::server_config(cert, provider).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(tls::incoming(listener, config))
            .await
            .unwrap();
    });
    format!("https://{addr}")
}

fn client(endpoint: &str, ca: &Path, token: &Path, server_name: Option<&str>) -> LeaseClient {
    LeaseClient::connect_lazy_with(
        endpoint,
        "pod-1",
        ClientOptions::with_ttl(Duration::from_secs(4)),
        &Security {
            ca_file: Some(ca.to_path_buf()),
            server_name: server_name.map(str::to_owned),
            token_file: Some(token.to_path_buf()),
        },
    )
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_client_reaches_a_tls_server_only_with_the_right_ca_and_token() {
    let dir = std::env::temp_dir().join(format!("lease-server-tls-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let tls_files = LeaseTls::generate(&dir.join("server")).unwrap();
    let stranger = LeaseTls::generate(&dir.join("stranger")).unwrap();
    let good = dir.join("good");
    std::fs::write(&good, "good-token\n").unwrap();
    let forged = dir.join("forged");
    std::fs::write(&forged, "forged-token").unwrap();
    let endpoint = serve(&tls_files).await;

    let ok = client(&endpoint, &tls_files.ca_file, &good, None);
    let leases = ok.work_leases();
    let lease = leases.try_acquire("x/Thing/ns/a").await.unwrap().unwrap();
    assert!(lease.token() > 0);
    let err = leases.try_acquire("y/Thing/ns/a").await.unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err}");

    let err = client(&endpoint, &tls_files.ca_file, &forged, None)
        .work_leases()
        .try_acquire("x/Thing/ns/b")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "{err}");
    assert!(!err.to_string().contains("forged-token"), "{err}");

    // The server's certificate is not trusted, or not for the expected name: no answer at all.
    for (ca, name) in [
        (&stranger.ca_file, None),
        (&tls_files.ca_file, Some("other.example")),
    ] {
        let err = client(&endpoint, ca, &good, name)
            .work_leases()
            .try_acquire("x/Thing/ns/c")
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::Unavailable, "{err}");
    }
    // The in-cluster name is in the certificate too.
    client(
        &endpoint,
        &tls_files.ca_file,
        &good,
        Some("lease-server.cozy-backup-controller.svc"),
    )
    .work_leases()
    .try_acquire("x/Thing/ns/d")
    .await
    .unwrap()
    .unwrap();
    drop(lease);
    let _ = std::fs::remove_dir_all(&dir);
}
