//! Server-side apply and `managedFields` bookkeeping (a compact model of structured-merge-diff).
//!
//! A field set is a set of paths; each path segment uses the FieldsV1 spelling (`f:name`, `k:{"type":"Ready"}`
//! for list-map elements, `v:"x"` for set members), so sets convert to and from `fieldsV1` losslessly.
//!
//! ```text
//! apply(live, config, manager):
//!   conflicts = fields in config owned by another manager with a different live value  (409 unless force)
//!   live     -= fields this manager applied last time, dropped now, and nobody else owns
//!   live      = merge(live, config)       maps recurse, list-maps merge by key, sets union, rest replace
//!   managedFields[manager, Apply] = fields(config)
//! update(old, new, manager):  managers lose the fields that changed; manager/Update gains them
//! ```

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::kinds::{Kind, ListType, list_type};

type Path = Vec<String>;
/// A set of field paths.
pub(crate) type FieldSet = BTreeSet<Path>;

/// Which part of the object a write may touch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Scope {
    /// The whole object (no status subresource).
    All,
    /// Only `.status` (the `/status` subresource).
    StatusOnly,
    /// Everything but `.status` (main resource of a kind with a status subresource).
    NoStatus,
}

const SKIP_META: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "selfLink",
    "generateName",
];

fn key_segment(elem: &Value, keys: &[String]) -> String {
    let mut m = Map::new();
    let mut sorted: Vec<&String> = keys.iter().collect();
    sorted.sort();
    for k in sorted {
        m.insert(k.clone(), elem.get(k).cloned().unwrap_or(Value::Null));
    }
    format!("k:{}", Value::Object(m))
}

/// The field set a value claims.
pub(crate) fn fields_of(kind: &Kind, obj: &Value, scope: Scope) -> FieldSet {
    let mut out = FieldSet::new();
    if let Some(m) = obj.as_object() {
        for (k, v) in m {
            if k == "apiVersion" || k == "kind" {
                continue;
            }
            match (scope, k.as_str()) {
                (Scope::StatusOnly, s) if s != "status" => continue,
                (Scope::NoStatus, "status") => continue,
                _ => {}
            }
            let mut prefix = vec![format!("f:{k}")];
            let mut names = vec![k.clone()];
            if k == "metadata" {
                if let Some(meta) = v.as_object() {
                    for (mk, mv) in meta {
                        if SKIP_META.contains(&mk.as_str()) {
                            continue;
                        }
                        prefix.push(format!("f:{mk}"));
                        names.push(mk.clone());
                        collect(kind, mv, &mut names, &mut prefix, &mut out);
                        prefix.pop();
                        names.pop();
                    }
                }
                continue;
            }
            collect(kind, v, &mut names, &mut prefix, &mut out);
        }
    }
    out
}

fn collect(kind: &Kind, v: &Value, names: &mut Vec<String>, prefix: &mut Path, out: &mut FieldSet) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                prefix.push(format!("f:{k}"));
                names.push(k.clone());
                collect(kind, child, names, prefix, out);
                prefix.pop();
                names.pop();
            }
        }
        Value::Array(items) => match list_type(kind, names) {
            ListType::Map(keys) => {
                for e in items {
                    prefix.push(key_segment(e, &keys));
                    out.insert(prefix.clone());
                    if let Some(m) = e.as_object() {
                        for (k, child) in m {
                            prefix.push(format!("f:{k}"));
                            names.push(k.clone());
                            collect(kind, child, names, prefix, out);
                            prefix.pop();
                            names.pop();
                        }
                    }
                    prefix.pop();
                }
            }
            ListType::Set => {
                for e in items {
                    prefix.push(format!("v:{e}"));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            ListType::Atomic => {
                out.insert(prefix.clone());
            }
        },
        _ => {
            out.insert(prefix.clone());
        }
    }
}

