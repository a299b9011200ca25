//! API errors rendered as upstream `Status` bodies, with the exact `reason` strings clients match on.

use serde_json::{Value, json};

use crate::kinds::Kind;

/// An error answered as a `Status` with an HTTP code.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// Upstream `reason` (e.g. `NotFound`, `Conflict`).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
    /// `details` object (may be null).
    pub details: Value,
    /// `metadata.continue` of the Status (a 410 for an expired continue token carries a fresh one).
    pub list_continue: Option<String>,
}

impl ApiError {
    /// A generic error.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: Value::Null,
            list_continue: None,
        }
    }

    /// With a `details` object.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    /// 400 BadRequest.
    pub fn bad_request(msg: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", msg)
    }

    /// 404 NotFound for an object.
    pub(crate) fn not_found(kind: &Kind, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", kind.qualified()),
        )
        .with_details(details(kind, name))
    }

    /// 409 AlreadyExists.
    pub(crate) fn already_exists(kind: &Kind, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", kind.qualified()),
        )
        .with_details(details(kind, name))
    }

    /// 409 Conflict from an optimistic-lock failure.
    pub(crate) fn conflict(kind: &Kind, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                kind.qualified()
            ),
        )
        .with_details(details(kind, name))
    }

    /// 422 Invalid with one cause whose body is already rendered (e.g. `Required value: …`).
    pub(crate) fn invalid(kind: &Kind, name: &str, field: &str, msg: &str) -> Self {
        let reason = match msg.split(':').next().unwrap_or_default() {
            "Required value" => "FieldValueRequired",
            "Forbidden" => "FieldValueForbidden",
            "Unsupported value" => "FieldValueNotSupported",
            "Duplicate value" => "FieldValueDuplicate",
            "Too long" => "FieldValueTooLong",
            _ => "FieldValueInvalid",
        };
        invalid_error(
            kind,
            name,
            &[FieldError {
                field: field.into(),
                reason,
                body: msg.into(),
            }],
        )
    }

    /// 404 for an unknown path.
    pub(crate) fn no_route() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// The `Status` body.
    pub fn body(&self) -> Value {
        let mut v = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": self.message, "reason": self.reason, "code": self.code,
        });
        if !self.details.is_null() {
            v["details"] = self.details.clone();
        }
        if let Some(c) = &self.list_continue {
            v["metadata"]["continue"] = json!(c);
        }
        v
    }
}

/// The `details` object upstream attaches to errors about a resource: name, group and kind = the resource
/// (plural), each omitted when empty as Go's `omitempty` does.
pub(crate) fn details(kind: &Kind, name: &str) -> Value {
    omit_empty(json!({"name": name, "group": kind.group, "kind": kind.plural}))
}

fn omit_empty(mut v: Value) -> Value {
    if let Some(m) = v.as_object_mut() {
        m.retain(|_, x| !(x.as_str() == Some("") || x.is_null()));
    }
    v
}

/// One field error, as apimachinery's `field.Error` renders it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FieldError {
    /// `spec.x`, `status.conditions[0].reason`, `metadata.labels`.
    pub(crate) field: String,
    /// `FieldValueInvalid`, `FieldValueRequired`, ….
    pub(crate) reason: &'static str,
    /// The error body without the field, e.g. `Required value`.
    pub(crate) body: String,
}

impl FieldError {
    /// `field.Invalid`: `Invalid value: <value>: <detail>`; `value` is already in Go's rendering.
    pub(crate) fn invalid(field: impl Into<String>, value: &str, detail: &str) -> Self {
        FieldError {
            field: field.into(),
            reason: "FieldValueInvalid",
            body: with_detail(format!("Invalid value: {value}"), detail),
        }
    }

    /// `field.Required`: `Required value[: <detail>]`.
    pub(crate) fn required(field: impl Into<String>, detail: &str) -> Self {
        FieldError {
            field: field.into(),
            reason: "FieldValueRequired",
            body: with_detail("Required value".into(), detail),
        }
    }

    /// `field.Forbidden`: `Forbidden: <detail>`.
    pub(crate) fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        FieldError {
            field: field.into(),
            reason: "FieldValueForbidden",
            body: with_detail("Forbidden".into(), detail),
        }
    }

    /// `field.Duplicate`: `Duplicate value: <value>`.
    pub(crate) fn duplicate(field: impl Into<String>, value: &str) -> Self {
        FieldError {
            field: field.into(),
            reason: "FieldValueDuplicate",
            body: format!("Duplicate value: {value}"),
        }
    }

    /// `field.NotSupported`: `Unsupported value: <value>: supported values: "a", "b"`.
    pub(crate) fn not_supported(field: impl Into<String>, value: &str, valid: &[&str]) -> Self {
        let quoted: Vec<String> = valid.iter().map(|v| go_quote(v)).collect();
        FieldError {
            field: field.into(),
            reason: "FieldValueNotSupported",
            body: format!(
                "Unsupported value: {value}: supported values: {}",
                quoted.join(", ")
            ),
        }
    }

    /// `field.TooLong`: `Too long: may not be more than <max> bytes`.
    pub(crate) fn too_long(field: impl Into<String>, max: usize) -> Self {
        FieldError {
            field: field.into(),
            reason: "FieldValueTooLong",
            body: format!("Too long: may not be more than {max} bytes"),
        }
    }
}

fn with_detail(s: String, detail: &str) -> String {
    if detail.is_empty() {
        s
    } else {
        format!("{s}: {detail}")
    }
}

/// A string as Go's `%q` prints it (JSON string escaping matches it for the values the API carries).
pub(crate) fn go_quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// 422 `Invalid` as upstream `errors.NewInvalid` renders it: `<Kind>[.<group>] "<name>" is invalid: …`, one
/// error inline or several as `[a, b]` (identical messages once), `details.kind` = the Kind.
pub(crate) fn invalid_error(kind: &Kind, name: &str, errs: &[FieldError]) -> ApiError {
    invalid_for(&kind.group, &kind.kind, name, errs)
}

/// [`invalid_error`] for a group and kind that are not a served resource (e.g. `CreateOptions`).
pub(crate) fn invalid_for(group: &str, kind: &str, name: &str, errs: &[FieldError]) -> ApiError {
    let mut lines: Vec<String> = Vec::new();
    for e in errs {
        let l = format!("{}: {}", e.field, e.body);
        if !lines.contains(&l) {
            lines.push(l);
        }
    }
    let joined = if lines.len() == 1 {
        lines[0].clone()
    } else {
        format!("[{}]", lines.join(", "))
    };
    let qualified = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    let causes: Vec<Value> = errs
        .iter()
        .map(|e| json!({"reason": e.reason, "message": e.body, "field": e.field}))
        .collect();
    let mut details = omit_empty(json!({"name": name, "group": group, "kind": kind}));
    details["causes"] = json!(causes);
    ApiError::new(
        422,
        "Invalid",
        format!("{qualified} \"{name}\" is invalid: {joined}"),
    )
    .with_details(details)
}
