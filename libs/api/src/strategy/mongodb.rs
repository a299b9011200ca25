use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::StrategyStatus;

/// MongoDB backs up MongoDB applications with the Percona operator (pbm, logical).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "strategy.backups.cozystack.io",
    version = "v1alpha1",
    kind = "MongoDB",
    plural = "mongodbs",
    singular = "mongodb",
    status = "StrategyStatus",
    category = "cozy-backup-strategies",
    derive = "PartialEq",
    derive = "Default",
    doc = "MongoDB backs up MongoDB applications with the Percona operator."
)]
#[serde(rename_all = "camelCase")]
pub struct MongoDBSpec {
    /// The template rendered per job.
    pub template: MongoDBTemplate,
}

/// Per-job template of a MongoDB strategy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MongoDBTemplate {
    /// Storage declared on the Percona cluster; empty means `s3-storage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_name: Option<String>,
    /// Backup type; only `logical` (also when empty).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<MongoDBBackupType>,
    /// Compression: gzip, zstd, s2, snappy, lz4, pgzip or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression_type: Option<String>,
    /// Compression level.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression_level: Option<i64>,
}

/// MongoDB backup type.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum MongoDBBackupType {
    /// A logical dump.
    #[serde(rename = "logical")]
    Logical,
}