/// Renders a field set as `fieldsV1`.
pub(crate) fn to_fields_v1(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut cur = &mut root;
        for seg in path {
            cur = cur
                .entry(seg.clone())
                .or_insert_with(|| Value::Object(Map::new()))
                .as_object_mut()
                .expect("object");
        }
    }
    // A member that also has children gets a "." marker.
    fn mark(node: &mut Map<String, Value>, prefix: &mut Path, set: &FieldSet) {
        for (k, v) in node.iter_mut() {
            prefix.push(k.clone());
            if let Some(child) = v.as_object_mut()
                && !child.is_empty()
            {
                if set.contains(prefix) {
                    child.insert(".".into(), json!({}));
                }
                mark(child, prefix, set);
            }
            prefix.pop();
        }
    }
    mark(&mut root, &mut Vec::new(), set);
    Value::Object(root)
}

/// Parses `fieldsV1` back into a field set.
pub(crate) fn from_fields_v1(v: &Value) -> FieldSet {
    fn walk(v: &Value, prefix: &mut Path, out: &mut FieldSet) {
        if let Some(m) = v.as_object() {
            for (k, child) in m {
                if k == "." {
                    continue;
                }
                prefix.push(k.clone());
                let cm = child.as_object();
                if cm.is_none_or(|c| c.is_empty() || c.contains_key(".")) {
                    out.insert(prefix.clone());
                }
                walk(child, prefix, out);
                prefix.pop();
            }
        }
    }
    let mut out = FieldSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

fn seg_matches(elem: &Value, seg: &str) -> bool {
    if let Some(k) = seg.strip_prefix("k:") {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(k) else {
            return false;
        };
        keys.iter()
            .all(|(k, v)| elem.get(k).unwrap_or(&Value::Null) == v)
    } else if let Some(v) = seg.strip_prefix("v:") {
        serde_json::from_str::<Value>(v).is_ok_and(|v| *elem == v)
    } else {
        false
    }
}

/// The value at a field path.
pub(crate) fn get_path<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = obj;
    for seg in path {
        cur = if let Some(f) = seg.strip_prefix("f:") {
            cur.get(f)?
        } else {
            cur.as_array()?.iter().find(|e| seg_matches(e, seg))?
        };
    }
    Some(cur)
}

fn remove_path(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for seg in parents {
        let next = if let Some(f) = seg.strip_prefix("f:") {
            cur.get_mut(f)
        } else {
            cur.as_array_mut()
                .and_then(|a| a.iter_mut().find(|e| seg_matches(e, seg)))
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = cur.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(a) = cur.as_array_mut() {
        a.retain(|e| !seg_matches(e, last));
    }
}

/// One `managedFields` entry.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    set: FieldSet,
}

fn parse_entries(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| Entry {
                    manager: e["manager"].as_str().unwrap_or_default().into(),
                    operation: e["operation"].as_str().unwrap_or("Update").into(),
                    api_version: e["apiVersion"].as_str().unwrap_or_default().into(),
                    time: e["time"].as_str().unwrap_or_default().into(),
                    subresource: e["subresource"].as_str().map(str::to_string),
                    set: from_fields_v1(&e["fieldsV1"]),
                })
                .collect()
        })
        .unwrap_or_default()
}

fn write_entries(obj: &mut Value, entries: Vec<Entry>) {
    let list: Vec<Value> = entries
        .into_iter()
        .filter(|e| !e.set.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager, "operation": e.operation, "apiVersion": e.api_version,
                "time": e.time, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&e.set),
            });
            if let Some(s) = e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if list.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

fn subresource_of(scope: Scope) -> Option<String> {
    (scope == Scope::StatusOnly).then(|| "status".to_string())
}

