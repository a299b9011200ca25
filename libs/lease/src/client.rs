//! Client API: [`LeaderElector`] for singleton loops and [`WorkLeases`] for per-object work.
//!
//! A daemon gates a singleton loop on `LeaderElector::subscribe()` (a `watch::Receiver<Leadership>`)
//! and stops acting the moment it reads `Following`. A work lease is held while a replica drives one
//! object; [`WorkLease::lost`] completes when the holder must stop acting on it.
//!
//! Both come in two modes: single-replica (`--lease-endpoint=none`: always leading, every work
//! lease granted with token 0, never lost) and networked, built by [`crate::LeaseClient`], whose
//! background tasks keep the leases renewed (see [`crate::net`]).

use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// This replica's view of a leader lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leadership {
    /// This replica leads; `token` is the lease's fencing token (0 in single-replica mode, where
    /// there is nothing to fence).
    Leading {
        /// Fencing token of the lease.
        token: u64,
    },
    /// Another replica leads, or nobody does, or this replica cannot tell (lease server down).
    Following,
}

impl Leadership {
    /// True while this replica leads.
    pub fn is_leading(&self) -> bool {
        matches!(self, Self::Leading { .. })
    }

    /// The fencing token while leading.
    pub fn token(&self) -> Option<u64> {
        match self {
            Self::Leading { token } => Some(*token),
            Self::Following => None,
        }
    }
}

/// Errors of the lease client.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// The lease service did not answer (connection refused, timeout, `UNAVAILABLE`): retry.
    #[error("lease service unavailable: {0}")]
    Unavailable(String),
    /// The client is misconfigured (an unusable endpoint, CA file or token file).
    #[error("lease client configuration: {0}")]
    Config(String),
    /// The lease service answered with a refusal that retrying the same request cannot change
    /// (e.g. `INVALID_ARGUMENT` for a TTL above the server's maximum, `PERMISSION_DENIED`).
    #[error("lease service refused the request ({code:?}): {message}")]
    Refused {
        /// The gRPC status code.
        code: tonic::Code,
        /// The server's message.
        message: String,
    },
}

impl LeaseError {
    /// The gRPC status code of the answer (`UNAVAILABLE` when there was none).
    pub fn code(&self) -> tonic::Code {
        match self {
            LeaseError::Unavailable(_) => tonic::Code::Unavailable,
            LeaseError::Config(_) => tonic::Code::InvalidArgument,
            LeaseError::Refused { code, .. } => *code,
        }
    }
}

/// Leadership of one component (`<component>/leader`).
#[derive(Clone, Debug)]
pub struct LeaderElector {
    rx: watch::Receiver<Leadership>,
    // Keeps the sender alive for the single-replica mode.
    _tx: Option<Arc<watch::Sender<Leadership>>>,
}

impl LeaderElector {
    /// Single-replica mode: always leading, token 0.
    pub fn single_replica() -> Self {
        let (tx, rx) = watch::channel(Leadership::Leading { token: 0 });
        Self {
            rx,
            _tx: Some(Arc::new(tx)),
        }
    }

    /// An elector driven by `rx` (used by the networked client and by tests).
    pub fn from_receiver(rx: watch::Receiver<Leadership>) -> Self {
        Self { rx, _tx: None }
    }

    /// A receiver of leadership changes.
    pub fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.rx.clone()
    }

    /// The current leadership.
    pub fn current(&self) -> Leadership {
        *self.rx.borrow()
    }
}

/// Acquires per-object work leases (`<component>/<kind>/<namespace>/<name>`).
#[derive(Clone, Debug)]
pub struct WorkLeases {
    mode: Mode,
}

#[derive(Clone, Debug)]
enum Mode {
    SingleReplica,
    Networked(Box<crate::LeaseClient>),
}

impl WorkLeases {
    /// Single-replica mode: every lease is granted at once with token 0 and never lost.
    pub fn single_replica() -> Self {
        Self {
            mode: Mode::SingleReplica,
        }
    }

    pub(crate) fn networked(client: crate::LeaseClient) -> Self {
        Self {
            mode: Mode::Networked(Box::new(client)),
        }
    }

