//! `lease-server` binary: parses [`lease_server::Args`] and runs the server (see the library).

use clap::Parser as _;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    lease_server::run(lease_server::Args::parse()).await
}
