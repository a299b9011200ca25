use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::meta::{Condition, TypedLocalObjectReference};

/// BackupClass binds application kinds to strategy CRs. Tenants name a class in their BackupJobs,
/// Plans and RestoreJobs and never see storage credentials.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "backups.cozystack.io",
    version = "v1alpha1",
    kind = "BackupClass",
    plural = "backupclasses",
    status = "BackupClassStatus",
    shortname = "bcl",
    category = "cozy-backups",
    derive = "PartialEq",
    derive = "Default",
    doc = "BackupClass binds application kinds to backup strategy CRs.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BackupClassSpec {
    /// Routes from an application kind to a strategy CR. The first entry whose application group and
    /// kind match a job's applicationRef wins.
    pub strategies: Vec<BackupClassStrategy>,
}

/// One route of a BackupClass.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupClassStrategy {
    /// The strategy CR (group `strategy.backups.cozystack.io` for the built-in drivers).
    pub strategy_ref: TypedLocalObjectReference,
    /// The application kind this route applies to.
    pub application: ApplicationSelector,
    /// Template parameters passed to the strategy as `.Parameters`. Must not hold credentials:
    /// drivers copy them into `Backup.status.underlyingResources`, which tenants can read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::string_map")]
    pub parameters: Option<BTreeMap<String, String>>,
}

/// Selects an application kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSelector {
    /// Application API group; empty or missing means `apps.cozystack.io`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,
    /// Application kind, matched exactly (case-sensitive).
    pub kind: String,
}

/// Observed state of a BackupClass.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupClassStatus {
    /// Conditions, keyed by type. `Ready` tells whether every routed strategy exists.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::meta::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// The outcome of resolving a BackupClass for an application.
#[derive(Clone, Debug, PartialEq)]
pub struct ResolvedStrategy {
    /// The strategy CR to use.
    pub strategy_ref: TypedLocalObjectReference,
    /// The route's parameters (empty when none).
    pub parameters: BTreeMap<String, String>,
}

impl BackupClassSpec {
    /// Upstream's resolver: the first route whose normalised application group and kind equal the
    /// normalised reference's, or `None` (`ErrNoMatchingStrategy`).
    pub fn resolve(&self, app: &TypedLocalObjectReference) -> Option<ResolvedStrategy> {
        let group = app.normalized_group();
        self.strategies
            .iter()
            .find(|s| {
                let sel_group = match s.application.api_group.as_deref() {
                    None | Some("") => crate::contract::DEFAULT_APPLICATION_API_GROUP,
                    Some(g) => g,
                };
                sel_group == group && s.application.kind == app.kind
            })
            .map(|s| ResolvedStrategy {
                strategy_ref: s.strategy_ref.clone(),
                parameters: s.parameters.clone().unwrap_or_default(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(group: Option<&str>, kind: &str, strategy: &str) -> BackupClassStrategy {
        BackupClassStrategy {
            strategy_ref: TypedLocalObjectReference::new(
                "strategy.backups.cozystack.io",
                "CNPG",
                strategy,
            ),
            application: ApplicationSelector {
                api_group: group.map(Into::into),
                kind: kind.into(),
            },
            parameters: None,
        }
    }

    #[test]
    fn first_matching_route_wins_with_group_normalisation() {
        let spec = BackupClassSpec {
            strategies: vec![
                route(Some("example.org"), "Postgres", "foreign"),
                route(None, "Postgres", "first"),
                route(Some("apps.cozystack.io"), "Postgres", "second"),
            ],
        };
        let app = TypedLocalObjectReference {
            api_group: None,
            kind: "Postgres".into(),
            name: "db".into(),
        };
        assert_eq!(
            spec.resolve(&app).map(|r| r.strategy_ref.name),
            Some("first".into())
        );
        let foreign = TypedLocalObjectReference::new("example.org", "Postgres", "db");
        assert_eq!(
            spec.resolve(&foreign).map(|r| r.strategy_ref.name),
            Some("foreign".into())
        );
        let other = TypedLocalObjectReference::new("", "postgres", "db");
        assert_eq!(spec.resolve(&other), None, "kinds match case-sensitively");
    }
}
