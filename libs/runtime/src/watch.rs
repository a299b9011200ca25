//! One call for every watch a daemon makes (in the spirit of kubert's `watch_all`/`index`).
//!
//! ```text
//!  Watch::<K>::new(client).in_namespace(ns).named(n).labels(l)       what to look at
//!        .absent_is_empty()        404 on the list → an empty, synced view (kind not installed)
//!        .strip(|k| …)             drop what must not stay in memory (Secret values, …)
//!        │
//!        ├─ .events(&ctx)  → Stream<watcher::Event<K>>      logged errors, default backoff,
//!        │                                                  malformed objects skipped, ends on shutdown
//!        ├─ .reflect(&ctx) → (Store<K>, Stream<Result<K>>)  for kube-runtime's Controller::for_stream
//!        └─ .cache(&ctx, &trigger) → Cache<K>               relist-and-swap view + change trigger;
//!                                                           re-targetable (Cache::retarget)
//! ```
//!
//! Every watch registers one readiness check (`watch <Kind> <target>`): pending until the initial
//! list completed, not ready with the missing RBAC rule named while the API answers 403, ready
//! ("kind not served; treated as empty") on 404 when the watch opted in with
//! [`Watch::absent_is_empty`]; not ready ("API server unreachable: …") while the API server cannot
//! be reached, then ready again once a fresh list completed.
//!
//! Invariants: a consumer never sees a partial list as the state (a relist replaces the view at
//! its end, so an object deleted while disconnected disappears); an object that does not
//! deserialize is logged and skipped, never a stream error and never a crash; no watch outlives the
//! daemon's shutdown signal.
//!
//! Why readiness is marked from the event stream rather than `Store::wait_until_ready`: in
//! kube-runtime 5 the latter awaits a oneshot shared by every waiter that keeps only the most recent
//! waker, and the `Controller` itself waits on the same store, so a second waiter may never wake.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::core::{DeserializeGuard, NamespaceScope};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch;

use crate::admin::WATCH_CHECK_PREFIX;
use crate::{Readiness, ReadyHandle, Shutdown};

/// What every watch needs from the daemon: where to register readiness and when to stop.
#[derive(Clone, Debug)]
pub struct WatchContext {
    /// The daemon's readiness registry (`/ready`).
    pub readiness: Readiness,
    /// The daemon's shutdown signal; every watch ends with it.
    pub shutdown: Shutdown,
}

/// What one watch looks at: a namespace (or all), an optional single name (sent as the field
/// selector `metadata.name=…`, so RBAC can be scoped with `resourceNames`) and an optional label
/// selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// Namespace, or all namespaces (and cluster-scoped kinds).
    pub namespace: Option<String>,
    /// A single object name.
    pub name: Option<String>,
    /// A label selector.
    pub labels: Option<String>,
    /// Objects per page of the initial (and any re-)list; `None`: kube-runtime's default (500).
    pub page_size: Option<u32>,
}

impl Target {
    /// One named object in `namespace`.
    pub fn named(namespace: &str, name: &str) -> Self {
        Self {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            labels: None,
            page_size: None,
        }
    }

    fn config(&self) -> watcher::Config {
        let mut config = watcher::Config::default();
        if let Some(name) = &self.name {
            config = config.fields(&format!("metadata.name={name}"));
        }
        if let Some(labels) = &self.labels {
            config = config.labels(labels);
        }
        if let Some(size) = self.page_size {
            config = config.page_size(size);
        }
        config
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.namespace, &self.name) {
            (Some(ns), Some(n)) => write!(f, "{ns}/{n}")?,
            (Some(ns), None) => write!(f, "in {ns}")?,
            (None, Some(n)) => write!(f, "{n}")?,
            (None, None) => f.write_str("in all namespaces")?,
        }
        if let Some(l) = &self.labels {
            write!(f, " ({l})")?;
        }
        Ok(())
    }
}

