//! The CNPG driver's backup path (Postgres applications): what to do next, decided from the caches.
//!
//! ```text
//!  app ref valid? ─► startedAt (first pass only) ─► CNPG strategy (StrategyNotReady, 30 min)
//!  ─► Postgres app (missing: Failed) ─► render ─► Cluster (ClusterNotReady until the deadline)
//!  ─► apply ObjectStore + Cluster plugin (skipped when already so) ─► create the cnpg Backup
//!  ─► phase Running ─► cnpg Backup completed ─► catalog Backup + Succeeded
//!                     failed ─► CNPGBackupTransientFailure, Failed after 30 min
//!                     other ─► wait; Failed after the backup deadline (default 6 h)
//! ```

use std::ops::ControlFlow;

use api::contract::reasons;
use drivers::cnpg as d;
use serde_json::Value as Json;

use super::{Run, Step};
use crate::context::Context;

/// Cache labels of the kinds this driver reads.
pub const CLUSTERS: &str = "cnpg.Cluster";
/// cnpg Backups (labelled with the owning job).
pub const BACKUPS: &str = "cnpg.Backup";
/// barman-cloud ObjectStores.
pub const OBJECT_STORES: &str = "barman.ObjectStore";
/// Postgres applications.
pub const APPS: &str = "apps.Postgres";

/// What the caches show for one job.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The CNPG strategy's `spec.template`.
    pub template: Option<Json>,
    /// The Postgres application.
    pub app: Option<Json>,
    /// The Cluster.
    pub cluster: Option<Json>,
    /// The ObjectStore.
    pub object_store: Option<Json>,
    /// The cnpg Backups labelled with the job (normally one).
    pub backups: Vec<Json>,
}

/// Reads the caches.
pub fn observe(ctx: &Context, run: &Run<'_>) -> Observed {
    let ns = run.namespace();
    let cluster = d::cluster_name(&run.job.spec.application_ref.name);
    Observed {
        template: ctx.caches.template("CNPG", &run.resolved.strategy_ref.name),
        app: run.application(ctx, APPS),
        cluster: ctx.caches.object(CLUSTERS, &ns, &cluster),
        object_store: ctx.caches.object(OBJECT_STORES, &ns, &cluster),
        backups: ctx.caches.owned_by_job(BACKUPS, &ns, run.job),
    }
}

/// One step of the driver.
pub fn step(ctx: &Context, run: &Run<'_>) -> Step {
    decide(run, &observe(ctx, run))
}

/// The pure decision.
pub fn decide(run: &Run<'_>, o: &Observed) -> Step {
    let (template, app) = match run.template_and_app(
        d::validate_app_ref,
        (APPS, "Postgres"),
        o.template.as_ref(),
        o.app.as_ref(),
    ) {
        ControlFlow::Continue(found) => found,
        ControlFlow::Break(step) => return step,
    };
    let ns = run.namespace();
    let app_name = &run.job.spec.application_ref.name;
    let rendered = d::render_template(template, app, &run.resolved.parameters);
    let cluster_name = d::cluster_name(app_name);
    let Some(cluster) = &o.cluster else {
        return run.wait(
            reasons::CLUSTER_NOT_READY,
            format!("waiting for cnpg.io/Cluster {ns}/{cluster_name} to exist"),
            false,
            run.deadline,
            || {
                format!(
                    "cnpg.io/Cluster {ns}/{cluster_name} did not appear within {}",
                    drivers::status::go_duration(run.deadline)
                )
            },
        );
    };
    let template_server = rendered["serverName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .unwrap_or_else(|| cluster_name.clone());
    let server_name = d::archive_server_name(cluster, &template_server);
    let uid = cluster["metadata"]["uid"].as_str().unwrap_or_default();
    let store = d::with_retention_floor(
        d::object_store(&ns, &cluster_name, uid, &rendered),
        o.object_store.as_ref(),
    );
    if !o
        .object_store
        .as_ref()
        .is_some_and(|live| contains(live, &store))
    {
        return Step::Apply {
            label: OBJECT_STORES,
            body: store,
            manager: d::FIELD_MANAGER,
            on_error: "failed to attach barman-cloud plugin to Cluster",
        };
    }
    let plugins = d::cluster_plugins(&ns, &cluster_name, &server_name);
    if !contains(cluster, &plugins) {
        return Step::Apply {
            label: CLUSTERS,
            body: plugins,
            manager: d::FIELD_MANAGER,
            on_error: "failed to attach barman-cloud plugin to Cluster",
        };
    }
    let Some(backup) = o.backups.first() else {
        return run.create_owned(
            BACKUPS,
            d::cnpg_backup(&ns, &run.name(), &cluster_name),
            "failed to ensure cnpg.io/Backup",
        );
    };
    if let Some(step) = run.running() {
        return step;
    }
    let (phase, error) = d::backup_phase(backup);
    let backup_name = backup["metadata"]["name"].as_str().unwrap_or_default();
    match phase.as_str() {
        d::PHASE_COMPLETED => {
            let (driver_metadata, uri, taken) = d::catalog_fields(&d::Completed {
                cnpg_backup: backup,
                cluster: &cluster_name,
                server_name: &server_name,
                rendered: &rendered,
            });
            let entry = drivers::catalog::Entry {
                taken_at: taken
                    .as_deref()
                    .and_then(|t| drivers::catalog::time(&Json::from(t))),
                driver_metadata,
                artifact_uri: Some(uri),
                underlying_resources: Some(d::snapshot(app, &run.resolved.parameters)),
                recoverable_window: d::recoverable_window(
                    backup,
                    o.object_store.as_ref(),
                    &server_name,
                ),
                ..Default::default()
            };
            run.complete(entry, Some("cnpg.io Backup completed"))
        }
        d::PHASE_FAILED => {
            let message = if error.is_empty() {
                "cnpg.io Backup reported phase=failed; awaiting recovery or retry".to_owned()
            } else {
                error.clone()
            };
            // CNPG may retry out of `failed`, so upstream waits 30 minutes; a shorter backup
            // deadline (flag or BackupClass parameter) bounds that wait too.
            let deadline = d::FAILED_PHASE_DEADLINE.min(run.deadline);
            run.wait(
                reasons::CNPG_BACKUP_TRANSIENT_FAILURE,
                message,
                false,
                deadline,
                || {
                    if error.is_empty() {
                        format!(
                            "cnpg.io Backup remained in phase=failed past {} deadline",
                            drivers::status::go_duration(deadline)
                        )
                    } else {
                        error.clone()
                    }
                },
            )
        }
        _ => run.idle_until(run.deadline, || {
            format!(
                "cnpg.io Backup {ns}/{backup_name} did not complete within {} (current phase={phase:?}); raise the BackupClass parameter backupDeadline or the runner's --backup-deadline for very large databases",
                drivers::status::go_duration(run.deadline)
            )
        }),
    }
}

/// True when every field of `want` (recursively; lists compared whole) is in `live`.
fn contains(live: &Json, want: &Json) -> bool {
    match (live, want) {
        (Json::Object(l), Json::Object(w)) => w
            .iter()
            .all(|(k, v)| l.get(k).is_some_and(|lv| contains(lv, v))),
        (l, w) => l == w,
    }
}
