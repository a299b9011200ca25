//! Structural-schema handling for custom resources, in the apiserver's order:
//! prune unknown fields → apply defaults → validate (OpenAPI keywords, then CEL `x-kubernetes-validations`).
//!
//! * Pruning drops fields the schema does not declare, unless `x-kubernetes-preserve-unknown-fields`;
//!   `apiVersion`, `kind` and `metadata` are kept at the root and in `x-kubernetes-embedded-resource`s.
//!   The dropped paths (`spec.foo`, `spec.items[0].bar`) feed `fieldValidation`: Strict → 400, Warn →
//!   `Warning` headers, Ignore → nothing.
//! * Defaulting fills missing properties from `default`, and replaces a `null` of a non-nullable property
//!   by its default or removes it (`PruneNonNullableNullsWithoutDefaults`).
//! * Validation reports field errors with upstream wording (kube-openapi messages converted by
//!   apiextensions-apiserver `validation.go`), e.g. `spec.x: Invalid value: "": spec.x in body should be
//!   at least 1 chars long`, collected into one 422 `Invalid` with `details.causes`.
//! * CEL rules run through `kube::core::cel::Validator`, with `oldSelf` bound on updates (transition rules).
//! * Ratcheting (as upstream since 1.30): on an update, an error on a value that did not change is not
//!   reported, so objects stored before a rule existed can still get their status written.

use serde_json::{Value, json};

use crate::error::{ApiError, FieldError};
use crate::kinds::Kind;

/// The `fieldValidation` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub(crate) enum FieldValidation {
    /// 400 on unknown fields.
    Strict,
    /// Drop unknown fields with a `Warning` header (the server default).
    #[default]
    Warn,
    /// Drop unknown fields silently.
    Ignore,
}

impl FieldValidation {
    /// Parses the query parameter (absent → Warn); unsupported values are rejected earlier, with the
    /// request's other options.
    pub(crate) fn parse(v: Option<&str>) -> Self {
        match v {
            Some("Strict") => FieldValidation::Strict,
            Some("Ignore") => FieldValidation::Ignore,
            _ => FieldValidation::Warn,
        }
    }
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

/// Drops unknown fields; returns their paths.
pub(crate) fn prune(schema: &Value, obj: &mut Value) -> Vec<String> {
    let mut out = Vec::new();
    prune_at(schema, obj, "", true, &mut out);
    out
}

fn prune_at(s: &Value, v: &mut Value, path: &str, root: bool, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if s["x-kubernetes-int-or-string"] == true {
                return;
            }
            let preserve = s["x-kubernetes-preserve-unknown-fields"] == true;
            let embedded = root || s["x-kubernetes-embedded-resource"] == true;
            let props = s["properties"].as_object();
            let addl = s.get("additionalProperties");
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if embedded && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    // metadata is ObjectMeta, handled by the generic pipeline.
                    if k != "metadata"
                        && let Some(ps) = props.and_then(|p| p.get(&k))
                    {
                        prune_at(ps, m.get_mut(&k).expect("key"), &join(path, &k), false, out);
                    }
                    continue;
                }
                let child = join(path, &k);
                if let Some(ps) = props.and_then(|p| p.get(&k)) {
                    prune_at(ps, m.get_mut(&k).expect("key"), &child, false, out);
                } else if let Some(a) = addl.filter(|a| a.is_object()) {
                    prune_at(a, m.get_mut(&k).expect("key"), &child, false, out);
                } else if preserve || addl == Some(&Value::Bool(true)) {
                    // kept as is
                } else {
                    m.remove(&k);
                    out.push(child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items").filter(|i| i.is_object()) {
                for (i, e) in items.iter_mut().enumerate() {
                    prune_at(is, e, &format!("{path}[{i}]"), false, out);
                }
            }
        }
        _ => {}
    }
}

/// Applies `default`s, and drops or defaults `null`s of non-nullable properties.
pub(crate) fn default(s: &Value, v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(props) = s["properties"].as_object() {
                for (k, ps) in props {
                    match m.get(k) {
                        None => {
                            if let Some(d) = ps.get("default") {
                                m.insert(k.clone(), d.clone());
                            }
                        }
                        Some(Value::Null) if ps["nullable"] != true => match ps.get("default") {
                            Some(d) => {
                                m.insert(k.clone(), d.clone());
                            }
                            None => {
                                m.remove(k);
                            }
                        },
                        Some(_) => {}
                    }
                }
            }
            let addl = s.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in m.iter_mut() {
                if let Some(ps) = s["properties"].get(k) {
                    default(ps, child);
                } else if let Some(a) = addl {
                    default(a, child);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = s.get("items").filter(|i| i.is_object()) {
                for e in items {
                    default(is, e);
                }
            }
        }
        _ => {}
    }
}

