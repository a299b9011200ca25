//! The lease server's authentication on kube-apiserver (the real-API backend, docs/real-api.md),
//! whatever `COZY_E2E_API` says; skipped with a note when the control plane is not built and
//! `COZY_E2E_API` is not `real`. The ServiceAccount tokens are kube-apiserver's signed JWTs and
//! every review is kube-apiserver's TokenReview, made under the lease server's own RBAC.

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{DaemonSpec, Harness, LEASE_AUDIENCE, SecureLeaseServer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use lease::{ClientOptions, LeaseClient, Security};
use tonic::Code;

const TTL: Duration = Duration::from_secs(3);

fn client(server: &SecureLeaseServer, token: &Path) -> LeaseClient {
    LeaseClient::connect_lazy_with(
        &server.endpoint,
        "pod-1",
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
    match client(server, token).work_leases().try_acquire(name).await {
        Ok(Some(_)) => Code::Ok,
        Ok(None) => Code::AlreadyExists,
        Err(e) => e.code(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_are_authenticated_by_kube_apiserver_token_reviews() {
    let Some(mut h) = Harness::start_real_or_skip("lease-server").await else {
        return;
    };
    let ns = h.temp_namespace("lease-real").await.unwrap();
    let user = |sa: &str| format!("system:serviceaccount:{ns}:{sa}");
    let spec = DaemonSpec::new(
        "lease-server",
        PathBuf::from(env!("CARGO_BIN_EXE_lease-server")),
    )
    .args(["--namespace", "cozy-backup-controller"])
    .args(["--max-ttl", &format!("{}ms", TTL.as_millis())])
    .args([
        "--authorize".to_owned(),
        format!("{}=alpha/", user("alpha")),
        "--authorize".to_owned(),
        format!("{}=beta/", user("beta")),
    ]);
    let server = h
        .spawn_secure_lease_server(spec, Duration::from_secs(60))
        .await
        .unwrap();
    let alpha = h
        .service_account_token(&ns, "alpha", LEASE_AUDIENCE)
        .await
        .unwrap();
    let other_audience = h
        .service_account_token(&ns, "alpha", "cozy-backups-something-else")
        .await
        .unwrap();
    let forged = h.work_dir().join("forged-token");
    // A JWT's shape, signed by nobody.
    std::fs::write(&forged, "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl").unwrap();
    let jwt = std::fs::read_to_string(&alpha).unwrap();
    assert_eq!(
        jwt.trim().split('.').count(),
        3,
        "kube-apiserver issues JWTs"
    );

    // Granted its prefix once the server's quiet period is over.
    harness::eventually("alpha/Thing/ns/a granted", || {
        let (server, alpha) = (&server, &alpha);
        async move { (attempt(server, alpha, "alpha/Thing/ns/a").await == Code::Ok).then_some(()) }
    })
    .await;
    assert_eq!(
        attempt(&server, &alpha, "beta/leader").await,
        Code::PermissionDenied
    );
    assert_eq!(
        attempt(&server, &other_audience, "alpha/x").await,
        Code::Unauthenticated
    );
    assert_eq!(
        attempt(&server, &forged, "alpha/x").await,
        Code::Unauthenticated
    );
    // Every review went to kube-apiserver, as the lease server's ServiceAccount, and was allowed.
    let reviews: Vec<_> = h
        .audit()
        .requests
        .into_iter()
        .filter(|r| r.resource == "tokenreviews" && r.verb == "create")
        .collect();
    assert!(!reviews.is_empty(), "no TokenReview reached the API server");
    assert!(
        reviews.iter().all(|r| r.user
            == "system:serviceaccount:cozy-backup-controller:lease-server"
            && r.succeeded()),
        "{reviews:?}"
    );

    // A restart reads the epoch ConfigMap and writes it back advanced (its `update`, by name):
    // the epoch every token of the new run carries. Callers are granted again after the quiet
    // period.
    let epoch_before = epoch(&h).await;
    h.restart("lease-server", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        epoch(&h).await,
        epoch_before + 1,
        "the restart advanced the epoch"
    );
    harness::eventually("alpha/Thing/ns/b granted after the restart", || {
        let (server, alpha) = (&server, &alpha);
        async move { (attempt(server, alpha, "alpha/Thing/ns/b").await == Code::Ok).then_some(()) }
    })
    .await;
    h.cleanup().await.unwrap();
}

/// The epoch the lease server keeps in its ConfigMap, read as the harness's admin.
async fn epoch(h: &Harness) -> u64 {
    let cms: Api<ConfigMap> = Api::namespaced(h.client(), "cozy-backup-controller");
    let cm = cms.get("lease-server-epoch").await.unwrap();
    cm.data.unwrap()["epoch"].parse().unwrap()
}
