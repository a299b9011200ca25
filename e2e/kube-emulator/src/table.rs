//! `meta.k8s.io/v1` Table and PartialObjectMetadata renderings (what `kubectl get` and kube-rs metadata
//! APIs ask for), with CRD `additionalPrinterColumns` evaluated by a small JSONPath subset.

use serde_json::{Value, json};

use crate::json::age;
use crate::kinds::Kind;
use crate::printers;

/// `includeObject` of a Table request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Include {
    /// No `row.object`.
    None,
    /// `row.object` as PartialObjectMetadata (default).
    Metadata,
    /// The full object.
    Object,
}

/// The object's metadata as PartialObjectMetadata.
pub(crate) fn partial(obj: &Value) -> Value {
    json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj["metadata"]})
}

fn columns(kind: &Kind) -> Vec<Value> {
    let mut cols = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name must be unique within a namespace.", "priority": 0})];
    if kind.custom {
        if kind.printer_columns.is_empty() {
            cols.push(json!({"name": "Age", "type": "date", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0}));
        }
        for c in &kind.printer_columns {
            cols.push(json!({"name": c.name, "type": c.type_, "format": c.format,
                "description": c.description, "priority": c.priority}));
        }
    } else if let Some(builtin) = printers::columns(kind) {
        return builtin;
    } else {
        cols.push(json!({"name": "Created At", "type": "date", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0}));
    }
    cols
}

/// Evaluates the JSONPath subset CRD printer columns use: `.a.b`, `.a[0]`, `.a[*].b`,
/// `.a[?(@.type=="Ready")].status`. Returns every match.
pub(crate) fn jsonpath(obj: &Value, path: &str) -> Vec<Value> {
    let path = path.trim().trim_start_matches('{').trim_end_matches('}');
    let mut cur = vec![obj.clone()];
    let mut rest = path.trim_start_matches('$');
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            let field = &r[..end];
            rest = &r[end..];
            if field.is_empty() {
                continue;
            }
            cur = cur.iter().filter_map(|v| v.get(field).cloned()).collect();
        } else if let Some(r) = rest.strip_prefix('[') {
            let Some(end) = r.find(']') else {
                return Vec::new();
            };
            let inner = &r[..end];
            rest = &r[end + 1..];
            let items: Vec<Value> = cur
                .iter()
                .filter_map(|v| v.as_array())
                .flatten()
                .cloned()
                .collect();
            if inner == "*" {
                cur = items;
            } else if let Some(filter) =
                inner.strip_prefix("?(@.").and_then(|f| f.strip_suffix(')'))
            {
                let Some((field, val)) = filter.split_once("==") else {
                    return Vec::new();
                };
                let val = val.trim().trim_matches(|c| c == '"' || c == '\'');
                cur = items
                    .into_iter()
                    .filter(|e| {
                        let mut x = e;
                        for seg in field.trim().split('.') {
                            x = &x[seg];
                        }
                        match x {
                            Value::String(s) => s == val,
                            other => *other == val,
                        }
                    })
                    .collect();
            } else if let Ok(i) = inner.parse::<i64>() {
                cur = cur
                    .iter()
                    .filter_map(|v| v.as_array())
                    .filter_map(|a| {
                        let idx = if i < 0 { a.len() as i64 + i } else { i };
                        a.get(usize::try_from(idx).ok()?).cloned()
                    })
                    .collect();
            } else {
                return Vec::new();
            }
        } else {
            return Vec::new();
        }
    }
    cur
}

fn cell(obj: &Value, col: &crate::kinds::PrinterColumn) -> Value {
    let Some(v) = jsonpath(obj, &col.json_path).into_iter().next() else {
        return Value::Null;
    };
    match col.type_.as_str() {
        "date" => json!(v.as_str().map(age).unwrap_or_else(|| "<invalid>".into())),
        "integer" => v.as_i64().map(|i| json!(i)).unwrap_or(Value::Null),
        "number" => v.as_f64().map(|f| json!(f)).unwrap_or(Value::Null),
        "boolean" => v.as_bool().map(|b| json!(b)).unwrap_or(Value::Null),
        _ => match v {
            Value::String(s) => json!(s),
            other => json!(other.to_string()),
        },
    }
}

/// A Table over `objs` (views), with columns only when `with_columns`.
pub(crate) fn table(
    kind: &Kind,
    objs: &[Value],
    rv: &str,
    include: Include,
    with_columns: bool,
) -> Value {
    let rows: Vec<Value> = objs
        .iter()
        .map(|o| {
            let mut cells = vec![o["metadata"]["name"].clone()];
            if let Some(builtin) = printers::cells(kind, o) {
                cells = builtin;
            } else if kind.custom {
                if kind.printer_columns.is_empty() {
                    cells.push(json!(age(o["metadata"]["creationTimestamp"]
                        .as_str()
                        .unwrap_or_default())));
                }
                cells.extend(kind.printer_columns.iter().map(|c| cell(o, c)));
            } else {
                cells.push(o["metadata"]["creationTimestamp"].clone());
            }
            let mut row = json!({"cells": cells});
            match include {
                Include::None => {}
                Include::Metadata => row["object"] = partial(o),
                Include::Object => row["object"] = o.clone(),
            }
            row
        })
        .collect();
    let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": rv}, "rows": rows});
    t["columnDefinitions"] = if with_columns {
        json!(columns(kind))
    } else {
        json!([])
    };
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jsonpath_subset() {
        let o = json!({"spec": {"size": 3}, "status": {"conditions": [
            {"type": "A", "status": "False"}, {"type": "Ready", "status": "True"}]}});
        assert_eq!(jsonpath(&o, ".spec.size"), vec![json!(3)]);
        assert_eq!(
            jsonpath(&o, ".status.conditions[?(@.type==\"Ready\")].status"),
            vec![json!("True")]
        );
        assert_eq!(jsonpath(&o, ".status.conditions[0].type"), vec![json!("A")]);
        assert_eq!(
            jsonpath(&o, ".status.conditions[*].type"),
            vec![json!("A"), json!("Ready")]
        );
        assert!(jsonpath(&o, ".missing.x").is_empty());
    }
}
