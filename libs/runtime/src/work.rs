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
//! takes an object over at once after the holder shut down, without polling. Until then it does
//! not ask again: the refusal carries the holder's remaining time, and a `hold` before that answers
//! `None` without a call (the object's own events would otherwise cost one Acquire each on every
//! replica that does not hold it); the remaining time bounds how long a release that raced the
//! refusal can go unnoticed. The same push tells every replica which leases the others were
//! granted, so a replica usually knows an object is taken before it would ask.
//!
//! Spreading ([`WorkLeaseKeeper::spread`]): each replica holds a member lease
//! `<component>/member/<identity>` and reads the members every few seconds; a stable hash of the
//! object's lease name over the members (rendezvous hashing) names the replica that asks for it
//! at once. The others leave it alone for [`SPREAD_GRACE`] (the preferred replica's grant reaches
//! them by push meanwhile), then ask like before, so an object whose preferred replica is gone or
//! stuck is still taken. Replicas rarely contend, and an object costs about two lease calls
//! (Acquire, Release) whatever the number of replicas.
//!
//! Lease names are `<component>/<Kind>/<namespace>/<name>`. In single-replica mode every lease is
//! granted with token 0 and nothing is spread.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use lease::{Attempt, Freed, LeaseError, WorkLease, WorkLeases};
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
    /// Lease names this replica was refused (another replica held them) since it last tried, or
    /// saw granted to another replica, with the instant before which it does not ask again
    /// unless the lease is freed.
    refused: Arc<Mutex<HashMap<String, Instant>>>,
    /// Set by [`Self::spread`].
    spread: Option<Arc<Spread>>,
    /// Read-your-writes: for each object this replica wrote (lease name), the resourceVersion the
    /// write was made on, and when. A copy still at that version is behind this replica's own
    /// write (see [`Self::behind`]).
    written: Mutex<HashMap<String, (String, Instant)>>,
}

/// How long a copy at a version this replica wrote over counts as behind: the watch delivers the
/// write's own version well within it; past it the copy is trusted again (a watch that lost the
/// event is relisted, and deciding on the copy only risks a conflict).
const BEHIND_FOR: Duration = Duration::from_secs(10);

/// How long a replica leaves an object to the replica the hash prefers for it before asking for
/// the object's lease itself.
pub const SPREAD_GRACE: Duration = Duration::from_secs(2);
/// How often a spreading replica reads the members (and takes its member lease again if lost).
const MEMBERS_EVERY: Duration = Duration::from_secs(5);

/// The spreading state of one replica.
#[derive(Debug)]
struct Spread {
    /// This replica's identity.
    me: String,
    /// The members' identities, sorted, this replica's included.
    members: Mutex<Vec<String>>,
    /// Objects (lease names) this replica first left to another replica, and when.
    deferred: Mutex<HashMap<String, Instant>>,
}

impl Spread {
    /// The member the hash prefers for the lease `name`.
    fn choice(&self, name: &str) -> Option<String> {
        let members = lock(&self.members);
        members.iter().max_by_key(|m| rendezvous(m, name)).cloned()
    }

    /// True when this replica is the one the hash prefers for the lease `name`.
    fn preferred(&self, name: &str) -> bool {
        self.choice(name).is_none_or(|m| m == self.me)
    }

    /// True while this replica should leave `name` to the preferred replica (the first call for
    /// `name` starts the grace period).
    fn defers(&self, name: &str, now: Instant) -> bool {
        if self.preferred(name) {
            return false;
        }
        let mut deferred = lock(&self.deferred);
        if deferred.len() >= DEFERRED_PRUNE_AT {
            // Objects finished while deferred are never asked for again.
            deferred.retain(|_, since| now.saturating_duration_since(*since) < DEFERRED_KEEP);
        }
        let since = *deferred.entry(name.to_owned()).or_insert(now);
        now < since + SPREAD_GRACE
    }

    fn forget(&self, name: &str) {
        lock(&self.deferred).remove(name);
    }

    /// The lease `name` was freed by its holder (done, shutting down, or expired): whoever looks
    /// next asks at once; the members list may not show yet that the preferred replica is gone.
    fn freed(&self, name: &str, now: Instant) {
        let over = now.checked_sub(SPREAD_GRACE).unwrap_or(now);
        lock(&self.deferred).insert(name.to_owned(), over);
    }
}

/// Deferred objects are pruned once there are this many…
const DEFERRED_PRUNE_AT: usize = 4096;
/// …keeping those put off within this long.
const DEFERRED_KEEP: Duration = Duration::from_secs(60);

