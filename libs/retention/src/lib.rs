//! The retention-cleaner's pure decisions: given everything of one namespace that a sweep observed
//! and `now`, which Backups and BackupJobs to delete, which to keep (and why), which to leave for the
//! next sweep, and which FoundationDB backups to stop. No client and no clock: the executor lists the
//! objects, passes `now`, performs the returned [`Sweep`] and records its Events.
//!
//! ```text
//!  Plans ──► attribution (planRef + slot name + application) ──► each Plan's successful Backups
//!        │      policy: Policy::parse (+ the cron's zone) ─ invalid ─► Warning, nothing deleted
//!        ▼
//!  select (keepLast/Daily/Weekly/Monthly, in the zone) ─► maxAge ─► floors ─► Keep | Delete
//!                                          floors: newest success, running RestoreJob's backupRef,
//!                                                  CNPG base backup a running PITR needs
//!  failed BackupJobs + failed Backups (per name) ─► older than the TTL? ─► Plan's keepFailed ─►
//!                                                   floors ─► Keep | Delete
//!  per Plan: share of successful Backups deleted > limit ─► RetentionRefused (nothing of the Plan)
//!  per namespace: more than N deletions ─► oldest N stay Delete, the rest Defer
//!  FoundationDBBackups not Stopped whose cluster keeps no Backup ─► stop (spec.backupState)
//!  dry run ─► the same Sweep, flagged: nothing is to be deleted or stopped
//! ```
//!
//! Invariants: everything is re-derived from the listed objects on every sweep, so an executor
//! killed mid-sweep deletes nothing extra on restart (what it already deleted is simply gone from
//! the next listing and the floors are recomputed); an object already being deleted is neither
//! counted nor decided; no rule can break a floor; a Backup that no Plan governs is deleted only
//! when it failed and outlived the failed-backup TTL; the result is deterministic in its inputs
//! (sorting by time, then creation time, then name, settles ties).
//!
//! The semantics, the choices behind them and what the daemon does with a [`Sweep`] are in
//! `docs/retention.md`.

pub mod attribution;
pub mod cnpg;
mod floors;
pub mod foundationdb;
pub mod policy;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::time::Duration;

use api::backups::{Backup, BackupJob, Plan, RestoreJob};
use api::contract::{condition_types, event_reasons as reasons, phases};
use chrono::{DateTime, Utc};
pub use drivers::restore::{Event, EventType};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schedule::chrono_tz::{Tz, UTC};
use serde_json::Value as Json;

pub use floors::backup_stop_time;
pub use policy::{Policy, PolicyError, Rule};

/// The default failed-backup TTL (`--failed-backup-ttl`, 1440 minutes).
pub const DEFAULT_FAILED_BACKUP_TTL: Duration = Duration::from_secs(1440 * 60);
/// The default cap on deletions per sweep and namespace.
pub const DEFAULT_MAX_DELETIONS_PER_NAMESPACE: usize = 50;
/// The default largest share (percent) of a Plan's successful Backups one sweep may delete.
pub const DEFAULT_MAX_DELETE_PERCENT: u8 = 75;

/// How a sweep decides, from the daemon's flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Failed BackupJobs and Backups older than this are deleted; `None` disables (TTL 0).
    pub failed_ttl: Option<Duration>,
    /// At most this many deletions per sweep in one namespace (0 deletes nothing).
    pub max_deletions_per_namespace: usize,
    /// A Plan whose policy would delete more than this percentage of its successful Backups in
    /// one sweep is refused (100 never refuses).
    pub max_delete_percent: u8,
    /// Report only: the sweep is flagged and nothing is to be deleted or stopped.
    pub dry_run: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            failed_ttl: Some(DEFAULT_FAILED_BACKUP_TTL),
            max_deletions_per_namespace: DEFAULT_MAX_DELETIONS_PER_NAMESPACE,
            max_delete_percent: DEFAULT_MAX_DELETE_PERCENT,
            dry_run: false,
        }
    }
}

