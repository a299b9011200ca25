//! The platform configuration blocks the daemons read: upstream's `backupStorage` and `velero` Helm
//! values, and the `cozystack.io/v1alpha1` Package that carries them.
//!
//! Defaults equal upstream's chart `values.yaml`, so an
//! empty block means "upstream defaults".

use serde::{Deserialize, Serialize};

/// The `backupStorage` values block.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct BackupStorageValues {
    /// Create the `apps.cozystack.io/Bucket` and resolve the real bucket name through COSI.
    pub provision_bucket: bool,
    /// Namespace of the Bucket and of the system credentials Secret (must be a `tenant-*` namespace).
    pub namespace: String,
    /// Name of the Bucket release; with `provisionBucket: false`, the real external bucket name.
    pub bucket_name: String,
    /// Bucket name used while the BucketClaim has no `status.bucketName` yet.
    pub bucket_name_override: String,
    /// Fallback S3 endpoint (full URL), used for external S3 and before the credentials Secret exists.
    pub endpoint: String,
    /// S3 region.
    pub region: String,
    /// Path-style S3 addressing.
    pub force_path_style: bool,
    /// Name of the system credentials Secret in `namespace`.
    pub system_secret_name: String,
    /// Namespaces that always get a projected copy of the credentials.
    pub system_namespaces: Vec<String>,
    /// Upstream's switch for its default-objects gate; accepted for compatibility, unused (our
    /// renderer reconciles the defaults continuously).
    pub reconcile_default_objects: bool,
}

impl Default for BackupStorageValues {
    fn default() -> Self {
        Self {
            provision_bucket: true,
            namespace: "tenant-root".into(),
            bucket_name: "cozy-backups".into(),
            bucket_name_override: String::new(),
            endpoint: "http://seaweedfs-s3.tenant-root.svc.cozy.local:8333".into(),
            region: "us-east-1".into(),
            force_path_style: true,
            system_secret_name: "bucket-cozy-backups-system-credentials".into(),
            system_namespaces: vec!["cozy-velero".into()],
            reconcile_default_objects: true,
        }
    }
}

/// The `velero` values block.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct VeleroValues {
    /// Render the `cozy-default` BackupStorageLocation and the Velero strategies.
    pub bsl_enabled: bool,
    /// Namespace of Velero.
    pub namespace: String,
}

impl Default for VeleroValues {
    fn default() -> Self {
        Self {
            bsl_enabled: true,
            namespace: "cozy-velero".into(),
        }
    }
}

/// A `cozystack.io/v1alpha1` Package (only the path to component values is modelled).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Package {
    /// `cozystack.io/v1alpha1`.
    pub api_version: String,
    /// `Package`.
    pub kind: String,
    /// Object metadata.
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    /// Package spec.
    #[serde(default)]
    pub spec: PackageSpec,
}

/// Spec of a Package.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PackageSpec {
    /// Per-component settings.
    #[serde(default)]
    pub components: std::collections::BTreeMap<String, PackageComponent>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: crate::thirdparty::Extra,
}

/// One component of a Package.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PackageComponent {
    /// Helm values of the component.
    #[serde(default)]
    pub values: serde_json::Value,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: crate::thirdparty::Extra,
}

impl Package {
    /// The `backupStorage` block of the `platform` component, the supported override path; `None`
    /// when absent. Errors name the offending key.
    pub fn backup_storage(&self) -> Option<Result<BackupStorageValues, serde_json::Error>> {
        let block = self
            .spec
            .components
            .get("platform")?
            .values
            .get("backupStorage")?;
        Some(serde_json::from_value(block.clone()))
    }
}
