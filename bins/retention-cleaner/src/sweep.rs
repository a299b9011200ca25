//! One sweep: every namespace's objects from the caches, `retention::decide`, then the sweep
//! performed (deletions, Events, FoundationDB stops, the CNPG ObjectStore retention).
//!
//! ```text
//!  caches (Plans, Backups, BackupJobs, RestoreJobs, FoundationDBBackups) ─► per namespace
//!    ─► retention::decide(observed, config, now)
//!    ─► Plan Events (refusal, invalid policy) ─► decisions: Delete → leftovers, then the object
//!       (UID precondition; a Backup goes through its finalizer) → Normal Event on the Plan
//!       (else the BackupJob, else the object); Keep/Defer with a floor reason → one Event
//!    ─► FoundationDB stops (merge patch + Event) ─► CNPG ObjectStore floor (merge patch)
//!  next pass: the earliest coming expiry (failed TTL, maxAge), or soon while deferrals remain
//! ```
//!
//! Invariants: nothing is remembered between sweeps except which Keep Events were already
//! recorded (so they are not repeated every sweep); a failed write is counted, the others still
//! run, and the pass then fails so the loop retries it with backoff; every write happens only
//! while this replica leads, and each deletion carries the UID it was decided on, so an object
//! re-created under the same name is never deleted by a stale decision.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use api::backups::{Backup, BackupJob, Plan, RestoreJob};
use api::contract::{annotations, event_reasons as reasons, labels, names};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::events::{Event, EventType};
use kube::{Resource, ResourceExt};
use retention::{Decision, ObjectKind, Sweep, Verdict};
use runtime::events::Recorder;
use runtime::{Cache, Evaluate, Pass, WorkError, work::api_err};
use serde_json::{Value as Json, json};

use crate::metrics::{self as m, Totals};

/// The cached inputs of a sweep.
#[derive(Clone)]
pub struct Caches {
    /// Plans.
    pub plans: Cache<Plan>,
    /// Catalog Backups.
    pub backups: Cache<Backup>,
    /// BackupJobs.
    pub jobs: Cache<BackupJob>,
    /// RestoreJobs.
    pub restores: Cache<RestoreJob>,
    /// FoundationDBBackups (absent when the CRD is not installed).
    pub foundationdb: Cache<DynamicObject>,
    /// CNPG ObjectStores, only their name, annotations and `spec.retentionPolicy` (absent when
    /// the CRD is not installed): a sweep reads the floor it would write from here and only goes
    /// to the API server when it differs. Changes to them do not start a sweep.
    pub object_stores: Cache<DynamicObject>,
}

impl Caches {
    /// Whether every cache listed once.
    pub fn synced(&self) -> bool {
        self.plans.is_synced()
            && self.backups.is_synced()
            && self.jobs.is_synced()
            && self.restores.is_synced()
            && self.foundationdb.is_synced()
            && self.object_stores.is_synced()
    }

    /// Everything cached, grouped by namespace (shared: nothing is copied yet).
    fn by_namespace(&self) -> BTreeMap<String, Shared> {
        let mut out: BTreeMap<String, Shared> = BTreeMap::new();
        fn group<K: ResourceExt>(
            out: &mut BTreeMap<String, Shared>,
            items: Vec<Arc<K>>,
            field: impl Fn(&mut Shared) -> &mut Vec<Arc<K>>,
        ) {
            for item in items {
                field(out.entry(item.namespace().unwrap_or_default()).or_default()).push(item);
            }
        }
        group(&mut out, self.plans.list(), |n| &mut n.plans);
        group(&mut out, self.backups.list(), |n| &mut n.backups);
        group(&mut out, self.jobs.list(), |n| &mut n.jobs);
        group(&mut out, self.restores.list(), |n| &mut n.restores);
        group(&mut out, self.foundationdb.list(), |n| &mut n.foundationdb);
        out
    }
}

/// One namespace's cached objects, shared with the caches.
#[derive(Default)]
struct Shared {
    plans: Vec<Arc<Plan>>,
    backups: Vec<Arc<Backup>>,
    jobs: Vec<Arc<BackupJob>>,
    restores: Vec<Arc<RestoreJob>>,
    foundationdb: Vec<Arc<DynamicObject>>,
}

impl Shared {
    /// The namespace's own copy for one sweep (the decisions take owned slices); only one
    /// namespace is copied at a time, which bounds the memory a sweep adds to the caches.
    fn materialize(&self) -> Namespace {
        fn own<K: Clone>(items: &[Arc<K>]) -> Vec<K> {
            items.iter().map(|i| K::clone(i)).collect()
        }
        Namespace {
            plans: own(&self.plans),
            backups: own(&self.backups),
            jobs: own(&self.jobs),
            restores: own(&self.restores),
            foundationdb: self
                .foundationdb
                .iter()
                .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
                .collect(),
        }
    }

