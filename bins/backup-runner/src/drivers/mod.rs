//! The strategy drivers: each is a pure `decide(run, observed) -> Step` over what the caches show,
//! and this module's thin executor performs the step.
//!
//! ```text
//!  loop (at most MAX_STEPS per reconcile):
//!    observe (caches) ─► decide (pure) ─► Step::Apply/Patch ─► write, observe again
//!                                        Step::Create      ─► create unless it exists (Events on the
//!                                                             job when announced), stop
//!                                        Step::Status        ─► write the job's status, stop
//!                                        Step::Complete      ─► create the catalog Backup, write success, stop
//!                                        Step::Idle          ─► stop (an event or the deadline wakes it)
//! ```
//!
//! Every write is idempotent (server-side apply, create-if-absent checked against a fresh list,
//! status with a resourceVersion precondition), so a reconcile can be cut at any instant (kill -9,
//! lost lease) and the next one continues from what the cluster shows.

pub mod altinity;
pub mod cnpg;
pub mod etcd;
pub mod foundationdb;
pub mod job;
pub mod mariadb;
pub mod mongodb;
mod storage;
#[cfg(test)]
pub(crate) mod testkit;
pub mod velero;

use std::ops::ControlFlow;
use std::time::Duration;

use ::drivers::Driver;
use api::TypedLocalObjectReference;
use api::backups::{Backup, BackupJob, BackupJobStatus, ResolvedStrategy};
use api::contract::{labels, phases, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use serde_json::Value as Json;

use crate::context::{Context, Error, api_err};

/// How many steps one reconcile performs before it yields (a safety bound; a driver normally needs
/// at most three writes before its status write).
const MAX_STEPS: usize = 8;

/// The job a driver works on.
#[derive(Debug, Clone)]
pub struct Run<'a> {
    /// The BackupJob as read.
    pub job: &'a BackupJob,
    /// Its status (a working copy the driver's status steps start from).
    pub status: BackupJobStatus,
    /// The resolved BackupClass route.
    pub resolved: &'a ResolvedStrategy,
    /// The normalised application reference.
    pub app: &'a TypedLocalObjectReference,
    /// Now.
    pub now: Time,
    /// The backup deadline in force (the route's `backupDeadline` parameter, else the flag).
    pub deadline: Duration,
    /// The application as read from the API server in this reconcile, when the cache did not
    /// have it (see [`Step::Unseen`]).
    pub fresh_app: Option<Json>,
}

