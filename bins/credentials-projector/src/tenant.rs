//! The tenant path: one controller over BackupJobs and one over RestoreJobs, in every namespace.
//!
//! ```text
//!  watch BackupJob ─┐                       ┌─ terminal? / already True for this generation? ─► done
//!  watch BackupClass┤                       │
//!  copy deleted ────┼─► Controller ─► reconcile ─ work lease credentials-projector/<Kind>/<ns>/<name>
//!  source changed ──┤   (per job)          ├─ gates (BackupClass or Backup; group; kind) ─► skip: no write
//!  safety tick ─────┘                       ├─ project into <ns> (Get source, create/update only on change)
//!                                           └─ SSA CredentialsProjected (only when it differs)
//! ```
//!
//! Invariants: a gated job gets neither a Secret nor a condition; only `CredentialsProjected` is ever
//! written on a job (never `Ready` or the phase); a job whose condition is True for its generation
//! is not projected again unless its copy was deleted (the rotation path keeps copies fresh); transient failures requeue with
//! per-job backoff, terminal ones wait for a change of the job, the source or the safety tick.

use std::collections::HashSet;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use api::Condition;
use api::backups::{Backup, BackupClass, BackupJob, RestoreJob};
use api::contract::labels;
use backup_storage::credentials::{ProjectionConfig, ProjectionError, Reason};
use futures::future::BoxFuture;
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::Secret;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use runtime::{
    Backoff, ControllerMetrics, ErrorClass, ReconcileError, Watch, WatchContext, WorkLeaseKeeper,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::gates::{self, Skip, Verdict};
use crate::metrics::{self as m, Path};
use crate::project::{self, FIELD_MANAGER};
use crate::status;

/// A job kind the projector serves.
pub trait TenantJob:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
    /// Kind in work-lease names.
    const KIND: &'static str;
    /// Controller label in metrics and logs.
    const CONTROLLER: &'static str;
    /// `status.phase`.
    fn phase(&self) -> Option<&str>;
    /// `status.conditions`.
    fn conditions(&self) -> &[Condition];
    /// Reads what the gates need and returns the verdict (terminal phase included).
    fn gate<'a>(&'a self, client: &'a Client) -> BoxFuture<'a, Result<Verdict, Error>>;
}

impl TenantJob for BackupJob {
    const KIND: &'static str = "BackupJob";
    const CONTROLLER: &'static str = "backupjobs";
    fn phase(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.phase.as_deref())
    }
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
    fn gate<'a>(&'a self, client: &'a Client) -> BoxFuture<'a, Result<Verdict, Error>> {
        async move {
            let classes: Api<BackupClass> = Api::all(client.clone());
            let class = classes
                .get_opt(&self.spec.backup_class_name)
                .await
                .map_err(|source| Error::Read {
                    what: "BackupClass",
                    source,
                })?;
            Ok(gates::backup_job(
                self.phase(),
                class.as_ref().map(|c| &c.spec),
                &self.spec.application_ref,
            ))
        }
        .boxed()
    }
}

impl TenantJob for RestoreJob {
    const KIND: &'static str = "RestoreJob";
    const CONTROLLER: &'static str = "restorejobs";
    fn phase(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.phase.as_deref())
    }
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
    fn gate<'a>(&'a self, client: &'a Client) -> BoxFuture<'a, Result<Verdict, Error>> {
        async move {
            let ns = self.namespace().unwrap_or_default();
            let backups: Api<Backup> = Api::namespaced(client.clone(), &ns);
            let backup = backups
                .get_opt(&self.spec.backup_ref.name)
                .await
                .map_err(|source| Error::Read {
                    what: "Backup",
                    source,
                })?;
            Ok(gates::restore_job(
                self.phase(),
                backup.as_ref().map(|b| &b.spec),
            ))
        }
        .boxed()
    }
}

