//! Simulated etcd-operator (`etcd-operator.cozystack.io/v1alpha2`, Cozystack's fork of the aenix
//! operator): EtcdClusters report quorum through `Available`, and one-shot EtcdSnapshots move
//! through the operator's phases with its single `Ready` condition.
//!
//! ```text
//!  EtcdCluster ─► Available=True/QuorumHealthy "All members are ready"
//!                 (annotation unavailable: "<msg>" ─► Available=False/QuorumLost "<msg>")
//!  EtcdCluster with spec.bootstrap.restore, not yet Available
//!     ─► Available=False/Restoring "restoring members from snapshot <uri>"
//!     ─► default         ─► Available=True/QuorumHealthy
//!     ─► fail-restore    ─► Available=False/RestoreFailed "<annotation value>"
//!     ─► hang-restore    ─► stays Restoring until the annotation goes
//!  EtcdSnapshot "" ─► Pending
//!     Pending ─► clusterRef missing ─► Failed, Ready=False/ClusterNotFound `EtcdCluster "<n>" not found`
//!             ─► Started, Ready=False/JobCreated "snapshot job created"
//!     Started ─► default     ─► Complete, Ready=True/SnapshotStored "snapshot captured and stored",
//!                               status.artifact {uri s3://<bucket>/<key>/<name>.db, sizeBytes, checksum}
//!             ─► fail-backup ─► Failed, Ready=False/JobFailed "snapshot job failed"
//!             ─► hang        ─► stays Started until the annotation goes
//!  Complete and Failed are terminal (a snapshot is a one-shot record).
//! ```
//!
//! Test controls are annotations on the EtcdCluster: [`crate::cnpg::ANNOTATION_FAIL_BACKUP`] (any
//! value), [`crate::cnpg::ANNOTATION_HANG`] (`"true"`), [`ANNOTATION_UNAVAILABLE`]. A restore
//! recreates the EtcdCluster from its spec alone, so the restore controls
//! ([`crate::cnpg::ANNOTATION_FAIL_RESTORE`], [`crate::cnpg::ANNOTATION_HANG_RESTORE`]) sit on the
//! EtcdSnapshot whose `status.artifact.uri` is the `bootstrap.restore.source.s3` location (a
//! snapshot that cannot be restored). No etcd runs and nothing is uploaded or downloaded: the
//! artifact's size and checksum describe a stand-in payload (see `docs/dataplane.md`).

use std::sync::Arc;

use api::thirdparty::etcd::{EtcdCluster, EtcdSnapshot};
use kube::core::ApiResource;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::cache::{Cache, spawn_watches};
use crate::cnpg::{
    ANNOTATION_FAIL_BACKUP, ANNOTATION_FAIL_RESTORE, ANNOTATION_HANG, ANNOTATION_HANG_RESTORE,
};
use crate::conditions::{annotations, condition, now, patch_status, with_condition};

/// Field manager of the simulated operator.
pub const FIELD_MANAGER: &str = "operator-sims-etcd";
/// Test control: the EtcdCluster reports `Available=False/QuorumLost` with this message.
pub const ANNOTATION_UNAVAILABLE: &str = "operator-sims.cozy-backups.io/unavailable";

/// The `s3://<bucket>/<key>` a cluster bootstraps from (`None`: not a restore).
pub fn restore_source(cluster: &Value) -> Option<String> {
    let s3 = &cluster["spec"]["bootstrap"]["restore"]["source"]["s3"];
    s3.is_object().then(|| {
        format!(
            "s3://{}/{}",
            s3["bucket"].as_str().unwrap_or_default(),
            s3["key"].as_str().unwrap_or_default()
        )
    })
}

