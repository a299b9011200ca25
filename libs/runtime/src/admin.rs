//! The admin HTTP server: `/live` (always 200 while the process serves), `/ready` (200 only when
//! every registered readiness check passed, else 503 with the failing checks listed) and `/metrics`
//! (the Prometheus text exposition of the global recorder).

use axum::{Router, extract::State, http::StatusCode, response::IntoResponse, routing::get};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::shutdown::Shutdown;

#[derive(Debug, Clone)]
struct Check {
    name: String,
    ready: bool,
    detail: String,
}

/// The name prefix of every watch's readiness check (`watch <Kind> …`).
pub(crate) const WATCH_CHECK_PREFIX: &str = "watch ";

/// A registry of readiness checks. `/ready` is true only when all are ready (and at least one
/// exists, so a daemon that registered nothing yet is not ready by accident).
#[derive(Clone, Debug, Default)]
pub struct Readiness {
    checks: Arc<Mutex<Vec<Check>>>,
}

/// One readiness check, owned by the component that decides it.
#[derive(Clone, Debug)]
pub struct ReadyHandle {
    readiness: Readiness,
    index: usize,
}

impl Readiness {
    /// Registers a check, initially not ready.
    pub fn register(&self, name: &str) -> ReadyHandle {
        let mut checks = self.lock();
        checks.push(Check {
            name: name.into(),
            ready: false,
            detail: "pending".into(),
        });
        ReadyHandle {
            readiness: self.clone(),
            index: checks.len() - 1,
        }
    }

    /// True when at least one check exists and all are ready.
    pub fn is_ready(&self) -> bool {
        let checks = self.lock();
        !checks.is_empty() && checks.iter().all(|c| c.ready)
    }

    /// True when every watch has completed its initial list (and is not refused): a consumer of
    /// the caches decides nothing before, since a half-filled cache looks like missing objects.
    /// Other checks (e.g. the lease service) do not count.
    pub fn watches_synced(&self) -> bool {
        self.lock()
            .iter()
            .filter(|c| c.name.starts_with(WATCH_CHECK_PREFIX))
            .all(|c| c.ready)
    }

    /// One line per check: `ok <name>` or `not ready <name>: <detail>`.
    pub fn report(&self) -> String {
        let checks = self.lock();
        if checks.is_empty() {
            return "not ready: no readiness checks registered yet\n".into();
        }
        checks
            .iter()
            .map(|c| {
                if c.ready && c.detail.is_empty() {
                    format!("ok {}\n", c.name)
                } else if c.ready {
                    format!("ok {}: {}\n", c.name, c.detail)
                } else {
                    format!("not ready {}: {}\n", c.name, c.detail)
                }
            })
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Check>> {
        // A poisoned lock only means a panic elsewhere while holding it; the data stays usable.
        self.checks.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ReadyHandle {
    /// Marks the check ready.
    pub fn set_ready(&self) {
        self.set(true, "");
    }

    /// Marks the check ready with a note shown in `/ready` (e.g. a rejected configuration).
    pub fn set_ready_with(&self, detail: &str) {
        self.set(true, detail);
    }

    /// Marks the check not ready, with the reason shown in `/ready`.
    pub fn set_not_ready(&self, detail: &str) {
        self.set(false, detail);
    }

    fn set(&self, ready: bool, detail: &str) {
        let mut checks = self.readiness.lock();
        if let Some(check) = checks.get_mut(self.index) {
            check.ready = ready;
            check.detail = detail.into();
        }
    }
}

/// A bound admin server, not yet serving.
pub struct AdminServer {
    listener: tokio::net::TcpListener,
    readiness: Readiness,
    metrics: crate::metrics::Metrics,
}

impl AdminServer {
    /// Binds `addr` (port 0 picks a free port).
    pub async fn bind(
        addr: SocketAddr,
        readiness: Readiness,
        metrics: crate::metrics::Metrics,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        Ok(Self {
            listener,
            readiness,
            metrics,
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` fires.
    pub async fn serve(self, shutdown: Shutdown) -> std::io::Result<()> {
        let state = (self.readiness, self.metrics);
        let app = Router::new()
            .route("/live", get(|| async { "ok\n" }))
            .route("/ready", get(ready))
            .route("/metrics", get(metrics))
            .with_state(state);
        axum::serve(self.listener, app)
            .with_graceful_shutdown(async move { shutdown.wait().await })
            .await
    }
}

type AdminState = (Readiness, crate::metrics::Metrics);

async fn ready(State((readiness, _)): State<AdminState>) -> impl IntoResponse {
    let code = if readiness.is_ready() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, readiness.report())
}

async fn metrics(State((_, metrics)): State<AdminState>) -> impl IntoResponse {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4",
        )],
        metrics.render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_every_check_passed() {
        let r = Readiness::default();
        assert!(!r.is_ready(), "no checks means not ready");
        let a = r.register("watch BackupJob");
        let b = r.register("config");
        assert!(!r.is_ready());
        a.set_ready();
        b.set_not_ready("invalid key backupStorage.region");
        assert!(!r.is_ready());
        assert_eq!(
            r.report(),
            "ok watch BackupJob\nnot ready config: invalid key backupStorage.region\n"
        );
        b.set_ready_with("kept last good render");
        assert!(r.is_ready());
    }

    #[test]
    fn watches_synced_counts_only_the_watches() {
        let r = Readiness::default();
        let jobs = r.register("watch BackupJob");
        let apps = r.register("watch apps.Postgres");
        let lease = r.register("lease");
        assert!(!r.watches_synced());
        jobs.set_ready();
        assert!(!r.watches_synced(), "one watch has not listed yet");
        apps.set_ready_with("kind not served; treated as empty");
        assert!(r.watches_synced());
        lease.set_not_ready("lease service unreachable");
        assert!(r.watches_synced(), "the lease check is not a watch");
        apps.set_not_ready("forbidden: list apps.cozystack.io/postgreses");
        assert!(!r.watches_synced());
    }
}
