//! The `backup-runner` daemon: runs BackupJobs through the resolved strategy driver, records the
//! `Backup` catalog, and cleans a Backup's driver-side leftovers when it is deleted.
//!
//! ```text
//!  watches (runtime caches, event-driven)            controllers
//!  BackupJob ───────────────────────────────┐
//!  BackupClass ─► jobs naming it ────────────┤
//!  strategy CRs ─► jobs waiting for them ────┼──► BackupJob controller (every replica; one replica per job
//!  cnpg Backup (owned-by labels) ─► its job ─┤     through work leases): pipeline gate ─► driver steps
//!  mariadb Backup, EtcdSnapshot, batch Job   │
//!     (owned-by labels) ─► its job ──────────┤
//!  cnpg Cluster, MariaDB mariadb-<app>       │
//!     ─► jobs of its application ────────────┤
//!  EtcdCluster ─► Etcd jobs of its namespace ┤
//!  Velero Backup, FoundationDBBackup,        │
//!     PerconaServerMongoDBBackup ─► its job ─┤
//!  foundationdb-<app>, mongodb-<app>, MongoDB│
//!     apps ─► jobs of its application ───────┘
//!  Backup ──────────────────────────────────────► catalog finalizer (leader only): driver cleanup,
//!                                                  the Backup's record in the system bucket
//!  system bucket catalog/v1/ (every --catalog-sync-interval) ─► catalog sync (leader only):
//!                                                  missing Backups re-created from valid records
//!  Plan ────────────────────────────────────────► Plan controller (leader only): BackupJobs per slot
//! ```
//!
//! Modules: [`pipeline`] (the gate before any driver, pure), [`drivers`] (one module per strategy
//! kind: pure decisions over the caches + the executor), [`controller`] (reconcile, leases,
//! fencing), [`catalog`] (the Backup finalizer and record writes), [`records`] (the
//! signing key, the bucket, Backup ⇄ record), [`catalog_sync`] (re-creating Backups from records), [`plans`] (Plan schedules), [`context`] (caches and writes), [`events`],
//! [`metrics`], [`args`].
//!
//! Invariants: everything is re-derived from the cluster on every reconcile (kill -9 at any instant
//! continues where the objects say); one replica drives a job at a time, and a stale one's writes
//! fail on their resourceVersion precondition; no credential value is read, held or reported.

pub mod args;
pub mod breaker;
pub mod catalog;
pub mod catalog_sync;
pub mod context;
pub mod controller;
pub mod drivers;
pub mod events;
pub mod metrics;
pub mod pipeline;
pub mod plans;
pub mod records;

use std::sync::Arc;

use api::backups::{Backup, BackupClass, BackupJob, Plan};
use api::contract::labels;
use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{Controller, controller::Config as ControllerConfig, watcher};
use kube::{Client, ResourceExt};
use runtime::{Backoff, ControllerMetrics, Daemon, Watch, WatchContext, WorkLeaseKeeper};

pub use args::{Args, RunnerArgs};

/// Component name (logs, metrics prefix, leases, Event reporter).
pub const COMPONENT: &str = "backup-runner";

fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// The strategy kinds and their API resources.
fn strategy_kinds() -> Vec<(&'static str, ApiResource)> {
    use api::strategy as s;
    vec![
        ("Job", erase::<s::Job>()),
        ("Velero", erase::<s::Velero>()),
        ("CNPG", erase::<s::CNPG>()),
        ("Altinity", erase::<s::Altinity>()),
        ("MariaDB", erase::<s::MariaDB>()),
        ("MongoDB", erase::<s::MongoDB>()),
        ("FoundationDB", erase::<s::FoundationDB>()),
        ("Etcd", erase::<s::Etcd>()),
    ]
}

