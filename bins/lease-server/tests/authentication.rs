//! Authentication and authorization end to end: the real `lease-server` binary serving TLS,
//! reviewing callers' tokens with TokenReview against the kube emulator, and callers using the
//! real client in `libs/lease` (https, CA file, token file) with ServiceAccount tokens the
//! emulator issued through TokenRequest.
//!
//! | caller | expected |
//! |---|---|
//! | valid token, own prefix | granted |
//! | valid token, another component's prefix | `PERMISSION_DENIED` |
//! | forged token, no token | `UNAUTHENTICATED` |
//! | token for another audience (another service's, the API server's) | `UNAUTHENTICATED` |
//! | token of a deleted ServiceAccount (never used; in use: refused once its review's cache entry ends) | `UNAUTHENTICATED` |
//! | expired token (the emulator's token clock moved past it) | `UNAUTHENTICATED` |
//! | another ServiceAccount with the same prefix and the holder's id | `acquired=false`, Renew/Release `PERMISSION_DENIED` |
//! | TokenReview failing (503 from the API server) | `UNAVAILABLE`, then granted once it works |
//! | plaintext gRPC to the TLS port | no answer; the server warns naming the peer |
//!
//! The server's refusal metrics count each kind, and no token appears in its log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{DaemonSpec, Fault, Harness, LEASE_AUDIENCE, SecureLeaseServer};
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use lease::pb::lease_service_client::LeaseServiceClient;
use lease::{ClientOptions, LeaseClient, Security, WorkLease};
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

/// The server's max TTL (also its quiet period after start) and the clients' TTL.
const TTL: Duration = Duration::from_secs(3);
/// How long the server reuses a review: short, so that revocation shows within the test.
const CACHE_TTL: &str = "1s";
/// What the emulator's own API accepts (the pod's default token).
const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// A token of `namespace/name` for `audience` valid for `seconds`, issued through TokenRequest
/// and written to `<work dir>/tokens/<file>`.
async fn issue(
    h: &Harness,
    namespace: &str,
    name: &str,
    audience: &str,
    seconds: i64,
    file: &str,
) -> PathBuf {
    let accounts: Api<ServiceAccount> = Api::namespaced(h.client(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![audience.to_owned()],
            expiration_seconds: Some(seconds),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let token = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let path = h.work_dir().join("tokens").join(file);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, token).unwrap();
    path
}

fn client(server: &SecureLeaseServer, identity: &str, token: &Path) -> LeaseClient {
    LeaseClient::connect_lazy_with(
        &server.endpoint,
        identity,
        ClientOptions::with_ttl(TTL),
        &Security {
            ca_file: Some(server.tls.ca_file.clone()),
            server_name: None,
            token_file: Some(token.to_path_buf()),
        },
    )
    .unwrap()
}

/// The code a caller with `token` gets for `name` (OK when granted).
async fn attempt(server: &SecureLeaseServer, token: &Path, name: &str) -> Code {
    match client(server, "pod-x", token)
        .work_leases()
        .try_acquire(name)
        .await
    {
        Ok(Some(_)) => Code::Ok,
        Ok(None) => Code::AlreadyExists,
        Err(e) => e.code(),
    }
}

/// Acquires `name` as `identity`, waiting out the server's quiet period after start.
async fn granted(
    server: &SecureLeaseServer,
    identity: &str,
    token: &Path,
    name: &str,
) -> (LeaseClient, WorkLease) {
    let c = client(server, identity, token);
    let leases = c.work_leases();
    let lease = harness::eventually(&format!("{name} granted to {identity}"), || {
        let leases = leases.clone();
        async move {
            match leases.try_acquire(name).await {
                Ok(lease) => lease,
                Err(e) => panic!("{name} for {identity}: {e}"),
            }
        }
    })
    .await;
    (c, lease)
}

/// A raw gRPC client over TLS (for the calls the lease client makes only for its own holdings).
async fn raw(server: &SecureLeaseServer) -> LeaseServiceClient<Channel> {
    let ca = std::fs::read(&server.tls.ca_file).unwrap();
    let channel = Channel::from_shared(server.endpoint.clone())
        .unwrap()
        .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)))
        .unwrap()
        .connect()
        .await
        .unwrap();
    LeaseServiceClient::new(channel)
}

