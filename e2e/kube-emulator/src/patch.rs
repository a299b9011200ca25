//! Patch engines: JSON merge patch (RFC 7386), JSON patch (RFC 6902 with the apiserver's evanphx v4 quirks)
//! and strategic merge patch for built-in kinds.
//!
//! All engines work on `serde_json::Value` documents that are already omitempty-normalised, because that is
//! the form the real server applies patches to (`add /metadata/labels/x` fails when there are no labels).

use serde_json::{Map, Value};

use crate::kinds::{Kind, ListType, list_type};

/// RFC 7386: `null` deletes, objects merge recursively, everything else replaces.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let t = target.as_object_mut().expect("object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge_patch(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

fn unescape(s: &str) -> String {
    s.replace("~1", "/").replace("~0", "~")
}

fn split_pointer(path: &str) -> Result<Vec<String>, String> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let rest = path
        .strip_prefix('/')
        .ok_or_else(|| format!("invalid path {path}"))?;
    Ok(rest.split('/').map(unescape).collect())
}

fn get<'a>(doc: &'a Value, parts: &[String]) -> Option<&'a Value> {
    let mut cur = doc;
    for p in parts {
        cur = match cur {
            Value::Object(m) => m.get(p)?,
            Value::Array(a) => {
                let i = array_index(p, a.len(), false).ok()?;
                a.get(i)?
            }
            _ => return None,
        };
    }
    Some(cur)
}

fn array_index(p: &str, len: usize, allow_end: bool) -> Result<usize, String> {
    if p == "-" {
        return if allow_end {
            Ok(len)
        } else {
            Err("invalid index -".into())
        };
    }
    let i: i64 = p.parse().map_err(|_| format!("invalid array index {p}"))?;
    let i = if i < 0 { len as i64 + i } else { i };
    let max = if allow_end {
        len as i64
    } else {
        len as i64 - 1
    };
    if i < 0 || i > max {
        return Err(format!("Unable to access invalid index: {p}"));
    }
    Ok(i as usize)
}

fn parent_mut<'a>(
    doc: &'a mut Value,
    parts: &[String],
    path: &str,
) -> Result<&'a mut Value, String> {
    let mut cur = doc;
    for p in &parts[..parts.len() - 1] {
        cur = match cur {
            Value::Object(m) => m
                .get_mut(p)
                .ok_or_else(|| format!("doc is missing path: \"{path}\": missing value"))?,
            Value::Array(a) => {
                let len = a.len();
                let i = array_index(p, len, false)?;
                &mut a[i]
            }
            _ => return Err(format!("doc is missing path: \"{path}\": missing value")),
        };
    }
    Ok(cur)
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    let parts = split_pointer(path)?;
    if parts.is_empty() {
        *doc = value;
        return Ok(());
    }
    let last = parts.last().expect("non-empty").clone();
    match parent_mut(doc, &parts, path)? {
        Value::Object(m) => {
            m.insert(last, value);
            Ok(())
        }
        Value::Array(a) => {
            let i = array_index(&last, a.len(), true)?;
            a.insert(i, value);
            Ok(())
        }
        _ => Err(format!("doc is missing path: \"{path}\": missing value")),
    }
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let parts = split_pointer(path)?;
    let last = parts
        .last()
        .ok_or_else(|| "cannot remove the root".to_string())?
        .clone();
    match parent_mut(doc, &parts, path)? {
        Value::Object(m) => m
            .remove(&last)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {last}: missing value")),
        Value::Array(a) => {
            let i = array_index(&last, a.len(), false)?;
            Ok(a.remove(i))
        }
        _ => Err(format!("doc is missing path: \"{path}\": missing value")),
    }
}

