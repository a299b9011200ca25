//! `retention-cleaner` entry point: parse the arguments and run the daemon (see the library docs).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    retention_cleaner::run(retention_cleaner::Args::parse()).await
}
