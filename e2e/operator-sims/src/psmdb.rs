//! Simulated Percona Server for MongoDB operator (the parts the backup platform depends on): the
//! cluster's state and `PerconaServerMongoDBBackup` progress through pbm's states.
//!
//! ```text
//!  PerconaServerMongoDB ─► status.state ready
//!  PerconaServerMongoDBBackup ─► requested ─► running (start, pbmName) ─► ready (completed,
//!     destination s3://<bucket>/<prefix>/<pbmName>, s3, storageName, type, size)
//!     cluster missing, backups disabled or storage undeclared ─► error with the operator's message
//!  PerconaServerMongoDBRestore ─► requested ─► running (pbmName, pitrTarget of a point-in-time
//!     restore) ─► ready (completed)
//!     cluster missing or backups disabled ─► error with the operator's message
//! ```
//!
//! Test controls (annotations on the PerconaServerMongoDB): [`crate::cnpg::ANNOTATION_FAIL_BACKUP`]
//! (the backup ends `error` with the annotation's value as `status.error`),
//! [`crate::cnpg::ANNOTATION_HANG`] (`"true"`: the backup stays `running`);
//! [`crate::cnpg::ANNOTATION_FAIL_RESTORE`] and [`crate::cnpg::ANNOTATION_HANG_RESTORE`] do the
//! same to restores into that cluster. Every transition is one status write; the next one follows
//! the watch event of that write (no timers). No pbm runs: nothing is read from the bucket.

use api::thirdparty::percona::{PerconaServerMongoDB, PerconaServerMongoDBBackup};
use kube::core::ApiResource;
use serde_json::{Value, json};

use api::thirdparty::percona::PerconaServerMongoDBRestore;

use crate::cnpg::{
    ANNOTATION_FAIL_BACKUP, ANNOTATION_FAIL_RESTORE, ANNOTATION_HANG, ANNOTATION_HANG_RESTORE,
};
use crate::conditions::now;

/// Field manager of the simulated operator.
pub const FIELD_MANAGER: &str = "operator-sims-psmdb";

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key]
        .as_str()
        .filter(|v| !v.is_empty())
}

/// The status a cluster should report.
pub fn cluster_status(cluster: &Value) -> Value {
    json!({
        "state": "ready",
        "observedGeneration": cluster["metadata"]["generation"].as_i64().unwrap_or(1),
    })
}

/// Why the operator cannot run `backup` on `cluster` (its error message), if it cannot.
fn refusal(backup: &Value, cluster: Option<&Value>) -> Option<String> {
    let name = backup["spec"]["clusterName"].as_str().unwrap_or_default();
    let Some(cluster) = cluster else {
        return Some(format!(
            "get cluster: perconaservermongodbs.psmdb.percona.com {name:?} not found"
        ));
    };
    if cluster["spec"]["backup"]["enabled"].as_bool() != Some(true) {
        return Some("backups are disabled for the cluster".into());
    }
    let storage = backup["spec"]["storageName"].as_str().unwrap_or_default();
    if cluster["spec"]["backup"]["storages"].get(storage).is_none() {
        return Some(format!("unable to get storage '{storage}'"));
    }
    None
}

/// The status a PerconaServerMongoDBBackup should report next (`None`: leave it as it is).
/// `now` is the current time (RFC 3339, seconds).
pub fn backup_status(backup: &Value, cluster: Option<&Value>, now: &str) -> Option<Value> {
    let status = &backup["status"];
    let state = status["state"].as_str().unwrap_or_default();
    if matches!(state, "ready" | "error" | "rejected") {
        return None;
    }
    if let Some(error) = refusal(backup, cluster) {
        return Some(json!({"state": "error", "error": error, "lastTransition": now}));
    }
    let cluster = cluster?;
    let spec = &backup["spec"];
    let storage_name = spec["storageName"].as_str().unwrap_or_default();
    let kind = spec["type"]
        .as_str()
        .filter(|t| !t.is_empty())
        .unwrap_or("logical");
    match state {
        "" | "waiting" => Some(json!({"state": "requested", "lastTransition": now})),
        "requested" => {
            let pbm_name = now.to_owned();
            Some(json!({
                "state": "running",
                "start": now,
                "lastTransition": now,
                "pbmName": pbm_name,
                "type": kind,
                "storageName": storage_name,
            }))
        }
        _ => {
            if let Some(error) = annotation(cluster, ANNOTATION_FAIL_BACKUP) {
                let mut s = status.clone();
                s["state"] = json!("error");
                s["error"] = json!(error);
                s["lastTransition"] = json!(now);
                return Some(s);
            }
            if annotation(cluster, ANNOTATION_HANG) == Some("true") {
                return None;
            }
            let s3 = &cluster["spec"]["backup"]["storages"][storage_name]["s3"];
            let pbm_name = status["pbmName"].as_str().unwrap_or(now);
            let mut done = status.clone();
            done["state"] = json!("ready");
            done["completed"] = json!(now);
            done["lastTransition"] = json!(now);
            done["size"] = json!("1.21MB");
            if s3.is_object() {
                let bucket = s3["bucket"].as_str().unwrap_or_default();
                let destination = match s3["prefix"].as_str().filter(|p| !p.is_empty()) {
                    Some(prefix) => format!("s3://{bucket}/{prefix}/{pbm_name}"),
                    None => format!("s3://{bucket}/{pbm_name}"),
                };
                done["destination"] = json!(destination);
                done["s3"] = s3.clone();
            }
            Some(done)
        }
    }
}