/// Bounds every watched kind satisfies.
pub trait Watchable:
    Resource<DynamicType: Clone + Debug + Eq + Hash + Send + Sync>
    + Clone
    + DeserializeOwned
    + Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Watchable for K where
    K: Resource<DynamicType: Clone + Debug + Eq + Hash + Send + Sync>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static
{
}

type MakeApi<K> =
    fn(Client, &<K as Resource>::DynamicType, Option<&str>) -> Api<DeserializeGuard<K>>;
type Strip<K> = Arc<dyn Fn(&mut K) + Send + Sync>;

fn api_cluster<K: Watchable>(
    client: Client,
    dt: &K::DynamicType,
    _ns: Option<&str>,
) -> Api<DeserializeGuard<K>> {
    Api::all_with(client, dt)
}

fn api_namespaced<K>(
    client: Client,
    dt: &K::DynamicType,
    ns: Option<&str>,
) -> Api<DeserializeGuard<K>>
where
    K: Watchable,
    K::Scope: NamespaceScope,
{
    let api = Api::all_with(client, dt);
    match ns {
        Some(ns) => api.constrain(ns),
        None => api,
    }
}

/// A watch to start: see the module documentation.
pub struct Watch<K: Watchable> {
    client: Client,
    dyntype: K::DynamicType,
    make_api: MakeApi<K>,
    target: Target,
    what: Option<String>,
    absent_is_empty: bool,
    strip: Option<Strip<K>>,
}

impl<K: Watchable> Watch<K>
where
    K::DynamicType: Default,
{
    /// Every object of a typed kind, in all namespaces (or cluster-wide).
    pub fn new(client: Client) -> Self {
        Self::new_with(client, K::DynamicType::default())
    }
}

impl<K: Watchable> Watch<K> {
    /// Every object of a kind with a runtime type (e.g. `DynamicObject` + its `ApiResource`).
    pub fn new_with(client: Client, dyntype: K::DynamicType) -> Self {
        Self {
            client,
            dyntype,
            make_api: api_cluster::<K>,
            target: Target::default(),
            what: None,
            absent_is_empty: false,
            strip: None,
        }
    }

    /// Lists in pages of `size` objects: for kinds whose objects are large, the size of one page
    /// is the peak memory of the (re-)list.
    pub fn page_size(mut self, size: u32) -> Self {
        self.target.page_size = Some(size);
        self
    }

    /// Looks only at `namespace`.
    pub fn in_namespace(mut self, namespace: &str) -> Self
    where
        K::Scope: NamespaceScope,
    {
        self.make_api = api_namespaced::<K>;
        self.target.namespace = Some(namespace.into());
        self
    }

    /// Allows namespaced targets later (with [`Cache::retarget`]) while starting from `target`.
    pub fn targeting(mut self, target: Target) -> Self
    where
        K::Scope: NamespaceScope,
    {
        self.make_api = api_namespaced::<K>;
        self.target = target;
        self
    }

    /// Looks only at the object `name` (a `metadata.name` field selector).
    pub fn named(mut self, name: &str) -> Self {
        self.target.name = Some(name.into());
        self
    }

    /// Looks only at objects matching the label selector.
    pub fn labels(mut self, selector: &str) -> Self {
        self.target.labels = Some(selector.into());
        self
    }

    /// The name of the readiness check and log field (default: the kind and the target).
    pub fn describe(mut self, what: &str) -> Self {
        self.what = Some(what.into());
        self
    }

    /// A 404 on the list (the kind is not served: its CRD is not installed) makes the view empty
    /// and ready instead of blocking readiness; the watch keeps retrying and the kind's real list
    /// replaces the empty view once it appears.
    pub fn absent_is_empty(mut self) -> Self {
        self.absent_is_empty = true;
        self
    }

