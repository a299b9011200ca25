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
        /// Per-server recovery windows.
        server_recovery_window: serde_json::Value,
    }
}