/// Records a non-apply write (`operation: Update`): the writer takes the fields that changed.
pub(crate) fn track_update(
    kind: &Kind,
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    scope: Scope,
    now: &str,
) {
    let mut entries = old.map(parse_entries).unwrap_or_default();
    let old_set = old
        .map(|o| fields_of(kind, o, Scope::All))
        .unwrap_or_default();
    let new_set = fields_of(kind, new, Scope::All);
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| !old_set.contains(*p) || old.and_then(|o| get_path(o, p)) != get_path(new, p))
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    for e in entries.iter_mut() {
        e.set
            .retain(|p| !changed.contains(p) && !removed.contains(p));
    }
    if !changed.is_empty() {
        let sub = subresource_of(scope);
        let api_version = new["apiVersion"].as_str().unwrap_or_default().to_string();
        match entries
            .iter_mut()
            .find(|e| e.manager == manager && e.operation == "Update" && e.subresource == sub)
        {
            Some(e) => {
                e.set.extend(changed);
                e.time = now.into();
            }
            None => entries.push(Entry {
                manager: manager.into(),
                operation: "Update".into(),
                api_version,
                time: now.into(),
                subresource: sub,
                set: changed,
            }),
        }
    }
    write_entries(new, entries);
}

/// One apply conflict.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Conflict {
    /// The other manager's identifier as upstream encodes it (JSON of manager, operation, apiVersion for
    /// Update managers, subresource); upstream sorts managers by it.
    pub(crate) id: String,
    /// The other manager as upstream prints it, e.g. `"m" using v1` or `"m" with subresource "status"`.
    pub(crate) manager: String,
    /// The field path as upstream prints it, e.g. `.spec.containers[name="a"].image`.
    pub(crate) path: String,
}

/// The conflicts of one apply, in field order.
#[derive(Debug)]
pub(crate) struct Conflicts(pub Vec<Conflict>);

/// A field path in structured-merge-diff's `fieldpath.Path.String()` form: `.f`, `[k1=v1,k2=v2]` for
/// list-map keys (sorted, values JSON), `[=v]` for set members.
fn dotted(path: &[String]) -> String {
    path.iter()
        .map(|s| {
            if let Some(f) = s.strip_prefix("f:") {
                format!(".{f}")
            } else if let Some(k) = s.strip_prefix("k:") {
                match serde_json::from_str::<Value>(k) {
                    Ok(Value::Object(m)) => {
                        let parts: Vec<String> =
                            m.iter().map(|(k, v)| format!("{k}={v}")).collect();
                        format!("[{}]", parts.join(","))
                    }
                    _ => format!("[{k}]"),
                }
            } else {
                format!("[={}]", &s[2..])
            }
        })
        .collect()
}

/// upstream `printManager`: the manager, its subresource, and for Update managers the API version.
fn print_manager(e: &Entry) -> String {
    let mut s = format!("\"{}\"", e.manager);
    if let Some(sub) = &e.subresource {
        s.push_str(&format!(" with subresource \"{sub}\""));
    }
    if e.operation == "Update" {
        s.push_str(&format!(" using {}", e.api_version));
    }
    s
}

/// upstream `BuildManagerIdentifier`: the entry without fields and time, and without the API version for
/// appliers, as JSON in the field order of `ManagedFieldsEntry`.
fn manager_id(e: &Entry) -> String {
    let q = |v: &str| Value::String(v.to_string()).to_string();
    let mut s = format!(
        "{{\"manager\":{},\"operation\":{}",
        q(&e.manager),
        q(&e.operation)
    );
    if e.operation != "Apply" {
        s.push_str(&format!(",\"apiVersion\":{}", q(&e.api_version)));
    }
    if let Some(sub) = &e.subresource {
        s.push_str(&format!(",\"subresource\":{}", q(sub)));
    }
    s.push('}');
    s
}