/// The `Available` condition an EtcdCluster should show (`None`: it does already), given the
/// snapshot it restores from when it has `bootstrap.restore` (`None`: no snapshot there).
pub fn cluster_condition(cluster: &Value, source: Option<&Value>) -> Option<Value> {
    let current = cluster["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available");
    let healthy = condition("Available", true, "QuorumHealthy", "All members are ready");
    let want = match (
        annotations(cluster).get(ANNOTATION_UNAVAILABLE),
        restore_source(cluster),
    ) {
        (Some(message), _) => condition("Available", false, "QuorumLost", message),
        (None, Some(uri)) if !current.is_some_and(|c| c["status"] == "True") => {
            let controls = source.map(annotations).unwrap_or_default();
            let started = current.is_some_and(|c| c["reason"] != "QuorumLost");
            if !started {
                condition(
                    "Available",
                    false,
                    "Restoring",
                    &format!("restoring members from snapshot {uri}"),
                )
            } else if let Some(message) = controls.get(ANNOTATION_FAIL_RESTORE) {
                condition("Available", false, "RestoreFailed", message)
            } else if controls.get(ANNOTATION_HANG_RESTORE).map(String::as_str) == Some("true") {
                return None;
            } else {
                healthy
            }
        }
        (None, _) => healthy,
    };
    let same = current.is_some_and(|c| {
        ["status", "reason", "message"]
            .iter()
            .all(|k| c[*k] == want[*k])
    });
    (!same).then_some(want)
}

/// The snapshot's object key under the destination's `key` prefix, as the snapshot agent writes it.
pub fn object_key(prefix: &str, name: &str) -> String {
    let file = format!("{name}.db");
    if prefix.is_empty() {
        file
    } else if prefix.ends_with('/') {
        format!("{prefix}{file}")
    } else {
        format!("{prefix}/{file}")
    }
}

/// The next status of a snapshot (`phase`, the Ready condition, the artifact) given its cluster
/// (`None`: missing); `None` when there is nothing to do.
pub fn next_status(snapshot: &Value, cluster: Option<&Value>) -> Option<Value> {
    let phase = snapshot["status"]["phase"].as_str().unwrap_or_default();
    let ready =
        |status: bool, reason: &str, message: &str| condition("Ready", status, reason, message);
    match phase {
        "" => Some(json!({"phase": "Pending"})),
        "Pending" => Some(match cluster {
            None => json!({"phase": "Failed", "ready": ready(false, "ClusterNotFound",
                &format!("EtcdCluster {:?} not found", snapshot["spec"]["clusterRef"]["name"].as_str().unwrap_or_default()))}),
            Some(_) => {
                json!({"phase": "Started", "ready": ready(false, "JobCreated", "snapshot job created")})
            }
        }),
        "Started" => {
            let controls = cluster.map(annotations).unwrap_or_default();
            if controls.get(ANNOTATION_HANG).map(String::as_str) == Some("true") {
                return None;
            }
            if controls.contains_key(ANNOTATION_FAIL_BACKUP) {
                return Some(json!({"phase": "Failed",
                    "ready": ready(false, "JobFailed", "snapshot job failed")}));
            }
            Some(json!({"phase": "Complete",
                "ready": ready(true, "SnapshotStored", "snapshot captured and stored"),
                "artifact": artifact(snapshot)}))
        }
        _ => None,
    }
}

/// The artifact of a completed snapshot: its full location and a stand-in payload's size and
/// SHA-256 (the snapshot's uid and name, as no etcd runs here).
fn artifact(snapshot: &Value) -> Value {
    let name = snapshot["metadata"]["name"].as_str().unwrap_or_default();
    let dest = &snapshot["spec"]["destination"];
    let uri = if dest["s3"].is_object() {
        let s3 = &dest["s3"];
        format!(
            "s3://{}/{}",
            s3["bucket"].as_str().unwrap_or_default(),
            object_key(s3["key"].as_str().unwrap_or_default(), name)
        )
    } else {
        let sub = dest["pvc"]["subPath"].as_str().unwrap_or_default();
        let dir = if sub.is_empty() {
            String::new()
        } else {
            format!("{}/", sub.trim_end_matches('/'))
        };
        format!("file:///snapshot/data/{dir}{name}.db")
    };
    let payload = format!(
        "etcd snapshot {} {name}",
        snapshot["metadata"]["uid"].as_str().unwrap_or_default()
    );
    json!({
        "uri": uri,
        "sizeBytes": payload.len(),
        "checksum": format!("sha256:{}", hex::encode(Sha256::digest(payload.as_bytes()))),
    })
}

