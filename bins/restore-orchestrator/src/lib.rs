//! The `restore-orchestrator` daemon: runs RestoreJobs through the restore path of the Backup's
//! strategy kind: CNPG point-in-time recovery (with the recoverable-window pre-flight and a safety
//! backup before an in-place purge), Etcd, MariaDB, MongoDB, FoundationDB, Velero and batch Jobs.
//!
//! ```text
//!  watches (runtime, event-driven; only RestoreJobs are cached)          controller
//!  RestoreJob ───────────────────────────────────────────────┐
//!  Backup, HelmRelease, cnpg Cluster / Backup, ObjectStore,  │
//!  Postgres apps, PVCs, Pods (cnpg.io/cluster), EtcdCluster, ├──► RestoreJob controller (every replica; one per
//!  operator Restores, MariaDB / PSMDB / FDB clusters, batch  │     job through work leases): fresh reads ─►
//!  Jobs: applied AND deleted ─► active jobs of the namespace │     drivers::restore decisions ─► actions
//!     and the job named by owned-by labels ──────────────────┤
//!  strategy CRs ─► every active job ─────────────────────────┘
//! ```
//!
//! Modules: [`controller`] (reconcile, leases, fencing, the step executor), [`drill`] (restore
//! drills of `Plan.spec.verification`, leader only), [`observe`] (what each
//! driver's decision reads), [`context`] (fresh reads and the job's writes), [`metrics`], [`args`].
//! The decisions themselves are pure functions in `drivers::restore`.
//!
//! Invariants: everything is re-derived from the cluster on every pass (kill -9 at any instant
//! continues where the objects say); one replica drives a job at a time, and a stale one's writes
//! fail on their resourceVersion precondition; no credential value is reported, and the only one
//! read is the scratch copy's database password a restore drill connects with, held for the
//! connection alone.

pub mod args;
pub mod context;
pub mod controller;
pub mod drill;
pub mod metrics;
pub mod observe;
pub mod storage;

use std::sync::Arc;

use api::backups::{Backup, RestoreJob};
use api::contract::labels;
use api::thirdparty as t;
use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, controller::Config as ControllerConfig, watcher};
use kube::{Resource, ResourceExt};
use runtime::{Backoff, ControllerMetrics, Daemon, Watch, WatchContext, WorkLeaseKeeper};

pub use args::{Args, OrchestratorArgs};

/// Component name (logs, metrics prefix, leases, Event reporter).
pub const COMPONENT: &str = "restore-orchestrator";

fn erase<K: Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// The namespaced kinds whose changes (including deletions) wake the RestoreJobs of their
/// namespace: `(what, resource, label selector)`.
fn trigger_kinds() -> Vec<(&'static str, ApiResource, Option<&'static str>)> {
    use k8s_openapi::api::{batch::v1::Job, core::v1};
    vec![
        ("cnpg Clusters", erase::<t::cnpg::Cluster>(), None),
        ("cnpg Backups", erase::<t::cnpg::Backup>(), None),
        ("ObjectStores", erase::<t::barman::ObjectStore>(), None),
        ("HelmReleases", erase::<t::flux::HelmRelease>(), None),
        ("Postgres apps", erase::<t::apps::Postgres>(), None),
        ("cnpg Pods", erase::<v1::Pod>(), Some(labels::CNPG_CLUSTER)),
        ("PVCs", erase::<v1::PersistentVolumeClaim>(), None),
        ("EtcdClusters", erase::<t::etcd::EtcdCluster>(), None),
        ("MariaDB Restores", erase::<t::mariadb::Restore>(), None),
        ("MariaDBs", erase::<t::mariadb::MariaDB>(), None),
        (
            "PSMDB Restores",
            erase::<t::percona::PerconaServerMongoDBRestore>(),
            None,
        ),
        (
            "PSMDB clusters",
            erase::<t::percona::PerconaServerMongoDB>(),
            None,
        ),
        ("FDB Restores", erase::<t::fdb::FoundationDBRestore>(), None),
        ("FDB clusters", erase::<t::fdb::FoundationDBCluster>(), None),
        ("Velero Restores", erase::<t::velero::Restore>(), None),
        (
            "restore batch Jobs",
            erase::<Job>(),
            Some(labels::OWNED_BY_JOB_NAME),
        ),
    ]
}

/// The strategy kinds (cluster-scoped): a strategy appearing wakes every job waiting for one.
const STRATEGY_KINDS: [&str; 8] = [
    "Job",
    "Velero",
    "CNPG",
    "Altinity",
    "MariaDB",
    "MongoDB",
    "FoundationDB",
    "Etcd",
];

/// An object's applied and deleted versions (a purge is done when the Cluster is *gone*).
fn changes<K>(
    events: impl futures::Stream<Item = watcher::Event<K>> + Send + 'static,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: Send + 'static,
{
    events.filter_map(|e| {
        futures::future::ready(match e {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) | watcher::Event::InitApply(o) => {
                Some(Ok(o))
            }
            watcher::Event::Init | watcher::Event::InitDone => None,
        })
    })
}

