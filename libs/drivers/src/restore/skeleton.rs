//! The steps every operator-driven restore takes, each filled in by the driver with its own
//! objects, reasons and messages. A driver's `decide` reads top to bottom as these steps; what is
//! left in the driver is what is its own.
//!
//! ```text
//!  status_of(), fail(), failed()   the working status and the terminal failure (RestoreFailed)
//!  strategy_not_ready()   the Strategy the Backup names is not there yet (30 minutes)
//!  target_app_name(), owned_by()   where a restore writes, and the labels of what it creates
//!  start()            startedAt (+ phase Running) once, with the Warnings decoding found
//!  Clock              restoreTimeoutSeconds from startedAt: passed? when to look again?
//!  await_target()     the target object exists, else Ready=False/<reason> until the deadline
//!  create_once()      one operator object per job, found again by its owned-by labels
//!  succeeded()        Succeeded with the operator's words
//!  overdue()          still running past the deadline: Failed, naming what was last seen
//!  waiting()          Ready=False/<reason> with a message, written only when it changed
//!  helm_release(), set_suspend(), resume()   the application's HelmRelease held and let go
//!  malformed_snapshot(), unrecognised_snapshot()   Backup.status.underlyingResources read
//! ```
//!
//! A step that may end the pass returns `ControlFlow::Break(step)`; `proceed!` (in the parent
//! module) returns that step from the driver's `decide`, or yields the `Continue` value.
//!
//! Invariants: every function is pure; a wait always carries a requeue no later than the
//! deadline; the deadline's message always names the option that changes it.

use std::ops::ControlFlow;
use std::time::Duration;

use api::backups::{Backup, RestoreJob, RestoreJobStatus};
use api::contract::{event_reasons, labels, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value as Json;

use super::{Action, Event, ObjectRef, OnError, Step, elapsed, poll_within, write_or_wait};
use crate::status::go_duration;

/// The option a deadline message names.
const OVERRIDE: &str = "override via spec.options.restoreTimeoutSeconds";

/// How long a restore may wait for the Strategy CR its Backup names (from `startedAt`).
pub const STRATEGY_NOT_READY_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// The job's status (a working copy).
pub fn status_of(job: &RestoreJob) -> RestoreJobStatus {
    job.status.clone().unwrap_or_default()
}

/// `markRestoreJobFailedReason`: `completedAt`, phase `Failed`, the message, `Ready=False/<reason>`.
pub fn failed(
    status: &RestoreJobStatus,
    reason: &str,
    message: &str,
    now: &Time,
) -> RestoreJobStatus {
    let mut status = status.clone();
    crate::status::fail(&mut status, reason, message, now);
    status
}

/// The terminal failure step with reason `RestoreFailed`.
pub fn fail(status: &RestoreJobStatus, message: &str, events: Vec<Event>, now: &Time) -> Step {
    Step::Status {
        status: failed(status, reasons::RESTORE_FAILED, message, now),
        events,
        requeue: None,
    }
}

/// Upstream's restore StrategyNotReady wait: `Ready=False/StrategyNotReady` until 30 minutes after
/// `startedAt`, then Failed.
pub fn strategy_not_ready(status: &RestoreJobStatus, strategy: &str, now: &Time) -> Step {
    let spent = status
        .started_at
        .as_ref()
        .map(|s| elapsed(s, now))
        .unwrap_or_default();
    if status.started_at.is_some() && spent > STRATEGY_NOT_READY_DEADLINE {
        return fail(
            status,
            &format!(
                "Strategy {strategy:?} referenced by Backup was not provisioned within {}; check the strategyRef name or the platform backup-storage bootstrap",
                crate::status::go_duration(STRATEGY_NOT_READY_DEADLINE)
            ),
            Vec::new(),
            now,
        );
    }
    let mut next = status.clone();
    crate::status::wait(
        &mut next,
        reasons::STRATEGY_NOT_READY,
        &format!(
            "Strategy {strategy:?} referenced by Backup is not yet provisioned; the platform may still be initialising backup storage"
        ),
        false,
        now,
    );
    write_or_wait(
        status,
        next,
        Vec::new(),
        Some(
            STRATEGY_NOT_READY_DEADLINE
                .saturating_sub(spent)
                .max(Duration::from_secs(1)),
        ),
    )
}

/// The application a restore writes into: the Backup's, with the non-empty name of
/// `targetApplicationRef` when given.
pub fn target_app_name(job: &RestoreJob, backup: &Backup) -> String {
    job.spec
        .target_application_ref
        .as_ref()
        .map(|t| t.name.clone())
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| backup.spec.application_ref.name.clone())
}

