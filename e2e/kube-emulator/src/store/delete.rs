//! Deletion: preconditions, finalizers and `deletionTimestamp`, propagation policies, immediate removal,
//! and the finalizer release the bundled controllers use.

use serde_json::{Value, json};

use super::{DeleteOpts, Deleted, State, WriteOpts, from_view, to_view};
use crate::error::{ApiError, details};
use crate::json::{finalizers, meta_str, now};
use crate::kinds::Kind;
use crate::schema::FieldValidation;
use crate::ssa::Scope;

impl State {
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
}
