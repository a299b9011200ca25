//! Storage form ↔ served form. Objects are stored once per storage key; core/v1 Events are served from
//! the events.k8s.io/v1 store with the field renames upstream's conversion applies.

use serde_json::{Value, json};

use crate::kinds::Kind;

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
