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
    /// The system bucket's credentials Secret, `<namespace>/<name>` (read by name): the storage
    /// breaker probes the object store through it (`docs/storage-breaker.md`). Empty: no breaker.
    #[arg(
        long,
        env = "STORAGE_BUCKET_SECRET",
        default_value = "tenant-root/bucket-cozy-backups-system-credentials",
        value_parser = secret_or_empty
    )]
    pub storage_bucket_secret: String,
    /// The S3 endpoint URL the probe uses (default: `https://` + the bucket Secret's endpoint).
    #[arg(long, env = "STORAGE_ENDPOINT", default_value = "")]
    pub storage_endpoint: String,
    /// A PEM bundle of CAs trusted for the S3 endpoint (besides the public roots).
    #[arg(long, env = "STORAGE_CA_FILE")]
    pub storage_ca_file: Option<std::path::PathBuf>,
    /// The storage breaker.
    #[command(flatten)]
    #[serde(flatten)]
    pub breaker: storage_breaker::BreakerArgs,
}

fn secret_or_empty(s: &str) -> Result<String, String> {
    match s.split_once('/') {
        _ if s.is_empty() => Ok(String::new()),
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(s.to_owned())
        }
        _ => Err(format!(
            "{s:?} is not <namespace>/<name> (or empty, for no storage breaker)"
        )),
    }
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
        let a = Args::parse_from(["restore-orchestrator"]).orchestrator;
        assert_eq!(
            a.storage_bucket_secret,
            "tenant-root/bucket-cozy-backups-system-credentials"
        );
        assert_eq!(
            (
                a.breaker.storage_breaker_failures,
                a.breaker.storage_recovery_concurrency
            ),
            (3, 4)
        );
        assert_eq!(a.breaker.storage_breaker_window, Duration::from_secs(300));
        let off = Args::parse_from(["restore-orchestrator", "--storage-bucket-secret="]);
        assert_eq!(off.orchestrator.storage_bucket_secret, "");
        let err = |flags: &[&str]| {
            let mut argv = vec!["restore-orchestrator"];
            argv.extend_from_slice(flags);
            Args::try_parse_from(argv).unwrap_err().to_string()
        };
        assert!(err(&["--storage-bucket-secret", "no-namespace"]).contains("<namespace>/<name>"));
        assert!(err(&["--storage-breaker-window", "0s"]).contains("positive"));
        assert!(err(&["--storage-breaker-failures", "0"]).contains("0"));
    }
}