/// Everything one sweep of one namespace looked at.
#[derive(Debug, Clone, Copy)]
pub struct Observed<'a> {
    /// The namespace.
    pub namespace: &'a str,
    /// Its Plans.
    pub plans: &'a [Plan],
    /// Its catalog Backups.
    pub backups: &'a [Backup],
    /// Its BackupJobs.
    pub backup_jobs: &'a [BackupJob],
    /// Its RestoreJobs.
    pub restore_jobs: &'a [RestoreJob],
    /// Its `apps.foundationdb.org` FoundationDBBackups (as JSON).
    pub foundationdb_backups: &'a [Json],
}

/// The two kinds a sweep deletes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ObjectKind {
    /// A catalog Backup (deleted through its finalizer, which cleans the driver's objects).
    Backup,
    /// A BackupJob.
    BackupJob,
}

impl ObjectKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Backup => "Backup",
            Self::BackupJob => "BackupJob",
        }
    }
}

/// What happens to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Delete it (unless the sweep is a dry run).
    Delete,
    /// Keep it.
    Keep,
    /// It is due, but over this sweep's per-namespace limit: a later sweep deletes it.
    Defer,
}

/// The decision about one object, with a reason (a contract string) and a human message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Its kind.
    pub kind: ObjectKind,
    /// Its name.
    pub name: String,
    /// The Plan that governs it, if any (Events go there; else on the object's BackupJob).
    pub plan: Option<String>,
    /// Delete, keep or defer.
    pub verdict: Verdict,
    /// CamelCase reason from `api::contract::event_reasons`.
    pub reason: &'static str,
    /// What happened and why: the age, the rule, the failure message.
    pub message: String,
    /// The time its age is measured from (takenAt; completedAt or creation for failures).
    pub time: DateTime<Utc>,
}

/// A Plan's policy would delete too large a share of its successful Backups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// Successful Backups the policy would delete now.
    pub would_delete: usize,
    /// The Plan's successful Backups.
    pub successful: usize,
    /// The configured limit (percent).
    pub limit_percent: u8,
}

/// What a sweep says about a Plan as a whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanOutcome {
    /// The Plan.
    pub plan: String,
    /// The refusal, when mass-deletion protection fired.
    pub refusal: Option<Refusal>,
    /// Why the policy could not be applied, when it could not.
    pub invalid: Option<PolicyError>,
    /// CNPG: the barman retention the Plan's ObjectStore should carry after this sweep.
    pub object_store_retention: Option<cnpg::ObjectStoreRetention>,
    /// Events to record on the Plan (the refusal, the invalid policy).
    pub events: Vec<Event>,
}

/// One sweep's result for a namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    /// Dry run: report the decisions, delete and stop nothing.
    pub dry_run: bool,
    /// Every object the sweep has something to say about, in a stable order.
    pub decisions: Vec<Decision>,
    /// Plans with a policy (or an invalid one).
    pub plans: Vec<PlanOutcome>,
    /// FoundationDBBackups to stop.
    pub foundationdb_stops: Vec<foundationdb::Stop>,
}

impl Sweep {
    /// The objects to delete now: none in a dry run.
    pub fn to_delete(&self) -> impl Iterator<Item = &Decision> {
        let live = !self.dry_run;
        self.candidates().filter(move |_| live)
    }

    /// The objects this sweep would delete, dry run or not.
    pub fn candidates(&self) -> impl Iterator<Item = &Decision> {
        self.decisions
            .iter()
            .filter(|d| d.verdict == Verdict::Delete)
    }

    /// The FoundationDBBackups to stop now: none in a dry run.
    pub fn to_stop(&self) -> impl Iterator<Item = &foundationdb::Stop> {
        let live = !self.dry_run;
        self.foundationdb_stops.iter().filter(move |_| live)
    }
}

