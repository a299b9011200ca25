//! The networked client: a [`LeaseClient`] on one gRPC channel, the background tasks behind a
//! networked [`LeaderElector`] and [`WorkLease`], and the reachability signal behind a daemon's
//! `lease` readiness check.
//!
//! ```text
//!  elector task ─ follower: Acquire ──granted──► Leading{token} ─ hold: Renew every ttl/3 ──┐
//!      ▲              │ held by other / quiet period / error                                 │
//!      │              ▼                                                                      │
//!      │         wait for Watch(name) RELEASED/EXPIRED, or the retry hint, or ttl            │
//!      └──── Following ◄── lost: deadline passed, NOT_FOUND, FAILED_PRECONDITION ◄───────────┘
//!
//!  work lease task ─ hold: Renew every ttl/3 ─ lost ─► WorkLease::lost() completes
//!                                            └ WorkLease dropped ─► Release
//!
//!  release_all (graceful shutdown) ─► every holding: Release, then Following / lost;
//!                                     no new Acquire; returns once every Release was answered
//!  frees(prefix) ─ Watch(prefix) ─► a name RELEASED/EXPIRED, or Resynced after (re)connecting
//! ```
//!
//! Transport: `http://host:port` (or a bare `host:port`) is plaintext without credentials, for a
//! server in insecure mode; `https://host:port` verifies the server's certificate against a CA file
//! ([`Security::ca_file`]) and sends the bearer token read from [`Security::token_file`] with every
//! call (re-read when the file changes, as kubelet rotates projected tokens). A token is never sent
//! over plaintext.
//!
//! Invariant (the client's half of the safety argument, see docs/lease.md): a holder stops acting
//! at `sent + ttl - margin` on its own monotonic clock, where `sent` is when it *sent* its last
//! successful Acquire or Renew. The server received that request later and expires the lease at
//! `received + ttl`, so the holder always stops first, whatever the server answers later and
//! whether or not the server can be reached at all.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tonic::Code;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

use crate::client::{Attempt, LeaderElector, Leadership, LeaseError, WorkLease, WorkLeases};
use crate::pb;
use crate::pb::lease_service_client::LeaseServiceClient;

/// Timing of a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientOptions {
    /// The TTL asked for every lease (at most the server's `--max-ttl`).
    pub ttl: Duration,
    /// How long before its TTL runs out (counted from the send time of the last successful
    /// Acquire/Renew) a holder considers the lease lost.
    pub margin: Duration,
    /// Time allowed for one unary call.
    pub rpc_timeout: Duration,
}

impl ClientOptions {
    /// Options for `ttl`: margin a fifth of it, renewals every third, calls time out after a
    /// quarter.
    pub fn with_ttl(ttl: Duration) -> Self {
        Self {
            ttl,
            margin: ttl / 5,
            rpc_timeout: ttl / 4,
        }
    }

    fn renew_every(&self) -> Duration {
        self.ttl / 3
    }

    fn retry_every(&self) -> Duration {
        (self.ttl / 10).max(Duration::from_millis(20))
    }

    /// How long after sending its last successful call a holder may still act.
    pub fn deadline_span(&self) -> Duration {
        self.ttl.saturating_sub(self.margin)
    }
}

impl Default for ClientOptions {
    /// A 15 s TTL.
    fn default() -> Self {
        Self::with_ttl(Duration::from_secs(15))
    }
}

/// Whether this client can talk to the lease server (behind the daemon's `lease` readiness check).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reachability {
    /// No call has been answered yet.
    Pending,
    /// The server answered within the last deadline span.
    Reachable,
    /// No answer for longer than the deadline span: every lease of this client is lost.
    Unreachable(String),
}

/// How a client authenticates the server and itself (used with `https://` endpoints).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Security {
    /// PEM file of the CA(s) that verify the server's certificate; required for `https://`.
    pub ca_file: Option<PathBuf>,
    /// The name the server's certificate must carry; defaults to the endpoint's host.
    pub server_name: Option<String>,
    /// The file holding this client's bearer token (a projected ServiceAccount token); required
    /// for `https://`. Re-read whenever it changes.
    pub token_file: Option<PathBuf>,
}