/// Go's rendering of a value in `Invalid value: …`.
fn show(v: &Value) -> String {
    match v {
        Value::String(s) => Value::String(s.clone()).to_string(),
        Value::Null => "\"null\"".into(),
        other => other.to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => true,
    }
}

fn invalid(errs: &mut Vec<FieldError>, path: &str, v: &Value, detail: String) {
    errs.push(FieldError {
        field: path.into(),
        reason: "FieldValueInvalid",
        body: format!("Invalid value: {}: {detail}", show(v)),
    });
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn fmt_num(v: &Value) -> String {
    v.to_string()
}

/// Validates `v` against the OpenAPI keywords of `s`.
pub(crate) fn validate(s: &Value, v: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    check(s, v, "", true, &mut errs);
    errs
}

fn check(s: &Value, v: &Value, path: &str, root: bool, errs: &mut Vec<FieldError>) {
    if v.is_null() {
        if s["nullable"] == true || s.get("type").is_none() {
            return;
        }
        errs.push(FieldError {
            field: path.into(),
            reason: "FieldValueTypeInvalid",
            body: format!(
                "Invalid value: \"null\": {path} in body must be of type {}: \"null\"",
                s["type"].as_str().unwrap_or_default()
            ),
        });
        return;
    }
    // The type the value fails to have, if any (int-or-string accepts either).
    let wrong_type = if s["x-kubernetes-int-or-string"] == true {
        (!(v.is_string() || type_ok("integer", v))).then_some("integer,string")
    } else {
        s["type"].as_str().filter(|t| !type_ok(t, v))
    };
    if let Some(want) = wrong_type {
        errs.push(FieldError {
            field: path.into(),
            reason: "FieldValueTypeInvalid",
            body: format!(
                "Invalid value: \"{a}\": {path} in body must be of type {want}: \"{a}\"",
                a = type_name(v)
            ),
        });
        return;
    }
    if let Some(allowed) = s["enum"].as_array()
        && !allowed.contains(v)
    {
        let values: Vec<String> = allowed
            .iter()
            .map(|a| match a {
                Value::String(s) => json!(s).to_string(),
                other => json!(other.to_string()).to_string(),
            })
            .collect();
        errs.push(FieldError {
            field: path.into(),
            reason: "FieldValueNotSupported",
            body: format!(
                "Unsupported value: {}: supported values: {}",
                show(v),
                values.join(", ")
            ),
        });
    }
    match v {
        Value::String(st) => {
            let len = st.chars().count() as u64;
            if let Some(max) = s["maxLength"].as_u64()
                && len > max
            {
                errs.push(FieldError {
                    field: path.into(),
                    reason: "FieldValueTooLong",
                    body: format!("Too long: may not be more than {max} bytes"),
                });
            }
            if let Some(min) = s["minLength"].as_u64()
                && len < min
            {
                invalid(
                    errs,
                    path,
                    v,
                    format!("{path} in body should be at least {min} chars long"),
                );
            }
            if let Some(p) = s["pattern"].as_str() {
                match regex::Regex::new(p) {
                    Ok(re) if !re.is_match(st) => {
                        invalid(errs, path, v, format!("{path} in body should match '{p}'"))
                    }
                    _ => {}
                }
            }
        }
        Value::Number(_) => {
            let x = num(v).unwrap_or(0.0);
            if let Some(max) = s.get("maximum").filter(|m| m.is_number()) {
                let m = num(max).unwrap_or(0.0);
                if s["exclusiveMaximum"] == true && x >= m {
                    invalid(
                        errs,
                        path,
                        v,
                        format!("{path} in body should be less than {}", fmt_num(max)),
                    );
                } else if x > m {
                    invalid(
                        errs,
                        path,
                        v,
                        format!(
                            "{path} in body should be less than or equal to {}",
                            fmt_num(max)
                        ),
                    );
                }
            }
            if let Some(min) = s.get("minimum").filter(|m| m.is_number()) {
                let m = num(min).unwrap_or(0.0);
                if s["exclusiveMinimum"] == true && x <= m {
                    invalid(
                        errs,
                        path,
                        v,
                        format!("{path} in body should be greater than {}", fmt_num(min)),
                    );
                } else if x < m {
                    invalid(
                        errs,
                        path,
                        v,
                        format!(
                            "{path} in body should be greater than or equal to {}",
                            fmt_num(min)
                        ),
                    );
                }
            }
        }
        Value::Array(items) => {
            if let Some(max) = s["maxItems"].as_u64()
                && items.len() as u64 > max
            {
                errs.push(FieldError {
                    field: path.into(),
                    reason: "FieldValueTooMany",
                    body: format!("Too many: {}: must have at most {max} items", items.len()),
                });
            }
            if let Some(min) = s["minItems"].as_u64()
                && (items.len() as u64) < min
            {
                invalid(
                    errs,
                    path,
                    v,
                    format!("{path} in body should have at least {min} items"),
                );
            }
            if let Some(is) = s.get("items").filter(|i| i.is_object()) {
                for (i, e) in items.iter().enumerate() {
                    check(is, e, &format!("{path}[{i}]"), false, errs);
                }
            }
        }
        Value::Object(m) => {
            if let Some(req) = s["required"].as_array() {
                for r in req.iter().filter_map(Value::as_str) {
                    if !m.contains_key(r) {
                        errs.push(FieldError {
                            field: join(path, r),
                            reason: "FieldValueRequired",
                            body: "Required value".into(),
                        });
                    }
                }
            }
            if let Some(max) = s["maxProperties"].as_u64()
                && m.len() as u64 > max
            {
                errs.push(FieldError {
                    field: path.into(),
                    reason: "FieldValueTooMany",
                    body: format!("Too many: {}: must have at most {max} items", m.len()),
                });
            }
            let addl = s.get("additionalProperties").filter(|a| a.is_object());
            for (k, child) in m {
                if root && matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                if let Some(ps) = s["properties"].get(k) {
                    check(ps, child, &join(path, k), false, errs);
                } else if let Some(a) = addl {
                    check(a, child, &join(path, k), false, errs);
                }
            }
        }
        Value::Bool(_) | Value::Null => {}
    }
}

fn has_cel(s: &Value) -> bool {
    match s {
        Value::Object(m) => m.contains_key("x-kubernetes-validations") || m.values().any(has_cel),
        Value::Array(a) => a.iter().any(has_cel),
        _ => false,
    }
}

/// Parses `spec.items[1].name` into segments.
fn segments(path: &str) -> Vec<Result<String, usize>> {
    let mut out = Vec::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let mut rest = part;
        if let Some(i) = rest.find('[') {
            out.push(Ok(rest[..i].to_string()));
            rest = &rest[i..];
            while let Some(end) = rest.find(']') {
                if let Ok(n) = rest[1..end].parse::<usize>() {
                    out.push(Err(n));
                }
                rest = &rest[end + 1..];
            }
        } else {
            out.push(Ok(rest.to_string()));
        }
    }
    out
}

