//! The runner's storage breakers (the state machine is the `storage-breaker` crate, shared with
//! the restore-orchestrator): its metric names and a BackupJob's key. The gate in front of a job's
//! driver is `controller/storage.rs`, the interception of a driver's step `drivers/storage.rs`.

pub use storage_breaker::{
    Admission, Breakers, Names, STORAGE_UNAVAILABLE, Settings, probe_outcome, redact,
};

/// Gauge `{endpoint}`: 1 while the object store at the endpoint is considered available, 0 while
/// its breaker is open.
pub const AVAILABLE: &str = "cozy_backups_backup_runner_storage_available";
/// Counter `{endpoint, result}`: storage probes (`ok`, `error`).
pub const PROBES: &str = "cozy_backups_backup_runner_storage_probes_total";
/// Counter `{endpoint}`: times a breaker opened.
pub const OPENED: &str = "cozy_backups_backup_runner_storage_breaker_opened_total";

/// The runner's metric names.
pub const NAMES: Names = Names {
    available: AVAILABLE,
    probes: PROBES,
    opened: OPENED,
};

/// Describes the metrics.
pub fn describe() {
    NAMES.describe();
}

/// A BackupJob's key in the breakers (`namespace/name`).
pub fn job_key(job: &api::backups::BackupJob) -> String {
    use kube::ResourceExt;
    format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any())
}
