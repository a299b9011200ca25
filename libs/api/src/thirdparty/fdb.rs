//! `apps.foundationdb.org/v1beta2`: `FoundationDBCluster`, `FoundationDBBackup`, `FoundationDBRestore`.

use super::view;

view! {
    /// A FoundationDB cluster (`foundationdb-<app>`).
    kind "FoundationDBCluster" ("apps.foundationdb.org", "v1beta2", "foundationdbclusters", namespaced);
    spec FoundationDBClusterSpec {
        /// FoundationDB version.
        version: String,
    }
    status FoundationDBClusterStatus = "FoundationDBClusterStatus" {
        /// Health (`available`, `healthy`).
        health: serde_json::Value,
    }
}

view! {
    /// A continuous backup driven by backup_agent pods.
    kind "FoundationDBBackup" ("apps.foundationdb.org", "v1beta2", "foundationdbbackups", namespaced);
    spec FoundationDBBackupSpec {
        /// Target cluster.
        cluster_name: String,
        /// FoundationDB version.
        version: String,
        /// `Running`, `Stopped` or `Paused`.
        backup_state: String,
        /// Blob store coordinates.
        blob_store_configuration: serde_json::Value,
        /// Number of agents.
        agent_count: i64,
        /// Snapshot period.
        snapshot_period_seconds: i64,
        /// Extra agent parameters.
        custom_parameters: Vec<String>,
        /// Encryption key path.
        encryption_key_path: String,
        /// Agent Deployment settings.
        backup_deployment_spec: serde_json::Value,
    }
    status FoundationDBBackupStatus = "FoundationDBBackupStatus" {
        /// Backup details (`running`, `snapshotTime`, `url`).
        backup_details: serde_json::Value,
        /// Generations (`reconciled`).
        generations: serde_json::Value,
    }
}

view! {
    /// A restore into a FoundationDB cluster.
    kind "FoundationDBRestore" ("apps.foundationdb.org", "v1beta2", "foundationdbrestores", namespaced);
    spec FoundationDBRestoreSpec {
        /// Destination cluster.
        destination_cluster_name: String,
        /// Blob store coordinates.
        blob_store_configuration: serde_json::Value,
        /// Extra parameters.
        custom_parameters: Vec<String>,
        /// Encryption key path.
        encryption_key_path: String,
    }
    status FoundationDBRestoreStatus = "FoundationDBRestoreStatus" {
        /// `Completed` when done.
        state: String,
    }
}
