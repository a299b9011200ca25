//! The standard start-up and run loop of a daemon.

use anyhow::Context as _;
use serde::Serialize;
use std::future::Future;
use std::net::SocketAddr;

use crate::{AdminArgs, AdminServer, ClientArgs, LogArgs, Readiness, Shutdown, metrics::Metrics};

/// How long a daemon's work may take to stop after SIGTERM before the process exits anyway.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Everything a daemon's main needs: a client, the readiness registry, metrics and shutdown.
pub struct Daemon {
    /// Kubernetes client.
    pub client: kube::Client,
    /// Readiness checks behind `/ready`.
    pub readiness: Readiness,
    /// The Prometheus recorder behind `/metrics`.
    pub metrics: Metrics,
    /// Fires on SIGTERM/SIGINT.
    pub shutdown: Shutdown,
    admin: AdminServer,
    /// Lease clients handed out by [`Daemon::leases`]: released when the work stops.
    lease_clients: std::sync::Mutex<Vec<lease::LeaseClient>>,
}

impl Daemon {
    /// Initialises logging, metrics, signals, the admin listener and the client, and logs the
    /// version and the effective (non-secret) configuration as the first line.
    pub async fn start(
        component: &'static str,
        client: &ClientArgs,
        admin_args: &AdminArgs,
        log: &LogArgs,
        effective_config: &impl Serialize,
    ) -> anyhow::Result<Self> {
        crate::log::init(log);
        let config = serde_json::to_value(effective_config).unwrap_or_default();
        tracing::info!(
            component,
            version = env!("CARGO_PKG_VERSION"),
            config = %config,
            "starting"
        );
        let metrics = Metrics::install();
        let shutdown = Shutdown::on_signals().context("install signal handlers")?;
        let readiness = Readiness::default();
        // The last daemon started in a process wins (tests may start several in turn).
        let admin = AdminServer::bind(admin_args.admin_addr, readiness.clone(), metrics.clone())
            .await
            .with_context(|| format!("bind admin server on {}", admin_args.admin_addr))?;
        let client = crate::client_as(client, component).await?;
        let bound = admin.local_addr()?;
        tracing::info!(admin_addr = %bound, "admin server listening");
        if let Some(path) = &admin_args.admin_addr_file {
            // Write then rename, so a reader never sees a partial address.
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, bound.to_string())
                .and_then(|()| std::fs::rename(&tmp, path))
                .with_context(|| format!("write the admin address to {}", path.display()))?;
        }
        Ok(Self {
            client,
            readiness,
            metrics,
            shutdown,
            admin,
            lease_clients: std::sync::Mutex::default(),
        })
    }

    /// Leadership (`<component>/leader`) and work leases for this daemon, with the `lease`
    /// readiness check registered on its `/ready` (see [`crate::leases`]). [`Daemon::run`]
    /// releases every one of them once the daemon's work has stopped, so a standby takes over
    /// at once after a graceful shutdown.
    pub async fn leases(
        &self,
        args: &crate::LeaseArgs,
        component: &'static str,
    ) -> anyhow::Result<(lease::LeaderElector, lease::WorkLeases)> {
        let (leader, work, client) =
            crate::leases_with_client(args, component, &self.readiness).await?;
        if let Some(client) = client {
            self.lease_clients
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(client);
        }
        Ok((leader, work))
    }

    /// What watches need: the readiness registry and the shutdown signal.
    pub fn watch_context(&self) -> crate::WatchContext {
        crate::WatchContext {
            readiness: self.readiness.clone(),
            shutdown: self.shutdown.clone(),
        }
    }

    /// The admin server's bound address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves the admin server while `main` runs. When `main` returns (normally after shutdown
    /// fired), the admin server stops too; an error from either is returned.
    ///
    /// Shutdown is bounded: once the signal fired, `main` gets [`SHUTDOWN_GRACE`] to finish. A
    /// kube-runtime `Controller` whose first list never succeeded (API unreachable) does not stop on
    /// its own; since every step of every daemon is idempotent and re-derived from the cluster on
    /// start, abandoning it after the grace period is safe.
    ///
    /// Once `main` has returned (or was abandoned), every lease of this replica is released before
    /// the process exits, so standbys take over at once rather than one lease TTL later.
    pub async fn run<F>(self, main: F) -> anyhow::Result<()>
    where
        F: Future<Output = anyhow::Result<()>>,
    {
        let lease_clients =
            std::mem::take(&mut *self.lease_clients.lock().unwrap_or_else(|e| e.into_inner()));
        let shutdown = self.shutdown.clone();
        let admin = self.admin.serve(self.shutdown.clone());
        let grace = self.shutdown.clone();
        let main = async move {
            let result = tokio::select! {
                result = main => result,
                _ = async {
                    grace.wait().await;
                    tokio::time::sleep(SHUTDOWN_GRACE).await;
                } => {
                    tracing::warn!(grace = ?SHUTDOWN_GRACE, "work did not stop within the shutdown grace period; exiting anyway");
                    Ok(())
                }
            };
            // The work has stopped: hand the leases back before exiting.
            release_leases(&lease_clients).await;
            // Whatever ended the main future, stop serving.
            shutdown.trigger();
            result
        };
        let (admin, main) = tokio::join!(admin, main);
        admin.context("admin server")?;
        main?;
        tracing::info!("stopped");
        Ok(())
    }
}

/// Releases every lease of `clients` (each bounded by its call timeout) and logs the outcome.
async fn release_leases(clients: &[lease::LeaseClient]) {
    for client in clients {
        let started = std::time::Instant::now();
        let within = client.options().rpc_timeout;
        if client.release_all(within).await {
            tracing::info!(
                took_ms = started.elapsed().as_millis() as u64,
                "released every lease of this replica"
            );
        } else {
            tracing::warn!(
                within = ?within,
                "some leases were not released in time; they expire by themselves"
            );
        }
    }
}
