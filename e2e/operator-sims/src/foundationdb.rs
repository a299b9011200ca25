//! Simulated FoundationDB operator (the parts the backup platform depends on): cluster health and
//! `FoundationDBBackup` progress, reported the way the real operator's status does.
//!
//! ```text
//!  FoundationDBCluster ─► status.health {available, healthy}, runningVersion, generations.reconciled
//!  FoundationDBBackup (cluster exists):
//!     backupState Running ─► agents up, backup started (running, snapshotTime 0)
//!                         ─► first snapshot written (snapshotTime = snapshot period, restorable,
//!                            generations.reconciled = generation)
//!     backupState Stopped ─► running=false, reconciled
//!  FoundationDBRestore (cluster exists) ─► running, state Running ─► running=false, state Completed
//! ```
//!
//! Test controls (annotations on the FoundationDBCluster): [`crate::cnpg::ANNOTATION_FAIL_BACKUP`]
//! (the agents run but cannot start the backup: `generations.needsBackupStart`, no restorable
//! snapshot ever), [`crate::cnpg::ANNOTATION_HANG`] (the agent Deployment never becomes ready: no
//! `backupDetails`), [`ANNOTATION_UNAVAILABLE`] (`health.available=false`);
//! [`crate::cnpg::ANNOTATION_FAIL_RESTORE`] (restores into the cluster stop with the annotation's
//! value as their state, e.g. `Aborted`: the operator has no terminal failure state, so a failed
//! restore never reads `Completed`) and [`crate::cnpg::ANNOTATION_HANG_RESTORE`] (`"true"`: they
//! stay `Running`). Every transition is one status write; the next one follows the watch event of
//! that write (no timers). No restore agent runs: nothing is read from the blob store.

use api::thirdparty::fdb::{FoundationDBBackup, FoundationDBCluster, FoundationDBRestore};
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::cnpg::{
    ANNOTATION_FAIL_BACKUP, ANNOTATION_FAIL_RESTORE, ANNOTATION_HANG, ANNOTATION_HANG_RESTORE,
};

/// Field manager of the simulated operator.
pub const FIELD_MANAGER: &str = "operator-sims-fdb";
/// Test control (`"true"`): the cluster reports `health.available=false`.
pub const ANNOTATION_UNAVAILABLE: &str = "operator-sims.cozy-backups.io/unavailable";
/// The operator's default snapshot period (10 days).
pub const DEFAULT_SNAPSHOT_PERIOD: i64 = 864_000;
/// The operator's default agent count.
pub const DEFAULT_AGENT_COUNT: i64 = 2;

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key]
        .as_str()
        .filter(|v| !v.is_empty())
}

/// The status a cluster should report.
pub fn cluster_status(cluster: &Value) -> Value {
    let available = annotation(cluster, ANNOTATION_UNAVAILABLE) != Some("true");
    let mut status = json!({
        "health": {"available": available, "healthy": available, "fullReplication": available},
        "generations": {"reconciled": cluster["metadata"]["generation"].as_i64().unwrap_or(1)},
    });
    if let Some(v) = cluster["spec"]["version"]
        .as_str()
        .filter(|v| !v.is_empty())
    {
        status["runningVersion"] = json!(v);
    }
    status
}

/// Query-escapes a URL parameter value as Go's `url.QueryEscape` does.
fn query_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// The blob store URL the operator reports: `blobstore://[<key>@]<host>[:port]/<backupName>?bucket=…`
/// with the URL parameters (sorted by key) and the default port (443, or 80 when
/// `secure_connection=0`).
pub fn backup_url(backup: &Value) -> String {
    let blob = &backup["spec"]["blobStoreConfiguration"];
    let account = blob["accountName"].as_str().unwrap_or_default();
    let (user, host) = match account.split_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, account),
    };
    let name = blob["backupName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or_else(|| backup["metadata"]["name"].as_str())
        .unwrap_or_default();
    let bucket = blob["bucket"]
        .as_str()
        .filter(|b| !b.is_empty())
        .unwrap_or("fdb-backups");
    let mut query = std::collections::BTreeMap::from([("bucket".to_owned(), bucket.to_owned())]);
    let mut port = 443;
    for p in blob["urlParameters"].as_array().into_iter().flatten() {
        let Some((k, v)) = p.as_str().and_then(|p| p.split_once('=')) else {
            continue;
        };
        if (k == "sc" || k == "secure_connection") && v == "0" {
            port = 80;
        }
        query.insert(k.to_owned(), v.to_owned());
    }
    let host = if host
        .rsplit_once(':')
        .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
    {
        host.to_owned()
    } else {
        format!("{host}:{port}")
    };
    let user = user.map(|u| format!("{u}@")).unwrap_or_default();
    let query: Vec<String> = query
        .iter()
        .map(|(k, v)| format!("{}={}", query_escape(k), query_escape(v)))
        .collect();
    format!("blobstore://{user}{host}/{name}?{}", query.join("&"))
}