/// RFC 6902 with the apiserver's quirks: `test` of a missing key against `null` succeeds, `replace` of a
/// missing object key acts as `add`, negative indices count from the end. Errors become 422.
pub(crate) fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops
        .as_array()
        .ok_or_else(|| "json patch must be an array of operations".to_string())?;
    if ops.len() > 10_000 {
        return Err("the allowed maximum operations in a JSON patch is 10000".into());
    }
    for op in ops {
        let kind = op["op"].as_str().unwrap_or_default();
        let path = op["path"]
            .as_str()
            .ok_or_else(|| format!("operation {kind} missing path"))?;
        match kind {
            "add" => add(doc, path, op["value"].clone())?,
            "remove" => {
                remove(doc, path)?;
            }
            "replace" => {
                let parts = split_pointer(path)?;
                if parts.is_empty() {
                    *doc = op["value"].clone();
                    continue;
                }
                let last = parts.last().expect("non-empty").clone();
                match parent_mut(doc, &parts, path)? {
                    Value::Object(m) => {
                        m.insert(last, op["value"].clone());
                    }
                    Value::Array(a) => {
                        let i = array_index(&last, a.len(), false)?;
                        a[i] = op["value"].clone();
                    }
                    _ => return Err(format!("doc is missing path: \"{path}\": missing value")),
                }
            }
            "test" => {
                let parts = split_pointer(path)?;
                let want = op.get("value").cloned().unwrap_or(Value::Null);
                match get(doc, &parts) {
                    None if want.is_null() => {}
                    Some(v) if *v == want => {}
                    _ => return Err(format!("testing value {path} failed: test failed")),
                }
            }
            "move" | "copy" => {
                let from = op["from"]
                    .as_str()
                    .ok_or_else(|| format!("operation {kind} missing from"))?;
                let v = if kind == "move" {
                    remove(doc, from)?
                } else {
                    get(doc, &split_pointer(from)?)
                        .cloned()
                        .ok_or_else(|| format!("doc is missing from path: {from}"))?
                };
                add(doc, path, v)?;
            }
            other => return Err(format!("Unexpected kind: {other}")),
        }
    }
    Ok(())
}

fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(
            a.iter()
                .filter(|e| e.get("$patch").and_then(Value::as_str) != Some("delete"))
                .map(strip_directives)
                .collect(),
        ),
        other => other.clone(),
    }
}

fn key_of(e: &Value, keys: &[String]) -> Vec<Value> {
    keys.iter().map(|k| e[k].clone()).collect()
}

/// Strategic merge patch for built-in kinds: merge keys from [`list_type`], `$patch`, `$retainKeys`,
/// `$deleteFromPrimitiveList/…` and `$setElementOrder/…`; no `$` key is ever stored.
pub(crate) fn strategic_merge(
    kind: &Kind,
    original: &Value,
    patch: &Value,
) -> Result<Value, String> {
    smp_map(kind, original, patch, &mut Vec::new())
}

fn smp_map(
    kind: &Kind,
    original: &Value,
    patch: &Value,
    path: &mut Vec<String>,
) -> Result<Value, String> {
    let Some(p) = patch.as_object() else {
        return Ok(patch.clone());
    };
    match p.get("$patch").and_then(Value::as_str) {
        Some("replace") => return Ok(strip_directives(patch)),
        Some("delete") => return Ok(Value::Null),
        Some("merge") | None => {}
        Some(other) => return Err(format!("unknown patch type: {other}")),
    }
    let mut out = original.as_object().cloned().unwrap_or_default();
    for (k, v) in p {
        if k.starts_with('$') {
            continue;
        }
        path.push(k.clone());
        match v {
            Value::Null => {
                out.remove(k);
            }
            Value::Object(_) => {
                let orig = out.get(k).cloned().unwrap_or(Value::Object(Map::new()));
                let merged = smp_map(kind, &orig, v, path)?;
                if merged.is_null() {
                    out.remove(k);
                } else {
                    out.insert(k.clone(), merged);
                }
            }
            Value::Array(items) => {
                let orig = out
                    .get(k)
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let merged = smp_list(kind, &orig, items, path)?;
                out.insert(k.clone(), Value::Array(merged));
            }
            other => {
                out.insert(k.clone(), other.clone());
            }
        }
        path.pop();
    }
    for (k, v) in p {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(list), Some(del)) = (
                out.get_mut(field).and_then(Value::as_array_mut),
                v.as_array(),
            ) {
                list.retain(|e| !del.contains(e));
            }
        } else if let Some(field) = k.strip_prefix("$setElementOrder/") {
            path.push(field.to_string());
            let lt = list_type(kind, path);
            path.pop();
            if let (Some(list), Some(order)) = (
                out.get_mut(field).and_then(Value::as_array_mut),
                v.as_array(),
            ) {
                let pos = |e: &Value| -> usize {
                    order
                        .iter()
                        .position(|o| match &lt {
                            ListType::Map(keys) => key_of(o, keys) == key_of(e, keys),
                            _ => o == e,
                        })
                        .unwrap_or(usize::MAX)
                };
                list.sort_by_key(|e| pos(e));
            }
        }
    }
    if let Some(keep) = p.get("$retainKeys").and_then(Value::as_array) {
        out.retain(|k, _| keep.iter().any(|x| x.as_str() == Some(k)));
    }
    Ok(Value::Object(out))
}