/// How a driver-side kind maps its events to BackupJobs.
#[derive(Clone, Copy)]
enum Route {
    /// By the owned-by labels.
    OwnedBy,
    /// A cnpg Cluster `postgres-<app>`: the jobs of that application.
    CnpgCluster,
    /// An operator object named `<prefix><app>` (e.g. `mariadb-<app>`): the jobs of that application.
    NamePrefix(&'static str),
    /// An object without owned-by labels that the jobs of an application kind wait on (the
    /// singleton EtcdCluster `etcd`): the jobs of that kind in its namespace.
    KindInNamespace(&'static str),
    /// Not routed (read only).
    None,
}

/// The driver-side kinds the runner caches: label, API resource, label selector, routing.
fn object_kinds() -> Vec<(&'static str, ApiResource, Option<&'static str>, Route)> {
    use api::thirdparty as t;
    vec![
        (
            drivers::cnpg::BACKUPS,
            erase::<t::cnpg::Backup>(),
            Some(labels::OWNED_BY_JOB_NAME),
            Route::OwnedBy,
        ),
        (
            drivers::cnpg::CLUSTERS,
            erase::<t::cnpg::Cluster>(),
            None,
            Route::CnpgCluster,
        ),
        (
            drivers::cnpg::OBJECT_STORES,
            erase::<t::barman::ObjectStore>(),
            None,
            Route::None,
        ),
        (
            drivers::cnpg::APPS,
            erase::<t::apps::Postgres>(),
            None,
            Route::None,
        ),
        (
            drivers::mariadb::BACKUPS,
            erase::<t::mariadb::Backup>(),
            Some(labels::OWNED_BY_JOB_NAME),
            Route::OwnedBy,
        ),
        (
            drivers::mariadb::SERVERS,
            erase::<t::mariadb::MariaDB>(),
            None,
            Route::NamePrefix("mariadb-"),
        ),
        (
            drivers::mariadb::APPS,
            erase::<t::apps::MariaDB>(),
            None,
            Route::None,
        ),
        (
            drivers::etcd::SNAPSHOTS,
            erase::<t::etcd::EtcdSnapshot>(),
            Some(labels::OWNED_BY_JOB_NAME),
            Route::OwnedBy,
        ),
        (
            drivers::etcd::CLUSTERS,
            erase::<t::etcd::EtcdCluster>(),
            None,
            Route::KindInNamespace(::drivers::etcd::APP_KIND),
        ),
        (
            drivers::etcd::APPS,
            erase::<t::apps::Etcd>(),
            None,
            Route::None,
        ),
        (
            drivers::job::BATCH_JOBS,
            erase::<k8s_openapi::api::batch::v1::Job>(),
            Some(labels::OWNED_BY_JOB_NAME),
            Route::OwnedBy,
        ),
        (
            drivers::altinity::APPS,
            erase::<t::apps::ClickHouse>(),
            None,
            Route::None,
        ),
        (
            drivers::velero::BACKUPS,
            erase::<t::velero::Backup>(),
            Some(labels::OWNED_BY_JOB_NAME),
            Route::OwnedBy,
        ),
        (
            drivers::foundationdb::CLUSTERS,
            erase::<t::fdb::FoundationDBCluster>(),
            None,
            Route::NamePrefix(::drivers::foundationdb::CLUSTER_PREFIX),
        ),
        (
            drivers::foundationdb::BACKUPS,
            erase::<t::fdb::FoundationDBBackup>(),
            None,
            Route::OwnedBy,
        ),
        (
            drivers::foundationdb::APPS,
            erase::<t::apps::FoundationDB>(),
            None,
            Route::None,
        ),
        (
            drivers::mongodb::CLUSTERS,
            erase::<t::percona::PerconaServerMongoDB>(),
            None,
            Route::NamePrefix(::drivers::mongodb::CLUSTER_PREFIX),
        ),
        (
            drivers::mongodb::BACKUPS,
            erase::<t::percona::PerconaServerMongoDBBackup>(),
            Some(labels::OWNED_BY_JOB_NAME),
            Route::OwnedBy,
        ),
        (
            drivers::mongodb::APPS,
            erase::<t::apps::MongoDB>(),
            None,
            Route::NamePrefix(""),
        ),
    ]
}

/// Runs the daemon until SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let daemon = Daemon::start(
        COMPONENT,
        &args.client,
        &args.admin,
        &args.log,
        &serde_json::json!({"runner": &args.runner, "leaseEndpoint": args.lease.lease_endpoint}),
    )
    .await?;
    metrics::describe();
    breaker::describe();
    let (leader, work) = daemon.leases(&args.lease, COMPONENT).await?;
    let client = daemon.client.clone();
    let wctx = daemon.watch_context();
    let recorder = runtime::events::recorder(&client, COMPONENT, &args.lease);

    let (jobs_store, jobs) = Watch::<BackupJob>::new(client.clone())
        .strip_managed_fields()
        .reflect(&wctx);
    let mut controller = Controller::for_stream(jobs, jobs_store.clone())
        .with_config(ControllerConfig::default().concurrency(args.runner.concurrency));

    let (classes, class_events) = Watch::<BackupClass>::new(client.clone()).reflect(&wctx);
    let store = jobs_store.clone();
    controller = controller.watches_stream(class_events, move |class: BackupClass| {
        controller::jobs_of_class(&store, &class.name_any())
    });

