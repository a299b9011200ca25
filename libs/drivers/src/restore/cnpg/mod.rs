//! The CNPG restore as one pure decision over what the executor observed: `decide(&Observed) ->
//! Step`, called again after every action until it returns a status write or a wait.
//!
//! ```text
//!  source ref Postgres? ─► startedAt (+ phase Running; the pass does nothing else)
//!  target kind/group ─► CNPG strategy (StrategyNotReady) ─► target app ─► driverMetadata
//!  ─► options ─► snapshot ─► render the strategy against the TARGET with the snapshot's parameters
//!  purge needed ⇔ TargetPurged not True AND the live Cluster is not this restore's own recovery
//!   ├─ PITR pre-flight (ours): recoveryTime before the window ─► Failed/RecoveryTargetBeforeWindow
//!   ├─ WAL-archive gate: source cnpg Backup completed with endWal (gone counts as ready)
//!   ├─ safety backup (ours, in place): cnpg Backup + catalog Backup of the live database
//!   ├─ archive catch-up (ours): a recoveryTime past the archive ─► WAL switch (a cnpg Backup of
//!   │   the source) ─► wait until the window reaches it, or Failed/RecoveryTargetUnreachable
//!   ├─ suspend HelmRelease postgres-<target> ─► merge-patch the app ─► delete Cluster and PVCs
//!   └─ wait until the Cluster and every labelled PVC are gone (HelmRelease still suspended)
//!  TargetPurged=True/ClusterPurged ─► resume the HelmRelease (every pass from here)
//!  recovery Cluster healthy ─► Succeeded (health wins over the deadline)
//!  past restoreTimeoutSeconds ─► read recovery pod logs ─► RecoveryTargetUnreachable | RestoreFailed
//! ```
//!
//! The stages, one file each:
//!
//! ```text
//!  mod.rs       Observed, Target, decide(): the gates and the Pass every stage reads
//!  window.rs    the recoverable window and the PITR pre-flight (RecoveryWindowChecked)
//!  wal.rs       the WAL-archive gate (WALArchiveReady)
//!  safety.rs    the safety backup of the live database (SafetyBackupReady)
//!  switch.rs    the archive catch-up for a target past the window (RecoveryTargetArchived)
//!  purge.rs     suspend, patch the application, delete the Cluster and PVCs, wait for them
//!  patch.rs     the application patch (JSON merge patch of bootstrap, backup, users, databases)
//!  converge.rs  TargetPurged, resume, health, the deadline and the recovery-log diagnosis
//! ```
//!
//! Invariants: nothing is mutated before the pre-flight, the WAL gate, the safety backup and the
//! archive catch-up pass;
//! the Cluster is deleted at most once per restore (the `TargetPurged` condition, and a recovery
//! Cluster created strictly after `startedAt` is this restore's own); every wait has a deadline
//! (restore, WAL gate, safety backup) that ends in an explained `Failed`; a refused patch or purge
//! resumes the HelmRelease before failing. Passwords of a Backup written by this project are never
//! in its snapshot, so the patch keeps the target's own; upstream snapshots that carry them still
//! restore them.

mod converge;
mod patch;
mod purge;
mod safety;
mod switch;
mod wal;
mod window;

use std::collections::BTreeMap;
use std::time::Duration;

use api::ConditionStatus;
use api::backups::{Backup, RestoreJob, RestoreJobStatus};
use api::contract::{condition_types, groups};
use api::meta::find_condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value as Json, json};

pub use self::converge::{classify, recovery_pods};
pub use self::patch::{app_patch, merge_patch_apply, merge_patch_diff};
pub use self::safety::{safety_backup_name, safety_catalog_backup, safety_cnpg_backup};
pub use self::switch::{wal_switch_backup_name, wal_switch_cnpg_backup};
pub use self::wal::wal_archive_gate;
pub use self::window::{Placement, place, recoverable_window};
use super::options::CnpgOptions;
use super::skeleton::{self, fail, helm_release, status_of, strategy_not_ready, target_app_name};
use super::{ObjectRef, Step, elapsed};
use crate::cnpg::{self as driver, keys};

