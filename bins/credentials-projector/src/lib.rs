//! `credentials-projector`: copies the system bucket credentials (the source Secret, e.g.
//! `tenant-root/bucket-cozy-backups-system-credentials`) into `cozy-backups-creds` in every namespace
//! that needs them, in every key format the drivers read, and reports `CredentialsProjected` on
//! BackupJobs and RestoreJobs. Wire-compatible with upstream's projector (see docs/credentials-projector.md).
//!
//! ```text
//!                    ┌──────────── tenant path (any replica holding the job's work lease) ───────────┐
//!  BackupJob/RestoreJob ─► gates (terminal, BackupClass|Backup, group, kind) ─► project ─► SSA condition
//!                    └───────────────────────────────────────────────────────────────────────────────┘
//!                    ┌──────────── system/rotation path (leader only, runtime Singleton) ───────────┐
//!  leadership won │ source Secret changed │ 60 s tick ─► system namespaces + every labelled copy
//!                    └───────────────────────────────────────────────────────────────────────────────┘
//!  project = Get source (uncached) ─► backup_storage::credentials (parse, keys) ─► create/update on change
//! ```
//!
//! Invariants: no credential value reaches a log line, an error message, a condition, an Event or a
//! metric; a target without the ownership label is never written; no write happens when nothing
//! changed; the daemon owns only the projected Secrets and the `CredentialsProjected` condition.

pub mod config;
pub mod gates;
pub mod metrics;
pub mod project;
pub mod status;
pub mod system;
pub mod tenant;

pub use config::Args;

use std::sync::Arc;

use api::backups::{BackupJob, RestoreJob};
use futures::StreamExt;
use runtime::{Daemon, Singleton, Trigger, WorkLeaseKeeper};

/// The component name (metric prefix, lease names).
pub const COMPONENT: &str = "credentials-projector";

/// Runs the daemon until SIGTERM/SIGINT.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let config = Arc::new(args.projection.config()?);
    let daemon = Daemon::start(
        COMPONENT,
        &args.client,
        &args.admin,
        &args.log,
        &config.loggable(),
    )
    .await?;
    metrics::describe();
    let (elector, leases) = daemon.leases(&args.lease, COMPONENT).await?;
    let client = daemon.client.clone();
    let ctx = daemon.watch_context();
    let source_changed = Trigger::new();
    let source = system::watch_source(client.clone(), &config, &source_changed, &ctx);
    let system_ready = daemon.readiness.register("system projection");
    let leases = Arc::new(WorkLeaseKeeper::new(COMPONENT, leases));

    // Jobs are re-evaluated on every source change and on the safety tick.
    let trigger = || {
        futures::stream::select(source_changed.stream(), system::ticks(config.system_tick)).boxed()
    };
    let projection = Arc::new(config.projection.clone());
    let backup_jobs = tenant::run(
        tenant::Context::<BackupJob>::new(client.clone(), projection.clone(), leases.clone()),
        &ctx,
        trigger(),
    );
    let restore_jobs = tenant::run(
        tenant::Context::<RestoreJob>::new(client.clone(), projection, leases),
        &ctx,
        trigger(),
    );
    let system = Singleton::new(COMPONENT, "system", elector)
        .on_change(&source_changed)
        .tick(config.system_tick)
        .followers_evaluate()
        // The first round waits for the source's initial list, whose completion would otherwise
        // make a second round.
        .when(move || source.is_synced())
        .run(
            system::SystemRounds {
                client,
                config: config.clone(),
                ready: system_ready,
            },
            ctx.shutdown.clone(),
        );
    daemon
        .run(async move {
            let ((), (), system) = tokio::join!(backup_jobs, restore_jobs, system);
            Ok(system?)
        })
        .await
}
