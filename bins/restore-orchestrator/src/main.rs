//! `restore-orchestrator`: runs RestoreJobs. All logic lives in the library target
//! (`restore_orchestrator::run`); this file only parses arguments.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    restore_orchestrator::run(restore_orchestrator::Args::parse()).await
}