impl Run<'_> {
    /// The job's application, of cache `label` (for example `apps.Postgres`): the cache's copy,
    /// else the one read from the API server in this reconcile.
    pub fn application(&self, ctx: &Context, label: &str) -> Option<Json> {
        let name = &self.job.spec.application_ref.name;
        (ctx.caches.object(label, &self.namespace(), name)).or_else(|| self.fresh_app.clone())
    }

    /// The job's namespace.
    pub fn namespace(&self) -> String {
        self.job.namespace().unwrap_or_default()
    }

    /// The job's name.
    pub fn name(&self) -> String {
        self.job.name_any()
    }

    /// Time since `startedAt` (zero before it is set).
    pub fn elapsed(&self) -> Duration {
        self.status
            .started_at
            .as_ref()
            .and_then(|s| (self.now.0 - s.0).try_into().ok())
            .unwrap_or_default()
    }

    /// How long until `deadline` (measured from `startedAt`) passes, at least a second.
    pub fn until(&self, deadline: Duration) -> Duration {
        deadline
            .saturating_sub(self.elapsed())
            .max(Duration::from_secs(1))
    }

    /// A failure step.
    pub fn fail(&self, message: impl Into<String>) -> Step {
        let mut status = self.status.clone();
        drivers::status::fail(
            &mut status,
            reasons::BACKUP_FAILED,
            &message.into(),
            &self.now,
        );
        Step::Status {
            status,
            recheck: None,
        }
    }

    /// A transient wait with `Ready=False/<reason>`, failing once `deadline` (from `startedAt`)
    /// passed with `late` as the message.
    pub fn wait(
        &self,
        reason: &str,
        message: impl Into<String>,
        running: bool,
        deadline: Duration,
        late: impl FnOnce() -> String,
    ) -> Step {
        if self.status.started_at.is_some() && self.elapsed() > deadline {
            return self.fail(late());
        }
        let mut status = self.status.clone();
        drivers::status::wait(&mut status, reason, &message.into(), running, &self.now);
        Step::Status {
            status,
            recheck: Some(self.until(deadline)),
        }
    }

    /// Upstream's StrategyNotReady wait (30 minutes from `startedAt`).
    pub fn strategy_not_ready(&self) -> Step {
        let name = &self.resolved.strategy_ref.name;
        let class = &self.job.spec.backup_class_name;
        self.wait(
            reasons::STRATEGY_NOT_READY,
            format!(
                "Strategy {name:?} referenced by BackupClass {class:?} is not yet provisioned; the platform may still be initialising backup storage"
            ),
            false,
            STRATEGY_NOT_READY_DEADLINE,
            || {
                format!(
                    "Strategy {name:?} referenced by BackupClass {class:?} was not provisioned within {}; check the strategyRef name or the platform backup-storage bootstrap",
                    drivers::status::go_duration(STRATEGY_NOT_READY_DEADLINE)
                )
            },
        )
    }

    /// The first step of a driver: stamp `startedAt` (and phase Running when the driver does).
    pub fn start(&self, running: bool) -> Step {
        let mut status = self.status.clone();
        drivers::status::start(&mut status, running, &self.now);
        Step::Status {
            status,
            recheck: None,
        }
    }

    /// The opening the strategy drivers' decisions share, in upstream's order: the raw application
    /// reference passes the driver's gate `check` (else Failed with its message); the first pass
    /// stamps `startedAt` (and phase Running when `running`); the strategy's template exists (else
    /// the StrategyNotReady wait). Continue with the template, or break with the step to take.
    pub fn opening<'o>(
        &self,
        check: impl FnOnce(&TypedLocalObjectReference) -> Result<(), String>,
        running: bool,
        template: Option<&'o Json>,
    ) -> ControlFlow<Step, &'o Json> {
        if let Err(message) = check(&self.job.spec.application_ref) {
            return ControlFlow::Break(self.fail(message));
        }
        if self.status.started_at.is_none() {
            return ControlFlow::Break(self.start(running));
        }
        match template {
            Some(template) => ControlFlow::Continue(template),
            None => ControlFlow::Break(self.strategy_not_ready()),
        }
    }

    /// [`Run::opening`] (phase stays empty on the first pass), then the application of cache
    /// `app_label`, which must exist: else Failed with `<app_kind> application not found:
    /// <ns>/<name>`, once the API server confirms it ([`Step::Unseen`]).
    pub fn template_and_app<'o>(
        &self,
        check: impl FnOnce(&TypedLocalObjectReference) -> Result<(), String>,
        (app_label, app_kind): (&'static str, &str),
        template: Option<&'o Json>,
        app: Option<&'o Json>,
    ) -> ControlFlow<Step, (&'o Json, &'o Json)> {
        let template = self.opening(check, false, template)?;
        let Some(app) = app else {
            let name = self.job.spec.application_ref.name.clone();
            let message = format!(
                "{app_kind} application not found: {}/{name}",
                self.namespace()
            );
            let Step::Status { status, .. } = self.fail(message) else {
                unreachable!("Run::fail is a status step")
            };
            return ControlFlow::Break(Step::Unseen {
                label: app_label,
                namespace: self.namespace(),
                name,
                status,
            });
        };
        ControlFlow::Continue((template, app))
    }

    /// The labels that mark an object as this job's (owned-by name and namespace), as a
    /// [`Step::Create`] selector.
    pub fn owned_by(&self) -> Vec<(String, String)> {
        vec![
            (labels::OWNED_BY_JOB_NAME.into(), self.name()),
            (labels::OWNED_BY_JOB_NAMESPACE.into(), self.namespace()),
        ]
    }

    /// Create `body` (cache `label`) in the job's namespace unless an object owned by the job
    /// exists; a refusal fails the job with `<on_error>: <error>`.
    pub fn create_owned(&self, label: &'static str, body: Json, on_error: &'static str) -> Step {
        Step::Create {
            label,
            namespace: self.namespace(),
            body,
            selector: self.owned_by(),
            on_error,
            announce: None,
        }
    }

    /// Phase Running, the step once the driver's backup object exists; `None` when the job is
    /// Running already.
    pub fn running(&self) -> Option<Step> {
        if self.status.phase.as_deref() == Some(phases::RUNNING) {
            return None;
        }
        let mut status = self.status.clone();
        drivers::status::running(&mut status);
        Some(Step::Status {
            status,
            recheck: None,
        })
    }

    /// Waiting without a status write for a backup in progress: Failed with `late()` once
    /// `deadline` (from `startedAt`) passed, else idle until then (an event may come first).
    pub fn idle_until(&self, deadline: Duration, late: impl FnOnce() -> String) -> Step {
        if self.elapsed() > deadline {
            return self.fail(late());
        }
        Step::Idle(Some(self.until(deadline)))
    }

    /// The success: record the catalog Backup `entry`, then phase Succeeded with the `Ready=True`
    /// `message` (none: no Ready condition). Idle when the job already refers to its Backup.
    pub fn complete(&self, entry: drivers::catalog::Entry, message: Option<&str>) -> Step {
        if self.status.backup_ref.is_some() {
            return Step::Idle(None);
        }
        let backup =
            drivers::catalog::backup(self.job, &self.resolved.strategy_ref, entry, &self.now);
        let mut status = self.status.clone();
        drivers::status::backup_succeeded(&mut status, &self.name(), message, &self.now);
        Step::Complete {
            backup: Box::new(backup),
            status,
        }
    }
}