/// The bearer token of a token file, re-read when the file changes. At most once a second a call
/// looks at the file's metadata; it reads it again when the inode, size or modification time
/// differ. A file that cannot be read keeps the last good token (the server refuses it once it
/// expires).
#[derive(Clone)]
pub struct TokenSource {
    path: Arc<PathBuf>,
    state: Arc<Mutex<TokenState>>,
    check_every: Duration,
}

struct TokenState {
    header: MetadataValue<Ascii>,
    stamp: FileStamp,
    checked: std::time::Instant,
    warned: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct FileStamp {
    ino: u64,
    len: u64,
    modified: Option<std::time::SystemTime>,
}

impl std::fmt::Debug for TokenSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("TokenSource")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

const TOKEN_CHECK_EVERY: Duration = Duration::from_secs(1);

impl TokenSource {
    /// Reads the token in `path` (an error names the file, never its content).
    pub fn new(path: impl Into<PathBuf>) -> Result<Self, LeaseError> {
        let path = path.into();
        let (header, stamp) = read_token(&path).map_err(LeaseError::Config)?;
        Ok(Self {
            path: Arc::new(path),
            state: Arc::new(Mutex::new(TokenState {
                header,
                stamp,
                checked: std::time::Instant::now(),
                warned: false,
            })),
            check_every: TOKEN_CHECK_EVERY,
        })
    }

    /// Looks at the file at most once per `every` (default one second).
    pub fn check_every(mut self, every: Duration) -> Self {
        self.check_every = every;
        self
    }

    /// The `authorization` metadata value (`Bearer <token>`), refreshed if the file changed.
    pub fn header(&self) -> MetadataValue<Ascii> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.checked.elapsed() >= self.check_every {
            state.checked = std::time::Instant::now();
            let changed = stamp(&self.path).map(|s| s != state.stamp);
            match changed {
                Ok(false) => {}
                Ok(true) | Err(_) => match read_token(&self.path) {
                    Ok((header, stamp)) => {
                        if state.warned {
                            tracing::info!(file = %self.path.display(), "the token file is readable again");
                        }
                        tracing::debug!(file = %self.path.display(), "read the changed token file");
                        state.header = header;
                        state.stamp = stamp;
                        state.warned = false;
                    }
                    Err(e) => {
                        if !state.warned {
                            tracing::warn!(error = %e, "keeping the last token read");
                            state.warned = true;
                        }
                    }
                },
            }
        }
        state.header.clone()
    }
}

fn stamp(path: &Path) -> std::io::Result<FileStamp> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(path)?;
    Ok(FileStamp {
        ino: meta.ino(),
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

fn read_token(path: &Path) -> Result<(MetadataValue<Ascii>, FileStamp), String> {
    let shown = path.display();
    let stamp = stamp(path).map_err(|e| format!("token file {shown}: {e}"))?;
    let raw = std::fs::read_to_string(path).map_err(|e| format!("token file {shown}: {e}"))?;
    let token = raw.trim();
    if token.is_empty() {
        return Err(format!("token file {shown} is empty"));
    }
    let mut header: MetadataValue<Ascii> = format!("Bearer {token}")
        .parse()
        .map_err(|_| format!("token file {shown}: not a printable ASCII token"))?;
    header.set_sensitive(true);
    Ok((header, stamp))
}

/// Adds the bearer token to every call (nothing without a token source).
#[derive(Clone, Debug, Default)]
pub struct Credentials(Option<TokenSource>);

impl Interceptor for Credentials {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(source) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", source.header());
        }
        Ok(request)
    }
}

type Rpc = LeaseServiceClient<InterceptedService<Channel, Credentials>>;