fn value_at<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = v;
    for seg in segments(path) {
        cur = match seg {
            Ok(k) => cur.get(&k)?,
            Err(i) => cur.get(i)?,
        };
    }
    Some(cur)
}

fn schema_at<'a>(s: &'a Value, path: &str) -> Option<&'a Value> {
    let mut cur = s;
    for seg in segments(path) {
        cur = match seg {
            Ok(k) => cur["properties"]
                .get(&k)
                .or_else(|| cur.get("additionalProperties").filter(|a| a.is_object()))?,
            Err(_) => cur.get("items")?,
        };
    }
    Some(cur)
}

/// Evaluates the CEL `x-kubernetes-validations` rules. As kube-apiserver (1.37), a failed rule on a
/// scalar shows the value (`Invalid value: "weekly": …`), on an object or a list no value at all
/// (`Invalid value: <message>`).
pub(crate) fn validate_cel(s: &Value, v: &Value, old: Option<&Value>) -> Vec<FieldError> {
    if !has_cel(s) {
        return Vec::new();
    }
    let Err(errors) = kube::core::cel::Validator::new().validate(s, v, old) else {
        return Vec::new();
    };
    errors
        .into_vec()
        .into_iter()
        .map(|e| {
            let ty = schema_at(s, &e.field_path)
                .and_then(|n| n["type"].as_str())
                .unwrap_or("object")
                .to_string();
            let shown = match value_at(v, &e.field_path) {
                Some(x @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => {
                    format!("{}: ", show(x))
                }
                _ => String::new(),
            };
            let (reason, body) = match e.reason.as_deref() {
                Some("FieldValueForbidden") => {
                    ("FieldValueForbidden", format!("Forbidden: {}", e.message))
                }
                Some("FieldValueRequired") => (
                    "FieldValueRequired",
                    format!("Required value: {}", e.message),
                ),
                Some("FieldValueDuplicate") => (
                    "FieldValueDuplicate",
                    format!("Duplicate value: \"{ty}\": {}", e.message),
                ),
                _ => (
                    "FieldValueInvalid",
                    format!("Invalid value: {shown}{}", e.message),
                ),
            };
            FieldError {
                field: e.field_path,
                reason,
                body,
            }
        })
        .collect()
}

/// Prunes, defaults and validates a custom resource write in place.
///
/// `old` is the stored object on updates. `status_only` restricts reported errors to `.status` (the
/// `/status` subresource). Returns the warnings for the response and the field errors (which the caller
/// reports in one 422 together with the metadata errors); fails with 400 for unknown fields under Strict.
pub(crate) fn admit(
    kind: &Kind,
    obj: &mut Value,
    old: Option<&Value>,
    status_only: bool,
    fv: FieldValidation,
) -> Result<(Vec<String>, Vec<FieldError>), ApiError> {
    let Some(schema) = kind.schema.as_ref() else {
        return Ok((Vec::new(), Vec::new()));
    };
    let mut unknown = prune(schema, obj);
    if status_only {
        unknown.retain(|p| p == "status" || p.starts_with("status.") || p.starts_with("status["));
    }
    let mut warnings = Vec::new();
    match fv {
        FieldValidation::Strict if !unknown.is_empty() => {
            let list: Vec<String> = unknown
                .iter()
                .map(|p| format!("unknown field \"{p}\""))
                .collect();
            return Err(ApiError::bad_request(format!(
                "{k} in version \"{v}\" cannot be handled as a {k}: strict decoding error: {}",
                list.join(", "),
                k = kind.kind,
                v = kind.version
            )));
        }
        FieldValidation::Warn => {
            warnings.extend(unknown.iter().map(|p| format!("unknown field \"{p}\"")));
        }
        _ => {}
    }
    default(schema, obj);
    let mut errs = validate(schema, obj);
    errs.extend(validate_cel(schema, obj, old));
    if let Some(old) = old {
        // A missing required field is an error of its parent object.
        let node = |e: &FieldError| -> String {
            if e.reason == "FieldValueRequired" {
                e.field
                    .rsplit_once('.')
                    .map(|(p, _)| p.to_string())
                    .unwrap_or_default()
            } else {
                e.field.clone()
            }
        };
        errs.retain(|e| {
            let n = node(e);
            value_at(obj, &n) != value_at(old, &n)
        });
    }
    if status_only {
        errs.retain(|e| {
            e.field == "status" || e.field.starts_with("status.") || e.field.starts_with("status[")
        });
    }
    Ok((warnings, errs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::invalid_error;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^[a-z]*$"},
                "size": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                "mode": {"type": "string", "enum": ["a", "b"]},
                "port": {"x-kubernetes-int-or-string": true},
                "opt": {"type": "string", "nullable": true},
                "gone": {"type": "string"},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}}})
    }

    #[test]
    fn prune_default_validate() {
        let s = schema();
        let mut o = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "labels": {"a": "b"}},
            "spec": {"name": "ab", "bogus": 1, "opt": null, "gone": null, "port": "http",
                     "free": {"anything": {"goes": 1}}, "items": [{"k": "v", "z": 1}], "labels": {"x": "y"}},
            "top": true});
        let unknown = prune(&s, &mut o);
        assert_eq!(unknown, vec!["spec.bogus", "spec.items[0].z", "top"]);
        default(&s, &mut o);
        assert_eq!(
            o,
            json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "labels": {"a": "b"}},
            "spec": {"name": "ab", "opt": null, "port": "http", "size": 3,
                     "free": {"anything": {"goes": 1}}, "items": [{"k": "v"}], "labels": {"x": "y"}}})
        );
        assert_eq!(validate(&s, &o), vec![]);
    }

    #[test]
    fn upstream_messages() {
        let s = schema();
        let o =
            json!({"spec": {"name": "", "size": 0, "mode": "c", "port": 1.5, "labels": {"x": 1}}});
        let got: Vec<String> = validate(&s, &o)
            .into_iter()
            .map(|e| format!("{}: {} ({})", e.field, e.body, e.reason))
            .collect();
        assert_eq!(
            got,
            vec![
                "spec.labels.x: Invalid value: \"integer\": spec.labels.x in body must be of type string: \"integer\" (FieldValueTypeInvalid)",
                "spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\" (FieldValueNotSupported)",
                "spec.name: Invalid value: \"\": spec.name in body should be at least 1 chars long (FieldValueInvalid)",
                "spec.port: Invalid value: \"number\": spec.port in body must be of type integer,string: \"number\" (FieldValueTypeInvalid)",
                "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1 (FieldValueInvalid)",
            ]
        );
        let o = json!({"spec": {"name": "ABCDEF"}});
        let got: Vec<String> = validate(&s, &o)
            .into_iter()
            .map(|e| format!("{}: {}", e.field, e.body))
            .collect();
        assert_eq!(
            got,
            vec![
                "spec.name: Too long: may not be more than 5 bytes",
                "spec.name: Invalid value: \"ABCDEF\": spec.name in body should match '^[a-z]*$'",
            ]
        );
        let got = validate(&s, &json!({"spec": {}}));
        assert_eq!(
            got,
            vec![FieldError {
                field: "spec.name".into(),
                reason: "FieldValueRequired",
                body: "Required value".into()
            }]
        );
    }

    #[test]
    fn admit_ratchets_unchanged_values_and_scopes_status() {
        let crd = json!({"spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "W", "plural": "ws"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
              "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {"n": {"type": "string", "minLength": 2}}},
                "status": {"type": "object", "properties": {"phase": {"type": "string", "enum": ["A", "B"]}}}}}}}]}});
        let kind = crate::kinds::from_crd(&crd).remove(0);
        // Stored before the rule existed: spec.n is too short.
        let old = json!({"metadata": {"name": "w"}, "spec": {"n": "x"}});
        // A status write leaves the invalid spec alone: accepted.
        let mut new =
            json!({"metadata": {"name": "w"}, "spec": {"n": "x"}, "status": {"phase": "A"}});
        assert_eq!(
            admit(&kind, &mut new, Some(&old), true, FieldValidation::Warn).unwrap(),
            (Vec::<String>::new(), Vec::new())
        );
        // Changing the invalid value to another invalid one is reported.
        let mut new = json!({"metadata": {"name": "w"}, "spec": {"n": "y"}});
        let (_, errs) = admit(&kind, &mut new, Some(&old), false, FieldValidation::Warn).unwrap();
        assert_eq!(
            invalid_error(&kind, "w", &errs).message,
            "W.example.com \"w\" is invalid: spec.n: Invalid value: \"y\": spec.n in body should be at least 2 chars long"
        );
        // On /status only status errors and status unknown fields count.
        let mut new = json!({"metadata": {"name": "w"}, "spec": {"n": "x"}, "status": {"phase": "C", "extra": 1}});
        let e = admit(&kind, &mut new, Some(&old), true, FieldValidation::Strict).unwrap_err();
        assert_eq!(
            e.message,
            "W in version \"v1\" cannot be handled as a W: strict decoding error: unknown field \"status.extra\""
        );
        let mut new =
            json!({"metadata": {"name": "w"}, "spec": {"n": "x"}, "status": {"phase": "C"}});
        let (_, errs) = admit(&kind, &mut new, Some(&old), true, FieldValidation::Strict).unwrap();
        assert_eq!(
            invalid_error(&kind, "w", &errs).message,
            "W.example.com \"w\" is invalid: status.phase: Unsupported value: \"C\": supported values: \"A\", \"B\""
        );
    }

    #[test]
    fn cel_rules_with_old_self() {
        let s = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "has(self.a) != has(self.b)", "message": "exactly one of a or b"}],
            "properties": {
              "a": {"type": "string"}, "b": {"type": "string"},
              "c": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "c is immutable"}]}}}}});
        let ok = json!({"spec": {"a": "x", "c": "1"}});
        assert_eq!(validate_cel(&s, &ok, None), vec![]);
        let both = json!({"spec": {"a": "x", "b": "y"}});
        assert_eq!(
            validate_cel(&s, &both, None),
            vec![FieldError {
                field: "spec".into(),
                reason: "FieldValueInvalid",
                body: "Invalid value: exactly one of a or b".into()
            }]
        );
        let changed = json!({"spec": {"a": "x", "c": "2"}});
        assert_eq!(
            validate_cel(&s, &changed, Some(&ok)),
            vec![FieldError {
                field: "spec.c".into(),
                reason: "FieldValueInvalid",
                body: "Invalid value: \"2\": c is immutable".into()
            }]
        );
        assert_eq!(validate_cel(&s, &ok, Some(&ok)), vec![]);
    }
}
