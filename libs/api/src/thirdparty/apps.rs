//! `apps.cozystack.io/v1alpha1`: the tenant application kinds the drivers read, and `Bucket`.
//!
//! On a real cluster these are served by the aggregated `cozystack-api`; in tests the emulator serves
//! them from permissive CRDs. Each view models the fields the drivers use.

use super::view;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

view! {
    /// A tenant bucket; the platform's `cozy-backups` Bucket in `tenant-root` backs `cozy-default`.
    kind "Bucket" ("apps.cozystack.io", "v1alpha1", "buckets", namespaced);
    spec BucketSpec {
        /// Users of the bucket; the platform creates `system`.
        users: BTreeMap<String, BucketUser>,
    }
    status BucketStatus = "BucketStatus" {
        /// Whether the bucket is ready.
        ready: bool,
    }
}

/// A Bucket user.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct BucketUser {
    /// Read-only access.
    #[serde(default)]
    pub readonly: bool,
}

view! {
    /// A Postgres application (cnpg Cluster `postgres-<name>`).
    kind "Postgres" ("apps.cozystack.io", "v1alpha1", "postgreses", namespaced);
    spec PostgresSpec {
        /// Databases (name → roles/extensions), snapshotted into backups.
        databases: serde_json::Value,
        /// Users (name → password/replication), snapshotted into backups.
        users: serde_json::Value,
        /// Recovery bootstrap (`enabled`, `oldName`, `serverName`, `recoveryTime`).
        bootstrap: serde_json::Value,
        /// Chart-managed backup settings.
        backup: serde_json::Value,
    }
    status PostgresStatus = "PostgresStatus" {
        /// Conditions.
        conditions: Vec<serde_json::Value>,
    }
}

view! {
    /// A MariaDB application (operator CR `mariadb-<name>`).
    kind "MariaDB" ("apps.cozystack.io", "v1alpha1", "mariadbs", namespaced);
    spec MariaDBSpec {
        /// Databases.
        databases: serde_json::Value,
        /// Users.
        users: serde_json::Value,
    }
    status MariaDBStatus = "MariaDBStatus" {
        /// Conditions.
        conditions: Vec<serde_json::Value>,
    }
}

view! {
    /// An Etcd application (singleton operator CR `etcd`).
    kind "Etcd" ("apps.cozystack.io", "v1alpha1", "etcds", namespaced);
    spec EtcdSpec {
        /// Number of members.
        replicas: i64,
    }
    status EtcdStatus = "EtcdStatus" {
        /// Conditions.
        conditions: Vec<serde_json::Value>,
    }
}

view! {
    /// A ClickHouse application (release `clickhouse-<name>`).
    kind "ClickHouse" ("apps.cozystack.io", "v1alpha1", "clickhouses", namespaced);
    spec ClickHouseSpec {
        /// Backup sidecar settings (`enabled`, `useSystemBucket`, …).
        backup: serde_json::Value,
    }
    status ClickHouseStatus = "ClickHouseStatus" {
        /// Conditions.
        conditions: Vec<serde_json::Value>,
    }
}

view! {
    /// A MongoDB application (Percona cluster `mongodb-<name>`).
    kind "MongoDB" ("apps.cozystack.io", "v1alpha1", "mongodbs", namespaced);
    spec MongoDBSpec {
        /// Backup settings (`enabled`, `destinationPath`, `endpointURL`, …).
        backup: serde_json::Value,
    }
    status MongoDBStatus = "MongoDBStatus" {
        /// Conditions.
        conditions: Vec<serde_json::Value>,
    }
}

view! {
    /// A FoundationDB application (cluster `foundationdb-<name>`).
    kind "FoundationDB" ("apps.cozystack.io", "v1alpha1", "foundationdbs", namespaced);
    spec FoundationDBSpec {
        /// Backup settings.
        backup: serde_json::Value,
    }
    status FoundationDBStatus = "FoundationDBStatus" {
        /// Conditions.
        conditions: Vec<serde_json::Value>,
    }
}

view! {
    /// A virtual machine (HelmRelease `vm-instance-<name>`).
    kind "VMInstance" ("apps.cozystack.io", "v1alpha1", "vminstances", namespaced);
    spec VMInstanceSpec {
        /// Attached disks by VMDisk name.
        disks: Vec<VMInstanceDisk>,
        /// Run strategy.
        run_strategy: String,
    }
    status VMInstanceStatus = "VMInstanceStatus" {
        /// Conditions.
        conditions: Vec<serde_json::Value>,
    }
}

/// A disk attached to a VMInstance.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct VMInstanceDisk {
    /// VMDisk name.
    pub name: String,
    /// Disk bus.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus: Option<String>,
}

view! {
    /// A virtual machine disk (HelmRelease `vm-disk-<name>`).
    kind "VMDisk" ("apps.cozystack.io", "v1alpha1", "vmdisks", namespaced);
    spec VMDiskSpec {
        /// Disk size.
        storage: String,
        /// Storage class.
        storage_class: String,
    }
    status VMDiskStatus = "VMDiskStatus" {
        /// Conditions.
        conditions: Vec<serde_json::Value>,
    }
}
