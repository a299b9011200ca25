//! Pure state and decisions: the observed ApplicationDefinition set and what to do with the
//! Deployment. Nothing here talks to the API.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::DynamicObject;
use serde_json::Value;

/// The config hash of the definitions a cache holds (`metadata.name` and `spec` of each).
pub fn hash_of(definitions: &[Arc<DynamicObject>]) -> Result<String, appdef::HashError> {
    appdef::config_hash(
        definitions
            .iter()
            .map(|d| (d.metadata.name.as_deref().unwrap_or(""), d.data.get("spec"))),
    )
}

/// What is wrong with a definition's `spec.application.openAPISchema`, if anything: cozystack-api
/// reads it as a JSON object when it registers the kind, so an empty string, text that is not
/// JSON or JSON that is not an object cannot be served. The hash (upstream's contract) covers it
/// all the same; this only names the problem.
pub fn schema_problem(definition: &DynamicObject) -> Option<String> {
    let schema = &definition.data["spec"]["application"]["openAPISchema"];
    let text = schema.as_str()?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(_)) => None,
        Ok(other) => Some(format!(
            "is JSON but not an object ({})",
            match other {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                _ => "null",
            }
        )),
        Err(e) if text.trim().is_empty() => Some(format!("is empty ({e})")),
        Err(e) => Some(format!("is not valid JSON: {e}")),
    }
}

/// The pod-template annotation `key` of a Deployment, if set.
pub fn template_annotation<'a>(deployment: &'a Deployment, key: &str) -> Option<&'a str> {
    deployment
        .spec
        .as_ref()?
        .template
        .metadata
        .as_ref()?
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

/// What to do with the Deployment after the set settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The Deployment does not exist (yet): wait for its watch event.
    WaitForDeployment,
    /// The annotation already holds the hash: no write.
    Skip,
    /// Write the hash (the annotation is missing, empty or different).
    Patch {
        /// The annotation's current value.
        from: Option<String>,
    },
}

/// Upstream's rule: skip only when the annotation equals the desired hash and is not empty.
pub fn decide(desired: &str, deployment: Option<&Deployment>, key: &str) -> Decision {
    let Some(deployment) = deployment else {
        return Decision::WaitForDeployment;
    };
    match template_annotation(deployment, key) {
        Some(current) if current == desired && !current.is_empty() => Decision::Skip,
        other => Decision::Patch {
            from: other.map(str::to_owned),
        },
    }
}

/// The JSON merge patch that sets the annotation, with the observed `resourceVersion` as an
/// optimistic precondition (a concurrent writer makes it fail with 409 instead of racing).
pub fn annotation_patch(key: &str, hash: &str, resource_version: Option<&str>) -> Value {
    let mut patch = serde_json::json!({
        "spec": {"template": {"metadata": {"annotations": {key: hash}}}}
    });
    if let Some(rv) = resource_version {
        patch["metadata"] = serde_json::json!({ "resourceVersion": rv });
    }
    patch
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const KEY: &str = "cozystack.io/config-hash";

    fn def(name: &str, kind: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
            "metadata": {"name": name, "labels": {"x": name}},
            "spec": {"application": {"kind": kind}}
        }))
        .unwrap()
    }

    fn deployment(annotation: Option<&str>) -> Deployment {
        let annotations = annotation.map(|a| json!({ KEY: a, "other": "kept" }));
        serde_json::from_value(json!({
            "metadata": {"name": "cozystack-api", "namespace": "cozy-system"},
            "spec": {"selector": {}, "template": {"metadata": {"annotations": annotations}}}
        }))
        .unwrap()
    }

    #[test]
    fn schema_problems_are_named() {
        let with = |schema: serde_json::Value| {
            let mut d = def("x", "X");
            d.data["spec"]["application"]["openAPISchema"] = schema;
            schema_problem(&d)
        };
        assert_eq!(with(json!("{\"type\":\"object\"}")), None);
        assert_eq!(with(json!(null)), None);
        assert!(with(json!("")).unwrap().starts_with("is empty"));
        assert!(
            with(json!("{not json"))
                .unwrap()
                .starts_with("is not valid JSON: ")
        );
        assert_eq!(
            with(json!("[1,2]")).as_deref(),
            Some("is JSON but not an object (an array)")
        );
    }

    #[test]
    fn the_hash_covers_names_and_specs_only() {
        let one = hash_of(&[Arc::new(def("a", "A"))]).unwrap();
        let mut relabelled = def("a", "A");
        relabelled.metadata.labels = None;
        assert_eq!(hash_of(&[Arc::new(relabelled)]).unwrap(), one);
        let two = hash_of(&[Arc::new(def("a", "A")), Arc::new(def("b", "B"))]).unwrap();
        assert_ne!(one, two);
        assert_ne!(hash_of(&[Arc::new(def("a", "B"))]).unwrap(), one);
    }

    #[test]
    fn decisions_follow_upstream_rules() {
        let h = "abc";
        assert_eq!(decide(h, None, KEY), Decision::WaitForDeployment);
        assert_eq!(decide(h, Some(&deployment(Some(h))), KEY), Decision::Skip);
        assert_eq!(
            decide(h, Some(&deployment(Some("old"))), KEY),
            Decision::Patch {
                from: Some("old".into())
            }
        );
        assert_eq!(
            decide(h, Some(&deployment(None)), KEY),
            Decision::Patch { from: None }
        );
        // An empty annotation is never "equal": upstream writes when old is empty.
        assert_eq!(
            decide("", Some(&deployment(Some(""))), KEY),
            Decision::Patch {
                from: Some(String::new())
            }
        );
    }

    #[test]
    fn patch_sets_only_the_annotation_with_a_precondition() {
        assert_eq!(
            annotation_patch(KEY, "h1", Some("42")),
            json!({"metadata": {"resourceVersion": "42"},
                   "spec": {"template": {"metadata": {"annotations": {KEY: "h1"}}}}})
        );
        assert_eq!(
            annotation_patch(KEY, "h1", None),
            json!({"spec": {"template": {"metadata": {"annotations": {KEY: "h1"}}}}})
        );
    }
}
