use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::StrategyStatus;

/// FoundationDB backs up FoundationDB clusters with a FoundationDBBackup (long-running backup
/// agents streaming to a blob store).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "strategy.backups.cozystack.io",
    version = "v1alpha1",
    kind = "FoundationDB",
    plural = "foundationdbs",
    singular = "foundationdb",
    status = "StrategyStatus",
    category = "cozy-backup-strategies",
    derive = "PartialEq",
    derive = "Default",
    doc = "FoundationDB backs up FoundationDB clusters to a blob store."
)]
#[serde(rename_all = "camelCase")]
pub struct FoundationDBSpec {
    /// The template rendered per job.
    pub template: FoundationDBTemplate,
}

/// Per-job template of a FoundationDB strategy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FoundationDBTemplate {
    /// Blob store coordinates.
    pub blob_store_configuration: BlobStoreConfiguration,
    /// Number of backup agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_count: Option<i32>,
    /// Snapshot period; the operator defaults it to 3600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_period_seconds: Option<i32>,
    /// Extra backup_agent parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub custom_parameters: Option<Vec<String>>,
    /// Path of the encryption key inside the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption_key_path: Option<String>,
    /// Pod template of the backup agent Deployment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_deployment_pod_template_spec: Option<PodTemplateSpec>,
}

/// Blob store coordinates of a FoundationDB backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlobStoreConfiguration {
    /// Account name, typically `<key>@<host>`; the platform default is a bare host[:port].
    #[schemars(length(min = 1, max = 100))]
    pub account_name: String,
    /// Bucket name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub bucket: Option<String>,
    /// Backup name; empty means the driver picks one per BackupJob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub backup_name: Option<String>,
    /// URL parameters such as `secure_connection=1`, `region=…`, `bucket_path=…`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url_parameters: Option<Vec<String>>,
}
