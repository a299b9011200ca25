//! The state shared by the HTTP front end, the bundled controllers and the [`crate::Running`] handle: the
//! object store, the admin state and the OpenAPI document cache, each behind its own mutex, plus the signals that wake controllers and
//! end watch streams.

use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::admin::Admin;
use crate::store::State;

/// Shared server state.
pub(crate) struct Inner {
    /// Objects, kinds, history.
    pub(crate) state: Mutex<State>,
    /// Audit log, faults, latency.
    pub(crate) admin: Mutex<Admin>,
    /// Woken after every write so the controllers run.
    pub(crate) changed: Notify,
    /// Bumped to end every open watch (fault injection).
    pub(crate) drop_watches: watch::Sender<u64>,
    /// Bumped to release every held answer (see [`crate::admin::Hold`]).
    pub(crate) release_holds: watch::Sender<u64>,
    /// Set to true on shutdown.
    pub(crate) shutdown: watch::Sender<bool>,
    /// How often open watches get a BOOKMARK.
    pub(crate) bookmark_interval: Duration,
    /// `host:port` the server listens on.
    pub(crate) addr: String,
    /// OpenAPI documents built so far.
    pub(crate) openapi: Mutex<crate::openapi::Cache>,
    /// Authentication: the admin token, issued ServiceAccount tokens.
    pub(crate) auth: std::sync::Arc<crate::auth::Authenticator>,
}

impl Inner {
    /// Locks the object state.
    pub(crate) fn st(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the OpenAPI document cache.
    pub(crate) fn openapi(&self) -> MutexGuard<'_, crate::openapi::Cache> {
        self.openapi.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the admin state (audit log, faults, latency).
    pub(crate) fn admin(&self) -> MutexGuard<'_, Admin> {
        self.admin.lock().unwrap_or_else(|e| e.into_inner())
    }
}