    /// Leases under `prefix` that were released or expired (see [`crate::LeaseClient::frees`]), so
    /// a replica that was refused one retries it at once. Single-replica mode refuses nothing and
    /// reports nothing.
    pub fn frees(&self, prefix: &str) -> futures::stream::BoxStream<'static, crate::Freed> {
        use futures::StreamExt;
        match &self.mode {
            Mode::SingleReplica => futures::stream::pending().boxed(),
            Mode::Networked(client) => {
                tokio_stream::wrappers::UnboundedReceiverStream::new(client.frees(prefix)).boxed()
            }
        }
    }

    /// This replica's identity as lease holder; `None` in single-replica mode.
    pub fn identity(&self) -> Option<&str> {
        match &self.mode {
            Mode::SingleReplica => None,
            Mode::Networked(client) => Some(client.identity()),
        }
    }

    /// The holders of the leases under `prefix` (single-replica mode: none).
    pub async fn holders(&self, prefix: &str) -> Result<Vec<String>, LeaseError> {
        match &self.mode {
            Mode::SingleReplica => Ok(Vec::new()),
            Mode::Networked(client) => client.holders(prefix).await,
        }
    }

    /// Tries to acquire the work lease `name`: `Ok(None)` when another replica holds it (or the
    /// lease server is in its post-restart quiet period). A granted lease is renewed in the
    /// background until it is lost or dropped; dropping it releases it.
    pub async fn try_acquire(&self, name: &str) -> Result<Option<WorkLease>, LeaseError> {
        Ok(self.attempt(name).await?.granted())
    }

    /// As [`Self::try_acquire`], saying on a refusal when asking again may succeed.
    pub async fn attempt(&self, name: &str) -> Result<Attempt, LeaseError> {
        match &self.mode {
            Mode::SingleReplica => {
                let (tx, rx) = watch::channel(false);
                Ok(Attempt::Granted(WorkLease {
                    name: name.into(),
                    token: 0,
                    lost: rx,
                    _tx: Some(tx),
                }))
            }
            Mode::Networked(client) => client.attempt(name).await,
        }
    }
}

/// The answer to [`WorkLeases::attempt`].
#[derive(Debug)]
pub enum Attempt {
    /// This replica holds the lease now.
    Granted(WorkLease),
    /// Another holder has it (or the server is in its post-restart quiet period). `retry_after`
    /// is the server's hint: the current holder's remaining time (a release or an expiry before
    /// that is pushed through [`WorkLeases::frees`]), or the rest of the quiet period; zero when
    /// nothing is known (this replica is shutting down, or another of its tasks holds the lease).
    NotGranted {
        /// When asking again may succeed.
        retry_after: Duration,
    },
}

impl Attempt {
    /// The lease, when granted.
    pub fn granted(self) -> Option<WorkLease> {
        match self {
            Attempt::Granted(lease) => Some(lease),
            Attempt::NotGranted { .. } => None,
        }
    }
}

/// A held work lease. Dropping it releases the lease (networked mode).
#[derive(Debug)]
pub struct WorkLease {
    name: String,
    token: u64,
    lost: watch::Receiver<bool>,
    _tx: Option<watch::Sender<bool>>,
}

impl WorkLease {
    /// A lease whose background renewal task reports loss through `lost`.
    pub(crate) fn networked(name: String, token: u64, lost: watch::Receiver<bool>) -> Self {
        Self {
            name,
            token,
            lost,
            _tx: None,
        }
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token; record it on objects this lease protects.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// True once the holder must stop acting (could not renew before its deadline).
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }

    /// A receiver that turns `true` when the lease is lost (for code that outlives a borrow of
    /// the lease, e.g. a cached holding).
    pub fn lost_signal(&self) -> watch::Receiver<bool> {
        self.lost.clone()
    }

    /// Completes when the lease is lost.
    pub async fn lost(&mut self) {
        let _ = self.lost.wait_for(|lost| *lost).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn single_replica_always_leads_and_gets_every_work_lease() {
        let elector = LeaderElector::single_replica();
        assert_eq!(elector.current(), Leadership::Leading { token: 0 });
        assert!(elector.subscribe().borrow().is_leading());
        let leases = WorkLeases::single_replica();
        let lease = leases
            .try_acquire("x/BackupJob/ns/a")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (lease.name(), lease.token(), lease.is_lost()),
            ("x/BackupJob/ns/a", 0, false)
        );
    }
}
