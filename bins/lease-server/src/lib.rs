//! `lease-server`: the internal gRPC lease service every daemon's replicas coordinate through
//! (docs/lease.md).
//!
//! ```text
//!  start ─► runtime::Daemon (logs, /metrics, /ready, SIGTERM) ─► epoch::advance (ConfigMap, +1)
//!        ─► LeaseTable(epoch, max TTL, started now) ─► tonic server on --grpc-addr:
//!             cozy.lease.v1.LeaseService + grpc.health.v1.Health
//!        ─► expiry loop (50 ms) ─► Watch streams
//!  SIGTERM ─► Watch streams end (UNAVAILABLE) ─► tonic drains ─► exit 0
//! ```
//!
//! Invariants: nothing is served before the next epoch is persisted (so tokens never go backwards);
//! `/ready` turns true once the gRPC listener is bound and the epoch is persisted; leases live only
//! in memory (a restart loses them, which the quiet period and restart proofs make safe).

pub mod epoch;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use lease::{LeaseService, LeaseTable, Limits};
use runtime::{AdminArgs, ClientArgs, Daemon, LogArgs};

/// The component name (metrics prefix, logs).
pub const COMPONENT: &str = "lease-server";

/// Grants time-bound, fenced leases over gRPC so replicas of a daemon agree on a leader or split
/// work.
#[derive(Parser, Debug, Clone)]
#[command(name = "lease-server", version, about)]
pub struct Args {
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub log: LogArgs,
    /// Address of the gRPC server (cozy.lease.v1.LeaseService and grpc.health.v1.Health).
    #[arg(long, env = "GRPC_ADDR", default_value = "0.0.0.0:9090")]
    pub grpc_addr: SocketAddr,
    /// Largest TTL a client may ask for (e.g. `30s`); also the length of the quiet period after a
    /// restart, during which nothing new is granted.
    #[arg(long, env = "MAX_TTL", value_parser = runtime::duration::parse, conflicts_with = "max_ttl_ms")]
    pub max_ttl: Option<Duration>,
    /// Deprecated spelling of `--max-ttl`: a bare number is milliseconds.
    #[arg(long, env = "MAX_TTL_MS", hide = true, value_parser = runtime::duration::millis)]
    pub max_ttl_ms: Option<Duration>,
    /// Namespace of the epoch ConfigMap (normally the server's own, from the downward API).
    #[arg(long, env = "POD_NAMESPACE", default_value = "cozy-backup-controller")]
    pub namespace: String,
    /// Name of the ConfigMap that persists the epoch and the restart-proof key.
    #[arg(long, env = "EPOCH_CONFIGMAP", default_value = "lease-server-epoch")]
    pub epoch_configmap: String,
}

impl Args {
    /// The maximum TTL: `--max-ttl`, else the old `--max-ttl-ms`, else 30 s.
    pub fn max_ttl(&self) -> Duration {
        self.max_ttl
            .or(self.max_ttl_ms)
            .unwrap_or(Duration::from_secs(30))
    }
}

#[derive(serde::Serialize)]
struct EffectiveConfig<'a> {
    grpc_addr: SocketAddr,
    admin_addr: SocketAddr,
    #[serde(serialize_with = "runtime::duration::serialize")]
    max_ttl: Duration,
    namespace: &'a str,
    epoch_configmap: &'a str,
}

/// Runs the lease server until SIGTERM/SIGINT.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let max_ttl = args.max_ttl();
    anyhow::ensure!(!max_ttl.is_zero(), "--max-ttl must be longer than zero");
    let config = EffectiveConfig {
        grpc_addr: args.grpc_addr,
        admin_addr: args.admin.admin_addr,
        max_ttl,
        namespace: &args.namespace,
        epoch_configmap: &args.epoch_configmap,
    };
    let daemon = Daemon::start(COMPONENT, &args.client, &args.admin, &args.log, &config).await?;
    let ready = daemon.readiness.register("epoch and gRPC listener");
    let epoch = epoch::advance(
        daemon.client.clone(),
        &args.namespace,
        &args.epoch_configmap,
    )
    .await
    .context("advance the persisted epoch")?;
    let table = LeaseTable::new(epoch.clone(), Limits { max_ttl }, Instant::now());
    let service = LeaseService::new(table);

    let listener = tokio::net::TcpListener::bind(args.grpc_addr)
        .await
        .with_context(|| format!("bind gRPC listener on {}", args.grpc_addr))?;
    let grpc_addr = listener.local_addr()?;
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<lease::pb::lease_service_server::LeaseServiceServer<LeaseService>>()
        .await;
    tracing::info!(
        %grpc_addr,
        epoch = epoch.number,
        quiet_period_ms = max_ttl.as_millis() as u64,
        "serving leases; nothing new is granted during the quiet period"
    );
    ready.set_ready_with(&format!("epoch {}, gRPC on {grpc_addr}", epoch.number));

    let shutdown = daemon.shutdown.clone();
    daemon
        .run(async move {
            let closing = {
                let service = service.clone();
                let shutdown = shutdown.clone();
                async move {
                    shutdown.wait().await;
                    // Open Watch streams would otherwise keep the graceful shutdown waiting.
                    service.close();
                }
            };
            let server = tonic::transport::Server::builder()
                .add_service(health_service)
                .add_service(service.clone().into_server())
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(listener),
                    closing,
                );
            let (served, ()) = tokio::join!(server, service.run_expiry(shutdown.wait()));
            served.context("gRPC server")
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent() {
        Args::command().debug_assert();
        let args = Args::parse_from([
            "lease-server",
            "--grpc-addr",
            "127.0.0.1:0",
            "--max-ttl-ms",
            "2000",
        ]);
        assert_eq!(
            args.max_ttl(),
            Duration::from_secs(2),
            "the old flag keeps working"
        );
        assert_eq!(args.epoch_configmap, "lease-server-epoch");
        let args = Args::parse_from(["lease-server", "--max-ttl", "1m"]);
        assert_eq!(args.max_ttl(), Duration::from_secs(60));
        assert_eq!(
            Args::parse_from(["lease-server"]).max_ttl(),
            Duration::from_secs(30)
        );
        assert!(
            Args::try_parse_from(["lease-server", "--max-ttl", "1m", "--max-ttl-ms", "5"]).is_err()
        );
        assert!(Args::try_parse_from(["lease-server", "--max-ttl", "soon"]).is_err());
    }
}
