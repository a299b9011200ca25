//! A guarded service over a real loopback connection (plaintext: authentication is per request,
//! whatever the transport): every RPC refuses a missing or forged bearer token with
//! `UNAUTHENTICATED`, a name outside the caller's prefixes with `PERMISSION_DENIED` and a token
//! that cannot be reviewed with `UNAVAILABLE`; a lease granted to one identity cannot be renewed,
//! released or re-acquired by another identity that names the same holder.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lease::pb::lease_service_client::LeaseServiceClient;
use lease::pb::{self};
use lease::{
    Authenticator, Authorization, CacheSettings, Epoch, Guard, LeaseService, LeaseTable, Limits,
    Now, Review, ReviewError, TokenReviewer,
};
use tonic::Code;

const TTL_MS: u64 = 10_000;
const RUNNER: &str = "system:serviceaccount:ns:backup-runner";
const OTHER_RUNNER: &str = "system:serviceaccount:ns:backup-runner-debug";
const CLEANER: &str = "system:serviceaccount:ns:retention-cleaner";

/// Tokens `t-<user>` are valid for `<user>`; everything else is forged; `down` fails every review.
#[derive(Default)]
struct Reviewer {
    users: HashMap<String, String>,
    down: AtomicBool,
}

#[tonic::async_trait]
impl TokenReviewer for Reviewer {
    async fn review(&self, token: &str) -> Result<Review, ReviewError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(ReviewError("the API server is unreachable".into()));
        }
        Ok(match self.users.get(token) {
            Some(user) => Review::Authenticated {
                username: user.clone(),
                expires_unix_ms: None,
            },
            None => Review::Rejected {
                reason: "invalid bearer token".into(),
            },
        })
    }
}

struct Fixture {
    rpc: LeaseServiceClient<tonic::transport::Channel>,
    reviewer: Arc<Reviewer>,
}

async fn start() -> Fixture {
    let start = Now {
        mono: Instant::now(),
        unix_ms: 1_700_000_000_000,
    };
    let max_ttl = Duration::from_millis(TTL_MS);
    let clock = Arc::new(Mutex::new(start.after(max_ttl)));
    let table = LeaseTable::new(
        Epoch {
            number: 2,
            proof_key: vec![7; 32],
        },
        Limits { max_ttl },
        start.mono,
    );
    let mut users = HashMap::new();
    for user in [RUNNER, OTHER_RUNNER, CLEANER] {
        users.insert(format!("t-{user}"), user.to_owned());
    }
    let reviewer = Arc::new(Reviewer {
        users,
        down: AtomicBool::new(false),
    });
    let read = clock.clone();
    let clock: lease::service::Clock = Arc::new(move || *read.lock().unwrap());
    // Rejections are not cached here, so a review failure shows at once.
    let settings = CacheSettings {
        rejected_ttl: Duration::ZERO,
        ..CacheSettings::default()
    };
    let authenticator = Authenticator::with_clock(reviewer.clone(), settings, clock.clone());
    let authorization = Authorization::from_rules(&[
        format!("{RUNNER}=backup-runner/"),
        format!("{OTHER_RUNNER}=backup-runner/"),
        format!("{CLEANER}=retention-cleaner/"),
    ])
    .unwrap();
    let service = LeaseService::with_clock(table, clock).with_guard(Guard {
        authenticator,
        authorization,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service.into_server())
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener))
            .await
            .unwrap();
    });
    let rpc = LeaseServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    Fixture { rpc, reviewer }
}

fn as_user<T>(token: Option<&str>, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    request
}

fn acquire(name: &str, holder: &str) -> pb::AcquireRequest {
    pb::AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms: TTL_MS,
    }
}

impl Fixture {
    /// The status code of every RPC kind for a request carrying `token`, about `name`.
    async fn codes(&mut self, token: Option<&str>, name: &str) -> Vec<(&'static str, Code)> {
        let code = |r: Result<(), tonic::Status>| r.err().map_or(Code::Ok, |s| s.code());
        let mut out = Vec::new();
        let r = self.rpc.acquire(as_user(token, acquire(name, "h"))).await;
        out.push(("Acquire", code(r.map(|_| ()))));
        let renew = pb::RenewRequest {
            name: name.into(),
            holder: "h".into(),
            token: 1,
            ttl_ms: TTL_MS,
            proof: Vec::new(),
        };
        let r = self.rpc.renew(as_user(token, renew)).await;
        out.push(("Renew", code(r.map(|_| ()))));
        let release = pb::ReleaseRequest {
            name: name.into(),
            holder: "h".into(),
            token: 1,
        };
        let r = self.rpc.release(as_user(token, release)).await;
        out.push(("Release", code(r.map(|_| ()))));
        let get = pb::GetRequest { name: name.into() };
        let r = self.rpc.get(as_user(token, get)).await;
        out.push(("Get", code(r.map(|_| ()))));
        let list = pb::ListRequest {
            prefix: name.into(),
        };
        let r = self.rpc.list(as_user(token, list)).await;
        out.push(("List", code(r.map(|_| ()))));
        let watch = pb::WatchRequest {
            prefix: name.into(),
        };
        let r = self.rpc.watch(as_user(token, watch)).await;
        out.push(("Watch", code(r.map(|_| ()))));
        out
    }
}

