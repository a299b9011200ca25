//! `apidef-restarter` entry point: parse the arguments and run the daemon (see the library docs).

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    apidef_restarter::run(apidef_restarter::Args::parse()).await
}