    /// Applies `f` to every object before anyone sees it (drop Secret values, managedFields, …).
    pub fn strip(mut self, f: impl Fn(&mut K) + Send + Sync + 'static) -> Self {
        self.strip = Some(Arc::new(f));
        self
    }

    /// Drops `metadata.managedFields` (one copy per cached object, often the largest part of it)
    /// from every object: for consumers that never read field ownership.
    pub fn strip_managed_fields(self) -> Self {
        self.strip(|o| o.meta_mut().managed_fields = None)
    }

    fn kind(&self) -> String {
        K::kind(&self.dyntype).into_owned()
    }

    fn check_name(&self) -> String {
        match &self.what {
            Some(w) => format!("{WATCH_CHECK_PREFIX}{w}"),
            None if self.target == Target::default() => {
                format!("{WATCH_CHECK_PREFIX}{}", self.kind())
            }
            None => format!("{WATCH_CHECK_PREFIX}{} {}", self.kind(), self.target),
        }
    }

    /// The events of this watch: see the module documentation. The stream ends on shutdown.
    pub fn events(
        self,
        ctx: &WatchContext,
    ) -> impl Stream<Item = watcher::Event<K>> + Send + use<K> {
        let ready = ctx.readiness.register(&self.check_name());
        self.events_reporting(ready)
            .take_until(ctx.shutdown.signaled())
    }

    /// The events of this watch, marking a readiness check the caller registered itself (for
    /// components that own their check's name and lifetime). The stream does not end on shutdown.
    pub fn events_with(
        self,
        ready: ReadyHandle,
    ) -> impl Stream<Item = watcher::Event<K>> + Send + use<K> {
        self.events_reporting(ready)
    }

    /// Uses a watcher configuration's label and field selectors as the target's.
    pub fn selectors(mut self, config: &watcher::Config) -> Self {
        self.target.labels = config.label_selector.clone();
        if let Some(name) = config
            .field_selector
            .as_deref()
            .and_then(|f| f.strip_prefix("metadata.name="))
        {
            self.target.name = Some(name.to_owned());
        }
        self
    }

    /// A reflector store fed by this watch and the stream of applied objects that drives a
    /// kube-runtime `Controller::for_stream(stream, store)`.
    pub fn reflect(
        self,
        ctx: &WatchContext,
    ) -> (
        Store<K>,
        impl Stream<Item = Result<K, watcher::Error>> + Send + use<K>,
    ) {
        let writer = reflector::store::Writer::new(self.dyntype.clone());
        let reader = writer.as_reader();
        let events = self.events(ctx).map(Ok);
        let stream = reflector::reflector(writer, events).applied_objects();
        (reader, stream)
    }

    /// Starts the watch in a task feeding a [`Cache`]; every change fires `trigger`.
    pub fn cache(self, ctx: &WatchContext, trigger: &Trigger) -> Cache<K> {
        let ready = ctx.readiness.register(&self.check_name());
        let (target_tx, target_rx) = watch::channel(Some(self.target.clone()));
        let cache = Cache {
            inner: Arc::new(CacheInner {
                state: Mutex::new(CacheState::default()),
                target: target_tx,
            }),
        };
        let task = run_cache(
            self,
            cache.clone(),
            target_rx,
            ready,
            trigger.clone(),
            ctx.shutdown.clone(),
        );
        tokio::spawn(task);
        cache
    }

