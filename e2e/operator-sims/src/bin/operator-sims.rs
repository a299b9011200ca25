//! `operator-sims`: runs the simulated third-party operators selected with `--sims` against the
//! API server of the kubeconfig. All logic lives in the library (`operator_sims::run`).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    operator_sims::run(operator_sims::Args::parse()).await
}
