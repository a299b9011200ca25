//! Pure state and decisions: the observed ApplicationDefinition set and what to do with the
//! Deployment. Nothing here talks to the API.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use serde_json::Value;
use std::collections::BTreeMap;

/// The ApplicationDefinitions seen by the watch: `metadata.name` → `spec`.
///
/// A re-list (`Init` … `InitDone`) replaces the set atomically, so deletions missed while the watch
/// was down are reflected too. Until the first `InitDone` the set is not known ([`Self::is_synced`]).
#[derive(Debug, Default)]
pub struct Definitions {
    current: BTreeMap<String, Option<Value>>,
    relist: Option<BTreeMap<String, Option<Value>>>,
    synced: bool,
}

/// What a watch event means for the debounce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Part of a re-list in progress: wait for its end.
    None,
    /// The set (may have) changed: start or extend the debounce.
    Changed,
}

impl Definitions {
    /// Applies one watch event.
    pub fn apply(&mut self, event: watcher::Event<DynamicObject>) -> Change {
        match event {
            watcher::Event::Init => {
                self.relist = Some(BTreeMap::new());
                Change::None
            }
            watcher::Event::InitApply(obj) => {
                let (name, spec) = entry(obj);
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(name, spec);
                Change::None
            }
            watcher::Event::InitDone => {
                self.current = self.relist.take().unwrap_or_default();
                self.synced = true;
                Change::Changed
            }
            watcher::Event::Apply(obj) => {
                let (name, spec) = entry(obj);
                self.current.insert(name, spec);
                Change::Changed
            }
            watcher::Event::Delete(obj) => {
                self.current.remove(&entry(obj).0);
                Change::Changed
            }
        }
    }

    /// True once the first full list arrived; before that no hash may be computed (it would be the
    /// hash of an empty or partial set).
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Number of definitions.
    pub fn len(&self) -> usize {
        self.current.len()
    }

    /// True when there are no definitions.
    pub fn is_empty(&self) -> bool {
        self.current.is_empty()
    }

    /// The config hash of the current set.
    pub fn hash(&self) -> Result<String, appdef::HashError> {
        appdef::config_hash(
            self.current
                .iter()
                .map(|(name, spec)| (name.as_str(), spec.as_ref())),
        )
    }
}

fn entry(obj: DynamicObject) -> (String, Option<Value>) {
    let name = obj.metadata.name.unwrap_or_default();
    let mut data = obj.data;
    let spec = data.get_mut("spec").map(Value::take);
    (name, spec)
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
    fn relist_replaces_the_set_and_marks_it_synced() {
        let mut defs = Definitions::default();
        assert!(!defs.is_synced());
        assert_eq!(defs.apply(watcher::Event::Init), Change::None);
        assert_eq!(
            defs.apply(watcher::Event::InitApply(def("a", "A"))),
            Change::None
        );
        assert!(!defs.is_synced(), "a partial list is not the set");
        assert_eq!(defs.apply(watcher::Event::InitDone), Change::Changed);
        assert!(defs.is_synced());
        let one = defs.hash().unwrap();
        assert_eq!(
            defs.apply(watcher::Event::Apply(def("b", "B"))),
            Change::Changed
        );
        let two = defs.hash().unwrap();
        assert_ne!(one, two);
        // A re-list without `b` (its deletion was missed) drops it.
        defs.apply(watcher::Event::Init);
        defs.apply(watcher::Event::InitApply(def("a", "A")));
        defs.apply(watcher::Event::InitDone);
        assert_eq!((defs.len(), defs.hash().unwrap()), (1, one.clone()));
        defs.apply(watcher::Event::Apply(def("b", "B")));
        defs.apply(watcher::Event::Delete(def("b", "B")));
        assert_eq!(defs.hash().unwrap(), one);
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