/// Runs the simulator forever.
pub async fn run(client: kube::Client, readiness: runtime::Readiness) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let clusters = Arc::new(Cache::default());
    let snapshots = Arc::new(Cache::default());
    let cluster_ar = ApiResource::erase::<EtcdCluster>(&());
    let snapshot_ar = ApiResource::erase::<EtcdSnapshot>(&());
    spawn_watches(
        &client,
        &readiness,
        &notify,
        vec![
            (&clusters, cluster_ar.clone(), "etcd: watch EtcdCluster"),
            (&snapshots, snapshot_ar.clone(), "etcd: watch EtcdSnapshot"),
        ],
    );
    loop {
        notify.notified().await;
        let all_snapshots = snapshots.snapshot();
        for ((ns, name), cluster) in clusters.snapshot() {
            let source = restore_source(&cluster).and_then(|uri| {
                all_snapshots
                    .iter()
                    .find(|((n, _), s)| *n == ns && s["status"]["artifact"]["uri"] == uri.as_str())
                    .map(|(_, s)| s)
            });
            let Some(cond) = cluster_condition(&cluster, source) else {
                continue;
            };
            let Some(conditions) = with_condition(&cluster["status"]["conditions"], cond, &now())
            else {
                continue;
            };
            patch_status(
                &client,
                &cluster_ar,
                &clusters,
                FIELD_MANAGER,
                &ns,
                &name,
                json!({ "conditions": conditions }),
            )
            .await;
        }
        for ((ns, name), snapshot) in snapshots.snapshot() {
            let cluster_name = snapshot["spec"]["clusterRef"]["name"]
                .as_str()
                .unwrap_or_default();
            let cluster = clusters.get(&ns, cluster_name);
            let Some(mut next) = next_status(&snapshot, cluster.as_ref()) else {
                continue;
            };
            if let Some(ready) = next.as_object_mut().and_then(|m| m.remove("ready")) {
                let existing = &snapshot["status"]["conditions"];
                next["conditions"] = match with_condition(existing, ready, &now()) {
                    Some(list) => json!(list),
                    None => existing.clone(),
                };
            }
            tracing::info!(namespace = ns, name, phase = %next["phase"], "EtcdSnapshot");
            patch_status(
                &client,
                &snapshot_ar,
                &snapshots,
                FIELD_MANAGER,
                &ns,
                &name,
                next,
            )
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(phase: &str) -> Value {
        json!({"metadata": {"name": "nightly-x1", "uid": "u1"},
               "spec": {"clusterRef": {"name": "etcd"},
                        "destination": {"s3": {"bucket": "b", "key": "tenant-a/etcd"}}},
               "status": {"phase": phase}})
    }

    fn cluster(annotations: Value) -> Value {
        json!({"metadata": {"name": "etcd", "annotations": annotations}})
    }

    #[test]
    fn clusters_report_quorum() {
        let c = cluster_condition(&cluster(json!({})), None).unwrap();
        assert_eq!(
            (c["status"].clone(), c["reason"].clone()),
            (json!("True"), json!("QuorumHealthy"))
        );
        let mut healthy = cluster(json!({}));
        healthy["status"] = json!({"conditions": [c]});
        assert_eq!(cluster_condition(&healthy, None), None);
        let lost = cluster_condition(
            &cluster(json!({ANNOTATION_UNAVAILABLE: "2 of 3 members down"})),
            None,
        )
        .unwrap();
        assert_eq!(lost["message"], "2 of 3 members down");
    }

    #[test]
    fn snapshots_move_through_the_operators_phases() {
        let c = cluster(json!({}));
        assert_eq!(
            next_status(&snapshot(""), Some(&c)),
            Some(json!({"phase": "Pending"}))
        );
        let missing = next_status(&snapshot("Pending"), None).unwrap();
        assert_eq!(missing["phase"], "Failed");
        assert_eq!(
            missing["ready"]["message"],
            "EtcdCluster \"etcd\" not found"
        );
        assert_eq!(
            next_status(&snapshot("Pending"), Some(&c)).unwrap()["phase"],
            "Started"
        );
        let done = next_status(&snapshot("Started"), Some(&c)).unwrap();
        assert_eq!(done["phase"], "Complete");
        assert_eq!(
            done["artifact"]["uri"],
            "s3://b/tenant-a/etcd/nightly-x1.db"
        );
        assert!(
            done["artifact"]["checksum"]
                .as_str()
                .unwrap()
                .starts_with("sha256:")
        );
        let failing = cluster(json!({ANNOTATION_FAIL_BACKUP: "x"}));
        assert_eq!(
            next_status(&snapshot("Started"), Some(&failing)).unwrap()["ready"]["reason"],
            "JobFailed"
        );
        let hanging = cluster(json!({ANNOTATION_HANG: "true"}));
        assert_eq!(next_status(&snapshot("Started"), Some(&hanging)), None);
        assert_eq!(next_status(&snapshot("Complete"), Some(&c)), None);
        assert_eq!(next_status(&snapshot("Failed"), Some(&c)), None);
    }

    #[test]
    fn object_keys_as_the_agent_writes_them() {
        assert_eq!(object_key("", "s"), "s.db");
        assert_eq!(object_key("p/", "s"), "p/s.db");
        assert_eq!(object_key("p", "s"), "p/s.db");
    }

    #[test]
    fn a_restored_cluster_becomes_available_unless_its_snapshot_says_otherwise() {
        let mut restored = cluster(json!({}));
        restored["spec"] = json!({"bootstrap": {"restore": {"source": {"s3": {
            "bucket": "b", "key": "tenant-a/etcd/nightly-x1.db"}}}}});
        assert_eq!(
            restore_source(&restored).as_deref(),
            Some("s3://b/tenant-a/etcd/nightly-x1.db")
        );
        let step = |c: &mut Value, source: Option<&Value>| {
            let cond = cluster_condition(c, source)?;
            c["status"] = json!({"conditions": [cond.clone()]});
            Some((
                cond["reason"].as_str().unwrap().to_owned(),
                cond["message"].clone(),
            ))
        };
        let snap = |annotations: Value| json!({"metadata": {"annotations": annotations}});
        let mut ok = restored.clone();
        assert_eq!(
            step(&mut ok, Some(&snap(json!({})))),
            Some((
                "Restoring".into(),
                json!("restoring members from snapshot s3://b/tenant-a/etcd/nightly-x1.db")
            ))
        );
        assert_eq!(
            step(&mut ok, Some(&snap(json!({})))).unwrap().0,
            "QuorumHealthy"
        );
        assert_eq!(
            step(&mut ok, Some(&snap(json!({ANNOTATION_FAIL_RESTORE: "x"})))),
            None,
            "Available stays"
        );
        let mut bad = restored.clone();
        let failing = snap(json!({ANNOTATION_FAIL_RESTORE: "snapshot checksum mismatch"}));
        step(&mut bad, Some(&failing));
        assert_eq!(
            step(&mut bad, Some(&failing)),
            Some(("RestoreFailed".into(), json!("snapshot checksum mismatch")))
        );
        assert_eq!(step(&mut bad, Some(&failing)), None);
        let mut stuck = restored.clone();
        let hanging = snap(json!({ANNOTATION_HANG_RESTORE: "true"}));
        step(&mut stuck, Some(&hanging));
        assert_eq!(step(&mut stuck, Some(&hanging)), None);
        assert_eq!(
            step(&mut stuck, None).unwrap().0,
            "QuorumHealthy",
            "the hang released"
        );
    }
}
