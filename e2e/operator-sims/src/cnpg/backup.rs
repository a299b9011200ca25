//! On-demand plugin Backups: one job per Backup, from `started` to `completed`/`failed`, running
//! barman-cloud-backup against the primary and refreshing the ObjectStore's recovery window.

use std::sync::Arc;

use api::thirdparty::barman::ObjectStore;
use api::thirdparty::cnpg::Backup;
use serde_json::{Value, json};

use super::PLUGIN;
use super::object_store::resolve_object_store;
use super::shared::Shared;
use super::spec::{Controls, plugin_entry};
use crate::pg::{self, BarmanTarget, InstanceDir, Toolchain};

/// One plugin Backup, from `started` to `completed`/`failed`.
pub(super) struct BackupJob {
    pub(super) shared: Arc<Shared>,
    pub(super) ns: String,
    pub(super) name: String,
    pub(super) cluster: String,
    pub(super) cluster_uid: String,
    pub(super) dir: InstanceDir,
    pub(super) port: u16,
    pub(super) lock: Arc<tokio::sync::Mutex<()>>,
}

impl BackupJob {
    async fn set(&self, status: Value) {
        self.shared
            .patch_status::<Backup>(&self.ns, &self.name, status)
            .await;
    }

    async fn fail(&self, error: String) {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        tracing::info!(
            namespace = self.ns,
            backup = self.name,
            error,
            "backup failed"
        );
        self.set(json!({"phase": "failed", "error": error, "reconciliationTerminatedAt": now}))
            .await;
        self.shared
            .set_condition(
                &self.ns,
                &self.cluster,
                json!({"type": "LastBackupSucceeded", "status": "False",
                       "reason": "LastBackupFailed", "message": error}),
            )
            .await;
    }

