//! Simulated CloudNativePG operator and barman-cloud plugin, over real PostgreSQL processes and
//! real barman-cloud commands. One instance task per Cluster drives bootstrap, recovery, archiving
//! and backups through shared per-Cluster state, and the stages below read and write that state in
//! turn; each stage has its own file (drawn further down; the PostgreSQL process plumbing is apart,
//! in `pg.rs`).
//!
//! ```text
//!  Cluster (uid) ──► instance task (one per Cluster, see below)
//!     ├─ PVCs <cluster>-1..N (label cnpg.io/cluster), Pods <cluster>-1..N, Secrets -app/-superuser
//!     ├─ bootstrap.initdb (default): initdb, database `app` owned by `app`
//!     ├─ bootstrap.recovery: Pod <cluster>-1-full-recovery-xxxxx, container full-recovery:
//!     │     barman-cloud-backup-list → newest base backup ended at/before the target →
//!     │     barman-cloud-restore → postgres with restore_command=barman-cloud-wal-restore
//!     │     (+ recovery_target_time) → promoted: done │ exited (e.g. FATAL recovery ended before
//!     │     configured recovery target was reached): pod Failed, a new pod after a pause, forever
//!     ├─ spec.plugins[barman-cloud…, isWALArchiver] + ObjectStore + its Secrets ─► archive_command
//!     │     barman-cloud-wal-archive; condition ContinuousArchiving from each attempt
//!     └─ status: phase, instances, readyInstances, currentPrimary, conditions
//!  Backup (method plugin) ─► started ─► barman-cloud-backup ─► completed (backupId, WALs, LSNs, …)
//!                                                          └► failed (error: barman's last words)
//!     └─ ObjectStore status.serverRecoveryWindow[serverName] refreshed from barman-cloud-backup-list
//! ```
//!
//! Which file does what (arrows: "calls into"):
//!
//! ```text
//!  mod.rs           public API: constants, test-control annotations, Options, usable_root, and
//!    │              re-exports (run, Registry, Controls, plugin_entry, recovery_source, …)
//!    ▼
//!  controller.rs    run: watches Cluster/Backup/ObjectStore/Secret into caches; one instance task
//!    │              per live Cluster uid, stopped when it goes; Registry::stop_all on shutdown
//!    ▼
//!  instance.rs      Instance: PVCs ─► initdb │ recover ─► start_primary (Pods, Secrets, app role,
//!    │              archive.env, ContinuousArchiving from the log, healthy status) ─► serve
//!    │              (follows changes, one BackupJob per new Backup, reports a crashed server)
//!    ├─► recovery.rs   impl Instance: bootstrap.recovery, one attempt per full-recovery pod
//!    ├─► archive.rs    impl Instance: archive.env from the plugin entry, ObjectStore and Secrets
//!    ├─► secrets.rs    impl Instance: app role and database; app_secret (-app/-superuser)
//!    └─► backup.rs     BackupJob: plugin Backup ─► barman-cloud-backup ─► completed/failed;
//!                      ObjectStore status.serverRecoveryWindow
//!  used by the files above:
//!    object_store.rs   ObjectStore + its Secrets ─► Resolved ─► BarmanTarget (Shared::target)
//!    spec.rs           read from a Cluster: Controls, plugin_entry, recovery_source
//!    status.rs         status writes: Shared::patch_status, Shared::set_condition
//!    shared.rs         Shared: client, options, caches of every watched kind, the change tick
//!  tests.rs         unit tests of the pure parts
//! ```
//!
//! Layers only point down: recovery.rs, archive.rs and secrets.rs add methods to `Instance`, so
//! they name instance.rs and instance.rs names none of them; no lower file names a higher one.
//!
//! Only instance 1 runs PostgreSQL; instances 2..N are objects only (see `docs/dataplane.md`).
//! Test controls (Cluster annotations): [`ANNOTATION_ARCHIVE_DELAY`], [`ANNOTATION_FAIL_BACKUP`],
//! [`ANNOTATION_HANG`]. Invariants: a Cluster's bootstrap is read once, when its instance is
//! created; every process of an instance is stopped and its directory removed when the Cluster (by
//! uid) goes or this process stops; credentials reach only 0600 files and child environments.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::pg::{self, Toolchain};

