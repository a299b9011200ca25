//! What every reconcile needs: the client, the caches of everything the drivers read, the work
//! leases, the event recorder, metrics and settings; and the writes every driver makes (the job's
//! status with an optimistic-concurrency precondition, server-side applies, creates).

use std::sync::Arc;

use api::backups::{BackupClass, BackupJob, BackupJobStatus};
use api::contract::labels;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use runtime::events::Recorder;
use runtime::{Backoff, ControllerMetrics, Readiness, WorkLeaseKeeper};
use serde_json::{Value as Json, json};

use crate::args::RunnerArgs;

/// Errors of a reconcile (shared with the other work-leased controller).
pub use runtime::work::{WorkError as Error, api_err};

/// The caches the runner reads (all fed by the runtime's watches; writes go to the API).
pub struct Caches {
    /// BackupClasses.
    pub classes: Store<BackupClass>,
    /// Strategy CRs, by kind (`CNPG`, …).
    pub strategies: Vec<(&'static str, Store<DynamicObject>)>,
    /// Driver-side objects by kind label (`cnpg.Backup`, `cnpg.Cluster`, `apps.Postgres`, …).
    pub objects: Vec<(&'static str, ApiResource, Store<DynamicObject>)>,
}

impl Caches {
    /// The strategy CR `kind`/`name` as JSON, if it exists.
    pub fn strategy(&self, kind: &str, name: &str) -> Option<Json> {
        let (_, store) = self.strategies.iter().find(|(k, _)| *k == kind)?;
        let obj = store.find(|o| o.metadata.name.as_deref() == Some(name))?;
        serde_json::to_value(obj.as_ref()).ok()
    }

    /// The `spec.template` of strategy CR `kind`/`name`, if the CR exists.
    pub fn template(&self, kind: &str, name: &str) -> Option<Json> {
        self.strategy(kind, name)
            .map(|s| s["spec"]["template"].clone())
    }

    /// A driver-side object of cache `label` as JSON, if it exists.
    pub fn object(&self, label: &str, namespace: &str, name: &str) -> Option<Json> {
        let (_, resource, store) = self.objects.iter().find(|(l, _, _)| *l == label)?;
        let obj = store.get(&ObjectRef::new_with(name, resource.clone()).within(namespace))?;
        serde_json::to_value(obj.as_ref()).ok()
    }

    /// The objects of cache `label` in `namespace` whose labels include `selector`.
    pub fn labelled(&self, label: &str, namespace: &str, selector: &[(&str, &str)]) -> Vec<Json> {
        let Some((_, _, store)) = self.objects.iter().find(|(l, _, _)| *l == label) else {
            return Vec::new();
        };
        let mut out: Vec<Json> = store
            .state()
            .into_iter()
            .filter(|o| o.metadata.namespace.as_deref() == Some(namespace))
            .filter(|o| {
                let labels = o.labels();
                selector
                    .iter()
                    .all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v))
            })
            .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
            .collect();
        out.sort_by(|a, b| {
            a["metadata"]["name"]
                .as_str()
                .cmp(&b["metadata"]["name"].as_str())
        });
        out
    }

    /// The objects of cache `label` in `namespace` labelled as owned by `job` (its name and
    /// namespace), in name order.
    pub fn owned_by_job(&self, label: &str, namespace: &str, job: &BackupJob) -> Vec<Json> {
        let name = job.name_any();
        let job_namespace = job.namespace().unwrap_or_default();
        self.labelled(
            label,
            namespace,
            &[
                (labels::OWNED_BY_JOB_NAME, name.as_str()),
                (labels::OWNED_BY_JOB_NAMESPACE, job_namespace.as_str()),
            ],
        )
    }

    /// The API resource of cache `label`.
    pub fn resource(&self, label: &str) -> ApiResource {
        self.objects
            .iter()
            .find(|(l, _, _)| *l == label)
            .map(|(_, r, _)| r.clone())
            .expect("a cache the runner declared")
    }
}

