//! Shared building blocks of our CRD schemas: conditions, object references and schema helpers.
//!
//! The reference types are declared here rather than borrowed from `k8s-openapi` because upstream's
//! schemas differ in small, visible ways (`LocalObjectReference.name` is optional with default `""`,
//! both references are `x-kubernetes-map-type: atomic`), and the CRDs must match upstream.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A reference to an object of a given kind in the same namespace (or cluster-wide for
/// cluster-scoped kinds).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct TypedLocalObjectReference {
    /// APIGroup of the referenced object. For application references an empty or missing group
    /// means `apps.cozystack.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// Kind of the referenced object.
    pub kind: String,
    /// Name of the referenced object.
    pub name: String,
}

impl TypedLocalObjectReference {
    /// A reference with an explicit group.
    pub fn new(api_group: &str, kind: &str, name: &str) -> Self {
        Self {
            api_group: Some(api_group.into()),
            kind: kind.into(),
            name: name.into(),
        }
    }

    /// The group with upstream's `NormalizeApplicationRef` rule applied: nil or empty means
    /// `apps.cozystack.io`.
    pub fn normalized_group(&self) -> &str {
        match self.api_group.as_deref() {
            None | Some("") => crate::contract::DEFAULT_APPLICATION_API_GROUP,
            Some(g) => g,
        }
    }

    /// A copy with the application group normalised (upstream `NormalizeApplicationRef`).
    pub fn normalized(&self) -> Self {
        Self {
            api_group: Some(self.normalized_group().to_owned()),
            ..self.clone()
        }
    }
}

/// A reference to an object by name in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct LocalObjectReference {
    /// Name of the referent.
    #[serde(default)]
    #[schemars(extend("default" = ""))]
    pub name: String,
}

impl LocalObjectReference {
    /// A reference to `name`.
    pub fn new(name: &str) -> Self {
        Self { name: name.into() }
    }
}

/// A key of a Secret in the same namespace.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct SecretKeyRef {
    /// Secret name.
    pub name: String,
    /// Key inside the Secret.
    pub key: String,
}

/// Status of a condition.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConditionStatus {
    /// The condition holds.
    True,
    /// The condition does not hold.
    False,
    /// The controller cannot tell.
    Unknown,
}

impl ConditionStatus {
    /// `True` for `true`, `False` for `false`.
    pub fn from_bool(b: bool) -> Self {
        if b { Self::True } else { Self::False }
    }
}

/// One observation of an aspect of an object's state (the standard `metav1.Condition` schema).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type of the condition in CamelCase, e.g. `Ready` or `CredentialsProjected`.
    #[serde(rename = "type")]
    #[schemars(length(max = 316))]
    #[schemars(regex(
        pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
    ))]
    pub type_: String,
    /// Status of the condition: True, False or Unknown.
    pub status: ConditionStatus,
    /// Machine-readable CamelCase reason for the last transition.
    #[schemars(length(min = 1, max = 1024))]
    #[schemars(regex(pattern = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"))]
    pub reason: String,
    /// Human-readable details about the last transition.
    #[schemars(length(max = 32768))]
    pub message: String,
    /// When the condition last changed status.
    pub last_transition_time: Time,
    /// The `.metadata.generation` the condition was set for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
}

/// The longest condition message the API server accepts (`metav1.Condition`'s limit, in bytes).
pub const CONDITION_MESSAGE_MAX: usize = 32768;

/// `message` cut to at most [`CONDITION_MESSAGE_MAX`] bytes on a character boundary, ending in
/// `…` when cut: a message quoting a huge field (a 200 KiB application name) would otherwise make
/// every status write fail validation.
pub fn bounded_message(message: String) -> String {
    if message.len() <= CONDITION_MESSAGE_MAX {
        return message;
    }
    let ellipsis = "…";
    let mut end = CONDITION_MESSAGE_MAX - ellipsis.len();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ellipsis}", &message[..end])
}

