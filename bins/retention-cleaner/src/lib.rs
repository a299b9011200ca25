//! `retention-cleaner`: applies Plan retention policies, deletes failed backups once they outlive
//! `--failed-backup-ttl`, keeps CNPG's barman retention in step with the catalog and stops
//! FoundationDB backup agents whose cluster keeps no Backup.
//!
//! ```text
//!  watch Plans, Backups, BackupJobs, RestoreJobs, FoundationDBBackups (caches)
//!        │ change (debounced --debounce) │ leadership won │ next expiry │ --sweep-interval
//!        ▼
//!  Singleton pass (leader only) ─► per namespace: retention::decide(objects, flags, now)
//!        ─► delete (UID precondition; Backups through their finalizer, failed jobs after their
//!           operator-side leftovers) ─► Events on the Plan ─► FoundationDB stop ─► ObjectStore floor
//! ```
//!
//! Invariants: every sweep is re-derived from the cluster, so a kill at any instant deletes
//! nothing extra on restart; only the leader writes; a failed deletion is retried with backoff and
//! never blocks the others. The decisions are `libs/retention`; the semantics are in
//! `docs/retention.md`, the daemon in `docs/retention-cleaner.md`.

pub mod args;
pub mod metrics;
pub mod sweep;

use api::backups::{Backup, BackupJob, Plan, RestoreJob};
use kube::api::DynamicObject;
use kube::core::ApiResource;
use runtime::{Daemon, Singleton, Trigger, Watch};

pub use args::{Args, CleanerArgs};

/// The component name (lease, metrics prefix, logs, Event reporter).
pub const COMPONENT: &str = "retention-cleaner";

/// Runs the daemon until SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let daemon = Daemon::start(
        COMPONENT,
        &args.client,
        &args.admin,
        &args.log,
        &serde_json::json!({"cleaner": &args.cleaner, "leaseEndpoint": args.lease.lease_endpoint}),
    )
    .await?;
    metrics::describe();
    let (leader, _work) = daemon.leases(&args.lease, COMPONENT).await?;
    let client = daemon.client.clone();
    let wctx = daemon.watch_context();
    let recorder = runtime::events::recorder(&client, COMPONENT, &args.lease);

    let changed = Trigger::new();
    let caches = sweep::Caches {
        plans: Watch::<Plan>::new(client.clone())
            .strip_managed_fields()
            .cache(&wctx, &changed),
        backups: Watch::<Backup>::new(client.clone())
            .strip_managed_fields()
            .cache(&wctx, &changed),
        jobs: Watch::<BackupJob>::new(client.clone())
            .strip_managed_fields()
            .cache(&wctx, &changed),
        restores: Watch::<RestoreJob>::new(client.clone())
            .strip_managed_fields()
            .cache(&wctx, &changed),
        foundationdb: Watch::<DynamicObject>::new_with(
            client.clone(),
            ApiResource::erase::<api::thirdparty::fdb::FoundationDBBackup>(&()),
        )
        .describe("FoundationDBBackups")
        .absent_is_empty()
        .strip_managed_fields()
        .cache(&wctx, &changed),
        object_stores: Watch::<DynamicObject>::new_with(
            client.clone(),
            ApiResource::erase::<api::thirdparty::barman::ObjectStore>(&()),
        )
        .describe("ObjectStores")
        .absent_is_empty()
        .strip(sweep::keep_retention_fields)
        // Their changes (the plugin's status updates among them) are not a reason to sweep.
        .cache(&wctx, &Trigger::new()),
    };
    let synced = {
        let caches = caches.clone();
        move || caches.synced()
    };
    let cleaner = sweep::Cleaner::new(
        client,
        caches,
        recorder,
        args.cleaner.retention(),
        args.cleaner.debounce,
    );
    let sweeps = Singleton::new(COMPONENT, "sweep", leader)
        .on_change_debounced(&changed, args.cleaner.debounce)
        .tick(args.cleaner.sweep_interval)
        .when(synced)
        .run(cleaner, wctx.shutdown.clone());
    daemon.run(async move { Ok(sweeps.await?) }).await
}