/// The owned-by label pair of objects a RestoreJob creates.
pub fn owned_by(job: &RestoreJob) -> Vec<(String, String)> {
    vec![
        (
            labels::OWNED_BY_JOB_NAME.to_owned(),
            job.metadata.name.clone().unwrap_or_default(),
        ),
        (
            labels::OWNED_BY_JOB_NAMESPACE.to_owned(),
            job.metadata.namespace.clone().unwrap_or_default(),
        ),
    ]
}

/// Records `startedAt` (and phase Running) on the first pass, with `events` (the Warnings that
/// decoding the options or the snapshot produced: recorded once, here). `Ok(startedAt)` on every
/// later pass.
pub fn start(
    status: &RestoreJobStatus,
    now: &Time,
    events: impl FnOnce() -> Vec<Event>,
) -> ControlFlow<Step, Time> {
    if let Some(started) = &status.started_at {
        return ControlFlow::Continue(started.clone());
    }
    let mut status = status.clone();
    crate::status::start(&mut status, true, now);
    ControlFlow::Break(Step::Status {
        status,
        events: events(),
        requeue: None,
    })
}

/// The restore's deadline: `limit` after `started`, looked at again at most every `poll`.
#[derive(Debug, Clone)]
pub struct Clock<'a> {
    /// `status.startedAt`.
    pub started: Time,
    /// `restoreTimeoutSeconds` (or the driver's default).
    pub limit: Duration,
    /// Now.
    pub now: &'a Time,
    /// The longest a wait goes without looking again.
    pub poll: Duration,
}

impl Clock<'_> {
    /// Whether the deadline has passed.
    pub fn passed(&self) -> bool {
        elapsed(&self.started, self.now) > self.limit
    }

    /// When to look again: at the deadline at the latest, at least a second away.
    pub fn requeue(&self) -> Option<Duration> {
        Some(poll_within(&self.started, self.limit, self.now, self.poll))
    }

    /// The limit as Go prints a duration (`30m0s`).
    pub fn limit(&self) -> String {
        go_duration(self.limit)
    }
}

/// `Ready=False/<reason>` with `message`, written only when it changes the status, and a look
/// again by the clock.
pub fn waiting(status: &RestoreJobStatus, clock: &Clock<'_>, reason: &str, message: &str) -> Step {
    let mut next = status.clone();
    crate::status::wait(&mut next, reason, message, false, clock.now);
    write_or_wait(status, next, Vec::new(), clock.requeue())
}

/// The target `what` (`group/Kind namespace/name`) must exist: `Ok` when it does; otherwise a
/// wait with `reason` until the deadline, then Failed with `hint` (what the tenant should do).
pub fn await_target(
    status: &RestoreJobStatus,
    clock: &Clock<'_>,
    present: bool,
    what: &str,
    reason: &str,
    hint: &str,
) -> ControlFlow<Step> {
    if present {
        return ControlFlow::Continue(());
    }
    if clock.passed() {
        return ControlFlow::Break(fail(
            status,
            &format!(
                "target {what} not found within {} ({hint}; {OVERRIDE})",
                clock.limit()
            ),
            Vec::new(),
            clock.now,
        ));
    }
    ControlFlow::Break(waiting(
        status,
        clock,
        reason,
        &format!("waiting for target {what} to exist"),
    ))
}