fn with_token<T>(message: T, token: Option<&Path>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        let value = format!("Bearer {}", std::fs::read_to_string(token).unwrap().trim());
        request
            .metadata_mut()
            .insert("authorization", value.parse().unwrap());
    }
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_are_authenticated_by_token_review_and_authorized_by_prefix() {
    let mut h = Harness::start_with(harness::EmulatorMode::InProcess, None)
        .await
        .unwrap();
    let ns = h.temp_namespace("lease-auth").await.unwrap();
    let user = |sa: &str| format!("system:serviceaccount:{ns}:{sa}");
    let spec = DaemonSpec::new(
        "lease-server",
        PathBuf::from(env!("CARGO_BIN_EXE_lease-server")),
    )
    // Its epoch in its own namespace, where its Role allows it; the callers live in `ns`.
    .args(["--namespace", "cozy-backup-controller"])
    .args(["--max-ttl", &format!("{}ms", TTL.as_millis())])
    .args(["--token-cache-ttl", CACHE_TTL])
    .args([
        "--authorize".to_owned(),
        format!("{}=alpha/", user("alpha")),
        "--authorize".to_owned(),
        format!("{}=alpha/", user("alpha-twin")),
        "--authorize".to_owned(),
        format!("{}=beta/", user("beta")),
        "--authorize".to_owned(),
        format!("{}=gamma/", user("gamma")),
        "--authorize".to_owned(),
        format!("{}=gamma/", user("gamma-unused")),
    ]);
    let server = h
        .spawn_secure_lease_server(spec, Duration::from_secs(60))
        .await
        .unwrap();

    let alpha = h
        .service_account_token(&ns, "alpha", LEASE_AUDIENCE)
        .await
        .unwrap();
    let twin = h
        .service_account_token(&ns, "alpha-twin", LEASE_AUDIENCE)
        .await
        .unwrap();
    let beta = h
        .service_account_token(&ns, "beta", LEASE_AUDIENCE)
        .await
        .unwrap();
    let gamma = h
        .service_account_token(&ns, "gamma", LEASE_AUDIENCE)
        .await
        .unwrap();
    let unused = h
        .service_account_token(&ns, "gamma-unused", LEASE_AUDIENCE)
        .await
        .unwrap();
    let other_audience = h
        .service_account_token(&ns, "alpha", "cozy-backups-something-else")
        .await
        .unwrap();
    let api_audience = issue(&h, &ns, "alpha", API_AUDIENCE, 3600, "alpha-api").await;
    let short = issue(&h, &ns, "alpha", LEASE_AUDIENCE, 600, "alpha-short").await;
    let forged = h.work_dir().join("tokens/forged");
    std::fs::write(&forged, "eyJhbGciOiJSUzI1NiJ9.forged.signature").unwrap();
    let tokens: Vec<String> = [
        &alpha,
        &twin,
        &beta,
        &gamma,
        &unused,
        &other_audience,
        &api_audience,
        &short,
        &forged,
    ]
    .iter()
    .map(|p| std::fs::read_to_string(p).unwrap())
    .collect();

    // A valid caller: granted its own prefix (after the quiet period), refused another's.
    let (alpha_client, held) = granted(&server, "pod-1", &alpha, "alpha/Thing/ns/a").await;
    assert!(held.token() > 0);
    let err = alpha_client
        .work_leases()
        .try_acquire("beta/Thing/ns/a")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err}");
    // Another component's prefix, a prefix that only starts like ours, and tokens that are not
    // valid for this server.
    let refusals = [
        (
            "alpha's token, beta's lease",
            &alpha,
            "beta/leader",
            Code::PermissionDenied,
        ),
        (
            "alpha's token, a longer prefix",
            &alpha,
            "alphabet/leader",
            Code::PermissionDenied,
        ),
        ("a forged token", &forged, "alpha/x", Code::Unauthenticated),
        (
            "another audience",
            &other_audience,
            "alpha/x",
            Code::Unauthenticated,
        ),
        (
            "the API server's audience",
            &api_audience,
            "alpha/x",
            Code::Unauthenticated,
        ),
    ];
    for (case, token, name, code) in refusals {
        assert_eq!(attempt(&server, token, name).await, code, "{case}");
    }
    let mut rpc = raw(&server).await;
    let acquire = || lease::pb::AcquireRequest {
        name: "alpha/x".into(),
        holder: "pod-x".into(),
        ttl_ms: TTL.as_millis() as u64,
    };
    let err = rpc.acquire(with_token(acquire(), None)).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated, "no token: {err}");

    // A ServiceAccount deleted before its token was ever used.
    let accounts: Api<ServiceAccount> = Api::namespaced(h.client(), &ns);
    accounts
        .delete("gamma-unused", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(
        attempt(&server, &unused, "gamma/x").await,
        Code::Unauthenticated
    );

    // A ServiceAccount deleted while its token is in use: refused once the cached review ends
    // (--token-cache-ttl), and the lease it held is lost at its next renewal.
    let (_gamma_client, mut gamma_lease) =
        granted(&server, "pod-g", &gamma, "gamma/Thing/ns/a").await;
    accounts
        .delete("gamma", &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), gamma_lease.lost())
        .await
        .expect("the deleted account's lease is lost at a refused renewal");
    assert_eq!(
        attempt(&server, &gamma, "gamma/y").await,
        Code::Unauthenticated
    );

    // An expired token: valid at first, refused once the emulator's clock passed its expiry (the
    // others, issued for an hour, stay valid).
    let (_short_client, short_lease) =
        granted(&server, "pod-s", &short, "alpha/Thing/ns/short").await;
    drop(short_lease);
    h.emulator()
        .unwrap()
        .advance_token_clock(Duration::from_secs(601));
    harness::eventually("the expired token to be refused", || {
        let (server, short) = (&server, &short);
        async move {
            (attempt(server, short, "alpha/Thing/ns/short2").await == Code::Unauthenticated)
                .then_some(())
        }
    })
    .await;
    assert_eq!(attempt(&server, &alpha, "alpha/Thing/ns/b").await, Code::Ok);

    // Another ServiceAccount with the same prefix, naming the holder's id: not its lease.
    let twin_client = client(&server, "pod-1", &twin);
    assert!(
        twin_client
            .work_leases()
            .try_acquire("alpha/Thing/ns/a")
            .await
            .unwrap()
            .is_none(),
        "acquired=false: held by pod-1 of another account"
    );
    let err = rpc
        .renew(with_token(
            lease::pb::RenewRequest {
                name: "alpha/Thing/ns/a".into(),
                holder: "pod-1".into(),
                token: held.token(),
                ttl_ms: TTL.as_millis() as u64,
                proof: Vec::new(),
            },
            Some(&twin),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::PermissionDenied,
        "renew by the twin: {err}"
    );
    let err = rpc
        .release(with_token(
            lease::pb::ReleaseRequest {
                name: "alpha/Thing/ns/a".into(),
                holder: "pod-1".into(),
                token: held.token(),
            },
            Some(&twin),
        ))
        .await
        .unwrap_err();
    assert_eq!(
        err.code(),
        Code::PermissionDenied,
        "release by the twin: {err}"
    );
    let current = rpc
        .get(with_token(
            lease::pb::GetRequest {
                name: "alpha/Thing/ns/a".into(),
            },
            Some(&alpha),
        ))
        .await
        .unwrap()
        .into_inner()
        .lease
        .expect("still held");
    assert_eq!(
        (current.holder.as_str(), current.token),
        ("pod-1", held.token())
    );
    assert!(!held.is_lost());

    // The API server failing TokenReviews: a new token gets UNAVAILABLE from the server (nothing
    // granted, nothing cached), and is granted once reviews work again. A 500 fails the review at
    // once; a 503, which the kube client retries with a growing backoff, fails it after the
    // server's review timeout, before a caller's own deadline.
    let emulator = h.emulator().unwrap();
    let mut beta_rpc = raw(&server).await;
    for code in [500, 503] {
        emulator.clear_faults();
        emulator.inject_fault(Fault {
            verb: Some("create".into()),
            resource: Some("tokenreviews".into()),
            code,
            rate: 1.0,
            count: None,
            after_commit: false,
        });
        let started = std::time::Instant::now();
        let err = beta_rpc
            .acquire(with_token(
                lease::pb::AcquireRequest {
                    name: "beta/Thing/ns/a".into(),
                    holder: "pod-b".into(),
                    ttl_ms: TTL.as_millis() as u64,
                },
                Some(&beta),
            ))
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.code(), Code::Unavailable, "{code}: {err}");
        assert!(
            err.message().contains("cannot authenticate the caller now"),
            "{code}: {err}"
        );
        assert!(
            took < lease_server::auth::REVIEW_TIMEOUT + Duration::from_secs(1),
            "{code}: answered after {took:?}"
        );
    }
    assert_eq!(
        attempt(&server, &beta, "beta/Thing/ns/a").await,
        Code::Unavailable,
        "through the lease client"
    );
    emulator.clear_faults();
    // A review begun during the fault may still be backing off (up to the review timeout); a
    // caller retries, as the lease client does on UNAVAILABLE.
    harness::eventually_within(
        "beta granted once reviews work",
        lease_server::auth::REVIEW_TIMEOUT * 5,
        || {
            let (server, beta) = (&server, &beta);
            async move {
                match attempt(server, beta, "beta/Thing/ns/a").await {
                    Code::Ok => Some(()),
                    Code::Unavailable => None,
                    other => panic!("beta after the fault: {other:?}"),
                }
            }
        },
    )
    .await;

    // Plaintext gRPC to the TLS port: no answer, and the server says why.
    let plain =
        LeaseClient::connect_lazy(&server.addr, "pod-p", ClientOptions::with_ttl(TTL)).unwrap();
    let err = plain
        .work_leases()
        .try_acquire("alpha/x")
        .await
        .unwrap_err();
    assert_ne!(err.code(), Code::Ok);
    harness::until("the server's warning about the plaintext client", || {
        let log = h.daemon("lease-server").unwrap().log();
        async move { log.contains("that is not TLS") && log.contains("plaintext HTTP/2") }
    })
    .await;

    let metrics = h
        .daemon("lease-server")
        .unwrap()
        .admin()
        .await
        .unwrap()
        .metrics();
    // Foreign prefixes refused by the map; the twin's renew and release by the owner check.
    for (reason, at_least) in [
        ("unauthenticated", 7.0),
        ("permission_denied", 3.0),
        ("review_unavailable", 2.0),
    ] {
        let n = metrics.value(
            "cozy_backups_lease_server_auth_refusals_total",
            &[("reason", reason)],
        );
        assert!(
            n >= at_least,
            "{reason}: {n} < {at_least}\n{}",
            metrics.text()
        );
    }
    assert!(
        metrics.value("cozy_backups_lease_server_rejected_stale_tokens_total", &[]) >= 2.0,
        "{}",
        metrics.text()
    );
    for result in ["authenticated", "rejected", "error"] {
        assert!(
            metrics.value(
                "cozy_backups_lease_server_token_reviews_total",
                &[("result", result)]
            ) >= 1.0,
            "{result}\n{}",
            metrics.text()
        );
    }
    let log = h.daemon("lease-server").unwrap().log();
    let secrets: Vec<&str> = tokens.iter().map(|t| t.trim()).collect();
    harness::leak::assert_no_leaks(&[("lease-server log", &log)], &secrets);
    drop(held);
    h.cleanup().await.unwrap();
}
