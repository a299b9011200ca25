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
//! The gRPC port serves TLS (`--tls-cert-file`, `--tls-key-file`, reloaded on change) and every
//! request is authenticated by TokenReview and authorized by lease-name prefix ([`auth`]); only
//! `--insecure` (local development) serves plaintext to anyone. Without either the server refuses
//! to start.
//!
//! Invariants: nothing is served before the next epoch is persisted (so tokens never go backwards);
//! `/ready` turns true once the gRPC listener is bound and the epoch is persisted; leases live only
//! in memory (a restart loses them, which the quiet period and restart proofs make safe).

pub mod auth;
pub mod epoch;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use lease::{Authenticator, Authorization, CacheSettings, Guard, LeaseService, LeaseTable, Limits};
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
    /// PEM certificate chain served on the gRPC port (`tls.crt` of a kubernetes.io/tls Secret);
    /// loaded again when the file changes.
    #[arg(long, env = "TLS_CERT_FILE", requires = "tls_key_file")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of `--tls-cert-file` (`tls.key`).
    #[arg(long, env = "TLS_KEY_FILE", requires = "tls_cert_file")]
    pub tls_key_file: Option<PathBuf>,
    /// Local development only: plaintext gRPC, and every caller may touch every lease (no
    /// authentication, no authorization).
    #[arg(long, env = "INSECURE", conflicts_with_all = ["tls_cert_file", "tls_key_file"])]
    pub insecure: bool,
    /// The audience callers' ServiceAccount tokens must be issued for (checked by TokenReview).
    #[arg(long, env = "TOKEN_AUDIENCE", default_value = "cozy-backups-lease")]
    pub token_audience: String,
    /// How long a token review is reused at most (shorter when the token expires sooner).
    #[arg(long, env = "TOKEN_CACHE_TTL", default_value = "60s", value_parser = runtime::duration::parse)]
    pub token_cache_ttl: Duration,
    /// Who may touch which leases, `<user name>=<lease-name prefix>`, repeatable (comma-separated
    /// in the environment), e.g.
    /// `system:serviceaccount:cozy-backup-controller:backup-runner=backup-runner/`. Replaces the
    /// default: each daemon's ServiceAccount (in this namespace; apidef-restarter's in
    /// `--platform-namespace`) may touch `<component>/`.
    #[arg(long, env = "AUTHORIZE", value_delimiter = ',')]
    pub authorize: Vec<String>,
    /// The platform namespace apidef-restarter's ServiceAccount lives in (for the default
    /// authorization).
    #[arg(long, env = "PLATFORM_NAMESPACE", default_value = "cozy-system")]
    pub platform_namespace: String,
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
    /// `tls` or `insecure`.
    transport: &'static str,
    tls_cert_file: Option<&'a std::path::Path>,
    tls_key_file: Option<&'a std::path::Path>,
    token_audience: &'a str,
    #[serde(serialize_with = "runtime::duration::serialize")]
    token_cache_ttl: Duration,
    authorize: Vec<String>,
}

impl Args {
    /// The authorization map: `--authorize` rules, else the default per component.
    pub fn authorization(&self) -> anyhow::Result<Authorization> {
        if self.authorize.is_empty() {
            return Ok(auth::default_authorization(
                &self.namespace,
                &self.platform_namespace,
            ));
        }
        Authorization::from_rules(&self.authorize).map_err(|e| anyhow::anyhow!("--authorize: {e}"))
    }

    /// Checks that the server is either secured or explicitly insecure.
    pub fn check_transport(&self) -> anyhow::Result<()> {
        anyhow::ensure!(
            self.insecure || self.tls_cert_file.is_some(),
            "the lease server serves TLS with authenticated callers: give --tls-cert-file and \
             --tls-key-file (TLS_CERT_FILE, TLS_KEY_FILE), or --insecure (INSECURE=true) for local \
             development (plaintext, every caller may touch every lease)"
        );
        Ok(())
    }
}

