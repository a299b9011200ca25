use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::StrategyStatus;
use crate::meta::LocalObjectReference;

/// CNPG backs up Postgres applications with CloudNativePG and the barman-cloud plugin.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "strategy.backups.cozystack.io",
    version = "v1alpha1",
    kind = "CNPG",
    plural = "cnpgs",
    singular = "cnpg",
    status = "StrategyStatus",
    category = "cozy-backup-strategies",
    derive = "PartialEq",
    derive = "Default",
    doc = "CNPG backs up Postgres applications with CloudNativePG and barman-cloud."
)]
#[serde(rename_all = "camelCase")]
pub struct CNPGSpec {
    /// The template rendered per job.
    pub template: CNPGTemplate,
}

/// Per-job template of a CNPG strategy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CNPGTemplate {
    /// Object-store configuration of the barman archive.
    pub barman_object_store: BarmanObjectStore,
    /// Barman server name; empty means the cluster name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_name: Option<String>,
}

/// Barman object-store configuration.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BarmanObjectStore {
    /// Destination, e.g. `s3://bucket/path/`.
    #[schemars(length(min = 1))]
    pub destination_path: String,
    /// Full endpoint URL including the scheme.
    #[serde(
        default,
        rename = "endpointURL",
        skip_serializing_if = "Option::is_none"
    )]
    pub endpoint_url: Option<String>,
    /// CA bundle for the endpoint.
    #[serde(
        default,
        rename = "endpointCA",
        skip_serializing_if = "Option::is_none"
    )]
    pub endpoint_ca: Option<EndpointCA>,
    /// S3 credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3_credentials: Option<S3Credentials>,
    /// Barman retention, e.g. `30d`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_policy: Option<String>,
    /// WAL archive settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal: Option<WalConfiguration>,
    /// Base backup settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<DataConfiguration>,
}

/// CA bundle reference.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EndpointCA {
    /// The Secret holding the CA.
    pub secret_ref: LocalObjectReference,
    /// Key in the Secret; the driver defaults it to `ca.crt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// S3 credentials reference.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Credentials {
    /// The Secret holding the keys.
    pub secret_ref: LocalObjectReference,
    /// Key of the access key id; the driver defaults it to `AWS_ACCESS_KEY_ID`.
    #[serde(
        default,
        rename = "accessKeyIDKey",
        skip_serializing_if = "Option::is_none"
    )]
    pub access_key_id_key: Option<String>,
    /// Key of the secret key; the driver defaults it to `AWS_SECRET_ACCESS_KEY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key_key: Option<String>,
}

/// WAL archive settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WalConfiguration {
    /// Compression, e.g. `gzip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// Server-side encryption, e.g. `AES256`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<String>,
}

/// Base backup settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DataConfiguration {
    /// Compression, e.g. `gzip`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// Server-side encryption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<String>,
    /// Parallel upload jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs: Option<i32>,
}