/// Errors of a tenant reconcile. Messages never carry credential values.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The projection failed (the condition already says why).
    #[error(transparent)]
    Projection(#[from] ProjectionError),
    /// Reading a gate input (BackupClass, Backup) failed.
    #[error("read {what}: {source}")]
    Read {
        /// The kind read.
        what: &'static str,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The lease service did not answer.
    #[error("work lease: {0}")]
    Lease(#[from] lease::LeaseError),
    /// Applying the condition failed.
    #[error("apply CredentialsProjected condition: {0}")]
    Condition(#[source] kube::Error),
}

impl ReconcileError for Error {
    fn kind(&self) -> &'static str {
        match self {
            Self::Projection(e) => match e.reason {
                Reason::SourceSecretMissing => "source_secret_missing",
                Reason::SourceSecretMalformed => "source_secret_malformed",
                Reason::TargetSecretNotOwned => "target_secret_not_owned",
                Reason::ApiError => "api",
            },
            Self::Read { .. } => "read",
            Self::Lease(_) => "lease",
            Self::Condition(_) => "condition",
        }
    }

    fn class(&self) -> ErrorClass {
        match self {
            Self::Projection(e) if !e.reason.is_transient() => ErrorClass::Permanent,
            _ => ErrorClass::Transient,
        }
    }
}

/// Everything a tenant reconcile needs.
pub struct Context<J: TenantJob> {
    /// API client.
    pub client: Client,
    /// What to project and where from.
    pub config: Arc<ProjectionConfig>,
    /// Per-job work leases (`credentials-projector/<Kind>/<ns>/<name>`), held for one reconcile.
    pub leases: Arc<WorkLeaseKeeper>,
    /// Reconcile runs/failures/duration.
    pub metrics: ControllerMetrics,
    /// Per-job backoff of transient failures.
    pub backoff: Backoff<J>,
    /// Namespaces whose projected copy was deleted: their jobs are projected again even when
    /// already `True` (filled by the watch on deleted copies, emptied by a successful projection).
    pub lost_copies: Mutex<HashSet<String>>,
}

impl<J: TenantJob> Context<J> {
    /// A context for the controller of `J`.
    pub fn new(
        client: Client,
        config: Arc<ProjectionConfig>,
        leases: Arc<WorkLeaseKeeper>,
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            config,
            leases,
            metrics: ControllerMetrics::new(crate::COMPONENT, J::CONTROLLER),
            backoff: Backoff::default(),
            lost_copies: Mutex::default(),
        })
    }

    fn lost_copy(&self, ns: &str) -> bool {
        self.lost_copies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(ns)
    }

    fn copy_restored(&self, ns: &str) {
        self.lost_copies
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(ns);
    }
}

/// Reconciles of one kind in flight at once.
const RECONCILE_CONCURRENCY: u16 = 32;

/// How long to wait when a job's work lease is refused. A lease another replica releases or lets
/// expire wakes the job at once (`WorkLeaseKeeper::freed`, pushed by the lease server); this retry
/// covers refusals no event ends, such as the lease server's quiet period after a restart.
const LEASE_BUSY_RETRY: Duration = Duration::from_secs(5);
/// Safety requeue while a job's BackupClass is missing (the BackupClass watch is the real trigger).
const CLASS_MISSING_RETRY: Duration = Duration::from_secs(300);

async fn reconcile<J: TenantJob>(job: Arc<J>, ctx: Arc<Context<J>>) -> Result<Action, Error> {
    let timer = ctx.metrics.start();
    let result = reconcile_job(job.as_ref(), ctx.as_ref()).await;
    timer.finish(result.as_ref().err().map(ReconcileError::kind));
    if result.is_ok() {
        ctx.backoff.reset(&ObjectRef::from_obj(job.as_ref()));
    }
    result
}

/// Whether a job still needs the tenant path: not terminal, and not done at its generation unless
/// its namespace lost its copy. Anything else returns at once from a reconcile.
fn needs_projection<J: TenantJob>(job: &J, ctx: &Context<J>) -> bool {
    let ns = job.namespace().unwrap_or_default();
    !gates::is_terminal(job.phase())
        && (!status::is_done(job.conditions(), job.meta().generation) || ctx.lost_copy(&ns))
}