/// Runs the lease server until SIGTERM/SIGINT.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let max_ttl = args.max_ttl();
    anyhow::ensure!(!max_ttl.is_zero(), "--max-ttl must be longer than zero");
    args.check_transport()?;
    let authorization = args.authorization()?;
    let provider = tls::provider();
    let cert = match (&args.tls_cert_file, &args.tls_key_file) {
        (Some(cert), Some(key)) => Some(Arc::new(tls::ReloadingCert::new(
            tls::CertFiles {
                cert: cert.clone(),
                key: key.clone(),
            },
            provider.clone(),
        )?)),
        _ => None,
    };
    let config = EffectiveConfig {
        grpc_addr: args.grpc_addr,
        admin_addr: args.admin.admin_addr,
        max_ttl,
        namespace: &args.namespace,
        epoch_configmap: &args.epoch_configmap,
        transport: if args.insecure { "insecure" } else { "tls" },
        tls_cert_file: args.tls_cert_file.as_deref(),
        tls_key_file: args.tls_key_file.as_deref(),
        token_audience: &args.token_audience,
        token_cache_ttl: args.token_cache_ttl,
        authorize: authorization
            .rules()
            .map(|(user, prefix)| format!("{user}={prefix}"))
            .collect(),
    };
    let daemon = Daemon::start(COMPONENT, &args.client, &args.admin, &args.log, &config).await?;
    if args.insecure {
        tracing::warn!(
            "insecure mode: plaintext gRPC and no authentication; any caller that reaches the port \
             may take any lease (local development only)"
        );
    }
    let ready = daemon.readiness.register("epoch and gRPC listener");
    let epoch = epoch::advance(
        daemon.client.clone(),
        &args.namespace,
        &args.epoch_configmap,
    )
    .await
    .context("advance the persisted epoch")?;
    let table = LeaseTable::new(epoch.clone(), Limits { max_ttl }, Instant::now());
    let mut service = LeaseService::new(table);
    if !args.insecure {
        let reviewer = Arc::new(auth::KubeReviewer::new(
            daemon.client.clone(),
            args.token_audience.clone(),
        ));
        let settings = CacheSettings {
            ttl: args.token_cache_ttl,
            ..CacheSettings::default()
        };
        service = service.with_guard(Guard {
            authenticator: Authenticator::new(reviewer, settings),
            authorization,
        });
    }

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
        tls = cert.is_some(),
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
            let router = tonic::transport::Server::builder()
                .add_service(health_service)
                .add_service(service.clone().into_server());
            let server = async move {
                match cert {
                    Some(cert) => {
                        let config = tls::server_config(cert, provider)?;
                        router
                            .serve_with_incoming_shutdown(tls::incoming(listener, config), closing)
                            .await
                    }
                    None => {
                        router
                            .serve_with_incoming_shutdown(
                                tokio_stream::wrappers::TcpListenerStream::new(listener),
                                closing,
                            )
                            .await
                    }
                }
                .context("gRPC server")
            };
            let (served, ()) = tokio::join!(server, service.run_expiry(shutdown.wait()));
            served
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

    #[test]
    fn the_server_is_either_secured_or_explicitly_insecure() {
        let err = Args::parse_from(["lease-server"])
            .check_transport()
            .unwrap_err()
            .to_string();
        for flag in ["--tls-cert-file", "--tls-key-file", "--insecure"] {
            assert!(err.contains(flag), "{err}");
        }
        Args::parse_from(["lease-server", "--insecure"])
            .check_transport()
            .unwrap();
        let tls = Args::parse_from(["lease-server", "--tls-cert-file=/c", "--tls-key-file=/k"]);
        tls.check_transport().unwrap();
        assert_eq!(tls.token_audience, "cozy-backups-lease");
        assert!(Args::try_parse_from(["lease-server", "--tls-cert-file=/c"]).is_err());
        assert!(
            Args::try_parse_from([
                "lease-server",
                "--insecure",
                "--tls-cert-file=/c",
                "--tls-key-file=/k"
            ])
            .is_err()
        );
    }

    #[test]
    fn authorize_rules_replace_the_default_map() {
        let default = Args::parse_from(["lease-server", "--namespace", "ns"])
            .authorization()
            .unwrap();
        assert!(default.allows(
            "system:serviceaccount:ns:backup-runner",
            "backup-runner/leader"
        ));
        let args = Args::parse_from([
            "lease-server",
            "--authorize",
            "system:serviceaccount:ns:c1=x/",
            "--authorize=system:serviceaccount:ns:c2=x/",
        ]);
        let map = args.authorization().unwrap();
        assert!(map.allows("system:serviceaccount:ns:c2", "x/leader"));
        assert!(!map.allows(
            "system:serviceaccount:ns:backup-runner",
            "backup-runner/leader"
        ));
        let err = Args::parse_from(["lease-server", "--authorize", "u=x"])
            .authorization()
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--authorize: authorization rule \"u=x\""),
            "{err}"
        );
    }
}
