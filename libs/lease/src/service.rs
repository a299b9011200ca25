//! The gRPC glue of the lease server: [`LeaseService`] answers `cozy.lease.v1.LeaseService` from a
//! [`LeaseTable`] behind a mutex, streams its events to watchers and records the server metrics.
//!
//! ```text
//!  tonic request ─► validate/convert ─► lock table ─► state transition(now) ─► events ─► broadcast
//!                                                          │                              │ (under the lock,
//!                                                          ▼                              ▼  so a new watcher's
//!                                                  pb answer / Status              Watch streams  snapshot and its
//!  expiry loop (every 50 ms) ─► expire_due ─► Expired events ──────────────┘       live events never
//!                                                                                  overlap or leave a gap)
//! ```
//!
//! With a [`Guard`] every request is first authenticated and authorized (see [`crate::auth`]);
//! the authenticated identity becomes the owner of the leases it is granted, so a lease can be
//! renewed or released only by the identity it was granted to.
//!
//! Status codes: `UNAUTHENTICATED` for a missing, forged or expired bearer token,
//! `PERMISSION_DENIED` for a lease name outside the caller's prefixes or a lease granted to
//! another identity, `INVALID_ARGUMENT` for malformed requests, `NOT_FOUND` for a lease that is
//! not held, `FAILED_PRECONDITION` for a stale token (the caller lost the lease),
//! `RESOURCE_EXHAUSTED` when an epoch's tokens run out, `ABORTED` for a watcher that fell behind,
//! `UNAVAILABLE` while shutting down or when the caller's token cannot be reviewed.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::Stream;
use tokio::sync::{broadcast, mpsc, watch};
use tonic::{Request, Response, Status};

use crate::auth::{Guard, Scope};
use crate::pb;
use crate::state::{Acquired, Event, Grant, LeaseTable, Now, RenewKind, StateError};

/// Metric names of the lease server.
pub mod metric {
    /// Gauge: leases currently held.
    pub const LEASES_HELD: &str = "cozy_backups_lease_server_leases_held";
    /// Counter: new grants (not counting restores or re-acquisitions by the holder).
    pub const GRANTS: &str = "cozy_backups_lease_server_grants_total";
    /// Counter: renewals (including re-acquisitions by the holder).
    pub const RENEWALS: &str = "cozy_backups_lease_server_renewals_total";
    /// Counter: earlier-epoch leases restored with a valid proof after a restart.
    pub const RESTORES: &str = "cozy_backups_lease_server_restores_total";
    /// Counter: leases released by their holder.
    pub const RELEASES: &str = "cozy_backups_lease_server_releases_total";
    /// Counter: leases that expired without renewal.
    pub const EXPIRATIONS: &str = "cozy_backups_lease_server_expirations_total";
    /// Counter: renewals and releases refused because their token (or holder, or proof) was stale.
    pub const STALE_TOKENS: &str = "cozy_backups_lease_server_rejected_stale_tokens_total";
    /// Counter: acquisitions refused during the post-restart quiet period.
    pub const QUIET_REFUSALS: &str = "cozy_backups_lease_server_quiet_period_refusals_total";
    /// Gauge: this process's epoch.
    pub const EPOCH: &str = "cozy_backups_lease_server_epoch";
    /// Counter `{method, code}`: gRPC requests answered, by method and status code.
    pub const GRPC_REQUESTS: &str = "cozy_backups_lease_server_grpc_requests_total";
    /// Histogram `{method}`: time to answer a gRPC request (for Watch: to open the stream).
    pub const GRPC_DURATION: &str = "cozy_backups_lease_server_grpc_request_duration_seconds";
}

/// Counts and times one gRPC request.
async fn observed<T>(
    method: &'static str,
    answer: impl std::future::Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    let started = std::time::Instant::now();
    let result = answer.await;
    let code = match &result {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    };
    metrics::counter!(metric::GRPC_REQUESTS, "method" => method, "code" => code_label(code))
        .increment(1);
    metrics::histogram!(metric::GRPC_DURATION, "method" => method)
        .record(started.elapsed().as_secs_f64());
    result
}

