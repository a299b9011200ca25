//! The BackupJob controller: one reconcile per job event (and per event of anything the job waits
//! on), the pipeline gate, the work lease, then the driver.
//!
//! ```text
//!  BackupJob / BackupClass / Strategy CRs / driver-side objects (by owned-by labels) / Clusters
//!        └──► Controller ──► reconcile(job): gate (pipeline.rs) ─► work lease (one replica per job)
//!                                            ─► fencing token recorded on the job ─► driver step(s)
//! ```
//!
//! Invariants: a job is written only by the replica holding its work lease, and every status
//! write carries the resourceVersion it was decided on, so a stale replica's write fails; a
//! terminal job is never touched again; nothing is created in a tenant namespace before the
//! pipeline gate passed (so no object leaks for a foreign or unknown strategy).

use std::sync::Arc;
use std::time::Duration;

use api::backups::{BackupClass, BackupJob};
use api::contract::{phases, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};

use crate::context::{Ctx, Error, api_err};

mod storage;
use crate::drivers::{self, Run};
use crate::pipeline::{self, Gate};

/// Annotation recording the fencing token of the work lease under which the job was last driven.
pub const LEASE_TOKEN_ANNOTATION: &str = "backups.cozystack.io/runner-lease-token";
/// How long to wait when a job's work lease is refused. A lease another replica releases or lets
/// expire wakes the job at once (`WorkLeaseKeeper::freed`, pushed by the lease server); this retry
/// covers refusals no event ends, such as the lease server's quiet period after a restart.
const LEASE_BUSY_RETRY: Duration = Duration::from_secs(5);
/// When to look again at a job whose cached copy is behind this replica's own write, should the
/// write's event not arrive first.
const BEHIND_RETRY: Duration = Duration::from_secs(1);

