//! A watched set of objects (as JSON) with a coalescing change signal shared by several watches.
//! The watch itself (backoff, readiness at the initial list, malformed objects skipped) is the
//! runtime's `Watch`; this keeps the simulators' JSON view of it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::ApiResource;
use kube::runtime::watcher;
use serde_json::Value;
use tokio::sync::Notify;

/// `(namespace, name)` of an object.
pub type Key = (String, String);

/// Objects of one kind, kept current by [`Cache::watch`].
#[derive(Debug, Default)]
pub struct Cache {
    objects: Mutex<BTreeMap<Key, Value>>,
}

impl Cache {
    /// A snapshot of every object.
    pub fn snapshot(&self) -> BTreeMap<Key, Value> {
        self.objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// One object.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Value> {
        self.objects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Records an object directly (tests, or a simulator noting its own write), unless the cache
    /// holds a newer version of it already: the watch may deliver a later change (another
    /// client's) before the simulator records the answer to its own write, and that change must
    /// not be lost (the simulator would wait for an event that already came).
    pub fn insert(&self, value: Value) {
        let key = (
            value["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            value["metadata"]["name"].as_str().unwrap_or("").to_owned(),
        );
        let mut objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
        if objects.get(&key).is_some_and(|held| is_newer(held, &value)) {
            return;
        }
        objects.insert(key, value);
    }

    /// Watches `resource` in all namespaces into this cache, applying `sanitize` to every object
    /// (e.g. to drop Secret values), signalling `notify` on every change and marking `ready` after
    /// the initial list. Runs forever.
    pub async fn watch(
        self: Arc<Self>,
        client: kube::Client,
        resource: ApiResource,
        config: watcher::Config,
        notify: Arc<Notify>,
        ready: runtime::ReadyHandle,
        sanitize: fn(&mut Value),
    ) {
        let kind = resource.kind.clone();
        let events = runtime::Watch::<DynamicObject>::new_with(client, resource)
            .selectors(&config)
            .events_with(ready);
        let mut events = std::pin::pin!(events);
        let mut initial: Option<BTreeMap<Key, Value>> = None;
        while let Some(event) = events.next().await {
            let to_entry = |o: DynamicObject| {
                let mut v = serde_json::to_value(o).unwrap_or_default();
                sanitize(&mut v);
                let key = (
                    v["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
                    v["metadata"]["name"].as_str().unwrap_or("").to_owned(),
                );
                (key, v)
            };
            let mut objects = self.objects.lock().unwrap_or_else(|e| e.into_inner());
            match event {
                watcher::Event::Init => initial = Some(BTreeMap::new()),
                watcher::Event::InitApply(o) => {
                    let (k, v) = to_entry(o);
                    initial.get_or_insert_with(BTreeMap::new).insert(k, v);
                    continue;
                }
                watcher::Event::InitDone => *objects = initial.take().unwrap_or_default(),
                watcher::Event::Apply(o) => {
                    let (k, v) = to_entry(o);
                    objects.insert(k, v);
                }
                watcher::Event::Delete(o) => {
                    let (k, _) = to_entry(o);
                    objects.remove(&k);
                }
            }
            drop(objects);
            notify.notify_one();
        }
        tracing::debug!(kind, "watch ended");
    }
}

/// True when `held` is a later version than `candidate` (by `resourceVersion`, which the API
/// emulator the simulators run against numbers in order; unknown orders count as not newer).
fn is_newer(held: &Value, candidate: &Value) -> bool {
    let version = |v: &Value| {
        v["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|rv| rv.parse::<u64>().ok())
    };
    matches!((version(held), version(candidate)), (Some(h), Some(c)) if h > c)
}

/// Starts one [`Cache::watch`] per `(cache, resource, check)`: all namespaces, no selector, objects
/// as served, every change signalling `notify`; `check` names the readiness check that passes
/// after the initial list. The setup every simulator opens with.
pub fn spawn_watches(
    client: &kube::Client,
    readiness: &runtime::Readiness,
    notify: &Arc<Notify>,
    watches: Vec<(&Arc<Cache>, ApiResource, &str)>,
) {
    spawn_sanitized_watches(client, readiness, notify, |_| {}, watches);
}

/// [`spawn_watches`], applying `sanitize` to every object (e.g. to drop managed fields).
pub fn spawn_sanitized_watches(
    client: &kube::Client,
    readiness: &runtime::Readiness,
    notify: &Arc<Notify>,
    sanitize: fn(&mut Value),
    watches: Vec<(&Arc<Cache>, ApiResource, &str)>,
) {
    for (cache, resource, check) in watches {
        tokio::spawn(cache.clone().watch(
            client.clone(),
            resource,
            watcher::Config::default(),
            notify.clone(),
            readiness.register(check),
            sanitize,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(rv: &str, note: &str) -> Value {
        json!({"metadata": {"namespace": "ns", "name": "a", "resourceVersion": rv},
               "note": note})
    }

    #[test]
    fn an_older_answer_does_not_replace_a_newer_watched_version() {
        let cache = Cache::default();
        cache.insert(object("7", "own write"));
        cache.insert(object("9", "another client's change, from the watch"));
        cache.insert(object("8", "a late answer to an own write"));
        assert_eq!(
            cache.get("ns", "a").unwrap()["note"],
            "another client's change, from the watch"
        );
        cache.insert(object("10", "newer"));
        assert_eq!(cache.get("ns", "a").unwrap()["note"], "newer");
    }
}
