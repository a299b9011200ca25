//! The archive catch-up (ours): a `recoveryTime` past the newest archived point is made
//! recoverable before anything is changed. PostgreSQL archives the WAL segment that holds a recent
//! target only when the segment is switched (at `archive_timeout`, 5 minutes under CloudNativePG),
//! so the restore forces the switch through the operator: an on-demand cnpg Backup of the source
//! Cluster (barman-cloud's base backup ends with `pg_backup_stop`, which switches the segment and
//! waits until it is archived). It then waits, bounded by `walSwitchTimeoutSeconds`, until the
//! recoverable window reaches the target; only then may the purge run. An in-place restore's safety
//! backup is such a backup already: when it has moved the window past the target, no switch Backup
//! is created.
//!
//! ```text
//!  RecoveryWindowChecked=True/RecoveryTargetAfterWindow, RecoveryTargetArchived not True
//!   ├─ window end ≥ target ─► RecoveryTargetArchived=True/ArchiveCoversTarget
//!   ├─ first pass ─► RecoveryTargetArchived=False/WaitingForWALSwitch (the deadline starts)
//!   ├─ past the deadline, a target after the deadline, or no source Cluster archiving under
//!   │   the server ─► Failed RecoveryTargetUnreachable (nothing changed); no source Cluster and
//!   │   nothing left to purge (purged before) ─► go on, as without the catch-up
//!   ├─ target still in the future ─► wait until it has passed
//!   ├─ no switch Backup ─► create cnpg Backup <job>-wal-switch-<uid> of the source Cluster
//!   └─ wait (the window is re-read every pass)
//! ```
//!
//! Crash safety: the switch Backup's name is derived from the job's name and uid and read back by
//! name before anything is created, so a restarted orchestrator never creates a second one; the
//! purge comes after this stage, so it never runs before the window covers the target.

use std::ops::ControlFlow;
use std::time::Duration;

use api::ConditionStatus;
use api::backups::{RestoreJob, RestoreJobStatus};
use api::contract::{condition_types, labels, reasons};
use api::meta::find_condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value as Json, json};

use super::window::recoverable_window;
use super::{Pass, condition_is_true, deleting, remaining, set};
use crate::cnpg::{self as driver};
use crate::restore::options::parse_rfc3339;
use crate::restore::skeleton::{failed, owned_by};
use crate::restore::{Action, OnError, Step, elapsed, write_or_wait};
use crate::status::go_duration;

/// How often the window is read again while waiting (the ObjectStore's status is not watched).
const POLL: Duration = Duration::from_secs(5);

/// The name of the cnpg Backup a RestoreJob creates to force a WAL switch of its source:
/// `<job>-wal-switch-<first 8 characters of the job's uid>` (a job re-created under the same name
/// gets a Backup of its own).
pub fn wal_switch_backup_name(job: &RestoreJob) -> String {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let uid: String = job
        .metadata
        .uid
        .as_deref()
        .unwrap_or_default()
        .chars()
        .take(8)
        .collect();
    if uid.is_empty() {
        format!("{name}-wal-switch")
    } else {
        format!("{name}-wal-switch-{uid}")
    }
}

/// The switch cnpg Backup (method `plugin`) of the source Cluster `cluster`: labelled with the
/// job's owned-by pair, `cnpg.io/cluster` and [`labels::WAL_SWITCH_FOR`], owned by the RestoreJob
/// (it goes with the job; its base backup stays in the archive under the ObjectStore's retention
/// policy like any other). It gets no catalog entry: it is not a backup anyone restores by name.
pub fn wal_switch_cnpg_backup(job: &RestoreJob, namespace: &str, cluster: &str) -> Json {
    let mut body = driver::cnpg_backup(namespace, "", cluster);
    let meta = &mut body["metadata"];
    if let Some(m) = meta.as_object_mut() {
        m.remove("generateName");
    }
    meta["name"] = json!(wal_switch_backup_name(job));
    let mut l = Map::new();
    for (k, v) in owned_by(job) {
        l.insert(k, json!(v));
    }
    l.insert(labels::CNPG_CLUSTER.into(), json!(cluster));
    l.insert(labels::WAL_SWITCH_FOR.into(), json!(job.metadata.name));
    meta["labels"] = Json::Object(l);
    if let Some(uid) = job.metadata.uid.as_deref().filter(|u| !u.is_empty()) {
        meta["ownerReferences"] = json!([{
            "apiVersion": "backups.cozystack.io/v1alpha1",
            "kind": "RestoreJob",
            "name": job.metadata.name,
            "uid": uid,
        }]);
    }
    body
}