/// The status a PerconaServerMongoDBRestore should report next (`None`: leave it as it is).
/// `now` is the current time (RFC 3339, seconds).
pub fn restore_status(restore: &Value, cluster: Option<&Value>, now: &str) -> Option<Value> {
    let status = &restore["status"];
    let state = status["state"].as_str().unwrap_or_default();
    if matches!(state, "ready" | "error" | "rejected") {
        return None;
    }
    let name = restore["spec"]["clusterName"].as_str().unwrap_or_default();
    let Some(cluster) = cluster else {
        return Some(json!({"state": "error", "lastTransition": now,
            "error": format!("get cluster: perconaservermongodbs.psmdb.percona.com {name:?} not found")}));
    };
    if cluster["spec"]["backup"]["enabled"].as_bool() != Some(true) {
        return Some(json!({"state": "error", "lastTransition": now,
            "error": "backups are disabled for the cluster"}));
    }
    match state {
        "" | "waiting" => Some(json!({"state": "requested", "lastTransition": now})),
        "requested" => {
            let mut running = json!({"state": "running", "lastTransition": now, "pbmName": now});
            if let Some(date) = restore["spec"]["pitr"]["date"].as_str() {
                running["pitrTarget"] = json!(date);
            }
            Some(running)
        }
        _ => {
            let mut next = status.clone();
            if let Some(error) = annotation(cluster, ANNOTATION_FAIL_RESTORE) {
                next["state"] = json!("error");
                next["error"] = json!(error);
            } else if annotation(cluster, ANNOTATION_HANG_RESTORE) == Some("true") {
                return None;
            } else {
                next["state"] = json!("ready");
                next["completed"] = json!(now);
            }
            next["lastTransition"] = json!(now);
            Some(next)
        }
    }
}