impl Condition {
    /// A condition with the transition time set to `now` (a message longer than the API server
    /// accepts is cut, see [`bounded_message`]).
    pub fn new(
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
        now: Time,
    ) -> Self {
        Self {
            type_: type_.into(),
            status,
            reason: reason.into(),
            message: bounded_message(message.into()),
            last_transition_time: now,
            observed_generation: None,
        }
    }

    /// The same condition recorded for `generation`.
    pub fn observed(mut self, generation: Option<i64>) -> Self {
        self.observed_generation = generation;
        self
    }

    /// True when the condition's status is `True`.
    pub fn is_true(&self) -> bool {
        self.status == ConditionStatus::True
    }
}

/// Finds the condition of `type_`.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Sets a condition with `meta.SetStatusCondition` semantics: the entry of the same type is replaced
/// in place, and its `lastTransitionTime` is kept unless the status flips. Returns true when the
/// list changed.
pub fn set_condition(conditions: &mut Vec<Condition>, mut new: Condition) -> bool {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) => {
            if existing.status == new.status {
                new.last_transition_time = existing.last_transition_time.clone();
            }
            if *existing == new {
                return false;
            }
            *existing = new;
            true
        }
        None => {
            conditions.push(new);
            true
        }
    }
}

/// Schema helper: a `status.conditions` list that is a list-map keyed by `type`, so several field
/// managers can own different condition types of one object under server-side apply.
pub(crate) fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<Condition>>();
    let obj = schema.ensure_object();
    obj.insert("x-kubernetes-list-type".into(), "map".into());
    obj.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}

/// Schema helper: an object whose content is not validated and whose unknown fields are kept.
pub(crate) fn preserve_unknown_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema helper: a `map[string]string`.
pub(crate) fn string_map(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {"type": "string"},
    })
}

#[cfg(test)]
mod tests {

    use super::*;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn condition_messages_stay_within_the_api_limit() {
        let short = bounded_message("fine".into());
        assert_eq!(short, "fine");
        let long = bounded_message("é".repeat(40_000));
        assert!(long.len() <= CONDITION_MESSAGE_MAX, "{}", long.len());
        assert!(long.ends_with('…'));
        assert!(long.starts_with("éé"));
    }

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn set_condition_keeps_transition_time_unless_status_flips() {
        let mut list = vec![];
        assert!(set_condition(
            &mut list,
            Condition::new("Ready", ConditionStatus::False, "A", "m1", t(10))
        ));
        // Same status, new reason: replaced, transition time kept.
        assert!(set_condition(
            &mut list,
            Condition::new("Ready", ConditionStatus::False, "B", "m2", t(20))
        ));
        assert_eq!(
            list,
            vec![Condition::new(
                "Ready",
                ConditionStatus::False,
                "B",
                "m2",
                t(10)
            )]
        );
        // Identical apart from the time: no change.
        assert!(!set_condition(
            &mut list,
            Condition::new("Ready", ConditionStatus::False, "B", "m2", t(30))
        ));
        // Status flips: the time moves.
        assert!(set_condition(
            &mut list,
            Condition::new("Ready", ConditionStatus::True, "C", "m3", t(40))
        ));
        assert_eq!(
            list,
            vec![Condition::new(
                "Ready",
                ConditionStatus::True,
                "C",
                "m3",
                t(40)
            )]
        );
        // A different type is appended.
        assert!(set_condition(
            &mut list,
            Condition::new("Other", ConditionStatus::True, "D", "", t(50))
        ));
        assert_eq!(list.len(), 2);
        assert_eq!(
            find_condition(&list, "Other").map(|c| c.reason.as_str()),
            Some("D")
        );
    }

    #[test]
    fn application_group_normalisation() {
        let mut r = TypedLocalObjectReference::new("", "Postgres", "db");
        assert_eq!(r.normalized_group(), "apps.cozystack.io");
        r.api_group = None;
        assert_eq!(
            r.normalized().api_group.as_deref(),
            Some("apps.cozystack.io")
        );
        r.api_group = Some("example.org".into());
        assert_eq!(r.normalized_group(), "example.org");
    }
}