/// A Kubernetes time as a chrono instant. Whole seconds and the fraction separately: a count of
/// nanoseconds only spans the years 1677 to 2262, and a time outside them (a Backup `takenAt` in
/// year 1 or 9999) used to become the Unix epoch, making a far-future Backup the oldest.
pub fn instant(t: &Time) -> DateTime<Utc> {
    let n = t.0.as_nanosecond();
    let (secs, nanos) = (n.div_euclid(1_000_000_000), n.rem_euclid(1_000_000_000));
    i64::try_from(secs)
        .ok()
        .zip(u32::try_from(nanos).ok())
        .and_then(|(s, ns)| DateTime::from_timestamp(s, ns))
        .unwrap_or_default()
}

/// A duration for humans: `3d4h`, `5h12m`, `42m`, `30s`.
pub fn human(d: Duration) -> String {
    let s = d.as_secs();
    let (days, hours, minutes, seconds) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60, s % 60);
    match (days, hours, minutes) {
        (0, 0, 0) => format!("{seconds}s"),
        (0, 0, m) => format!("{m}m"),
        (0, h, m) => format!("{h}h{m}m"),
        (d, h, _) => format!("{d}d{h}h"),
    }
}

fn age(now: DateTime<Utc>, t: DateTime<Utc>) -> Duration {
    (now - t).to_std().unwrap_or_default()
}

fn deleting(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> bool {
    meta.deletion_timestamp.is_some()
}

fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

/// True when a Backup's phase says it failed (`Failed`, or any phase naming a failure).
pub fn backup_failed(backup: &Backup) -> bool {
    backup
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .is_some_and(|p| p.to_ascii_lowercase().contains("fail"))
}

/// When a failed Backup's TTL starts: its creation, or for a Backup re-created from its catalog
/// record (which a new cluster stamps with a new `creationTimestamp`) the moment it was taken, so
/// that the sync does not give a failed Backup a second life. Never later than its creation.
pub fn backup_failed_since(backup: &Backup) -> Option<DateTime<Utc>> {
    let created = backup.metadata.creation_timestamp.as_ref().map(instant);
    let restored = backup
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(api::contract::labels::RESTORED_FROM_CATALOG))
        .is_some_and(|v| v == "true");
    if !restored {
        return created;
    }
    let taken = instant(&backup.spec.taken_at);
    Some(created.map_or(taken, |c| c.min(taken)))
}

fn backup_ready(backup: &Backup) -> bool {
    backup.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phases::READY)
}

/// The zone a Plan's calendar rules count in: its cron's `CRON_TZ=`/`TZ=`, else UTC.
pub fn plan_zone(plan: &Plan) -> Result<Tz, String> {
    match plan.spec.schedule.cron.as_deref() {
        None | Some("") => Ok(UTC),
        Some(spec) => schedule::Schedule::parse(spec, UTC)
            .map(|s| s.zone())
            .map_err(|e| e.to_string()),
    }
}

fn rules_text(rules: &[Rule]) -> String {
    rules
        .iter()
        .map(|r| r.field())
        .collect::<Vec<_>>()
        .join(", ")
}

fn sort_key(
    t: DateTime<Utc>,
    created: Option<&Time>,
    name: &str,
) -> (DateTime<Utc>, DateTime<Utc>, String) {
    (t, created.map(instant).unwrap_or_default(), name.to_owned())
}

