//! Command line: the shared runtime groups and the cleaner's own settings.

use std::time::Duration;

use clap::Parser;
use runtime::{AdminArgs, ClientArgs, LeaseArgs, LogArgs};
use serde::Serialize;

/// Applies retention policies and deletes expired failed backups.
#[derive(Parser, Debug, Clone)]
#[command(name = "retention-cleaner", version, about)]
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
    pub cleaner: CleanerArgs,
}

/// The cleaner's settings.
#[derive(clap::Args, Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanerArgs {
    /// How long a failed BackupJob or Backup is kept before it is deleted: a number of minutes
    /// (`1440`), or a duration (`90s`, `2h`). `0` disables the cleanup: failed ones stay listed.
    #[arg(long, env = "FAILED_BACKUP_TTL", default_value = "1440", value_parser = ttl)]
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub failed_backup_ttl: Duration,
    /// Compute and report every sweep (Events, metrics) but delete and stop nothing.
    #[arg(long, env = "DRY_RUN", action = clap::ArgAction::Set, default_value_t = false, num_args = 0..=1, default_missing_value = "true")]
    pub dry_run: bool,
    /// At most this many deletions per sweep in one namespace (0 deletes nothing); the rest wait
    /// for the next sweep.
    #[arg(long, env = "MAX_DELETIONS_PER_SWEEP", default_value_t = retention::DEFAULT_MAX_DELETIONS_PER_NAMESPACE)]
    pub max_deletions_per_sweep: usize,
    /// Refuse (Event, metric, no deletion) a Plan's sweep that would delete more than this share
    /// (percent) of its successful Backups at once; 100 never refuses.
    #[arg(long, env = "MAX_DELETE_PERCENT", default_value_t = retention::DEFAULT_MAX_DELETE_PERCENT, value_parser = clap::value_parser!(u8).range(0..=100))]
    pub max_delete_percent: u8,
    /// The safety sweep interval (sweeps also run on every change, on winning leadership and
    /// when the next expiry comes).
    #[arg(long, env = "SWEEP_INTERVAL", default_value = "1h", value_parser = runtime::duration::parse)]
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub sweep_interval: Duration,
    /// Quiet period after the last change before a sweep (a burst of changes makes one sweep).
    #[arg(long, env = "DEBOUNCE", default_value = "2s", value_parser = runtime::duration::parse)]
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub debounce: Duration,
}

impl CleanerArgs {
    /// The decision settings.
    pub fn retention(&self) -> retention::Config {
        retention::Config {
            failed_ttl: (!self.failed_backup_ttl.is_zero()).then_some(self.failed_backup_ttl),
            max_deletions_per_namespace: self.max_deletions_per_sweep,
            max_delete_percent: self.max_delete_percent,
            dry_run: self.dry_run,
        }
    }
}

/// `--failed-backup-ttl`: whole minutes, as the setting has always been given, or a duration.
fn ttl(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<u64>() {
        Ok(minutes) => minutes
            .checked_mul(60)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{minutes} minutes is too long")),
        Err(_) => runtime::duration::parse(s).map_err(|e| {
            format!("expected minutes (1440) or a duration (90s, 2h), got {s:?}: {e}")
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent_with_documented_defaults() {
        Args::command().debug_assert();
        let a = Args::parse_from(["retention-cleaner"]);
        let c = a.cleaner.retention();
        assert_eq!(c.failed_ttl, Some(Duration::from_secs(1440 * 60)));
        assert_eq!(c.max_deletions_per_namespace, 50);
        assert_eq!(c.max_delete_percent, 75);
        assert!(!c.dry_run);
        assert_eq!(a.cleaner.sweep_interval, Duration::from_secs(3600));
    }

    #[test]
    fn the_ttl_is_minutes_or_a_duration_and_zero_disables() {
        let ttl_of = |v: &str| {
            Args::try_parse_from(["retention-cleaner", "--failed-backup-ttl", v])
                .map(|a| a.cleaner.retention().failed_ttl)
        };
        assert_eq!(ttl_of("30").unwrap(), Some(Duration::from_secs(1800)));
        assert_eq!(ttl_of("90s").unwrap(), Some(Duration::from_secs(90)));
        assert_eq!(ttl_of("0").unwrap(), None);
        let err = ttl_of("a day").unwrap_err().to_string();
        assert!(err.contains("--failed-backup-ttl"), "{err}");
        assert!(ttl_of("-5").is_err());
    }

    #[test]
    fn limits_are_checked() {
        assert!(
            Args::try_parse_from(["retention-cleaner", "--max-delete-percent", "101"]).is_err()
        );
        let a = Args::parse_from([
            "retention-cleaner",
            "--dry-run",
            "--max-delete-percent",
            "100",
        ]);
        assert!(a.cleaner.dry_run);
        assert_eq!(a.cleaner.retention().max_delete_percent, 100);
    }
}
