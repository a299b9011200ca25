//! Watched state: one slot per watch, each a map of the objects it currently sees, plus a
//! coalescing notification that wakes the evaluation loop.
//!
//! A watch follows a [`Target`] (namespace and optional name, the name becoming a
//! `metadata.name` field selector so RBAC can be scoped with `resourceNames`). When the target
//! changes the watch restarts and its slot is unsynced until the new initial list completes; a
//! relist replaces the slot atomically at `InitDone`, so an object deleted while disconnected
//! disappears.

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use tokio::sync::Notify;

/// Identity of an object inside one slot: (namespace, name).
pub(crate) type SlotKey = (Option<String>, String);

/// What a watch looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    /// `None`: nothing (the watch idles, synced and empty).
    pub(crate) active: bool,
    /// Namespace, or all namespaces.
    pub(crate) namespace: Option<String>,
    /// A single object name (field selector).
    pub(crate) name: Option<String>,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.namespace, &self.name) {
            (Some(ns), Some(n)) => write!(f, "{ns}/{n}"),
            (Some(ns), None) => write!(f, "in {ns}"),
            (None, Some(n)) => write!(f, "{n}"),
            (None, None) => f.write_str("in all namespaces"),
        }
    }
}

impl Target {
    pub(crate) fn named(namespace: &str, name: &str) -> Self {
        Self {
            active: true,
            namespace: Some(namespace.into()),
            name: Some(name.into()),
        }
    }
    pub(crate) fn all() -> Self {
        Self {
            active: true,
            namespace: None,
            name: None,
        }
    }
    pub(crate) fn none() -> Self {
        Self {
            active: false,
            namespace: None,
            name: None,
        }
    }
}

/// One watch's view.
#[derive(Debug, Default)]
pub(crate) struct Slot {
    /// True once the current target's initial list completed.
    pub(crate) synced: bool,
    /// The objects seen, as JSON.
    pub(crate) objects: BTreeMap<SlotKey, Value>,
}

/// All slots and the wake-up signal.
#[derive(Debug)]
pub(crate) struct Shared {
    slots: Mutex<Vec<Slot>>,
    notify: Notify,
}