/// The status a FoundationDBBackup should report next (`None`: leave it as it is).
pub fn backup_status(backup: &Value, cluster: Option<&Value>) -> Option<Value> {
    let cluster = cluster?;
    let generation = backup["metadata"]["generation"].as_i64().unwrap_or(1);
    let spec = &backup["spec"];
    let agents = spec["agentCount"].as_i64().unwrap_or(DEFAULT_AGENT_COUNT);
    let period = spec["snapshotPeriodSeconds"]
        .as_i64()
        .unwrap_or(DEFAULT_SNAPSHOT_PERIOD);
    let url = backup_url(backup);
    if annotation(cluster, ANNOTATION_HANG) == Some("true") {
        return Some(json!({
            "agentCount": 0,
            "deploymentConfigured": false,
            "generations": {"needsBackupAgentUpdate": generation},
        }));
    }
    let state = spec["backupState"].as_str().unwrap_or("Running");
    if state == "Stopped" {
        return Some(json!({
            "agentCount": agents,
            "deploymentConfigured": true,
            "backupDetails": {"url": url, "running": false, "snapshotTime": period},
            "generations": {"reconciled": generation},
        }));
    }
    if annotation(cluster, ANNOTATION_FAIL_BACKUP).is_some() {
        return Some(json!({
            "agentCount": agents,
            "deploymentConfigured": true,
            "backupDetails": {"url": url},
            "generations": {"needsBackupStart": generation},
        }));
    }
    let details = &backup["status"]["backupDetails"];
    let started =
        details["running"].as_bool() == Some(true) && details["url"].as_str() == Some(url.as_str());
    if !started {
        return Some(json!({
            "agentCount": agents,
            "deploymentConfigured": true,
            "backupDetails": {"url": url, "running": true},
            "generations": {"reconciled": generation},
        }));
    }
    Some(json!({
        "agentCount": agents,
        "deploymentConfigured": true,
        "backupDetails": {"url": url, "running": true, "snapshotTime": period, "restorable": true},
        "generations": {"reconciled": generation},
    }))
}

/// The status a FoundationDBRestore should report next (`None`: leave it as it is): the operator
/// starts the restore once its destination cluster exists, then reports it `Completed`.
pub fn restore_status(restore: &Value, cluster: Option<&Value>) -> Option<Value> {
    let cluster = cluster?;
    let status = &restore["status"];
    if status["state"]
        .as_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("completed"))
        || status["running"] == false
    {
        return None;
    }
    let generations =
        json!({"reconciled": restore["metadata"]["generation"].as_i64().unwrap_or(1)});
    if status["running"] != true {
        return Some(json!({"running": true, "state": "Running", "generations": generations}));
    }
    if let Some(state) = annotation(cluster, ANNOTATION_FAIL_RESTORE) {
        return Some(json!({"running": false, "state": state, "generations": generations}));
    }
    if annotation(cluster, ANNOTATION_HANG_RESTORE) == Some("true") {
        return None;
    }
    Some(json!({"running": false, "state": "Completed", "generations": generations}))
}

