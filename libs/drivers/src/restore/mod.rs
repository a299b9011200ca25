//! The restore-orchestrator's pure decisions: what to do next with a RestoreJob, as functions over
//! what an executor observed. No client, no clock: the executor reads the objects, passes `now`, and
//! performs the returned [`Step`], then observes again.
//!
//! ```text
//!  job      the top level: finalizer, Backup lookup, group/kind gates, the projector's verdict,
//!           dispatch by the Backup's strategy kind; also the shared failure/StrategyNotReady steps
//!  options  spec.options per driver, with upstream's tolerance rules and Events
//!  skeleton the steps every operator-driven restore shares (start, deadline, wait for the
//!           target, one operator object per job, succeed/overdue, HelmRelease hold/let go)
//!  batch    the Job and Altinity restores (one batch Job <job>-restore, Complete before deadline)
//!  cnpg     the CNPG restore state machine (PITR pre-flight, WAL gate, safety backup, suspend,
//!           patch, purge exactly once, resume, health before deadline, log classification)
//!  etcd     the Etcd restore (in place: capture the live spec, suspend, purge, recreate with
//!           bootstrap.restore, Available before deadline, resume)
//!  mariadb  the MariaDB restore (one operator Restore per job, Complete before deadline)
//!  mongodb  the MongoDB restore (live or stored backup source, point-in-time target, one
//!           PerconaServerMongoDBRestore per job, ready before deadline)
//!  foundationdb  the FoundationDB restore (one FoundationDBRestore per job, Completed before
//!           deadline)
//!  velero   the Velero restore (in place: suspend, halt, keep PVCs, drop DataVolumes; or into
//!           another namespace; resource modifiers, one Velero Restore, post-restore rename)
//! ```
//!
//! Invariants: every decision is re-derived from persisted state (the job's status and the
//! cluster's objects), so an executor can stop at any instant and the next pass continues; every
//! wait carries a deadline that ends in a `Failed` status with an explanation; no Secret value is
//! ever copied into a status, an Event or a patch built here.

/// The value of a `ControlFlow::Continue`, or return the `Break`'s step from the enclosing
/// `decide` (the pass ends with it). See [`skeleton`].
macro_rules! proceed {
    ($flow:expr) => {
        match $flow {
            std::ops::ControlFlow::Continue(value) => value,
            std::ops::ControlFlow::Break(step) => return step,
        }
    };
}

pub mod batch;
pub mod cnpg;
pub mod etcd;
pub mod foundationdb;
pub mod job;
pub mod mariadb;
pub mod mongodb;
pub mod options;
pub mod skeleton;
pub mod velero;

pub use crate::driver::Driver;
use std::time::Duration;

use api::backups::RestoreJobStatus;
use serde_json::Value as Json;

/// The type of a Kubernetes Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// An Event to record on the RestoreJob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Normal or Warning.
    pub type_: EventType,
    /// The reason (CamelCase, a contract string).
    pub reason: &'static str,
    /// The note.
    pub note: String,
}

impl Event {
    /// A Warning Event.
    pub fn warning(reason: &'static str, note: impl Into<String>) -> Self {
        Self {
            type_: EventType::Warning,
            reason,
            note: note.into(),
        }
    }

    /// A Normal Event.
    pub fn normal(reason: &'static str, note: impl Into<String>) -> Self {
        Self {
            type_: EventType::Normal,
            reason,
            note: note.into(),
        }
    }
}

/// A named object an action works on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    /// `group/version` (or `v1`).
    pub api_version: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

/// The objects of one kind in one namespace carrying every one of `labels`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// `group/version` (or `v1`).
    pub api_version: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// The namespace.
    pub namespace: String,
    /// Label equalities, all required.
    pub labels: Vec<(String, String)>,
}

/// One write or read an executor performs for a decision. Every action is idempotent as described
/// on its variant, so repeating it after a crash is harmless.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Set a Flux HelmRelease's `spec.suspend`. A missing HelmRelease, or one already at the value,
    /// is a no-op.
    SetSuspend {
        /// The HelmRelease.
        release: ObjectRef,
        /// The desired `spec.suspend`.
        suspend: bool,
    },
    /// JSON-merge-patch an object under `field_manager`.
    MergePatch {
        /// The object.
        target: ObjectRef,
        /// The merge patch.
        patch: Json,
        /// The field manager of the write.
        field_manager: &'static str,
    },
    /// Delete an object; NotFound counts as done.
    Delete(ObjectRef),
    /// Delete every object of a selection; none counts as done.
    DeleteAll(Selection),
    /// Create an object (the body names it); AlreadyExists counts as done.
    Create(Json),
    /// Read the last `tail_lines` lines of `container` in each pod (in this order) and pass the
    /// results back as observed logs. Never refused as a whole: a pod whose log cannot be read is
    /// reported as such (Forbidden or another error) and the others are still read.
    ReadLogs {
        /// The pods' namespace.
        namespace: String,
        /// Pod names, newest first.
        pods: Vec<String>,
        /// The container.
        container: &'static str,
        /// How many lines from the end.
        tail_lines: i64,
    },
}

