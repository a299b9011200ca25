//! `cozy-backups-ctl`: the operator CLI of the backup platform. Each subcommand is one module-level
//! function over a kube client that returns the text to print, so tests call it directly and other
//! issues add subcommands beside it.
//!
//! ```text
//!  cozy-backups-ctl [--kubeconfig …] find-kind HTTPCache [-o yaml|json]
//!      └─► appdef::KindCache::for_process (one list, exact spec.application.kind match) ─► yaml/json
//! ```
//!
//! Invariants: a CLI is short-lived, so it caches the ApplicationDefinition list for its lifetime
//! (the seed's guidance); errors name what failed (the kind, the group/version/resource listed).

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use runtime::ClientArgs;

/// Operator CLI of the cozy-backups platform.
#[derive(Parser, Debug)]
#[command(name = "cozy-backups-ctl", version, about)]
pub struct Args {
    /// How to reach the Kubernetes API.
    #[command(flatten)]
    pub client: ClientArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the ApplicationDefinition whose spec.application.kind is KIND (exact, case-sensitive;
    /// e.g. HTTPCache, whose definition is named http-cache).
    FindKind {
        /// The tenant-facing kind, e.g. `HTTPCache`.
        kind: String,
        /// Output format.
        #[arg(short, long, env = "COZY_BACKUPS_CTL_OUTPUT", value_enum, default_value_t = Output::Yaml)]
        output: Output,
    },
}

/// Output formats.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// YAML.
    Yaml,
    /// Pretty-printed JSON.
    Json,
}

/// Runs the command and returns what to print.
pub async fn run(args: Args) -> anyhow::Result<String> {
    match args.command {
        Command::FindKind { kind, output } => {
            let client = runtime::client(&args.client).await?;
            find_kind(client, &kind, output).await
        }
    }
}

/// `find-kind`: the whole definition of `kind`, rendered.
pub async fn find_kind(client: kube::Client, kind: &str, output: Output) -> anyhow::Result<String> {
    let cache = appdef::KindCache::for_process(client);
    let def = cache
        .find(kind)
        .await
        .with_context(|| format!("find-kind {kind:?}"))?;
    Ok(match output {
        Output::Yaml => serde_yaml::to_string(&def).context("render YAML")?,
        Output::Json => serde_json::to_string_pretty(&def).context("render JSON")? + "\n",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent() {
        Args::command().debug_assert();
        let args = Args::parse_from(["cozy-backups-ctl", "find-kind", "HTTPCache", "-o", "json"]);
        match args.command {
            Command::FindKind { kind, output } => {
                assert_eq!((kind.as_str(), output), ("HTTPCache", Output::Json));
            }
        }
    }
}
