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

/// Describes every metric.
pub fn describe() {
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
