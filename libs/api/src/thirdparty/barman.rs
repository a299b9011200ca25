//! `barmancloud.cnpg.io/v1`: the barman-cloud plugin's `ObjectStore`.

use super::view;

view! {
    /// Object-store configuration referenced by a cnpg Cluster's barman-cloud plugin entry.
    kind "ObjectStore" ("barmancloud.cnpg.io", "v1", "objectstores", namespaced);
    spec ObjectStoreSpec {
        /// Barman object-store configuration (destinationPath, endpointURL, s3Credentials, …).
        configuration: serde_json::Value,
        /// Barman retention, e.g. `30d`.
        retention_policy: String,
        /// Sidecar settings (env such as `AWS_REQUEST_CHECKSUM_CALCULATION`).
        instance_sidecar_configuration: serde_json::Value,
    }
    status ObjectStoreStatus = "ObjectStoreStatus" {
        /// Per-server recovery windows, by server name.
        server_recovery_window: std::collections::BTreeMap<String, RecoveryWindow>,
    }
}

/// The recoverable span of one server in an object store, as the plugin reports it.
#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryWindow {
    /// End time of the oldest base backup still in the store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_recoverability_point: Option<String>,
    /// End time of the newest successful base backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_successful_backup_time: Option<String>,
    /// When the last backup failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_failed_backup_time: Option<String>,
}
