//! The cleaner's metrics. Labels are bounded: kinds, contract reasons, namespaces.

use std::collections::BTreeMap;

/// Counter `{namespace, kind, reason}`: objects deleted (`RetentionExpired`, `FailedBackupExpired`).
pub const DELETIONS: &str = "cozy_backups_retention_cleaner_deletions_total";
/// Counter `{namespace}`: deletions the API refused or failed (retried with backoff).
pub const DELETION_ERRORS: &str = "cozy_backups_retention_cleaner_deletion_errors_total";
/// Gauge `{reason}`: objects the last sweep kept although a rule or the TTL would delete them,
/// by floor (`KeptNewestSuccess`, `KeptReferencedByRestore`, `KeptRecoveryWindow`, `KeptFailed`,
/// `RetentionRefused`), and objects it deferred (`RetentionDeferred`).
pub const KEPT: &str = "cozy_backups_retention_cleaner_kept";
/// Gauge: what the last sweep would delete in dry-run mode (0 when not in dry-run mode).
pub const DRY_RUN_CANDIDATES: &str = "cozy_backups_retention_cleaner_dry_run_candidates";
/// Counter `{namespace}`: Plans whose sweep was refused by mass-deletion protection.
pub const REFUSALS: &str = "cozy_backups_retention_cleaner_refusals_total";
/// Gauge: age in seconds of the oldest failed BackupJob or Backup still present (0 when none).
pub const OLDEST_FAILED_AGE: &str =
    "cozy_backups_retention_cleaner_oldest_failed_backup_age_seconds";
/// Counter `{namespace}`: FoundationDB backups stopped because their cluster keeps no Backup.
pub const FOUNDATIONDB_STOPS: &str =
    "cozy_backups_retention_cleaner_foundationdb_backups_stopped_total";
/// Counter `{namespace}`: CNPG ObjectStores whose barman retention was changed.
pub const OBJECT_STORE_UPDATES: &str =
    "cozy_backups_retention_cleaner_object_store_retention_updates_total";

/// Every reason the kept gauge reports, so that a floor that stops saving anything reads 0.
const KEPT_REASONS: &[&str] = {
    use api::contract::event_reasons as r;
    &[
        r::KEPT_NEWEST_SUCCESS,
        r::KEPT_REFERENCED_BY_RESTORE,
        r::KEPT_RECOVERY_WINDOW,
        r::KEPT_FAILED,
        r::RETENTION_REFUSED,
        r::RETENTION_DEFERRED,
    ]
};

/// Describes every metric.
pub fn describe() {
    metrics::describe_counter!(
        DELETIONS,
        "Objects the retention-cleaner deleted, by reason."
    );
    metrics::describe_counter!(
        DELETION_ERRORS,
        "Deletions that failed and are retried with backoff."
    );
    metrics::describe_gauge!(
        KEPT,
        "Objects the last sweep kept because of a floor, keepFailed, a refusal or the per-sweep cap."
    );
    metrics::describe_gauge!(
        DRY_RUN_CANDIDATES,
        "Objects the last dry-run sweep would have deleted."
    );
    metrics::describe_counter!(
        REFUSALS,
        "Plan sweeps refused because they would delete too large a share of the Plan's Backups."
    );
    metrics::describe_gauge!(
        OLDEST_FAILED_AGE,
        metrics::Unit::Seconds,
        "Age of the oldest failed BackupJob or Backup still present."
    );
    metrics::describe_counter!(
        FOUNDATIONDB_STOPS,
        "FoundationDB backups stopped because their cluster keeps no Backup."
    );
    metrics::describe_counter!(
        OBJECT_STORE_UPDATES,
        "CNPG ObjectStores whose barman retention the cleaner changed."
    );
}

/// What one sweep over every namespace saw, published as gauges once it is complete.
#[derive(Debug, Default)]
pub struct Totals {
    /// Kept by reason.
    pub kept: BTreeMap<&'static str, u64>,
    /// Dry-run candidates.
    pub dry_run_candidates: u64,
    /// Oldest failed object's age.
    pub oldest_failed_seconds: f64,
}

impl Totals {
    /// Publishes the gauges.
    pub fn publish(&self) {
        for reason in KEPT_REASONS {
            let n = self.kept.get(reason).copied().unwrap_or(0);
            metrics::gauge!(KEPT, "reason" => *reason).set(n as f64);
        }
        metrics::gauge!(DRY_RUN_CANDIDATES).set(self.dry_run_candidates as f64);
        metrics::gauge!(OLDEST_FAILED_AGE).set(self.oldest_failed_seconds);
    }
}

/// Counts a deletion.
pub fn deleted(namespace: &str, kind: &'static str, reason: &'static str) {
    metrics::counter!(DELETIONS, "namespace" => namespace.to_owned(), "kind" => kind, "reason" => reason)
        .increment(1);
}

/// Counts a failed deletion.
pub fn deletion_failed(namespace: &str) {
    metrics::counter!(DELETION_ERRORS, "namespace" => namespace.to_owned()).increment(1);
}

/// Counts a refusal.
pub fn refused(namespace: &str) {
    metrics::counter!(REFUSALS, "namespace" => namespace.to_owned()).increment(1);
}

/// Counts a stopped FoundationDB backup.
pub fn stopped(namespace: &str) {
    metrics::counter!(FOUNDATIONDB_STOPS, "namespace" => namespace.to_owned()).increment(1);
}

/// Counts an ObjectStore retention change.
pub fn object_store_updated(namespace: &str) {
    metrics::counter!(OBJECT_STORE_UPDATES, "namespace" => namespace.to_owned()).increment(1);
}
