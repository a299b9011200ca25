//! `devcluster`: the dev control plane (see the library docs; `hack/dev-up.sh` wraps it).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            // kube's client logs every failed request as an error; the failures that matter end
            // the plane with their cause, and kube-apiserver answers /readyz 500 while it starts.
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into()),
        )
        .init();
    devcluster::run(devcluster::Args::parse()).await
}
