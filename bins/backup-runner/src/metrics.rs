//! The runner's metrics, with bounded labels (namespace, application kind, strategy kind, result).

use api::contract::phases;

use api::backups::BackupJob;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Counter `{namespace, kind, strategy, result}`: BackupJobs that reached a terminal phase.
pub const RUNS: &str = "cozy_backups_backup_runner_backups_total";
/// Histogram `{kind, strategy}`: creation → terminal phase of a BackupJob, in seconds.
pub const DURATION: &str = "cozy_backups_backup_runner_backup_duration_seconds";
/// Gauge `{namespace, kind, application}`: Unix time of the application's last successful backup.
pub const LAST_SUCCESS: &str = "cozy_backups_backup_runner_last_success_timestamp_seconds";
/// Gauge: BackupJobs this replica is driving (holds a work lease for).
pub const IN_FLIGHT: &str = "cozy_backups_backup_runner_jobs_in_flight";
/// Counter: reconciles skipped because the cached job was the version this replica had already
/// written over (read-your-writes; its newer version's event follows).
pub const BEHIND: &str = "cozy_backups_backup_runner_reconciles_behind_own_write_total";
/// Gauge `{namespace, application}`: Unix time where the point-in-time recoverable window of a
/// PostgreSQL application opens, as its newest catalog Backup recorded it.
pub const WINDOW_START: &str =
    "cozy_backups_backup_runner_recoverable_window_start_timestamp_seconds";
/// Gauge `{namespace, application}`: Unix time where that window ends (the newest Backup's end).
pub const WINDOW_END: &str = "cozy_backups_backup_runner_recoverable_window_end_timestamp_seconds";

/// Counter `{reason}`: catalog records the sync refused (each object version counted once per
/// process), reasons as in `backup_storage::catalog::Rejection::reason`.
pub const CATALOG_REJECTED: &str = "cozy_backups_backup_runner_catalog_records_rejected_total";
/// Counter: Backups re-created from their catalog record.
pub const CATALOG_RESTORED: &str = "cozy_backups_backup_runner_catalog_records_restored_total";
/// Counter: catalog records written (a Backup's first record, or a changed one).
pub const CATALOG_WRITTEN: &str = "cozy_backups_backup_runner_catalog_records_written_total";
/// Counter: catalog records deleted with their Backup.
pub const CATALOG_DELETED: &str = "cozy_backups_backup_runner_catalog_records_deleted_total";
/// Counter: S3 requests made by sync passes (listings and record reads).
pub const CATALOG_SYNC_S3_REQUESTS: &str =
    "cozy_backups_backup_runner_catalog_sync_s3_requests_total";
/// Counter `{result}`: sync passes (`ok`, `unconfigured`, `error`).
pub const CATALOG_SYNCS: &str = "cozy_backups_backup_runner_catalog_syncs_total";

/// Describes every metric.
pub fn describe() {
    metrics::describe_counter!(
        CATALOG_REJECTED,
        "Catalog records refused by the sync, by reason (each object version once)."
    );
    metrics::describe_counter!(
        CATALOG_RESTORED,
        "Backups re-created from their catalog record."
    );
    metrics::describe_counter!(CATALOG_WRITTEN, "Catalog records written to the bucket.");
    metrics::describe_counter!(
        CATALOG_DELETED,
        "Catalog records deleted with their Backup."
    );
    metrics::describe_counter!(CATALOG_SYNCS, "Catalog sync passes, by result.");
    metrics::describe_counter!(
        CATALOG_SYNC_S3_REQUESTS,
        "S3 requests made by catalog sync passes."
    );
    for reason in backup_storage::catalog::Rejection::REASONS {
        metrics::counter!(CATALOG_REJECTED, "reason" => reason).increment(0);
    }
    metrics::describe_counter!(RUNS, "BackupJobs that reached a terminal phase, by result.");
    metrics::describe_histogram!(
        DURATION,
        metrics::Unit::Seconds,
        "Time from a BackupJob's creation to its terminal phase."
    );
    metrics::describe_gauge!(
        LAST_SUCCESS,
        "Unix time of the last successful backup of an application."
    );
    metrics::describe_gauge!(IN_FLIGHT, "BackupJobs this replica holds a work lease for.");
    metrics::describe_counter!(
        BEHIND,
        "Reconciles skipped because the cached BackupJob was the version this replica had already written over."
    );
    metrics::describe_gauge!(
        WINDOW_START,
        "Unix time where a PostgreSQL application's recoverable window opens (newest Backup's record)."
    );
    metrics::describe_gauge!(
        WINDOW_END,
        "Unix time where a PostgreSQL application's recoverable window ends (newest Backup's record)."
    );
}

fn labels(job: &BackupJob, strategy: &str) -> (String, String, String) {
    (
        job.metadata.namespace.clone().unwrap_or_default(),
        job.spec.application_ref.kind.clone(),
        strategy.to_owned(),
    )
}