/// The rendezvous weight of `member` for the lease `name`: FNV-1a over both, then a 64-bit
/// finaliser (SplitMix64's) so that similar names spread evenly. Stable across processes and
/// versions, unlike the standard library's hasher.
fn rendezvous(member: &str, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member.bytes().chain([0xff]).chain(name.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock only means a panic elsewhere while holding it; the data stays usable.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The longest a refused lease is left alone on the server's hint (a lease's TTL is far shorter;
/// this only caps a hint that makes no sense).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

impl WorkLeaseKeeper {
    /// Leases named `<component>/…` through `leases`.
    pub fn new(component: &'static str, leases: WorkLeases) -> Self {
        Self {
            component,
            leases,
            held: Mutex::new(HashMap::new()),
            refused: Arc::default(),
            spread: None,
            written: Mutex::default(),
        }
    }

    /// Spreads objects over the replicas by a stable hash (see the module doc): this replica
    /// holds its member lease and reads the members in the background (while the keeper lives).
    /// Nothing changes in single-replica mode. Needs a Tokio runtime.
    pub fn spread(mut self) -> Self {
        let Some(me) = self.leases.identity().map(str::to_owned) else {
            return self;
        };
        let spread = Arc::new(Spread {
            me: me.clone(),
            members: Mutex::new(vec![me.clone()]),
            deferred: Mutex::default(),
        });
        let weak = Arc::downgrade(&spread);
        let leases = self.leases.clone();
        let prefix = format!("{}/member/", self.component);
        tokio::spawn(async move {
            let member = format!("{prefix}{me}");
            let mut lease: Option<WorkLease> = None;
            loop {
                let Some(spread) = weak.upgrade() else { return };
                if lease.as_ref().is_none_or(WorkLease::is_lost) {
                    lease = match leases.attempt(&member).await {
                        Ok(attempt) => attempt.granted(),
                        Err(e) => {
                            tracing::debug!(error = %e, "member lease not taken; trying again");
                            None
                        }
                    };
                }
                match leases.holders(&prefix).await {
                    Ok(mut members) => {
                        members.push(spread.me.clone());
                        members.sort();
                        members.dedup();
                        *lock(&spread.members) = members;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "members not read; keeping the last list")
                    }
                }
                drop(spread);
                tokio::time::sleep(MEMBERS_EVERY).await;
            }
        });
        self.spread = Some(spread);
        self
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
        let spread = self.spread.clone();
        let me = self.leases.identity().map(str::to_owned);
        self.leases.frees(&prefix).flat_map(move |freed| {
            let mut refused = lock(&refused);
            let names: Vec<String> = match freed {
                Freed::Held {
                    name,
                    holder,
                    remaining,
                } => {
                    // Another replica took it: no need to ask until it is freed.
                    if me.as_deref() != Some(holder.as_str()) {
                        if let Some(spread) = &spread {
                            spread.forget(&name);
                        }
                        let until = Instant::now() + remaining.min(MAX_RETRY_AFTER);
                        refused.insert(name, until);
                    }
                    Vec::new()
                }
                Freed::Name(name) => {
                    let Some(_) = refused.remove(&name) else {
                        return futures::stream::iter(Vec::new());
                    };
                    if let Some(spread) = &spread {
                        spread.freed(&name, Instant::now());
                    }
                    vec![name]
                }
                Freed::Resynced => {
                    // Grants pushed while the watch was down were missed: nothing is left to a
                    // preferred replica any longer than the next look.
                    if let Some(spread) = &spread {
                        lock(&spread.deferred).retain(|n, _| !n.starts_with(&prefix));
                    }
                    let names: Vec<String> = refused
                        .keys()
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
    /// until [`Self::release`] or loss), `None` when another replica holds it (asked once: until
    /// the holder's remaining time has passed or the lease is freed, `None` without a call) or,
    /// when spreading, while the replica the hash prefers has the first [`SPREAD_GRACE`] to take
    /// it (ask again after that).
    pub async fn hold<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
    ) -> Result<Option<Held>, LeaseError> {
        let name = self.lease_name(obj);
        if let Some(held) = self.current(&name) {
            return Ok(Some(held));
        }
        let now = Instant::now();
        if self
            .lock_refused()
            .get(&name)
            .is_some_and(|until| *until > now)
        {
            return Ok(None);
        }
        if let Some(spread) = &self.spread {
            if spread.defers(&name, now) {
                return Ok(None);
            }
            spread.forget(&name);
        }
        let lease = match self.leases.attempt(&name).await? {
            Attempt::Granted(lease) => lease,
            Attempt::NotGranted { retry_after } => {
                let until = Instant::now() + retry_after.min(MAX_RETRY_AFTER);
                self.lock_refused().insert(name, until);
                return Ok(None);
            }
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
        let updated = api
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await?;
        self.wrote(obj, &updated);
        Ok(Fence::Recorded(updated))
    }

    /// Gives the lease of `obj` back (the object is done, or gone).
    pub fn release<K: Resource<DynamicType = ()>>(&self, obj: &K) {
        let name = self.lease_name(obj);
        self.lock().remove(&name);
        lock(&self.written).remove(&name);
    }

    /// Records that this replica wrote `before` (the copy the write was made on, carrying its
    /// resourceVersion as a precondition) and the API server answered `after`: until the watch
    /// shows a newer version, a copy at `before`'s is behind the write. A write that changed
    /// nothing (the same version back) records nothing.
    pub fn wrote<K: Resource<DynamicType = ()>>(&self, before: &K, after: &K) {
        let version = before.meta().resource_version.clone();
        if let Some(version) = version.filter(|v| after.meta().resource_version.as_ref() != Some(v))
        {
            lock(&self.written).insert(self.lease_name(before), (version, Instant::now()));
        }
    }

    /// Whether `obj`, a cached copy, is the version this replica already wrote over (within
    /// [`BEHIND_FOR`] of the write). Deciding on it would repeat a decision already made and end
    /// in a conflict with this replica's own write; the event of the newer version is on its
    /// way. The watch caches of a busy replica lag its own writes by a few events.
    pub fn behind<K: Resource<DynamicType = ()>>(&self, obj: &K) -> bool {
        let Some(version) = obj.meta().resource_version.as_deref() else {
            return false;
        };
        lock(&self.written)
            .get(&self.lease_name(obj))
            .is_some_and(|(wrote_on, at)| wrote_on == version && at.elapsed() < BEHIND_FOR)
    }

    /// The replicas objects are spread over (identities, sorted; this one's included), when
    /// spreading.
    pub fn members(&self) -> Vec<String> {
        self.spread
            .as_ref()
            .map(|s| lock(&s.members).clone())
            .unwrap_or_default()
    }

    /// The replica (identity) the hash prefers for `obj`, when spreading.
    pub fn preferred<K: Resource<DynamicType = ()>>(&self, obj: &K) -> Option<String> {
        let spread = self.spread.as_ref()?;
        spread.choice(&self.lease_name(obj))
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

    fn lock_refused(&self) -> std::sync::MutexGuard<'_, HashMap<String, Instant>> {
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

    fn at(version: &str) -> k8s_openapi::api::core::v1::ConfigMap {
        let mut o = k8s_openapi::api::core::v1::ConfigMap::default();
        o.metadata.name = Some("job".into());
        o.metadata.namespace = Some("t".into());
        o.metadata.resource_version = Some(version.into());
        o
    }

    #[test]
    fn a_copy_at_the_version_this_replica_wrote_over_is_behind_until_a_newer_one_or_release() {
        let keeper = WorkLeaseKeeper::new("test", lease::WorkLeases::single_replica());
        assert!(!keeper.behind(&at("5")));
        keeper.wrote(&at("5"), &at("6"));
        assert!(
            keeper.behind(&at("5")),
            "the cache still shows the version written over"
        );
        assert!(!keeper.behind(&at("6")), "the write's own version");
        assert!(!keeper.behind(&at("7")), "a later version");
        // A write that changed nothing leaves the memory as it was.
        keeper.wrote(&at("6"), &at("6"));
        assert!(keeper.behind(&at("5")) && !keeper.behind(&at("6")));
        keeper.release(&at("5"));
        assert!(!keeper.behind(&at("5")), "released: forgotten");
        // Another object is not concerned.
        keeper.wrote(&at("8"), &at("9"));
        let mut other = at("8");
        other.metadata.name = Some("other".into());
        assert!(!keeper.behind(&other));
    }

    #[test]
    fn the_hash_spreads_objects_evenly_and_moves_few_when_a_member_leaves() {
        let members = ["runner-0", "runner-1", "runner-2"];
        let pick = |members: &[&str], name: &str| -> String {
            members
                .iter()
                .max_by_key(|m| rendezvous(m, name))
                .unwrap()
                .to_string()
        };
        let names: Vec<String> = (0..3000)
            .map(|i| {
                format!(
                    "backup-runner/BackupJob/bench-{:03}/job-{}",
                    i % 100,
                    i / 100
                )
            })
            .collect();
        let mut counts = HashMap::new();
        for n in &names {
            *counts.entry(pick(&members, n)).or_insert(0) += 1;
        }
        for m in members {
            let c = counts[m];
            assert!((800..=1200).contains(&c), "{m}: {c} of 3000");
        }
        // runner-2 leaves: only its objects move.
        let moved = names
            .iter()
            .filter(|n| pick(&members, n) != "runner-2")
            .filter(|n| pick(&members, n) != pick(&members[..2], n))
            .count();
        assert_eq!(moved, 0);
        assert_eq!(rendezvous("a", "b"), rendezvous("a", "b"));
        assert_ne!(rendezvous("a", "bc"), rendezvous("ab", "c"));
    }
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
