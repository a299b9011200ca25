//! What the simulator reads from a Cluster: its test controls, its barman-cloud plugin entry and
//! its `bootstrap.recovery` source. Pure functions of the Cluster object.

use serde_json::Value;

use super::{ANNOTATION_ARCHIVE_DELAY, ANNOTATION_FAIL_BACKUP, ANNOTATION_HANG, PLUGIN};

/// Test controls read from a Cluster's annotations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Controls {
    /// Seconds each WAL archive attempt waits.
    pub archive_delay: Option<f64>,
    /// Backups fail with this message.
    pub fail_backup: Option<String>,
    /// Backups and recovery make no progress.
    pub hang: bool,
}

impl Controls {
    /// Reads the controls of a Cluster.
    pub fn of(cluster: &Value) -> Self {
        let a = &cluster["metadata"]["annotations"];
        Controls {
            archive_delay: a[ANNOTATION_ARCHIVE_DELAY]
                .as_str()
                .and_then(|s| s.trim().trim_end_matches('s').parse::<f64>().ok())
                .filter(|d| *d > 0.0),
            fail_backup: a[ANNOTATION_FAIL_BACKUP]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            hang: a[ANNOTATION_HANG].as_str() == Some("true"),
        }
    }
}

/// The barman-cloud plugin entry of a Cluster: `(barmanObjectName, serverName, isWALArchiver)`.
pub fn plugin_entry(cluster: &Value) -> Option<(String, String, bool)> {
    let name = cluster["metadata"]["name"].as_str().unwrap_or_default();
    cluster["spec"]["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == PLUGIN && p["enabled"] != false)
        .map(|p| {
            let params = &p["parameters"];
            (
                params["barmanObjectName"].as_str().unwrap_or("").to_owned(),
                params["serverName"].as_str().unwrap_or(name).to_owned(),
                p["isWALArchiver"] == true,
            )
        })
}

/// Where a recovery reads from, as CloudNativePG resolves `bootstrap.recovery`.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoverySource {
    /// The ObjectStore named by the external cluster's plugin parameters.
    pub object_store: String,
    /// The server name (the plugin parameter; the new cluster's name when absent).
    pub server_name: String,
    /// `recoveryTarget.targetTime` as the user wrote it.
    pub target_time: Option<String>,
}

/// Reads the recovery source of a Cluster with `bootstrap.recovery`; `Ok(None)` without one.
pub fn recovery_source(cluster: &Value) -> Result<Option<RecoverySource>, String> {
    let recovery = &cluster["spec"]["bootstrap"]["recovery"];
    if recovery.is_null() {
        return Ok(None);
    }
    let name = cluster["metadata"]["name"].as_str().unwrap_or_default();
    let Some(source) = recovery["source"].as_str().filter(|s| !s.is_empty()) else {
        return Err(
            "bootstrap.recovery: only recovery from an external cluster (source) is supported"
                .into(),
        );
    };
    let external = cluster["spec"]["externalClusters"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["name"] == source))
        .ok_or_else(|| format!("missing external cluster: {source}"))?;
    let plugin = &external["plugin"];
    if plugin["name"] != PLUGIN {
        return Err(format!(
            "external cluster {source}: only the {PLUGIN} plugin is supported"
        ));
    }
    let object_store = plugin["parameters"]["barmanObjectName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("external cluster {source}: missing barmanObjectName parameter"))?
        .to_owned();
    let server_name = plugin["parameters"]["serverName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or(name)
        .to_owned();
    let target = &recovery["recoveryTarget"];
    for unsupported in ["targetXID", "targetName", "targetLSN", "targetImmediate"] {
        if !target[unsupported].is_null() {
            return Err(format!(
                "recoveryTarget.{unsupported} is not supported by the simulator"
            ));
        }
    }
    let target_time = target["targetTime"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    Ok(Some(RecoverySource {
        object_store,
        server_name,
        target_time,
    }))
}
