use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::StrategyStatus;

/// Etcd backs up the tenant etcd cluster with etcd-operator snapshots.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "strategy.backups.cozystack.io",
    version = "v1alpha1",
    kind = "Etcd",
    plural = "etcds",
    singular = "etcd",
    status = "StrategyStatus",
    category = "cozy-backup-strategies",
    derive = "PartialEq",
    derive = "Default",
    doc = "Etcd backs up the tenant etcd cluster with etcd-operator snapshots."
)]
#[serde(rename_all = "camelCase")]
pub struct EtcdSpec {
    /// The template rendered per job.
    pub template: EtcdTemplate,
}

/// Per-job template of an Etcd strategy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdTemplate {
    /// Where snapshots go.
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "has(self.s3)",
        "message": "s3 destination is required (PVC is intentionally not supported by this strategy until upstream restore-agent reads the same path the backup-agent writes; see the strategy comments)"
    }]))]
    pub destination: EtcdDestination,
}

/// Snapshot destination.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdDestination {
    /// S3 destination.
    pub s3: EtcdS3,
}

/// S3 snapshot destination.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EtcdS3 {
    /// Bucket name.
    #[schemars(length(min = 1))]
    pub bucket: String,
    /// Full endpoint URL including the scheme.
    #[schemars(length(min = 1))]
    pub endpoint: String,
    /// Key prefix; the operator appends the file name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Path-style addressing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_path_style: Option<bool>,
    /// Secret holding `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
    pub credentials_secret_ref: EtcdCredentialsSecretRef,
}

/// Secret reference of an Etcd destination.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct EtcdCredentialsSecretRef {
    /// Secret name.
    #[schemars(length(min = 1))]
    pub name: String,
}