/// Everything a reconcile needs.
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// What the drivers read.
    pub caches: Caches,
    /// Per-job work leases (one replica drives a job).
    pub leases: WorkLeaseKeeper,
    /// Events on BackupJobs.
    pub recorder: Recorder,
    /// Reconcile runs/failures/duration.
    pub metrics: ControllerMetrics,
    /// Per-job backoff of transient errors.
    pub backoff: Backoff<BackupJob>,
    /// Settings.
    pub args: RunnerArgs,
    /// The daemon's readiness registry (whether every watch has listed once).
    pub readiness: Readiness,
    /// The system bucket (the storage breaker probes it; the catalog mirror shares it).
    pub mirror: std::sync::Arc<crate::records::Mirror>,
    /// The BackupJobs as the controller's watch sees them (the breaker forgets jobs gone from it).
    pub jobs: kube::runtime::reflector::Store<api::backups::BackupJob>,
    /// The storage breakers, one per object-store endpoint.
    pub breakers: std::sync::Arc<crate::breaker::Breakers>,
}

impl Context {
    /// A dynamic API for `resource` in `namespace`.
    pub fn api(&self, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        }
    }

    /// Writes the job's whole status with the job's `resourceVersion` as a precondition: a write
    /// based on a stale read (another replica, the projector, a user changed the job since) fails
    /// with [`Error::Conflict`] instead of overwriting. Fields set to `None` are removed.
    pub async fn write_status(
        &self,
        job: &BackupJob,
        status: &BackupJobStatus,
    ) -> Result<BackupJob, Error> {
        let ns = job.namespace().unwrap_or_default();
        let name = job.name_any();
        let mut body = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
        for key in ["phase", "backupRef", "startedAt", "completedAt", "message"] {
            if body.get(key).is_none() {
                body[key] = Json::Null;
            }
        }
        let patch = json!({
            "metadata": {"resourceVersion": job.resource_version()},
            "status": body,
        });
        let api: Api<BackupJob> = Api::namespaced(self.client.clone(), &ns);
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(updated) => {
                self.leases.wrote(job, &updated);
                Ok(updated)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                Err(Error::Conflict(format!("BackupJob {ns}/{name}")))
            }
            Err(source) => Err(Error::Api {
                action: "write status of",
                object: format!("BackupJob {ns}/{name}"),
                source,
            }),
        }
    }

    /// Server-side applies `body` as `field_manager` (forcing ownership of the applied fields).
    pub async fn apply(
        &self,
        resource: &ApiResource,
        body: &Json,
        field_manager: &str,
    ) -> Result<DynamicObject, Error> {
        let ns = body["metadata"]["namespace"].as_str();
        let name = body["metadata"]["name"].as_str().unwrap_or_default();
        self.api(resource, ns)
            .patch(
                name,
                &PatchParams::apply(field_manager).force(),
                &Patch::Apply(body),
            )
            .await
            .map_err(api_err(
                "apply",
                format!("{} {}/{name}", resource.kind, ns.unwrap_or("")),
            ))
    }

    /// Creates `body` (its `generateName` or `name`).
    pub async fn create(
        &self,
        resource: &ApiResource,
        body: &Json,
    ) -> Result<DynamicObject, kube::Error> {
        let ns = body["metadata"]["namespace"].as_str();
        let obj: DynamicObject =
            serde_json::from_value(body.clone()).map_err(kube::Error::SerdeError)?;
        self.api(resource, ns)
            .create(&PostParams::default(), &obj)
            .await
    }

    /// Lists `resource` in `namespace` by labels, fresh from the API (not the cache): the check
    /// before a create must see our own earlier create even when its watch event has not arrived.
    pub async fn list_fresh(
        &self,
        resource: &ApiResource,
        namespace: &str,
        selector: &[(&str, &str)],
    ) -> Result<Vec<Json>, Error> {
        let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let list = self
            .api(resource, Some(namespace))
            .list(&kube::api::ListParams::default().labels(&labels.join(",")))
            .await
            .map_err(api_err("list", format!("{} in {namespace}", resource.kind)))?;
        let mut items: Vec<Json> = list
            .items
            .into_iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .collect();
        items.sort_by(|a, b| {
            a["metadata"]["name"]
                .as_str()
                .cmp(&b["metadata"]["name"].as_str())
        });
        Ok(items)
    }

    /// Publishes an Event on the job (best effort: a failure is logged, never fatal).
    pub async fn event(&self, job: &BackupJob, type_: EventType, reason: &str, note: &str) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(runtime::events::note(note)),
            action: "Backup".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &job.object_ref(&())).await {
            tracing::debug!(error = %e, "could not publish an Event");
        }
    }
}

/// A shared context.
pub type Ctx = Arc<Context>;