mod archive;
mod backup;
mod controller;
mod instance;
mod object_store;
mod recovery;
mod secrets;
mod shared;
mod spec;
mod status;

pub use controller::{Registry, run};
pub use object_store::{Resolved, resolve_object_store};
pub use secrets::app_secret;
pub use spec::{Controls, RecoverySource, plugin_entry, recovery_source};

/// Field manager of the simulated operator.
pub const FIELD_MANAGER: &str = "operator-sims-cnpg";
/// The barman-cloud plugin's name.
pub const PLUGIN: &str = "barman-cloud.cloudnative-pg.io";
/// Cluster label on every object of a cluster.
pub const CLUSTER_LABEL: &str = "cnpg.io/cluster";
/// The healthy phase.
pub const PHASE_HEALTHY: &str = "Cluster in healthy state";
/// The phase while the first primary is being set up (initdb or recovery).
pub const PHASE_SETTING_UP: &str = "Setting up primary";
/// Test control: seconds (e.g. `2` or `1.5s`) each WAL archive attempt waits first.
pub const ANNOTATION_ARCHIVE_DELAY: &str = "operator-sims.cozy-backups.io/archive-delay";
/// Test control: plugin Backups of this Cluster fail with this message (without running barman).
pub const ANNOTATION_FAIL_BACKUP: &str = "operator-sims.cozy-backups.io/fail-backup";
/// Test control (`"true"`): Backups of this Cluster stay `started` and a recovery stays in its
/// current step until the annotation is removed.
pub const ANNOTATION_HANG: &str = "operator-sims.cozy-backups.io/hang";
/// Test control for the operator-object restores (MariaDB, MongoDB, FoundationDB, Etcd, Velero):
/// the restore fails, the value being the operator's message where the operator reports one.
pub const ANNOTATION_FAIL_RESTORE: &str = "operator-sims.cozy-backups.io/fail-restore";
/// Test control (`"true"`) for the operator-object restores: the restore stays in progress until
/// the annotation is removed.
pub const ANNOTATION_HANG_RESTORE: &str = "operator-sims.cozy-backups.io/hang-restore";

/// Settings of the CNPG simulator.
#[derive(Clone, Debug)]
pub struct Options {
    /// PostgreSQL binaries and the account they run as.
    pub toolchain: Toolchain,
    /// Root of the instance directories (`<root>/<namespace>/<cluster>-<uid>`).
    pub root: PathBuf,
    /// The CA barman-cloud trusts when an ObjectStore names no `endpointCA` (the dev CA standing
    /// in for the public trust store); `None` leaves barman on its default trust store.
    pub default_ca: Option<PathBuf>,
    /// Pause between recovery attempts (CloudNativePG re-creates the recovery pod).
    pub recovery_retry: Duration,
}

/// Whether `path` lies under a directory PostgreSQL's unprivileged user can reach.
pub fn usable_root(preferred: &Path, run_as: Option<pg::RunAs>) -> PathBuf {
    let _ = std::fs::create_dir_all(preferred);
    if run_as.is_none() || pg::traversable_by_others(&preferred.join("x")) {
        preferred.to_path_buf()
    } else {
        let fallback =
            std::env::temp_dir().join(format!("operator-sims-pg-{}", std::process::id()));
        tracing::warn!(
            preferred = %preferred.display(),
            fallback = %fallback.display(),
            "the data directory is not reachable by the unprivileged PostgreSQL user; using a temporary one"
        );
        fallback
    }
}

#[cfg(test)]
mod tests;
