//! Client API: [`LeaderElector`] for singleton loops and [`WorkLeases`] for per-object work.
//!
//! A daemon gates a singleton loop on `LeaderElector::subscribe()` (a `watch::Receiver<Leadership>`)
//! and stops acting the moment it reads `Following`. A work lease is held while a replica drives one
//! object; [`WorkLease::lost`] completes when the holder must stop acting on it.

use std::sync::Arc;
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
    /// The lease service could not be reached or answered with an error.
    #[error("lease service unavailable: {0}")]
    Unavailable(String),
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
        Self { rx, _tx: Some(Arc::new(tx)) }
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
    single_replica: bool,
}

impl WorkLeases {
    /// Single-replica mode: every lease is granted at once with token 0 and never lost.
    pub fn single_replica() -> Self {
        Self { single_replica: true }
    }

    /// Tries to acquire the work lease `name`: `Ok(None)` when another replica holds it.
    pub async fn try_acquire(&self, name: &str) -> Result<Option<WorkLease>, LeaseError> {
        if self.single_replica {
            let (tx, rx) = watch::channel(false);
            return Ok(Some(WorkLease { name: name.into(), token: 0, lost: rx, _tx: Some(tx) }));
        }
        Err(LeaseError::Unavailable("networked work leases are not implemented yet".into()))
    }
}

/// A held work lease.
#[derive(Debug)]
pub struct WorkLease {
    name: String,
    token: u64,
    lost: watch::Receiver<bool>,
    _tx: Option<watch::Sender<bool>>,
}

impl WorkLease {
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
        let lease = leases.try_acquire("x/BackupJob/ns/a").await.unwrap().unwrap();
        assert_eq!((lease.name(), lease.token(), lease.is_lost()), ("x/BackupJob/ns/a", 0, false));
    }
}
