//! The `kube-emulator` command line: arguments and the foreground run loop.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::emulator::{Auth, Config, Emulator};

/// Runs a Kubernetes API emulator on loopback HTTP.
#[derive(Debug, Parser)]
#[command(name = "kube-emulator", version)]
pub struct Args {
    /// Port to listen on (0 picks a free one; the chosen port is printed).
    #[arg(long, env = "KUBE_EMULATOR_PORT", default_value_t = 6443)]
    pub port: u16,
    /// Address to listen on.
    #[arg(long, env = "KUBE_EMULATOR_HOST", default_value = "127.0.0.1")]
    pub host: String,
    /// Where to write a kubeconfig pointing at the emulator.
    #[arg(long, env = "KUBE_EMULATOR_KUBECONFIG_OUT")]
    pub kubeconfig_out: Option<PathBuf>,
    /// Directory (or file) of manifests to preload, CRDs first; repeatable.
    #[arg(long = "crds", env = "KUBE_EMULATOR_CRDS")]
    pub crds: Vec<PathBuf>,
    /// Snapshot file: loaded at start if present, written on exit.
    #[arg(long, env = "KUBE_EMULATOR_SNAPSHOT")]
    pub snapshot: Option<PathBuf>,
    /// Mirror the request audit log to this JSONL file.
    #[arg(long, env = "KUBE_EMULATOR_AUDIT_LOG")]
    pub audit_log: Option<PathBuf>,
    /// Watch history size in events.
    #[arg(long, env = "KUBE_EMULATOR_HISTORY_SIZE", default_value_t = 10_000)]
    pub history_size: usize,
    /// Seconds between watch bookmarks.
    #[arg(long, env = "KUBE_EMULATOR_BOOKMARK_SECONDS", default_value_t = 60)]
    pub bookmark_seconds: u64,
    /// Authentication and RBAC: `on` (bearer tokens required, the kubeconfig carries the admin token and
    /// points at https) or `off` (every request is the admin, plain http kubeconfig).
    #[arg(long, env = "KUBE_EMULATOR_AUTH", default_value = "on", value_parser = ["on", "off"])]
    pub authentication: String,
}

impl Args {
    /// The emulator configuration these arguments describe.
    pub fn config(&self) -> Config {
        Config {
            host: self.host.clone(),
            port: self.port,
            kubeconfig_out: self.kubeconfig_out.clone(),
            crd_dirs: self.crds.clone(),
            snapshot: self.snapshot.clone(),
            audit_log: self.audit_log.clone(),
            history_size: self.history_size,
            bookmark_interval: Duration::from_secs(self.bookmark_seconds.max(1)),
            auth: if self.authentication == "off" {
                Auth::Off
            } else {
                Auth::On
            },
            ..Config::default()
        }
    }
}

/// The whole `main` of an emulator binary: logging, argument parsing, [`run`].
pub async fn main_from_env() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    match run(Args::parse()).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = format!("{e:#}"), "kube-emulator failed");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Starts the emulator, prints its address, and serves until Ctrl-C or SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    use anyhow::Context as _;
    let running = Emulator::start(args.config())
        .await
        .context("starting the emulator")?;
    println!("kube-emulator listening on {}", running.url());
    println!("kubeconfig: {}", running.kubeconfig_path().display());
    wait_for_signal().await;
    running.shutdown().await;
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn wait_for_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent() {
        Args::command().debug_assert();
    }
}