fn merge(kind: &Kind, live: &mut Value, cfg: &Value, names: &mut Vec<String>) {
    match (live.as_object_mut(), cfg.as_object()) {
        (Some(l), Some(c)) => {
            for (k, v) in c {
                names.push(k.clone());
                if v.is_null() {
                    l.remove(k);
                } else if let Some(existing) = l.get_mut(k) {
                    merge(kind, existing, v, names);
                } else {
                    l.insert(k.clone(), v.clone());
                }
                names.pop();
            }
        }
        _ => match (live.as_array_mut(), cfg.as_array()) {
            (Some(l), Some(c)) => match list_type(kind, names) {
                ListType::Map(keys) => {
                    for e in c {
                        let seg = key_segment(e, &keys);
                        match l.iter_mut().find(|x| key_segment(x, &keys) == seg) {
                            Some(x) => merge(kind, x, e, names),
                            None => l.push(e.clone()),
                        }
                    }
                }
                ListType::Set => {
                    for e in c {
                        if !l.contains(e) {
                            l.push(e.clone());
                        }
                    }
                }
                ListType::Atomic => *live = cfg.clone(),
            },
            _ => *live = cfg.clone(),
        },
    }
}

/// Value equality as structured-merge-diff compares values: numbers numerically (`0` equals `0.0`),
/// everything else structurally.
fn same_value(a: Option<&Value>, b: Option<&Value>) -> bool {
    fn eq(a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
                (Some(x), Some(y)) => x == y,
                _ => x == y || x.as_f64() == y.as_f64(),
            },
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(x, y)| eq(x, y))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| eq(v, w)))
            }
            _ => a == b,
        }
    }
    match (a, b) {
        (Some(a), Some(b)) => eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

/// Applies `cfg` as `manager` to `live` (an empty object when creating) and returns the new object.
pub(crate) fn apply(
    kind: &Kind,
    live: &Value,
    cfg: &Value,
    manager: &str,
    force: bool,
    scope: Scope,
    now: &str,
) -> Result<Value, Conflicts> {
    let mut cfg = cfg.clone();
    crate::json::canonical_numbers(&mut cfg);
    let cfg = &cfg;
    let mut entries = parse_entries(live);
    let sub = subresource_of(scope);
    let cfg_set = fields_of(kind, cfg, scope);
    let is_self =
        |e: &Entry| e.manager == manager && e.operation == "Apply" && e.subresource == sub;

    let mut conflicts = Vec::new();
    for e in entries.iter_mut().filter(|e| !is_self(e)) {
        let clash: Vec<Path> = e
            .set
            .intersection(&cfg_set)
            .filter(|p| p.last().is_some_and(|s| s.starts_with("f:")))
            .filter(|p| !same_value(get_path(live, p), get_path(cfg, p)))
            .cloned()
            .collect();
        if force {
            for p in &clash {
                e.set.remove(p);
            }
        } else {
            let (id, who) = (manager_id(e), print_manager(e));
            conflicts.extend(clash.iter().map(|p| Conflict {
                id: id.clone(),
                manager: who.clone(),
                path: dotted(p),
            }));
        }
    }
    if !conflicts.is_empty() {
        return Err(Conflicts(conflicts));
    }

    let prev = entries
        .iter()
        .find(|e| is_self(e))
        .map(|e| e.set.clone())
        .unwrap_or_default();
    let mut out = live.clone();
    let mut dropped: Vec<&Path> = prev.difference(&cfg_set).collect();
    // Shallow first, so that removing a list-map element also covers its fields (removing the key
    // field first would make the element unaddressable).
    dropped.sort_by_key(|p| p.len());
    let mut removed: Vec<&Path> = Vec::new();
    for p in dropped {
        if removed.iter().any(|r| p.starts_with(r)) {
            continue;
        }
        let owned_elsewhere = entries
            .iter()
            .filter(|e| !is_self(e))
            .any(|e| e.set.iter().any(|q| q.starts_with(p)));
        if !owned_elsewhere {
            remove_path(&mut out, p);
            removed.push(p);
        }
    }
    let mut cfg_body = cfg.clone();
    if let Some(m) = cfg_body.as_object_mut() {
        match scope {
            Scope::StatusOnly => m.retain(|k, _| k == "status"),
            Scope::NoStatus => {
                m.remove("status");
            }
            Scope::All => {}
        }
        if let Some(meta) = m.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in SKIP_META {
                if *k != "name" && *k != "namespace" {
                    meta.remove(*k);
                }
            }
        }
    }
    merge(kind, &mut out, &cfg_body, &mut Vec::new());

    let api_version = cfg["apiVersion"].as_str().unwrap_or_default().to_string();
    match entries.iter_mut().find(|e| is_self(e)) {
        Some(e) => {
            e.set = cfg_set;
            e.time = now.into();
            e.api_version = api_version;
        }
        None => entries.push(Entry {
            manager: manager.into(),
            operation: "Apply".into(),
            api_version,
            time: now.into(),
            subresource: sub,
            set: cfg_set,
        }),
    }
    write_entries(&mut out, entries);
    Ok(out)
}

