//! `psmdb.percona.com/v1`: Percona Server for MongoDB cluster, backup and restore.

use super::view;

view! {
    /// A Percona MongoDB cluster (`mongodb-<app>`).
    kind "PerconaServerMongoDB" ("psmdb.percona.com", "v1", "perconaservermongodbs", namespaced);
    spec PerconaServerMongoDBSpec {
        /// Backup settings (`enabled`, `storages`).
        backup: serde_json::Value,
    }
    status PerconaServerMongoDBStatus = "PerconaServerMongoDBStatus" {
        /// Cluster state.
        state: String,
    }
}

view! {
    /// A pbm backup.
    kind "PerconaServerMongoDBBackup" ("psmdb.percona.com", "v1", "perconaservermongodbbackups", namespaced);
    spec PerconaServerMongoDBBackupSpec {
        /// Cluster name.
        cluster_name: String,
        /// Storage name.
        storage_name: String,
        /// `logical`.
        #[serde(rename = "type")]
        type_: String,
        /// Compression.
        compression_type: String,
        /// Compression level.
        compression_level: i64,
    }
    status PerconaServerMongoDBBackupStatus = "PerconaServerMongoDBBackupStatus" {
        /// `ready`, `error`, `rejected`, …
        state: String,
        /// Error text.
        error: String,
        /// Destination URI.
        destination: String,
        /// Completion time.
        completed: String,
        /// Backup type.
        #[serde(rename = "type")]
        type_: String,
        /// Storage name.
        storage_name: String,
        /// S3 coordinates.
        s3: serde_json::Value,
    }
}

view! {
    /// A pbm restore.
    kind "PerconaServerMongoDBRestore" ("psmdb.percona.com", "v1", "perconaservermongodbrestores", namespaced);
    spec PerconaServerMongoDBRestoreSpec {
        /// Cluster name.
        cluster_name: String,
        /// Backup source.
        backup_source: serde_json::Value,
        /// Point-in-time settings.
        pitr: serde_json::Value,
    }
    status PerconaServerMongoDBRestoreStatus = "PerconaServerMongoDBRestoreStatus" {
        /// `ready`, `error`, `rejected`, …
        state: String,
        /// Error text.
        error: String,
    }
}
