//! The WAL-archive gate: the source cnpg Backup must have completed with an `endWal` before the
//! target is touched (a source Backup that is gone counts as ready), bounded by
//! `walArchiveTimeoutSeconds`.

use std::ops::ControlFlow;

use api::ConditionStatus;
use api::backups::RestoreJobStatus;
use api::contract::{condition_types, reasons};
use api::meta::find_condition;
use serde_json::Value as Json;

use super::{Pass, condition_is_true, remaining, set};
use crate::cnpg::{self as driver, keys};
use crate::restore::skeleton::fail;
use crate::restore::{Step, elapsed, write_or_wait};
use crate::status::go_duration;

/// The WAL-archive gate over the source cnpg Backup: `(ready, message)`.
pub fn wal_archive_gate(
    namespace: &str,
    name: Option<&str>,
    cnpg_backup: Option<&Json>,
) -> (bool, String) {
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return (
            false,
            "Backup driverMetadata is missing cnpg.io/backup-name".into(),
        );
    };
    let Some(b) = cnpg_backup else {
        return (
            true,
            format!("cnpg.io/Backup {namespace}/{name} no longer exists; skipping archive gate"),
        );
    };
    let (phase, _) = driver::backup_phase(b);
    if phase != driver::PHASE_COMPLETED {
        return (
            false,
            format!(
                "waiting for cnpg.io/Backup {namespace}/{name} to complete (current phase={phase:?})"
            ),
        );
    }
    match b["status"]["endWal"].as_str().filter(|w| !w.is_empty()) {
        None => (
            false,
            format!(
                "cnpg.io/Backup {namespace}/{name} has phase=completed but has not recorded status.endWal yet"
            ),
        ),
        Some(wal) => (
            true,
            format!("cnpg.io/Backup {namespace}/{name} phase=completed, endWal={wal:?}"),
        ),
    }
}

/// 12a: waits for the WAL archive, then records `WALArchiveReady=True` before the first mutation.
pub(super) fn gate(p: &Pass<'_>, status: &mut RestoreJobStatus) -> ControlFlow<Step> {
    let Pass {
        o,
        now,
        current,
        options,
        metadata,
        backup_ns,
        ..
    } = p;
    let (ready, message) = wal_archive_gate(
        backup_ns,
        metadata.get(keys::BACKUP_NAME).map(String::as_str),
        o.source_cnpg_backup,
    );
    if !ready {
        set(
            status,
            condition_types::WAL_ARCHIVE_READY,
            ConditionStatus::False,
            reasons::WAITING_FOR_ARCHIVE,
            &message,
            now,
        );
        let since = find_condition(&status.conditions, condition_types::WAL_ARCHIVE_READY)
            .map(|c| c.last_transition_time.clone())
            .unwrap_or_else(|| (*now).clone());
        if elapsed(&since, now) > options.wal_archive_timeout {
            return ControlFlow::Break(fail(
                status,
                &format!(
                    "WAL archive did not catch up to the backup endWal within {}: {message} (check that the source cnpg.io/Cluster has the barman-cloud plugin wired - spec.plugins referencing an ObjectStore - and is shipping WALs to object storage; override via spec.options.walArchiveTimeoutSeconds)",
                    go_duration(options.wal_archive_timeout)
                ),
                Vec::new(),
                now,
            ));
        }
        let requeue = Some(remaining(&since, options.wal_archive_timeout, now));
        return ControlFlow::Break(write_or_wait(current, status.clone(), Vec::new(), requeue));
    }
    if !condition_is_true(status, condition_types::WAL_ARCHIVE_READY) {
        // Persisted before the first mutation (upstream keeps it in memory): it is the durable
        // record that the HelmRelease may be suspended from here on, which the deletion
        // cleanup relies on.
        set(
            status,
            condition_types::WAL_ARCHIVE_READY,
            ConditionStatus::True,
            reasons::ARCHIVE_CAUGHT_UP,
            &message,
            now,
        );
        return ControlFlow::Break(write_or_wait(current, status.clone(), Vec::new(), None));
    }
    ControlFlow::Continue(())
}