/// Runs the simulator forever.
pub async fn run(client: kube::Client, readiness: runtime::Readiness) -> anyhow::Result<()> {
    crate::cluster_backups::run(
        client,
        readiness,
        crate::cluster_backups::Operator {
            sim: "psmdb",
            field_manager: FIELD_MANAGER,
            clusters: ApiResource::erase::<PerconaServerMongoDB>(&()),
            backups: ApiResource::erase::<PerconaServerMongoDBBackup>(&()),
            cluster_status,
            backup_status: |backup, cluster| backup_status(backup, cluster, &now()),
            restores: crate::cluster_backups::Restores {
                kind: ApiResource::erase::<PerconaServerMongoDBRestore>(&()),
                cluster_field: "clusterName",
                status: |restore, cluster| restore_status(restore, cluster, &now()),
            },
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-01T00:00:00Z";

    fn cluster(annotations: Value) -> Value {
        json!({"metadata": {"name": "mongodb-m", "annotations": annotations},
               "spec": {"backup": {"enabled": true, "storages": {"s3-storage": {"type": "s3",
                   "s3": {"bucket": "bk", "prefix": "t/m", "region": "us-east-1",
                          "credentialsSecret": "mongodb-m-s3-creds"}}}}}})
    }

    fn backup(status: Value) -> Value {
        json!({"metadata": {"name": "bj-abcde", "namespace": "t"},
               "spec": {"clusterName": "mongodb-m", "storageName": "s3-storage", "type": "logical"},
               "status": status})
    }

    fn walk(c: &Value) -> Vec<Value> {
        let mut b = backup(json!({}));
        let mut seen = Vec::new();
        while let Some(s) = backup_status(&b, Some(c), NOW) {
            b["status"] = s.clone();
            seen.push(s);
            assert!(seen.len() < 10, "converges");
        }
        seen
    }

    #[test]
    fn a_backup_runs_to_ready() {
        let states = walk(&cluster(json!({})));
        let names: Vec<&str> = states
            .iter()
            .map(|s| s["state"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["requested", "running", "ready"]);
        let ready = states.last().unwrap();
        assert_eq!(ready["destination"], "s3://bk/t/m/2026-01-01T00:00:00Z");
        assert_eq!(ready["completed"], NOW);
        assert_eq!(ready["s3"]["credentialsSecret"], "mongodb-m-s3-creds");
        assert_eq!(ready["storageName"], "s3-storage");
    }

    #[test]
    fn controls_and_refusals() {
        let failing = walk(&cluster(
            json!({ANNOTATION_FAIL_BACKUP: "pbm: no space left on device"}),
        ));
        let last = failing.last().unwrap();
        assert_eq!(
            (last["state"].as_str(), last["error"].as_str()),
            (Some("error"), Some("pbm: no space left on device"))
        );
        let hung = walk(&cluster(json!({ANNOTATION_HANG: "true"})));
        assert_eq!(hung.last().unwrap()["state"], "running");
        let missing = backup_status(&backup(json!({})), None, NOW).unwrap();
        assert_eq!(missing["state"], "error");
        let mut disabled = cluster(json!({}));
        disabled["spec"]["backup"]["enabled"] = json!(false);
        assert_eq!(
            backup_status(&backup(json!({})), Some(&disabled), NOW).unwrap()["error"],
            "backups are disabled for the cluster"
        );
    }

    fn restore(pitr: Value) -> Value {
        json!({"metadata": {"name": "rj-abcde", "namespace": "t"},
               "spec": {"clusterName": "mongodb-m", "pitr": pitr,
                        "backupSource": {"type": "logical", "destination": "s3://bk/t/m/x"}}})
    }

    fn walk_restore(r: &Value, c: Option<&Value>) -> Vec<Value> {
        let mut r = r.clone();
        let mut seen = Vec::new();
        while let Some(s) = restore_status(&r, c, NOW) {
            r["status"] = s.clone();
            seen.push(s);
            assert!(seen.len() < 10, "converges");
        }
        seen
    }

    #[test]
    fn a_restore_runs_to_ready_or_error() {
        let states = walk_restore(&restore(Value::Null), Some(&cluster(json!({}))));
        let names: Vec<&str> = states
            .iter()
            .map(|s| s["state"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["requested", "running", "ready"]);
        assert_eq!(states[2]["completed"], NOW);
        assert_eq!(states[1].get("pitrTarget"), None);
        let pitr = walk_restore(
            &restore(json!({"type": "date", "date": "2026-01-01 00:00:00"})),
            Some(&cluster(json!({}))),
        );
        assert_eq!(pitr[1]["pitrTarget"], "2026-01-01 00:00:00");
        let failing = walk_restore(
            &restore(Value::Null),
            Some(&cluster(
                json!({ANNOTATION_FAIL_RESTORE: "pbm: restore failed"}),
            )),
        );
        let last = failing.last().unwrap();
        assert_eq!(
            (last["state"].as_str(), last["error"].as_str()),
            (Some("error"), Some("pbm: restore failed"))
        );
        let hung = walk_restore(
            &restore(Value::Null),
            Some(&cluster(json!({ANNOTATION_HANG_RESTORE: "true"}))),
        );
        assert_eq!(hung.last().unwrap()["state"], "running");
        let missing = walk_restore(&restore(Value::Null), None);
        assert_eq!(missing.len(), 1);
        assert_eq!(
            missing[0]["error"],
            "get cluster: perconaservermongodbs.psmdb.percona.com \"mongodb-m\" not found"
        );
        let controls_of_backups = walk_restore(
            &restore(Value::Null),
            Some(&cluster(
                json!({ANNOTATION_FAIL_BACKUP: "x", ANNOTATION_HANG: "true"}),
            )),
        );
        assert_eq!(
            controls_of_backups.last().unwrap()["state"],
            "ready",
            "backup controls leave restores alone"
        );
    }
}
