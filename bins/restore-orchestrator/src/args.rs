//! Command line: the shared runtime groups and the orchestrator's own settings.

use clap::Parser;
use runtime::{AdminArgs, ClientArgs, LeaseArgs, LogArgs};
use serde::Serialize;

/// Runs RestoreJobs.
#[derive(Parser, Debug, Clone)]
#[command(name = "restore-orchestrator", version, about)]
pub struct Args {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub admin: AdminArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub log: LogArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub orchestrator: OrchestratorArgs,
}

/// The orchestrator's settings.
#[derive(clap::Args, Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrchestratorArgs {
    /// Wait for the credentials projector's `CredentialsProjected` condition before dispatching a
    /// RestoreJob (set to false only where the strategies need no projected Secret).
    #[arg(long = "require-credentials-projection", env = "REQUIRE_CREDENTIALS_PROJECTION", action = clap::ArgAction::Set, default_value_t = true)]
    pub require_projection: bool,
    /// How many RestoreJobs are reconciled at once.
    #[arg(long, env = "CONCURRENCY", default_value_t = 16)]
    pub concurrency: u16,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent_with_documented_defaults() {
        Args::command().debug_assert();
        let a = Args::parse_from(["restore-orchestrator"]);
        assert!(a.orchestrator.require_projection);
        assert_eq!(a.orchestrator.concurrency, 16);
        let a = Args::parse_from([
            "restore-orchestrator",
            "--require-credentials-projection=false",
        ]);
        assert!(!a.orchestrator.require_projection);
        assert!(Args::try_parse_from(["restore-orchestrator", "--concurrency", "many"]).is_err());
    }
}