    /// The event stream of the current target, marking `ready` (not ending on shutdown).
    fn events_reporting(
        &self,
        ready: ReadyHandle,
    ) -> impl Stream<Item = watcher::Event<K>> + Send + use<K> {
        let api = (self.make_api)(
            self.client.clone(),
            &self.dyntype,
            self.target.namespace.as_deref(),
        );
        let mut policy = Policy {
            kind: self.kind(),
            resource: rbac_resource::<K>(&self.dyntype),
            target: self.target.clone(),
            absent_is_empty: self.absent_is_empty,
            absent_reported: false,
            listing: false,
            strip: self.strip.clone(),
            ready,
        };
        // The watcher yields `Init` before it even tries to list, and the backoff resets on every
        // item that is not an error, so a list that always fails (a kind that is not served, a
        // forbidden one) would be retried every 800 ms forever. `Init` is therefore held back
        // here and re-created by the policy when the list actually delivers something; failures
        // back off exponentially to 30 s.
        //
        // When the API server cannot be reached at all (connection refused or reset: it is down or
        // restarting), the watcher is dropped after that error and a fresh one lists again once the
        // backoff allows: a resumed watch that meets no change would otherwise never tell the
        // check that the server is back, and a relist after an outage is the safe view anyway.
        // The backoff wraps the restarts, so it keeps growing across them.
        let config = self.target.config();
        futures::stream::repeat(())
            .flat_map(move |()| {
                let events = watcher(api.clone(), config.clone())
                    .filter(|item| {
                        futures::future::ready(!matches!(item, Ok(watcher::Event::Init)))
                    })
                    .boxed();
                // Ends right after an "unreachable" error, without polling the watcher again.
                futures::stream::unfold(Some(events), |events| async move {
                    let mut events = events?;
                    let item = events.next().await?;
                    let end = matches!(&item, Err(err) if unreachable(err));
                    Some((item, (!end).then_some(events)))
                })
            })
            .default_backoff()
            .flat_map(move |item| futures::stream::iter(policy.handle(item)))
    }
}

