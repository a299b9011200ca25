//! Per-object work leases: exactly one replica drives a given object at a time.
//!
//! ```text
//!  reconcile(obj) ─► WorkLeaseKeeper::hold(obj) ─┬─ Held { token }  drive it; record the token on
//!                                                │                  the object (fencing)
//!                                                └─ None            another replica drives it: requeue
//!  obj terminal or deleted ─► release(obj)       (the lease is given back at once)
//!  another replica releases / its lease expires ─► freed::<K>() yields obj ─► reconcile at once
//! ```
//!
//! A lease is kept between reconciles of the same object (re-acquiring for every pass would let
//! replicas take turns on one job), renewed in the background by the lease client, and dropped
//! when lost: the next `hold` then tries to acquire it again. A replica that was refused a lease
//! learns the moment it is freed (the lease server pushes releases and expiries), so a standby
//! takes an object over at once after the holder shut down, without polling. Lease names are
//! `<component>/<Kind>/<namespace>/<name>`. In single-replica mode every lease is granted with
//! token 0.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use lease::{Freed, LeaseError, WorkLease, WorkLeases};
use tokio::sync::watch;

/// What this replica holds on one object.
#[derive(Debug, Clone)]
pub struct Held {
    name: String,
    token: u64,
    lost: watch::Receiver<bool>,
}

impl Held {
    /// The lease name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token: record it on the object so a stale holder's writes fail.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// True once this replica must stop acting on the object.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow()
    }
}

/// The errors of a reconcile that drives an object under a work lease (the backup-runner's
/// BackupJobs, the restore-orchestrator's RestoreJobs). All are transient. Messages never carry
/// credential values.
#[derive(Debug, thiserror::Error)]
pub enum WorkError {
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
    /// Someone else wrote the object between our read and our write (another replica after a
    /// lease change, another daemon, a user): re-read and decide again (at once). The text names
    /// the object (`BackupJob ns/name`).
    #[error("{0} changed since it was read")]
    Conflict(String),
    /// The lease service did not answer.
    #[error("work lease: {0}")]
    Lease(#[from] LeaseError),
}

impl crate::ReconcileError for WorkError {
    fn kind(&self) -> &'static str {
        match self {
            WorkError::Api { .. } => "api",
            WorkError::Conflict(_) => "conflict",
            WorkError::Lease(_) => "lease",
        }
    }
    fn class(&self) -> crate::ErrorClass {
        crate::ErrorClass::Transient
    }
    fn retry_delay(&self) -> Option<std::time::Duration> {
        matches!(self, WorkError::Conflict(_)).then_some(std::time::Duration::from_millis(100))
    }
}

/// Shorthand for [`WorkError::Api`]: `.map_err(api_err("get", "Backup ns/name"))`.
pub fn api_err(
    action: &'static str,
    object: impl Into<String>,
) -> impl FnOnce(kube::Error) -> WorkError {
    let object = object.into();
    move |source| WorkError::Api {
        action,
        object,
        source,
    }
}

/// The outcome of [`WorkLeaseKeeper::fence`].
#[derive(Debug)]
pub enum Fence<K> {
    /// The object already records this token (or leases are not networked): use it as it is.
    Current,
    /// The token was recorded: the object as the write left it.
    Recorded(K),
    /// A newer holder's token is recorded: this replica must not act on the object.
    Stale,
}

/// Keeps the work leases this replica holds, keyed by object.
#[derive(Debug)]
pub struct WorkLeaseKeeper {
    component: &'static str,
    leases: WorkLeases,
    held: Mutex<HashMap<String, WorkLease>>,
    /// Lease names this replica was refused (another replica held them) since it last tried.
    refused: Arc<Mutex<HashSet<String>>>,
}

impl WorkLeaseKeeper {
    /// Leases named `<component>/…` through `leases`.
    pub fn new(component: &'static str, leases: WorkLeases) -> Self {
        Self {
            component,
            leases,
            held: Mutex::new(HashMap::new()),
            refused: Arc::default(),
        }
    }

    /// Objects of kind `K` whose work lease this replica was refused and that another replica
    /// has just released (or let expire): feed it to the controller (`reconcile_on`) so the
    /// object is retried at once instead of at its next requeue. After the lease server's watch
    /// (re)connects, every refused object is yielded once (a release may have been missed).
    pub fn freed<K>(&self) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
    where
        K: Resource<DynamicType = ()> + 'static,
    {
        let prefix = format!("{}/{}/", self.component, K::kind(&()));
        let refused = self.refused.clone();
        self.leases.frees(&prefix).flat_map(move |freed| {
            let mut refused = refused.lock().unwrap_or_else(|e| e.into_inner());
            let names: Vec<String> = match freed {
                Freed::Name(name) => refused.take(&name).into_iter().collect(),
                Freed::Resynced => {
                    let names: Vec<String> = refused
                        .iter()
                        .filter(|n| n.starts_with(&prefix))
                        .cloned()
                        .collect();
                    for n in &names {
                        refused.remove(n);
                    }
                    names
                }
            };
            let refs: Vec<ObjectRef<K>> = names
                .iter()
                .filter_map(|n| object_ref(&prefix, n))
                .collect();
            futures::stream::iter(refs)
        })
    }

