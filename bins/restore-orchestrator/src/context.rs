//! What every reconcile needs: the client, the RestoreJob cache, the work leases, the event
//! recorder, metrics and settings; the fresh reads the decisions are made on; and the writes
//! (the job's status under a resourceVersion precondition, Events).
//!
//! The decisions read the cluster fresh from the API, not from watch caches: a restore deletes
//! objects and creates others found again by label, and a lagging cache would show a deleted
//! Cluster as still there (a second delete) or miss our own create (a second create). The watches
//! only wake the right RestoreJobs; a restore makes a few dozen reads per step, which is nothing
//! next to the minutes a recovery takes.

use std::sync::Arc;

use api::backups::{RestoreJob, RestoreJobStatus};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use runtime::events::Recorder;
use runtime::{Backoff, ControllerMetrics, Readiness, WorkLeaseKeeper};
use serde_json::{Value as Json, json};

use crate::args::OrchestratorArgs;

/// Errors of a reconcile that are retried (shared with the other work-leased controller).
/// Refusals of a restore's own actions are not errors: they fail the job with an explained status.
pub use runtime::work::{WorkError as Error, api_err};

/// Whether the API server refused a request for good (a 4xx other than a conflict or a rate
/// limit): the restore fails with the refusal instead of retrying it forever.
pub fn is_refusal(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 409 && s.code != 429)
}

/// The API resource of `apiVersion`/`kind` (plural by the Kubernetes convention, which every kind
/// a restore touches follows).
pub fn resource(api_version: &str, kind: &str) -> ApiResource {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind))
}

/// The strategy kinds and their API resources (cluster-scoped).
pub fn strategy_resource(kind: &str) -> Option<ApiResource> {
    use api::strategy as s;
    let erase = |r: ApiResource| Some(r);
    match kind {
        "Job" => erase(ApiResource::erase::<s::Job>(&())),
        "Velero" => erase(ApiResource::erase::<s::Velero>(&())),
        "CNPG" => erase(ApiResource::erase::<s::CNPG>(&())),
        "Altinity" => erase(ApiResource::erase::<s::Altinity>(&())),
        "MariaDB" => erase(ApiResource::erase::<s::MariaDB>(&())),
        "MongoDB" => erase(ApiResource::erase::<s::MongoDB>(&())),
        "FoundationDB" => erase(ApiResource::erase::<s::FoundationDB>(&())),
        "Etcd" => erase(ApiResource::erase::<s::Etcd>(&())),
        _ => None,
    }
}

/// Everything a reconcile needs.
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// The RestoreJobs (routing of the other watches' events).
    pub jobs: Store<RestoreJob>,
    /// Per-job work leases (one replica drives a job).
    pub leases: WorkLeaseKeeper,
    /// Events on RestoreJobs.
    pub recorder: Recorder,
    /// Reconcile runs/failures/duration.
    pub metrics: ControllerMetrics,
    /// Per-job backoff of transient errors.
    pub backoff: Backoff<RestoreJob>,
    /// Settings.
    pub args: OrchestratorArgs,
    /// The daemon's readiness registry (whether every watch has listed once).
    pub readiness: Readiness,
    /// The system bucket and the storage breakers.
    pub storage: crate::storage::Storage,
}

/// A shared context.
pub type Ctx = Arc<Context>;