/// What happens when an [`Action`] is refused by the API server.
#[derive(Debug, Clone, PartialEq)]
pub struct OnError {
    /// The job fails with `<prefix>: <error>`.
    pub prefix: &'static str,
    /// A HelmRelease to resume (best effort) before failing.
    pub resume: Option<ObjectRef>,
}

/// A best-effort cleanup action run while a RestoreJob is deleted.
#[derive(Debug, Clone, PartialEq)]
pub struct Cleanup {
    /// The action.
    pub action: Action,
    /// When it fails: a Warning Event `(reason, note prefix)` (`<prefix>: <error>`), or nothing.
    pub on_error: Option<(&'static str, &'static str)>,
}

/// What to do next with a RestoreJob.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Add the `backups.cozystack.io/cleanup` finalizer, then decide again.
    AddFinalizer,
    /// The job is being deleted: run each cleanup (best effort, failures never block), then remove
    /// the finalizer.
    Finalize(Vec<Cleanup>),
    /// Run the restore driver of this kind.
    Dispatch(Driver),
    /// Write the whole status, record the Events, and stop; decide again on the next change or
    /// after `requeue` (a deadline or a poll of something that sends no event).
    Status {
        /// The new status.
        status: RestoreJobStatus,
        /// Events to record.
        events: Vec<Event>,
        /// When to look again without an event.
        requeue: Option<Duration>,
    },
    /// Record the Events, perform the action, then observe again and decide anew. A refusal fails
    /// the job as `on_error` says.
    Act {
        /// The action.
        action: Action,
        /// Events to record before it.
        events: Vec<Event>,
        /// What a refusal means.
        on_error: OnError,
    },
    /// Nothing to write: record the Events and wait for a change or `requeue`.
    Wait {
        /// Events to record.
        events: Vec<Event>,
        /// When to look again without an event.
        requeue: Option<Duration>,
    },
}

impl Step {
    /// Waiting for the next change, with nothing to record.
    pub fn idle() -> Self {
        Self::Wait {
            events: Vec::new(),
            requeue: None,
        }
    }
}

/// Writes `next` unless it equals `current`, in which case only records the Events and waits.
pub fn write_or_wait(
    current: &RestoreJobStatus,
    next: RestoreJobStatus,
    events: Vec<Event>,
    requeue: Option<Duration>,
) -> Step {
    if *current == next {
        Step::Wait { events, requeue }
    } else {
        Step::Status {
            status: next,
            events,
            requeue,
        }
    }
}

/// Time from `since` to `now` (zero when `now` is earlier).
pub fn elapsed(
    since: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Duration {
    Duration::try_from(now.0.duration_since(since.0)).unwrap_or_default()
}

/// Upstream's check that a Backup's snapshot (`status.underlyingResources`) is of the driver's kind
/// and apiVersion; `Err` carries upstream's message naming the first that differs.
pub(crate) fn snapshot_identity(
    kind: &serde_json::Value,
    api_version: &serde_json::Value,
    want_kind: &str,
    want_api_version: &str,
) -> Result<(), String> {
    const PREFIX: &str =
        "Backup.status.underlyingResources carries a snapshot of an unrecognised kind/apiVersion";
    let kind = kind.as_str().unwrap_or_default();
    if kind != want_kind {
        return Err(format!("{PREFIX}: kind={kind:?} (want {want_kind:?})"));
    }
    let api_version = api_version.as_str().unwrap_or_default();
    if api_version != want_api_version {
        return Err(format!(
            "{PREFIX}: apiVersion={api_version:?} (want {want_api_version:?})"
        ));
    }
    Ok(())
}

/// How soon an operator object is looked at again: every `max` at most, sooner when the deadline
/// measured from `since` is nearer, never more often than once a second.
pub(crate) fn poll_within(
    since: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    deadline: std::time::Duration,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    max: std::time::Duration,
) -> std::time::Duration {
    deadline
        .saturating_sub(elapsed(since, now))
        .clamp(std::time::Duration::from_secs(1), max)
}

/// Upstream's gate on a restore's target application for the drivers that restore into an
/// `apps.cozystack.io/<want_kind>` (an empty group means that group): `Err` with the driver's message.
pub(crate) fn target_kind_gate(
    kind: &str,
    group: &str,
    want_kind: &str,
    driver: &str,
) -> Result<(), String> {
    if kind != want_kind {
        return Err(format!(
            "target applicationRef.kind={kind:?} is not supported by the {driver} driver"
        ));
    }
    if !group.is_empty() && group != api::contract::groups::APPS {
        return Err(format!(
            "target applicationRef.apiGroup={group:?} is not supported by the {driver} driver"
        ));
    }
    Ok(())
}