    /// The lease name of `obj`: `<component>/<Kind>/<namespace>/<name>`.
    pub fn lease_name<K: Resource<DynamicType = ()>>(&self, obj: &K) -> String {
        let meta = obj.meta();
        format!(
            "{}/{}/{}/{}",
            self.component,
            K::kind(&()),
            meta.namespace.as_deref().unwrap_or(""),
            meta.name.as_deref().unwrap_or("")
        )
    }

    /// Holds the work lease of `obj`: `Some` when this replica may drive it (the lease is kept
    /// until [`Self::release`] or loss), `None` when another replica holds it.
    pub async fn hold<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
    ) -> Result<Option<Held>, LeaseError> {
        let name = self.lease_name(obj);
        if let Some(held) = self.current(&name) {
            return Ok(Some(held));
        }
        let Some(lease) = self.leases.try_acquire(&name).await? else {
            self.lock_refused().insert(name);
            return Ok(None);
        };
        self.lock_refused().remove(&name);
        let held = Held {
            name: name.clone(),
            token: lease.token(),
            lost: lease.lost_signal(),
        };
        self.lock().insert(name, lease);
        Ok(Some(held))
    }

    /// Records `token` on `obj` in the annotation `annotation` (when leases are networked and the
    /// recorded token is older), with `obj`'s resourceVersion as a precondition; every later write
    /// to the object carries the version this one produced, so a replica that lost the lease fails
    /// on its next write instead of overwriting the new holder's work. A newer recorded token means
    /// this replica's lease is stale: the lease is given back and the answer is [`Fence::Stale`].
    pub async fn fence<K>(
        &self,
        api: &kube::Api<K>,
        obj: &K,
        token: u64,
        annotation: &str,
    ) -> Result<Fence<K>, kube::Error>
    where
        K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        if token == 0 {
            return Ok(Fence::Current);
        }
        let recorded: u64 = obj
            .meta()
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotation))
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        if recorded == token {
            return Ok(Fence::Current);
        }
        if recorded > token {
            self.release(obj);
            return Ok(Fence::Stale);
        }
        let patch = serde_json::json!({"metadata": {
            "resourceVersion": obj.meta().resource_version,
            "annotations": {annotation: token.to_string()},
        }});
        let name = obj.meta().name.clone().unwrap_or_default();
        api.patch(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map(Fence::Recorded)
    }

    /// Gives the lease of `obj` back (the object is done, or gone).
    pub fn release<K: Resource<DynamicType = ()>>(&self, obj: &K) {
        let name = self.lease_name(obj);
        self.lock().remove(&name);
    }

    /// How many leases this replica holds.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// True when this replica holds no lease.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn current(&self, name: &str) -> Option<Held> {
        let mut held = self.lock();
        let lease = held.get(name)?;
        if lease.is_lost() {
            held.remove(name);
            return None;
        }
        Some(Held {
            name: name.to_owned(),
            token: lease.token(),
            lost: lease.lost_signal(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, WorkLease>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_refused(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.refused.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The object a lease name `<prefix><namespace>/<name>` stands for (an empty namespace is a
/// cluster-scoped object).
fn object_ref<K: Resource<DynamicType = ()>>(prefix: &str, lease: &str) -> Option<ObjectRef<K>> {
    let (namespace, name) = lease.strip_prefix(prefix)?.split_once('/')?;
    if name.is_empty() {
        return None;
    }
    let object = ObjectRef::new(name);
    Some(if namespace.is_empty() {
        object
    } else {
        object.within(namespace)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn cm(ns: &str, name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.namespace = Some(ns.into());
        cm.metadata.name = Some(name.into());
        cm
    }

    #[tokio::test]
    async fn single_replica_holds_every_object_until_released() {
        let keeper = WorkLeaseKeeper::new("backup-runner", WorkLeases::single_replica());
        let a = cm("tenant-a", "job-1");
        assert_eq!(
            keeper.lease_name(&a),
            "backup-runner/ConfigMap/tenant-a/job-1"
        );
        let held = keeper.hold(&a).await.unwrap().unwrap();
        assert_eq!((held.token(), held.is_lost()), (0, false));
        keeper.hold(&a).await.unwrap().unwrap();
        keeper
            .hold(&cm("tenant-b", "job-1"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(keeper.len(), 2, "one lease per object, kept between holds");
        keeper.release(&a);
        assert_eq!(keeper.len(), 1);
    }

    #[test]
    fn lease_names_map_back_to_objects() {
        let p = "backup-runner/ConfigMap/";
        let r = object_ref::<ConfigMap>(p, "backup-runner/ConfigMap/tenant-a/job-1").unwrap();
        assert_eq!(
            (r.name.as_str(), r.namespace.as_deref()),
            ("job-1", Some("tenant-a"))
        );
        let cluster = object_ref::<ConfigMap>(p, "backup-runner/ConfigMap//global").unwrap();
        assert_eq!((cluster.name.as_str(), cluster.namespace), ("global", None));
        assert!(object_ref::<ConfigMap>(p, "backup-runner/Secret/ns/x").is_none());
        assert!(object_ref::<ConfigMap>(p, "backup-runner/ConfigMap/ns/").is_none());
    }
}
