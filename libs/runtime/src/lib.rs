//! What every daemon shares, modelled on kubert: CLI argument groups, logging, the admin server,
//! metrics, graceful shutdown, controller plumbing and condition apply.
//!
//! ```text
//!  main.rs ── Args { client, admin, log, lease, … }
//!     │
//!     ▼
//!  Runtime::start(…) ──► tracing subscriber (plain|json)
//!     │                 Prometheus recorder ──► /metrics
//!     │                 Readiness registry ──► /ready (200 only when every check passed)
//!     │                 admin HTTP server (/live, /ready, /metrics)
//!     │                 kube::Client
//!     ▼
//!  daemon futures ── Controller::run(reconcile, error_policy, ctx) ── log_item() per stream item
//!     │                                   └─ ControllerMetrics (runs, failures{kind}, duration)
//!     ▼
//!  SIGTERM/SIGINT ──► Shutdown (watch channel) ──► controllers drain, admin server stops, exit 0
//! ```
//!
//! Invariants: `/ready` never reports ready before every registered check (typically "the watch of
//! kind X delivered its initial list") has been marked; metric labels are static strings.

pub mod admin;
pub mod args;
pub mod conditions;
pub mod controller;
pub mod daemon;
pub mod log;
pub mod metrics;
pub mod shutdown;
pub mod watch;

pub use admin::{AdminServer, Readiness, ReadyHandle};
pub use args::{AdminArgs, ClientArgs, LeaseArgs, LogArgs, LogFormat};
pub use controller::{Backoff, ControllerMetrics, ErrorClass, ReconcileError};
pub use daemon::Daemon;
pub use shutdown::Shutdown;

/// Builds a kube client from the client arguments (explicit kubeconfig, else in-cluster or the
/// default kubeconfig).
pub async fn client(args: &ClientArgs) -> anyhow::Result<kube::Client> {
    use anyhow::Context as _;
    let config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("read kubeconfig {}", path.display()))?;
            let options = kube::config::KubeConfigOptions {
                context: args.kube_context.clone(),
                ..Default::default()
            };
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .context("load kubeconfig")?
        }
        None => kube::Config::infer()
            .await
            .context("infer Kubernetes client configuration")?,
    };
    kube::Client::try_from(config).context("build Kubernetes client")
}

/// Leadership and work leases from the lease arguments: `--lease-endpoint=none` gives the
/// single-replica mode (always leader, every work lease granted).
pub async fn leases(
    args: &LeaseArgs,
    component: &'static str,
) -> anyhow::Result<(lease::LeaderElector, lease::WorkLeases)> {
    if args.is_single_replica() {
        tracing::info!(component, "single-replica mode: this replica always leads");
        return Ok((
            lease::LeaderElector::single_replica(),
            lease::WorkLeases::single_replica(),
        ));
    }
    anyhow::bail!(
        "--lease-endpoint={}: the lease service client is not implemented yet; run one replica with --lease-endpoint=none",
        args.lease_endpoint
    )
}
