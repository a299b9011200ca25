//! The RestoreJob controller: one reconcile per event of the job or of anything it waits on; the
//! work lease; then the decide → perform loop of the pure decisions in `drivers::restore`.
//!
//! ```text
//!  reconcile(job): watches listed? ─► work lease (one replica per job) ─► fencing token on the job
//!   loop: fresh job + Backup ─► restore::job::decide
//!           AddFinalizer ─► patch, loop          Finalize ─► best-effort cleanups, drop finalizer
//!           Dispatch(driver) ─► observe (fresh reads) ─► driver decide ─► one of:
//!           Act ─► Events, perform, loop          Status ─► write (resourceVersion precondition), stop
//!           Wait ─► Events, stop (requeue when the decision asks)
//! ```
//!
//! Invariants: every decision is made on a fresh read of the job and of the objects it depends
//! on, so a replica killed at any instant continues where the objects say; a job is written only
//! by the replica holding its work lease, and every write to it carries the resourceVersion it was
//! decided on; an action the API server refuses for good fails the job with the refusal (after
//! resuming the HelmRelease the decision names), a transient error is retried with backoff.

use std::sync::Arc;
use std::time::Duration;

use api::backups::{Backup, RestoreJob, RestoreJobStatus};
use api::contract::{finalizers, phases};
use drivers::restore::cnpg::LogRead;
use drivers::restore::{self, Action, Cleanup, Driver, Event, ObjectRef, Step};
use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams};
use kube::runtime::controller::Action as Requeue;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef as JobRef;
use kube::{ResourceExt, api::ApiResource};
use serde_json::json;

use crate::context::{Context, Ctx, Error, is_refusal, resource};
use crate::observe::{self, Carry};
use crate::storage::{self, Verdict};

/// Annotation recording the fencing token of the work lease under which the job was last driven.
pub const LEASE_TOKEN_ANNOTATION: &str = "backups.cozystack.io/restore-orchestrator-lease-token";
/// How long to wait when a job's work lease is refused. A lease another replica releases or lets
/// expire wakes the job at once (`WorkLeaseKeeper::freed`, pushed by the lease server); this retry
/// covers refusals no event ends, such as the lease server's quiet period after a restart.
const LEASE_BUSY_RETRY: Duration = Duration::from_secs(5);
/// Decisions per reconcile before yielding to other jobs (a restore needs about a dozen).
const MAX_STEPS: usize = 64;

/// Reconciles one RestoreJob.
pub async fn reconcile(job: Arc<RestoreJob>, ctx: Ctx) -> Result<Requeue, Error> {
    let result = runtime::controller::run_synced(
        job.as_ref(),
        &ctx.readiness,
        &ctx.metrics,
        &ctx.backoff,
        reconcile_job(job.clone(), &ctx),
    )
    .await;
    metrics::gauge!(crate::metrics::IN_FLIGHT).set(ctx.leases.len() as f64);
    result
}

/// Transient errors retry with per-job backoff (a conflict: at once).
pub fn error_policy(job: Arc<RestoreJob>, err: &Error, ctx: Ctx) -> Requeue {
    tracing::debug!(job = %job.name_any(), error = %err, "reconcile failed; retrying");
    ctx.backoff.action_for(JobRef::from_obj(job.as_ref()), err)
}

fn holds_finalizer(job: &RestoreJob) -> bool {
    job.finalizers().iter().any(|f| f == finalizers::CLEANUP)
}

async fn reconcile_job(job: Arc<RestoreJob>, ctx: &Context) -> Result<Requeue, Error> {
    // A finished job that keeps its finalizer needs nothing until it is deleted, but for the expiry
    // of its safety backup.
    if job.is_terminal() && job.metadata.deletion_timestamp.is_none() && holds_finalizer(&job) {
        ctx.leases.release(job.as_ref());
        let now = k8s_openapi::jiff::Timestamp::now();
        return match safety_expiry(&job, ctx.args.safety_backup_retention) {
            Some(at) if at > now => Ok(Requeue::requeue(
                Duration::try_from(at.duration_since(now)).unwrap_or_default(),
            )),
            Some(_) => {
                expire_safety_backup(ctx, &job).await?;
                Ok(Requeue::await_change())
            }
            None => Ok(Requeue::await_change()),
        };
    }
    let Some(held) = ctx.leases.hold(job.as_ref()).await? else {
        return Ok(Requeue::requeue(LEASE_BUSY_RETRY));
    };
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let mut carry = Carry::default();
    for _ in 0..MAX_STEPS {
        let Some(job) = ctx.read_job(&ns, &name).await? else {
            ctx.leases.release(job.as_ref());
            return Ok(Requeue::await_change());
        };
        let job = fence(ctx, job, held.token()).await?;
        match pass(ctx, &job, &mut carry).await? {
            Next::Again => continue,
            Next::Stop(action) => {
                if job.metadata.deletion_timestamp.is_some() {
                    ctx.leases.release(&job);
                }
                return Ok(action);
            }
        }
    }
    tracing::warn!(job = %format!("{ns}/{name}"), "no stable decision after {MAX_STEPS} steps; looking again shortly");
    Ok(Requeue::requeue(Duration::from_secs(1)))
}

