//! Command line: the shared runtime groups and the runner's own settings.

use std::time::Duration;

use clap::Parser;
use runtime::{AdminArgs, ClientArgs, LeaseArgs, LogArgs};
use serde::Serialize;

/// Runs BackupJobs and Plans.
#[derive(Parser, Debug, Clone)]
#[command(name = "backup-runner", version, about)]
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
    pub runner: RunnerArgs,
}

/// The runner's settings.
#[derive(clap::Args, Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunnerArgs {
    /// How long a driver-side backup may run before the BackupJob fails (upstream waits forever on
    /// a cnpg Backup stuck `running`). A BackupClass route overrides it with the parameter
    /// `backupDeadline` (e.g. `12h`).
    #[arg(long, env = "BACKUP_DEADLINE", default_value = "6h", value_parser = runtime::duration::parse)]
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub backup_deadline: Duration,
    /// Wait for the credentials projector's `CredentialsProjected` condition before dispatching a
    /// job (set to false only where the strategies need no projected Secret).
    #[arg(long = "require-credentials-projection", env = "REQUIRE_CREDENTIALS_PROJECTION", action = clap::ArgAction::Set, default_value_t = true)]
    pub require_projection: bool,
    /// How long a job waits silently for its first `CredentialsProjected` condition before it
    /// reports `CredentialsProjectionPending` (the projector normally answers within milliseconds).
    #[arg(long, env = "PROJECTION_GRACE", default_value = "10s", value_parser = runtime::duration::parse)]
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub projection_grace: Duration,
    /// How many BackupJobs are reconciled at once.
    #[arg(long, env = "CONCURRENCY", default_value_t = 32)]
    pub concurrency: u16,
    /// Plans: how late a missed schedule slot may still be caught up (one run at most; older
    /// missed slots are reported by a `MissedSchedule` Event). Must be positive.
    #[arg(long, env = "PLAN_STARTING_DEADLINE", default_value = "300s", value_parser = positive_duration)]
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub plan_starting_deadline: Duration,
    /// Plans: the time zone (IANA name) of schedules without a `CRON_TZ=`/`TZ=` prefix.
    #[arg(long, env = "PLAN_TIME_ZONE", default_value = "UTC", value_parser = schedule::parse_zone)]
    #[serde(serialize_with = "serialize_zone")]
    pub plan_time_zone: schedule::chrono_tz::Tz,
    /// Catalog records in the system bucket (docs/disaster-recovery.md): write one per Backup,
    /// delete it with the Backup, and re-create missing Backups from them. Off unless set (the
    /// shipped Deployment sets `CATALOG=true`): it needs the two Secrets of the catalog Roles.
    #[arg(long, env = "CATALOG", action = clap::ArgAction::Set, default_value_t = false)]
    pub catalog: bool,
    /// The system bucket's credentials Secret, `<namespace>/<name>` (read by name).
    #[arg(
        long,
        env = "CATALOG_BUCKET_SECRET",
        default_value = "tenant-root/bucket-cozy-backups-system-credentials",
        value_parser = namespaced_name
    )]
    pub catalog_bucket_secret: String,
    /// The Secret holding the records' HMAC key, `<namespace>/<name>`; created (32 random bytes)
    /// when absent. Keep a copy outside the cluster: a new cluster needs the same key.
    #[arg(
        long,
        env = "CATALOG_KEY_SECRET",
        default_value = "cozy-backup-controller/cozy-backups-catalog-key",
        value_parser = namespaced_name
    )]
    pub catalog_key_secret: String,
    /// The S3 endpoint URL of the records (default: `https://` + the bucket Secret's endpoint).
    #[arg(long, env = "CATALOG_ENDPOINT", default_value = "")]
    pub catalog_endpoint: String,
    /// A PEM bundle of CAs trusted for the S3 endpoint (besides the public roots).
    #[arg(long, env = "CATALOG_CA_FILE")]
    pub catalog_ca_file: Option<std::path::PathBuf>,
    /// How often the leader re-creates Backups that are missing but have a valid record.
    #[arg(long, env = "CATALOG_SYNC_INTERVAL", default_value = "5m", value_parser = positive_duration)]
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub catalog_sync_interval: Duration,
    /// The storage breaker.
    #[command(flatten)]
    #[serde(flatten)]
    pub breaker: storage_breaker::BreakerArgs,
}

fn namespaced_name(s: &str) -> Result<String, String> {
    match s.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(s.to_owned())
        }
        _ => Err(format!("{s:?} is not <namespace>/<name>")),
    }
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    match runtime::duration::parse(s)? {
        d if d.is_zero() => Err("must be positive (a zero deadline never runs a slot)".into()),
        d => Ok(d),
    }
}

fn serialize_zone<S: serde::Serializer>(
    zone: &schedule::chrono_tz::Tz,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.serialize_str(zone.name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent_with_documented_defaults() {
        Args::command().debug_assert();
        let a = Args::parse_from(["backup-runner"]);
        assert_eq!(a.runner.backup_deadline, Duration::from_secs(6 * 3600));
        assert_eq!(a.runner.plan_starting_deadline, Duration::from_secs(300));
        assert!(a.runner.require_projection);
        assert!(!a.runner.catalog);
        assert_eq!(a.runner.catalog_sync_interval, Duration::from_secs(300));
        assert_eq!(
            a.runner.catalog_key_secret,
            "cozy-backup-controller/cozy-backups-catalog-key"
        );
        assert_eq!(a.runner.plan_time_zone, schedule::chrono_tz::UTC);
        assert!(Args::try_parse_from(["backup-runner", "--backup-deadline", "soon"]).is_err());
        let err = |args: &[&str]| {
            Args::try_parse_from([&["backup-runner"], args].concat())
                .unwrap_err()
                .to_string()
        };
        assert!(
            err(&["--plan-starting-deadline", "0s"]).contains("must be positive"),
            "{}",
            err(&["--plan-starting-deadline", "0s"])
        );
        assert!(err(&["--plan-time-zone", "Mars/Olympus"]).contains("unknown time zone"));
        assert!(err(&["--catalog-bucket-secret", "no-namespace"]).contains("<namespace>/<name>"));
        let a = Args::parse_from(["backup-runner", "--plan-time-zone", "Europe/Berlin"]);
        assert_eq!(a.runner.plan_time_zone, schedule::chrono_tz::Europe::Berlin);
    }
}