/// A static metric label for a gRPC status code (its canonical name).
pub fn code_label(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "CANCELLED",
        Unknown => "UNKNOWN",
        InvalidArgument => "INVALID_ARGUMENT",
        DeadlineExceeded => "DEADLINE_EXCEEDED",
        NotFound => "NOT_FOUND",
        AlreadyExists => "ALREADY_EXISTS",
        PermissionDenied => "PERMISSION_DENIED",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        FailedPrecondition => "FAILED_PRECONDITION",
        Aborted => "ABORTED",
        OutOfRange => "OUT_OF_RANGE",
        Unimplemented => "UNIMPLEMENTED",
        Internal => "INTERNAL",
        Unavailable => "UNAVAILABLE",
        DataLoss => "DATA_LOSS",
        Unauthenticated => "UNAUTHENTICATED",
    }
}

pub use crate::state::Clock;

struct Shared {
    table: Mutex<LeaseTable>,
    events: broadcast::Sender<Event>,
    clock: Clock,
    closing: watch::Sender<bool>,
}

/// The `cozy.lease.v1.LeaseService` implementation. Cheap to clone.
#[derive(Clone)]
pub struct LeaseService {
    shared: Arc<Shared>,
    /// Authentication and authorization; `None` serves every caller (insecure mode).
    guard: Option<Arc<Guard>>,
}

impl std::fmt::Debug for LeaseService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseService").finish_non_exhaustive()
    }
}

/// How many events a watcher may lag behind before it is cut off (it then watches again).
const WATCH_BUFFER: usize = 4096;

impl LeaseService {
    /// A service over `table`, reading time from the system clock.
    pub fn new(table: LeaseTable) -> Self {
        Self::with_clock(table, Arc::new(Now::system))
    }

    /// A service over `table` with an injected clock.
    pub fn with_clock(table: LeaseTable, clock: Clock) -> Self {
        describe_metrics();
        metrics::gauge!(metric::EPOCH).set(table.epoch() as f64);
        metrics::gauge!(metric::LEASES_HELD).set(0.0);
        let (events, _) = broadcast::channel(WATCH_BUFFER);
        let (closing, _) = watch::channel(false);
        Self {
            shared: Arc::new(Shared {
                table: Mutex::new(table),
                events,
                clock,
                closing,
            }),
            guard: None,
        }
    }

    /// This service with every request authenticated and authorized by `guard`.
    pub fn with_guard(mut self, guard: Guard) -> Self {
        self.guard = Some(Arc::new(guard));
        self
    }

    /// The owner of what `metadata`'s caller is granted: its authenticated identity, or the empty
    /// owner without a guard.
    async fn caller(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        scope: Scope<'_>,
    ) -> Result<String, Status> {
        match &self.guard {
            Some(guard) => guard.check(metadata, scope).await,
            None => Ok(String::new()),
        }
    }

    /// The tonic server for this service.
    pub fn into_server(self) -> pb::lease_service_server::LeaseServiceServer<Self> {
        pb::lease_service_server::LeaseServiceServer::new(self)
    }

    /// Ends every open Watch stream (with `UNAVAILABLE`), so a graceful shutdown does not wait for
    /// them.
    pub fn close(&self) {
        self.shared.closing.send_replace(true);
    }

    /// Expires due leases every 50 ms until `stop` completes, so watchers hear of an expiry at once
    /// even when no request arrives.
    pub async fn run_expiry(&self, stop: impl std::future::Future<Output = ()>) {
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {
                    self.with_table(|table, now| ((), table.expire_due(now)));
                }
            }
        }
    }

    /// Runs `f` on the locked table and publishes its events while still holding the lock.
    fn with_table<T>(&self, f: impl FnOnce(&mut LeaseTable, Now) -> (T, Vec<Event>)) -> T {
        let mut table = self.shared.table.lock().unwrap_or_else(|e| e.into_inner());
        let now = (self.shared.clock)();
        let (out, events) = f(&mut table, now);
        for event in events {
            match &event {
                Event::Expired(_) => metrics::counter!(metric::EXPIRATIONS).increment(1),
                Event::Released(_) => metrics::counter!(metric::RELEASES).increment(1),
                Event::Acquired(_) => {}
            }
            // No receivers is fine: nobody watches.
            let _ = self.shared.events.send(event);
        }
        metrics::gauge!(metric::LEASES_HELD).set(table.len() as f64);
        out
    }
}

fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(metric::LEASES_HELD, "Leases currently held.");
    describe_counter!(metric::GRANTS, "New lease grants.");
    describe_counter!(metric::RENEWALS, "Lease renewals.");
    describe_counter!(
        metric::RESTORES,
        "Leases of an earlier epoch restored after a restart with a valid proof."
    );
    describe_counter!(metric::RELEASES, "Leases released by their holder.");
    describe_counter!(metric::EXPIRATIONS, "Leases that expired without renewal.");
    describe_counter!(
        metric::STALE_TOKENS,
        "Renewals and releases refused because the token was stale."
    );
    describe_counter!(
        metric::QUIET_REFUSALS,
        "Acquisitions refused during the post-restart quiet period."
    );
    describe_gauge!(metric::EPOCH, "The epoch of this lease server process.");
    describe_counter!(
        metric::GRPC_REQUESTS,
        "gRPC requests answered, by method and status code."
    );
    metrics::describe_histogram!(
        metric::GRPC_DURATION,
        metrics::Unit::Seconds,
        "Time to answer a gRPC request (Watch: to open the stream), by method."
    );
}

fn status(err: StateError) -> Status {
    match &err {
        StateError::InvalidArgument(_) => Status::invalid_argument(err.to_string()),
        StateError::NotHeld { .. } => Status::not_found(err.to_string()),
        StateError::StaleToken { .. } => {
            metrics::counter!(metric::STALE_TOKENS).increment(1);
            Status::failed_precondition(err.to_string())
        }
        StateError::TokensExhausted(_) => Status::resource_exhausted(err.to_string()),
        StateError::ForeignOwner { .. } => {
            metrics::counter!(metric::STALE_TOKENS).increment(1);
            Status::permission_denied(err.to_string())
        }
    }
}

