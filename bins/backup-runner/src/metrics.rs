//! The runner's metrics, with bounded labels (namespace, application kind, strategy kind, result).

use api::contract::phases;

use crate::drivers::Run;

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

fn labels(run: &Run<'_>) -> (String, String, String) {
    (
        run.namespace(),
        run.app.kind.clone(),
        run.resolved.strategy_ref.kind.clone(),
    )
}

/// Records a terminal phase.
pub fn terminal(run: &Run<'_>, phase: &str) {
    let (ns, kind, strategy) = labels(run);
    let result = if phase == phases::SUCCEEDED {
        "succeeded"
    } else {
        "failed"
    };
    metrics::counter!(RUNS, "namespace" => ns, "kind" => kind.clone(), "strategy" => strategy.clone(), "result" => result)
        .increment(1);
    if let Some(created) = run.job.metadata.creation_timestamp.as_ref() {
        let secs = run.now.0.duration_since(created.0).as_secs_f64();
        metrics::histogram!(DURATION, "kind" => kind, "strategy" => strategy).record(secs.max(0.0));
    }
}

/// Records a success (and the application's last success time).
pub fn succeeded(run: &Run<'_>) {
    terminal(run, phases::SUCCEEDED);
    let (ns, kind, _) = labels(run);
    metrics::gauge!(LAST_SUCCESS, "namespace" => ns, "kind" => kind, "application" => run.app.name.clone())
        .set(run.now.0.as_second() as f64);
}

/// Records a failure decided before any driver ran (the pipeline gate).
pub fn gate_failed(job: &api::backups::BackupJob) {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let kind = job.spec.application_ref.kind.clone();
    metrics::counter!(RUNS, "namespace" => ns, "kind" => kind, "strategy" => "", "result" => "failed")
        .increment(1);
}