/// 12b' (ours): makes the archive cover a target that lay past it, before the purge.
pub(super) fn catch_up(p: &Pass<'_>, status: &mut RestoreJobStatus) -> ControlFlow<Step> {
    let Pass {
        o,
        now,
        current,
        options,
        t,
        server,
        ..
    } = p;
    let after = find_condition(&status.conditions, condition_types::RECOVERY_WINDOW_CHECKED)
        .is_some_and(|c| c.reason == reasons::RECOVERY_TARGET_AFTER_WINDOW);
    if options.recovery_time.is_empty()
        || !after
        || condition_is_true(status, condition_types::RECOVERY_TARGET_ARCHIVED)
    {
        return ControlFlow::Continue(());
    }
    let raw = &options.recovery_time;
    // The pre-flight accepted it; a value that no longer parses cannot be waited for.
    let Ok(target) = parse_rfc3339(raw).map(Time) else {
        return ControlFlow::Continue(());
    };
    let live = o.source_cluster.filter(|c| !deleting(c));
    // Purged already (by an earlier controller that did not record it): nothing is left to
    // protect, and nothing can switch; the restore goes on, and the deadline's diagnosis names the
    // cause if the target is never reached.
    if live.is_none() && o.cluster.is_none() && o.pvcs.is_empty() {
        return ControlFlow::Continue(());
    }
    let window = recoverable_window(server, o.object_store, o.source_cluster, o.catalog);
    let end = window.as_ref().and_then(|w| w.to.clone());
    let fmt = |t: &Option<Time>| {
        t.as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_else(|| "unknown".into())
    };
    let span = window
        .as_ref()
        .map(|w| format!("{} … {}", fmt(&w.from), fmt(&w.to)))
        .unwrap_or_else(|| "no window known".into());
    let newest = fmt(&end);
    let name = wal_switch_backup_name(o.job);
    let source = driver::cluster_name(&t.source);

    if end.as_ref().is_some_and(|e| e.0 >= target.0) {
        let by = match o.wal_switch_backup {
            Some(_) => format!(
                " after the WAL switch of cnpg.io/Backup {}/{name}",
                t.namespace
            ),
            None => String::new(),
        };
        set(
            status,
            condition_types::RECOVERY_TARGET_ARCHIVED,
            ConditionStatus::True,
            reasons::ARCHIVE_COVERS_TARGET,
            &format!(
                "the archive of server {server:?} now reaches {newest} (window {span}), at or past recoveryTime {raw}{by}"
            ),
            now,
        );
        return ControlFlow::Break(write_or_wait(current, status.clone(), Vec::new(), None));
    }

    // The first pass records the wait; the deadline counts from this transition.
    let Some(since) = find_condition(
        &status.conditions,
        condition_types::RECOVERY_TARGET_ARCHIVED,
    )
    .map(|c| c.last_transition_time.clone()) else {
        set(
            status,
            condition_types::RECOVERY_TARGET_ARCHIVED,
            ConditionStatus::False,
            reasons::WAITING_FOR_WAL_SWITCH,
            &format!(
                "recoveryTime {raw} is past the newest archived point {newest} of server {server:?}; forcing a WAL switch of cnpg.io/Cluster {ns}/{source} (cnpg.io/Backup {ns}/{name}) and waiting up to {d} for the archive to reach it before anything is changed",
                ns = t.namespace,
                d = go_duration(options.wal_switch_timeout),
            ),
            now,
        );
        return ControlFlow::Break(Step::Status {
            status: status.clone(),
            events: Vec::new(),
            requeue: None,
        });
    };

    let unreachable = |status: &mut RestoreJobStatus, why: String| {
        let message = format!(
            "point-in-time recovery target {raw} is not covered by the WAL archive of server {server:?}: the newest archived point is {newest} (window {span}); {why}. Nothing was changed: {ns}/{app} is untouched (check the ContinuousArchiving condition of cnpg.io/Cluster {ns}/{source} and its object storage; override the wait via spec.options.walSwitchTimeoutSeconds)",
            ns = t.namespace,
            app = t.app,
        );
        set(
            status,
            condition_types::RECOVERY_TARGET_ARCHIVED,
            ConditionStatus::False,
            reasons::RECOVERY_TARGET_UNREACHABLE,
            &message,
            now,
        );
        ControlFlow::Break(Step::Status {
            status: failed(status, reasons::RECOVERY_TARGET_UNREACHABLE, &message, now),
            events: Vec::new(),
            requeue: None,
        })
    };

    let deadline = options.wal_switch_timeout;
    if elapsed(&since, now) > deadline {
        let switch = match o.wal_switch_backup {
            None => format!("cnpg.io/Backup {}/{name} was never created", t.namespace),
            Some(b) => {
                let (phase, error) = driver::backup_phase(b);
                if error.is_empty() {
                    format!("cnpg.io/Backup {}/{name} phase={phase:?}", t.namespace)
                } else {
                    format!(
                        "cnpg.io/Backup {}/{name} phase={phase:?}: {error}",
                        t.namespace
                    )
                }
            }
        };
        return unreachable(
            status,
            format!(
                "the archive did not reach the target within the {} deadline after a WAL switch was forced ({switch})",
                go_duration(deadline)
            ),
        );
    }
    let ends = k8s_openapi::jiff::SignedDuration::try_from(deadline)
        .ok()
        .and_then(|d| since.0.checked_add(d).ok());
    if let Some(ends) = ends
        && target.0 > ends
    {
        return unreachable(
            status,
            format!(
                "it lies in the future, after the {} deadline for the archive to reach it ends ({ends})",
                go_duration(deadline)
            ),
        );
    }
    let Some(live) = live else {
        return unreachable(
            status,
            format!(
                "the source cnpg.io/Cluster {}/{source} does not exist, so nothing can archive WAL past that point",
                t.namespace
            ),
        );
    };
    let live_server = driver::live_server_name(live);
    if live_server.as_deref() != Some(server.as_str()) {
        let now_archiving = live_server
            .map(|s| format!("archives under server {s:?}"))
            .unwrap_or_else(|| "does not archive WAL".into());
        return unreachable(
            status,
            format!(
                "the source cnpg.io/Cluster {}/{source} {now_archiving}, so the archive of {server:?} cannot grow",
                t.namespace
            ),
        );
    }
    let left = remaining(&since, deadline, now);
    // A target still in the future: a switch now would not cover it.
    if target.0 >= now.0 {
        let until = Duration::try_from(target.0.duration_since(now.0)).unwrap_or_default()
            + Duration::from_secs(1);
        return ControlFlow::Break(Step::Wait {
            events: Vec::new(),
            requeue: Some(until.min(left)),
        });
    }
    if o.wal_switch_backup.is_none() {
        return ControlFlow::Break(Step::Act {
            action: Action::Create(wal_switch_cnpg_backup(o.job, &t.namespace, &source)),
            events: Vec::new(),
            on_error: OnError {
                prefix: "failed to create the WAL-switch backup",
                resume: None,
            },
        });
    }
    ControlFlow::Break(Step::Wait {
        events: Vec::new(),
        requeue: Some(POLL.min(left)),
    })
}