/// The job's own operator object: the oldest of those labelled as its own (by creation time,
/// then name), so a second one created by a lost answer never changes which is followed.
pub fn own(objects: &[Json]) -> Option<&Json> {
    objects.iter().min_by(|a, b| {
        let key = |r: &Json| {
            (
                r["metadata"]["creationTimestamp"]
                    .as_str()
                    .map(str::to_owned),
                r["metadata"]["name"].as_str().map(str::to_owned),
            )
        };
        key(a).cmp(&key(b))
    })
}

/// The job's own operator object, or the step that creates it (`prefix` names the object in
/// the failure: `failed to ensure <group>/<Kind>`).
pub fn create_once<'o>(
    objects: &'o [Json],
    prefix: &'static str,
    body: impl FnOnce() -> Json,
) -> ControlFlow<Step, &'o Json> {
    match own(objects) {
        Some(own) => ControlFlow::Continue(own),
        None => ControlFlow::Break(Step::Act {
            action: Action::Create(body()),
            events: Vec::new(),
            on_error: OnError {
                prefix,
                resume: None,
            },
        }),
    }
}

/// `namespace/name` of an operator object (the job's namespace when the object has none).
pub fn id(object: &Json, namespace: &str) -> String {
    format!(
        "{}/{}",
        object["metadata"]["namespace"]
            .as_str()
            .unwrap_or(namespace),
        object["metadata"]["name"].as_str().unwrap_or_default()
    )
}

/// Succeeded, with the operator's words as the Ready message.
pub fn succeeded(status: &RestoreJobStatus, message: Option<&str>, now: &Time) -> Step {
    let mut status = status.clone();
    crate::status::restore_succeeded(&mut status, message, now);
    Step::Status {
        status,
        events: Vec::new(),
        requeue: None,
    }
}

/// Failed when the deadline has passed while `what` still runs (`detail`: what was last seen).
pub fn overdue(
    status: &RestoreJobStatus,
    clock: &Clock<'_>,
    what: &str,
    detail: &str,
) -> Option<Step> {
    clock.passed().then(|| {
        fail(
            status,
            &format!(
                "{what} did not complete within {} ({detail}; {OVERRIDE})",
                clock.limit()
            ),
            Vec::new(),
            clock.now,
        )
    })
}