fn key_of(v: &Value) -> SlotKey {
    (
        v["metadata"]["namespace"].as_str().map(str::to_owned),
        v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

fn resource_version(v: &Value) -> Option<u64> {
    v["metadata"]["resourceVersion"].as_str()?.parse().ok()
}

impl Shared {
    pub(crate) fn new(n: usize) -> Self {
        Self {
            slots: Mutex::new((0..n).map(|_| Slot::default()).collect()),
            notify: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Completes when something changed since the last call (notifications coalesce).
    pub(crate) async fn notified(&self) {
        self.notify.notified().await;
    }

    fn wake(&self) {
        self.notify.notify_one();
    }

    /// True when every watch has completed its initial list for its current target.
    pub(crate) fn all_synced(&self) -> bool {
        self.lock().iter().all(|s| s.synced)
    }

    /// Reads the slots under the lock.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&[Slot]) -> T) -> T {
        f(&self.lock())
    }

    /// Marks a slot stale (its watch is being retargeted).
    pub(crate) fn unsync(&self, slot: usize) {
        let mut slots = self.lock();
        slots[slot].synced = false;
        slots[slot].objects.clear();
    }

    fn replace(&self, slot: usize, objects: BTreeMap<SlotKey, Value>) {
        let mut slots = self.lock();
        slots[slot].objects = objects;
        slots[slot].synced = true;
        drop(slots);
        self.wake();
    }

    /// Records a newer version of an object (from a watch event or our own write). An older
    /// resourceVersion than the one held is ignored: a watch event still in flight must not undo
    /// the object our apply just returned.
    pub(crate) fn upsert(&self, slot: usize, v: Value) {
        let key = key_of(&v);
        let mut slots = self.lock();
        let objects = &mut slots[slot].objects;
        if let (Some(old), Some(new)) = (
            objects.get(&key).and_then(resource_version),
            resource_version(&v),
        ) && new < old
        {
            return;
        }
        objects.insert(key, v);
    }

    /// Forgets an object.
    pub(crate) fn remove(&self, slot: usize, key: &SlotKey) {
        self.lock()[slot].objects.remove(key);
    }
}

/// Runs one watch forever, following `target`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn run(
    client: kube::Client,
    resource: ApiResource,
    mut target: tokio::sync::watch::Receiver<Target>,
    shared: std::sync::Arc<Shared>,
    slot: usize,
    kind: &'static str,
    ready: runtime::ReadyHandle,
    sanitize: fn(&mut Value),
) {
    loop {
        let t = target.borrow_and_update().clone();
        if !t.active {
            shared.replace(slot, BTreeMap::new());
            ready.set_ready_with("nothing to watch for this configuration");
            if target.changed().await.is_err() {
                return;
            }
            continue;
        }
        let api: Api<DynamicObject> = match &t.namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
            None => Api::all_with(client.clone(), &resource),
        };
        let mut config = watcher::Config::default();
        if let Some(name) = &t.name {
            config = config.fields(&format!("metadata.name={name}"));
        }
        tracing::debug!(kind, target = ?t, "watching");
        let mut stream = watcher(api, config).default_backoff().boxed();
        let mut initial: Option<BTreeMap<SlotKey, Value>> = None;
        loop {
            tokio::select! {
                changed = target.changed() => {
                    if changed.is_err() { return; }
                    break;
                }
                event = stream.next() => {
                    let Some(event) = event else { return };
                    let to_value = |o: DynamicObject| {
                        let mut v = serde_json::to_value(o).unwrap_or_default();
                        sanitize(&mut v);
                        v
                    };
                    match event {
                        Err(watcher::Error::InitialListFailed(kube::Error::Api(e))) if e.code == 404 => {
                            // The kind is not served (its CRD is not installed, e.g. no Velero):
                            // like upstream's gate, treat it as empty rather than blocking every
                            // other object. The watcher keeps retrying; once the CRD appears its
                            // initial list replaces this.
                            if !shared.read(|s| s[slot].synced) {
                                tracing::warn!(kind, "kind not served (CRD missing?); treating it as empty until it appears");
                                shared.replace(slot, BTreeMap::new());
                                ready.set_ready_with("kind not served; treated as empty");
                            }
                        }
                        Err(watcher::Error::InitialListFailed(kube::Error::Api(e))) if e.code == 403 => {
                            // Typically RBAC not moved along with the configuration (the Roles are
                            // scoped by namespace and name). Stay unsynced: evaluating without this
                            // input could prune objects that are still wanted.
                            tracing::warn!(kind, target = ?t, error = %e, "watch forbidden; retrying with backoff");
                            ready.set_not_ready(&format!("forbidden to list {kind} {t}: check the RBAC Roles"));
                        }
                        Err(e) => {
                            tracing::warn!(kind, error = %e, "watch failed; retrying with backoff");
                        }
                        Ok(watcher::Event::Init) => initial = Some(BTreeMap::new()),
                        Ok(watcher::Event::InitApply(o)) => {
                            let v = to_value(o);
                            initial.get_or_insert_with(BTreeMap::new).insert(key_of(&v), v);
                        }
                        Ok(watcher::Event::InitDone) => {
                            shared.replace(slot, initial.take().unwrap_or_default());
                            ready.set_ready();
                        }
                        Ok(watcher::Event::Apply(o)) => {
                            shared.upsert(slot, to_value(o));
                            shared.wake();
                        }
                        Ok(watcher::Event::Delete(o)) => {
                            let v = to_value(o);
                            shared.remove(slot, &key_of(&v));
                            shared.wake();
                        }
                    }
                }
            }
        }
    }
}
