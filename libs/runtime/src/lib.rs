//! What every daemon shares, modelled on kubert: CLI argument groups, logging, the admin server,
//! metrics, graceful shutdown, watches and caches, the leader-gated singleton loop, per-object
//! work leases, controller plumbing and condition apply. No daemon writes its own watch, backoff,
//! leader loop or readiness code (see `docs/runtime.md`).
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
//!  Watch::<K>::new(client)… .events() | .reflect() | .cache(trigger)   (watch.rs)
//!     │
//!  daemon futures ── Controller::run(reconcile, error_policy, ctx) ── log_item() per stream item
//!     │           └─ Singleton::new(..).on_change(trigger).run(evaluate)  (singleton.rs)
//!     │                                   └─ ControllerMetrics (runs, failures{kind}, duration)
//!     ▼
//!  SIGTERM/SIGINT ──► Shutdown (watch channel) ──► controllers drain, admin server stops, exit 0
//! ```
//!
//! Invariants: `/ready` never reports ready before every registered check (typically "the watch of
//! kind X delivered its initial list") has been marked; metric labels are static strings.

pub mod admin;
pub mod api;
pub mod args;
pub mod conditions;
pub mod controller;
pub mod daemon;
pub mod duration;
pub mod events;
pub mod log;
pub mod metrics;
pub mod retry;
pub mod shutdown;
pub mod singleton;
pub mod watch;
pub mod work;

pub use admin::{AdminServer, Readiness, ReadyHandle};
pub use args::{AdminArgs, ClientArgs, LeaseArgs, LogArgs, LogFormat};
pub use controller::{Backoff, ControllerMetrics, ErrorClass, ReconcileError};
pub use daemon::Daemon;
pub use shutdown::Shutdown;
pub use singleton::{Cause, ElectorClosed, Evaluate, Outcome, Pass, Singleton};
pub use watch::{Cache, Target, Trigger, Watch, WatchContext};
pub use work::{Fence, Held, SPREAD_GRACE, WorkError, WorkLeaseKeeper};

/// Builds a kube client from the client arguments (explicit kubeconfig, else in-cluster or the
/// default kubeconfig).
pub async fn client(args: &ClientArgs) -> anyhow::Result<kube::Client> {
    client_as(args, "cozy-backups").await
}

/// [`client`] whose requests carry `User-Agent: <component>/<version>`, so audit logs (the API
/// server's, the emulator's) tell which daemon made each request.
pub async fn client_as(args: &ClientArgs, component: &str) -> anyhow::Result<kube::Client> {
    use anyhow::Context as _;
    let mut config = match &args.kubeconfig {
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
    if let Ok(agent) =
        http::HeaderValue::from_str(&format!("{component}/{}", env!("CARGO_PKG_VERSION")))
    {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    retry::client(config).context("build Kubernetes client")
}

/// The default TTL of daemon leases (`--lease-ttl`): a replica that cannot renew stops acting within
/// `TTL - TTL/5` (12 s) of its last successful renewal, and a standby takes over within one TTL
/// of the leader's death (at once when the leader shuts down gracefully and releases).
pub const LEASE_TTL: std::time::Duration = std::time::Duration::from_secs(15);

/// Leadership and work leases from the lease arguments: `--lease-endpoint=none` gives the
/// single-replica mode (always leader, every work lease granted); otherwise a networked client
/// contends for `<component>/leader` in the background (see `docs/lease.md`).
///
/// It registers the readiness check `lease` in `readiness`: `/ready` is false until the lease server
/// has answered, and again whenever it has been unreachable for longer than the lease deadline (when
/// every lease of this replica is lost and the elector reads `Following`). Daemons call it through
/// [`Daemon::leases`].
pub async fn leases(
    args: &LeaseArgs,
    component: &'static str,
    readiness: &Readiness,
) -> anyhow::Result<(lease::LeaderElector, lease::WorkLeases)> {
    let (leader, work, _client) = leases_with_client(args, component, readiness).await?;
    Ok((leader, work))
}

/// The name of the gauge that is 1 while this replica of `component` leads, else 0:
/// `cozy_backups_<component>_leader` (dashes become underscores).
pub fn leader_metric(component: &str) -> String {
    format!("cozy_backups_{}_leader", component.replace('-', "_"))
}

/// [`leases`], also answering the networked client (`None` in single-replica mode) so that the
/// daemon can release every lease when it shuts down ([`lease::LeaseClient::release_all`]).
pub(crate) async fn leases_with_client(
    args: &LeaseArgs,
    component: &'static str,
    readiness: &Readiness,
) -> anyhow::Result<(
    lease::LeaderElector,
    lease::WorkLeases,
    Option<lease::LeaseClient>,
)> {
    let options = lease::ClientOptions::with_ttl(args.lease_ttl);
    let check = readiness.register("lease");
    if args.is_single_replica() {
        tracing::info!(component, "single-replica mode: this replica always leads");
        check.set_ready_with("single-replica mode (--lease-endpoint=none)");
        let leader = export_leadership(component, lease::LeaderElector::single_replica());
        return Ok((leader, lease::WorkLeases::single_replica(), None));
    }
    let identity = args.identity();
    let client = lease::LeaseClient::connect_lazy_with(
        &args.lease_endpoint,
        identity.clone(),
        options,
        &args.security(),
    )
    .map_err(|e| {
        anyhow::anyhow!(
            "--lease-endpoint={} (--lease-ca-file, --lease-token-file): {e}",
            args.lease_endpoint
        )
    })?;
    let leader = format!("{component}/leader");
    tracing::info!(component, endpoint = %args.lease_endpoint, %identity, lease = %leader, "contending for leadership");
    let mut reach = client.reachability(leader.clone());
    let endpoint = args.lease_endpoint.clone();
    tokio::spawn(async move {
        loop {
            match &*reach.borrow_and_update() {
                lease::Reachability::Pending => {
                    check.set_not_ready(&format!("waiting for the lease server at {endpoint}"))
                }
                lease::Reachability::Reachable => check.set_ready(),
                lease::Reachability::Unreachable(detail) => check.set_not_ready(detail),
            }
            if reach.changed().await.is_err() {
                return;
            }
        }
    });
    let leader = export_leadership(component, client.elector(leader));
    Ok((leader, client.work_leases(), Some(client)))
}

/// An elector that follows `inner` and keeps the gauge [`leader_metric`] equal to this replica's
/// leadership, so operators (and tests) see which replica leads. When every receiver of the
/// returned elector is dropped, `inner` is dropped too (a networked elector then releases its
/// lease); when `inner` ends, so does the returned one.
fn export_leadership(component: &'static str, inner: lease::LeaderElector) -> lease::LeaderElector {
    let name = leader_metric(component);
    ::metrics::describe_gauge!(
        name.clone(),
        "1 while this replica leads its component (holds <component>/leader), else 0."
    );
    let mut rx = inner.subscribe();
    let (tx, out) = tokio::sync::watch::channel(*rx.borrow_and_update());
    tokio::spawn(async move {
        let _inner = inner;
        loop {
            let now = *rx.borrow_and_update();
            ::metrics::gauge!(name.clone()).set(if now.is_leading() { 1.0 } else { 0.0 });
            tx.send_replace(now);
            tokio::select! {
                _ = tx.closed() => break,
                changed = rx.changed() => if changed.is_err() { break },
            }
        }
        ::metrics::gauge!(name).set(0.0);
    });
    lease::LeaderElector::from_receiver(out)
}