/// An error with its causes, `a: b: c` (a connection error's own text is only "client error").
fn source_chain(err: &dyn std::error::Error) -> String {
    let mut out = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        let text = c.to_string();
        // Wrappers often repeat their cause's text in their own.
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// True when a list or watch could not reach the API server at all (no HTTP answer).
fn unreachable(err: &watcher::Error) -> bool {
    matches!(
        err,
        watcher::Error::InitialListFailed(e) | watcher::Error::WatchStartFailed(e)
            if matches!(e, kube::Error::Service(_) | kube::Error::HyperError(_))
    )
}

/// `(group, plural)` for messages that name an RBAC rule.
fn rbac_resource<K: Resource>(dt: &K::DynamicType) -> (String, String) {
    (K::group(dt).into_owned(), K::plural(dt).into_owned())
}

/// How one watch treats what the watcher yields.
struct Policy<K: Watchable> {
    kind: String,
    resource: (String, String),
    target: Target,
    absent_is_empty: bool,
    /// True after a 404 was turned into an empty list, until a list succeeds again.
    absent_reported: bool,
    /// True between the first item of a (re)list and its `InitDone`.
    listing: bool,
    strip: Option<Strip<K>>,
    ready: ReadyHandle,
}

impl<K: Watchable> Policy<K> {
    fn handle(
        &mut self,
        item: Result<watcher::Event<DeserializeGuard<K>>, watcher::Error>,
    ) -> Vec<watcher::Event<K>> {
        let event = match item {
            Ok(event) => event,
            Err(err) => {
                // A failed (re)list starts over: the next list opens with a fresh `Init`.
                self.listing = false;
                return self.on_error(err);
            }
        };
        let mut out = Vec::with_capacity(2);
        if matches!(
            event,
            watcher::Event::InitApply(_) | watcher::Event::InitDone
        ) && !self.listing
        {
            self.listing = true;
            out.push(watcher::Event::Init);
        }
        match event {
            // Held back before the backoff (see `stream`); re-created above.
            watcher::Event::Init => {}
            watcher::Event::InitDone => {
                self.listing = false;
                self.absent_reported = false;
                self.ready.set_ready();
                out.push(watcher::Event::InitDone);
            }
            watcher::Event::InitApply(o) => {
                out.extend(self.object(o).map(watcher::Event::InitApply));
            }
            watcher::Event::Apply(o) => out.extend(self.object(o).map(watcher::Event::Apply)),
            watcher::Event::Delete(o) => out.extend(self.object(o).map(watcher::Event::Delete)),
        }
        out
    }

    fn object(&self, guard: DeserializeGuard<K>) -> Option<K> {
        match guard.0 {
            Ok(mut obj) => {
                if let Some(strip) = &self.strip {
                    strip(&mut obj);
                }
                Some(obj)
            }
            Err(invalid) => {
                tracing::warn!(
                    kind = %self.kind,
                    namespace = invalid.metadata.namespace.as_deref().unwrap_or(""),
                    name = invalid.metadata.name.as_deref().unwrap_or(""),
                    error = %invalid.error,
                    "skipping an object that does not match its schema"
                );
                None
            }
        }
    }

    fn on_error(&mut self, err: watcher::Error) -> Vec<watcher::Event<K>> {
        let code = match &err {
            watcher::Error::InitialListFailed(kube::Error::Api(s))
            | watcher::Error::WatchStartFailed(kube::Error::Api(s))
            | watcher::Error::WatchFailed(kube::Error::Api(s)) => Some(s.code),
            watcher::Error::WatchError(s) => Some(s.code),
            _ => None,
        };
        match code {
            Some(404) if self.absent_is_empty => {
                if self.absent_reported {
                    return Vec::new();
                }
                self.absent_reported = true;
                tracing::warn!(kind = %self.kind, "kind not served (CRD missing?); treating it as empty until it appears");
                self.ready
                    .set_ready_with("kind not served; treated as empty");
                vec![watcher::Event::Init, watcher::Event::InitDone]
            }
            Some(403) => {
                let rule = self.missing_rule();
                tracing::warn!(kind = %self.kind, target = %self.target, error = %err, %rule, "watch forbidden; retrying with backoff");
                self.ready.set_not_ready(&format!("forbidden: {rule}"));
                Vec::new()
            }
            _ if unreachable(&err) => {
                // A kind reported absent before is reported again once the server answers.
                self.absent_reported = false;
                tracing::warn!(kind = %self.kind, target = %self.target, error = %err, "API server unreachable; listing again with backoff");
                self.ready
                    .set_not_ready(&format!("API server unreachable: {}", source_chain(&err)));
                Vec::new()
            }
            _ => {
                tracing::warn!(kind = %self.kind, target = %self.target, error = %err, "watch failed; retrying with backoff");
                Vec::new()
            }
        }
    }

    /// The RBAC rule this watch needs, in the words of a Role.
    fn missing_rule(&self) -> String {
        let (group, plural) = &self.resource;
        let mut rule =
            format!("needs verbs [list, watch] on resource \"{plural}\" in API group \"{group}\"");
        match &self.target.namespace {
            Some(ns) => rule.push_str(&format!(" in namespace \"{ns}\"")),
            None => rule.push_str(" cluster-wide"),
        }
        if let Some(name) = &self.target.name {
            rule.push_str(&format!(" (resourceNames [{name}])"));
        }
        rule
    }
}

/// A coalescing change signal several watches share with one consumer (a singleton loop).
///
/// Every [`Trigger::fire`] counts; the consumer learns how many fires happened since it last
/// looked, so fires are never lost and bursts are cheap.
#[derive(Clone, Debug)]
pub struct Trigger {
    tx: Arc<watch::Sender<u64>>,
}

impl Default for Trigger {
    fn default() -> Self {
        Self::new()
    }
}

impl Trigger {
    /// A new, unfired trigger.
    pub fn new() -> Self {
        Self {
            tx: Arc::new(watch::channel(0).0),
        }
    }

    /// Signals a change.
    pub fn fire(&self) {
        self.tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A stream that yields once per wake-up (fires coalesce), for kube-runtime's
    /// `Controller::reconcile_all_on`.
    pub fn stream(&self) -> impl Stream<Item = ()> + Send + 'static + use<> {
        futures::stream::unfold(self.subscribe(), |mut rx| async move {
            rx.fired().await;
            Some(((), rx))
        })
    }

    /// A receiver for the consumer.
    pub fn subscribe(&self) -> TriggerReceiver {
        let rx = self.tx.subscribe();
        let seen = *rx.borrow();
        TriggerReceiver { rx, seen }
    }
}

/// The consumer side of a [`Trigger`].
#[derive(Debug)]
pub struct TriggerReceiver {
    rx: watch::Receiver<u64>,
    seen: u64,
}

impl TriggerReceiver {
    /// Marks every fire so far as seen (the consumer is about to look at the current state).
    pub fn mark_seen(&mut self) {
        self.seen = *self.rx.borrow_and_update();
    }

    /// Waits for at least one fire and returns how many happened since the last call.
    pub async fn fired(&mut self) -> u64 {
        // The sender lives in every Trigger clone; with none left nothing can fire again.
        if self.rx.wait_for(|n| *n != self.seen).await.is_err() {
            std::future::pending::<()>().await;
        }
        let now = *self.rx.borrow_and_update();
        let fires = now.wrapping_sub(self.seen);
        self.seen = now;
        fires
    }
}

type CacheKey = (Option<String>, String);

/// A relist-and-swap view of one watch, shared by clones; see [`Watch::cache`].
pub struct Cache<K: Watchable> {
    inner: Arc<CacheInner<K>>,
}

impl<K: Watchable> Clone for Cache<K> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

impl<K: Watchable> Debug for Cache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.inner.lock();
        f.debug_struct("Cache")
            .field("target", &*self.inner.target.borrow())
            .field("synced", &state.synced)
            .field("objects", &state.objects.len())
            .finish()
    }
}