async fn reconcile_job<J: TenantJob>(job: &J, ctx: &Context<J>) -> Result<Action, Error> {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let generation = job.meta().generation;
    if !needs_projection(job, ctx) {
        return Ok(Action::await_change());
    }
    let Some(lease) = ctx.leases.hold(job).await? else {
        return Ok(Action::requeue(LEASE_BUSY_RETRY));
    };
    // The projection is quick and idempotent: the lease is held for this reconcile only.
    let result = project_job(job, ctx, &ns, &name, generation, &lease).await;
    ctx.leases.release(job);
    result
}

async fn project_job<J: TenantJob>(
    job: &J,
    ctx: &Context<J>,
    ns: &str,
    name: &str,
    generation: Option<i64>,
    lease: &runtime::Held,
) -> Result<Action, Error> {
    match job.gate(&ctx.client).await? {
        Verdict::Project => {}
        Verdict::Skip(skip) => {
            tracing::debug!(kind = J::KIND, namespace = %ns, name = %name, gate = skip.as_str(), "not projecting");
            return Ok(match skip {
                Skip::BackupClassNotFound => Action::requeue(CLASS_MISSING_RETRY),
                _ => Action::await_change(),
            });
        }
    }
    let started = Instant::now();
    let result = project::project(&ctx.client, &ctx.config, ns).await;
    m::record(ns, Path::Tenant, started.elapsed(), &result);
    if lease.is_lost() {
        // Another replica may own the job now; let it report.
        return Ok(Action::requeue(LEASE_BUSY_RETRY));
    }
    let condition = status::credentials_projected(
        &result,
        ns,
        &ctx.config.target_name,
        generation,
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    if let Some(condition) = status::to_apply(job.conditions(), condition) {
        let api: Api<J> = Api::namespaced(ctx.client.clone(), ns);
        runtime::conditions::apply_conditions(&api, name, FIELD_MANAGER, &[condition])
            .await
            .map_err(Error::Condition)?;
    }
    match result {
        Ok(outcome) => {
            ctx.copy_restored(ns);
            tracing::info!(kind = J::KIND, namespace = %ns, name = %name, ?outcome, "credentials projected");
            Ok(Action::await_change())
        }
        Err(e) => Err(e.into()),
    }
}

fn error_policy<J: TenantJob>(job: Arc<J>, err: &Error, ctx: Arc<Context<J>>) -> Action {
    ctx.backoff
        .action_for(ObjectRef::from_obj(job.as_ref()), err)
}

/// Runs the controller of `J` until shutdown. Its watches register their readiness checks with
/// `ctx`; `trigger` (source changes and the safety tick) re-evaluates every unfinished job.
pub async fn run<J: TenantJobWatches>(
    tenant: Arc<Context<J>>,
    ctx: &WatchContext,
    trigger: impl Stream<Item = ()> + Send + 'static,
) {
    // Field ownership is never read; without it the cache of 10,000 jobs is a third the size.
    let (store, jobs) = Watch::<J>::new(tenant.client.clone())
        .strip_managed_fields()
        .reflect(ctx);
    // Bounded like the runner's: at start every cached job is due at once, and 10,000 reconciles in
    // flight together left their memory behind.
    let controller = Controller::for_stream(jobs, store).with_config(
        kube::runtime::controller::Config::default().concurrency(RECONCILE_CONCURRENCY),
    );
    let controller = J::extra_watches(controller, &tenant.client, ctx);
    let unfinished = unfinished_jobs_on(trigger, controller.store(), tenant.clone());
    let controller = watch_deleted_copies(controller, tenant.clone(), ctx)
        .reconcile_on(unfinished)
        // A job another replica was projecting is retried the moment its lease is freed.
        .reconcile_on(tenant.leases.freed::<J>())
        .graceful_shutdown_on(ctx.shutdown.signaled());
    controller
        .run(reconcile::<J>, error_policy::<J>, tenant)
        .for_each(|item| {
            runtime::controller::log_item(J::CONTROLLER, &item);
            futures::future::ready(())
        })
        .await;
}

/// On every fire of `trigger` (a source change, the safety tick), the jobs that still need the
/// tenant path. Finished jobs are what accumulate (10,000 on a large platform) and each would return
/// at once, so waking all of them every tick only burned CPU while nothing changed.
fn unfinished_jobs_on<J: TenantJob>(
    trigger: impl Stream<Item = ()> + Send + 'static,
    store: kube::runtime::reflector::Store<J>,
    ctx: Arc<Context<J>>,
) -> impl Stream<Item = ObjectRef<J>> + Send + 'static {
    trigger.flat_map(move |()| {
        let jobs: Vec<ObjectRef<J>> = store
            .state()
            .into_iter()
            .filter(|j| needs_projection(j.as_ref(), &ctx))
            .map(|j| ObjectRef::from_obj(j.as_ref()))
            .collect();
        futures::stream::iter(jobs)
    })
}