/// Reconciles one BackupJob.
pub async fn reconcile(job: Arc<BackupJob>, ctx: Ctx) -> Result<Action, Error> {
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
pub fn error_policy(job: Arc<BackupJob>, err: &Error, ctx: Ctx) -> Action {
    ctx.backoff
        .action_for(ObjectRef::from_obj(job.as_ref()), err)
}

async fn reconcile_job(job: Arc<BackupJob>, ctx: &Ctx) -> Result<Action, Error> {
    let name = &job.spec.backup_class_name;
    let class = match ctx.caches.classes.get(&ObjectRef::<BackupClass>::new(name)) {
        Some(class) => Some(class),
        // The class watch may not have delivered a class created just before the job: ask the
        // API server before telling the tenant it does not exist.
        None => Api::<BackupClass>::all(ctx.client.clone())
            .get_opt(name)
            .await
            .map_err(api_err("get", format!("BackupClass {name}")))?
            .map(Arc::new),
    };
    let gate = pipeline::gate(
        &job,
        class.as_ref().map(|c| &c.spec),
        ctx.args.require_projection,
    );
    match &gate {
        Gate::Terminal => {
            ctx.breakers.release(&format!(
                "{}/{}",
                job.namespace().unwrap_or_default(),
                job.name_any()
            ));
            ctx.leases.release(job.as_ref());
            return Ok(Action::await_change());
        }
        Gate::NotOurs => {
            not_handled(ctx, &job, class.as_ref().map(|c| &c.spec)).await;
            return Ok(Action::await_change());
        }
        Gate::AwaitProjection => {
            let age = job
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(|c| (jiff_now() - c.0).try_into().ok())
                .unwrap_or_default();
            if age < ctx.args.projection_grace {
                // The projector's condition arrives as a job event; this is only a safety net.
                return Ok(Action::requeue(ctx.args.projection_grace - age));
            }
        }
        _ => {}
    }
    // A copy this replica already wrote over (its cache lags its own write): the write's own
    // event comes next; deciding now would repeat the decision into a conflict.
    if ctx.leases.behind(job.as_ref()) {
        metrics::counter!(crate::metrics::BEHIND).increment(1);
        return Ok(Action::requeue(BEHIND_RETRY));
    }
    let Some(held) = ctx.leases.hold(job.as_ref()).await? else {
        return Ok(Action::requeue(LEASE_BUSY_RETRY));
    };
    let job = fence(ctx, job, held.token()).await?;
    let now = Time(jiff_now());
    let mut status = job.status.clone().unwrap_or_default();
    let ns = job.namespace().unwrap_or_default();
    match gate {
        Gate::Terminal | Gate::NotOurs => unreachable!("handled above"),
        // The BackupClass watch wakes the job when the class appears.
        Gate::ClassNotFound(message) => {
            wait(
                ctx,
                &job,
                status,
                reasons::BACKUP_CLASS_NOT_FOUND,
                &message,
                &now,
            )
            .await
        }
        Gate::Fail(message) => {
            drivers::status_fail(&mut status, &message, &now);
            write(ctx, &job, status).await?;
            crate::metrics::gate_failed(&job);
            ctx.leases.release(job.as_ref());
            Ok(Action::await_change())
        }
        Gate::AwaitProjection => {
            let message = format!(
                "waiting for the credentials projector to report CredentialsProjected for generation {} in {ns}",
                job.metadata.generation.unwrap_or_default()
            );
            let reason = reasons::CREDENTIALS_PROJECTION_PENDING;
            wait(ctx, &job, status, reason, &message, &now).await
        }
        Gate::ProjectionPending(message) => {
            let reason = reasons::CREDENTIALS_PROJECTION_PENDING;
            wait(ctx, &job, status, reason, &message, &now).await
        }
        Gate::Dispatch {
            driver,
            resolved,
            app,
        } => {
            let deadline = match resolved.parameters.get("backupDeadline") {
                None => ctx.args.backup_deadline,
                Some(d) => match runtime::duration::parse(d) {
                    Ok(d) if !d.is_zero() => d,
                    parsed => {
                        let why = parsed.err().unwrap_or_else(|| "it is zero".into());
                        let message = format!(
                            "BackupClass {:?} parameter backupDeadline {d:?} is not a positive duration ({why}); use e.g. 6h or 90m",
                            job.spec.backup_class_name
                        );
                        drivers::status_fail(&mut status, &message, &now);
                        write(ctx, &job, status).await?;
                        crate::metrics::gate_failed(&job);
                        ctx.leases.release(job.as_ref());
                        return Ok(Action::await_change());
                    }
                },
            };
            // The gate passed: a wait it reported is over (a driver that writes no Ready condition
            // of its own, Velero, would leave it standing).
            let gate_waits = [
                reasons::CREDENTIALS_PROJECTION_PENDING,
                reasons::BACKUP_CLASS_NOT_FOUND,
            ];
            if ::drivers::status::end_wait(&mut status, &gate_waits) {
                write(ctx, &job, status.clone()).await?;
            }
            // The storage breaker: while the system bucket's endpoint is down, the job waits
            // (Ready=False StorageUnavailable) instead of running its driver.
            let storage = storage::system_endpoint(ctx).await;
            if let Some((endpoint, s3)) = &storage
                && let Some(action) =
                    storage::gate(ctx, &job, &mut status, endpoint, s3, deadline).await?
            {
                return Ok(action);
            }
            if status.started_at.is_none() {
                template_problems(ctx, &job, driver, &resolved).await;
            }
            let mut run = Run {
                job: job.as_ref(),
                status,
                resolved: &resolved,
                app: &app,
                now,
                deadline,
                fresh_app: None,
            };
            let endpoint = storage.as_ref().map(|(e, _)| e.as_str());
            let action = drivers::drive(ctx, driver, &mut run, endpoint).await?;
            if phases::is_terminal(run.status.phase.as_deref()) {
                ctx.breakers.release(&format!("{ns}/{}", job.name_any()));
                ctx.leases.release(job.as_ref());
            }
            Ok(action)
        }
    }
}

/// A job routed to a strategy group no built-in driver serves is left to that group's controller
/// (upstream's rule), but said so once: a Normal Event naming the route's `strategyRef.apiGroup`,
/// while the job has no status (a third-party controller that takes it writes one).
async fn not_handled(ctx: &Ctx, job: &BackupJob, class: Option<&api::backups::BackupClassSpec>) {
    if job.status.is_some() {
        return;
    }
    let app = job.spec.application_ref.normalized();
    let Some(resolved) = class.and_then(|c| c.resolve(&app)) else {
        return;
    };
    let group = resolved.strategy_ref.api_group.as_deref().unwrap_or("");
    let note = format!(
        "BackupClass {:?} routes Kind {:?} to strategy {}/{} in group {group:?} (strategyRef.apiGroup); \
         this runner drives only {:?}, so the job is left to that group's controller",
        job.spec.backup_class_name,
        app.kind,
        resolved.strategy_ref.kind,
        resolved.strategy_ref.name,
        api::contract::groups::STRATEGY,
    );
    tracing::info!(job = %format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any()), "{note}");
    ctx.event(
        job,
        kube::runtime::events::EventType::Normal,
        api::contract::event_reasons::STRATEGY_NOT_HANDLED,
        &note,
    )
    .await;
}

/// On a job's first pass, a Warning Event for each string of the strategy's template that does not
/// parse or refers to a route parameter that is not set (the driver still renders it as upstream
/// does: as written, or with `<no value>`).
async fn template_problems(
    ctx: &Ctx,
    job: &BackupJob,
    driver: ::drivers::Driver,
    resolved: &api::backups::ResolvedStrategy,
) {
    let name = &resolved.strategy_ref.name;
    let Some(template) = ctx.caches.template(driver.kind(), name) else {
        return;
    };
    let problems = ::drivers::template::problems(&template, &resolved.parameters);
    if problems.is_empty() {
        return;
    }
    let list: Vec<String> = problems
        .iter()
        .map(|(path, problem)| format!("spec.template.{path} {problem}"))
        .collect();
    let note = format!("strategy {driver}/{name}: {}", list.join("; "));
    ctx.event(
        job,
        kube::runtime::events::EventType::Warning,
        api::contract::event_reasons::STRATEGY_TEMPLATE_INVALID,
        &note,
    )
    .await;
}