/// The HelmRelease `namespace/name`.
pub fn helm_release(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "helm.toolkit.fluxcd.io/v2",
        kind: "HelmRelease",
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

/// Sets the HelmRelease's `spec.suspend`; a refusal fails the restore with `prefix`.
pub fn set_suspend(release: ObjectRef, suspend: bool, prefix: &'static str) -> Step {
    Step::Act {
        action: Action::SetSuspend { release, suspend },
        events: Vec::new(),
        on_error: OnError {
            prefix,
            resume: None,
        },
    }
}

/// Resumes a suspended HelmRelease (`spec.suspend: false`); a refusal fails the restore.
pub fn resume(release: ObjectRef) -> Step {
    set_suspend(release, false, "failed to resume HelmRelease")
}

/// The Warning for a snapshot in `Backup.status.underlyingResources` that does not decode as
/// `driver`'s; the driver falls back to `driverMetadata`.
pub fn malformed_snapshot(driver: &str, error: &str) -> Event {
    Event::warning(
        event_reasons::MALFORMED_SNAPSHOT,
        format!(
            "Backup.status.underlyingResources is not a valid {driver} snapshot; falling back to driverMetadata: {error}"
        ),
    )
}

/// Failed for a snapshot of a kind or version this controller does not know.
pub fn unrecognised_snapshot(status: &RestoreJobStatus, error: &str, now: &Time) -> Step {
    fail(
        status,
        &format!(
            "{error} (re-take the backup with a controller version compatible with this snapshot schema, or clear Backup.status.underlyingResources to opt into the driverMetadata fallback)"
        ),
        Vec::new(),
        now,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn clock(now: &Time) -> Clock<'_> {
        Clock {
            started: t("2026-03-01T10:00:00Z"),
            limit: Duration::from_secs(60),
            now,
            poll: Duration::from_secs(10),
        }
    }

    fn ready(step: &Step) -> (String, String, String) {
        let Step::Status { status, .. } = step else {
            panic!("not a status: {step:?}");
        };
        let r = crate::status::ready(&status.conditions).cloned().unwrap();
        (
            status.phase.clone().unwrap_or_default(),
            r.reason,
            r.message,
        )
    }

    #[test]
    fn start_stamps_once_with_the_events() {
        let now = t("2026-03-01T10:00:00Z");
        let step = start(&RestoreJobStatus::default(), &now, || {
            vec![malformed_snapshot("Etcd", "bad")]
        })
        .break_value()
        .unwrap();
        let Step::Status { status, events, .. } = step else {
            panic!()
        };
        assert_eq!(status.started_at, Some(now.clone()));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(events.len(), 1);
        assert_eq!(
            start(&status, &now, || panic!("events asked for twice")).continue_value(),
            Some(now)
        );
    }

    #[test]
    fn a_missing_target_waits_then_fails_naming_the_hint_and_the_option() {
        let early = t("2026-03-01T10:00:55Z");
        let step = await_target(
            &RestoreJobStatus::default(),
            &clock(&early),
            false,
            "x.io/Thing t/a",
            "TargetThingNotReady",
            "deploy it",
        )
        .break_value()
        .unwrap();
        assert_eq!(
            ready(&step).1,
            "TargetThingNotReady",
            "a wait with the reason"
        );
        let Step::Status { requeue, .. } = &step else {
            panic!()
        };
        assert_eq!(*requeue, Some(Duration::from_secs(5)), "at the deadline");
        let late = t("2026-03-01T10:01:01Z");
        let step = await_target(
            &RestoreJobStatus::default(),
            &clock(&late),
            false,
            "x.io/Thing t/a",
            "TargetThingNotReady",
            "deploy it",
        )
        .break_value()
        .unwrap();
        assert_eq!(
            ready(&step).2,
            "target x.io/Thing t/a not found within 1m0s (deploy it; override via spec.options.restoreTimeoutSeconds)"
        );
        assert!(
            await_target(
                &RestoreJobStatus::default(),
                &clock(&late),
                true,
                "",
                "",
                ""
            )
            .is_continue()
        );
    }

    #[test]
    fn create_once_follows_the_oldest_own_object() {
        let objects = [
            json!({"metadata": {"name": "b", "creationTimestamp": "2026-03-01T10:00:02Z"}}),
            json!({"metadata": {"name": "a", "creationTimestamp": "2026-03-01T10:00:02Z"}}),
            json!({"metadata": {"name": "c", "creationTimestamp": "2026-03-01T10:00:01Z"}}),
        ];
        let own = create_once(&objects, "p", || unreachable!())
            .continue_value()
            .unwrap();
        assert_eq!(own["metadata"]["name"], "c");
        assert!(matches!(
            create_once(&[], "failed to ensure x", || json!({})),
            ControlFlow::Break(Step::Act {
                action: Action::Create(_),
                on_error: OnError {
                    prefix: "failed to ensure x",
                    resume: None
                },
                ..
            })
        ));
    }

    #[test]
    fn a_waiting_status_is_written_once() {
        let now = t("2026-03-01T10:00:30Z");
        let first = waiting(&RestoreJobStatus::default(), &clock(&now), "R", "m");
        let Step::Status { status, .. } = first else {
            panic!()
        };
        assert!(matches!(
            waiting(&status, &clock(&now), "R", "m"),
            Step::Wait { .. }
        ));
        assert!(overdue(&status, &clock(&now), "x", "y").is_none());
    }
}
