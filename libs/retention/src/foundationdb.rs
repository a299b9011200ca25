//! FoundationDB: stopping the streaming backup once its cluster keeps no Backup.
//!
//! ```text
//!  FoundationDBBackups labelled backups.cozystack.io/foundationdb-cluster=<C>, not Stopped
//!   ├─ its BackupJob (owned-by label) still running ─► leave it (that job needs it)
//!   ├─ a Backup of <C> remains after this sweep ────► leave it (it is what that Backup is made of)
//!   └─ otherwise ─► merge-patch spec.backupState: Stopped, Normal Event FoundationDBBackupStopped
//! ```
//!
//! The FoundationDB driver's backup is a long-running `backup_agent` Deployment that keeps writing
//! to the blob store after its job succeeded; deleting the catalog Backup does not touch it. When
//! the last Backup of a cluster goes (deleted by this sweep, or by anyone earlier), nothing is left
//! that the stream is for, so it is stopped; the archive in the blob store is left as it is, and the
//! next BackupJob of the cluster starts a new backup as it always does. A FoundationDBBackup the
//! application chart rendered (without the label) is never touched.

use std::collections::BTreeSet;

use api::backups::Backup;
use api::contract::{event_reasons as reasons, labels};
use drivers::foundationdb as driver;
use serde_json::Value as Json;

use crate::{Decision, ObjectKind, Observed, Verdict, backup_failed, deleting, name_of};

/// A FoundationDBBackup to stop.
#[derive(Debug, Clone, PartialEq)]
pub struct Stop {
    /// The FoundationDBBackup's name (in the swept namespace).
    pub name: String,
    /// The FoundationDBCluster it streams.
    pub cluster: String,
    /// The merge patch (`spec.backupState: Stopped`).
    pub patch: Json,
    /// The Event reason.
    pub reason: &'static str,
    /// The Event note.
    pub message: String,
}

fn label<'a>(o: &'a Json, key: &str) -> Option<&'a str> {
    o["metadata"]["labels"][key].as_str()
}

fn of_cluster(backup: &Backup, cluster: &str, operator_name: &str) -> bool {
    let fdb = backup.spec.strategy_ref.kind == driver::APP_KIND
        || backup.spec.application_ref.kind == driver::APP_KIND;
    let named = backup
        .spec
        .driver_metadata
        .as_ref()
        .and_then(|m| m.get(driver::keys::BACKUP_NAME))
        .is_some_and(|n| n == operator_name);
    named || (fdb && driver::cluster_name(&backup.spec.application_ref.name) == cluster)
}

/// The FoundationDBBackups to stop, given the sweep's decisions.
pub(crate) fn stops(observed: &Observed<'_>, decisions: &[Decision]) -> Vec<Stop> {
    let deleted: BTreeSet<&str> = decisions
        .iter()
        .filter(|d| d.kind == ObjectKind::Backup && d.verdict == Verdict::Delete)
        .map(|d| d.name.as_str())
        .collect();
    let running_jobs: BTreeSet<&str> = observed
        .backup_jobs
        .iter()
        .filter(|j| !j.is_terminal() && !deleting(&j.metadata))
        .map(|j| name_of(&j.metadata))
        .collect();
    let mut out = Vec::new();
    let mut fdb_backups: Vec<&Json> = observed.foundationdb_backups.iter().collect();
    fdb_backups.sort_by(|a, b| {
        a["metadata"]["name"]
            .as_str()
            .cmp(&b["metadata"]["name"].as_str())
    });
    for fdb in fdb_backups {
        let Some(cluster) = label(fdb, labels::FOUNDATIONDB_CLUSTER) else {
            continue;
        };
        let name = fdb["metadata"]["name"].as_str().unwrap_or_default();
        if name.is_empty()
            || driver::is_stopped(fdb)
            || !fdb["metadata"]["deletionTimestamp"].is_null()
        {
            continue;
        }
        let owner_running = label(fdb, labels::OWNED_BY_JOB_NAMESPACE) == Some(observed.namespace)
            && label(fdb, labels::OWNED_BY_JOB_NAME).is_some_and(|j| running_jobs.contains(j));
        if owner_running {
            continue;
        }
        let of_it: Vec<&Backup> = observed
            .backups
            .iter()
            .filter(|b| !deleting(&b.metadata) && !backup_failed(b))
            .filter(|b| of_cluster(b, cluster, name))
            .collect();
        if of_it
            .iter()
            .any(|b| !deleted.contains(name_of(&b.metadata)))
        {
            continue;
        }
        let why = format!("no Backup of FoundationDB cluster {cluster} remains after this sweep");
        out.push(Stop {
            name: name.to_owned(),
            cluster: cluster.to_owned(),
            patch: driver::stop_patch(),
            reason: reasons::FOUNDATIONDB_BACKUP_STOPPED,
            message: format!(
                "{why}: stopping FoundationDBBackup {name} (spec.backupState: Stopped) so its backup_agent stops streaming to the blob store; the next BackupJob of the cluster starts a new backup"
            ),
        });
    }
    out
}