/// The jobs an object's change concerns: the active jobs of its namespace, and the job its
/// owned-by labels name (the Velero Restores live in `cozy-velero`).
fn concerned(jobs: &Store<RestoreJob>, o: &DynamicObject) -> Vec<ObjectRef<RestoreJob>> {
    let mut out = controller::active_in(jobs, &o.namespace().unwrap_or_default());
    let l = o.labels();
    if let (Some(name), Some(ns)) = (
        l.get(labels::OWNED_BY_JOB_NAME),
        l.get(labels::OWNED_BY_JOB_NAMESPACE),
    ) {
        let owner = ObjectRef::new(name).within(ns);
        if !out.contains(&owner) {
            out.push(owner);
        }
    }
    out
}

/// Runs the daemon until SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let daemon = Daemon::start(
        COMPONENT,
        &args.client,
        &args.admin,
        &args.log,
        &serde_json::json!({"orchestrator": &args.orchestrator, "leaseEndpoint": args.lease.lease_endpoint}),
    )
    .await?;
    metrics::describe();
    let (leader, work) = daemon.leases(&args.lease, COMPONENT).await?;
    let client = daemon.client.clone();
    let wctx = daemon.watch_context();
    let recorder = runtime::events::recorder(&client, COMPONENT, &args.lease);
    let drills = drill::run::Drills::new(client.clone(), recorder.clone(), leader);

    let (jobs_store, jobs) = Watch::<RestoreJob>::new(client.clone())
        .strip_managed_fields()
        .reflect(&wctx);
    let mut controller = Controller::for_stream(jobs, jobs_store.clone())
        .with_config(ControllerConfig::default().concurrency(args.orchestrator.concurrency));

    let backups = Watch::<Backup>::new(client.clone())
        .strip_managed_fields()
        .events(&wctx);
    let store = jobs_store.clone();
    controller = controller.watches_stream(changes(backups), move |b: Backup| {
        controller::active_in(&store, &b.namespace().unwrap_or_default())
    });

    for kind in STRATEGY_KINDS {
        let resource = context::strategy_resource(kind).expect("a strategy kind");
        let events = Watch::<DynamicObject>::new_with(client.clone(), resource.clone())
            .describe(&format!("{kind} strategies"))
            .absent_is_empty()
            .strip_managed_fields()
            .events(&wctx);
        let store = jobs_store.clone();
        controller = controller.watches_stream_with(
            changes(events),
            move |_: DynamicObject| {
                store
                    .state()
                    .into_iter()
                    .filter(|j| !j.is_terminal())
                    .map(|j| ObjectRef::from_obj(j.as_ref()))
                    .collect::<Vec<_>>()
            },
            resource,
        );
    }

    for (what, resource, selector) in trigger_kinds() {
        let mut watch = Watch::<DynamicObject>::new_with(client.clone(), resource.clone())
            .describe(what)
            .absent_is_empty()
            .strip_managed_fields();
        if let Some(selector) = selector {
            watch = watch.labels(selector);
        }
        let store = jobs_store.clone();
        controller = controller.watches_stream_with(
            changes(watch.events(&wctx)),
            move |o: DynamicObject| concerned(&store, &o),
            resource,
        );
    }

    let leases = WorkLeaseKeeper::new(COMPONENT, work);
    // A job another replica was driving is taken over the moment its lease is freed (that
    // replica shut down, or its lease expired), not at the next busy-lease requeue.
    let controller = controller.reconcile_on(leases.freed::<RestoreJob>());
    // The storage breaker wakes jobs by key (namespace/name).
    let (wake, woken) = tokio::sync::mpsc::unbounded_channel::<String>();
    let controller = controller.reconcile_on(storage_breaker::woken::<RestoreJob>(woken));
    let ctx = Arc::new(context::Context {
        client,
        jobs: jobs_store,
        leases,
        recorder,
        metrics: ControllerMetrics::new(COMPONENT, "restorejobs"),
        backoff: Backoff::default(),
        args: args.orchestrator.clone(),
        readiness: wctx.readiness.clone(),
        storage: storage::Storage::new(&args.orchestrator, wake),
    });
    let jobs = run_controller(controller, ctx, &wctx);
    let drills = drills.run(args.orchestrator.drill_interval, wctx.shutdown.signaled());
    daemon
        .run(async move {
            futures::future::join(jobs, drills).await;
            Ok(())
        })
        .await
}

async fn run_controller(
    controller: Controller<RestoreJob>,
    ctx: Arc<context::Context>,
    wctx: &WatchContext,
) {
    controller
        .graceful_shutdown_on(wctx.shutdown.signaled())
        .run(controller::reconcile, controller::error_policy, ctx)
        .for_each(|item| {
            runtime::controller::log_item("restorejobs", &item);
            futures::future::ready(())
        })
        .await;
}