/// `Ready=False/<reason>` on a working copy of a job's status (no phase change).
pub fn status_wait(status: &mut BackupJobStatus, reason: &str, message: &str, now: &Time) {
    drivers::status::wait(status, reason, message, false, now);
}

/// The terminal failure on a working copy of a job's status.
pub fn status_fail(status: &mut BackupJobStatus, message: &str, now: &Time) {
    drivers::status::fail(status, reasons::BACKUP_FAILED, message, now);
}

/// The reason of the `Ready` condition, if any.
pub fn ready_reason(conditions: &[api::Condition]) -> Option<&str> {
    drivers::status::ready(conditions).map(|c| c.reason.as_str())
}

/// How long a job may wait for its Strategy CR (the platform's bootstrap window).
pub const STRATEGY_NOT_READY_DEADLINE: Duration = Duration::from_secs(30 * 60);

/// What a driver wants done next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Write the job's status and stop; wake again after `recheck` (a deadline) if nothing happens.
    Status {
        /// The whole new status.
        status: BackupJobStatus,
        /// When to look again without an event.
        recheck: Option<Duration>,
    },
    /// Server-side apply an object of cache `label`, then continue. A refusal by the API server
    /// (a 4xx other than a conflict or throttling) fails the job with `<on_error>: <error>`.
    Apply {
        /// Cache label of the kind.
        label: &'static str,
        /// The apply body.
        body: Json,
        /// Field manager.
        manager: &'static str,
        /// Message prefix of the failure.
        on_error: &'static str,
    },
    /// Create an object of cache `label` in `namespace` unless one with these labels exists
    /// (checked fresh), then stop (the object's watch event drives the next pass); a refusal fails
    /// the job with `<on_error>: <error>`.
    Create {
        /// Cache label of the kind.
        label: &'static str,
        /// Where to create it (the job's namespace, or e.g. `cozy-velero`).
        namespace: String,
        /// The create body.
        body: Json,
        /// Labels identifying "the one" object (the owned-by pair).
        selector: Vec<(String, String)>,
        /// Message prefix of the failure.
        on_error: &'static str,
        /// The Events on the job that tell of the create, if the driver announces it.
        announce: Option<Announce>,
    },
    /// JSON-merge-patch an object of cache `label` (e.g. stop another FoundationDBBackup), then
    /// continue; NotFound counts as done; a refusal fails the job with `<on_error>: <error>`.
    Patch {
        /// Cache label of the kind.
        label: &'static str,
        /// Namespace of the object.
        namespace: String,
        /// Name of the object.
        name: String,
        /// The merge patch.
        patch: Json,
        /// Message prefix of the failure.
        on_error: &'static str,
    },
    /// Record the catalog Backup, then write the success status and stop.
    Complete {
        /// The catalog entry.
        backup: Box<Backup>,
        /// The success status.
        status: BackupJobStatus,
    },
    /// Nothing to write; wake after `recheck` unless an event comes first.
    Idle(Option<Duration>),
    /// The application is not in the cache. A kind whose CRD appeared moments ago is listed by the
    /// runner only after its watch's backoff (up to half a minute), so the API server is asked
    /// before the job fails: when it has the object, the driver runs again with it
    /// ([`Run::fresh_app`]); when it answers 404 (the object or the whole kind is not there),
    /// `status` (the failure) is written.
    Unseen {
        /// Cache label of the application's kind.
        label: &'static str,
        /// Namespace of the application.
        namespace: String,
        /// Name of the application.
        name: String,
        /// The failure to write when the API server does not have it either.
        status: BackupJobStatus,
    },
}