enum Next {
    /// Observe and decide again.
    Again,
    /// The pass is over.
    Stop(Requeue),
}

fn wake(requeue: Option<Duration>) -> Requeue {
    match requeue {
        Some(d) => Requeue::requeue(d.max(Duration::from_millis(100))),
        None => Requeue::await_change(),
    }
}

/// Reads the Backup a job restores from: `Ok(Err(message))` when the API server refused (it is
/// missing or forbidden), which the decision turns into the job's failure.
async fn read_backup(ctx: &Context, ns: &str, name: &str) -> Result<Result<Backup, String>, Error> {
    match Api::<Backup>::namespaced(ctx.client.clone(), ns)
        .get_opt(name)
        .await
    {
        Ok(Some(b)) => Ok(Ok(b)),
        Ok(None) => Ok(Err(restore::job::not_found(name))),
        Err(e) if is_refusal(&e) => Ok(Err(kube_message(&e))),
        Err(source) => Err(Error::Api {
            action: "get",
            object: format!("Backup {ns}/{name}"),
            source,
        }),
    }
}

/// One decision on a fresh read of the job, and its execution.
async fn pass(ctx: &Context, job: &RestoreJob, carry: &mut Carry) -> Result<Next, Error> {
    let ns = job.namespace().unwrap_or_default();
    let backup_name = &job.spec.backup_ref.name;
    // A finished job that is not being deleted only ever gets its finalizer added: the decision
    // does not read the Backup then, so neither does the pass (at start-up that is one GET per
    // finished job in the cluster).
    let finished = job.is_terminal() && job.metadata.deletion_timestamp.is_none();
    let backup: Result<Backup, String> = if finished {
        Err(format!(
            "Backup {ns}/{backup_name} not read: the job has finished"
        ))
    } else {
        read_backup(ctx, &ns, backup_name).await?
    };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let lookup = match &backup {
        Ok(b) => restore::job::BackupLookup::Found(b),
        Err(e) => restore::job::BackupLookup::Error(e.clone()),
    };
    let step = restore::job::decide(&restore::job::Observed {
        job,
        backup: lookup,
        require_projection: ctx.args.require_projection,
        now: now.clone(),
    });
    let (step, driver) = match step {
        Step::Dispatch(driver) => {
            let backup = backup
                .as_ref()
                .expect("dispatch only follows a found Backup");
            let step = observe::decide(ctx, driver, job, backup, now.clone(), carry).await?;
            let driven = Some((driver, backup));
            match storage::judge(&ctx.storage, &ctx.client, job, driver, step).await {
                Verdict::Go(step) => (step, driven),
                Verdict::Resume(status) => {
                    resume(ctx, job, driver, status, driven, &now).await?;
                    return Ok(Next::Again);
                }
                Verdict::Wait(status, recheck) => {
                    write(ctx, job, status, driven, &now).await?;
                    return Ok(Next::Stop(Requeue::requeue(recheck)));
                }
                Verdict::Fail { message, on_error } => {
                    if let Some(release) = on_error.and_then(|o| o.resume) {
                        // Best effort: the failure below is the news.
                        let _ = set_suspend(ctx, &release, false).await;
                    }
                    let status = restore::skeleton::status_of(job);
                    let failed = restore::skeleton::failed(
                        &status,
                        api::contract::reasons::RESTORE_FAILED,
                        &message,
                        &now,
                    );
                    write(ctx, job, failed, driven, &now).await?;
                    return Ok(Next::Stop(Requeue::await_change()));
                }
            }
        }
        other => (other, None),
    };
    execute(ctx, job, step, driver, carry, &now).await
}

