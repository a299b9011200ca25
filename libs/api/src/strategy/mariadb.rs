use k8s_openapi::api::core::v1::PersistentVolumeClaimSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::StrategyStatus;
use crate::meta::SecretKeyRef;

/// MariaDB backs up MariaDB applications with mariadb-operator logical dumps.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "strategy.backups.cozystack.io",
    version = "v1alpha1",
    kind = "MariaDB",
    plural = "mariadbs",
    singular = "mariadb",
    status = "StrategyStatus",
    category = "cozy-backup-strategies",
    derive = "PartialEq",
    derive = "Default",
    doc = "MariaDB backs up MariaDB applications with mariadb-operator dumps."
)]
#[serde(rename_all = "camelCase")]
pub struct MariaDBSpec {
    /// The template rendered per job.
    pub template: MariaDBTemplate,
}

/// Per-job template of a MariaDB strategy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MariaDBTemplate {
    /// Where dumps go: exactly one of s3, persistentVolumeClaim or volume.
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "(has(self.s3) ? 1 : 0) + (has(self.persistentVolumeClaim) ? 1 : 0) + (has(self.volume) ? 1 : 0) == 1",
        "message": "exactly one of s3, persistentVolumeClaim or volume must be set"
    }]))]
    pub storage: MariaDBStorage,
    /// Databases to dump; empty means all non-system databases.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub databases: Option<Vec<String>>,
    /// Compression: `gzip`, `bzip2` or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compression: Option<String>,
    /// Operator-side retention as a duration, e.g. `720h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_retention: Option<String>,
    /// Log level of the backup job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_level: Option<String>,
}

/// Dump storage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MariaDBStorage {
    /// S3 storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<MariaDBS3>,
    /// A PVC created for the dumps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimSpec>,
    /// An existing volume (a core `VolumeSource`; its schema is not embedded, the operator
    /// validates it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::preserve_unknown_object")]
    pub volume: Option<serde_json::Value>,
}

/// S3 dump storage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MariaDBS3 {
    /// Bucket name.
    #[schemars(length(min = 1))]
    pub bucket: String,
    /// Endpoint host[:port] without a scheme.
    #[schemars(length(min = 1))]
    pub endpoint: String,
    /// Key prefix; the operator appends `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Access key id (note the JSON spelling `accessKeyIdSecretKeyRef`).
    pub access_key_id_secret_key_ref: SecretKeyRef,
    /// Secret access key.
    pub secret_access_key_secret_key_ref: SecretKeyRef,
    /// Session token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_token_secret_key_ref: Option<SecretKeyRef>,
    /// TLS settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<MariaDBTls>,
}

/// TLS settings of MariaDB S3 storage.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MariaDBTls {
    /// Use TLS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// CA bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_secret_key_ref: Option<SecretKeyRef>,
}
