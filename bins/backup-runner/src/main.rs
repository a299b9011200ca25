//! `backup-runner`: runs BackupJobs and Plans. All logic lives in the library target
//! (`backup_runner::run`); this file only parses arguments.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    backup_runner::run(backup_runner::Args::parse()).await
}