impl Context {
    /// A dynamic API for `resource` in `namespace` (cluster-wide when `None`).
    pub fn api(&self, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, resource),
            None => Api::all_with(self.client.clone(), resource),
        }
    }

    /// Reads one object fresh; `None` when it does not exist or its kind is not served.
    pub async fn get(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Json>, Error> {
        if name.is_empty() {
            return Ok(None);
        }
        match self.api(resource, namespace).get(name).await {
            Ok(o) => Ok(serde_json::to_value(o).ok()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(source) => Err(Error::Api {
                action: "get",
                object: format!("{} {}/{name}", resource.kind, namespace.unwrap_or("")),
                source,
            }),
        }
    }

    /// Lists the objects of `resource` in `namespace` carrying every label of `selector`, fresh,
    /// in name order; empty when the kind is not served.
    pub async fn list(
        &self,
        resource: &ApiResource,
        namespace: &str,
        selector: &[(String, String)],
    ) -> Result<Vec<Json>, Error> {
        let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let params = ListParams::default().labels(&labels.join(","));
        let items = match self.api(resource, Some(namespace)).list(&params).await {
            Ok(list) => list.items,
            Err(kube::Error::Api(s)) if s.code == 404 => Vec::new(),
            Err(source) => {
                return Err(Error::Api {
                    action: "list",
                    object: format!("{} in {namespace}", resource.kind),
                    source,
                });
            }
        };
        let mut out: Vec<Json> = items
            .into_iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .collect();
        out.sort_by(|a, b| {
            a["metadata"]["name"]
                .as_str()
                .cmp(&b["metadata"]["name"].as_str())
        });
        Ok(out)
    }

    /// The strategy CR `kind`/`name`, fresh; `None` when it (or its kind) does not exist.
    pub async fn strategy(&self, kind: &str, name: &str) -> Result<Option<Json>, Error> {
        match strategy_resource(kind) {
            Some(r) => self.get(&r, None, name).await,
            None => Ok(None),
        }
    }

    /// Reads the RestoreJob fresh (`None`: it is gone).
    pub async fn read_job(&self, namespace: &str, name: &str) -> Result<Option<RestoreJob>, Error> {
        Api::<RestoreJob>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .map_err(api_err("get", format!("RestoreJob {namespace}/{name}")))
    }

    /// Writes the job's whole status with the job's `resourceVersion` as a precondition: a write
    /// based on a stale read fails with [`Error::Conflict`] instead of overwriting. Fields set to
    /// `None` are removed.
    pub async fn write_status(
        &self,
        job: &RestoreJob,
        status: &RestoreJobStatus,
    ) -> Result<RestoreJob, Error> {
        let mut body = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
        for key in ["phase", "startedAt", "completedAt", "message"] {
            if body.get(key).is_none() {
                body[key] = Json::Null;
            }
        }
        self.patch_job(job, json!({"status": body}), true, "write status of")
            .await
    }

    /// Merge-patches the job (its status subresource when `status`) under its resourceVersion.
    pub async fn patch_job(
        &self,
        job: &RestoreJob,
        mut patch: Json,
        status: bool,
        action: &'static str,
    ) -> Result<RestoreJob, Error> {
        let ns = job.namespace().unwrap_or_default();
        let name = job.name_any();
        patch["metadata"]["resourceVersion"] = json!(job.resource_version());
        let api: Api<RestoreJob> = Api::namespaced(self.client.clone(), &ns);
        let params = PatchParams::default();
        let result = if status {
            api.patch_status(&name, &params, &Patch::Merge(&patch))
                .await
        } else {
            api.patch(&name, &params, &Patch::Merge(&patch)).await
        };
        match result {
            Ok(updated) => Ok(updated),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                Err(Error::Conflict(format!("RestoreJob {ns}/{name}")))
            }
            Err(source) => Err(Error::Api {
                action,
                object: format!("RestoreJob {ns}/{name}"),
                source,
            }),
        }
    }

    /// Creates `body` (named by its metadata).
    pub async fn create(&self, body: &Json) -> Result<(), kube::Error> {
        let resource = resource(
            body["apiVersion"].as_str().unwrap_or_default(),
            body["kind"].as_str().unwrap_or_default(),
        );
        let ns = body["metadata"]["namespace"].as_str();
        let obj: DynamicObject =
            serde_json::from_value(body.clone()).map_err(kube::Error::SerdeError)?;
        self.api(&resource, ns)
            .create(&PostParams::default(), &obj)
            .await
            .map(|_| ())
    }

    /// Publishes an Event on the job (best effort: a failure is logged, never fatal).
    pub async fn event(&self, job: &RestoreJob, type_: EventType, reason: &str, note: &str) {
        self.event_about(job, type_, reason, note, None).await;
    }

    /// Publishes an Event on the job about the object `related` (its `related` field). The
    /// recorder folds Events with the same type, reason and related object into one series (a
    /// later note only raises the count), so the Events of different objects (the HelmRelease,
    /// each PVC, the Cluster) name them to stay apart.
    pub async fn event_about(
        &self,
        job: &RestoreJob,
        type_: EventType,
        reason: &str,
        note: &str,
        related: Option<k8s_openapi::api::core::v1::ObjectReference>,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(runtime::events::note(note)),
            action: "Restore".into(),
            secondary: related,
        };
        if let Err(e) = self.recorder.publish(&event, &job.object_ref(&())).await {
            tracing::debug!(error = %e, "could not publish an Event");
        }
    }
}
