//! `velero.io/v1` (and `v2alpha1` DataUpload): Velero backups, restores, storage locations.
//!
//! [`BackupSpec`] and [`RestoreSpec`] are also embedded in the `Velero` strategy CR, so they carry a
//! JSON schema; their `extra` maps are skipped in that schema (the strategy CRD prunes unknown
//! fields, the live Velero objects keep them).

use super::{Extra, view};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Velero BackupSpec (the fields the platform renders; the rest kept verbatim). Its `CustomResource`
/// derive yields the typed view [`Backup`] of a Velero Backup.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "Backup",
    plural = "backups",
    namespaced,
    status = "BackupStatus",
    schema = "disabled",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// Timeout for CSI snapshots, e.g. `10m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csi_snapshot_timeout: Option<String>,
    /// Data mover to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datamover: Option<String>,
    /// Back up all volumes with the file-system backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_volumes_to_fs_backup: Option<bool>,
    /// Deprecated restic switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_volumes_to_restic: Option<bool>,
    /// Cluster-scoped resources to exclude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_cluster_scoped_resources: Option<Vec<String>>,
    /// Namespace-scoped resources to exclude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_namespace_scoped_resources: Option<Vec<String>>,
    /// Namespaces to exclude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_namespaces: Option<Vec<String>>,
    /// Resources to exclude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_resources: Option<Vec<String>>,
    /// Backup hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::preserve_unknown_object")]
    pub hooks: Option<serde_json::Value>,
    /// Include cluster-scoped resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_cluster_resources: Option<bool>,
    /// Cluster-scoped resources to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_cluster_scoped_resources: Option<Vec<String>>,
    /// Namespace-scoped resources to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_namespace_scoped_resources: Option<Vec<String>>,
    /// Namespaces to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_namespaces: Option<Vec<String>>,
    /// Resources to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_resources: Option<Vec<String>>,
    /// Timeout of async item operations, e.g. `24h0m0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_operation_timeout: Option<String>,
    /// Label selector of included objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Labels of the backup's metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<VeleroMetadata>,
    /// Alternative label selectors (OR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub or_label_selectors: Option<Vec<LabelSelector>>,
    /// Per-resource ordering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::string_map")]
    pub ordered_resources: Option<BTreeMap<String, String>>,
    /// Resource policy ConfigMap reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_policy: Option<k8s_openapi::api::core::v1::TypedLocalObjectReference>,
    /// Move snapshot data to the object store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_move_data: Option<bool>,
    /// Take volume snapshots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_volumes: Option<bool>,
    /// BackupStorageLocation name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_location: Option<String>,
    /// Retention of the backup, e.g. `720h0m0s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
    /// Uploader settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploader_config: Option<UploaderConfigForBackup>,
    /// Label key grouping volumes into one group snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_group_snapshot_label_key: Option<String>,
    /// VolumeSnapshotLocations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_snapshot_locations: Option<Vec<String>>,
    /// Unmodelled fields of a live Velero Backup.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// `spec.metadata` of a Velero Backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct VeleroMetadata {
    /// Labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::string_map")]
    pub labels: Option<BTreeMap<String, String>>,
}

/// Backup uploader settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UploaderConfigForBackup {
    /// Parallel file uploads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_files_upload: Option<i32>,
}