    fn has(&self, kind: &str, name: &str) -> bool {
        fn named<K: ResourceExt>(items: &[Arc<K>], name: &str) -> bool {
            items.iter().any(|i| i.meta().name.as_deref() == Some(name))
        }
        match kind {
            "Plan" => named(&self.plans, name),
            "BackupJob" => named(&self.jobs, name),
            _ => named(&self.backups, name),
        }
    }
}

/// One namespace's objects.
#[derive(Default)]
struct Namespace {
    plans: Vec<Plan>,
    backups: Vec<Backup>,
    jobs: Vec<BackupJob>,
    restores: Vec<RestoreJob>,
    foundationdb: Vec<Json>,
}

impl Namespace {
    fn plan(&self, name: &str) -> Option<&Plan> {
        self.plans
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
    }
    fn job(&self, name: &str) -> Option<&BackupJob> {
        self.jobs
            .iter()
            .find(|j| j.metadata.name.as_deref() == Some(name))
    }
    fn backup(&self, name: &str) -> Option<&Backup> {
        self.backups
            .iter()
            .find(|b| b.metadata.name.as_deref() == Some(name))
    }
}

/// The API resources the cleaner writes beyond its own kinds.
#[derive(Clone)]
pub struct Resources {
    /// `apps.foundationdb.org` FoundationDBBackup.
    pub foundationdb_backups: ApiResource,
    /// `barmancloud.cnpg.io` ObjectStore.
    pub object_stores: ApiResource,
    /// Velero DeleteBackupRequest.
    pub delete_requests: ApiResource,
    /// Velero Backup.
    pub velero_backups: ApiResource,
    /// Operator objects a failed BackupJob may leave in its namespace (owned-by labels).
    pub leftovers: Vec<(&'static str, ApiResource)>,
}

impl Default for Resources {
    fn default() -> Self {
        use api::thirdparty as t;
        fn erase<K: Resource<DynamicType = ()>>() -> ApiResource {
            ApiResource::erase::<K>(&())
        }
        Self {
            foundationdb_backups: erase::<t::fdb::FoundationDBBackup>(),
            object_stores: erase::<t::barman::ObjectStore>(),
            delete_requests: erase::<t::velero::DeleteBackupRequest>(),
            velero_backups: erase::<t::velero::Backup>(),
            leftovers: vec![
                ("cnpg Backup", erase::<t::cnpg::Backup>()),
                ("mariadb Backup", erase::<t::mariadb::Backup>()),
                ("EtcdSnapshot", erase::<t::etcd::EtcdSnapshot>()),
                (
                    "PerconaServerMongoDBBackup",
                    erase::<t::percona::PerconaServerMongoDBBackup>(),
                ),
                ("Job", erase::<k8s_openapi::api::batch::v1::Job>()),
            ],
        }
    }
}

/// What the ObjectStore cache keeps of each: name, namespace, annotations and
/// `spec.retentionPolicy` (the rest of the spec, the status and field ownership are dropped).
pub fn keep_retention_fields(store: &mut DynamicObject) {
    store.metadata.managed_fields = None;
    store.metadata.labels = None;
    let retention = store.data["spec"]["retentionPolicy"].take();
    store.data = json!({"spec": {"retentionPolicy": retention}});
}

/// The retention an ObjectStore should have under `floor`: the longer of the floor and the
/// template's value (recorded in an annotation by the runner, else the spec's own).
fn effective_retention(store: &DynamicObject, floor: &str) -> Option<String> {
    let spec = store.data["spec"]["retentionPolicy"].as_str();
    let template = store
        .annotations()
        .get(annotations::TEMPLATE_RETENTION_POLICY)
        .map(String::as_str)
        .or(spec);
    drivers::cnpg::effective_retention(template, Some(floor))
}

/// Whether `store` already records `floor` and carries the retention it implies.
fn floor_applied(store: &DynamicObject, floor: &str) -> bool {
    store
        .annotations()
        .get(annotations::RETENTION_FLOOR)
        .is_some_and(|f| f == floor)
        && store.data["spec"]["retentionPolicy"].as_str()
            == effective_retention(store, floor).as_deref()
}

/// What was already reported per object, so an unchanged Keep is not repeated every sweep.
type Reported = HashMap<(String, &'static str, String), String>;

/// The singleton loop's work.
pub struct Cleaner {
    client: kube::Client,
    caches: Caches,
    resources: Resources,
    recorder: Recorder,
    config: retention::Config,
    debounce: Duration,
    reported: Reported,
}

impl Cleaner {
    /// A cleaner over the caches.
    pub fn new(
        client: kube::Client,
        caches: Caches,
        recorder: Recorder,
        config: retention::Config,
        debounce: Duration,
    ) -> Self {
        Self {
            client,
            caches,
            resources: Resources::default(),
            recorder,
            config,
            debounce,
            reported: HashMap::new(),
        }
    }
}

/// What one pass did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Namespaces swept.
    pub namespaces: usize,
    /// Objects deleted.
    pub deleted: usize,
    /// Objects left for a later sweep (the per-sweep cap).
    pub deferred: usize,
    /// Dry-run candidates.
    pub dry_run_candidates: usize,
    /// FoundationDB backups stopped.
    pub stopped: usize,
    /// ObjectStores whose retention changed.
    pub object_stores: usize,
    /// Writes that failed (the pass is retried).
    pub failed: usize,
    /// When the next pass is due without any change.
    next: Option<Duration>,
}

impl runtime::Outcome for Outcome {
    fn noteworthy(&self) -> bool {
        self.deleted + self.stopped + self.object_stores + self.failed > 0
    }
    fn next_pass_in(&self) -> Option<Duration> {
        self.next
    }
}

impl Evaluate for Cleaner {
    type Outcome = Outcome;
    type Error = WorkError;