/// Records this replica's fencing token on the job (`WorkLeaseKeeper::fence`): a replica that
/// lost the lease fails on its next write instead of overwriting the new holder's work.
async fn fence(ctx: &Ctx, job: Arc<BackupJob>, token: u64) -> Result<Arc<BackupJob>, Error> {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let api: Api<BackupJob> = Api::namespaced(ctx.client.clone(), &ns);
    match ctx
        .leases
        .fence(&api, job.as_ref(), token, LEASE_TOKEN_ANNOTATION)
        .await
    {
        Ok(runtime::Fence::Current) => Ok(job),
        Ok(runtime::Fence::Recorded(updated)) => Ok(Arc::new(updated)),
        Ok(runtime::Fence::Stale) => Err(Error::Conflict(format!("{ns}/{name}"))),
        Err(kube::Error::Api(e)) if e.code == 409 => Err(Error::Conflict(format!("{ns}/{name}"))),
        Err(source) => Err(Error::Api {
            action: "record the lease token on",
            object: format!("BackupJob {ns}/{name}"),
            source,
        }),
    }
}

/// Writes `Ready=False/<reason>` with `message` on a working copy of the job's status; an event
/// (the projector's condition, the BackupClass appearing) wakes the job.
async fn wait(
    ctx: &Ctx,
    job: &BackupJob,
    mut status: api::backups::BackupJobStatus,
    reason: &str,
    message: &str,
    now: &Time,
) -> Result<Action, Error> {
    drivers::status_wait(&mut status, reason, message, now);
    write(ctx, job, status).await?;
    Ok(Action::await_change())
}

pub(crate) async fn write(
    ctx: &crate::context::Context,
    job: &BackupJob,
    status: api::backups::BackupJobStatus,
) -> Result<(), Error> {
    if job.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let changed_phase = job.status.as_ref().and_then(|s| s.phase.clone()) != status.phase;
    ctx.write_status(job, &status).await?;
    if changed_phase {
        crate::events::phase_changed(ctx, job, &status).await;
    }
    Ok(())
}

/// The current time.
pub fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// The jobs a change of `class` concerns: those naming it and not terminal.
pub fn jobs_of_class(
    store: &kube::runtime::reflector::Store<BackupJob>,
    class: &str,
) -> Vec<ObjectRef<BackupJob>> {
    store
        .state()
        .into_iter()
        .filter(|j| j.spec.backup_class_name == class && !is_terminal(j))
        .map(|j| ObjectRef::from_obj(j.as_ref()))
        .collect()
}

/// The jobs waiting on a strategy CR (any non-terminal job whose Ready reason is StrategyNotReady,
/// or that has not started yet).
pub fn jobs_waiting_for_strategies(
    store: &kube::runtime::reflector::Store<BackupJob>,
) -> Vec<ObjectRef<BackupJob>> {
    store
        .state()
        .into_iter()
        .filter(|j| !is_terminal(j))
        .filter(|j| {
            j.status
                .as_ref()
                .and_then(|s| drivers::ready_reason(&s.conditions))
                .is_none_or(|r| r == reasons::STRATEGY_NOT_READY)
        })
        .map(|j| ObjectRef::from_obj(j.as_ref()))
        .collect()
}

/// The non-terminal jobs of `namespace` backing up application `app`.
pub fn jobs_of_app(
    store: &kube::runtime::reflector::Store<BackupJob>,
    namespace: &str,
    app: &str,
) -> Vec<ObjectRef<BackupJob>> {
    active_jobs(store, namespace, |r| r.name == app)
}

/// The non-terminal jobs of `namespace` backing up an application of `kind`.
pub fn jobs_of_kind(
    store: &kube::runtime::reflector::Store<BackupJob>,
    namespace: &str,
    kind: &str,
) -> Vec<ObjectRef<BackupJob>> {
    active_jobs(store, namespace, |r| r.kind == kind)
}

/// The non-terminal jobs of `namespace` whose application reference passes `wanted`.
fn active_jobs(
    store: &kube::runtime::reflector::Store<BackupJob>,
    namespace: &str,
    wanted: impl Fn(&api::TypedLocalObjectReference) -> bool,
) -> Vec<ObjectRef<BackupJob>> {
    store
        .state()
        .into_iter()
        .filter(|j| {
            j.meta().namespace.as_deref() == Some(namespace)
                && wanted(&j.spec.application_ref)
                && !is_terminal(j)
        })
        .map(|j| ObjectRef::from_obj(j.as_ref()))
        .collect()
}

fn is_terminal(job: &BackupJob) -> bool {
    phases::is_terminal(job.status.as_ref().and_then(|s| s.phase.as_deref()))
}
