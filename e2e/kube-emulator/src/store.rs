//! Generic object storage and the write pipeline shared by every verb.
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

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use base64::Engine;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::error::{ApiError, details};
use crate::kinds::{self, Kind};
use crate::schema::{self, FieldValidation};
use crate::selector::{FieldSelector, LabelSelector};
use crate::ssa::{self, Scope};

/// One stored change, as kept in the watch history.
#[derive(Debug)]
pub(crate) struct Event {
    /// The resourceVersion of this change.
    pub(crate) rv: u64,
    /// Storage key of the resource.
    pub(crate) storage: String,
    /// ADDED, MODIFIED, DELETED, or GONE (the resource stopped being served).
    pub(crate) etype: &'static str,
    /// The object after the change (storage form).
    pub(crate) obj: Value,
    /// The object before the change.
    pub(crate) old: Option<Value>,
}

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

/// Current time, RFC 3339 with whole seconds.
pub(crate) fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A random v4 UUID.
pub(crate) fn uuid() -> String {
    let b: [u8; 16] = rand::random();
    let h = hex::encode(b);
    format!(
        "{}-{}-4{}-{:x}{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        (b[8] & 0x3) | 0x8,
        &h[17..20],
        &h[20..32]
    )
}

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

fn is_dns_label(s: &str) -> bool {
    s.len() <= 63 && !s.contains('.') && is_dns_subdomain(s)
}

/// Drops empty metadata lists/maps and zero generation, as Go's `omitempty` does.
pub(crate) fn normalize(obj: &mut Value) {
    canonical_numbers(obj);
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.retain(|k, v| match v {
            Value::Null => false,
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !(o.is_empty() && k != "fieldsV1"),
            Value::Number(n) if k == "generation" || k == "deletionGracePeriodSeconds" => {
                k == "deletionGracePeriodSeconds" || n.as_i64() != Some(0)
            }
            Value::String(s) => !s.is_empty(),
            _ => true,
        });
    }
}

/// Rewrites integral floating-point numbers (`0.0`, `5.0`) as integers, as a real API server's JSON round
/// trip does: Go encodes `float64(0)` as `0`, which decodes back as an integer. YAML manifests read by the
/// emulator itself (serde_yaml) would otherwise keep `0.0`, and `0.0 != 0` made identical re-applies look
/// like changes.
pub(crate) fn canonical_numbers(v: &mut Value) {
    match v {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64()
                && f.fract() == 0.0
                && f.abs() < 1e21
                && f >= i64::MIN as f64
                && f <= i64::MAX as f64
            {
                *v = Value::from(f as i64);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(canonical_numbers),
        Value::Object(m) => m.values_mut().for_each(canonical_numbers),
        _ => {}
    }
}

fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    obj["metadata"][field].as_str().unwrap_or_default()
}

fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Core/v1 ↔ events.k8s.io/v1 field names for the shared Event store.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn rename(obj: &mut Value, pairs: impl Iterator<Item = (&'static str, &'static str)>) {
    if let Some(m) = obj.as_object_mut() {
        for (from, to) in pairs {
            if let Some(v) = m.remove(from) {
                m.insert(to.into(), v);
            }
        }
    }
}

/// Stored form → the form the kind's endpoint serves.
pub(crate) fn to_view(kind: &Kind, stored: &Value) -> Value {
    let mut v = stored.clone();
    if kind.storage == "events" && kind.group.is_empty() {
        rename(&mut v, EVENT_FIELDS.iter().map(|(c, e)| (*e, *c)));
    }
    v["apiVersion"] = json!(kind.api_version());
    v["kind"] = json!(kind.kind);
    v
}