/// A connection to the lease server for one replica identity. Cheap to clone.
#[derive(Clone, Debug)]
pub struct LeaseClient {
    rpc: Rpc,
    identity: Arc<str>,
    options: ClientOptions,
    /// Work leases this client holds. The server answers a second Acquire by the same identity
    /// with the same grant, so without this two tasks of one replica could both believe they hold
    /// a work lease.
    held: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Set by [`LeaseClient::release_all`]: every holding is released and nothing new is acquired.
    stopping: Arc<watch::Sender<bool>>,
    /// Holdings in progress (an Acquire in flight, or a lease kept renewed), so that
    /// [`LeaseClient::release_all`] knows when every Release was sent.
    holdings: Arc<watch::Sender<usize>>,
}

/// A change of a lease under a watched prefix (see [`LeaseClient::frees`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Freed {
    /// This lease was released or expired.
    Name(String),
    /// The watch (re)connected: any lease under the prefix may have been freed meanwhile.
    Resynced,
    /// This lease was granted to `holder` (a replica learns what the others took without asking),
    /// for `remaining` from when the server reported it.
    Held {
        /// The lease name.
        name: String,
        /// Its holder's identity.
        holder: String,
        /// The time left on the grant.
        remaining: Duration,
    },
}

/// Counts one holding in [`LeaseClient::holdings`] while it lives.
struct HoldingSlot(Arc<watch::Sender<usize>>);

impl Drop for HoldingSlot {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// A definitive answer versus a failure to get one.
enum CallError {
    /// The server answered that the lease is gone (NOT_FOUND, FAILED_PRECONDITION) or refused the
    /// request outright (INVALID_ARGUMENT, PERMISSION_DENIED, UNAUTHENTICATED): retrying the same
    /// request cannot help.
    Refused(tonic::Status),
    /// No answer (connection refused, timeout, UNAVAILABLE, …): retry until the deadline.
    Transient(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Refused(s) => write!(f, "{:?}: {}", s.code(), s.message()),
            CallError::Transient(s) => f.write_str(s),
        }
    }
}

fn classify(status: tonic::Status) -> CallError {
    match status.code() {
        Code::NotFound
        | Code::FailedPrecondition
        | Code::InvalidArgument
        | Code::PermissionDenied
        | Code::Unauthenticated => CallError::Refused(status),
        _ => CallError::Transient(format!("{:?}: {}", status.code(), status.message())),
    }
}

/// A lease this client holds, kept renewed by [`LeaseClient::hold`].
struct Holding {
    name: String,
    token: u64,
    proof: Vec<u8>,
    /// When the holder must stop acting.
    deadline: Instant,
    /// Send time of the last successful call.
    last_sent: Instant,
}

/// How holding a lease ended.
enum HoldEnd {
    Lost(String),
    Stopped,
}

enum AcquireOutcome {
    Granted(Holding),
    NotGranted { retry_after: Duration },
}

impl LeaseClient {
    /// A plaintext client for `endpoint` (`host:port` or `http://host:port`) of a server in
    /// insecure mode; see [`LeaseClient::connect_lazy_with`].
    pub fn connect_lazy(
        endpoint: &str,
        identity: impl Into<String>,
        options: ClientOptions,
    ) -> Result<Self, LeaseError> {
        Self::connect_lazy_with(endpoint, identity, options, &Security::default())
    }

