//! `strategy-renderer`: renders the platform default backup objects live. All logic lives in the
//! library target (`strategy_renderer::run`); this file only parses arguments.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    strategy_renderer::run(strategy_renderer::Args::parse()).await
}