struct CacheInner<K> {
    state: Mutex<CacheState<K>>,
    target: watch::Sender<Option<Target>>,
}

impl<K> CacheInner<K> {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState<K>> {
        // A poisoned lock only means a panic elsewhere while holding it; the data stays usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

struct CacheState<K> {
    /// True once the current target's list completed.
    synced: bool,
    objects: BTreeMap<CacheKey, Arc<K>>,
    /// The list in progress (swapped in at its end).
    relist: Option<BTreeMap<CacheKey, Arc<K>>>,
}

impl<K> Default for CacheState<K> {
    fn default() -> Self {
        Self {
            synced: false,
            objects: BTreeMap::new(),
            relist: None,
        }
    }
}

fn key_of<K: Resource>(obj: &K) -> CacheKey {
    let meta = obj.meta();
    (
        meta.namespace.clone(),
        meta.name.clone().unwrap_or_default(),
    )
}

fn resource_version<K: Resource>(obj: &K) -> Option<u64> {
    obj.meta().resource_version.as_deref()?.parse().ok()
}

impl<K: Watchable> Cache<K> {
    /// True once the current target's initial list completed.
    pub fn is_synced(&self) -> bool {
        self.inner.lock().synced
    }

    /// One object.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        self.inner
            .lock()
            .objects
            .get(&(namespace.map(str::to_owned), name.to_owned()))
            .cloned()
    }

    /// Every object, ordered by namespace and name.
    pub fn list(&self) -> Vec<Arc<K>> {
        self.inner.lock().objects.values().cloned().collect()
    }

    /// Records a newer version of an object (our own write, before its watch event arrives). An
    /// older `resourceVersion` than the one held is ignored, so a watch event still in flight
    /// cannot undo the object a write just returned.
    pub fn upsert(&self, obj: K) {
        let key = key_of(&obj);
        let mut state = self.inner.lock();
        if let (Some(old), Some(new)) = (
            state
                .objects
                .get(&key)
                .and_then(|o| resource_version(o.as_ref())),
            resource_version(&obj),
        ) && new < old
        {
            return;
        }
        state.objects.insert(key, Arc::new(obj));
    }

