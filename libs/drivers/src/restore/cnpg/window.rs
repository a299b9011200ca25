//! The recoverable window of a server's archive and the PITR pre-flight: a `recoveryTime`
//! before the window fails before anything changes; the verdict is recorded once as
//! `RecoveryWindowChecked`, so a later pass never turns a started restore into a rejection.

use std::ops::ControlFlow;
use std::time::Duration;

use api::ConditionStatus;
use api::backups::{Backup, RecoverableWindow, RestoreJobStatus};
use api::contract::{condition_types, reasons};
use api::meta::find_condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value as Json, json};

use super::super::Step;
use super::{Pass, set};
use crate::cnpg::{self as driver, keys};
use crate::restore::options::parse_rfc3339;
use crate::restore::skeleton::{fail, failed};
use crate::status::go_duration;

/// The recoverable window of a server's archive, from what is really in it: from the stop time of
/// the oldest base backup still there (the ObjectStore's first recoverability point, else the
/// oldest catalog Backup of that server) to the newest archived point known (the source Cluster's
/// last archived WAL time, the newest successful base backup, the newest catalog Backup's end).
/// `None` when no start is known.
pub fn recoverable_window(
    server: &str,
    object_store: Option<&Json>,
    source_cluster: Option<&Json>,
    catalog: &[Backup],
) -> Option<RecoverableWindow> {
    let time = crate::catalog::time;
    let reported = object_store.map(|o| &o["status"]["serverRecoveryWindow"][server]);
    let ours: Vec<&Backup> = catalog
        .iter()
        .filter(|b| {
            b.spec
                .driver_metadata
                .as_ref()
                .and_then(|m| m.get(keys::SERVER_NAME))
                .is_some_and(|s| s == server)
        })
        .collect();
    let stopped = |b: &Backup| {
        b.spec
            .driver_metadata
            .as_ref()
            .and_then(|m| m.get(keys::STOPPED_AT))
            .and_then(|s| time(&json!(s)))
    };
    let from = reported
        .and_then(|r| time(&r["firstRecoverabilityPoint"]))
        .or_else(|| {
            ours.iter()
                .filter_map(|b| {
                    b.status
                        .as_ref()
                        .and_then(|s| s.recoverable_window.as_ref())
                        .and_then(|w| w.from.clone())
                        .or_else(|| stopped(b))
                })
                .min_by_key(|t| t.0)
        })?;
    let archived = source_cluster
        .filter(|c| driver::live_server_name(c).as_deref() == Some(server))
        .and_then(|c| time(&c["status"]["lastArchivedWALTime"]));
    let to = [
        archived,
        reported.and_then(|r| time(&r["lastSuccessfulBackupTime"])),
    ]
    .into_iter()
    .flatten()
    .chain(ours.iter().filter_map(|b| stopped(b)))
    .max_by_key(|t| t.0);
    Some(RecoverableWindow {
        from: Some(from),
        to,
    })
}

/// Where a recovery target lies relative to a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Before the oldest base backup: PostgreSQL would promote at the backup's end instead.
    Before(String),
    /// Inside the window.
    Inside(String),
    /// After the newest archived point known now, by this much.
    After(Duration, String),
    /// No window known.
    Unknown(String),
}

/// Places `target` in `window` (the messages name the server and the bounds).
pub fn place(
    target: &Time,
    raw: &str,
    window: Option<&RecoverableWindow>,
    server: &str,
) -> Placement {
    let fmt = |t: &Option<Time>| {
        t.as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_else(|| "unknown".into())
    };
    let Some(w) = window else {
        return Placement::Unknown(format!(
            "no recoverable window is known for server {server:?} yet; recoveryTime {raw} was not checked"
        ));
    };
    let span = format!("{} … {}", fmt(&w.from), fmt(&w.to));
    if let Some(from) = &w.from
        && target.0 < from.0
    {
        return Placement::Before(format!(
            "point-in-time recovery target {raw} is before the recoverable window of server {server:?} ({span}): the oldest base backup in the archive stopped at {}, and PostgreSQL would silently recover to that point instead. Pick a recoveryTime at or after it",
            from.0
        ));
    }
    if let Some(to) = &w.to
        && target.0 > to.0
    {
        let past = Duration::try_from(target.0.duration_since(to.0)).unwrap_or_default();
        return Placement::After(
            past,
            format!(
                "recoveryTime {raw} is {} past the newest archived point known now ({}; window {span}); a WAL switch of the source is forced and nothing is changed until the archive reaches it (RecoveryTargetArchived; RecoveryTargetUnreachable after walSwitchTimeoutSeconds if it never does)",
                go_duration(Duration::from_secs(past.as_secs())),
                to.0
            ),
        );
    }
    Placement::Inside(format!(
        "recoveryTime {raw} lies inside the recoverable window of server {server:?} ({span})"
    ))
}

/// 12.0 (ours): the PITR pre-flight, before anything is changed. Checked once and persisted
/// before going on: a later pass (the source's ObjectStore may be gone with its purged Cluster)
/// must never turn a started restore into a rejection.
pub(super) fn preflight(p: &Pass<'_>, status: &mut RestoreJobStatus) -> ControlFlow<Step> {
    let Pass {
        o,
        now,
        options,
        server,
        ..
    } = p;
    if !options.recovery_time.is_empty()
        && find_condition(&status.conditions, condition_types::RECOVERY_WINDOW_CHECKED).is_none()
    {
        let raw = &options.recovery_time;
        let when = match parse_rfc3339(raw) {
            Ok(t) => Time(t),
            Err(e) => {
                return ControlFlow::Break(fail(
                    status,
                    &format!(
                        "spec.options.recoveryTime {raw:?} is not a valid RFC 3339 timestamp: {e}"
                    ),
                    Vec::new(),
                    now,
                ));
            }
        };
        let window = recoverable_window(server, o.object_store, o.source_cluster, o.catalog);
        let (s, reason, message) = match place(&when, raw, window.as_ref(), server) {
            Placement::Before(m) => {
                set(
                    status,
                    condition_types::RECOVERY_WINDOW_CHECKED,
                    ConditionStatus::False,
                    reasons::RECOVERY_TARGET_BEFORE_WINDOW,
                    &m,
                    now,
                );
                return ControlFlow::Break(Step::Status {
                    status: failed(status, reasons::RECOVERY_TARGET_BEFORE_WINDOW, &m, now),
                    events: Vec::new(),
                    requeue: None,
                });
            }
            Placement::Inside(m) => (ConditionStatus::True, reasons::RECOVERY_TARGET_IN_WINDOW, m),
            Placement::After(_, m) => (
                ConditionStatus::True,
                reasons::RECOVERY_TARGET_AFTER_WINDOW,
                m,
            ),
            Placement::Unknown(m) => (ConditionStatus::True, reasons::RECOVERY_WINDOW_UNKNOWN, m),
        };
        set(
            status,
            condition_types::RECOVERY_WINDOW_CHECKED,
            s,
            reason,
            &message,
            now,
        );
        return ControlFlow::Break(Step::Status {
            status: status.clone(),
            events: Vec::new(),
            requeue: None,
        });
    }
    ControlFlow::Continue(())
}