/// Decides one sweep of one namespace.
pub fn decide(observed: &Observed<'_>, config: &Config, now: DateTime<Utc>) -> Sweep {
    let floors = floors::Floors::new(observed);
    let mut decisions: Vec<Decision> = Vec::new();
    let mut outcomes: Vec<PlanOutcome> = Vec::new();
    // Plans whose objects this sweep must not delete: an invalid policy (`false`, nothing to
    // report per object) or a refusal (`true`, each held-back failure is reported).
    let mut frozen: BTreeMap<String, bool> = BTreeMap::new();
    let mut keep_failed: BTreeMap<String, usize> = BTreeMap::new();

    let mut plans: Vec<&Plan> = observed
        .plans
        .iter()
        .filter(|p| !name_of(&p.metadata).is_empty())
        .collect();
    plans.sort_by(|a, b| name_of(&a.metadata).cmp(name_of(&b.metadata)));

    for plan in &plans {
        let plan_name = name_of(&plan.metadata).to_owned();
        let Some(raw) = plan.spec.retention_policy.as_ref() else {
            continue;
        };
        let parsed =
            Policy::parse(raw).and_then(|p| match p.calendar_rule() {
                Some(rule) => plan_zone(plan).map(|zone| (p, zone)).map_err(|problem| {
                    PolicyError::UnknownZone {
                        field: rule.field(),
                        problem,
                    }
                }),
                None => Ok((p, UTC)),
            });
        let (policy, zone) = match parsed {
            Ok(v) => v,
            Err(e) => {
                frozen.insert(plan_name.clone(), false);
                outcomes.push(PlanOutcome {
                    events: vec![Event::warning(
                        reasons::INVALID_RETENTION_POLICY,
                        format!(
                            "{e}; no Backup or BackupJob of this Plan is deleted until it is fixed"
                        ),
                    )],
                    plan: plan_name,
                    refusal: None,
                    invalid: Some(e),
                    object_store_retention: None,
                });
                continue;
            }
        };
        keep_failed.insert(plan_name.clone(), policy.keep_failed);

        // The Plan's successful Backups, newest first.
        let mut ours: Vec<(&Backup, DateTime<Utc>)> = observed
            .backups
            .iter()
            .filter(|b| !deleting(&b.metadata) && backup_ready(b))
            .filter(|b| attribution::backup_of(plan, b))
            .map(|b| (b, instant(&b.spec.taken_at)))
            .collect();
        ours.sort_by(|(a, ta), (b, tb)| {
            sort_key(
                *tb,
                b.metadata.creation_timestamp.as_ref(),
                name_of(&b.metadata),
            )
            .cmp(&sort_key(
                *ta,
                a.metadata.creation_timestamp.as_ref(),
                name_of(&a.metadata),
            ))
        });
        let times: Vec<DateTime<Utc>> = ours.iter().map(|(_, t)| *t).collect();
        let kept_by = policy::select(&policy, &times, zone);

        let first = decisions.len();
        for (i, ((backup, t), rules)) in ours.iter().zip(&kept_by).enumerate() {
            let name = name_of(&backup.metadata).to_owned();
            let old = age(now, *t);
            let expired = policy.max_age.filter(|max| old > *max);
            let (verdict, reason, message) = match (expired, rules.is_empty()) {
                (None, false) => (
                    Verdict::Keep,
                    reasons::KEPT_BY_POLICY,
                    format!(
                        "Backup {name} ({} old) is kept by {}",
                        human(old),
                        rules_text(rules)
                    ),
                ),
                (Some(max), _) => (
                    Verdict::Delete,
                    reasons::MAX_AGE_EXCEEDED,
                    format!(
                        "Backup {name} is {} old, older than maxAge {}{}",
                        human(old),
                        human(max),
                        if rules.is_empty() {
                            String::new()
                        } else {
                            format!(" (which overrides {})", rules_text(rules))
                        }
                    ),
                ),
                (None, true) => (
                    Verdict::Delete,
                    reasons::RETENTION_EXPIRED,
                    format!(
                        "Backup {name} ({} old) is kept by no rule of the retention policy ({})",
                        human(old),
                        cnpg::describe(&policy)
                    ),
                ),
            };
            let floor = (verdict == Verdict::Delete)
                .then(|| floors.for_success(backup, i == 0))
                .flatten();
            let (verdict, reason, message) = match floor {
                Some((floor, why)) => (Verdict::Keep, floor, format!("{message}, but kept: {why}")),
                None => (verdict, reason, message),
            };
            decisions.push(Decision {
                kind: ObjectKind::Backup,
                name,
                plan: Some(plan_name.clone()),
                verdict,
                reason,
                message,
                time: *t,
            });
        }

        // Mass-deletion protection, over the successful Backups of this Plan.
        let would_delete = decisions[first..]
            .iter()
            .filter(|d| d.verdict == Verdict::Delete)
            .count();
        let successful = ours.len();
        let mut outcome = PlanOutcome {
            plan: plan_name.clone(),
            refusal: None,
            invalid: None,
            object_store_retention: None,
            events: Vec::new(),
        };
        if would_delete * 100 > usize::from(config.max_delete_percent) * successful {
            let refusal = Refusal {
                would_delete,
                successful,
                limit_percent: config.max_delete_percent,
            };
            let note = format!(
                "the retention policy of Plan {plan_name} ({}) would delete {would_delete} of its {successful} successful Backups ({}%) at once, more than the allowed {}%; nothing of this Plan is deleted. Check spec.retentionPolicy, or raise the limit if this is intended",
                cnpg::describe(&policy),
                would_delete * 100 / successful.max(1),
                config.max_delete_percent
            );
            for d in &mut decisions[first..] {
                if d.verdict == Verdict::Delete {
                    d.verdict = Verdict::Keep;
                    d.reason = reasons::RETENTION_REFUSED;
                    d.message = format!("{}, but kept: {note}", d.message);
                }
            }
            outcome
                .events
                .push(Event::warning(reasons::RETENTION_REFUSED, note));
            outcome.refusal = Some(refusal);
            frozen.insert(plan_name.clone(), true);
        }
        outcome.object_store_retention = cnpg::object_store_retention(
            plan,
            &decisions[first..],
            ours.iter().map(|(b, _)| *b),
            now,
        );
        outcomes.push(outcome);
    }

    if let Some(ttl) = config.failed_ttl {
        failed(
            observed,
            &plans,
            &floors,
            &frozen,
            &keep_failed,
            ttl,
            now,
            &mut decisions,
        );
    }

    cap(&mut decisions, config.max_deletions_per_namespace);

    let foundationdb_stops = foundationdb::stops(observed, &decisions);
    if config.dry_run {
        for d in decisions
            .iter_mut()
            .filter(|d| d.verdict == Verdict::Delete)
        {
            d.message = format!("dry run, nothing deleted: {}", d.message);
        }
    }
    Sweep {
        dry_run: config.dry_run,
        decisions,
        plans: outcomes,
        foundationdb_stops,
    }
}

