//! The Plan controller (leader only): turns a Plan's cron schedule into BackupJobs, one per slot.
//!
//! ```text
//!  Plan event / requeue at the next slot / leadership gained
//!      └──► reconcile(plan) ── leader? ──► decide (pure): parse spec.schedule.cron
//!              │                              invalid ─► Error=True CronSpecInvalid, wait for an edit
//!              │                              valid   ─► schedule::decide(now, created, last slot)
//!              ▼
//!           due slot ─► concurrencyPolicy Forbid and an earlier job still running? ─► Event, skip
//!                    └► create BackupJob <plan>-<unix minutes> (AlreadyExists = already done)
//!           skipped slots ─► one Warning Event
//!           status: lastScheduleTime = the slot dealt with, nextScheduleTime, Error=False CronSpecValid
//!           (written with the Plan's resourceVersion as precondition) ─► requeue at the next slot
//! ```
//!
//! Invariants: a slot fires at most once. The slot and the job name are pure functions of the Plan
//! and the clock, so two replicas (or one before and after a crash) pick the same name and the
//! second create answers AlreadyExists; the slot is recorded in `status.lastScheduleTime` only
//! after its job exists, and no later evaluation returns that slot or an older one. Only the
//! leader evaluates Plans; winning leadership re-evaluates every Plan.

use std::sync::Arc;
use std::time::Duration;

use api::backups::{BackupJob, BackupJobSpec, Plan, PlanStatus};
use api::contract::{condition_types, reasons};
use api::meta::{Condition, ConditionStatus, LocalObjectReference, find_condition, set_condition};
use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use lease::LeaderElector;
use runtime::events::Recorder;
use runtime::{Backoff, ControllerMetrics, ErrorClass, ReconcileError};
use schedule::chrono_tz::Tz;
use schedule::{Evaluation, Schedule, SlotDecision, backup_job_name};
use serde_json::json;

/// `spec.concurrencyPolicy` value that skips a due slot while an earlier job still runs.
pub const FORBID: &str = "Forbid";

/// Event reasons on a Plan (ours; upstream's Plan controller publishes none).
pub mod event_reasons {
    /// Normal: a BackupJob was created for a slot.
    pub const BACKUP_JOB_CREATED: &str = "BackupJobCreated";
    /// Warning: slots older than the starting deadline were given up.
    pub const MISSED_SCHEDULE: &str = "MissedSchedule";
    /// Warning: a due slot was skipped because `concurrencyPolicy: Forbid` and a job still runs.
    pub const CONCURRENT_RUN_FORBIDDEN: &str = "ConcurrentRunForbidden";
    /// Warning: the cron spec does not parse.
    pub const INVALID_SCHEDULE: &str = "InvalidSchedule";
    /// Warning: the API server refused the slot's BackupJob (the Plan is malformed).
    pub const BACKUP_JOB_CREATE_REFUSED: &str =
        api::contract::event_reasons::BACKUP_JOB_CREATE_REFUSED;
}

/// Counter `{result}`: schedule slots by outcome (`created`, `exists`, `missed`, `forbidden`, `refused`,
/// `scratch`).
pub const SLOTS: &str = "cozy_backups_backup_runner_plan_slots_total";

/// Longest wait before a Plan is evaluated again even when its next slot is further away, so a
/// wall-clock step (NTP, a suspended VM) is noticed within this bound.
const MAX_REQUEUE: Duration = Duration::from_secs(3600);
/// Added to the wait for the next slot so the wake-up lands after it, not a hair before.
const SLOT_SLACK: Duration = Duration::from_millis(50);

/// Errors of the Plan controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{action} {object}: {source}")]
    Api {
        /// What was attempted.
        action: &'static str,
        /// The object.
        object: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The Plan changed since it was read; the next event re-evaluates it.
    #[error("Plan {0} changed while it was evaluated")]
    Conflict(String),
}

impl ReconcileError for Error {
    fn kind(&self) -> &'static str {
        match self {
            Error::Api { .. } => "api",
            Error::Conflict(_) => "conflict",
        }
    }
    fn class(&self) -> ErrorClass {
        ErrorClass::Transient
    }
}

