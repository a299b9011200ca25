//! The create and update pipeline (POST, PUT, PATCH and apply all end here): identity checks,
//! preconditions, subresource rules, immutables, admission of custom resources, defaults, omitempty
//! normalisation, generation, managedFields, no-op detection and finalizer completion.

use serde_json::{Value, json};

use super::{State, WriteOpts, from_view};
use crate::error::{ApiError, FieldError, details, invalid_error};
use crate::json::{finalizers, meta_str, normalize, now, uuid};
use crate::kinds::{self, Kind};
use crate::schema;
use crate::ssa::{self, Scope};
use crate::validation;

fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| ALPHABET[rand::random_range(0..ALPHABET.len())] as char)
        .collect()
}

impl State {
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
                    // The NamespaceLifecycle admission plugin: a Forbidden about the resource, with the
                    // NamespaceTerminating cause.
                    let name = meta_str(&body, "name");
                    let subject = if name.is_empty() {
                        kind.qualified()
                    } else {
                        format!("{} \"{name}\"", kind.qualified())
                    };
                    let mut d = details(kind, name);
                    d["causes"] = json!([{"reason": "NamespaceTerminating",
                        "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]);
                    return Err(ApiError::new(
                        403,
                        "Forbidden",
                        format!("{subject} is forbidden: unable to create new content in namespace {ns} because it is being terminated"),
                    )
                    .with_details(d));
                }
                Some(false) => {}
            }
            body["metadata"]["namespace"] = json!(ns);
        } else if let Some(m) = body["metadata"].as_object_mut() {
            // A cluster-scoped object has no namespace, whatever the body says.
            m.remove("namespace");
        }
        validation::decode(kind, &mut body)?;
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
            // Upstream's name generator keeps at most 58 characters of the prefix, so that the generated
            // name fits in 63.
            let base: String = prefix.chars().take(58).collect();
            loop {
                name = format!("{base}{}", random_suffix());
                if self.stored(kind, ns, &name).is_none() {
                    break;
                }
            }
            body["metadata"]["name"] = json!(name);
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
        let mut schema_errs = Vec::new();
        if kind.custom {
            let (w, e) = schema::admit(kind, &mut body, None, false, opts.field_validation)?;
            self.warnings.extend(w);
            schema_errs = e;
        }
        self.defaults(kind, &mut body, None);
        let mut errs = validation::validate(kind, &body, None, false);
        errs.extend(schema_errs);
        if !errs.is_empty() {
            return Err(invalid_error(kind, &name, &errs));
        }
        if self.stored(kind, ns, &name).is_some() {
            return Err(ApiError::already_exists(kind, &name));
        }
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
        validation::decode(kind, &mut new)?;
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
            let mut added: Vec<String> = finalizers(&new)
                .into_iter()
                .filter(|f| !before.contains(f))
                .collect();
            if !added.is_empty() {
                added.sort();
                added.dedup();
                return Err(invalid_error(
                    kind,
                    name,
                    &[FieldError::forbidden(
                        "metadata.finalizers",
                        &format!(
                            "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                            validation::go_strings(&added)
                        ),
                    )],
                ));
            }
        }
        let mut schema_errs = Vec::new();
        if kind.custom {
            let (w, e) = schema::admit(
                kind,
                &mut new,
                Some(&old),
                scope == Scope::StatusOnly,
                opts.field_validation,
            )?;
            self.warnings.extend(w);
            schema_errs = e;
        }
        self.defaults(kind, &mut new, Some(&old));
        let mut errs = validation::validate(kind, &new, Some(&old), scope == Scope::StatusOnly);
        errs.extend(schema_errs);
        if !errs.is_empty() {
            return Err(invalid_error(kind, name, &errs));
        }
        if kind.kind == "CustomResourceDefinition" {
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
            // The Deployment strategy also counts annotation changes, because the controller copies
            // annotations to the ReplicaSets it creates.
            let annotations_changed = kind.kind == "Deployment"
                && kind.group == "apps"
                && old["metadata"]["annotations"] != new["metadata"]["annotations"];
            if strip(&old) != strip(&new) || annotations_changed {
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
}