    /// Forgets an object (our own delete).
    pub fn remove(&self, namespace: Option<&str>, name: &str) {
        self.inner
            .lock()
            .objects
            .remove(&(namespace.map(str::to_owned), name.to_owned()));
    }

    /// The current target (`None`: nothing is watched; the view is empty and synced).
    pub fn target(&self) -> Option<Target> {
        self.inner.target.borrow().clone()
    }

    /// Moves the watch to `target`. Returns true when the target changed: the view is then
    /// empty and unsynced until the new initial list completes (which fires the trigger).
    pub fn retarget(&self, target: Option<Target>) -> bool {
        if *self.inner.target.borrow() == target {
            return false;
        }
        {
            let mut state = self.inner.lock();
            state.synced = false;
            state.objects.clear();
            state.relist = None;
        }
        self.inner.target.send_replace(target);
        true
    }

    /// Applies a watch event and fires `trigger` when the view changed, under the state lock: a
    /// consumer that sees the change has also seen the fire (so it never evaluates twice for one
    /// change).
    fn apply(&self, event: watcher::Event<K>, trigger: &Trigger) {
        let mut state = self.inner.lock();
        let changed = match event {
            watcher::Event::Init => {
                state.relist = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(o) => {
                let key = key_of(&o);
                state
                    .relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key, Arc::new(o));
                false
            }
            watcher::Event::InitDone => {
                state.objects = state.relist.take().unwrap_or_default();
                state.synced = true;
                true
            }
            watcher::Event::Apply(o) => {
                state.objects.insert(key_of(&o), Arc::new(o));
                true
            }
            watcher::Event::Delete(o) => {
                state.objects.remove(&key_of(&o));
                true
            }
        };
        if changed {
            trigger.fire();
        }
    }

    fn set_empty_synced(&self, trigger: &Trigger) {
        let mut state = self.inner.lock();
        state.objects.clear();
        state.relist = None;
        state.synced = true;
        trigger.fire();
    }
}

async fn run_cache<K: Watchable>(
    mut watch: Watch<K>,
    cache: Cache<K>,
    mut target: watch::Receiver<Option<Target>>,
    ready: ReadyHandle,
    trigger: Trigger,
    shutdown: Shutdown,
) {
    // The task holds only a weak interest: it ends when every Cache handle is dropped (the target
    // sender lives in the cache) or on shutdown.
    let weak = Arc::downgrade(&cache.inner);
    drop(cache);
    loop {
        let current = target.borrow_and_update().clone();
        let Some(current) = current else {
            let Some(inner) = weak.upgrade() else { return };
            ready.set_ready_with("nothing to watch for this configuration");
            Cache { inner }.set_empty_synced(&trigger);
            tokio::select! {
                _ = shutdown.wait() => return,
                changed = target.changed() => if changed.is_err() { return },
            }
            continue;
        };
        if watch.target != current {
            ready.set_not_ready(&format!("listing {} {current} (moved)", watch.kind()));
        }
        watch.target = current;
        let mut events = std::pin::pin!(watch.events_reporting(ready.clone()));
        loop {
            tokio::select! {
                _ = shutdown.wait() => return,
                changed = target.changed() => {
                    if changed.is_err() { return }
                    break;
                }
                event = events.next() => {
                    let Some(event) = event else { return };
                    let Some(inner) = weak.upgrade() else { return };
                    tracing::trace!(kind = %watch.kind(), event = event_name(&event), "cache event");
                    (Cache { inner }).apply(event, &trigger);
                }
            }
        }
    }
}

fn event_name<K>(event: &watcher::Event<K>) -> &'static str {
    match event {
        watcher::Event::Init => "init",
        watcher::Event::InitApply(_) => "init-apply",
        watcher::Event::InitDone => "init-done",
        watcher::Event::Apply(_) => "apply",
        watcher::Event::Delete(_) => "delete",
    }
}