/// What the Plan controller needs.
pub struct Context {
    /// Client.
    pub client: Client,
    /// Only the leader schedules.
    pub leader: LeaderElector,
    /// Events on Plans.
    pub recorder: Recorder,
    /// Runs/failures/duration (`controller="plans"`).
    pub metrics: ControllerMetrics,
    /// Per-Plan backoff.
    pub backoff: Backoff<Plan>,
    /// Zone of schedules without a `CRON_TZ=`/`TZ=` prefix.
    pub zone: Tz,
    /// How late a slot may still run.
    pub starting_deadline: Duration,
}

/// Reconciles one Plan.
pub async fn reconcile(plan: Arc<Plan>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.leader.current().is_leading() {
        // Winning leadership re-evaluates every Plan.
        return Ok(Action::await_change());
    }
    let timer = ctx.metrics.start();
    let result = reconcile_plan(&plan, &ctx, Utc::now()).await;
    timer.finish(result.as_ref().err().map(ReconcileError::kind));
    if result.is_ok() {
        ctx.backoff.reset(&ObjectRef::from_obj(plan.as_ref()));
    }
    result
}

/// Transient errors retry with per-Plan backoff.
pub fn error_policy(plan: Arc<Plan>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.backoff
        .action_for(ObjectRef::from_obj(plan.as_ref()), err)
}

/// One evaluation of a Plan, decided without I/O.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The status to write (unchanged when equal to the current one).
    pub status: PlanStatus,
    /// The schedule's slot decision; `None` when the spec does not parse.
    pub slots: Option<SlotDecision>,
    /// The BackupJob of the due slot.
    pub job: Option<BackupJob>,
    /// When to evaluate again (`None`: on the next change of the Plan).
    pub requeue: Option<Duration>,
}

/// Decides one evaluation of `plan` at `now`.
pub fn decide(plan: &Plan, now: DateTime<Utc>, zone: Tz, starting_deadline: Duration) -> Decision {
    let spec = plan.spec.schedule.cron.as_deref().unwrap_or_default();
    let mut status = plan.status.clone().unwrap_or_default();
    let generation = plan.metadata.generation;
    let schedule = match Schedule::parse(spec, zone) {
        Ok(s) => s,
        Err(e) => {
            set_condition(
                &mut status.conditions,
                Condition::new(
                    condition_types::PLAN_ERROR,
                    ConditionStatus::True,
                    reasons::CRON_SPEC_INVALID,
                    format!("could not parse cron {spec}: {e}"),
                    to_time(now),
                )
                .observed(generation),
            );
            status.next_schedule_time = None;
            return Decision {
                status,
                slots: None,
                job: None,
                requeue: None,
            };
        }
    };
    set_condition(
        &mut status.conditions,
        Condition::new(
            condition_types::PLAN_ERROR,
            ConditionStatus::False,
            reasons::CRON_SPEC_VALID,
            "The cron schedule has been successfully parsed",
            to_time(now),
        )
        .observed(generation),
    );
    let created = plan
        .metadata
        .creation_timestamp
        .as_ref()
        .map(from_time)
        .unwrap_or(now);
    let slots = schedule.decide(&Evaluation {
        now,
        created,
        last_slot: status.last_schedule_time.as_ref().map(from_time),
        starting_deadline,
    });
    if let Some(record) = slots.record {
        status.last_schedule_time = Some(to_time(record));
    }
    status.next_schedule_time = slots.next.map(to_time);
    let requeue = slots.next.map(|next| {
        let wait = (next - now).to_std().unwrap_or_default() + SLOT_SLACK;
        wait.min(MAX_REQUEUE)
    });
    Decision {
        job: slots.due.map(|slot| backup_job(plan, slot)),
        status,
        slots: Some(slots),
        requeue: requeue.or(Some(MAX_REQUEUE)),
    }
}