fn ttl(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<Grant> for pb::Lease {
    fn from(g: Grant) -> Self {
        pb::Lease {
            name: g.name,
            holder: g.holder,
            ttl_ms: millis(g.ttl),
            remaining_ms: millis(g.remaining),
            expires_unix_ms: g.expires_unix_ms,
            token: g.token,
        }
    }
}

fn event_message(event: Event) -> pb::WatchEvent {
    use pb::watch_event::Type;
    let (kind, grant) = match event {
        Event::Acquired(g) => (Type::Acquired, g),
        Event::Released(g) => (Type::Released, g),
        Event::Expired(g) => (Type::Expired, g),
    };
    pb::WatchEvent {
        r#type: kind as i32,
        lease: Some(grant.into()),
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

#[tonic::async_trait]
impl pb::lease_service_server::LeaseService for LeaseService {
    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        observed("Acquire", async move {
            let (metadata, _, req) = request.into_parts();
            let owner = self.caller(&metadata, Scope::Name(&req.name)).await?;
            let answer = self.with_table(|t, now| {
                match t.acquire_as(&owner, &req.name, &req.holder, ttl(req.ttl_ms), now) {
                    Ok((a, events)) => {
                        // A new grant publishes an Acquired event; the holder acquiring again does not.
                        let new = events.iter().any(|e| matches!(e, Event::Acquired(_)));
                        (Ok((a, new)), events)
                    }
                    Err(e) => (Err(e), Vec::new()),
                }
            });
            let (answer, new) = answer.map_err(status)?;
            let response = match answer {
                Acquired::Granted(held) => {
                    if new {
                        metrics::counter!(metric::GRANTS).increment(1);
                    } else {
                        metrics::counter!(metric::RENEWALS).increment(1);
                    }
                    pb::AcquireResponse {
                        acquired: true,
                        lease: Some(held.grant.into()),
                        proof: held.proof,
                        retry_after_ms: 0,
                    }
                }
                Acquired::HeldByOther { current } => pb::AcquireResponse {
                    acquired: false,
                    retry_after_ms: millis(current.remaining),
                    lease: Some(current.into()),
                    proof: Vec::new(),
                },
                Acquired::QuietPeriod { retry_after } => {
                    metrics::counter!(metric::QUIET_REFUSALS).increment(1);
                    pb::AcquireResponse {
                        acquired: false,
                        lease: None,
                        proof: Vec::new(),
                        retry_after_ms: millis(retry_after).max(1),
                    }
                }
            };
            Ok(Response::new(response))
        })
        .await
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        observed("Renew", async move {
            let (metadata, _, req) = request.into_parts();
            let owner = self.caller(&metadata, Scope::Name(&req.name)).await?;
            let answer = self.with_table(|t, now| {
                match t.renew_as(
                    &owner,
                    &req.name,
                    &req.holder,
                    req.token,
                    ttl(req.ttl_ms),
                    &req.proof,
                    now,
                ) {
                    Ok((held, kind, events)) => (Ok((held, kind)), events),
                    Err(e) => (Err(e), Vec::new()),
                }
            });
            let (held, kind) = answer.map_err(status)?;
            match kind {
                RenewKind::Extended => metrics::counter!(metric::RENEWALS).increment(1),
                RenewKind::Restored => {
                    tracing::info!(name = %req.name, holder = %req.holder, token = req.token, "restored a lease of an earlier epoch");
                    metrics::counter!(metric::RESTORES).increment(1);
                }
            }
            Ok(Response::new(pb::RenewResponse {
                lease: Some(held.grant.into()),
                proof: held.proof,
            }))
        })
        .await
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        observed("Release", async move {
            let (metadata, _, req) = request.into_parts();
            let owner = self.caller(&metadata, Scope::Name(&req.name)).await?;
            self.with_table(|t, now| {
                match t.release_as(&owner, &req.name, &req.holder, req.token, now) {
                    Ok(events) => (Ok(()), events),
                    Err(e) => (Err(e), Vec::new()),
                }
            })
            .map_err(status)?;
            Ok(Response::new(pb::ReleaseResponse {}))
        })
        .await
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        observed("Get", async move {
            let (metadata, _, req) = request.into_parts();
            let name = req.name;
            self.caller(&metadata, Scope::Name(&name)).await?;
            if name.is_empty() {
                return Err(Status::invalid_argument("name is empty"));
            }
            match self.with_table(|t, now| t.get(&name, now)) {
                Some(grant) => Ok(Response::new(pb::GetResponse {
                    lease: Some(grant.into()),
                })),
                None => Err(Status::not_found(format!("lease {name} is not held"))),
            }
        })
        .await
    }

    async fn list(
        &self,
        request: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        observed("List", async move {
            let (metadata, _, req) = request.into_parts();
            let prefix = req.prefix;
            self.caller(&metadata, Scope::Prefix(&prefix)).await?;
            let leases = self.with_table(|t, now| t.list(&prefix, now));
            Ok(Response::new(pb::ListResponse {
                leases: leases.into_iter().map(Into::into).collect(),
            }))
        })
        .await
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        observed("Watch", async move {
            let (metadata, _, req) = request.into_parts();
            let prefix = req.prefix;
            self.caller(&metadata, Scope::Prefix(&prefix)).await?;
            // Subscribe and snapshot under the table lock: events are published under it too, so the
            // stream neither misses nor repeats a change.
            let (snapshot, mut events) = self.with_table(|t, now| {
                let (grants, expired) = t.list(&prefix, now);
                let rx = self.shared.events.subscribe();
                ((grants, rx), expired)
            });
            let mut closing = self.shared.closing.subscribe();
            let (tx, rx) = mpsc::channel::<Result<pb::WatchEvent, Status>>(64);
            tokio::spawn(async move {
                use pb::watch_event::Type;
                for grant in snapshot {
                    let msg = pb::WatchEvent {
                        r#type: Type::Snapshot as i32,
                        lease: Some(grant.into()),
                    };
                    if tx.send(Ok(msg)).await.is_err() {
                        return;
                    }
                }
                let synced = pb::WatchEvent {
                    r#type: Type::Synced as i32,
                    lease: None,
                };
                if tx.send(Ok(synced)).await.is_err() {
                    return;
                }
                loop {
                    let item = tokio::select! {
                        _ = closing.wait_for(|c| *c) => {
                            Err(Status::unavailable("the lease server is shutting down"))
                        }
                        _ = tx.closed() => return,
                        event = events.recv() => match event {
                            Ok(event) if event.grant().name.starts_with(&prefix) => Ok(event_message(event)),
                            Ok(_) => continue,
                            Err(broadcast::error::RecvError::Lagged(n)) => Err(Status::aborted(format!(
                                "the watch fell {n} events behind; watch again"
                            ))),
                            Err(broadcast::error::RecvError::Closed) => {
                                Err(Status::unavailable("the lease server is shutting down"))
                            }
                        },
                    };
                    let end = item.is_err();
                    if tx.send(item).await.is_err() || end {
                        return;
                    }
                }
            });
            let stream: Self::WatchStream =
                Box::pin(tokio_stream::wrappers::ReceiverStream::new(rx));
            Ok(Response::new(stream))
        })
        .await
    }
}