    pub(super) async fn run(self) {
        let Some(backup) = self.shared.backups.get(&self.ns, &self.name) else {
            return;
        };
        if backup["spec"]["method"] != "plugin" {
            return self
                .fail(format!(
                    "unsupported backup method {} (the simulator implements method plugin)",
                    backup["spec"]["method"]
                ))
                .await;
        }
        let plugin = backup["spec"]["pluginConfiguration"]["name"]
            .as_str()
            .unwrap_or("");
        if plugin != PLUGIN {
            return self
                .fail(format!("requested plugin is not available: {plugin}"))
                .await;
        }
        if self.lock.try_lock().is_err() {
            self.set(json!({"phase": "pending"})).await;
        }
        let _guard = self.lock.lock().await;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        self.set(json!({
            "phase": "started", "error": null, "method": "plugin",
            "instanceID": {"podName": format!("{}-1", self.cluster)},
            "reconciliationStartedAt": now,
        }))
        .await;
        self.shared
            .set_condition(
                &self.ns,
                &self.cluster,
                json!({"type": "LastBackupSucceeded", "status": "False",
                       "reason": "BackupStarted", "message": "New Backup starting up"}),
            )
            .await;
        // Hang: stay `started` until the control is removed (or the cluster goes).
        let mut tick = self.shared.tick.subscribe();
        loop {
            let cluster = self
                .shared
                .clusters
                .get(&self.ns, &self.cluster)
                .filter(|c| c["metadata"]["uid"] == self.cluster_uid.as_str());
            let Some(cluster) = cluster else { return };
            if !Controls::of(&cluster).hang {
                break;
            }
            if tick.changed().await.is_err() {
                return;
            }
        }
        let Some(cluster) = self.shared.clusters.get(&self.ns, &self.cluster) else {
            return;
        };
        if let Some(message) = Controls::of(&cluster).fail_backup {
            return self.fail(message).await;
        }
        let Some((store, server_name, _)) = plugin_entry(&cluster) else {
            return self
                .fail(format!(
                    "cluster {} has no {PLUGIN} plugin entry to take a backup with",
                    self.cluster
                ))
                .await;
        };
        let resolved = match resolve_object_store(
            &self.shared.object_stores,
            &self.shared.secrets,
            &self.ns,
            &store,
        ) {
            Ok(r) => r,
            Err(e) => return self.fail(e).await,
        };
        let target = match self.shared.target(
            &self.dir,
            &store,
            &resolved,
            &server_name,
            &resolved.data_args,
        ) {
            Ok(t) => t,
            Err(e) => return self.fail(e).await,
        };
        let barman_name = format!("backup-{}", chrono::Utc::now().format("%Y%m%d%H%M%S"));
        tracing::info!(
            namespace = self.ns,
            backup = self.name,
            server = server_name,
            "running barman-cloud-backup"
        );
        let server = ServerRef {
            dir: self.dir.clone(),
            port: self.port,
        };
        let info = match server
            .backup(&self.shared.options.toolchain, &target, &barman_name)
            .await
        {
            Ok(i) => i,
            Err(e) => {
                self.record_failed_time(&store, &server_name).await;
                return self.fail(e.to_string()).await;
            }
        };
        let ts = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map(|t| json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
                .unwrap_or(Value::Null)
        };
        // The plugin refreshes the recovery window before it reports the backup done.
        self.refresh_recovery_window(&store, &target).await;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        self.set(json!({
            "phase": "completed",
            "error": null,
            "backupId": info.backup_id,
            "backupName": info.backup_name.clone().unwrap_or(barman_name.clone()),
            "serverName": server_name,
            "destinationPath": target.destination_path,
            "endpointURL": target.endpoint_url,
            "beginWal": info.begin_wal,
            "endWal": info.end_wal,
            "beginLSN": info.begin_xlog,
            "endLSN": info.end_xlog,
            "startedAt": ts(info.begun()),
            "stoppedAt": ts(info.ended()),
            "online": true,
            "reconciliationTerminatedAt": now,
            "pluginMetadata": {
                "timeline": info.timeline.unwrap_or(1).to_string(),
                "version": "150000",
                "name": barman_name,
                "displayName": barman_name,
                "clusterUID": self.cluster_uid,
                "pluginName": PLUGIN,
            },
        }))
        .await;
        tracing::info!(
            namespace = self.ns,
            backup = self.name,
            backup_id = info.backup_id,
            "backup completed"
        );
        self.shared
            .set_condition(
                &self.ns,
                &self.cluster,
                json!({"type": "LastBackupSucceeded", "status": "True",
                       "reason": "LastBackupSucceeded", "message": "Backup was successful"}),
            )
            .await;
    }

    async fn refresh_recovery_window(&self, store: &str, target: &BarmanTarget) {
        let list =
            match pg::list_backups(&self.shared.options.toolchain, &self.dir.root, target).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the backup list failed");
                    return;
                }
            };
        let done: Vec<_> = list.iter().filter(|b| b.status == "DONE").collect();
        let first = done.iter().filter_map(|b| b.ended()).min();
        let last = done.iter().filter_map(|b| b.ended()).max();
        let fmt = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map(|t| json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
                .unwrap_or(Value::Null)
        };
        let window =
            json!({"firstRecoverabilityPoint": fmt(first), "lastSuccessfulBackupTime": fmt(last)});
        self.shared
            .patch_status::<ObjectStore>(
                &self.ns,
                store,
                json!({"serverRecoveryWindow": {target.server_name.clone(): window}}),
            )
            .await;
    }

    async fn record_failed_time(&self, store: &str, server_name: &str) {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        self.shared
            .patch_status::<ObjectStore>(
                &self.ns,
                store,
                json!({"serverRecoveryWindow": {server_name: {"lastFailedBackupTime": now}}}),
            )
            .await;
    }
}

/// The address of a running server, for commands that connect to it.
struct ServerRef {
    dir: InstanceDir,
    port: u16,
}

impl ServerRef {
    async fn backup(
        &self,
        tc: &Toolchain,
        target: &BarmanTarget,
        name: &str,
    ) -> Result<pg::BackupInfo, pg::Error> {
        pg::take_backup(tc, &self.dir, self.port, target, name).await
    }
}