async fn execute(
    ctx: &Context,
    job: &RestoreJob,
    step: Step,
    driver: Option<(Driver, &Backup)>,
    carry: &mut Carry,
    now: &Time,
) -> Result<Next, Error> {
    match step {
        Step::AddFinalizer => {
            let mut list = job.finalizers().to_vec();
            list.push(finalizers::CLEANUP.to_owned());
            ctx.patch_job(
                job,
                json!({"metadata": {"finalizers": list}}),
                false,
                "add the finalizer to",
            )
            .await?;
            Ok(Next::Again)
        }
        Step::Finalize(cleanups) => {
            finalize(ctx, job, cleanups).await?;
            Ok(Next::Stop(Requeue::await_change()))
        }
        Step::Dispatch(_) => unreachable!("a driver decision never dispatches"),
        Step::Status {
            status,
            events,
            requeue,
        } => {
            record(ctx, job, &events, None).await;
            write(ctx, job, status, driver, now).await?;
            Ok(Next::Stop(wake(requeue)))
        }
        Step::Wait { events, requeue } => {
            record(ctx, job, &events, None).await;
            Ok(Next::Stop(wake(requeue)))
        }
        Step::Act {
            action,
            events,
            on_error,
        } => {
            let announced = !events.is_empty();
            record(ctx, job, &events, Some(&action)).await;
            match perform(ctx, &action).await? {
                Done::Performed(note) => {
                    if let (false, Some((reason, note))) = (announced, note) {
                        ctx.event_about(job, EventType::Normal, reason, &note, related(&action))
                            .await;
                    }
                }
                Done::Logs(logs) => carry.logs = Some(logs),
                Done::Refused(e) => {
                    if let Some(release) = &on_error.resume {
                        // Best effort: the failure below is the news.
                        let _ = set_suspend(ctx, release, false).await;
                    }
                    let status = restore::skeleton::status_of(job);
                    let message = format!("{}: {e}", on_error.prefix);
                    let failed = restore::skeleton::failed(
                        &status,
                        api::contract::reasons::RESTORE_FAILED,
                        &message,
                        now,
                    );
                    write(ctx, job, failed, driver, now).await?;
                    return Ok(Next::Stop(Requeue::await_change()));
                }
            }
            Ok(Next::Again)
        }
    }
}

