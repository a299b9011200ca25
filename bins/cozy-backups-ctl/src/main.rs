//! `cozy-backups-ctl` entry point: parse the arguments, run the subcommand, print to stdout.

use clap::Parser;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = cozy_backups_ctl::Args::parse();
    let out = cozy_backups_ctl::run(args).await?;
    print!("{out}");
    Ok(())
}
