//! Status helpers the simpler simulators share: `metav1.Condition` lists kept with
//! `meta.SetStatusCondition` semantics, the test-control annotations, a status merge patch that
//! records the simulator's own write in its cache (so the next pass does not repeat it), and a
//! whole-status replacement (the merge patch that nulls what the new status lacks).

use std::collections::BTreeMap;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::cache::Cache;

/// The current time as Kubernetes objects carry it (RFC 3339, whole seconds, UTC).
pub fn now() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `conditions` with `cond` set by type: `lastTransitionTime` moves only when the status flips.
/// `None` when nothing would change.
pub fn with_condition(conditions: &Value, cond: Value, now: &str) -> Option<Vec<Value>> {
    let mut list: Vec<Value> = conditions.as_array().cloned().unwrap_or_default();
    match list.iter_mut().find(|c| c["type"] == cond["type"]) {
        Some(c) => {
            if ["status", "reason", "message"]
                .iter()
                .all(|k| c[*k] == cond[*k])
            {
                return None;
            }
            let transition = if c["status"] == cond["status"] {
                c["lastTransitionTime"].clone()
            } else {
                json!(now)
            };
            *c = cond;
            c["lastTransitionTime"] = transition;
        }
        None => {
            let mut c = cond;
            c["lastTransitionTime"] = json!(now);
            list.push(c);
        }
    }
    Some(list)
}

/// A condition value.
pub fn condition(type_: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "reason": reason,
        "message": message,
    })
}

/// The annotations of an object (empty when none).
pub fn annotations(obj: &Value) -> BTreeMap<String, String> {
    obj["metadata"]["annotations"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// Merge-patches `status` of `namespace/name` as `field_manager`, recording the result in `cache`.
pub async fn patch_status(
    client: &kube::Client,
    resource: &ApiResource,
    cache: &Cache,
    field_manager: &str,
    namespace: &str,
    name: &str,
    status: Value,
) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    let params = PatchParams {
        field_manager: Some(field_manager.into()),
        ..Default::default()
    };
    match api
        .patch_status(name, &params, &Patch::Merge(&json!({ "status": status })))
        .await
    {
        Ok(updated) => {
            if let Ok(v) = serde_json::to_value(updated) {
                cache.insert(v);
            }
        }
        Err(e) => {
            tracing::debug!(namespace, name, kind = %resource.kind, error = %e, "status update failed")
        }
    }
}

/// The JSON merge patch that turns `current` into `desired` (keys `desired` lacks are nulled).
pub fn merge_patch_to(current: &Value, desired: &Value) -> Value {
    match (current, desired) {
        (Value::Object(c), Value::Object(d)) => {
            let mut out = serde_json::Map::new();
            for k in c.keys().filter(|k| !d.contains_key(*k)) {
                out.insert(k.clone(), Value::Null);
            }
            for (k, v) in d {
                match c.get(k) {
                    Some(cv) if cv == v => {}
                    Some(cv) if cv.is_object() && v.is_object() => {
                        out.insert(k.clone(), merge_patch_to(cv, v));
                    }
                    _ => {
                        out.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(out)
        }
        _ => desired.clone(),
    }
}

/// Replaces the status of `obj` with `status` (one merge patch on the status subresource).
pub async fn write_status(
    client: &kube::Client,
    resource: &ApiResource,
    field_manager: &str,
    obj: &Value,
    status: Value,
) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, resource);
    let params = PatchParams {
        field_manager: Some(field_manager.into()),
        ..Default::default()
    };
    let current = match &obj["status"] {
        Value::Object(_) => obj["status"].clone(),
        _ => json!({}),
    };
    let patch = json!({"status": merge_patch_to(&current, &status)});
    match api.patch_status(name, &params, &Patch::Merge(&patch)).await {
        Ok(_) => tracing::info!(kind = %resource.kind, namespace = ns, name, "status updated"),
        Err(e) => {
            tracing::warn!(kind = %resource.kind, namespace = ns, name, error = %e, "status update failed")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patches_remove_what_the_new_status_lacks() {
        let current = json!({"a": 1, "b": {"x": 1, "y": 2}, "c": [1]});
        let desired = json!({"b": {"x": 1, "z": 3}, "c": [2]});
        assert_eq!(
            merge_patch_to(&current, &desired),
            json!({"a": null, "b": {"y": null, "z": 3}, "c": [2]})
        );
    }

    #[test]
    fn conditions_keep_their_transition_time_until_the_status_flips() {
        let first = with_condition(
            &Value::Null,
            condition("Complete", false, "JobRunning", "Running"),
            "t1",
        )
        .unwrap();
        assert_eq!(first[0]["lastTransitionTime"], "t1");
        let list = json!(first);
        assert_eq!(
            with_condition(
                &list,
                condition("Complete", false, "JobRunning", "Running"),
                "t2"
            ),
            None
        );
        let same_status = with_condition(
            &list,
            condition("Complete", false, "Failed", "MariaDB not found"),
            "t2",
        )
        .unwrap();
        assert_eq!(same_status[0]["lastTransitionTime"], "t1");
        let flipped = with_condition(
            &list,
            condition("Complete", true, "JobComplete", "Success"),
            "t3",
        )
        .unwrap();
        assert_eq!(flipped[0]["lastTransitionTime"], "t3");
        assert_eq!(flipped.len(), 1);
    }
}