    /// A client for `endpoint` that connects on first use and reconnects by itself, so a daemon
    /// starts even while the lease server is down. `https://host:port` verifies the server
    /// against `security.ca_file` and authenticates with the token in `security.token_file`
    /// (both required); `http://host:port` or `host:port` is plaintext and sends no token.
    pub fn connect_lazy_with(
        endpoint: &str,
        identity: impl Into<String>,
        options: ClientOptions,
        security: &Security,
    ) -> Result<Self, LeaseError> {
        let config = |m: String| LeaseError::Config(m);
        let url = if endpoint.contains("://") {
            endpoint.to_owned()
        } else {
            format!("http://{endpoint}")
        };
        let mut channel = Endpoint::from_shared(url.clone())
            .map_err(|e| config(format!("invalid endpoint {endpoint}: {e}")))?;
        let credentials = match channel.uri().scheme_str() {
            Some("http") => Credentials(None),
            Some("https") => {
                let ca_file = security.ca_file.as_ref().ok_or_else(|| {
                    config(format!(
                        "endpoint {endpoint} is https: a CA file to verify the server is required"
                    ))
                })?;
                let token_file = security.token_file.as_ref().ok_or_else(|| {
                    config(format!(
                        "endpoint {endpoint} is https: a token file to authenticate with is required"
                    ))
                })?;
                let ca = std::fs::read(ca_file)
                    .map_err(|e| config(format!("CA file {}: {e}", ca_file.display())))?;
                if !String::from_utf8_lossy(&ca).contains("-----BEGIN CERTIFICATE-----") {
                    return Err(config(format!(
                        "CA file {}: no PEM certificate in it",
                        ca_file.display()
                    )));
                }
                let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
                if let Some(name) = &security.server_name {
                    tls = tls.domain_name(name.clone());
                }
                channel = channel
                    .tls_config(tls)
                    .map_err(|e| config(format!("TLS for {endpoint}: {e}")))?;
                Credentials(Some(TokenSource::new(token_file)?))
            }
            other => {
                return Err(config(format!(
                    "endpoint {endpoint}: unsupported scheme {}; use http:// or https://",
                    other.unwrap_or("")
                )));
            }
        };
        let channel = channel
            .connect_timeout(options.rpc_timeout)
            // Notice a silently dead connection (a partition) well within one TTL.
            .http2_keep_alive_interval(options.renew_every())
            .keep_alive_timeout(options.rpc_timeout)
            .keep_alive_while_idle(true)
            .connect_lazy();
        Ok(Self {
            rpc: LeaseServiceClient::with_interceptor(channel, credentials),
            identity: identity.into().into(),
            options,
            held: Arc::default(),
            stopping: Arc::new(watch::channel(false).0),
            holdings: Arc::new(watch::channel(0).0),
        })
    }

    /// Graceful shutdown: releases every lease this client holds (the leader lease and every work
    /// lease, whoever still holds a handle to them) and acquires nothing afterwards, so standbys
    /// take over at once instead of one TTL later. Electors then read `Following` and work leases
    /// report lost. Returns true when every holding ended within `within` (each Release is
    /// bounded by the call timeout; a lease whose Release got no answer expires by itself).
    ///
    /// Call it only once the work these leases protect has stopped.
    pub async fn release_all(&self, within: Duration) -> bool {
        self.stopping.send_replace(true);
        let mut holdings = self.holdings.subscribe();
        tokio::time::timeout(within, holdings.wait_for(|n| *n == 0))
            .await
            .is_ok()
    }

    fn is_stopping(&self) -> bool {
        *self.stopping.borrow()
    }

    /// Completes once [`LeaseClient::release_all`] was called.
    async fn stopped(&self) {
        let mut rx = self.stopping.subscribe();
        let _ = rx.wait_for(|stopping| *stopping).await;
    }

    fn holding_slot(&self) -> HoldingSlot {
        self.holdings.send_modify(|n| *n += 1);
        HoldingSlot(self.holdings.clone())
    }

