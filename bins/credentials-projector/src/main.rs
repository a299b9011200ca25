//! `credentials-projector`: parses its flags and runs the daemon (all logic lives in the library).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    credentials_projector::run(credentials_projector::Args::parse()).await
}
