//! Performing one namespace's sweep: Plan Events, deletions (leftovers first, with the UID the
//! decision was made on), Keep/Defer Events once, FoundationDB stops and the CNPG ObjectStore
//! floor. A failed write is counted and the rest still runs; the pass then fails and is retried.

use api::backups::{Backup, BackupJob};
use api::contract::{annotations, event_reasons as reasons, labels, names};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use retention::{Decision, ObjectKind, Sweep, Verdict};
use runtime::{Pass, WorkError, work::api_err};
use serde_json::json;

use super::{Cleaner, Namespace, Outcome, effective_retention, floor_applied};
use crate::metrics::{self as m};

/// Performing one namespace's sweep.
pub(super) struct Run<'a> {
    pub(super) cleaner: &'a mut Cleaner,
    pub(super) pass: &'a Pass,
    pub(super) ns: &'a str,
    pub(super) objects: &'a Namespace,
    pub(super) out: &'a mut Outcome,
    pub(super) error: Option<WorkError>,
}

impl Run<'_> {
    pub(super) async fn perform(&mut self, sweep: &Sweep) {
        for plan in &sweep.plans {
            for event in &plan.events {
                let key = (self.ns.to_owned(), "Plan", plan.plan.clone());
                let said = format!("{}: {}", event.reason, event.note);
                if self.cleaner.reported.get(&key) == Some(&said) {
                    continue;
                }
                let Some(p) = self.objects.plan(&plan.plan) else {
                    continue;
                };
                if event.reason == reasons::RETENTION_REFUSED {
                    m::refused(self.ns);
                }
                let type_ = match event.type_ {
                    retention::EventType::Warning => EventType::Warning,
                    retention::EventType::Normal => EventType::Normal,
                };
                self.publish(p.object_ref(&()), None, type_, event.reason, &event.note)
                    .await;
                self.cleaner.reported.insert(key, said);
            }
        }
        for d in &sweep.decisions {
            if !self.pass.is_leading() {
                return;
            }
            match d.verdict {
                Verdict::Delete if !sweep.dry_run => self.delete(d).await,
                Verdict::Delete => {
                    self.report_once(d, EventType::Normal).await;
                }
                // A refusal is told once, on the Plan (above), not once per Backup.
                Verdict::Keep | Verdict::Defer
                    if d.reason != reasons::KEPT_BY_POLICY
                        && d.reason != reasons::RETENTION_REFUSED =>
                {
                    self.report_once(d, EventType::Normal).await;
                }
                Verdict::Keep | Verdict::Defer => {}
            }
        }
        for stop in sweep.to_stop() {
            if !self.pass.is_leading() {
                return;
            }
            self.stop_foundationdb(stop).await;
        }
        if !sweep.dry_run {
            for plan in &sweep.plans {
                if let Some(r) = &plan.object_store_retention {
                    if !self.pass.is_leading() {
                        return;
                    }
                    self.object_store_floor(r).await;
                }
            }
        }
    }

    fn failed(&mut self, e: WorkError) {
        tracing::warn!(namespace = self.ns, error = %e, "retention write failed; retried with backoff");
        self.out.failed += 1;
        self.error.get_or_insert(e);
    }

    /// The object an Event about decision `d` is recorded on: its Plan, else its BackupJob, else
    /// the object itself.
    fn regarding(
        &self,
        kind: ObjectKind,
        name: &str,
        plan: Option<&str>,
    ) -> Option<ObjectReference> {
        if let Some(p) = plan.and_then(|p| self.objects.plan(p)) {
            return Some(p.object_ref(&()));
        }
        if let Some(j) = self.objects.job(name) {
            return Some(j.object_ref(&()));
        }
        match kind {
            ObjectKind::Backup => self.objects.backup(name).map(|b| b.object_ref(&())),
            ObjectKind::BackupJob => None,
        }
    }

    fn reference(&self, kind: ObjectKind, name: &str) -> ObjectReference {
        let uid = match kind {
            ObjectKind::Backup => self.objects.backup(name).and_then(|b| b.uid()),
            ObjectKind::BackupJob => self.objects.job(name).and_then(|j| j.uid()),
        };
        ObjectReference {
            api_version: Some(Backup::api_version(&()).into_owned()),
            kind: Some(kind.as_str().to_owned()),
            name: Some(name.to_owned()),
            namespace: Some(self.ns.to_owned()),
            uid,
            ..ObjectReference::default()
        }
    }

    async fn report_once(&mut self, d: &Decision, type_: EventType) {
        let key = (self.ns.to_owned(), d.kind.as_str(), d.name.clone());
        if self.cleaner.reported.get(&key).map(String::as_str) == Some(d.reason) {
            return;
        }
        if let Some(regarding) = self.regarding(d.kind, &d.name, d.plan.as_deref()) {
            let related = self.reference(d.kind, &d.name);
            self.publish(regarding, Some(related), type_, d.reason, &d.message)
                .await;
        }
        self.cleaner.reported.insert(key, d.reason.to_owned());
    }

    async fn delete(&mut self, d: &Decision) {
        // Resolve where the Event goes before the object is gone.
        let regarding = self.regarding(d.kind, &d.name, d.plan.as_deref());
        let related = self.reference(d.kind, &d.name);
        let result = match d.kind {
            ObjectKind::Backup => match self.objects.backup(&d.name) {
                Some(b) => self.delete_object::<Backup>(&d.name, b.uid()).await,
                None => Ok(false),
            },
            ObjectKind::BackupJob => match self.objects.job(&d.name) {
                Some(j) => match self.leftovers(j).await {
                    Ok(()) => self.delete_object::<BackupJob>(&d.name, j.uid()).await,
                    Err(e) => Err(e),
                },
                None => Ok(false),
            },
        };
        match result {
            Ok(true) => {
                tracing::info!(namespace = self.ns, kind = d.kind.as_str(), name = %d.name, reason = d.reason, "deleted");
                m::deleted(self.ns, d.kind.as_str(), d.reason);
                self.out.deleted += 1;
                if let Some(regarding) = regarding {
                    self.publish(
                        regarding,
                        Some(related),
                        EventType::Normal,
                        d.reason,
                        &d.message,
                    )
                    .await;
                }
            }
            Ok(false) => {}
            Err(e) => {
                m::deletion_failed(self.ns);
                self.failed(e);
            }
        }
    }

    /// Deletes one object with a precondition on the UID it was decided on. `Ok(false)` when it
    /// was already gone or replaced by another object of the same name.
    async fn delete_object<K>(&self, name: &str, uid: Option<String>) -> Result<bool, WorkError>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::namespaced(self.cleaner.client.clone(), self.ns);
        let params = DeleteParams {
            preconditions: Some(kube::api::Preconditions {
                uid,
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
            Err(e) => Err(api_err(
                "delete",
                format!("{} {}/{name}", K::kind(&()), self.ns),
            )(e)),
        }
    }

    /// Removes what a failed BackupJob left with the operators (objects labelled as owned by it)
    /// before the job itself goes, so that a crash in between leaves the job to retry from.
    async fn leftovers(&self, job: &BackupJob) -> Result<(), WorkError> {
        let selector = format!(
            "{}={},{}={}",
            labels::OWNED_BY_JOB_NAME,
            job.name_any(),
            labels::OWNED_BY_JOB_NAMESPACE,
            self.ns
        );
        let client = &self.cleaner.client;
        let resources = &self.cleaner.resources;
        for (what, resource) in &resources.leftovers {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), self.ns, resource);
            for o in list_installed(&api, &selector, what, self.ns).await? {
                let name = o.name_any();
                match api.delete(&name, &DeleteParams::background()).await {
                    Ok(_) => {
                        tracing::info!(namespace = self.ns, kind = what, %name, job = %job.name_any(), "deleted a failed job's leftover")
                    }
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => {
                        return Err(api_err("delete", format!("{what} {}/{name}", self.ns))(e));
                    }
                }
            }
        }
        // Velero backups live in Velero's namespace and go through a DeleteBackupRequest (a
        // plain delete would come back with the storage location's next sync).
        let velero_ns = names::VELERO_NAMESPACE;
        let backups: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), velero_ns, &resources.velero_backups);
        let requests: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), velero_ns, &resources.delete_requests);
        for b in list_installed(&backups, &selector, "Velero Backup", velero_ns).await? {
            if b.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let name = b.name_any();
            let request: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "velero.io/v1", "kind": "DeleteBackupRequest",
                "metadata": {"name": format!("{name}-cleanup"), "namespace": velero_ns},
                "spec": {"backupName": name},
            }))
            .map_err(|e| api_err("build", "DeleteBackupRequest")(kube::Error::SerdeError(e)))?;
            match requests.create(&PostParams::default(), &request).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => {
                    return Err(api_err(
                        "create",
                        format!("DeleteBackupRequest for {velero_ns}/{name}"),
                    )(e));
                }
            }
        }
        Ok(())
    }

    async fn stop_foundationdb(&mut self, stop: &retention::foundationdb::Stop) {
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.cleaner.client.clone(),
            self.ns,
            &self.cleaner.resources.foundationdb_backups,
        );
        match api
            .patch(
                &stop.name,
                &PatchParams::default(),
                &Patch::Merge(&stop.patch),
            )
            .await
        {
            Ok(o) => {
                tracing::info!(namespace = self.ns, foundationdb_backup = %stop.name, cluster = %stop.cluster, "stopped a FoundationDB backup whose cluster keeps no Backup");
                m::stopped(self.ns);
                self.out.stopped += 1;
                let stopped = ObjectReference {
                    api_version: Some(
                        self.cleaner
                            .resources
                            .foundationdb_backups
                            .api_version
                            .clone(),
                    ),
                    kind: Some("FoundationDBBackup".into()),
                    name: Some(stop.name.clone()),
                    namespace: Some(self.ns.to_owned()),
                    uid: o.uid(),
                    ..ObjectReference::default()
                };
                // On the BackupJob that made it, else a Plan of the cluster, else itself.
                let owner = o.labels().get(labels::OWNED_BY_JOB_NAME).cloned();
                let regarding = owner
                    .and_then(|j| self.objects.job(&j).map(|j| j.object_ref(&())))
                    .or_else(|| self.plan_of_cluster(&stop.cluster));
                let (regarding, related) = match regarding {
                    Some(r) => (r, Some(stopped)),
                    None => (stopped, None),
                };
                self.publish(
                    regarding,
                    related,
                    EventType::Normal,
                    stop.reason,
                    &stop.message,
                )
                .await;
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => self.failed(api_err(
                "stop",
                format!("FoundationDBBackup {}/{}", self.ns, stop.name),
            )(e)),
        }
    }

    /// A Plan of the FoundationDB application behind `cluster`, for the stop Event.
    fn plan_of_cluster(&self, cluster: &str) -> Option<ObjectReference> {
        self.objects
            .plans
            .iter()
            .find(|p| {
                p.spec.application_ref.kind == drivers::foundationdb::APP_KIND
                    && drivers::foundationdb::cluster_name(&p.spec.application_ref.name) == cluster
            })
            .map(|p| p.object_ref(&()))
    }

    /// Keeps barman's retention on a CNPG Plan's ObjectStore at least as long as the catalog's
    /// oldest kept Backup needs: records the floor and applies the longer of it and the template's
    /// value (the backup-runner renders the same merge on its next apply).
    async fn object_store_floor(&mut self, r: &retention::cnpg::ObjectStoreRetention) {
        let floor = r.policy();
        // The cache says whether there is anything to do; with a thousand Postgres Plans a sweep
        // would otherwise read a thousand ObjectStores. A cached copy that looks done but is
        // stale is corrected by the sweep after the watch delivers the change.
        match self
            .cleaner
            .caches
            .object_stores
            .get(Some(self.ns), &r.object_store)
        {
            None => return,
            Some(cached) if floor_applied(&cached, &floor) => return,
            Some(_) => {}
        }
        let api: Api<DynamicObject> = Api::namespaced_with(
            self.cleaner.client.clone(),
            self.ns,
            &self.cleaner.resources.object_stores,
        );
        let live = match api.get_opt(&r.object_store).await {
            Ok(Some(o)) => o,
            // No ObjectStore yet (the runner creates it with the first backup) or no CRD.
            Ok(None) => return,
            Err(kube::Error::Api(e)) if e.code == 404 => return,
            Err(e) => {
                return self.failed(api_err(
                    "get",
                    format!("ObjectStore {}/{}", self.ns, r.object_store),
                )(e));
            }
        };
        if floor_applied(&live, &floor) {
            return;
        }
        let effective = effective_retention(&live, &floor);
        let patch = json!({
            "metadata": {"annotations": {annotations::RETENTION_FLOOR: floor}},
            "spec": {"retentionPolicy": effective},
        });
        match api
            .patch(
                &r.object_store,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => {
                tracing::info!(namespace = self.ns, object_store = %r.object_store, oldest_kept = %r.oldest_kept, retention = ?effective, "barman retention follows the catalog");
                m::object_store_updated(self.ns);
                self.out.object_stores += 1;
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => self.failed(api_err(
                "patch",
                format!("ObjectStore {}/{}", self.ns, r.object_store),
            )(e)),
        }
    }

    async fn publish(
        &self,
        regarding: ObjectReference,
        related: Option<ObjectReference>,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(runtime::events::note(note)),
            action: "Retention".into(),
            secondary: related,
        };
        if let Err(e) = self.cleaner.recorder.publish(&event, &regarding).await {
            tracing::debug!(error = %e, "could not publish an Event");
        }
    }
}

/// Lists `api` by `selector`; a kind that is not installed lists as empty.
async fn list_installed(
    api: &Api<DynamicObject>,
    selector: &str,
    what: &str,
    ns: &str,
) -> Result<Vec<DynamicObject>, WorkError> {
    match api.list(&ListParams::default().labels(selector)).await {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Vec::new()),
        Err(e) => Err(api_err("list", format!("{what}s in {ns}"))(e)),
    }
}
