//! `postgresql.cnpg.io/v1`: CloudNativePG `Cluster` and `Backup`.

use super::{Extra, view};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

view! {
    /// A CloudNativePG cluster (`postgres-<app>` for a Postgres application).
    kind "Cluster" ("postgresql.cnpg.io", "v1", "clusters", namespaced);
    spec ClusterSpec {
        /// Plugins; the barman-cloud plugin entry wires WAL archiving.
        plugins: Vec<ClusterPlugin>,
        /// Bootstrap method; `recovery` marks a cluster restored from a backup.
        bootstrap: serde_json::Value,
        /// Number of instances.
        instances: i64,
        /// External clusters; a recovery bootstrap names one as its `source`.
        external_clusters: Vec<serde_json::Value>,
    }
    status ClusterStatus = "ClusterStatus" {
        /// Human-readable phase; `Cluster in healthy state` when healthy.
        phase: String,
        /// Earliest recoverable point (unreliable under the barman-cloud plugin).
        first_recoverability_point: String,
        /// Instances the cluster has.
        instances: i64,
        /// Instances that are ready.
        ready_instances: i64,
        /// The current primary instance (pod name).
        current_primary: String,
        /// Conditions (`Ready`, `ContinuousArchiving`, `LastBackupSucceeded`).
        conditions: Vec<serde_json::Value>,
    }
}

impl Cluster {
    /// True when `spec.bootstrap.recovery` is present.
    pub fn has_recovery_bootstrap(&self) -> bool {
        self.spec
            .bootstrap
            .as_ref()
            .and_then(|b| b.get("recovery"))
            .is_some_and(|r| !r.is_null())
    }
}

/// A plugin entry of a cnpg Cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPlugin {
    /// Plugin name, e.g. `barman-cloud.cloudnative-pg.io`.
    pub name: String,
    /// Whether this plugin archives WAL.
    #[serde(
        default,
        rename = "isWALArchiver",
        skip_serializing_if = "Option::is_none"
    )]
    pub is_wal_archiver: Option<bool>,
    /// Whether the plugin is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// Plugin parameters (`barmanObjectName`, `serverName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<BTreeMap<String, String>>,
    /// Unmodelled fields.
    #[serde(flatten)]
    pub extra: Extra,
}

view! {
    /// A CloudNativePG on-demand backup.
    kind "Backup" ("postgresql.cnpg.io", "v1", "backups", namespaced);
    spec BackupSpec {
        /// `plugin` for the barman-cloud plugin.
        method: String,
        /// The cluster to back up.
        cluster: NameRef,
        /// Plugin to use.
        plugin_configuration: PluginConfiguration,
    }
    status BackupStatus = "BackupStatus" {
        /// `completed`, `failed`, `running`, … (lower case).
        phase: String,
        /// Error text of a failed backup.
        error: String,
        /// When the backup started.
        started_at: Time,
        /// When the backup stopped.
        stopped_at: Time,
        /// First WAL of the backup.
        begin_wal: String,
        /// Last WAL of the backup.
        end_wal: String,
        /// LSN where the backup began.
        #[serde(rename = "beginLSN")]
        begin_lsn: String,
        /// LSN where the backup ended.
        #[serde(rename = "endLSN")]
        end_lsn: String,
        /// barman's backup id.
        backup_id: String,
        /// barman's backup name.
        backup_name: String,
        /// The barman server name (the S3 prefix under the destination path).
        server_name: String,
        /// Where the backup was written.
        destination_path: String,
        /// The object store endpoint used.
        #[serde(rename = "endpointURL")]
        endpoint_url: String,
        /// Backup method used (`plugin`).
        method: String,
        /// Plugin-specific metadata (`timeline`, `clusterUID`, …).
        plugin_metadata: std::collections::BTreeMap<String, String>,
    }
}

/// `{name: …}`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct NameRef {
    /// The name.
    pub name: String,
}

/// Plugin selection of a cnpg Backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct PluginConfiguration {
    /// Plugin name.
    pub name: String,
    /// Plugin parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<BTreeMap<String, String>>,
}