/// The outcome of an action the API server did not fail transiently.
enum Done {
    /// Performed (or already so); the Event that tells it, when it changed something.
    Performed(Option<(&'static str, String)>),
    /// Logs read.
    Logs(Vec<(String, LogRead)>),
    /// Refused for good, with the API server's message.
    Refused(String),
}

/// The API server's own words for a refusal.
fn kube_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

fn object_api(ctx: &Context, r: &ObjectRef) -> (Api<kube::api::DynamicObject>, ApiResource) {
    let res = resource(r.api_version, r.kind);
    // An empty namespace names a cluster-scoped object (a PersistentVolume).
    let ns = (!r.namespace.is_empty()).then_some(r.namespace.as_str());
    (ctx.api(&res, ns), res)
}

/// Sets a HelmRelease's `spec.suspend`; a missing release or one already at the value is left
/// alone (`Ok(false)`).
async fn set_suspend(
    ctx: &Context,
    release: &ObjectRef,
    suspend: bool,
) -> Result<bool, kube::Error> {
    let (api, _) = object_api(ctx, release);
    // Flux's kind may not be served at all (kube-apiserver's plain-text 404): nothing to suspend.
    let Some(current) = runtime::api::get_opt(&api, &release.name).await? else {
        return Ok(false);
    };
    let now = current.data["spec"]["suspend"].as_bool().unwrap_or(false);
    if now == suspend {
        return Ok(false);
    }
    let patch = json!({"spec": {"suspend": suspend}});
    match api
        .patch(
            &release.name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Sorts an API error into "retry" (`Err`) and "refused for good" (`Ok(Refused)`).
fn settle(result: Result<Done, kube::Error>, what: &str) -> Result<Done, Error> {
    match result {
        Ok(done) => Ok(done),
        Err(e) if is_refusal(&e) => Ok(Done::Refused(kube_message(&e))),
        Err(source) => Err(Error::Api {
            action: "perform",
            object: what.to_owned(),
            source,
        }),
    }
}

async fn perform(ctx: &Context, action: &Action) -> Result<Done, Error> {
    match action {
        Action::SetSuspend { release, suspend } => {
            let what = format!("HelmRelease {}/{}", release.namespace, release.name);
            let r = set_suspend(ctx, release, *suspend).await.map(|changed| {
                let (reason, verb) = if *suspend {
                    ("HelmReleaseSuspended", "Suspended")
                } else {
                    ("HelmReleaseResumed", "Resumed")
                };
                Done::Performed(changed.then(|| (reason, format!("{verb} {what}"))))
            });
            settle(r, &what)
        }
        Action::MergePatch {
            target,
            patch,
            field_manager,
        } => {
            let (api, _) = object_api(ctx, target);
            let what = format!("{} {}/{}", target.kind, target.namespace, target.name);
            let params = PatchParams {
                field_manager: Some((*field_manager).to_owned()),
                ..Default::default()
            };
            let r = api
                .patch(&target.name, &params, &Patch::Merge(patch))
                .await
                .map(|_| Done::Performed(Some(("Patched", format!("Patched {what}")))));
            settle(r, &what)
        }
        Action::Delete(target) => {
            let (api, _) = object_api(ctx, target);
            let what = format!("{} {}/{}", target.kind, target.namespace, target.name);
            let r = match api.delete(&target.name, &DeleteParams::default()).await {
                Ok(_) => Ok(Done::Performed(Some((
                    "Deleted",
                    format!("Deleted {what}"),
                )))),
                Err(kube::Error::Api(s)) if s.code == 404 => Ok(Done::Performed(None)),
                Err(e) => Err(e),
            };
            settle(r, &what)
        }
        Action::DeleteAll(selection) => {
            let res = resource(selection.api_version, selection.kind);
            let what = format!("{} in {}", selection.kind, selection.namespace);
            let items = ctx
                .list(&res, &selection.namespace, &selection.labels)
                .await?;
            let api = ctx.api(&res, Some(&selection.namespace));
            let mut deleted = Vec::new();
            for item in items {
                if item["metadata"]["deletionTimestamp"].is_string() {
                    continue;
                }
                let name = item["metadata"]["name"].as_str().unwrap_or_default();
                match api.delete(name, &DeleteParams::default()).await {
                    Ok(_) => deleted.push(name.to_owned()),
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return settle(Err(e), &what),
                }
            }
            Ok(Done::Performed((!deleted.is_empty()).then(|| {
                (
                    "Deleted",
                    format!(
                        "Deleted {} {}/{}",
                        selection.kind,
                        selection.namespace,
                        deleted.join(",")
                    ),
                )
            })))
        }
        Action::Create(body) => {
            let what = format!(
                "{} {}/{}",
                body["kind"].as_str().unwrap_or_default(),
                body["metadata"]["namespace"].as_str().unwrap_or_default(),
                body["metadata"]["name"]
                    .as_str()
                    .or(body["metadata"]["generateName"].as_str())
                    .unwrap_or_default()
            );
            let r = match ctx.create(body).await {
                Ok(()) => Ok(Done::Performed(Some((
                    "Created",
                    format!("Created {what}"),
                )))),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(Done::Performed(None)),
                Err(e) => Err(e),
            };
            settle(r, &what)
        }
        Action::ReadLogs {
            namespace,
            pods,
            container,
            tail_lines,
        } => {
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
            let params = LogParams {
                container: Some((*container).to_owned()),
                tail_lines: Some(*tail_lines),
                ..Default::default()
            };
            let mut logs = Vec::new();
            for pod in pods {
                let read = match api.logs(pod, &params).await {
                    Ok(lines) => LogRead::Lines(lines),
                    Err(kube::Error::Api(s)) if s.code == 403 => LogRead::Forbidden,
                    Err(e) => {
                        tracing::debug!(pod = %pod, error = %e, "could not read a recovery log");
                        LogRead::Failed
                    }
                };
                logs.push((pod.clone(), read));
            }
            Ok(Done::Logs(logs))
        }
    }
}

/// Runs the cleanups of a deleted job (best effort) and drops the finalizer.
async fn finalize(ctx: &Context, job: &RestoreJob, cleanups: Vec<Cleanup>) -> Result<(), Error> {
    ctx.storage.breakers.release(&storage::job_key(job));
    for Cleanup { action, on_error } in cleanups {
        let failure = match perform(ctx, &action).await {
            Ok(Done::Refused(e)) => Some(e),
            Err(e) => Some(e.to_string()),
            Ok(_) => None,
        };
        if let (Some(e), Some((reason, prefix))) = (failure, on_error) {
            ctx.event(job, EventType::Warning, reason, &format!("{prefix}: {e}"))
                .await;
        }
    }
    let list: Vec<String> = job
        .finalizers()
        .iter()
        .filter(|f| *f != finalizers::CLEANUP)
        .cloned()
        .collect();
    ctx.patch_job(
        job,
        json!({"metadata": {"finalizers": list}}),
        false,
        "remove the finalizer from",
    )
    .await
    .map(|_| ())
}

async fn record(ctx: &Context, job: &RestoreJob, events: &[Event], about: Option<&Action>) {
    for e in events {
        let type_ = match e.type_ {
            restore::EventType::Normal => EventType::Normal,
            restore::EventType::Warning => EventType::Warning,
        };
        ctx.event_about(job, type_, e.reason, &e.note, about.and_then(related))
            .await;
    }
}

/// The object an action works on, as an Event's related object.
fn related(action: &Action) -> Option<ObjectReference> {
    let of = |r: &restore::ObjectRef| ObjectReference {
        api_version: Some(r.api_version.to_owned()),
        kind: Some(r.kind.to_owned()),
        namespace: (!r.namespace.is_empty()).then(|| r.namespace.clone()),
        name: Some(r.name.clone()),
        ..Default::default()
    };
    match action {
        Action::SetSuspend { release, .. } => Some(of(release)),
        Action::MergePatch { target, .. } => Some(of(target)),
        Action::Delete(target) => Some(of(target)),
        Action::Create(body) => {
            let s = |v: &serde_json::Value| v.as_str().map(str::to_owned);
            let meta = &body["metadata"];
            Some(ObjectReference {
                api_version: s(&body["apiVersion"]),
                kind: s(&body["kind"]),
                namespace: s(&meta["namespace"]),
                name: s(&meta["name"]).or_else(|| s(&meta["generateName"])),
                ..Default::default()
            })
        }
        Action::DeleteAll(_) | Action::ReadLogs { .. } => None,
    }
}

/// Writes the status (when it changed) and tells the phase change by an Event and the metrics.
async fn write(
    ctx: &Context,
    job: &RestoreJob,
    status: RestoreJobStatus,
    driver: Option<(Driver, &Backup)>,
    now: &Time,
) -> Result<(), Error> {
    if job.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let before = job.status.clone().unwrap_or_default();
    ctx.write_status(job, &status).await?;
    crate::metrics::transition(ctx, job, &before, &status, driver, now).await;
    if phases::is_terminal(status.phase.as_deref()) {
        ctx.storage.breakers.release(&storage::job_key(job));
        ctx.leases.release(job);
    }
    Ok(())
}

/// The object store answers again for a job that waited for it: its operator objects that failed
/// for storage are deleted (its driver creates them anew), and the wait ends.
async fn resume(
    ctx: &Context,
    job: &RestoreJob,
    driver: Driver,
    mut status: RestoreJobStatus,
    driven: Option<(Driver, &Backup)>,
    now: &Time,
) -> Result<(), Error> {
    for (resource, ns, name) in observe::storage_failed(ctx, driver, job).await? {
        let what = format!("{} {ns}/{name}", resource.kind);
        match ctx
            .api(&resource, Some(&ns))
            .delete(&name, &DeleteParams::background())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(Error::Api {
                    action: "delete",
                    object: what,
                    source,
                });
            }
        }
        tracing::info!(
            job = %storage::job_key(job),
            object = %what,
            "storage recovered: the operator object that failed while storage was down is deleted; the restore creates a new one"
        );
    }
    drivers::status::end_wait(&mut status, &[storage_breaker::STORAGE_UNAVAILABLE]);
    write(ctx, job, status, driven, now).await
}

/// Records this replica's fencing token on the job (`WorkLeaseKeeper::fence`): a replica that
/// lost the lease fails on its next write instead of overwriting the new holder's work.
async fn fence(ctx: &Context, job: RestoreJob, token: u64) -> Result<RestoreJob, Error> {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let api: Api<RestoreJob> = Api::namespaced(ctx.client.clone(), &ns);
    match ctx
        .leases
        .fence(&api, &job, token, LEASE_TOKEN_ANNOTATION)
        .await
    {
        Ok(runtime::Fence::Current) => Ok(job),
        Ok(runtime::Fence::Recorded(updated)) => Ok(updated),
        Ok(runtime::Fence::Stale) => Err(Error::Conflict(format!("RestoreJob {ns}/{name}"))),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            Err(Error::Conflict(format!("RestoreJob {ns}/{name}")))
        }
        Err(source) => Err(Error::Api {
            action: "record the lease token on",
            object: format!("RestoreJob {ns}/{name}"),
            source,
        }),
    }
}

/// When the safety backup of a finished job expires: `completedAt` + `retention` for a job that
/// `Succeeded` with `SafetyBackupReady=True`; `None` otherwise (no safety backup, or the restore
/// failed and the safety backup is what undoes it).
pub fn safety_expiry(
    job: &RestoreJob,
    retention: Duration,
) -> Option<k8s_openapi::jiff::Timestamp> {
    let status = job.status.as_ref()?;
    if status.phase.as_deref() != Some(phases::SUCCEEDED) {
        return None;
    }
    let ready = api::meta::find_condition(
        &status.conditions,
        api::contract::condition_types::SAFETY_BACKUP_READY,
    )?;
    if !ready.is_true() {
        return None;
    }
    let end = status.completed_at.as_ref()?;
    let retention = k8s_openapi::jiff::SignedDuration::try_from(retention).ok()?;
    end.0.checked_add(retention).ok()
}

/// Deletes the expired safety backup's catalog entry (the backup-runner's catalog finalizer then
/// removes the cnpg Backup), when it is still the one this job recorded.
async fn expire_safety_backup(ctx: &Context, job: &RestoreJob) -> Result<(), Error> {
    use api::contract::labels;
    let ns = job.namespace().unwrap_or_default();
    let name = restore::cnpg::safety_backup_name(&job.name_any());
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(backup) = api.get_opt(&name).await.map_err(crate::context::api_err(
        "get",
        format!("Backup {ns}/{name}"),
    ))?
    else {
        return Ok(());
    };
    let ours = backup.labels().get(labels::SAFETY_BACKUP_FOR) == Some(&job.name_any())
        && backup.metadata.deletion_timestamp.is_none();
    if !ours {
        return Ok(());
    }
    match api.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {
            ctx.event(
                job,
                EventType::Normal,
                "SafetyBackupExpired",
                &format!(
                    "deleted the safety backup Backup {ns}/{name}: the restore succeeded more than {} ago",
                    drivers::status::go_duration(ctx.args.safety_backup_retention)
                ),
            )
            .await;
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::Api {
            action: "delete",
            object: format!("Backup {ns}/{name}"),
            source,
        }),
    }
}