/// A copy without managedFields timestamps, for no-op detection of applies.
pub(crate) fn without_times(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(list) = o["metadata"]
        .get_mut("managedFields")
        .and_then(Value::as_array_mut)
    {
        for e in list {
            if let Some(m) = e.as_object_mut() {
                m.remove("time");
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::from_crd;

    fn widget_kind() -> Kind {
        let crd = json!({"spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
              "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "status": {"type": "object", "properties": {"conditions": {"type": "array",
                  "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                  "items": {"type": "object"}}}}}}}}]}});
        from_crd(&crd).remove(0)
    }

    #[test]
    fn two_managers_own_different_conditions() {
        let k = widget_kind();
        let live =
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}});
        let a = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "status": {"conditions": [{"type": "A", "status": "True"}]}});
        let b = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "status": {"conditions": [{"type": "B", "status": "False"}]}});
        let live = apply(&k, &live, &a, "ma", false, Scope::StatusOnly, "t").unwrap();
        let live = apply(&k, &live, &b, "mb", false, Scope::StatusOnly, "t").unwrap();
        assert_eq!(
            live["status"]["conditions"],
            json!([{"type": "A", "status": "True"}, {"type": "B", "status": "False"}])
        );
        // manager a re-applies with a changed status: b's condition survives
        let a2 = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "status": {"conditions": [{"type": "A", "status": "False"}]}});
        let live = apply(&k, &live, &a2, "ma", false, Scope::StatusOnly, "t").unwrap();
        assert_eq!(
            live["status"]["conditions"],
            json!([{"type": "A", "status": "False"}, {"type": "B", "status": "False"}])
        );
        // a drops its condition entirely: only b's remains
        let a3 = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "status": {}});
        let live = apply(&k, &live, &a3, "ma", false, Scope::StatusOnly, "t").unwrap();
        assert_eq!(
            live["status"]["conditions"],
            json!([{"type": "B", "status": "False"}])
        );
        // b taking a's field conflicts, unless forced
        let steal = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"},
            "status": {"conditions": [{"type": "B", "status": "True"}]}});
        let err = apply(&k, &live, &steal, "ma", false, Scope::StatusOnly, "t").unwrap_err();
        assert_eq!(
            err.0,
            vec![Conflict {
                id: r#"{"manager":"mb","operation":"Apply","subresource":"status"}"#.into(),
                manager: "\"mb\" with subresource \"status\"".into(),
                path: ".status.conditions[type=\"B\"].status".into()
            }]
        );
        assert!(apply(&k, &live, &steal, "ma", true, Scope::StatusOnly, "t").is_ok());
    }

    fn builtin(kind: &str) -> Kind {
        crate::kinds::builtins()
            .into_iter()
            .find(|k| k.kind == kind)
            .unwrap()
    }

    #[test]
    fn identical_reapply_of_a_crd_is_not_a_conflict() {
        let k = builtin("CustomResourceDefinition");
        let crd = |served: bool, minimum: Value| {
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "ws.example.com"},
                "spec": {"group": "example.com", "scope": "Namespaced",
                  "names": {"kind": "W", "plural": "ws"},
                  "versions": [{"name": "v1", "served": served, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                      "properties": {"n": {"type": "integer", "minimum": minimum}}}}}]}})
        };
        // Preloaded from YAML (`minimum: 0.0`) by an Update manager; kubectl sends `minimum: 0`.
        let mut live = crd(true, json!(0.0));
        track_update(&k, None, &mut live, "kube-emulator", Scope::All, "t");
        let applied = apply(
            &k,
            &live,
            &crd(true, json!(0)),
            "kubectl",
            false,
            Scope::All,
            "t2",
        )
        .expect("identical content does not conflict");
        let owners: Vec<(&str, &str)> = applied["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap(),
                    e["operation"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            owners,
            vec![("kube-emulator", "Update"), ("kubectl", "Apply")]
        );
        // versions is a list-map keyed by name: ownership is per element field.
        assert_eq!(
            applied["metadata"]["managedFields"][1]["fieldsV1"]["f:spec"]["f:versions"]["k:{\"name\":\"v1\"}"]
                ["f:served"],
            json!({})
        );
        // A different value of a field the other manager owns is a real conflict.
        let err = apply(
            &k,
            &live,
            &crd(false, json!(0)),
            "kubectl",
            false,
            Scope::All,
            "t2",
        )
        .unwrap_err();
        assert_eq!(
            err.0,
            vec![Conflict {
                id: r#"{"manager":"kube-emulator","operation":"Update","apiVersion":"apiextensions.k8s.io/v1"}"#
                    .into(),
                manager: "\"kube-emulator\" using apiextensions.k8s.io/v1".into(),
                path: ".spec.versions[name=\"v1\"].served".into()
            }]
        );
    }

    #[test]
    fn server_defaulted_fields_do_not_make_a_reapply_conflict() {
        let k = builtin("Deployment");
        let cfg = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
              "spec": {"containers": [{"name": "c", "image": "i:1", "ports": [{"containerPort": 80}]}]}}}});
        // Created by an Update manager; the server then defaulted fields inside the container.
        let mut live = cfg.clone();
        live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] =
            json!("IfNotPresent");
        live["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"] = json!("TCP");
        live["spec"]["replicas"] = json!(1);
        track_update(&k, None, &mut live, "kubectl-create", Scope::All, "t");
        let out = apply(&k, &live, &cfg, "kubectl", false, Scope::All, "t2").expect("no conflict");
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "c", "image": "i:1", "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}]}])
        );
        // The applier owns only what it applied, not the defaulted fields.
        let mine = from_fields_v1(&out["metadata"]["managedFields"][1]["fieldsV1"]);
        let c = |f: &str| -> Path {
            [
                "f:spec",
                "f:template",
                "f:spec",
                "f:containers",
                "k:{\"name\":\"c\"}",
                f,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        };
        assert!(mine.contains(&c("f:image")));
        assert!(!mine.contains(&c("f:imagePullPolicy")));
        assert!(!mine.contains(&vec!["f:spec".to_string(), "f:replicas".to_string()]));
        // The same manager applying again, after the server defaulted its object, is a no-op.
        let again = apply(&k, &out, &cfg, "kubectl", false, Scope::All, "t2").unwrap();
        assert_eq!(again, out);
    }

    #[test]
    fn fields_v1_round_trip() {
        let k = widget_kind();
        let obj = json!({"metadata": {"labels": {"a": "b"}, "finalizers": ["x"]},
            "status": {"conditions": [{"type": "A", "status": "True"}]}});
        let set = fields_of(&k, &obj, Scope::All);
        let v1 = to_fields_v1(&set);
        assert_eq!(
            v1,
            json!({"f:metadata": {"f:labels": {"f:a": {}}, "f:finalizers": {"v:\"x\"": {}}},
            "f:status": {"f:conditions": {"k:{\"type\":\"A\"}": {".": {}, "f:type": {}, "f:status": {}}}}})
        );
        assert_eq!(from_fields_v1(&v1), set);
    }
}