/// The recovery container whose log tells why a point-in-time recovery stopped.
pub const RECOVERY_CONTAINER: &str = "full-recovery";
/// Lines read from the end of each recovery log.
pub const RECOVERY_LOG_TAIL: i64 = 200;
/// Recovery pods inspected, newest first.
pub const RECOVERY_PODS: usize = 5;
/// PostgreSQL's FATAL when the archive ends before the recovery target.
pub const TARGET_NOT_REACHED: &str = "recovery ended before configured recovery target was reached";

/// One recovery pod's log as the executor could read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRead {
    /// The last lines.
    Lines(String),
    /// The read was Forbidden (no `pods/log` grant).
    Forbidden,
    /// Any other read error (skipped).
    Failed,
}

/// What the CNPG restore looks at. Objects are passed as JSON, as the executor's caches hold them.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The RestoreJob.
    pub job: &'a RestoreJob,
    /// The Backup it restores.
    pub backup: &'a Backup,
    /// Now.
    pub now: Time,
    /// The CNPG strategy CR the Backup names (`None`: not found).
    pub strategy: Option<&'a Json>,
    /// The target Postgres application (`None`: not found).
    pub target_app: Option<&'a Json>,
    /// The target Cluster `postgres-<target>` (`None`: not found).
    pub cluster: Option<&'a Json>,
    /// PVCs labelled `cnpg.io/cluster=postgres-<target>`.
    pub pvcs: &'a [Json],
    /// The HelmRelease `postgres-<target>` (`None`: not found).
    pub helm_release: Option<&'a Json>,
    /// The cnpg Backup named by the Backup's `cnpg.io/backup-name` (`None`: not found).
    pub source_cnpg_backup: Option<&'a Json>,
    /// The ObjectStore of the source server (for the recoverable window), if any.
    pub object_store: Option<&'a Json>,
    /// The source Cluster, if it still exists (its last archived WAL time ends the window).
    pub source_cluster: Option<&'a Json>,
    /// The catalog Backups in the namespace (for the recoverable window).
    pub catalog: &'a [Backup],
    /// The safety cnpg Backup `<job>-safety` (`None`: not found).
    pub safety_cnpg_backup: Option<&'a Json>,
    /// The safety catalog Backup `<job>-safety` (`None`: not found).
    pub safety_catalog: Option<&'a Backup>,
    /// The WAL-switch cnpg Backup [`wal_switch_backup_name`] (`None`: not found).
    pub wal_switch_backup: Option<&'a Json>,
    /// Pods labelled `cnpg.io/cluster=postgres-<target>`.
    pub pods: &'a [Json],
    /// Recovery logs read in this pass, `(pod, read)` newest first (`None`: not read yet).
    pub logs: Option<&'a [(String, LogRead)]>,
}

/// Where a restore reads from and writes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The namespace (always the Backup's).
    pub namespace: String,
    /// The source application.
    pub source: String,
    /// The target application.
    pub app: String,
    /// The target kind.
    pub kind: String,
    /// The target API group (`""` when unset).
    pub api_group: String,
    /// The target Cluster (and HelmRelease) name.
    pub cluster: String,
}

impl Target {
    /// In place: the target is the source application.
    pub fn in_place(&self) -> bool {
        self.app == self.source
    }
}

/// The target: the Backup's application overridden field by field by the job's non-empty
/// `targetApplicationRef` name and kind and its non-nil apiGroup; the namespace is the Backup's.
pub fn target(job: &RestoreJob, backup: &Backup) -> Target {
    let source = &backup.spec.application_ref;
    let over = job.spec.target_application_ref.as_ref();
    let kind = over
        .map(|t| t.kind.clone())
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| source.kind.clone());
    let api_group = over
        .and_then(|t| t.api_group.clone())
        .or_else(|| source.api_group.clone())
        .unwrap_or_default();
    let app = target_app_name(job, backup);
    Target {
        namespace: backup.metadata.namespace.clone().unwrap_or_default(),
        source: source.name.clone(),
        cluster: driver::cluster_name(&app),
        app,
        kind,
        api_group,
    }
}