/// Runs the simulator forever.
pub async fn run(client: kube::Client, readiness: runtime::Readiness) -> anyhow::Result<()> {
    crate::cluster_backups::run(
        client,
        readiness,
        crate::cluster_backups::Operator {
            sim: "fdb",
            field_manager: FIELD_MANAGER,
            clusters: ApiResource::erase::<FoundationDBCluster>(&()),
            backups: ApiResource::erase::<FoundationDBBackup>(&()),
            cluster_status,
            backup_status,
            restores: crate::cluster_backups::Restores {
                kind: ApiResource::erase::<FoundationDBRestore>(&()),
                cluster_field: "destinationClusterName",
                status: restore_status,
            },
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(state: &str, status: Value) -> Value {
        json!({"metadata": {"name": "bj-abcde", "namespace": "t", "generation": 1},
               "spec": {"clusterName": "foundationdb-db", "backupState": state,
                        "snapshotPeriodSeconds": 3600,
                        "blobStoreConfiguration": {"accountName": "s3.example", "bucket": "bk", "backupName": "bj",
                                                   "urlParameters": ["secure_connection=0", "bucket_path=t/db"]}},
               "status": status})
    }

    #[test]
    fn urls_follow_the_operator() {
        assert_eq!(
            backup_url(&backup("Running", json!({}))),
            "blobstore://s3.example:80/bj?bucket=bk&bucket_path=t%2Fdb&secure_connection=0"
        );
        let keyed = json!({"metadata": {"name": "n"},
                           "spec": {"blobStoreConfiguration": {"accountName": "key@s3:9000"}}});
        assert_eq!(
            backup_url(&keyed),
            "blobstore://key@s3:9000/n?bucket=fdb-backups"
        );
    }

    #[test]
    fn a_backup_starts_then_becomes_restorable() {
        let cluster = json!({"metadata": {"name": "foundationdb-db"}});
        assert_eq!(backup_status(&backup("Running", json!({})), None), None);
        let first = backup_status(&backup("Running", json!({})), Some(&cluster)).unwrap();
        assert_eq!(first["backupDetails"]["running"], true);
        assert_eq!(first["backupDetails"].get("snapshotTime"), None);
        let second = backup_status(&backup("Running", first), Some(&cluster)).unwrap();
        assert_eq!(second["backupDetails"]["snapshotTime"], 3600);
        assert_eq!(second["generations"]["reconciled"], 1);
        let stopped = backup_status(&backup("Stopped", second), Some(&cluster)).unwrap();
        assert_eq!(stopped["backupDetails"]["running"], false);
    }

    #[test]
    fn controls() {
        let with = |k: &str, v: &str| json!({"metadata": {"name": "c", "annotations": {k: v}}});
        let hung = backup_status(
            &backup("Running", json!({})),
            Some(&with(ANNOTATION_HANG, "true")),
        )
        .unwrap();
        assert_eq!(hung.get("backupDetails"), None);
        let failing = backup_status(
            &backup("Running", json!({})),
            Some(&with(ANNOTATION_FAIL_BACKUP, "true")),
        )
        .unwrap();
        assert_eq!(failing["generations"], json!({"needsBackupStart": 1}));
        assert_eq!(failing["backupDetails"].get("running"), None);
        let down = cluster_status(&with(ANNOTATION_UNAVAILABLE, "true"));
        assert_eq!(down["health"]["available"], false);
        let up =
            cluster_status(&json!({"metadata": {"generation": 2}, "spec": {"version": "7.3.63"}}));
        assert_eq!(
            up,
            json!({"health": {"available": true, "healthy": true, "fullReplication": true},
                   "generations": {"reconciled": 2}, "runningVersion": "7.3.63"})
        );
    }

    #[test]
    fn a_restore_runs_to_completed_or_stops() {
        let restore = |status: Value| {
            json!({"metadata": {"name": "rj-abcde", "generation": 1},
                   "spec": {"destinationClusterName": "foundationdb-db"}, "status": status})
        };
        let with = |k: &str, v: &str| json!({"metadata": {"name": "c", "annotations": {k: v}}});
        let plain = json!({"metadata": {"name": "c"}});
        assert_eq!(
            restore_status(&restore(json!({})), None),
            None,
            "waits for its cluster"
        );
        let running = restore_status(&restore(json!({})), Some(&plain)).unwrap();
        assert_eq!(
            (running["running"].clone(), running["state"].clone()),
            (json!(true), json!("Running"))
        );
        let done = restore_status(&restore(running.clone()), Some(&plain)).unwrap();
        assert_eq!(
            (done["running"].clone(), done["state"].clone()),
            (json!(false), json!("Completed"))
        );
        assert_eq!(restore_status(&restore(done), Some(&plain)), None);
        let aborted = restore_status(
            &restore(running.clone()),
            Some(&with(ANNOTATION_FAIL_RESTORE, "Aborted")),
        )
        .unwrap();
        assert_eq!(
            (aborted["running"].clone(), aborted["state"].clone()),
            (json!(false), json!("Aborted"))
        );
        assert_eq!(
            restore_status(&restore(aborted), Some(&plain)),
            None,
            "stopped for good"
        );
        assert_eq!(
            restore_status(
                &restore(running),
                Some(&with(ANNOTATION_HANG_RESTORE, "true"))
            ),
            None
        );
    }
}
