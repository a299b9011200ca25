//! Events that tell a BackupJob's story (`kubectl describe backupjob`): every phase change and
//! every failure, with the reason and message of the status.

use api::backups::{BackupJob, BackupJobStatus};
use api::contract::phases;
use kube::runtime::events::EventType;

use crate::context::Context;

/// Publishes the phase change the status write just made.
pub async fn phase_changed(ctx: &Context, job: &BackupJob, status: &BackupJobStatus) {
    let ready = drivers::status::ready(&status.conditions);
    let (type_, reason, note) = match status.phase.as_deref() {
        Some(phases::FAILED) => (
            EventType::Warning,
            "BackupFailed",
            status.message.clone().unwrap_or_default(),
        ),
        Some(phases::SUCCEEDED) => (
            EventType::Normal,
            "BackupSucceeded",
            ready
                .map(|r| r.message.clone())
                .unwrap_or_else(|| "backup completed".into()),
        ),
        Some(phases::RUNNING) => (
            EventType::Normal,
            "BackupRunning",
            "the driver-side backup is running".to_owned(),
        ),
        _ => return,
    };
    ctx.event(job, type_, reason, &note).await;
}
