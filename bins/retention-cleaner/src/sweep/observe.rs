//! What a sweep reads: the caches of the cleaner's kinds, grouped per namespace, and one
//! namespace's owned copy at a time for the decisions.

use std::collections::BTreeMap;
use std::sync::Arc;

use api::backups::{Backup, BackupJob, Plan, RestoreJob};
use kube::ResourceExt;
use kube::api::DynamicObject;
use runtime::Cache;
use serde_json::Value as Json;

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
    pub(super) fn by_namespace(&self) -> BTreeMap<String, Shared> {
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
pub(super) struct Shared {
    pub(super) plans: Vec<Arc<Plan>>,
    pub(super) backups: Vec<Arc<Backup>>,
    pub(super) jobs: Vec<Arc<BackupJob>>,
    pub(super) restores: Vec<Arc<RestoreJob>>,
    pub(super) foundationdb: Vec<Arc<DynamicObject>>,
}

impl Shared {
    /// The namespace's own copy for one sweep (the decisions take owned slices); only one
    /// namespace is copied at a time, which bounds the memory a sweep adds to the caches.
    pub(super) fn materialize(&self) -> Namespace {
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

    pub(super) fn has(&self, kind: &str, name: &str) -> bool {
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
pub(super) struct Namespace {
    pub(super) plans: Vec<Plan>,
    pub(super) backups: Vec<Backup>,
    pub(super) jobs: Vec<BackupJob>,
    pub(super) restores: Vec<RestoreJob>,
    pub(super) foundationdb: Vec<Json>,
}

impl Namespace {
    pub(super) fn plan(&self, name: &str) -> Option<&Plan> {
        self.plans
            .iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
    }
    pub(super) fn job(&self, name: &str) -> Option<&BackupJob> {
        self.jobs
            .iter()
            .find(|j| j.metadata.name.as_deref() == Some(name))
    }
    pub(super) fn backup(&self, name: &str) -> Option<&Backup> {
        self.backups
            .iter()
            .find(|b| b.metadata.name.as_deref() == Some(name))
    }
}