/// The Events on the job of an announced [`Step::Create`] (Velero's `VeleroBackupCreated` /
/// `VeleroBackupCreationFailed`).
#[derive(Debug, Clone, PartialEq)]
pub struct Announce {
    /// Reason and note of the Normal Event, once the object was created.
    pub created: (&'static str, String),
    /// Reason and note prefix of the Warning Event (`<note>: <error>`), whenever the create fails.
    pub failed: (&'static str, String),
}

/// Runs `driver` for one reconcile.
///
/// `storage`: the endpoint of the system bucket, whose storage breaker sees every step (a storage
/// failure counts; once the breaker is open the job waits instead, see [`crate::breaker`]).
pub async fn drive(
    ctx: &Context,
    driver: Driver,
    run: &mut Run<'_>,
    storage: Option<&str>,
) -> Result<Action, Error> {
    for _ in 0..MAX_STEPS {
        let step = match driver {
            Driver::Cnpg => cnpg::step(ctx, run),
            Driver::MariaDb => mariadb::step(ctx, run),
            Driver::Etcd => etcd::step(ctx, run),
            Driver::Job => job::step(ctx, run).await?,
            Driver::Altinity => altinity::step(ctx, run).await?,
            Driver::FoundationDb => foundationdb::step(ctx, run).await?,
            Driver::Velero => velero::step(ctx, run).await?,
            Driver::MongoDb => mongodb::step(ctx, run),
        };
        let step = match storage {
            Some(endpoint) => storage::intercept(ctx, run, step, endpoint),
            None => step,
        };
        match step {
            Step::Apply {
                label,
                body,
                manager,
                on_error,
            } => {
                if let Err(e) = ctx.apply(&ctx.caches.resource(label), &body, manager).await {
                    return refused(ctx, run, on_error, e).await;
                }
            }
            Step::Patch {
                label,
                namespace,
                name,
                patch,
                on_error,
            } => {
                let resource = ctx.caches.resource(label);
                let result = ctx
                    .api(&resource, Some(&namespace))
                    .patch(
                        &name,
                        &kube::api::PatchParams::default(),
                        &kube::api::Patch::Merge(&patch),
                    )
                    .await;
                match result {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => {
                        let e =
                            api_err("patch", format!("{} {namespace}/{name}", resource.kind))(e);
                        return refused(ctx, run, on_error, e).await;
                    }
                }
            }
            Step::Create {
                label,
                namespace,
                body,
                selector,
                on_error,
                announce,
            } => {
                let create = Create {
                    label,
                    namespace,
                    body,
                    selector,
                    on_error,
                };
                return create_once(ctx, run, create, announce).await;
            }
            Step::Status { status, recheck } => {
                write_status(ctx, run, status).await?;
                return Ok(action(recheck));
            }
            Step::Complete { backup, status } => {
                if let Err(e) = create_catalog_entry(ctx, run, &backup).await {
                    let prefix = match driver {
                        Driver::Velero => drivers::velero::CATALOG_FAILED,
                        _ => "failed to create Backup artifact",
                    };
                    return refused(ctx, run, prefix, e).await;
                }
                write_status(ctx, run, status).await?;
                crate::metrics::succeeded(run.job, &run.resolved.strategy_ref.kind, &run.now);
                return Ok(Action::await_change());
            }
            Step::Idle(recheck) => return Ok(action(recheck)),
            Step::Unseen {
                label,
                namespace,
                name,
                status,
            } => {
                let resource = ctx.caches.resource(label);
                let found = ctx.api(&resource, Some(&namespace)).get_opt(&name).await;
                let found = found.map_err(api_err(
                    "get",
                    format!("{} {namespace}/{name}", resource.kind),
                ))?;
                match found.and_then(|app| serde_json::to_value(app).ok()) {
                    None => {
                        write_status(ctx, run, status).await?;
                        return Ok(action(None));
                    }
                    Some(app) if run.fresh_app.is_none() => run.fresh_app = Some(app),
                    // Read once already in this pass: the cache will have it shortly.
                    Some(_) => return Ok(Action::requeue(Duration::from_secs(1))),
                }
            }
        }
    }
    Ok(Action::requeue(Duration::from_secs(1)))
}

/// The fields of a [`Step::Create`].
struct Create {
    label: &'static str,
    namespace: String,
    body: Json,
    selector: Vec<(String, String)>,
    on_error: &'static str,
}

/// Creates the object of a create step unless one with its labels exists (checked fresh), with the
/// Events of `announce`.
async fn create_once(
    ctx: &Context,
    run: &mut Run<'_>,
    c: Create,
    announce: Option<Announce>,
) -> Result<Action, Error> {
    let resource = ctx.caches.resource(c.label);
    let ns = &c.namespace;
    let sel: Vec<(&str, &str)> = c
        .selector
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let failed = |e: &Error| {
        let detail = match e {
            Error::Api {
                source: kube::Error::Api(s),
                ..
            } => s.message.clone(),
            Error::Api { source, .. } => source.to_string(),
            other => other.to_string(),
        };
        announce.as_ref().map(|a| {
            let (reason, note) = &a.failed;
            (*reason, format!("{note}: {detail}"))
        })
    };
    // A refused list (e.g. a job name too long for a label value) fails the job like a refused
    // create would, instead of retrying forever.
    let existing = match ctx.list_fresh(&resource, ns, &sel).await {
        Ok(existing) => existing,
        Err(e) => {
            if let Some((reason, note)) = failed(&e) {
                ctx.event(run.job, EventType::Warning, reason, &note).await;
            }
            return refused(ctx, run, c.on_error, e).await;
        }
    };
    if existing.is_empty() {
        let created = match ctx.create(&resource, &c.body).await {
            Ok(created) => created,
            Err(e) => {
                let e = api_err("create", format!("{} in {ns}", resource.kind))(e);
                if let Some((reason, note)) = failed(&e) {
                    ctx.event(run.job, EventType::Warning, reason, &note).await;
                }
                return refused(ctx, run, c.on_error, e).await;
            }
        };
        tracing::info!(job = %format!("{}/{}", run.namespace(), run.name()), kind = %resource.kind, name = %created.name_any(), "created");
        if let Some(Announce {
            created: (reason, note),
            ..
        }) = &announce
        {
            ctx.event(run.job, EventType::Normal, reason, note).await;
        }
    }
    // The cache may lag behind our create: the next pass is driven by its watch event.
    Ok(Action::await_change())
}

/// An API error of a driver write: a refusal (4xx other than conflict/throttling) fails the job
/// with `<prefix>: <error>` as upstream does; anything else is transient and retried.
async fn refused(
    ctx: &Context,
    run: &mut Run<'_>,
    prefix: &str,
    e: Error,
) -> Result<Action, Error> {
    let code = match &e {
        Error::Api {
            source: kube::Error::Api(s),
            ..
        } => s.code,
        _ => return Err(e),
    };
    if !(400..500).contains(&code) || code == 409 || code == 429 {
        return Err(e);
    }
    let Error::Api {
        source: kube::Error::Api(status),
        ..
    } = &e
    else {
        return Err(e);
    };
    let step = run.fail(format!("{prefix}: {}", status.message));
    let Step::Status { status, .. } = step else {
        unreachable!("fail() is a status step")
    };
    write_status(ctx, run, status).await?;
    Ok(Action::await_change())
}

fn action(recheck: Option<Duration>) -> Action {
    match recheck {
        Some(d) => Action::requeue(d),
        None => Action::await_change(),
    }
}

async fn write_status(
    ctx: &Context,
    run: &mut Run<'_>,
    status: BackupJobStatus,
) -> Result<(), Error> {
    if run.job.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let before = run.status.phase.clone();
    ctx.write_status(run.job, &status).await?;
    if status.phase != before {
        crate::events::phase_changed(ctx, run.job, &status).await;
        if status.phase.as_deref() == Some(api::contract::phases::FAILED) {
            crate::metrics::terminal(
                run.job,
                &run.resolved.strategy_ref.kind,
                api::contract::phases::FAILED,
                &run.now,
            );
        }
    }
    run.status = status;
    Ok(())
}

/// Creates the catalog Backup; an existing one of the same name is this job's own (an earlier
/// reconcile created it and then failed its status write) and is reused, as upstream.
async fn create_catalog_entry(ctx: &Context, run: &Run<'_>, backup: &Backup) -> Result<(), Error> {
    let ns = run.namespace();
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), &ns);
    match api.create(&PostParams::default(), backup).await {
        Ok(_) => {
            ctx.event(
                run.job,
                EventType::Normal,
                "BackupCreated",
                &format!("Backup {ns}/{} recorded in the catalog", backup.name_any()),
            )
            .await;
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(source) => Err(Error::Api {
            action: "create",
            object: format!("Backup {ns}/{}", backup.name_any()),
            source,
        }),
    }
}
