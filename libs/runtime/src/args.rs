//! clap argument groups shared by every daemon. Each flag has an environment-variable fallback.

use clap::{Args, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;

/// How to reach the Kubernetes API.
#[derive(Args, Clone, Debug, Default)]
pub struct ClientArgs {
    /// Path of a kubeconfig; without it the in-cluster configuration or `~/.kube/config` is used.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use instead of the current one.
    #[arg(long, env = "KUBE_CONTEXT")]
    pub kube_context: Option<String>,
}

/// The admin HTTP server (`/live`, `/ready`, `/metrics`).
#[derive(Args, Clone, Debug)]
pub struct AdminArgs {
    /// Address of the admin server.
    #[arg(long, env = "ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: SocketAddr,
    /// Write the bound admin address (`IP:PORT`) to this file once listening; with
    /// `--admin-addr 127.0.0.1:0` a supervisor (the test harness) learns the port without racing.
    #[arg(long, env = "ADMIN_ADDR_FILE")]
    pub admin_addr_file: Option<PathBuf>,
}

/// Log output.
#[derive(Args, Clone, Debug)]
pub struct LogArgs {
    /// Log line format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Plain)]
    pub log_format: LogFormat,
    /// Log filter in `tracing` EnvFilter syntax, e.g. `info` or `info,kube=debug`.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
}

/// Log line formats.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Plain,
    /// One JSON object per line.
    Json,
}

/// Leadership and work leases through the lease service.
#[derive(Args, Clone, Debug)]
pub struct LeaseArgs {
    /// gRPC endpoint of the lease server, or `none` for single-replica mode (this replica always
    /// leads). Only use `none` when exactly one replica runs. `https://host:port` verifies the
    /// server with `--lease-ca-file` and authenticates with `--lease-token-file`;
    /// `http://host:port` (or `host:port`) is for a server in insecure mode.
    #[arg(long, env = "LEASE_ENDPOINT", default_value = "none")]
    pub lease_endpoint: String,
    /// PEM CA file that verifies the lease server's certificate (https endpoints).
    #[arg(long, env = "LEASE_CA_FILE")]
    pub lease_ca_file: Option<PathBuf>,
    /// The name the lease server's certificate must carry; defaults to the endpoint's host.
    #[arg(long, env = "LEASE_SERVER_NAME")]
    pub lease_server_name: Option<String>,
    /// The ServiceAccount token this replica authenticates with (https endpoints), re-read when
    /// it changes: a projected token whose audience is the lease server's `--token-audience`.
    #[arg(
        long,
        env = "LEASE_TOKEN_FILE",
        default_value = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )]
    pub lease_token_file: PathBuf,
    /// Identity of this replica in leases; defaults to the pod name, else `<hostname>-<pid>`.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// How long a lease (leadership, a work lease) outlives a replica that stops renewing it: a
    /// standby takes over within one TTL of a crash, and a replica that cannot renew stops acting
    /// within four fifths of it. Must not exceed the lease server's `--max-ttl`.
    #[arg(long, env = "LEASE_TTL", default_value = "15s", value_parser = crate::duration::parse)]
    pub lease_ttl: std::time::Duration,
}

impl LeaseArgs {
    /// True in single-replica mode.
    pub fn is_single_replica(&self) -> bool {
        self.lease_endpoint.eq_ignore_ascii_case("none")
    }

    /// How the client secures its connection (used for https endpoints only).
    pub fn security(&self) -> lease::Security {
        lease::Security {
            ca_file: self.lease_ca_file.clone(),
            server_name: self.lease_server_name.clone(),
            token_file: Some(self.lease_token_file.clone()),
        }
    }

    /// This replica's identity: `--identity`/`POD_NAME`, else `<hostname>-<pid>`.
    pub fn identity(&self) -> String {
        self.identity.clone().unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "localhost".into());
            format!("{host}-{}", std::process::id())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct All {
        #[command(flatten)]
        client: ClientArgs,
        #[command(flatten)]
        admin: AdminArgs,
        #[command(flatten)]
        log: LogArgs,
        #[command(flatten)]
        lease: LeaseArgs,
    }

    #[test]
    fn groups_compose_without_conflicts() {
        All::command().debug_assert();
        let all = All::parse_from(["d", "--log-format", "json", "--lease-endpoint", "none"]);
        assert_eq!(all.log.log_format, LogFormat::Json);
        assert!(all.lease.is_single_replica());
        assert!(!all.lease.identity().is_empty());
    }
}