    async fn evaluate(&mut self, pass: &Pass) -> Result<Outcome, WorkError> {
        let now = Utc::now();
        let namespaces = self.caches.by_namespace();
        let mut out = Outcome {
            namespaces: namespaces.len(),
            ..Outcome::default()
        };
        let mut totals = Totals::default();
        let mut first_error = None;
        let mut next: Option<DateTime<Utc>> = None;
        for (ns, shared) in &namespaces {
            let objects = &shared.materialize();
            let observed = retention::Observed {
                namespace: ns,
                plans: &objects.plans,
                backups: &objects.backups,
                backup_jobs: &objects.jobs,
                restore_jobs: &objects.restores,
                foundationdb_backups: &objects.foundationdb,
            };
            let sweep = retention::decide(&observed, &self.config, now);
            account(&sweep, objects, now, &mut totals);
            out.deferred += sweep
                .decisions
                .iter()
                .filter(|d| d.verdict == Verdict::Defer)
                .count();
            out.dry_run_candidates += if sweep.dry_run {
                sweep.candidates().count()
            } else {
                0
            };
            next = earliest(next, next_expiry(objects, &self.config, now));
            if !pass.is_leading() {
                continue;
            }
            let mut run = Run {
                cleaner: self,
                pass,
                ns,
                objects,
                out: &mut out,
                error: None,
            };
            run.perform(&sweep).await;
            if let Some(e) = run.error {
                first_error.get_or_insert(e);
            }
        }
        totals.dry_run_candidates = out.dry_run_candidates as u64;
        totals.publish();
        self.forget_gone(&namespaces);
        out.next = if out.deferred > 0 && !self.config.dry_run {
            Some(self.debounce.max(Duration::from_secs(1)))
        } else {
            next.map(|at| (at - now).to_std().unwrap_or_default() + Duration::from_secs(1))
        };
        match first_error {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }
}

impl Cleaner {
    /// Drops the remembered Events of objects that no longer exist.
    fn forget_gone(&mut self, namespaces: &BTreeMap<String, Shared>) {
        self.reported
            .retain(|(ns, kind, name), _| namespaces.get(ns).is_some_and(|o| o.has(kind, name)));
    }
}

/// Adds a sweep's floors, deferrals and the oldest failure to the totals.
fn account(sweep: &Sweep, objects: &Namespace, now: DateTime<Utc>, totals: &mut Totals) {
    for d in &sweep.decisions {
        if d.verdict != Verdict::Delete && d.reason != reasons::KEPT_BY_POLICY {
            *totals.kept.entry(d.reason).or_default() += 1;
        }
    }
    let failed_jobs = objects
        .jobs
        .iter()
        .filter(|j| j.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed"))
        .map(failed_job_time);
    let failed_backups = objects
        .backups
        .iter()
        .filter(|b| retention::backup_failed(b))
        .map(|b| created(b.meta()));
    if let Some(oldest) = failed_jobs.chain(failed_backups).flatten().min() {
        let age = (now - oldest).num_milliseconds().max(0) as f64 / 1000.0;
        totals.oldest_failed_seconds = totals.oldest_failed_seconds.max(age);
    }
}

fn created(meta: &kube::api::ObjectMeta) -> Option<DateTime<Utc>> {
    meta.creation_timestamp.as_ref().map(retention::instant)
}

fn failed_job_time(job: &BackupJob) -> Option<DateTime<Utc>> {
    job.status
        .as_ref()
        .and_then(|s| s.completed_at.as_ref())
        .map(retention::instant)
        .or_else(|| created(job.meta()))
}

fn earliest(a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>) -> Option<DateTime<Utc>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The earliest moment after `now` at which a failed object outlives the TTL or a Plan's Backup
/// outlives its `maxAge`: the sweep then has something new to decide without any change.
fn next_expiry(
    objects: &Namespace,
    config: &retention::Config,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let after = |t: Option<DateTime<Utc>>, d: Duration| {
        let at = t? + chrono::Duration::from_std(d).ok()?;
        (at > now).then_some(at)
    };
    let mut next = None;
    if let Some(ttl) = config.failed_ttl {
        for job in &objects.jobs {
            if job.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed") {
                next = earliest(next, after(failed_job_time(job), ttl));
            }
        }
        for b in objects
            .backups
            .iter()
            .filter(|b| retention::backup_failed(b))
        {
            next = earliest(next, after(created(b.meta()), ttl));
        }
    }
    for plan in &objects.plans {
        let max_age = plan
            .spec
            .retention_policy
            .as_ref()
            .and_then(|raw| retention::Policy::parse(raw).ok())
            .and_then(|p| p.max_age);
        let Some(max_age) = max_age else { continue };
        for b in &objects.backups {
            if b.spec.plan_ref.as_ref().map(|r| r.name.as_str()) == Some(plan.name_any().as_str()) {
                let taken = Some(retention::instant(&b.spec.taken_at));
                next = earliest(next, after(taken, max_age));
            }
        }
    }
    next
}

/// Performing one namespace's sweep.
struct Run<'a> {
    cleaner: &'a mut Cleaner,
    pass: &'a Pass,
    ns: &'a str,
    objects: &'a Namespace,
    out: &'a mut Outcome,
    error: Option<WorkError>,
}

impl Run<'_> {
    async fn perform(&mut self, sweep: &Sweep) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn store(annotations: Json, retention: Option<&str>) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "barmancloud.cnpg.io/v1", "kind": "ObjectStore",
            "metadata": {"name": "postgres-db", "namespace": "t", "annotations": annotations,
                         "labels": {"a": "b"}, "managedFields": [{"manager": "x"}]},
            "spec": {"retentionPolicy": retention, "configuration": {"destinationPath": "s3://b/p"}},
            "status": {"serverRecoveryWindow": {}},
        }))
        .unwrap()
    }

    #[test]
    fn the_floor_is_applied_only_when_recorded_and_in_effect() {
        let floor = annotations::RETENTION_FLOOR;
        let template = annotations::TEMPLATE_RETENTION_POLICY;
        // Recorded and in effect (the floor is longer than the template's 1d).
        let done = store(json!({floor: "3d", template: "1d"}), Some("3d"));
        assert!(floor_applied(&done, "3d"));
        // A new floor, a floor not recorded, a retention someone reset: all need the write.
        assert!(!floor_applied(&done, "4d"));
        assert!(!floor_applied(
            &store(json!({template: "1d"}), Some("3d")),
            "3d"
        ));
        assert!(!floor_applied(
            &store(json!({floor: "3d", template: "1d"}), Some("1d")),
            "3d"
        ));
        // The template's longer retention wins over the floor.
        let longer = store(json!({floor: "3d", template: "30d"}), Some("30d"));
        assert!(floor_applied(&longer, "3d"));
    }

    #[test]
    fn the_cache_keeps_what_the_floor_check_reads() {
        let floor = annotations::RETENTION_FLOOR;
        for (a, r, f) in [
            (
                json!({floor: "3d", annotations::TEMPLATE_RETENTION_POLICY: "1d"}),
                Some("3d"),
                "3d",
            ),
            (json!({floor: "3d"}), Some("1d"), "3d"),
            (json!({}), None, "2d"),
        ] {
            let full = store(a, r);
            let mut kept = full.clone();
            keep_retention_fields(&mut kept);
            assert_eq!(floor_applied(&kept, f), floor_applied(&full, f));
            assert_eq!(effective_retention(&kept, f), effective_retention(&full, f));
            assert!(kept.metadata.managed_fields.is_none() && kept.metadata.labels.is_none());
            assert!(kept.data.get("status").is_none());
            assert!(kept.data["spec"].get("configuration").is_none());
        }
    }
}
