//! `devcluster`: the dev control plane (see the library docs; `hack/dev-up.sh` wraps it).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .init();
    devcluster::run(devcluster::Args::parse()).await
}
