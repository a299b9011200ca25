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
//! The Backup's record in the system bucket (docs/disaster-recovery.md) rides on the same
//! controller: on every apply the record is sealed and, when its digest differs from the Backup's
//! `backups.cozystack.io/catalog-record` annotation, written and the annotation set (write first,
//! annotate second: a crash in between rewrites the same bytes); winning leadership re-evaluates
//! every Backup, which is the catch-up pass for Backups made before records existed. On deletion
//! the record is deleted before the finalizer goes: it must succeed when the annotation says a
//! record was written, and is tried once otherwise.
//!
//! Invariants: cleanup is idempotent and copes with a Backup whose driver objects never existed; a
//! failed cleanup keeps the finalizer and is retried with backoff; the archive in the bucket is never
//! deleted here (see docs/backup-runner.md for what each driver leaves in the bucket).

use std::sync::Arc;
use std::time::Duration;

use api::backups::Backup;
use api::contract::finalizers;
use drivers::Driver;
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
    /// The catalog record could not be written or deleted.
    #[error("catalog record {key}: {message}")]
    Record {
        /// The object key.
        key: String,
        /// What failed (never a credential).
        message: String,
    },
}

impl ReconcileError for Error {
    fn kind(&self) -> &'static str {
        match self {
            Error::Api { .. } => "api",
            Error::Finalizer(_) => "finalizer",
            Error::Record { .. } => "catalog_record",
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
    /// The catalog records' bucket side.
    pub mirror: Arc<crate::records::Mirror>,
    /// How long to wait before looking again while the bucket is not configured.
    pub unconfigured_requeue: Duration,
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
        delete_record(&backup, ctx).await?;
        remove_finalizers(&api, &backup).await?;
        return Ok(Action::await_change());
    }
    let result = finalizer(&api, finalizers::CLEANUP, backup, |event| async move {
        match event {
            Event::Apply(b) => write_record(&b, ctx).await,
            Event::Cleanup(b) => {
                cleanup(&b, ctx).await?;
                delete_record(&b, ctx).await?;
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

/// Writes the Backup's record when it changed (see the module documentation).
async fn write_record(backup: &Backup, ctx: &Context) -> Result<Action, Error> {
    let ns = backup.namespace().unwrap_or_default();
    let name = backup.name_any();
    let key = backup_storage::catalog::object_key(&ns, &name);
    let bucket = match ctx.mirror.bucket().await {
        Ok(Some(bucket)) => bucket,
        Ok(None) if ctx.mirror.enabled() => {
            return Ok(Action::requeue(ctx.unconfigured_requeue));
        }
        Ok(None) => return Ok(Action::await_change()),
        Err(e) => {
            return Err(Error::Record {
                key,
                message: e.to_string(),
            });
        }
    };
    let (bytes, digest) = bucket.seal(backup);
    if backup.annotations().get(crate::records::RECORD_ANNOTATION) == Some(&digest) {
        return Ok(Action::await_change());
    }
    if let Err(e) = bucket.s3.put(&key, bytes).await {
        if !e.is_transient() {
            ctx.mirror.invalidate().await;
        }
        return Err(Error::Record {
            key,
            message: e.to_string(),
        });
    }
    metrics::counter!(crate::metrics::CATALOG_WRITTEN).increment(1);
    let patch = json!({"metadata": {"annotations": {crate::records::RECORD_ANNOTATION: digest}}});
    match Api::<Backup>::namespaced(ctx.client.clone(), &ns)
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => {
            tracing::debug!(backup = %format!("{ns}/{name}"), "wrote the catalog record");
            Ok(Action::await_change())
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Action::await_change()),
        Err(source) => Err(Error::Api {
            action: "annotate",
            object: format!("Backup {ns}/{name}"),
            source,
        }),
    }
}

/// Deletes the Backup's record: must succeed when the annotation says one was written; tried once
/// otherwise (a record written by a replica killed before it annotated).
async fn delete_record(backup: &Backup, ctx: &Context) -> Result<(), Error> {
    let ns = backup.namespace().unwrap_or_default();
    let key = backup_storage::catalog::object_key(&ns, &backup.name_any());
    let written = backup
        .annotations()
        .contains_key(crate::records::RECORD_ANNOTATION);
    let result = match ctx.mirror.bucket().await {
        Ok(Some(bucket)) => bucket.s3.delete(&key).await.map_err(|e| e.to_string()),
        Ok(None) => Ok(()),
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(()) => {
            if written {
                metrics::counter!(crate::metrics::CATALOG_DELETED).increment(1);
            }
            Ok(())
        }
        Err(message) if written => Err(Error::Record { key, message }),
        Err(message) => {
            tracing::debug!(record = %key, error = %message, "could not delete a catalog record that was never annotated as written; continuing");
            Ok(())
        }
    }
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
    match Driver::from_kind(&backup.spec.strategy_ref.kind) {
        Some(Driver::Cnpg) => {
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
        // Nothing of these kinds is deleted with the Backup.
        Some(
            Driver::Job
            | Driver::Altinity
            | Driver::MariaDb
            | Driver::MongoDb
            | Driver::FoundationDb
            | Driver::Etcd,
        ) => Ok(()),
        // A kind this version does not know goes the Velero way too: the Velero keys of its
        // driver metadata decide, and without them there is nothing to do.
        Some(Driver::Velero) | None => velero_cleanup(&md, ctx).await,
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

/// Backups reconciled at once. A won leadership (or a catalog sync) queues every Backup together;
/// unbounded, each would hold its object and sealed record at the same time.
pub const CONCURRENCY: u16 = 16;

/// Retries of a Backup cleanup never wait longer than this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);