/// Velero RestoreSpec (the fields the platform renders; the rest kept verbatim). Its `CustomResource`
/// derive yields the typed view [`Restore`] of a Velero Restore.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "velero.io",
    version = "v1",
    kind = "Restore",
    plural = "restores",
    namespaced,
    status = "RestoreStatus",
    schema = "disabled",
    derive = "Default",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSpec {
    /// The Velero Backup to restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_name: Option<String>,
    /// Namespaces to exclude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_namespaces: Option<Vec<String>>,
    /// Resources to exclude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_resources: Option<Vec<String>>,
    /// `none` or `update`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub existing_resource_policy: Option<String>,
    /// Restore hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::preserve_unknown_object")]
    pub hooks: Option<serde_json::Value>,
    /// Include cluster-scoped resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_cluster_resources: Option<bool>,
    /// Namespaces to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_namespaces: Option<Vec<String>>,
    /// Resources to include.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_resources: Option<Vec<String>>,
    /// Timeout of async item operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_operation_timeout: Option<String>,
    /// Label selector of restored objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Namespace renames.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::string_map")]
    pub namespace_mapping: Option<BTreeMap<String, String>>,
    /// Alternative label selectors (OR).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub or_label_selectors: Option<Vec<LabelSelector>>,
    /// Keep Service node ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_node_ports: Option<bool>,
    /// Resource modifier ConfigMap reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_modifier: Option<k8s_openapi::api::core::v1::TypedLocalObjectReference>,
    /// Restore persistent volumes.
    #[serde(
        default,
        rename = "restorePVs",
        skip_serializing_if = "Option::is_none"
    )]
    pub restore_pvs: Option<bool>,
    /// Which resources get their status restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_status: Option<RestoreStatusSpec>,
    /// Restore the latest backup of this schedule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_name: Option<String>,
    /// Uploader settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploader_config: Option<UploaderConfigForRestore>,
    /// Unmodelled fields of a live Velero Restore.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: Extra,
}

/// Which resources get their status restored.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatusSpec {
    /// Included resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub included_resources: Option<Vec<String>>,
    /// Excluded resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub excluded_resources: Option<Vec<String>>,
}

/// Restore uploader settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UploaderConfigForRestore {
    /// Parallel file downloads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_files_download: Option<i32>,
    /// Write sparse files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_sparse_files: Option<bool>,
}

/// Observed state of a Velero Backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// `New`, `InProgress`, `Completed`, `PartiallyFailed`, `Failed`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why the backup failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Validation errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_errors: Option<Vec<String>>,
    /// When the backup started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_timestamp: Option<Time>,
    /// When the backup completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_timestamp: Option<Time>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

/// Observed state of a Velero Restore.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestoreStatus {
    /// `New`, `InProgress`, `Completed`, `PartiallyFailed`, `Failed`, …
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why the restore failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

view! {
    /// Where Velero stores backups.
    kind "BackupStorageLocation" ("velero.io", "v1", "backupstoragelocations", namespaced);
    spec BackupStorageLocationSpec {
        /// Object-store provider, e.g. `aws`.
        provider: String,
        /// Whether this is Velero's default location.
        default: bool,
        /// Bucket and prefix.
        object_storage: ObjectStorageLocation,
        /// Credentials Secret key.
        credential: k8s_openapi::api::core::v1::SecretKeySelector,
        /// Provider config (`region`, `s3ForcePathStyle` as the string "true", `s3Url`).
        config: BTreeMap<String, String>,
    }
    status BackupStorageLocationStatus = "BackupStorageLocationStatus" {
        /// `Available` or `Unavailable`.
        phase: String,
        /// Why the location is unavailable.
        message: String,
        /// When the location was last validated.
        last_validation_time: Time,
    }
}

/// Bucket and prefix of a BackupStorageLocation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ObjectStorageLocation {
    /// Bucket name.
    pub bucket: String,
    /// Key prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// CA bundle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_cert: Option<String>,
}

view! {
    /// Asks Velero to delete a backup and its stored data.
    kind "DeleteBackupRequest" ("velero.io", "v1", "deletebackuprequests", namespaced);
    spec DeleteBackupRequestSpec {
        /// The Velero Backup to delete.
        backup_name: String,
    }
    status DeleteBackupRequestStatus = "DeleteBackupRequestStatus" {
        /// `New`, `InProgress`, `Processed`.
        phase: String,
        /// Errors.
        errors: Vec<String>,
    }
}

/// `velero.io/v2alpha1` DataUpload (read to explain failed backups).
pub mod v2alpha1 {
    use super::super::view;

    view! {
        /// A data-mover upload of one PVC snapshot.
        kind "DataUpload" ("velero.io", "v2alpha1", "datauploads", namespaced);
        spec DataUploadSpec {
            /// PVC the snapshot belongs to.
            source_pvc: String,
            /// Namespace of the PVC.
            source_namespace: String,
        }
        status DataUploadStatus = "DataUploadStatus" {
            /// `New`, `Accepted`, `Prepared`, `InProgress`, `Completed`, `Failed`, `Canceled`.
            phase: String,
            /// Failure message.
            message: String,
        }
    }
}