/// The BackupJob of `plan` for `slot`, as upstream's factory builds it (no labels), controlled by
/// the Plan so deleting the Plan deletes its jobs.
pub fn backup_job(plan: &Plan, slot: DateTime<Utc>) -> BackupJob {
    let name = plan.name_any();
    BackupJob {
        metadata: ObjectMeta {
            name: Some(backup_job_name(&name, slot)),
            namespace: plan.namespace(),
            owner_references: Some(vec![OwnerReference {
                api_version: Plan::api_version(&()).into_owned(),
                kind: Plan::kind(&()).into_owned(),
                name: name.clone(),
                uid: plan.uid().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        spec: BackupJobSpec {
            plan_ref: Some(LocalObjectReference::new(&name)),
            application_ref: plan.spec.application_ref.normalized(),
            backup_class_name: plan.spec.backup_class_name.clone(),
        },
        status: None,
    }
}

/// True when `job` belongs to `plan` and has not finished.
pub fn still_running(job: &BackupJob, plan: &Plan) -> bool {
    let ours = job
        .owner_references()
        .iter()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == plan.uid().as_ref())
        || job.spec.plan_ref.as_ref().map(|r| r.name.as_str()) == Some(plan.name_any().as_str());
    ours && !job.is_terminal()
}

async fn reconcile_plan(plan: &Plan, ctx: &Context, now: DateTime<Utc>) -> Result<Action, Error> {
    let decision = decide(plan, now, ctx.zone, ctx.starting_deadline);
    let ns = plan.namespace().unwrap_or_default();
    let name = plan.name_any();
    let was_invalid = plan
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, condition_types::PLAN_ERROR))
        .is_some_and(Condition::is_true);
    if decision.slots.is_none() && !was_invalid {
        let message = find_condition(&decision.status.conditions, condition_types::PLAN_ERROR)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        event(
            ctx,
            plan,
            EventType::Warning,
            event_reasons::INVALID_SCHEDULE,
            &message,
        )
        .await;
    }
    if let Some(skipped) = decision.slots.as_ref().and_then(|s| s.skipped) {
        metrics::counter!(SLOTS, "result" => "missed").increment(1);
        let note = format!(
            "missed {} schedule slot(s) from {} to {}: later than the starting deadline of {}",
            skipped.count,
            skipped.oldest.to_rfc3339(),
            skipped.newest.to_rfc3339(),
            runtime::duration::format(ctx.starting_deadline),
        );
        event(
            ctx,
            plan,
            EventType::Warning,
            event_reasons::MISSED_SCHEDULE,
            &note,
        )
        .await;
    }
    if let Some(job) = &decision.job {
        run_slot(plan, job, ctx).await?;
    }
    if Some(&decision.status) != plan.status.as_ref() {
        write_status(ctx, plan, &decision.status).await?;
    }
    tracing::debug!(plan = %format!("{ns}/{name}"), next = ?decision.status.next_schedule_time, "plan evaluated");
    Ok(decision
        .requeue
        .map(Action::requeue)
        .unwrap_or_else(Action::await_change))
}

/// Why a Plan backs up nothing of the application whose labels are `labels`: a restore drill's
/// scratch copy belongs to no tenant and is deleted when its drill ends (`None`: back it up).
pub fn scratch_copy_note(
    app: &str,
    labels: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<String> {
    labels
        .and_then(|l| l.get(api::contract::drills::LABEL))
        .filter(|v| *v == "true")
        .map(|_| {
            format!(
                "application {app} is a restore drill's scratch copy (label {}=true); no BackupJob is created for it",
                api::contract::drills::LABEL
            )
        })
}

/// The labels of the Plan's application (`apps.cozystack.io` kinds only; `None` when it is not
/// found or of another group).
async fn application_labels(
    plan: &Plan,
    ctx: &Context,
) -> Result<Option<std::collections::BTreeMap<String, String>>, Error> {
    let r = &plan.spec.application_ref;
    if r.api_group
        .as_deref()
        .is_some_and(|g| !g.is_empty() && g != api::contract::groups::APPS)
    {
        return Ok(None);
    }
    let resource = kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        api::contract::groups::APPS,
        api::contract::groups::V1ALPHA1,
        &r.kind,
    ));
    let ns = plan.namespace().unwrap_or_default();
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &ns, &resource);
    match api.get_opt(&r.name).await {
        Ok(o) => Ok(o.map(|o| o.metadata.labels.unwrap_or_default())),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(e) => Err(api_error(
            "get the application of",
            format!("{ns}/{}", plan.name_any()),
        )(e)),
    }
}