fn all(code: Code) -> Vec<(&'static str, Code)> {
    ["Acquire", "Renew", "Release", "Get", "List", "Watch"]
        .into_iter()
        .map(|m| (m, code))
        .collect()
}

#[tokio::test]
async fn every_rpc_refuses_anonymous_forged_and_foreign_callers() {
    let mut f = start().await;
    let runner = format!("t-{RUNNER}");
    let cleaner = format!("t-{CLEANER}");

    assert_eq!(
        f.codes(None, "backup-runner/leader").await,
        all(Code::Unauthenticated)
    );
    assert_eq!(
        f.codes(Some("forged"), "backup-runner/leader").await,
        all(Code::Unauthenticated)
    );
    // A genuine token, a foreign prefix (and a name that only shares the component's spelling).
    assert_eq!(
        f.codes(Some(&cleaner), "backup-runner/leader").await,
        all(Code::PermissionDenied)
    );
    assert_eq!(
        f.codes(Some(&runner), "backup-runner-x/leader").await,
        all(Code::PermissionDenied)
    );
    // Its own prefix: the acquisition is granted; renewing and releasing token 1 of holder "h"
    // is refused by the table (stale token), Get finds the grant.
    assert_eq!(
        f.codes(Some(&runner), "backup-runner/leader").await,
        vec![
            ("Acquire", Code::Ok),
            ("Renew", Code::FailedPrecondition),
            ("Release", Code::FailedPrecondition),
            ("Get", Code::Ok),
            ("List", Code::Ok),
            ("Watch", Code::Ok),
        ]
    );
    // Listing everything is refused too.
    assert_eq!(
        f.rpc
            .list(as_user(
                Some(&runner),
                pb::ListRequest { prefix: "".into() }
            ))
            .await
            .unwrap_err()
            .code(),
        Code::PermissionDenied
    );

    // The API server is down: a token not in the cache cannot be reviewed, never a grant.
    f.reviewer.down.store(true, Ordering::SeqCst);
    let other = format!("t-{OTHER_RUNNER}");
    let err = f
        .rpc
        .acquire(as_user(Some(&other), acquire("backup-runner/job", "h")))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unavailable, "{err:?}");
    // A token reviewed before is still served from the cache.
    let answer = f
        .rpc
        .get(as_user(
            Some(&runner),
            pb::GetRequest {
                name: "backup-runner/leader".into(),
            },
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(answer.lease.unwrap().holder, "h");
}

#[tokio::test]
async fn a_lease_stays_bound_to_the_identity_it_was_granted_to() {
    let mut f = start().await;
    let runner = format!("t-{RUNNER}");
    let other = format!("t-{OTHER_RUNNER}");
    let granted = f
        .rpc
        .acquire(as_user(
            Some(&runner),
            acquire("backup-runner/leader", "pod-1"),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(granted.acquired);
    let token = granted.lease.unwrap().token;

    // Another identity of the same prefix naming the same holder: not a grant.
    let answer = f
        .rpc
        .acquire(as_user(
            Some(&other),
            acquire("backup-runner/leader", "pod-1"),
        ))
        .await
        .unwrap()
        .into_inner();
    assert!(!answer.acquired);
    assert!(answer.proof.is_empty());
    // It knows the token (Get shows it) but may neither renew nor release.
    let renew = pb::RenewRequest {
        name: "backup-runner/leader".into(),
        holder: "pod-1".into(),
        token,
        ttl_ms: TTL_MS,
        proof: granted.proof.clone(),
    };
    let err = f
        .rpc
        .renew(as_user(Some(&other), renew.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let release = pb::ReleaseRequest {
        name: "backup-runner/leader".into(),
        holder: "pod-1".into(),
        token,
    };
    let err = f
        .rpc
        .release(as_user(Some(&other), release.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    // The owner renews and releases as usual.
    f.rpc.renew(as_user(Some(&runner), renew)).await.unwrap();
    f.rpc
        .release(as_user(Some(&runner), release))
        .await
        .unwrap();
}
