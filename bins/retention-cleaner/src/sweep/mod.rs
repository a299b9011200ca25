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
//! Files: `observe.rs` (the caches, per namespace), this file (the sweep's decision, totals and
//! next pass), `act.rs` (performing one namespace's sweep).
//!
//! Invariants: nothing is remembered between sweeps except which Keep Events were already
//! recorded (so they are not repeated every sweep); a failed write is counted, the others still
//! run, and the pass then fails so the loop retries it with backoff; every write happens only
//! while this replica leads, and each deletion carries the UID it was decided on, so an object
//! re-created under the same name is never deleted by a stale decision.

mod act;
mod observe;

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use api::backups::BackupJob;
use api::contract::{annotations, event_reasons as reasons};
use chrono::{DateTime, Utc};
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::{Resource, ResourceExt};
use retention::{Sweep, Verdict};
use runtime::events::Recorder;
use runtime::{Evaluate, Pass, WorkError};
use serde_json::json;

use crate::metrics::Totals;
use act::Run;
pub use observe::Caches;
use observe::{Namespace, Shared};

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
        .map(retention::backup_failed_since);
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
            next = earliest(next, after(retention::backup_failed_since(b), ttl));
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value as Json;

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