    /// Reports leases under `prefix` that were released or expired, and grants, through one
    /// `Watch` stream that reconnects by itself (push, no polling): a replica that was refused a
    /// work lease retries it the moment it is freed, and learns what the others took without
    /// asking. The task ends when the receiver is dropped.
    pub fn frees(&self, prefix: impl Into<String>) -> tokio::sync::mpsc::UnboundedReceiver<Freed> {
        use pb::watch_event::Type;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let client = self.clone();
        let prefix = prefix.into();
        tokio::spawn(async move {
            loop {
                let mut rpc = client.rpc.clone();
                let watch = tokio::select! {
                    _ = tx.closed() => return,
                    w = rpc.watch(pb::WatchRequest { prefix: prefix.clone() }) => w,
                };
                if let Ok(response) = watch {
                    let mut stream = response.into_inner();
                    loop {
                        let event = tokio::select! {
                            _ = tx.closed() => return,
                            e = stream.next() => e,
                        };
                        let Some(Ok(event)) = event else { break };
                        let freed = match Type::try_from(event.r#type) {
                            Ok(Type::Synced) => Some(Freed::Resynced),
                            Ok(Type::Released | Type::Expired) => {
                                event.lease.map(|l| Freed::Name(l.name))
                            }
                            Ok(Type::Acquired) => event.lease.map(|l| Freed::Held {
                                name: l.name,
                                holder: l.holder,
                                remaining: Duration::from_millis(l.remaining_ms),
                            }),
                            _ => None,
                        };
                        if let Some(freed) = freed
                            && tx.send(freed).is_err()
                        {
                            return;
                        }
                    }
                }
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(client.options.retry_every()) => {}
                }
            }
        });
        rx
    }

    /// The holders of the leases under `prefix` now (one `List`).
    pub async fn holders(&self, prefix: &str) -> Result<Vec<String>, LeaseError> {
        let mut rpc = self.rpc.clone();
        let request = pb::ListRequest {
            prefix: prefix.into(),
        };
        let answer = tokio::time::timeout(self.options.rpc_timeout, rpc.list(request))
            .await
            .map_err(|_| LeaseError::Unavailable("List timed out".into()))?
            .map_err(|status| match classify(status) {
                CallError::Refused(status) => LeaseError::Refused {
                    code: status.code(),
                    message: status.message().to_owned(),
                },
                CallError::Transient(detail) => LeaseError::Unavailable(detail),
            })?;
        Ok(answer
            .into_inner()
            .leases
            .into_iter()
            .map(|l| l.holder)
            .collect())
    }

    /// This replica's identity.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The timing options.
    pub fn options(&self) -> ClientOptions {
        self.options
    }

    /// Starts contending for the lease `name` (normally `<component>/leader`) in the background.
    /// The task runs while any clone of the elector or any receiver it handed out lives; when the
    /// last is dropped it releases the lease if it holds it.
    pub fn elector(&self, name: impl Into<String>) -> LeaderElector {
        let (tx, rx) = watch::channel(Leadership::Following);
        let client = self.clone();
        let name = name.into();
        tokio::spawn(async move { client.run_elector(name, tx).await });
        LeaderElector::from_receiver(rx)
    }

    /// Per-object work leases through this client.
    pub fn work_leases(&self) -> WorkLeases {
        WorkLeases::networked(self.clone())
    }

    /// Tracks whether the server answers, probing it with `Get(probe_name)` every third of the TTL.
    /// The probe task stops when the last receiver is dropped.
    pub fn reachability(&self, probe_name: impl Into<String>) -> watch::Receiver<Reachability> {
        let (tx, rx) = watch::channel(Reachability::Pending);
        let client = self.clone();
        let name = probe_name.into();
        tokio::spawn(async move {
            let span = client.options.deadline_span();
            let mut last_ok: Option<Instant> = None;
            let started = Instant::now();
            loop {
                let mut rpc = client.rpc.clone();
                let probe = tokio::time::timeout(
                    client.options.rpc_timeout,
                    rpc.get(pb::GetRequest { name: name.clone() }),
                )
                .await;
                let now = Instant::now();
                match probe {
                    // NOT_FOUND is an answer too: the server is there.
                    Ok(Ok(_)) => last_ok = Some(now),
                    Ok(Err(s)) if s.code() == Code::NotFound => last_ok = Some(now),
                    Ok(Err(s)) => {
                        client.mark_unreachable(&tx, last_ok, started, now, span, &s.to_string())
                    }
                    Err(_) => client.mark_unreachable(&tx, last_ok, started, now, span, "timeout"),
                }
                if last_ok == Some(now) {
                    tx.send_if_modified(|r| {
                        let changed = *r != Reachability::Reachable;
                        if changed && matches!(r, Reachability::Unreachable(_)) {
                            tracing::info!("lease server reachable again");
                        }
                        *r = Reachability::Reachable;
                        changed
                    });
                }
                tokio::select! {
                    _ = tx.closed() => return,
                    _ = tokio::time::sleep(client.options.renew_every()) => {}
                }
            }
        });
        rx
    }

    fn mark_unreachable(
        &self,
        tx: &watch::Sender<Reachability>,
        last_ok: Option<Instant>,
        started: Instant,
        now: Instant,
        span: Duration,
        error: &str,
    ) {
        let since = last_ok.unwrap_or(started);
        if now.duration_since(since) >= span {
            let detail = format!(
                "no answer from the lease server for {} ms (last error: {error})",
                now.duration_since(since).as_millis()
            );
            tx.send_if_modified(|r| {
                let changed = !matches!(r, Reachability::Unreachable(_));
                if changed {
                    tracing::warn!(%detail, "lease server unreachable; every lease of this replica is lost");
                }
                *r = Reachability::Unreachable(detail.clone());
                changed
            });
        }
    }

    async fn acquire(&self, name: &str) -> Result<AcquireOutcome, CallError> {
        let sent = Instant::now();
        let mut rpc = self.rpc.clone();
        let request = pb::AcquireRequest {
            name: name.into(),
            holder: self.identity.to_string(),
            ttl_ms: millis(self.options.ttl),
        };
        let response = tokio::time::timeout(self.options.rpc_timeout, rpc.acquire(request))
            .await
            .map_err(|_| CallError::Transient("Acquire timed out".into()))?
            .map_err(classify)?
            .into_inner();
        if !response.acquired {
            return Ok(AcquireOutcome::NotGranted {
                retry_after: Duration::from_millis(response.retry_after_ms),
            });
        }
        let lease = response
            .lease
            .ok_or_else(|| CallError::Transient("Acquire answer without a lease".into()))?;
        Ok(AcquireOutcome::Granted(Holding {
            name: name.into(),
            token: lease.token,
            proof: response.proof,
            deadline: sent + self.options.deadline_span(),
            last_sent: sent,
        }))
    }

    async fn renew(&self, h: &mut Holding) -> Result<(), CallError> {
        let sent = Instant::now();
        let mut rpc = self.rpc.clone();
        let request = pb::RenewRequest {
            name: h.name.clone(),
            holder: self.identity.to_string(),
            token: h.token,
            ttl_ms: millis(self.options.ttl),
            proof: h.proof.clone(),
        };
        let response = tokio::time::timeout(self.options.rpc_timeout, rpc.renew(request))
            .await
            .map_err(|_| CallError::Transient("Renew timed out".into()))?
            .map_err(classify)?
            .into_inner();
        h.proof = response.proof;
        h.last_sent = sent;
        h.deadline = sent + self.options.deadline_span();
        Ok(())
    }

    async fn release(&self, h: &Holding) {
        let mut rpc = self.rpc.clone();
        let request = pb::ReleaseRequest {
            name: h.name.clone(),
            holder: self.identity.to_string(),
            token: h.token,
        };
        match tokio::time::timeout(self.options.rpc_timeout, rpc.release(request)).await {
            Ok(Ok(_)) => tracing::debug!(name = %h.name, token = h.token, "released"),
            Ok(Err(e)) => {
                tracing::debug!(name = %h.name, error = %e, "release refused (it expires anyway)")
            }
            Err(_) => tracing::debug!(name = %h.name, "release timed out (it expires anyway)"),
        }
    }

    /// Keeps `h` renewed until it is lost or `stop` completes (then it is released). Returns at
    /// the deadline at the latest when no renewal succeeds.
    async fn hold(&self, h: &mut Holding, stop: impl std::future::Future<Output = ()>) -> HoldEnd {
        let stop = async {
            tokio::select! {
                _ = stop => {}
                _ = self.stopped() => {}
            }
        };
        tokio::pin!(stop);
        let mut next = h.last_sent + self.options.renew_every();
        loop {
            tokio::select! {
                _ = &mut stop => {
                    self.release(h).await;
                    return HoldEnd::Stopped;
                }
                _ = tokio::time::sleep_until(next.min(h.deadline)) => {}
            }
            if Instant::now() >= h.deadline {
                return HoldEnd::Lost("no renewal succeeded before the deadline".into());
            }
            let deadline = h.deadline;
            let attempt = tokio::select! {
                _ = &mut stop => {
                    self.release(h).await;
                    return HoldEnd::Stopped;
                }
                r = tokio::time::timeout_at(deadline, self.renew(h)) => r,
            };
            match attempt {
                Err(_) => return HoldEnd::Lost("no renewal succeeded before the deadline".into()),
                Ok(Ok(())) => next = h.last_sent + self.options.renew_every(),
                Ok(Err(CallError::Refused(s))) => {
                    return HoldEnd::Lost(format!(
                        "the server refused the renewal: {}",
                        s.message()
                    ));
                }
                Ok(Err(e @ CallError::Transient(_))) => {
                    tracing::debug!(name = %h.name, error = %e, "renewal failed; retrying until the deadline");
                    next = Instant::now() + self.options.retry_every();
                }
            }
        }
    }

    async fn run_elector(self, name: String, tx: watch::Sender<Leadership>) {
        let wake = Notify::new();
        tokio::select! {
            _ = self.contend(&name, &tx, &wake) => {}
            _ = self.watch_frees(&name, &wake) => {}
        }
    }

    async fn contend(&self, name: &str, tx: &watch::Sender<Leadership>, wake: &Notify) {
        loop {
            if self.is_stopping() {
                return;
            }
            let slot = self.holding_slot();
            let wait = match self.acquire(name).await {
                Ok(AcquireOutcome::Granted(mut h)) => {
                    if Instant::now() < h.deadline {
                        tracing::info!(name, token = h.token, identity = %self.identity, "leading");
                        tx.send_replace(Leadership::Leading { token: h.token });
                        let end = self.hold(&mut h, tx.closed()).await;
                        tx.send_replace(Leadership::Following);
                        match end {
                            HoldEnd::Stopped => {
                                tracing::info!(name, token = h.token, "released leadership");
                                return;
                            }
                            HoldEnd::Lost(reason) => {
                                tracing::warn!(name, token = h.token, %reason, "lost leadership; following")
                            }
                        }
                    }
                    self.options.retry_every()
                }
                Ok(AcquireOutcome::NotGranted { retry_after }) => {
                    retry_after.clamp(Duration::from_millis(10), self.options.ttl)
                }
                Err(e) => {
                    tracing::debug!(name, error = %e, "acquire failed");
                    self.options.retry_every()
                }
            };
            drop(slot);
            tokio::select! {
                _ = tx.closed() => return,
                _ = self.stopped() => return,
                _ = wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Wakes the contender when `name` is released or expires (or is found free when a watch
    /// (re)starts), so a standby takes over at once instead of at its next retry.
    async fn watch_frees(&self, name: &str, wake: &Notify) {
        use pb::watch_event::Type;
        loop {
            let mut rpc = self.rpc.clone();
            if let Ok(response) = rpc
                .watch(pb::WatchRequest {
                    prefix: name.into(),
                })
                .await
            {
                let mut stream = response.into_inner();
                let mut held = false;
                while let Some(Ok(event)) = stream.next().await {
                    let is_ours = event.lease.as_ref().is_some_and(|l| l.name == name);
                    match Type::try_from(event.r#type) {
                        Ok(Type::Snapshot) if is_ours => held = true,
                        Ok(Type::Synced) if !held => wake.notify_one(),
                        Ok(Type::Released | Type::Expired) if is_ours => wake.notify_one(),
                        _ => {}
                    }
                }
            }
            tokio::time::sleep(self.options.retry_every()).await;
        }
    }

    pub(crate) async fn attempt(&self, name: &str) -> Result<Attempt, LeaseError> {
        let not_now = Attempt::NotGranted {
            retry_after: Duration::ZERO,
        };
        if self.is_stopping() {
            // Shutting down: leave the object to the other replicas.
            return Ok(not_now);
        }
        let slot = self.holding_slot();
        if !self.lock_held().insert(name.to_owned()) {
            // Another task of this replica holds it.
            return Ok(not_now);
        }
        let mut h = match self.acquire(name).await {
            Ok(AcquireOutcome::Granted(h)) => h,
            Ok(AcquireOutcome::NotGranted { retry_after }) => {
                self.lock_held().remove(name);
                return Ok(Attempt::NotGranted { retry_after });
            }
            Err(e) => {
                self.lock_held().remove(name);
                return Err(match e {
                    CallError::Refused(status) => LeaseError::Refused {
                        code: status.code(),
                        message: status.message().to_owned(),
                    },
                    CallError::Transient(detail) => LeaseError::Unavailable(detail),
                });
            }
        };
        let (lost_tx, lost_rx) = watch::channel(false);
        let lease = WorkLease::networked(name.into(), h.token, lost_rx);
        let client = self.clone();
        tokio::spawn(async move {
            // The task ends when the WorkLease (the only receiver) is dropped or on release_all:
            // it then releases.
            if let HoldEnd::Lost(reason) = client.hold(&mut h, lost_tx.closed()).await {
                tracing::warn!(name = %h.name, token = h.token, %reason, "work lease lost");
            }
            // Lost or released: whoever still holds the WorkLease must stop acting.
            lost_tx.send_replace(true);
            client.lock_held().remove(&h.name);
            drop(slot);
        });
        Ok(Attempt::Granted(lease))
    }

    fn lock_held(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        // A poisoned lock only means a panic elsewhere while holding it; the set stays usable.
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_again_when_the_file_changes_and_kept_when_it_vanishes() {
        let dir = std::env::temp_dir().join(format!("lease-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, "first\n").unwrap();
        let source = TokenSource::new(&path).unwrap().check_every(Duration::ZERO);
        assert_eq!(source.header().to_str().unwrap(), "Bearer first");
        assert!(source.header().is_sensitive());
        // Rotated the way kubelet does it: a new file renamed over the old one.
        std::fs::write(dir.join("token.new"), "second-longer").unwrap();
        std::fs::rename(dir.join("token.new"), &path).unwrap();
        assert_eq!(source.header().to_str().unwrap(), "Bearer second-longer");
        std::fs::remove_file(&path).unwrap();
        assert_eq!(source.header().to_str().unwrap(), "Bearer second-longer");
        std::fs::write(&path, "third").unwrap();
        assert_eq!(source.header().to_str().unwrap(), "Bearer third");
        // Errors name the file, never its content.
        std::fs::write(&path, "  \n").unwrap();
        let err = TokenSource::new(&path).unwrap_err().to_string();
        assert!(err.contains("is empty") && err.contains("token"), "{err}");
        std::fs::write(&path, "secret\u{7f}value").unwrap();
        let err = TokenSource::new(&path).unwrap_err().to_string();
        assert!(!err.contains("secret"), "{err}");
        let missing = TokenSource::new(dir.join("absent"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("absent"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn https_needs_a_ca_file_and_a_token_file() {
        let options = ClientOptions::default();
        let err = |endpoint: &str, security: &Security| {
            LeaseClient::connect_lazy_with(endpoint, "me", options, security)
                .unwrap_err()
                .to_string()
        };
        let e = err("https://lease:9090", &Security::default());
        assert!(e.contains("a CA file"), "{e}");
        let dir = std::env::temp_dir().join(format!("lease-sec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let not_pem = dir.join("ca.txt");
        std::fs::write(&not_pem, "hello").unwrap();
        let e = err(
            "https://lease:9090",
            &Security {
                ca_file: Some(dir.join("nope.pem")),
                token_file: Some(dir.join("token")),
                server_name: None,
            },
        );
        assert!(e.contains("nope.pem"), "{e}");
        let e = err(
            "https://lease:9090",
            &Security {
                ca_file: Some(not_pem.clone()),
                token_file: Some(dir.join("token")),
                server_name: None,
            },
        );
        assert!(e.contains("no PEM certificate"), "{e}");
        let e = err(
            "https://lease:9090",
            &Security {
                ca_file: Some(not_pem),
                token_file: None,
                server_name: None,
            },
        );
        assert!(e.contains("a token file"), "{e}");
        let e = err("ftp://lease:9090", &Security::default());
        assert!(e.contains("unsupported scheme ftp"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