/// Records a terminal phase of `job` (driven by `strategy`) at `now`.
pub fn terminal(job: &BackupJob, strategy: &str, phase: &str, now: &Time) {
    let (ns, kind, strategy) = labels(job, strategy);
    let result = if phase == phases::SUCCEEDED {
        "succeeded"
    } else {
        "failed"
    };
    metrics::counter!(RUNS, "namespace" => ns, "kind" => kind.clone(), "strategy" => strategy.clone(), "result" => result)
        .increment(1);
    if let Some(created) = job.metadata.creation_timestamp.as_ref() {
        let secs = now.0.duration_since(created.0).as_secs_f64();
        metrics::histogram!(DURATION, "kind" => kind, "strategy" => strategy).record(secs.max(0.0));
    }
}

/// Records a success (and the application's last success time).
pub fn succeeded(job: &BackupJob, strategy: &str, now: &Time) {
    terminal(job, strategy, phases::SUCCEEDED, now);
    let (ns, kind, _) = labels(job, strategy);
    metrics::gauge!(LAST_SUCCESS, "namespace" => ns, "kind" => kind, "application" => job.spec.application_ref.name.clone())
        .set(now.0.as_second() as f64);
}

/// Records a failure decided before any driver ran (the pipeline gate).
pub fn gate_failed(job: &api::backups::BackupJob) {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let kind = job.spec.application_ref.kind.clone();
    metrics::counter!(RUNS, "namespace" => ns, "kind" => kind, "strategy" => "", "result" => "failed")
        .increment(1);
}

/// What the catalog says per application: the newest successful Backup's time, and for
/// PostgreSQL the window the newest Backup recorded. Kept so that the gauges only move forward
/// and so that a restarted runner exports them again from the catalog, not only from the jobs it
/// ran itself (an alert on the last success must not clear because every replica restarted).
#[derive(Debug, Default)]
pub struct CatalogGauges {
    newest: std::sync::Mutex<std::collections::HashMap<(String, String, String), i64>>,
}

impl CatalogGauges {
    /// Records a catalog Backup (any replica, leader or not: each exports the same values).
    pub fn observe(&self, backup: &api::backups::Backup) {
        let ready = backup.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phases::READY);
        if !ready {
            return;
        }
        let ns = backup.metadata.namespace.clone().unwrap_or_default();
        let app = &backup.spec.application_ref;
        let taken = backup.spec.taken_at.0.as_second();
        let key = (ns.clone(), app.kind.clone(), app.name.clone());
        {
            let mut newest = self.newest.lock().unwrap_or_else(|e| e.into_inner());
            match newest.get(&key) {
                Some(t) if *t >= taken => return,
                _ => {
                    newest.insert(key, taken);
                }
            }
        }
        metrics::gauge!(LAST_SUCCESS, "namespace" => ns.clone(), "kind" => app.kind.clone(), "application" => app.name.clone())
            .set(taken as f64);
        let window = backup
            .status
            .as_ref()
            .and_then(|s| s.recoverable_window.as_ref());
        if let Some(w) = window {
            if let Some(from) = &w.from {
                metrics::gauge!(WINDOW_START, "namespace" => ns.clone(), "application" => app.name.clone())
                    .set(from.0.as_second() as f64);
            }
            if let Some(to) = &w.to {
                metrics::gauge!(WINDOW_END, "namespace" => ns, "application" => app.name.clone())
                    .set(to.0.as_second() as f64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(app: &str, taken: &str, phase: &str) -> api::backups::Backup {
        let mut b = api::backups::Backup::test(&format!("{app}-{taken}"))
            .namespace("t")
            .for_app("Postgres", app)
            .build();
        b.spec.taken_at = Time(taken.parse().unwrap());
        b.status = Some(api::backups::BackupStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        b
    }

    #[test]
    fn only_a_newer_ready_backup_moves_the_last_success() {
        let g = CatalogGauges::default();
        let newest = |g: &CatalogGauges| {
            g.newest
                .lock()
                .unwrap()
                .get(&("t".to_owned(), "Postgres".to_owned(), "db".to_owned()))
                .copied()
        };
        g.observe(&backup("db", "2026-03-02T00:00:00Z", phases::READY));
        let t2 = newest(&g);
        g.observe(&backup("db", "2026-03-01T00:00:00Z", phases::READY));
        assert_eq!(newest(&g), t2, "an older Backup does not move it back");
        g.observe(&backup("db", "2026-03-03T00:00:00Z", "Failed"));
        assert_eq!(newest(&g), t2, "a failed Backup is no success");
        g.observe(&backup("db", "2026-03-04T00:00:00Z", phases::READY));
        assert!(newest(&g) > t2);
    }
}
