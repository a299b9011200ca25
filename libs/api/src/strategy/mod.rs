//! Group `strategy.backups.cozystack.io/v1alpha1`: driver configuration CRs.
//!
//! All eight kinds are cluster-scoped, have a status subresource whose only field is `conditions`,
//! and a required `spec.template`. String fields inside templates are Go-template strings that a
//! driver renders per job (`{{ .Application.metadata.name }}`, `{{ .Parameters.x }}`, …).

mod altinity;
mod cnpg;
mod etcd;
mod foundationdb;
mod job;
mod mariadb;
mod mongodb;
mod velero;

pub use altinity::*;
pub use cnpg::*;
pub use etcd::*;
pub use foundationdb::*;
pub use job::*;
pub use mariadb::*;
pub use mongodb::*;
pub use velero::*;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::Condition;

/// Observed state shared by every strategy kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StrategyStatus {
    /// Conditions, keyed by type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::meta::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// Category every strategy kind belongs to (`kubectl get cozy-backup-strategies`).
pub const CATEGORY: &str = "cozy-backup-strategies";