/// Creates the due slot's job, unless the Plan forbids concurrent runs and one is still running,
/// or the application is a restore drill's scratch copy.
async fn run_slot(plan: &Plan, job: &BackupJob, ctx: &Context) -> Result<(), Error> {
    let ns = plan.namespace().unwrap_or_default();
    let api: Api<BackupJob> = Api::namespaced(ctx.client.clone(), &ns);
    let job_name = job.name_any();
    if let Some(note) = scratch_copy_note(
        &plan.spec.application_ref.name,
        application_labels(plan, ctx).await?.as_ref(),
    ) {
        metrics::counter!(SLOTS, "result" => "scratch").increment(1);
        event(ctx, plan, EventType::Warning, "ScratchApplication", &note).await;
        return Ok(());
    }
    if plan.spec.concurrency_policy.as_deref() == Some(FORBID) {
        // Fresh from the API: the previous slot's job may be newer than any cache.
        let jobs = api
            .list(&ListParams::default())
            .await
            .map_err(api_error("list BackupJobs in", ns.clone()))?;
        let running: Vec<String> = jobs
            .items
            .iter()
            .filter(|j| j.name_any() != job_name && still_running(j, plan))
            .map(ResourceExt::name_any)
            .collect();
        if !running.is_empty() {
            metrics::counter!(SLOTS, "result" => "forbidden").increment(1);
            let note = format!(
                "skipped the slot of {job_name}: concurrencyPolicy is Forbid and {} still running",
                running.join(", ")
            );
            event(
                ctx,
                plan,
                EventType::Warning,
                event_reasons::CONCURRENT_RUN_FORBIDDEN,
                &note,
            )
            .await;
            return Ok(());
        }
    }
    match api.create(&PostParams::default(), job).await {
        Ok(_) => {
            metrics::counter!(SLOTS, "result" => "created").increment(1);
            event(
                ctx,
                plan,
                EventType::Normal,
                event_reasons::BACKUP_JOB_CREATED,
                &format!("created BackupJob {job_name}"),
            )
            .await;
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => {
            // Created before a crash or by the previous leader: the slot is done.
            metrics::counter!(SLOTS, "result" => "exists").increment(1);
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
            // The Plan itself is malformed (a name too long for `<plan>-<minutes>`, an empty
            // backupClassName): retrying cannot help, so the slot counts as dealt with and the
            // Plan says why.
            metrics::counter!(SLOTS, "result" => "refused").increment(1);
            let note = format!(
                "the API server refused BackupJob {job_name} for this slot: {}; fix the Plan",
                e.message
            );
            event(
                ctx,
                plan,
                EventType::Warning,
                event_reasons::BACKUP_JOB_CREATE_REFUSED,
                &note,
            )
            .await;
            Ok(())
        }
        Err(source) => Err(Error::Api {
            action: "create",
            object: format!("BackupJob {ns}/{job_name}"),
            source,
        }),
    }
}

/// Writes the Plan's status with its resourceVersion as a precondition; removed fields are nulled.
async fn write_status(ctx: &Context, plan: &Plan, status: &PlanStatus) -> Result<(), Error> {
    let ns = plan.namespace().unwrap_or_default();
    let name = plan.name_any();
    let mut body = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    for key in ["lastScheduleTime", "nextScheduleTime"] {
        if body.get(key).is_none() {
            body[key] = serde_json::Value::Null;
        }
    }
    let patch = json!({
        "metadata": {"resourceVersion": plan.resource_version()},
        "status": body,
    });
    let api: Api<Plan> = Api::namespaced(ctx.client.clone(), &ns);
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(Error::Conflict(format!("{ns}/{name}"))),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::Api {
            action: "write status of",
            object: format!("Plan {ns}/{name}"),
            source,
        }),
    }
}

