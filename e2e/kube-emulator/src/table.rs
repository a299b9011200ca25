//! `meta.k8s.io/v1` Table and PartialObjectMetadata renderings (what `kubectl get` and kube-rs metadata
//! APIs ask for), with CRD `additionalPrinterColumns` evaluated by a small JSONPath subset.

use serde_json::{Value, json};

use crate::kinds::Kind;

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
    } else {
        cols.push(json!({"name": "Created At", "type": "date", "format": "", "description": "CreationTimestamp is a timestamp representing the server time when this object was created.", "priority": 0}));
    }
    cols
}

/// Human age like kubectl's `HumanDuration`.
pub(crate) fn age(ts: &str) -> String {
    let Ok(t) = chrono::DateTime::parse_from_rfc3339(ts) else {
        return "<invalid>".into();
    };
    let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
        .num_seconds()
        .max(0);
    let (m, h, d) = (secs / 60, secs / 3600, secs / 86400);
    if secs < 120 {
        format!("{secs}s")
    } else if m < 10 {
        if secs % 60 == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{}s", secs % 60)
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        if m % 60 == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{}m", m % 60)
        }
    } else if h < 48 {
        format!("{h}h")
    } else if d < 8 {
        if h % 24 == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{}h", h % 24)
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
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
            if kind.custom {
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

    #[test]
    fn ages() {
        assert_eq!(age("bad"), "<invalid>");
        let t = (chrono::Utc::now() - chrono::Duration::hours(50)).to_rfc3339();
        assert_eq!(age(&t), "2d2h");
    }
}