fn smp_list(
    kind: &Kind,
    original: &[Value],
    patch: &[Value],
    path: &mut Vec<String>,
) -> Result<Vec<Value>, String> {
    match list_type(kind, path) {
        ListType::Map(keys) => {
            if patch
                .iter()
                .any(|e| e.get("$patch").and_then(Value::as_str) == Some("replace"))
            {
                return Ok(patch
                    .iter()
                    .filter(|e| e.get("$patch").is_none())
                    .map(strip_directives)
                    .collect());
            }
            let mut out = original.to_vec();
            for e in patch {
                let key = key_of(e, &keys);
                let idx = out.iter().position(|o| key_of(o, &keys) == key);
                if e.get("$patch").and_then(Value::as_str) == Some("delete") {
                    if let Some(i) = idx {
                        out.remove(i);
                    }
                    continue;
                }
                match idx {
                    Some(i) => {
                        let merged = smp_map(kind, &out[i], e, path)?;
                        out[i] = merged;
                    }
                    None => out.push(strip_directives(e)),
                }
            }
            Ok(out)
        }
        ListType::Set => {
            let mut out = original.to_vec();
            for e in patch {
                if !out.contains(e) {
                    out.push(e.clone());
                }
            }
            Ok(out)
        }
        ListType::Atomic => Ok(patch.iter().map(strip_directives).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::builtins;
    use serde_json::json;

    fn deployment() -> Kind {
        builtins()
            .into_iter()
            .find(|k| k.kind == "Deployment")
            .unwrap()
    }

    #[test]
    fn rfc7386_examples() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}}));
        let mut doc = json!({"a": [1, 2]});
        merge_patch(&mut doc, &json!({"a": [3]}));
        assert_eq!(doc, json!({"a": [3]}));
    }

    #[test]
    fn json_patch_apiserver_quirks() {
        // test against a missing key with null succeeds (kube-runtime finalizer add relies on it)
        let mut doc = json!({"metadata": {"name": "x"}});
        json_patch(
            &mut doc,
            &json!([{"op": "test", "path": "/metadata/finalizers", "value": null},
                    {"op": "add", "path": "/metadata/finalizers", "value": ["f"]}]),
        )
        .unwrap();
        assert_eq!(doc, json!({"metadata": {"name": "x", "finalizers": ["f"]}}));
        // replace on a missing key acts as add
        json_patch(
            &mut doc,
            &json!([{"op": "replace", "path": "/metadata/uid", "value": "u"}]),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["uid"], "u");
        // failures
        let err = json_patch(
            &mut doc,
            &json!([{"op": "test", "path": "/metadata/finalizers/0", "value": "g"}]),
        );
        assert_eq!(
            err.unwrap_err(),
            "testing value /metadata/finalizers/0 failed: test failed"
        );
        assert!(
            json_patch(
                &mut doc,
                &json!([{"op": "add", "path": "/metadata/labels/x", "value": "y"}])
            )
            .is_err()
        );
        // negative index and append
        json_patch(
            &mut doc,
            &json!([{"op": "add", "path": "/metadata/finalizers/-", "value": "h"}]),
        )
        .unwrap();
        json_patch(
            &mut doc,
            &json!([{"op": "remove", "path": "/metadata/finalizers/-1"}]),
        )
        .unwrap();
        assert_eq!(doc["metadata"]["finalizers"], json!(["f"]));
    }

    #[test]
    fn strategic_merge_keeps_other_containers_and_drops_directives() {
        let original = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "a", "image": "img:1", "env": [{"name": "X", "value": "1"}, {"name": "Z", "value": "2"}]},
            {"name": "b", "image": "other:1"}]}}}});
        let patch = json!({"metadata": {"annotations": {"k": "v"}},
            "spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "a"}, {"name": "b"}],
              "containers": [{"$setElementOrder/env": [{"name": "Z"}],
                 "env": [{"name": "Z", "value": "3"}, {"$patch": "delete", "name": "X"}],
                 "image": "img:2", "name": "a"}]}}}});
        let out = strategic_merge(&deployment(), &original, &patch).unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"annotations": {"k": "v"}}, "spec": {"template": {"spec": {"containers": [
                {"name": "a", "image": "img:2", "env": [{"name": "Z", "value": "3"}]},
                {"name": "b", "image": "other:1"}]}}}})
        );
    }

    #[test]
    fn strategic_merge_directives() {
        let k = deployment();
        let original = json!({"metadata": {"finalizers": ["a", "b"]}, "spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "finalizers": ["c"]},
            "spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        let out = strategic_merge(&k, &original, &patch).unwrap();
        assert_eq!(
            out,
            json!({"metadata": {"finalizers": ["b", "c"]}, "spec": {"strategy": {"type": "Recreate"}}})
        );
        let out = strategic_merge(
            &k,
            &original,
            &json!({"spec": {"strategy": {"$patch": "replace", "type": "Recreate"}}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
    }
}