fn api_error(action: &'static str, object: String) -> impl FnOnce(kube::Error) -> Error {
    move |source| Error::Api {
        action,
        object,
        source,
    }
}

/// Publishes an Event on the Plan (best effort).
async fn event(ctx: &Context, plan: &Plan, type_: EventType, reason: &str, note: &str) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(runtime::events::note(note)),
        action: "Schedule".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &plan.object_ref(&())).await {
        tracing::debug!(error = %e, "could not publish an Event");
    }
}

fn from_time(t: &Time) -> DateTime<Utc> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().max(0) as u32)
        .unwrap_or_default()
}

fn to_time(t: DateTime<Utc>) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(t.timestamp()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;
    use schedule::chrono_tz::{Europe::Berlin, UTC};

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn plan(cron: &str, created: &str, last: Option<&str>) -> Plan {
        let mut p = Plan::test("nightly", cron).namespace("tenant-a").build();
        p.metadata.uid = Some("uid-1".into());
        p.metadata.generation = Some(3);
        p.metadata.creation_timestamp = Some(to_time(at(created)));
        if let Some(last) = last {
            p.status = Some(PlanStatus {
                last_schedule_time: Some(to_time(at(last))),
                ..Default::default()
            });
        }
        p
    }

    const DEADLINE: Duration = Duration::from_secs(300);

    #[test]
    fn a_due_slot_makes_upstreams_job_and_records_the_slot() {
        let p = plan(
            "0 2 * * *",
            "2023-12-01T00:00:00Z",
            Some("2023-12-31T02:00:00Z"),
        );
        let d = decide(&p, at("2024-01-01T02:00:30Z"), UTC, DEADLINE);
        let job = d.job.expect("due");
        assert_eq!(job.name_any(), "nightly-28401240");
        assert_eq!(job.namespace().as_deref(), Some("tenant-a"));
        assert_eq!(
            job.spec.plan_ref.as_ref().map(|r| r.name.as_str()),
            Some("nightly")
        );
        assert_eq!(
            job.spec.application_ref.api_group.as_deref(),
            Some("apps.cozystack.io")
        );
        let owner = &job.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("Plan", "uid-1", Some(true))
        );
        assert_eq!(job.metadata.labels, None);
        assert_eq!(
            d.status.last_schedule_time,
            Some(to_time(at("2024-01-01T02:00:00Z")))
        );
        assert_eq!(
            d.status.next_schedule_time,
            Some(to_time(at("2024-01-02T02:00:00Z")))
        );
        let c = find_condition(&d.status.conditions, "Error").unwrap();
        assert_eq!(
            (
                c.is_true(),
                c.reason.as_str(),
                c.message.as_str(),
                c.observed_generation
            ),
            (
                false,
                "CronSpecValid",
                "The cron schedule has been successfully parsed",
                Some(3)
            )
        );
    }

    #[test]
    fn before_the_slot_nothing_runs_and_the_wake_up_is_just_after_it() {
        let p = plan(
            "0 2 * * *",
            "2023-12-01T00:00:00Z",
            Some("2023-12-31T02:00:00Z"),
        );
        let d = decide(&p, at("2024-01-01T01:59:00Z"), UTC, DEADLINE);
        assert_eq!(d.job, None);
        assert_eq!(d.requeue, Some(Duration::from_secs(60) + SLOT_SLACK));
        assert_eq!(
            d.status.last_schedule_time,
            Some(to_time(at("2023-12-31T02:00:00Z")))
        );
    }

    #[test]
    fn far_slots_are_re_evaluated_hourly() {
        let p = plan("@yearly", "2023-12-01T00:00:00Z", None);
        let d = decide(&p, at("2024-03-01T00:00:00Z"), UTC, DEADLINE);
        assert_eq!(d.requeue, Some(MAX_REQUEUE));
    }

    #[test]
    fn slots_missed_beyond_the_deadline_are_reported_and_recorded_without_a_job() {
        let p = plan(
            "0 * * * *",
            "2023-12-01T00:00:00Z",
            Some("2024-01-01T00:00:00Z"),
        );
        let d = decide(&p, at("2024-01-01T05:10:00Z"), UTC, DEADLINE);
        assert_eq!(d.job, None);
        let skipped = d.slots.unwrap().skipped.unwrap();
        assert_eq!(skipped.count.to_string(), "5");
        assert_eq!(
            d.status.last_schedule_time,
            Some(to_time(at("2024-01-01T05:00:00Z")))
        );
    }

    #[test]
    fn cron_tz_is_honoured_over_the_process_zone() {
        let p = plan(
            "CRON_TZ=Europe/Berlin 0 2 * * *",
            "2024-03-01T00:00:00Z",
            None,
        );
        // 02:00 in Berlin in summer is 00:00Z.
        let d = decide(&p, at("2024-07-01T00:01:00Z"), UTC, DEADLINE);
        assert_eq!(d.job.unwrap().name_any(), "nightly-28663200");
        // Without a prefix the process zone (flag) applies.
        let p = plan("0 2 * * *", "2024-03-01T00:00:00Z", None);
        let d = decide(&p, at("2024-07-01T00:01:00Z"), Berlin, DEADLINE);
        assert!(d.job.is_some());
    }

    #[test]
    fn an_invalid_spec_is_an_error_condition_and_waits_for_an_edit() {
        let p = plan("0 2 32 * *", "2024-03-01T00:00:00Z", None);
        let d = decide(&p, at("2024-07-01T00:01:00Z"), UTC, DEADLINE);
        assert_eq!(d.job, None);
        assert_eq!(d.requeue, None);
        let c = find_condition(&d.status.conditions, "Error").unwrap();
        assert!(c.is_true());
        assert_eq!(c.reason, "CronSpecInvalid");
        assert!(
            c.message.starts_with("could not parse cron 0 2 32 * *: "),
            "{}",
            c.message
        );
        let mut fixed = p.clone();
        fixed.status = Some(d.status);
        fixed.spec.schedule.cron = Some("0 2 * * *".into());
        let d = decide(&fixed, at("2024-07-01T00:01:00Z"), UTC, DEADLINE);
        let c = find_condition(&d.status.conditions, "Error").unwrap();
        assert_eq!((c.is_true(), c.reason.as_str()), (false, "CronSpecValid"));
        assert!(d.status.next_schedule_time.is_some());
    }

    #[test]
    fn a_drills_scratch_copy_is_never_backed_up() {
        let labelled = [(api::contract::drills::LABEL.to_owned(), "true".to_owned())].into();
        let note = scratch_copy_note("db-verify-1234abcd", Some(&labelled)).unwrap();
        assert!(
            note.contains("db-verify-1234abcd is a restore drill's scratch copy"),
            "{note}"
        );
        assert_eq!(scratch_copy_note("db", Some(&Default::default())), None);
        assert_eq!(scratch_copy_note("db", None), None);
        let other = [(api::contract::drills::LABEL.to_owned(), "false".to_owned())].into();
        assert_eq!(scratch_copy_note("db", Some(&other)), None);
    }

    #[test]
    fn a_job_counts_as_running_only_for_its_own_plan_until_terminal() {
        let p = plan("0 2 * * *", "2024-03-01T00:00:00Z", None);
        let mut job = backup_job(&p, at("2024-07-01T02:00:00Z"));
        assert!(still_running(&job, &p));
        job.status = Some(api::backups::BackupJobStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        assert!(!still_running(&job, &p));
        let other = plan("0 3 * * *", "2024-03-01T00:00:00Z", None);
        let mut other = other;
        other.metadata.name = Some("weekly".into());
        other.metadata.uid = Some("uid-2".into());
        let job = backup_job(&other, at("2024-07-01T02:00:00Z"));
        assert!(!still_running(&job, &p));
    }
}