/// The live Cluster's recovery state: `Some(creationTimestamp)` when it exists, is not being
/// deleted and carries `spec.bootstrap.recovery`.
pub(super) fn recovery_cluster(cluster: Option<&Json>) -> Option<Option<Time>> {
    let c = cluster?;
    if !c["metadata"]["deletionTimestamp"].is_null()
        || !c["spec"]["bootstrap"]["recovery"].is_object()
    {
        return None;
    }
    Some(crate::catalog::time(&c["metadata"]["creationTimestamp"]))
}

pub(super) fn deleting(o: &Json) -> bool {
    !o["metadata"]["deletionTimestamp"].is_null()
}

pub(super) fn condition_is_true(status: &RestoreJobStatus, type_: &str) -> bool {
    find_condition(&status.conditions, type_).is_some_and(|c| c.is_true())
}

pub(super) fn set(
    status: &mut RestoreJobStatus,
    type_: &str,
    s: ConditionStatus,
    reason: &str,
    message: &str,
    now: &Time,
) {
    crate::status::set_condition(status, type_, s, reason, message, now);
}

/// How long from `since` until `deadline` passes, at least a second.
pub(super) fn remaining(since: &Time, deadline: Duration, now: &Time) -> Duration {
    deadline
        .saturating_sub(elapsed(since, now))
        .max(Duration::from_secs(1))
}

/// What every stage of a pass reads: the observation and what the gates derived from it.
pub(super) struct Pass<'a> {
    /// What the executor observed.
    pub o: &'a Observed<'a>,
    /// Now.
    pub now: &'a Time,
    /// The status as read (a stage writes only when its result differs).
    pub current: RestoreJobStatus,
    /// `status.startedAt`.
    pub started: Time,
    /// The job's options.
    pub options: &'a CnpgOptions,
    /// Where the restore reads from and writes to.
    pub t: Target,
    /// The target Postgres application.
    pub app: &'a Json,
    /// The source server name (`driverMetadata`).
    pub server: String,
    /// The Backup's `driverMetadata`.
    pub metadata: BTreeMap<String, String>,
    /// The Backup's namespace.
    pub backup_ns: String,
    /// The source-spec snapshot.
    pub snapshot: Json,
    /// The snapshot's backup-time parameters.
    pub parameters: BTreeMap<String, String>,
    /// The strategy rendered against the target with those parameters.
    pub rendered: Json,
    /// The target's HelmRelease.
    pub release: ObjectRef,
    /// Whether that HelmRelease is suspended now.
    pub suspended: bool,
    /// `TargetPurged=True` recorded.
    pub purged: bool,
    /// The live Cluster's recovery state (see [`recovery_cluster`]).
    pub recovery: Option<Option<Time>>,
}

