//! Command line: the shared runtime groups and the orchestrator's own settings.

use std::time::Duration;

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
    /// How long the safety backup of a successful in-place PostgreSQL restore (catalog Backup
    /// `<job>-safety`) is kept after the restore ended; the safety backup of a failed restore is
    /// kept until someone deletes it.
    #[arg(long, env = "SAFETY_BACKUP_RETENTION", default_value = "168h", value_parser = runtime::duration::parse)]
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub safety_backup_retention: Duration,
    /// How often the leading replica advances running restore drills and starts due ones
    /// (`Plan.spec.verification`, `docs/drills.md`).
    #[arg(long, env = "DRILL_INTERVAL", default_value = "30s", value_parser = runtime::duration::parse)]
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub drill_interval: Duration,
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
        assert_eq!(a.orchestrator.drill_interval, Duration::from_secs(30));
        assert_eq!(a.orchestrator.concurrency, 16);
        assert_eq!(
            a.orchestrator.safety_backup_retention,
            Duration::from_secs(7 * 24 * 3600)
        );
        assert!(
            Args::try_parse_from([
                "restore-orchestrator",
                "--safety-backup-retention",
                "a week"
            ])
            .is_err()
        );
        let a = Args::parse_from([
            "restore-orchestrator",
            "--require-credentials-projection=false",
        ]);
        assert!(!a.orchestrator.require_projection);
        assert!(Args::try_parse_from(["restore-orchestrator", "--concurrency", "many"]).is_err());
    }
}