/// Served form → stored form.
pub(crate) fn from_view(kind: &Kind, view: &Value) -> Value {
    let mut v = view.clone();
    if kind.storage == "events" && kind.group.is_empty() {
        rename(&mut v, EVENT_FIELDS.iter().copied());
        v["apiVersion"] = json!("events.k8s.io/v1");
    }
    v
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

    fn push_event(&mut self, etype: &'static str, storage: &str, obj: Value, old: Option<Value>) {
        let ev = Arc::new(Event {
            rv: self.rv,
            storage: storage.into(),
            etype,
            obj,
            old,
        });
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_size {
            if let Some(e) = self.history.pop_front() {
                self.compacted = e.rv;
            }
        }
        let _ = self.tx.send(ev);
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

    fn check_identity(&self, kind: &Kind, body: &Value, ns: Option<&str>) -> Result<(), ApiError> {
        let av = body["apiVersion"].as_str().unwrap_or_default();
        let k = body["kind"].as_str().unwrap_or_default();
        if (!av.is_empty() && av != kind.api_version()) || (!k.is_empty() && k != kind.kind) {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                kind.api_version()
            )));
        }
        if let (Some(ns), Some(bns)) = (ns, body["metadata"]["namespace"].as_str())
            && !bns.is_empty()
            && bns != ns
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        Ok(())
    }

    /// POST.
    pub(crate) fn create(
        &mut self,
        kind: &Kind,
        ns: Option<&str>,
        body: Value,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        self.create_inner(kind, ns, body, opts, false)
    }

    /// Create through server-side apply: `body` already carries the Apply managedFields entry.
    pub(crate) fn create_applied(
        &mut self,
        kind: &Kind,
        ns: Option<&str>,
        body: Value,
        opts: &WriteOpts,
    ) -> Result<Value, ApiError> {
        self.create_inner(kind, ns, body, opts, true)
    }

    fn create_inner(
        &mut self,
        kind: &Kind,
        ns: Option<&str>,
        mut body: Value,
        opts: &WriteOpts,
        keep_managed: bool,
    ) -> Result<Value, ApiError> {
        if !body.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be an object",
            ));
        }
        self.check_identity(kind, &body, ns)?;
        body["apiVersion"] = json!(kind.api_version());
        body["kind"] = json!(kind.kind);
        if !body["metadata"].is_object() {
            body["metadata"] = json!({});
        }
        if let Some(ns) = ns {
            match self.namespace_state(ns) {
                None => {
                    return Err(ApiError::new(
                        404,
                        "NotFound",
                        format!("namespaces \"{ns}\" not found"),
                    )
                    .with_details(json!({"name": ns, "kind": "namespaces"})));
                }
                Some(true) => {
                    return Err(ApiError::new(
                        403,
                        "Forbidden",
                        format!("unable to create new content in namespace {ns} because it is being terminated"),
                    )
                    .with_details(json!({"name": body["metadata"]["name"], "group": kind.group, "kind": kind.plural,
                        "causes": [{"reason": "NamespaceTerminating", "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]})));
                }
                Some(false) => {}
            }
            body["metadata"]["namespace"] = json!(ns);
        }
        if kind.custom && self.crd_terminating(kind) {
            return Err(ApiError::new(
                405,
                "MethodNotAllowed",
                "create not allowed while custom resource definition is terminating",
            ));
        }
        let mut name = meta_str(&body, "name").to_string();
        if name.is_empty() {
            let prefix = meta_str(&body, "generateName").to_string();
            if prefix.is_empty() {
                return Err(ApiError::invalid(
                    kind,
                    "",
                    "metadata.name",
                    "Required value: name or generateName is required",
                ));
            }
            loop {
                name = format!("{prefix}{}", random_suffix());
                if self.stored(kind, ns, &name).is_none() {
                    break;
                }
            }
            body["metadata"]["name"] = json!(name);
        }
        let valid = if kind.kind == "Namespace" {
            is_dns_label(&name)
        } else {
            is_dns_subdomain(&name)
        };
        if !valid {
            return Err(ApiError::invalid(
                kind,
                &name,
                "metadata.name",
                &format!(
                    "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
                ),
            ));
        }
        if self.stored(kind, ns, &name).is_some() {
            return Err(ApiError::already_exists(kind, &name));
        }
        if kind.kind == "CustomResourceDefinition" {
            kinds::validate_crd(&body).map_err(|m| ApiError::invalid(kind, &name, "spec", &m))?;
        }
        let now = now();
        {
            let meta = body["metadata"].as_object_mut().expect("metadata");
            meta.insert("uid".into(), json!(uuid()));
            meta.insert("creationTimestamp".into(), json!(now));
            for k in [
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                meta.remove(k);
            }
            if !keep_managed {
                meta.remove("managedFields");
            }
            if kind.tracks_generation {
                meta.insert("generation".into(), json!(1));
            }
        }
        if kind.status_subresource
            && (kind.custom || matches!(kind.kind.as_str(), "Deployment" | "Job"))
            && let Some(m) = body.as_object_mut()
        {
            m.remove("status");
        }
        if kind.custom {
            let w = schema::admit(kind, &mut body, None, false, opts.field_validation)?;
            self.warnings.extend(w);
        }
        self.defaults(kind, &mut body, None);
        if kind.kind == "CustomResourceDefinition" {
            body["status"] = kinds::crd_status(&body, &now);
        }
        normalize(&mut body);
        if !keep_managed {
            ssa::track_update(kind, None, &mut body, &opts.manager, Scope::All, &now);
        }
        normalize(&mut body);
        if opts.dry_run {
            return Ok(body);
        }
        self.rv += 1;
        body["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let stored = from_view(kind, &body);
        self.objects
            .entry(kind.storage.clone())
            .or_default()
            .insert((ns.unwrap_or_default().to_string(), name), stored.clone());
        self.push_event("ADDED", &kind.storage, stored, None);
        if kind.kind == "CustomResourceDefinition" {
            self.rebuild_kinds();
        }
        Ok(body)
    }

    fn crd_terminating(&self, kind: &Kind) -> bool {
        self.objects
            .get("apiextensions.k8s.io/customresourcedefinitions")
            .and_then(|m| m.get(&(String::new(), kind.qualified())))
            .is_some_and(|c| c["metadata"]["deletionTimestamp"].is_string())
    }

    /// Server-side defaulting for the built-in kinds (S8). `old` is the stored view on updates.
    fn defaults(&mut self, kind: &Kind, obj: &mut Value, old: Option<&Value>) {
        if kind.custom {
            return;
        }
        let create = old.is_none();
        match kind.kind.as_str() {
            "Secret" => {
                if let Some(sd) = obj.as_object_mut().and_then(|m| m.remove("stringData"))
                    && let Some(sd) = sd.as_object()
                {
                    for (k, v) in sd {
                        let enc = base64::engine::general_purpose::STANDARD
                            .encode(v.as_str().unwrap_or_default());
                        obj["data"][k] = json!(enc);
                    }
                }
                if obj["type"].is_null() {
                    obj["type"] = json!("Opaque");
                }
            }
            "Namespace" => {
                if obj["spec"]["finalizers"].is_null() {
                    obj["spec"]["finalizers"] = json!(["kubernetes"]);
                }
                if create || obj["status"]["phase"].is_null() {
                    obj["status"]["phase"] = json!("Active");
                }
            }
            "Pod" => {
                let spec = &mut obj["spec"];
                for (k, v) in [
                    ("restartPolicy", json!("Always")),
                    ("dnsPolicy", json!("ClusterFirst")),
                    ("terminationGracePeriodSeconds", json!(30)),
                    ("schedulerName", json!("default-scheduler")),
                ] {
                    if spec[k].is_null() {
                        spec[k] = v;
                    }
                }
                if let Some(cs) = spec["containers"].as_array_mut() {
                    for c in cs {
                        if c["imagePullPolicy"].is_null() {
                            let img = c["image"].as_str().unwrap_or_default();
                            let latest = img.ends_with(":latest")
                                || !img.rsplit('/').next().unwrap_or("").contains(':');
                            c["imagePullPolicy"] =
                                json!(if latest { "Always" } else { "IfNotPresent" });
                        }
                    }
                }
                if create {
                    obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
                }
            }
            "PersistentVolumeClaim" => {
                if obj["spec"]["volumeMode"].is_null() {
                    obj["spec"]["volumeMode"] = json!("Filesystem");
                }
                if create {
                    obj["status"] = json!({"phase": "Pending"});
                }
            }
            "Service" => {
                let spec = &mut obj["spec"];
                if spec["type"].is_null() {
                    spec["type"] = json!("ClusterIP");
                }
                if spec["sessionAffinity"].is_null() {
                    spec["sessionAffinity"] = json!("None");
                }
                if spec["clusterIP"].is_null() && spec["type"] != "ExternalName" {
                    let ip = match old.and_then(|o| o["spec"]["clusterIP"].as_str()) {
                        Some(ip) => ip.to_string(),
                        None => {
                            let n = self.next_cluster_ip;
                            self.next_cluster_ip += 1;
                            format!("10.96.{}.{}", n / 250, n % 250 + 1)
                        }
                    };
                    spec["clusterIP"] = json!(ip);
                }
                if spec["clusterIPs"].is_null() && spec["clusterIP"].is_string() {
                    spec["clusterIPs"] = json!([spec["clusterIP"].clone()]);
                }
                if let Some(ports) = spec["ports"].as_array_mut() {
                    for p in ports {
                        if p["protocol"].is_null() {
                            p["protocol"] = json!("TCP");
                        }
                        if p["targetPort"].is_null() {
                            p["targetPort"] = p["port"].clone();
                        }
                    }
                }
            }
            "Deployment" => {
                let spec = &mut obj["spec"];
                if spec["replicas"].is_null() {
                    spec["replicas"] = json!(1);
                }
                if spec["strategy"].is_null() {
                    spec["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}});
                }
                if spec["revisionHistoryLimit"].is_null() {
                    spec["revisionHistoryLimit"] = json!(10);
                }
                if spec["progressDeadlineSeconds"].is_null() {
                    spec["progressDeadlineSeconds"] = json!(600);
                }
            }
            "Job" => {
                let spec = &mut obj["spec"];
                for (k, v) in [("backoffLimit", 6), ("completions", 1), ("parallelism", 1)] {
                    if spec[k].is_null() {
                        spec[k] = json!(v);
                    }
                }
            }
            _ => {}
        }
    }

    /// The shared tail of PUT, PATCH and apply: `new` is the requested view, `old` the stored view.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn write(
        &mut self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        old: Value,
        mut new: Value,
        scope: Scope,
        opts: &WriteOpts,
        put: bool,
        managed_by_apply: bool,
    ) -> Result<Value, ApiError> {
        if !new.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request must be an object",
            ));
        }
        self.check_identity(kind, &new, ns)?;
        let body_name = meta_str(&new, "name");
        if !body_name.is_empty() && body_name != name {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({body_name}) does not match the name on the URL ({name})"
            )));
        }
        // An RV in the body is a precondition; without one, only built-in PUTs are unconditional.
        let body_rv = new["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or_default();
        match body_rv.is_empty() {
            false if body_rv != meta_str(&old, "resourceVersion") => {
                return Err(ApiError::conflict(kind, name));
            }
            true if put && kind.custom => {
                return Err(ApiError::invalid(
                    kind,
                    name,
                    "metadata.resourceVersion",
                    "Invalid value: 0x0: must be specified for an update",
                ));
            }
            _ => {}
        }
        new["apiVersion"] = json!(kind.api_version());
        new["kind"] = json!(kind.kind);
        if scope == Scope::StatusOnly {
            let mut n = old.clone();
            match new.get("status") {
                Some(s) => n["status"] = s.clone(),
                None => {
                    n.as_object_mut().map(|m| m.remove("status"));
                }
            }
            n["metadata"]["managedFields"] = new["metadata"]["managedFields"].clone();
            new = n;
        } else if kind.status_subresource {
            match old.get("status") {
                Some(s) => new["status"] = s.clone(),
                None => {
                    new.as_object_mut().map(|m| m.remove("status"));
                }
            }
        }
        if !new["metadata"].is_object() {
            new["metadata"] = json!({});
        }
        for k in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "resourceVersion",
            "name",
            "namespace",
        ] {
            match old["metadata"].get(k) {
                Some(v) => new["metadata"][k] = v.clone(),
                None => {
                    new["metadata"].as_object_mut().map(|m| m.remove(k));
                }
            }
        }
        if !managed_by_apply {
            new["metadata"]["managedFields"] = old["metadata"]["managedFields"].clone();
        }
        if old["metadata"]["deletionTimestamp"].is_string() {
            let before = finalizers(&old);
            if finalizers(&new).iter().any(|f| !before.contains(f)) {
                return Err(ApiError::invalid(
                    kind,
                    name,
                    "metadata.finalizers",
                    "Forbidden: no new finalizers can be added if the object is being deleted",
                ));
            }
        }
        if kind.custom {
            let w = schema::admit(
                kind,
                &mut new,
                Some(&old),
                scope == Scope::StatusOnly,
                opts.field_validation,
            )?;
            self.warnings.extend(w);
        }
        self.defaults(kind, &mut new, Some(&old));
        if kind.kind == "CustomResourceDefinition" {
            kinds::validate_crd(&new).map_err(|m| ApiError::invalid(kind, name, "spec", &m))?;
            new["status"] = kinds::crd_status(&new, &now());
        }
        normalize(&mut new);
        if kind.tracks_generation {
            let strip = |v: &Value| {
                let mut v = v.clone();
                if let Some(m) = v.as_object_mut() {
                    m.remove("metadata");
                    if kind.status_subresource {
                        m.remove("status");
                    }
                }
                v
            };
            if strip(&old) != strip(&new) {
                let g = old["metadata"]["generation"].as_i64().unwrap_or(0);
                new["metadata"]["generation"] = json!(g + 1);
            }
        }
        let now = now();
        if !managed_by_apply {
            ssa::track_update(kind, Some(&old), &mut new, &opts.manager, scope, &now);
        }
        normalize(&mut new);
        if ssa::without_times(&new) == ssa::without_times(&old) {
            return Ok(old);
        }
        if opts.dry_run {
            return Ok(new);
        }
        let stored_old = from_view(kind, &old);
        self.rv += 1;
        new["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let key = (ns.unwrap_or_default().to_string(), name.to_string());
        let stored = from_view(kind, &new);
        let spec_fins_done = kind.kind != "Namespace"
            || new["spec"]["finalizers"]
                .as_array()
                .is_none_or(|a| a.is_empty());
        if new["metadata"]["deletionTimestamp"].is_string()
            && finalizers(&new).is_empty()
            && spec_fins_done
        {
            self.objects
                .entry(kind.storage.clone())
                .or_default()
                .remove(&key);
            self.push_event("DELETED", &kind.storage, stored, Some(stored_old));
        } else {
            self.objects
                .entry(kind.storage.clone())
                .or_default()
                .insert(key, stored.clone());
            self.push_event("MODIFIED", &kind.storage, stored, Some(stored_old));
        }
        if kind.kind == "CustomResourceDefinition" {
            self.rebuild_kinds();
        }
        Ok(new)
    }

    /// DELETE of one object.
    pub(crate) fn delete(
        &mut self,
        kind: &Kind,
        ns: Option<&str>,
        name: &str,
        opts: &DeleteOpts,
    ) -> Result<Deleted, ApiError> {
        let old = self
            .stored(kind, ns, name)
            .cloned()
            .ok_or_else(|| ApiError::not_found(kind, name))?;
        let view = to_view(kind, &old);
        if let Some(uid) = &opts.uid
            && uid != meta_str(&old, "uid")
        {
            return Err(ApiError::new(409, "Conflict", format!(
                    "Operation cannot be fulfilled on {} \"{name}\": Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                    kind.qualified(), meta_str(&old, "uid"))).with_details(details(kind, name)));
        }
        if let Some(rv) = &opts.rv
            && rv != meta_str(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(kind, name));
        }
        if kind.kind == "Namespace" && matches!(name, "default" | "kube-system" | "kube-public") {
            return Err(ApiError::new(
                403,
                "Forbidden",
                format!("namespaces \"{name}\" is forbidden: this namespace may not be deleted"),
            )
            .with_details(details(kind, name)));
        }
        if view["metadata"]["deletionTimestamp"].is_string() {
            return Ok(Deleted::Pending(view));
        }
        let mut fins = finalizers(&view);
        match opts.propagation.as_deref() {
            Some("Foreground") if self.has_dependents(meta_str(&old, "uid")) => {
                fins.push("foregroundDeletion".into())
            }
            Some("Orphan") if self.has_dependents(meta_str(&old, "uid")) => {
                fins.push("orphan".into())
            }
            _ => {}
        }
        if kind.kind == "CustomResourceDefinition" {
            fins.push("customresourcecleanup.apiextensions.k8s.io".into());
        }
        let namespace = kind.kind == "Namespace";
        if !fins.is_empty() || namespace {
            let mut new = view.clone();
            new["metadata"]["deletionTimestamp"] = json!(now());
            new["metadata"]["deletionGracePeriodSeconds"] = json!(0);
            if !fins.is_empty() {
                new["metadata"]["finalizers"] = json!(fins);
            }
            if namespace {
                new["status"]["phase"] = json!("Terminating");
            }
            if kind.kind == "CustomResourceDefinition"
                && let Some(cs) = new["status"]["conditions"].as_array_mut()
            {
                cs.push(json!({"type": "Terminating", "status": "True", "reason": "InstanceDeletionInProgress",
                        "message": "CustomResource deletion is in progress", "lastTransitionTime": now()}));
            }
            if opts.dry_run {
                return Ok(Deleted::Pending(new));
            }
            self.rv += 1;
            new["metadata"]["resourceVersion"] = json!(self.rv.to_string());
            let stored = from_view(kind, &new);
            self.objects
                .entry(kind.storage.clone())
                .or_default()
                .insert((ns.unwrap_or_default().into(), name.into()), stored.clone());
            self.push_event("MODIFIED", &kind.storage, stored, Some(old));
            return Ok(Deleted::Pending(new));
        }
        if opts.dry_run {
            return Ok(Deleted::Gone(view));
        }
        Ok(Deleted::Gone(self.remove_now(kind, ns, name)))
    }

    /// Removes an object immediately (no finalizer check); returns its last view.
    pub(crate) fn remove_now(&mut self, kind: &Kind, ns: Option<&str>, name: &str) -> Value {
        let key = (ns.unwrap_or_default().to_string(), name.to_string());
        let Some(old) = self
            .objects
            .get_mut(&kind.storage)
            .and_then(|m| m.remove(&key))
        else {
            return Value::Null;
        };
        self.rv += 1;
        let mut last = old.clone();
        last["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        self.push_event("DELETED", &kind.storage, last.clone(), Some(old));
        if kind.kind == "CustomResourceDefinition" {
            self.rebuild_kinds();
        }
        if kind.kind == "Pod" {
            self.logs
                .retain(|(lns, p, _), _| !(lns == ns.unwrap_or_default() && p == name));
        }
        to_view(kind, &last)
    }

    /// Whether any object names `uid` as an owner.
    pub(crate) fn has_dependents(&self, uid: &str) -> bool {
        self.objects.values().flat_map(|m| m.values()).any(|o| {
            o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|r| r["uid"] == uid))
        })
    }

    /// The status body upstream answers for an immediate delete.
    pub(crate) fn delete_status(kind: &Kind, obj: &Value) -> Value {
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": {"name": obj["metadata"]["name"], "group": kind.group, "kind": kind.plural,
                        "uid": obj["metadata"]["uid"]}})
    }

    /// Strips the named finalizer from a stored object through the normal write path.
    pub(crate) fn remove_finalizer(
        &mut self,
        storage: &str,
        ns: &str,
        name: &str,
        finalizer: &str,
    ) {
        let Some(kind) = self.kind_for_storage(storage) else {
            return;
        };
        let nsopt = (!ns.is_empty()).then_some(ns);
        let Some(old) = self.stored(&kind, nsopt, name).map(|o| to_view(&kind, o)) else {
            return;
        };
        let mut new = old.clone();
        let fins: Vec<String> = finalizers(&old)
            .into_iter()
            .filter(|f| f != finalizer)
            .collect();
        new["metadata"]["finalizers"] = json!(fins);
        let opts = WriteOpts {
            dry_run: false,
            manager: "kube-controller-manager".into(),
            field_validation: FieldValidation::Ignore,
        };
        let _ = self.write(
            &kind,
            nsopt,
            name,
            old,
            new,
            Scope::All,
            &opts,
            false,
            false,
        );
    }

    /// Sets the log text of a pod container and marks the pod Running (the emulator's stand-in kubelet).
    pub(crate) fn set_pod_log(
        &mut self,
        ns: &str,
        pod: &str,
        container: Option<&str>,
        text: &str,
        append: bool,
    ) -> Result<(), ApiError> {
        let kind = self.kind("", "v1", "pods").expect("pods");
        let old = self.get(&kind, Some(ns), pod)?;
        let containers: Vec<String> = old["spec"]["containers"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let container = match container {
            Some(c) => c.to_string(),
            None => containers.first().cloned().unwrap_or_default(),
        };
        let entry = self
            .logs
            .entry((ns.into(), pod.into(), container))
            .or_default();
        if append {
            entry.push_str(text);
        } else {
            *entry = text.to_string();
        }
        if old["status"]["phase"] != "Running" {
            let mut new = old.clone();
            let started = now();
            new["status"]["phase"] = json!("Running");
            new["status"]["containerStatuses"] = Value::Array(
                containers
                    .iter()
                    .map(|c| {
                        json!({
                "name": c, "ready": true, "restartCount": 0, "image": "", "imageID": "",
                "state": {"running": {"startedAt": started}}})
                    })
                    .collect(),
            );
            let opts = WriteOpts {
                dry_run: false,
                manager: "kubelet".into(),
                field_validation: FieldValidation::Ignore,
            };
            self.write(
                &kind,
                Some(ns),
                pod,
                old,
                new,
                Scope::StatusOnly,
                &opts,
                false,
                false,
            )?;
        }
        Ok(())
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
