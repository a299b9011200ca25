//! `k8s.mariadb.com/v1alpha1`: mariadb-operator `MariaDB`, `Backup`, `Restore`.

use super::view;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

view! {
    /// A mariadb-operator database server (`mariadb-<app>`).
    kind "MariaDB" ("k8s.mariadb.com", "v1alpha1", "mariadbs", namespaced);
    spec MariaDBSpec {
        /// Number of replicas.
        replicas: i64,
    }
    status MariaDBStatus = "MariaDBStatus" {
        /// Conditions (`Ready`).
        conditions: Vec<Condition>,
    }
}

view! {
    /// A logical backup.
    kind "Backup" ("k8s.mariadb.com", "v1alpha1", "backups", namespaced);
    spec BackupSpec {
        /// The MariaDB to dump.
        maria_db_ref: serde_json::Value,
        /// Exactly one of s3, persistentVolumeClaim, volume.
        storage: serde_json::Value,
        /// Databases to dump.
        databases: Vec<String>,
        /// Compression.
        compression: String,
        /// Log level.
        log_level: String,
        /// Operator retention.
        max_retention: String,
    }
    status BackupStatus = "BackupStatus" {
        /// Conditions (`Complete`).
        conditions: Vec<Condition>,
    }
}

view! {
    /// A restore from a Backup.
    kind "Restore" ("k8s.mariadb.com", "v1alpha1", "restores", namespaced);
    spec RestoreSpec {
        /// The MariaDB to restore into.
        maria_db_ref: serde_json::Value,
        /// The Backup to restore (`{kind: Backup, name}`).
        backup_ref: serde_json::Value,
    }
    status RestoreStatus = "RestoreStatus" {
        /// Conditions (`Complete`).
        conditions: Vec<Condition>,
    }
}