/// Decides the next step of a CNPG restore.
pub fn decide(o: &Observed<'_>) -> Step {
    let job = o.job;
    let backup = o.backup;
    let now = &o.now;
    let current = status_of(job);
    let mut status = current.clone();

    // 1. The source must be a Postgres application.
    if let Err(e) = driver::validate_app_ref(&backup.spec.application_ref) {
        return fail(&status, &e, Vec::new(), now);
    }
    let parsed = super::options::cnpg(job.spec.options.as_ref());
    let options: &CnpgOptions = &parsed.options;

    // 2. startedAt (and phase Running); this pass does nothing else. The executor writes it from a
    //    fresh read so a stale cache never moves it forward. Option Events are recorded once, here.
    let started = proceed!(skeleton::start(&status, now, || parsed.events));

    // 3. The target.
    let t = target(job, backup);
    if t.kind != driver::APP_KIND {
        return fail(
            &status,
            &format!(
                "target applicationRef.kind={:?} is not supported by the CNPG driver",
                t.kind
            ),
            Vec::new(),
            now,
        );
    }
    if !t.api_group.is_empty() && t.api_group != groups::APPS {
        return fail(
            &status,
            &format!(
                "target applicationRef.apiGroup={:?} is not supported by the CNPG driver",
                t.api_group
            ),
            Vec::new(),
            now,
        );
    }

    // 4. The strategy; 5. the target application.
    let Some(strategy) = o.strategy else {
        return strategy_not_ready(&status, &backup.spec.strategy_ref.name, now);
    };
    let Some(app) = o.target_app else {
        return fail(
            &status,
            &format!(
                "target Postgres application not found: {}/{} (deploy it before requesting a copy restore)",
                t.namespace, t.app
            ),
            Vec::new(),
            now,
        );
    };

    // 6. Source coordinates.
    let metadata = backup.spec.driver_metadata.clone().unwrap_or_default();
    let server = metadata.get(keys::SERVER_NAME).cloned().unwrap_or_default();
    if server.is_empty()
        || metadata
            .get(keys::DESTINATION_PATH)
            .is_none_or(|d| d.is_empty())
    {
        return fail(
            &status,
            "Backup driverMetadata is missing required CNPG fields",
            Vec::new(),
            now,
        );
    }

    // 8. The source-spec snapshot.
    let backup_ns = backup.metadata.namespace.clone().unwrap_or_default();
    let backup_name = backup.metadata.name.clone().unwrap_or_default();
    let snapshot = match backup
        .status
        .as_ref()
        .and_then(|s| s.underlying_resources.as_ref())
    {
        Some(s) if s["kind"] == driver::SNAPSHOT_KIND => s.clone(),
        other => {
            let why = match other {
                None => "status.underlyingResources is empty".to_owned(),
                Some(s) => format!(
                    "unexpected kind {:?}",
                    s["kind"].as_str().unwrap_or_default()
                ),
            };
            return fail(
                &status,
                &format!(
                    "Backup {backup_ns}/{backup_name} carries no usable source-spec snapshot in status.underlyingResources: {why} (re-take the backup with a controller version that persists source spec)"
                ),
                Vec::new(),
                now,
            );
        }
    };
    let parameters: BTreeMap<String, String> = snapshot["parameters"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect()
        })
        .unwrap_or_default();

    // 9. Render the strategy against the target with the backup-time parameters.
    let rendered = driver::render_template(&strategy["spec"]["template"], app, &parameters);

    // 10–11. The purge decision: purge unless recorded, or the live Cluster is this restore's own
    //        recovery (created strictly after startedAt).
    let recovery = recovery_cluster(o.cluster);
    let purged = condition_is_true(&status, condition_types::TARGET_PURGED);
    let fresh = matches!(&recovery, Some(Some(created)) if created.0 > started.0);
    let p = Pass {
        o,
        now,
        current,
        started,
        options,
        release: helm_release(&t.namespace, &t.cluster),
        suspended: o
            .helm_release
            .is_some_and(|hr| hr["spec"]["suspend"] == json!(true)),
        t,
        app,
        server,
        metadata,
        backup_ns,
        snapshot,
        parameters,
        rendered,
        purged,
        recovery,
    };
    if !purged && !fresh {
        // 12.0 (ours) PITR pre-flight; 12a the WAL-archive gate; 12b (ours) the safety backup;
        // 12b' (ours) the archive catch-up for a target past the window; 12b–e suspend, patch,
        // purge and wait.
        proceed!(window::preflight(&p, &mut status));
        proceed!(wal::gate(&p, &mut status));
        proceed!(safety::backup(&p, &mut status));
        proceed!(switch::catch_up(&p, &mut status));
        proceed!(purge::purge(&p, &mut status));
    }
    // 13–16. Record the purge, resume, converge or diagnose the deadline.
    converge::converge(&p, &mut status)
}

#[cfg(test)]
mod tests;
