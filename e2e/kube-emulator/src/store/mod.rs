//! Generic object storage and the write pipeline shared by every verb.
//!
//! Submodules follow the stages: [`write`] (create/update pipeline), [`defaults`] (built-in defaulting),
//! [`delete`] (deletion, finalizers, propagation), [`history`] (resource versions and the watch history),
//! [`view`] (storage form ↔ served form) and [`kubelet`] (the emulator's stand-in kubelet).
//!
//! ```text
//! request view ──► identity checks ─► preconditions ─► subresource rules ─► immutables ─► defaults
//!      ─► omitempty normalisation ─► generation ─► managedFields ─► no-op? ─► finalizer completion
//!      ─► (dryRun stops here) ─► rv = ++counter ─► store ─► history + broadcast
//! ```
//! Invariants: one global resourceVersion counter; every persisted change takes the next value and emits
//! exactly one watch event; a write that changes nothing (managedFields timestamps aside) takes no value and
//! emits nothing. Objects are stored in their storage form (events.k8s.io for Events) and converted to the
//! requested view on the way out.

mod defaults;
mod delete;
mod history;
mod kubelet;
mod list;
mod view;
mod write;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::error::ApiError;
use crate::json::meta_str;
use crate::kinds::{self, Kind};
use crate::schema::FieldValidation;
use crate::selector::{FieldSelector, LabelSelector};

pub(crate) use history::Event;
pub(crate) use list::ListOpts;
pub(crate) use view::{from_view, to_view};

/// Per-request options shared by the write verbs.
#[derive(Debug, Clone, Default)]
pub(crate) struct WriteOpts {
    /// `dryRun=All`.
    pub(crate) dry_run: bool,
    /// `fieldManager` (or derived).
    pub(crate) manager: String,
    /// `fieldValidation` (custom resources).
    pub(crate) field_validation: FieldValidation,
}

/// Options of a delete.
#[derive(Debug, Clone, Default)]
pub(crate) struct DeleteOpts {
    /// `dryRun=All`.
    pub(crate) dry_run: bool,
    /// `preconditions.uid`.
    pub(crate) uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub(crate) rv: Option<String>,
    /// `propagationPolicy`.
    pub(crate) propagation: Option<String>,
}

/// What a delete did.
#[derive(Debug)]
pub(crate) enum Deleted {
    /// Removed now; the last state.
    Gone(Value),
    /// Deletion pending (finalizers); the current state.
    Pending(Value),
}

/// The emulator's whole mutable state, behind one mutex.
pub(crate) struct State {
    /// Global resourceVersion counter (last assigned value).
    pub(crate) rv: u64,
    /// Served kinds (built-ins, then CRD-derived).
    pub(crate) kinds: Vec<Arc<Kind>>,
    /// storage key → (namespace, name) → object.
    pub(crate) objects: HashMap<String, BTreeMap<(String, String), Value>>,
    /// Recent events for watches from a resourceVersion.
    pub(crate) history: VecDeque<Arc<Event>>,
    /// Highest resourceVersion evicted from `history`.
    pub(crate) compacted: u64,
    /// Capacity of `history`.
    pub(crate) history_size: usize,
    /// Live event fan-out.
    pub(crate) tx: broadcast::Sender<Arc<Event>>,
    /// Pod logs: (ns, pod, container) → text.
    pub(crate) logs: HashMap<(String, String, String), String>,
    /// `Warning` headers for the current request (unknown fields under `fieldValidation=Warn`).
    pub(crate) warnings: Vec<String>,
    next_cluster_ip: u32,
}

impl State {
    /// Fresh state with the built-in kinds and boot namespaces.
    pub(crate) fn new(history_size: usize) -> Self {
        let (tx, _) = broadcast::channel(16_384);
        let mut st = State {
            rv: 0,
            kinds: kinds::builtins().into_iter().map(Arc::new).collect(),
            objects: HashMap::new(),
            history: VecDeque::new(),
            compacted: 0,
            history_size: history_size.max(1),
            tx,
            logs: HashMap::new(),
            warnings: Vec::new(),
            next_cluster_ip: 1,
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let k = st.kind("", "v1", "namespaces").expect("namespaces");
            let body = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            st.create(
                &k,
                None,
                body,
                &WriteOpts {
                    manager: "kube-apiserver".into(),
                    ..Default::default()
                },
            )
            .expect("boot namespace");
        }
        st
    }