/// A deleted copy (metadata-only watch of the labelled Secrets of the target's name, so no
/// credential is cached)
/// re-evaluates every job in its namespace, and marks the namespace so that jobs already `True`
/// project again.
fn watch_deleted_copies<J: TenantJob>(
    controller: Controller<J>,
    ctx: Arc<Context<J>>,
    watch_ctx: &WatchContext,
) -> Controller<J> {
    let store = controller.store();
    let selector = format!("{}={}", labels::MANAGED_BY, labels::MANAGED_BY_VALUE);
    // The name selector is what RBAC authorizes (a watch of one name, `resourceNames`).
    let deleted = Watch::<PartialObjectMeta<Secret>>::new(ctx.client.clone())
        .labels(&selector)
        .named(&ctx.config.target_name)
        .describe(&format!(
            "projected copies of {} ({})",
            J::KIND,
            ctx.config.target_name
        ))
        .events(watch_ctx)
        .filter_map(|event| {
            futures::future::ready(match event {
                watcher::Event::Delete(meta) => Some(Ok::<_, watcher::Error>(meta)),
                _ => None,
            })
        });
    controller.watches_stream(deleted, move |meta: PartialObjectMeta<Secret>| {
        let ns = meta.namespace().unwrap_or_default();
        if meta.name_any() != ctx.config.target_name {
            return Vec::new();
        }
        let jobs: Vec<ObjectRef<J>> = store
            .state()
            .into_iter()
            .filter(|j| j.namespace().as_deref() == Some(ns.as_str()))
            .map(|j| ObjectRef::from_obj(j.as_ref()))
            .collect();
        // Only namespaces with jobs are remembered (a successful projection forgets them again).
        if !jobs.is_empty() {
            tracing::info!(namespace = %ns, kind = J::KIND, "projected copy deleted; projecting again for the namespace's jobs");
            ctx.lost_copies
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(ns);
        }
        jobs
    })
}

/// Kind-specific watches besides the job itself.
pub trait TenantJobWatches: TenantJob {
    /// Adds the kind's extra watches to `controller`.
    fn extra_watches(
        controller: Controller<Self>,
        client: &Client,
        ctx: &WatchContext,
    ) -> Controller<Self>;
}

impl TenantJobWatches for BackupJob {
    /// A BackupClass that appears or changes re-evaluates the jobs naming it (event-driven
    /// replacement for upstream's 30 s BackupClassNotFound requeue).
    fn extra_watches(
        controller: Controller<Self>,
        client: &Client,
        ctx: &WatchContext,
    ) -> Controller<Self> {
        let store = controller.store();
        let classes = Watch::<BackupClass>::new(client.clone())
            .events(ctx)
            .map(Ok::<_, watcher::Error>)
            .touched_objects();
        controller.watches_stream(classes, move |class: BackupClass| {
            let name = class.name_any();
            store
                .state()
                .into_iter()
                .filter(|j| j.spec.backup_class_name == name)
                .map(|j| ObjectRef::from_obj(j.as_ref()))
                .collect::<Vec<_>>()
        })
    }
}

impl TenantJobWatches for RestoreJob {
    fn extra_watches(
        controller: Controller<Self>,
        _client: &Client,
        _ctx: &WatchContext,
    ) -> Controller<Self> {
        controller
    }
}