/// The non-terminal RestoreJobs of `namespace` (an event there may concern any of them).
pub fn active_in(
    store: &kube::runtime::reflector::Store<RestoreJob>,
    namespace: &str,
) -> Vec<JobRef<RestoreJob>> {
    store
        .state()
        .into_iter()
        .filter(|j| {
            j.metadata.namespace.as_deref() == Some(namespace)
                && (!j.is_terminal() || j.metadata.deletion_timestamp.is_some())
        })
        .map(|j| JobRef::from_obj(j.as_ref()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::backups::RestoreJobStatus;
    use api::{Condition, ConditionStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn finished(phase: &str, safety: Option<ConditionStatus>) -> RestoreJob {
        let mut job = RestoreJob::test("rj", "bk").namespace("t").build();
        let at = |s: &str| Time(s.parse().unwrap());
        job.status = Some(RestoreJobStatus {
            phase: Some(phase.into()),
            completed_at: Some(at("2026-03-01T10:00:00Z")),
            conditions: safety
                .into_iter()
                .map(|status| Condition {
                    type_: "SafetyBackupReady".into(),
                    status,
                    reason: "SafetyBackupCompleted".into(),
                    message: String::new(),
                    last_transition_time: at("2026-03-01T09:00:00Z"),
                    observed_generation: None,
                })
                .collect(),
            ..Default::default()
        });
        job
    }

    #[test]
    fn only_the_safety_backup_of_a_successful_restore_expires() {
        let week = Duration::from_secs(7 * 24 * 3600);
        assert_eq!(
            safety_expiry(&finished("Succeeded", Some(ConditionStatus::True)), week)
                .map(|t| t.to_string()),
            Some("2026-03-08T10:00:00Z".into())
        );
        assert_eq!(
            safety_expiry(&finished("Failed", Some(ConditionStatus::True)), week),
            None,
            "a failed restore keeps the backup that undoes it"
        );
        assert_eq!(safety_expiry(&finished("Succeeded", None), week), None);
        assert_eq!(
            safety_expiry(&finished("Succeeded", Some(ConditionStatus::False)), week),
            None
        );
    }
}
