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
}

impl ApiError {
    /// A generic error.
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: Value::Null,
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

    /// 422 Invalid with one cause.
    pub(crate) fn invalid(kind: &Kind, name: &str, field: &str, msg: &str) -> Self {
        let mut d = details(kind, name);
        d["causes"] = json!([{"reason": "FieldValueInvalid", "message": msg, "field": field}]);
        Self::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {field}: {msg}", kind_name(kind)),
        )
        .with_details(d)
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
        v
    }
}

fn kind_name(kind: &Kind) -> String {
    kind.kind.clone()
}

/// The `details` object upstream attaches: name, group, kind = resource (plural).
pub(crate) fn details(kind: &Kind, name: &str) -> Value {
    json!({"name": name, "group": kind.group, "kind": kind.plural})
}