    let mut strategies = Vec::new();
    for (kind, resource) in strategy_kinds() {
        let (store, events) = Watch::<DynamicObject>::new_with(client.clone(), resource.clone())
            .describe(&format!("{kind} strategies"))
            .absent_is_empty()
            .reflect(&wctx);
        strategies.push((kind, store));
        let jobs = jobs_store.clone();
        controller = controller.watches_stream_with(
            events,
            move |_: DynamicObject| controller::jobs_waiting_for_strategies(&jobs),
            resource,
        );
    }

    let mut objects = Vec::new();
    for (label, resource, selector, route) in object_kinds() {
        let mut watch = Watch::<DynamicObject>::new_with(client.clone(), resource.clone())
            .describe(label)
            .absent_is_empty()
            .strip_managed_fields();
        if let Some(selector) = selector {
            watch = watch.labels(selector);
        }
        let (store, events) = watch.reflect(&wctx);
        objects.push((label, resource.clone(), store));
        controller = route_events(controller, events, route, resource, jobs_store.clone());
    }

    // Replicas spread the jobs by a stable hash of their names (each job is asked for first by
    // one replica; the others learn of its grant by push and do not contend).
    let leases = WorkLeaseKeeper::new(COMPONENT, work).spread();
    // A job another replica was driving is taken over the moment its lease is freed (that
    // replica shut down, or its lease expired), not at the next busy-lease requeue.
    controller = controller.reconcile_on(leases.freed::<BackupJob>());
    let mirror = Arc::new(records::Mirror::new(client.clone(), &args.runner));
    // The storage breaker wakes jobs by key (namespace/name).
    let (wake, woken) = tokio::sync::mpsc::unbounded_channel::<String>();
    let controller = controller.reconcile_on(storage_breaker::woken::<BackupJob>(woken));
    let ctx = Arc::new(context::Context {
        client: client.clone(),
        caches: context::Caches {
            classes,
            strategies,
            objects,
        },
        leases,
        recorder,
        metrics: ControllerMetrics::new(COMPONENT, "backupjobs"),
        backoff: Backoff::default(),
        args: args.runner.clone(),
        readiness: wctx.readiness.clone(),
        mirror: mirror.clone(),
        jobs: jobs_store.clone(),
        breakers: Arc::new(
            breaker::Breakers::new(args.runner.breaker.settings(), breaker::NAMES).with_wake(wake),
        ),
    });
    let jobs = controller
        .graceful_shutdown_on(wctx.shutdown.signaled())
        .run(controller::reconcile, controller::error_policy, ctx)
        .for_each(|item| {
            runtime::controller::log_item("backupjobs", &item);
            futures::future::ready(())
        });
    let plans = plan_controller(client.clone(), leader.clone(), &args, &wctx);
    let (backups, backup_events) = Watch::<Backup>::new(client.clone())
        .strip_managed_fields()
        .reflect(&wctx);
    let sync = runtime::Singleton::new(COMPONENT, "catalog-sync", leader.clone())
        .tick(args.runner.catalog_sync_interval)
        .run(
            catalog_sync::CatalogSync::new(
                client.clone(),
                mirror.clone(),
                backups.clone(),
                runtime::events::recorder(&client, COMPONENT, &args.lease),
                &args.runner.catalog_key_secret,
            ),
            wctx.shutdown.clone(),
        );
    let catalog = catalog_controller(
        client,
        leader,
        (backups, backup_events),
        mirror,
        args.runner.catalog_sync_interval,
        &wctx,
    );
    daemon
        .run(async move {
            let (_, _, _, sync) = tokio::join!(jobs, catalog, plans, sync);
            Ok(sync?)
        })
        .await
}

