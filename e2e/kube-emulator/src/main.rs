//! `kube-emulator`: serve the Kubernetes API emulator in the foreground (see the library docs).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    kube_emulator::cli::run(kube_emulator::cli::Args::parse()).await
}
