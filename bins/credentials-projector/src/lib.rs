//! `credentials-projector`: copies the system bucket credentials (the source Secret, e.g.
//! `tenant-root/bucket-cozy-backups-system-credentials`) into `cozy-backups-creds` in every namespace
//! that needs them, in every key format the drivers read, and reports `CredentialsProjected` on
//! BackupJobs and RestoreJobs. Wire-compatible with upstream's projector (fact sheet §5–§6).
//!
//! ```text
//!                    ┌──────────── tenant path (any replica holding the job's work lease) ───────────┐
//!  BackupJob/RestoreJob ─► gates (terminal, BackupClass|Backup, group, kind) ─► project ─► SSA condition
//!                    └───────────────────────────────────────────────────────────────────────────────┘
//!                    ┌──────────── system/rotation path (leader only) ──────────────────────────────┐
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
use runtime::{Backoff, ControllerMetrics, Daemon};

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
    let shutdown = daemon.shutdown.clone();
    let (changes_tx, changes_rx) = tokio::sync::watch::channel(0u64);

    let source_ready = daemon.readiness.register("watch source Secret");
    let system_ready = daemon.readiness.register("system projection");
    let bj_ready = daemon.readiness.register("watch BackupJob");
    let class_ready = daemon.readiness.register("watch BackupClass");
    let rj_ready = daemon.readiness.register("watch RestoreJob");

    let trigger = |rx| {
        futures::stream::select(
            system::changes_stream(rx),
            system::ticks(config.system_tick),
        )
        .boxed()
    };
    let backup_jobs = tenant::run::<BackupJob>(
        Arc::new(tenant::Context {
            client: client.clone(),
            config: Arc::new(config.projection.clone()),
            leases: leases.clone(),
            metrics: ControllerMetrics::new(COMPONENT, "backupjobs"),
            backoff: Backoff::default(),
            lost_copies: Default::default(),
        }),
        bj_ready,
        Some(class_ready),
        trigger(changes_rx.clone()),
        shutdown.clone(),
    );
    let restore_jobs = tenant::run::<RestoreJob>(
        Arc::new(tenant::Context {
            client: client.clone(),
            config: Arc::new(config.projection.clone()),
            leases,
            metrics: ControllerMetrics::new(COMPONENT, "restorejobs"),
            backoff: Backoff::default(),
            lost_copies: Default::default(),
        }),
        rj_ready,
        None,
        trigger(changes_rx.clone()),
        shutdown.clone(),
    );
    let source = system::watch_source(
        client.clone(),
        config.clone(),
        changes_tx,
        source_ready,
        shutdown.clone(),
    );
    let leader = system::run_leader_loop(
        client,
        config.clone(),
        elector,
        changes_rx,
        system_ready,
        shutdown,
    );
    daemon
        .run(async move {
            tokio::join!(backup_jobs, restore_jobs, source, leader);
            Ok(())
        })
        .await
}