fn route_events(
    controller: Controller<BackupJob>,
    events: impl futures::Stream<Item = Result<DynamicObject, watcher::Error>> + Send + 'static,
    route: Route,
    resource: ApiResource,
    jobs: Store<BackupJob>,
) -> Controller<BackupJob> {
    match route {
        Route::OwnedBy => controller.watches_stream_with(
            events,
            |o: DynamicObject| {
                let labels = o.labels();
                match (
                    labels.get(labels::OWNED_BY_JOB_NAME),
                    labels.get(labels::OWNED_BY_JOB_NAMESPACE),
                ) {
                    (Some(name), Some(ns)) => vec![ObjectRef::new(name).within(ns)],
                    _ => Vec::new(),
                }
            },
            resource,
        ),
        Route::CnpgCluster => controller.watches_stream_with(
            events,
            move |o: DynamicObject| {
                let ns = o.namespace().unwrap_or_default();
                match o.name_any().strip_prefix("postgres-") {
                    Some(app) => controller::jobs_of_app(&jobs, &ns, app),
                    None => Vec::new(),
                }
            },
            resource,
        ),
        Route::NamePrefix(prefix) => controller.watches_stream_with(
            events,
            move |o: DynamicObject| {
                let ns = o.namespace().unwrap_or_default();
                match o.name_any().strip_prefix(prefix) {
                    Some(app) => controller::jobs_of_app(&jobs, &ns, app),
                    None => Vec::new(),
                }
            },
            resource,
        ),
        Route::KindInNamespace(kind) => controller.watches_stream_with(
            events,
            move |o: DynamicObject| {
                controller::jobs_of_kind(&jobs, &o.namespace().unwrap_or_default(), kind)
            },
            resource,
        ),
        Route::None => {
            // Read-only caches still need their stream polled; route nothing.
            controller.watches_stream_with(
                events,
                |_: DynamicObject| Vec::<ObjectRef<BackupJob>>::new(),
                resource,
            )
        }
    }
}

/// The Backup finalizer controller; every Backup is re-evaluated when this replica wins leadership.
async fn catalog_controller(
    client: Client,
    leader: lease::LeaderElector,
    (store, backups): (
        Store<Backup>,
        impl futures::Stream<Item = Result<Backup, watcher::Error>> + Send + 'static,
    ),
    mirror: Arc<records::Mirror>,
    unconfigured_requeue: std::time::Duration,
    wctx: &WatchContext,
) {
    let leadership = tokio_stream_of(leader.subscribe());
    let ctx = Arc::new(catalog::Context {
        client,
        leader,
        metrics: ControllerMetrics::new(COMPONENT, "backups"),
        backoff: Backoff::new(std::time::Duration::from_secs(1), catalog::MAX_BACKOFF),
        cnpg_backups: erase::<api::thirdparty::cnpg::Backup>(),
        velero_backups: ApiResource {
            group: "velero.io".into(),
            version: "v1".into(),
            api_version: "velero.io/v1".into(),
            kind: "Backup".into(),
            plural: "backups".into(),
        },
        delete_requests: erase::<api::thirdparty::velero::DeleteBackupRequest>(),
        gauges: Default::default(),
        mirror,
        unconfigured_requeue,
    });
    Controller::for_stream(backups, store)
        .with_config(ControllerConfig::default().concurrency(catalog::CONCURRENCY))
        .reconcile_all_on(leadership)
        .graceful_shutdown_on(wctx.shutdown.signaled())
        .run(catalog::reconcile, catalog::error_policy, ctx)
        .for_each(|item| {
            runtime::controller::log_item("backups", &item);
            futures::future::ready(())
        })
        .await;
}

/// The Plan controller; every Plan is re-evaluated when this replica wins leadership.
async fn plan_controller(
    client: Client,
    leader: lease::LeaderElector,
    args: &Args,
    wctx: &WatchContext,
) {
    let (store, plans) = Watch::<Plan>::new(client.clone())
        .strip_managed_fields()
        .reflect(wctx);
    let leadership = tokio_stream_of(leader.subscribe());
    let recorder = runtime::events::recorder(&client, COMPONENT, &args.lease);
    let ctx = Arc::new(plans::Context {
        client,
        leader,
        recorder,
        metrics: ControllerMetrics::new(COMPONENT, "plans"),
        backoff: Backoff::default(),
        zone: args.runner.plan_time_zone,
        starting_deadline: args.runner.plan_starting_deadline,
    });
    Controller::for_stream(plans, store)
        .reconcile_all_on(leadership)
        .graceful_shutdown_on(wctx.shutdown.signaled())
        .run(plans::reconcile, plans::error_policy, ctx)
        .for_each(|item| {
            runtime::controller::log_item("plans", &item);
            futures::future::ready(())
        })
        .await;
}

/// A stream that yields whenever this replica becomes the leader.
fn tokio_stream_of(
    rx: tokio::sync::watch::Receiver<lease::Leadership>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(false, move |was| {
        let mut rx = rx.clone();
        async move {
            let mut was = was;
            loop {
                let now = rx.borrow_and_update().is_leading();
                if now && !was {
                    return Some(((), true));
                }
                was = now;
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        }
    })
    .boxed()
}
