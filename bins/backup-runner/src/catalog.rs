//! The Backup catalog's finalizer `backups.cozystack.io/cleanup` (leader only), as upstream's
//! BackupReconciler: added to every Backup; on deletion the driver-side leftovers of the Backup's
//! strategy kind are cleaned, then the finalizer (and the legacy `…/cleanup-velero`) is removed.
//!
//! ```text
//!  CNPG                         delete cnpg Backup driverMetadata["cnpg.io/backup-name"] (NotFound ok)
//!  Velero, Etcd, other, empty   Velero Backup velero.io/backup-name still there? → DeleteBackupRequest
//!  Job, Altinity, MariaDB, MongoDB, FoundationDB   nothing (their archives are not ours to delete)
//! ```
//!
//! Invariants: cleanup is idempotent and copes with a Backup whose driver objects never existed; a
//! failed cleanup keeps the finalizer and is retried with backoff; the archive in the bucket is never
//! deleted here (see docs/backup-runner.md for what each driver leaves in the bucket).

use std::sync::Arc;
use std::time::Duration;

use api::backups::Backup;
use api::contract::finalizers;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Client, Resource, ResourceExt};
use lease::LeaderElector;
use runtime::{Backoff, ControllerMetrics, ErrorClass, ReconcileError};
use serde_json::json;

/// Errors of the finalizer controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{action} {object}: {source}")]
    Api {
        /// What was attempted.
        action: &'static str,
        /// The object.
        object: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The finalizer helper failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
}

impl ReconcileError for Error {
    fn kind(&self) -> &'static str {
        match self {
            Error::Api { .. } => "api",
            Error::Finalizer(_) => "finalizer",
        }
    }
    fn class(&self) -> ErrorClass {
        ErrorClass::Transient
    }
}

/// What the finalizer controller needs.
pub struct Context {
    /// Client.
    pub client: Client,
    /// Only the leader adds and removes finalizers.
    pub leader: LeaderElector,
    /// Runs/failures/duration (`controller="backups"`).
    pub metrics: ControllerMetrics,
    /// Per-Backup backoff.
    pub backoff: Backoff<Backup>,
    /// cnpg Backups.
    pub cnpg_backups: ApiResource,
    /// Velero Backups.
    pub velero_backups: ApiResource,
    /// Velero DeleteBackupRequests.
    pub delete_requests: ApiResource,
    /// The per-application gauges read from the catalog.
    pub gauges: crate::metrics::CatalogGauges,
}

/// Reconciles one Backup.
pub async fn reconcile(backup: Arc<Backup>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.gauges.observe(&backup);
    if !ctx.leader.current().is_leading() {
        // Winning leadership re-evaluates every Backup.
        return Ok(Action::await_change());
    }
    let timer = ctx.metrics.start();
    let result = reconcile_backup(backup.clone(), &ctx).await;
    timer.finish(result.as_ref().err().map(ReconcileError::kind));
    if result.is_ok() {
        ctx.backoff.reset(&ObjectRef::from_obj(backup.as_ref()));
    }
    result
}

/// Transient errors retry with backoff.
pub fn error_policy(backup: Arc<Backup>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.backoff
        .action_for(ObjectRef::from_obj(backup.as_ref()), err)
}

async fn reconcile_backup(backup: Arc<Backup>, ctx: &Context) -> Result<Action, Error> {
    let ns = backup.namespace().unwrap_or_default();
    let api: Api<Backup> = Api::namespaced(ctx.client.clone(), &ns);
    let has = |f: &str| backup.finalizers().iter().any(|x| x == f);
    if backup.meta().deletion_timestamp.is_some()
        && has(finalizers::CLEANUP_VELERO_LEGACY)
        && !has(finalizers::CLEANUP)
    {
        // Only the legacy finalizer: the helper below would not see it.
        cleanup(&backup, ctx).await?;
        remove_finalizers(&api, &backup).await?;
        return Ok(Action::await_change());
    }
    let result = finalizer(&api, finalizers::CLEANUP, backup, |event| async move {
        match event {
            Event::Apply(_) => Ok(Action::await_change()),
            Event::Cleanup(b) => {
                cleanup(&b, ctx).await?;
                if b.finalizers()
                    .iter()
                    .any(|f| f == finalizers::CLEANUP_VELERO_LEGACY)
                {
                    remove_finalizers(
                        &Api::namespaced(ctx.client.clone(), &b.namespace().unwrap_or_default()),
                        &b,
                    )
                    .await?;
                }
                Ok(Action::await_change())
            }
        }
    })
    .await;
    result.map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(e)
        | kube::runtime::finalizer::Error::CleanupFailed(e) => e,
        other => Error::Finalizer(other.to_string()),
    })
}