/// One failed attempt: a failed BackupJob and/or a failed Backup of the same name.
struct Failure<'a> {
    name: &'a str,
    job: Option<&'a BackupJob>,
    backup: Option<&'a Backup>,
    time: DateTime<Utc>,
    plan: Option<String>,
}

fn job_failure_message(job: &BackupJob) -> Option<&str> {
    job.status.as_ref().and_then(|s| s.message.as_deref())
}

fn backup_failure_message(backup: &Backup) -> Option<&str> {
    backup
        .status
        .as_ref()
        .and_then(|s| api::meta::find_condition(&s.conditions, condition_types::READY))
        .and_then(|c| Some(c.message.as_str()).filter(|m| !m.is_empty()))
}

#[allow(clippy::too_many_arguments)]
fn failed(
    observed: &Observed<'_>,
    plans: &[&Plan],
    floors: &floors::Floors,
    frozen: &BTreeMap<String, bool>,
    keep_failed: &BTreeMap<String, usize>,
    ttl: Duration,
    now: DateTime<Utc>,
    decisions: &mut Vec<Decision>,
) {
    let mut by_name: BTreeMap<&str, Failure<'_>> = BTreeMap::new();
    for job in observed.backup_jobs {
        let failed = job.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phases::FAILED);
        if !failed || deleting(&job.metadata) {
            continue;
        }
        let time = job
            .status
            .as_ref()
            .and_then(|s| s.completed_at.as_ref())
            .or(job.metadata.creation_timestamp.as_ref())
            .map_or(now, instant);
        let name = name_of(&job.metadata);
        let plan = plans
            .iter()
            .find(|p| attribution::job_of(p, job))
            .map(|p| name_of(&p.metadata).to_owned());
        by_name.insert(
            name,
            Failure {
                name,
                job: Some(job),
                backup: None,
                time,
                plan,
            },
        );
    }
    for backup in observed.backups {
        if !backup_failed(backup) || deleting(&backup.metadata) {
            continue;
        }
        let name = name_of(&backup.metadata);
        let time = backup_failed_since(backup).unwrap_or(now);
        let plan = plans
            .iter()
            .find(|p| attribution::backup_of(p, backup))
            .map(|p| name_of(&p.metadata).to_owned());
        let entry = by_name.entry(name).or_insert(Failure {
            name,
            job: None,
            backup: None,
            time,
            plan: None,
        });
        entry.backup = Some(backup);
        entry.time = entry.time.max(time);
        entry.plan = entry.plan.take().or(plan);
    }

    // Newest first, so keepFailed counts from the newest.
    let mut failures: Vec<Failure<'_>> = by_name.into_values().collect();
    failures.sort_by(|a, b| (b.time, b.name).cmp(&(a.time, a.name)));
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for f in &failures {
        let refused = match f.plan.as_ref().and_then(|p| frozen.get(p)) {
            Some(false) => continue,
            Some(true) => true,
            None => false,
        };
        let rank = f.plan.as_deref().map(|p| {
            let n = seen.entry(p).or_default();
            *n += 1;
            *n
        });
        let old = age(now, f.time);
        if old <= ttl {
            continue;
        }
        let why = [
            f.job.and_then(job_failure_message),
            f.backup.and_then(backup_failure_message),
        ]
        .into_iter()
        .flatten()
        .next()
        .map_or_else(
            || "no failure message".to_owned(),
            |m| format!("failure: {m}"),
        );
        let keep = f.plan.as_ref().and_then(|p| {
            let n = keep_failed.get(p).copied().unwrap_or(0);
            rank.filter(|r| *r <= n).map(|r| (p, r, n))
        });
        let objects = [
            f.job.map(|_| ObjectKind::BackupJob),
            f.backup.map(|_| ObjectKind::Backup),
        ];
        for kind in objects.into_iter().flatten() {
            let what = format!(
                "failed {} {} ({} old, {why}) is past the failed-backup TTL of {}",
                kind.as_str(),
                f.name,
                human(old),
                human(ttl)
            );
            let floor = match kind {
                ObjectKind::Backup => f.backup.and_then(|b| floors.for_any(b)),
                ObjectKind::BackupJob => None,
            };
            let (verdict, reason, message) = match (keep, floor) {
                _ if refused => (
                    Verdict::Keep,
                    reasons::RETENTION_REFUSED,
                    format!(
                        "{what}, but kept: the retention of Plan {} is refused in this sweep",
                        f.plan.as_deref().unwrap_or_default()
                    ),
                ),
                (_, Some((floor, why))) => {
                    (Verdict::Keep, floor, format!("{what}, but kept: {why}"))
                }
                (Some((plan, rank, n)), None) => (
                    Verdict::Keep,
                    reasons::KEPT_FAILED,
                    format!(
                        "{what}, but kept: it is failure {rank} of the newest {n} that Plan {plan} keeps (keepFailed)"
                    ),
                ),
                (None, None) => (Verdict::Delete, reasons::FAILED_BACKUP_EXPIRED, what),
            };
            decisions.push(Decision {
                kind,
                name: f.name.to_owned(),
                plan: f.plan.clone(),
                verdict,
                reason,
                message,
                time: f.time,
            });
        }
    }
}

/// At most `limit` deletions, the oldest first; the rest are deferred.
fn cap(decisions: &mut [Decision], limit: usize) {
    let mut due: Vec<usize> = (0..decisions.len())
        .filter(|i| decisions[*i].verdict == Verdict::Delete)
        .collect();
    due.sort_by(|a, b| {
        let (a, b) = (&decisions[*a], &decisions[*b]);
        (a.time, a.kind, &a.name).cmp(&(b.time, b.kind, &b.name))
    });
    let total = due.len();
    for &i in due.iter().skip(limit) {
        let d = &mut decisions[i];
        d.verdict = Verdict::Defer;
        d.reason = reasons::RETENTION_DEFERRED;
        d.message = format!(
            "{}; deferred: this sweep deletes at most {limit} objects in the namespace ({total} are due, oldest first)",
            d.message
        );
    }
}
