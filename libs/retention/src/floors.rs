//! The floors: Backups no retention rule, `maxAge`, TTL or cap can delete.
//!
//! ```text
//!  non-terminal RestoreJobs ─► spec.backupRef ─────────────────────────► KeptReferencedByRestore
//!                          └─► CNPG + spec.options.recoveryTime T ─► server S of that Backup
//!                               ─► newest Ready Backup of S whose base backup stopped at or
//!                                  before T ──────────────────────────► KeptRecoveryWindow
//!  the newest successful Backup of each Plan (decided by the caller) ──► KeptNewestSuccess
//! ```
//!
//! Why the recovery-window floor keeps exactly that Backup: a point-in-time recovery replays WAL
//! from a base backup that stopped at or before its target, and the archive's recoverable window
//! starts at the stop time of the oldest base backup still there. Deleting Backups of S can only
//! move that start later; as long as one base backup stopped at or before T survives, the start
//! stays at or before T. The newest such one is the cheapest to replay from, and the one a
//! recovery picks. Each Backup's own stop time (`cnpg.io/stopped-at`, else the end of its recorded
//! window, else `takenAt`) is used rather than the `from` recorded in its `recoverableWindow`,
//! because that `from` describes older base backups which this very sweep may remove.

use std::collections::BTreeMap;

use api::backups::Backup;
use api::contract::{event_reasons as reasons, phases};
use chrono::{DateTime, Utc};
use drivers::cnpg::keys;

use crate::{Observed, deleting, instant, name_of};

/// When a Backup's base backup stopped: the earliest point it restores to.
pub fn backup_stop_time(backup: &Backup) -> DateTime<Utc> {
    backup
        .spec
        .driver_metadata
        .as_ref()
        .and_then(|m| m.get(keys::STOPPED_AT))
        .and_then(|s| s.parse::<DateTime<Utc>>().ok())
        .or_else(|| {
            backup
                .status
                .as_ref()
                .and_then(|s| s.recoverable_window.as_ref())
                .and_then(|w| w.to.as_ref())
                .map(instant)
        })
        .unwrap_or_else(|| instant(&backup.spec.taken_at))
}

fn server_of(backup: &Backup) -> Option<&str> {
    backup
        .spec
        .driver_metadata
        .as_ref()
        .and_then(|m| m.get(keys::SERVER_NAME))
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// The floors of one namespace, computed once per sweep.
pub(crate) struct Floors {
    /// Backup name → the running RestoreJobs naming it.
    referenced: BTreeMap<String, Vec<String>>,
    /// Backup name → why a running point-in-time restore needs it.
    window: BTreeMap<String, String>,
}

impl Floors {
    pub(crate) fn new(observed: &Observed<'_>) -> Self {
        let mut referenced: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut window: BTreeMap<String, String> = BTreeMap::new();
        let mut running: Vec<_> = observed
            .restore_jobs
            .iter()
            .filter(|r| !r.is_terminal())
            .collect();
        running.sort_by(|a, b| name_of(&a.metadata).cmp(name_of(&b.metadata)));
        for rj in running {
            let rj_name = name_of(&rj.metadata).to_owned();
            let wanted = &rj.spec.backup_ref.name;
            referenced
                .entry(wanted.clone())
                .or_default()
                .push(rj_name.clone());
            let Some(raw) = rj
                .spec
                .options
                .as_ref()
                .and_then(|o| o.get("recoveryTime"))
                .and_then(|v| v.as_str())
                .filter(|s| !s.is_empty())
            else {
                continue;
            };
            // An unparsable target fails the restore by itself; only the backupRef floor applies.
            let Ok(target) = drivers::restore::options::parse_rfc3339(raw) else {
                continue;
            };
            let target = instant(&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                target,
            ));
            let Some(server) = observed
                .backups
                .iter()
                .find(|b| name_of(&b.metadata) == wanted)
                .and_then(server_of)
            else {
                continue;
            };
            let needed = observed
                .backups
                .iter()
                .filter(|b| !deleting(&b.metadata))
                .filter(|b| {
                    b.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phases::READY)
                })
                .filter(|b| server_of(b) == Some(server))
                .map(|b| (backup_stop_time(b), name_of(&b.metadata)))
                .filter(|(stop, _)| *stop <= target)
                .max();
            if let Some((stop, name)) = needed {
                window.entry(name.to_owned()).or_insert_with(|| {
                    format!(
                        "RestoreJob {rj_name} recovers server {server:?} to {raw}, and this is the newest base backup at or before it (stopped at {}); without it the recoverable window would start after the target",
                        stop.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    )
                });
            }
        }
        Self { referenced, window }
    }

    /// The floor that protects any Backup (successful or failed).
    pub(crate) fn for_any(&self, backup: &Backup) -> Option<(&'static str, String)> {
        let name = name_of(&backup.metadata);
        if let Some(jobs) = self.referenced.get(name) {
            return Some((
                reasons::KEPT_REFERENCED_BY_RESTORE,
                format!(
                    "RestoreJob {} has not finished restoring from it",
                    jobs.join(", ")
                ),
            ));
        }
        self.window
            .get(name)
            .map(|why| (reasons::KEPT_RECOVERY_WINDOW, why.clone()))
    }

    /// The floor that protects a Plan's successful Backup (`newest`: the Plan's newest success).
    pub(crate) fn for_success(
        &self,
        backup: &Backup,
        newest: bool,
    ) -> Option<(&'static str, String)> {
        self.for_any(backup).or_else(|| {
            newest.then(|| {
                (
                    reasons::KEPT_NEWEST_SUCCESS,
                    "it is the newest successful Backup of the Plan".to_owned(),
                )
            })
        })
    }
}