/// Removes the legacy finalizer (and ours, for the legacy-only case) with a JSON patch.
async fn remove_finalizers(api: &Api<Backup>, backup: &Backup) -> Result<(), Error> {
    let keep: Vec<&String> = backup
        .finalizers()
        .iter()
        .filter(|f| *f != finalizers::CLEANUP_VELERO_LEGACY && *f != finalizers::CLEANUP)
        .collect();
    let patch = json!({"metadata": {
        "resourceVersion": backup.resource_version(),
        "finalizers": keep,
    }});
    match api
        .patch(
            &backup.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(source) => Err(Error::Api {
            action: "remove finalizers of",
            object: format!("Backup {}", backup.name_any()),
            source,
        }),
    }
}

/// The per-kind cleanup of a deleted Backup.
async fn cleanup(backup: &Backup, ctx: &Context) -> Result<(), Error> {
    let ns = backup.namespace().unwrap_or_default();
    let md = backup.spec.driver_metadata.clone().unwrap_or_default();
    match backup.spec.strategy_ref.kind.as_str() {
        "CNPG" => {
            let Some(name) = md
                .get(drivers::cnpg::keys::BACKUP_NAME)
                .filter(|n| !n.is_empty())
            else {
                return Ok(());
            };
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), &ns, &ctx.cnpg_backups);
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {
                    tracing::info!(backup = %format!("{ns}/{}", backup.name_any()), cnpg_backup = %name, "deleted the cnpg Backup");
                    Ok(())
                }
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                Err(source) => Err(Error::Api {
                    action: "delete",
                    object: format!("cnpg Backup {ns}/{name}"),
                    source,
                }),
            }
        }
        "Job" | "Altinity" | "MariaDB" | "MongoDB" | "FoundationDB" => Ok(()),
        _ => velero_cleanup(&md, ctx).await,
    }
}

/// Files a Velero DeleteBackupRequest for the Velero Backup (a plain delete would be resurrected
/// by the storage location's sync), only while that Backup exists.
async fn velero_cleanup(
    md: &std::collections::BTreeMap<String, String>,
    ctx: &Context,
) -> Result<(), Error> {
    let Some(name) = md.get("velero.io/backup-name").filter(|n| !n.is_empty()) else {
        return Ok(());
    };
    let ns = md
        .get("velero.io/backup-namespace")
        .filter(|n| !n.is_empty())
        .map(String::as_str)
        .unwrap_or(api::contract::names::VELERO_NAMESPACE);
    let backups: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ns, &ctx.velero_backups);
    match backups.get_opt(name).await {
        Ok(Some(_)) => {}
        Ok(None) => return Ok(()),
        // Velero is not installed: nothing to clean.
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(source) => {
            return Err(Error::Api {
                action: "get",
                object: format!("Velero Backup {ns}/{name}"),
                source,
            });
        }
    }
    let request: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1", "kind": "DeleteBackupRequest",
        "metadata": {"generateName": format!("{name}-"), "namespace": ns},
        "spec": {"backupName": name},
    }))
    .map_err(|e| Error::Finalizer(e.to_string()))?;
    let requests: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), ns, &ctx.delete_requests);
    match requests.create(&PostParams::default(), &request).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(source) => Err(Error::Api {
            action: "create",
            object: format!("DeleteBackupRequest for {ns}/{name}"),
            source,
        }),
    }
}

/// Retries of a Backup cleanup never wait longer than this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