    /// Looks a kind up by group, version and plural.
    pub(crate) fn kind(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Kind>> {
        self.kinds
            .iter()
            .find(|k| k.group == group && k.version == version && k.plural == plural)
            .cloned()
    }

    /// The preferred kind serving a storage key.
    pub(crate) fn kind_for_storage(&self, storage: &str) -> Option<Arc<Kind>> {
        let mut ks = self.kinds.iter().filter(|k| k.storage == storage);
        let first = ks.next()?.clone();
        Some(
            std::iter::once(first.clone())
                .chain(ks.cloned())
                .find(|k| k.preferred && !(k.storage == "events" && k.group.is_empty()))
                .unwrap_or(first),
        )
    }

    /// Rebuilds CRD-derived kinds from the stored CRDs.
    pub(crate) fn rebuild_kinds(&mut self) {
        let mut ks: Vec<Arc<Kind>> = kinds::builtins().into_iter().map(Arc::new).collect();
        let mut gone: Vec<String> = self
            .kinds
            .iter()
            .filter(|k| k.custom)
            .map(|k| k.storage.clone())
            .collect();
        if let Some(crds) = self
            .objects
            .get("apiextensions.k8s.io/customresourcedefinitions")
        {
            for crd in crds.values() {
                for k in kinds::from_crd(crd) {
                    gone.retain(|s| *s != k.storage);
                    ks.push(Arc::new(k));
                }
            }
        }
        self.kinds = ks;
        gone.sort();
        gone.dedup();
        for storage in gone {
            self.objects.remove(&storage);
            // Ends every watch on the resource, as upstream does when a CRD goes away.
            let ev = Arc::new(Event {
                rv: self.rv,
                storage,
                etype: "GONE",
                obj: Value::Null,
                old: None,
            });
            let _ = self.tx.send(ev);
        }
    }

    /// Reads one stored object.
    pub(crate) fn stored(&self, kind: &Kind, ns: Option<&str>, name: &str) -> Option<&Value> {
        self.objects
            .get(&kind.storage)?
            .get(&(ns.unwrap_or_default().to_string(), name.to_string()))
    }

    /// GET.
    pub(crate) fn get(&self, kind: &Kind, ns: Option<&str>, name: &str) -> Result<Value, ApiError> {
        self.stored(kind, ns, name)
            .map(|o| to_view(kind, o))
            .ok_or_else(|| ApiError::not_found(kind, name))
    }

    /// LIST (views) plus the list resourceVersion.
    pub(crate) fn list(
        &self,
        kind: &Kind,
        ns: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
    ) -> Vec<Value> {
        let Some(objs) = self.objects.get(&kind.storage) else {
            return Vec::new();
        };
        objs.iter()
            .filter(|((ons, _), _)| ns.is_none_or(|n| n == ons))
            .map(|(_, o)| to_view(kind, o))
            .filter(|v| labels.matches(v) && fields.matches(v))
            .collect()
    }

    fn namespace_state(&self, ns: &str) -> Option<bool> {
        self.objects
            .get("core/namespaces")
            .and_then(|m| m.get(&(String::new(), ns.to_string())))
            .map(|n| n["metadata"]["deletionTimestamp"].is_string())
    }

    /// A JSON snapshot of every object plus the counter.
    pub(crate) fn snapshot(&self) -> Value {
        let mut objs: Vec<&Value> = self.objects.values().flat_map(|m| m.values()).collect();
        objs.sort_by_key(|o| {
            o["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0)
        });
        json!({"resourceVersion": self.rv, "objects": objs})
    }

    /// Restores a snapshot taken by [`State::snapshot`] (CRDs first, so their kinds exist).
    pub(crate) fn restore(&mut self, snap: &Value) {
        let objs = snap["objects"].as_array().cloned().unwrap_or_default();
        let is_crd = |o: &Value| o["kind"] == "CustomResourceDefinition";
        for o in objs
            .iter()
            .filter(|o| is_crd(o))
            .chain(objs.iter().filter(|o| !is_crd(o)))
        {
            let (group, version) =
                match o["apiVersion"].as_str().unwrap_or_default().split_once('/') {
                    Some((g, v)) => (g.to_string(), v.to_string()),
                    None => (
                        String::new(),
                        o["apiVersion"].as_str().unwrap_or_default().to_string(),
                    ),
                };
            let Some(kind) = self
                .kinds
                .iter()
                .find(|k| k.group == group && k.version == version && k.kind == o["kind"])
                .cloned()
            else {
                continue;
            };
            let key = (
                meta_str(o, "namespace").to_string(),
                meta_str(o, "name").to_string(),
            );
            self.objects
                .entry(kind.storage.clone())
                .or_default()
                .insert(key, o.clone());
            if is_crd(o) {
                self.rebuild_kinds();
            }
        }
        self.rv = self.rv.max(snap["resourceVersion"].as_u64().unwrap_or(0));
        self.compacted = self.rv;
    }
}
