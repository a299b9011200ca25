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
//! snapshot that cannot be restored).
//!
//! With a data plane ([`Options::plane`], when the S3 server runs in the same process) every
//! EtcdCluster is a real one-member etcd ([`crate::etcd_plane`]): it is Available once the member
//! answers; a snapshot is `etcdctl snapshot save` uploaded to its S3 destination, the artifact
//! describing the uploaded bytes (a failed tool or upload: `Failed`, `JobFailed` with its words);
//! `bootstrap.restore` downloads, checks and restores the snapshot before the member starts (a
//! failure: `RestoreFailed` with the tool's words, and no member). Without one, no etcd runs and
//! the artifact's size and checksum describe a stand-in payload (see `docs/dataplane.md`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

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
use crate::etcd_plane::{Member, MemberSpec, Plane, S3Location, write_client_service};

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

/// What the data plane knows of a cluster's member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberState {
    /// No data plane: the cluster is reported healthy at once.
    Simulated,
    /// Being restored or started.
    Starting,
    /// Serving at this endpoint.
    Running(String),
    /// Could not be restored or started (the tool's words).
    Failed(String),
}

/// The `Available` condition an EtcdCluster should show (`None`: it does already, or it waits for
/// its member), given the snapshot it restores from when it has `bootstrap.restore` (`None`: no
/// snapshot there) and the state of its member.
pub fn cluster_condition(
    cluster: &Value,
    source: Option<&Value>,
    member: &MemberState,
) -> Option<Value> {
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
            } else if let MemberState::Failed(message) = member {
                condition("Available", false, "RestoreFailed", message)
            } else if controls.get(ANNOTATION_HANG_RESTORE).map(String::as_str) == Some("true")
                || *member == MemberState::Starting
            {
                return None;
            } else {
                healthy
            }
        }
        (None, _) => match member {
            MemberState::Failed(message) => condition("Available", false, "QuorumLost", message),
            MemberState::Starting => return None,
            _ => healthy,
        },
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

/// Where a snapshot's data-plane job is.
#[derive(Clone, Debug, PartialEq)]
pub enum SnapshotJob {
    /// No data plane: the snapshot completes with a stand-in artifact.
    Simulated,
    /// Not finished (or not started yet).
    Running,
    /// Saved and uploaded (the artifact), or failed (the tool's or the upload's words).
    Done(Result<Value, String>),
}

/// The next status of a snapshot (`phase`, the Ready condition, the artifact) given its cluster
/// (`None`: missing) and its data-plane job; `None` when there is nothing to do.
pub fn next_status(snapshot: &Value, cluster: Option<&Value>, job: &SnapshotJob) -> Option<Value> {
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
            let artifact = match job {
                SnapshotJob::Simulated => artifact(snapshot),
                SnapshotJob::Running => return None,
                SnapshotJob::Done(Ok(artifact)) => artifact.clone(),
                SnapshotJob::Done(Err(message)) => {
                    return Some(json!({"phase": "Failed",
                        "ready": ready(false, "JobFailed", &format!("snapshot job failed: {message}"))}));
                }
            };
            Some(json!({"phase": "Complete",
                "ready": ready(true, "SnapshotStored", "snapshot captured and stored"),
                "artifact": artifact}))
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

/// Where a snapshot's object goes: its S3 destination, the key the snapshot agent writes.
pub fn snapshot_location(snapshot: &Value) -> Result<S3Location, String> {
    let s3 = &snapshot["spec"]["destination"]["s3"];
    if !s3.is_object() {
        return Err("the simulator saves snapshots to destination.s3 only".into());
    }
    let mut loc = S3Location::from_spec(s3)?;
    loc.key = object_key(
        &loc.key,
        snapshot["metadata"]["name"].as_str().unwrap_or_default(),
    );
    Ok(loc)
}

/// Options of the simulator.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// The data plane (real members, snapshots and restores); `None`: status only.
    pub plane: Option<Plane>,
}

/// One cluster's member, by cluster uid.
#[derive(Debug)]
struct Slot {
    state: MemberState,
    dir: std::path::PathBuf,
    starting: Option<tokio::task::JoinHandle<()>>,
    member: Option<Member>,
}

#[derive(Debug, Default)]
struct State {
    members: BTreeMap<String, Slot>,
    jobs: BTreeMap<String, (Option<tokio::task::JoinHandle<()>>, SnapshotJob)>,
}

/// The members and snapshot jobs of the data plane, so that they can be stopped at exit.
#[derive(Clone, Debug, Default)]
pub struct Registry(Arc<Mutex<State>>);

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn member_state(&self, uid: &str) -> Option<MemberState> {
        self.lock().members.get(uid).map(|s| s.state.clone())
    }

    /// Stops the members of clusters that are gone (not in `live`) and forgets finished jobs of
    /// snapshots that are gone.
    async fn retain(&self, live: &BTreeSet<String>, live_snapshots: &BTreeSet<String>) {
        let gone: Vec<Slot> = {
            let mut state = self.lock();
            state.jobs.retain(|uid, (task, _)| {
                let keep = live_snapshots.contains(uid);
                if !keep && let Some(t) = task {
                    t.abort();
                }
                keep
            });
            let uids: Vec<String> = state
                .members
                .keys()
                .filter(|u| !live.contains(*u))
                .cloned()
                .collect();
            uids.iter()
                .filter_map(|u| state.members.remove(u))
                .collect()
        };
        for slot in gone {
            stop_slot(slot).await;
        }
    }

    /// Stops every member and command.
    pub async fn stop_all(&self) {
        let slots: Vec<Slot> = {
            let mut state = self.lock();
            for (task, _) in state.jobs.values_mut() {
                if let Some(t) = task.take() {
                    t.abort();
                }
            }
            std::mem::take(&mut state.members).into_values().collect()
        };
        for slot in slots {
            stop_slot(slot).await;
        }
    }
}

async fn stop_slot(slot: Slot) {
    if let Some(task) = slot.starting {
        // Dropping a start half-way kills its commands and its etcd.
        task.abort();
        let _ = task.await;
    }
    if let Some(member) = slot.member {
        member.stop().await;
    }
    let _ = std::fs::remove_dir_all(&slot.dir);
}

/// Starts the member of a cluster first seen (restoring its snapshot first when it has one).
fn start_member(
    client: &kube::Client,
    plane: &Plane,
    registry: &Registry,
    notify: &Arc<Notify>,
    ns: &str,
    cluster: &Value,
) {
    let spec = MemberSpec {
        ns: ns.to_owned(),
        name: cluster["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        uid: cluster["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        restore: Some(cluster["spec"]["bootstrap"]["restore"]["source"]["s3"].clone())
            .filter(Value::is_object),
    };
    tracing::info!(
        namespace = ns,
        cluster = spec.name,
        restore = spec.restore.is_some(),
        "etcd member starting"
    );
    let (client, plane, reg, notify) = (
        client.clone(),
        plane.clone(),
        registry.clone(),
        notify.clone(),
    );
    let uid = spec.uid.clone();
    let dir = spec.dir(&plane.root);
    let task = tokio::spawn(async move {
        let started = Member::start(&plane, &client, &spec).await;
        let started = match started {
            Ok(member) => {
                if let Err(e) =
                    write_client_service(&client, FIELD_MANAGER, &spec, &member.endpoint).await
                {
                    tracing::warn!(namespace = spec.ns, cluster = spec.name, error = %e, "etcd client Service");
                }
                Ok(member)
            }
            Err(e) => Err(e),
        };
        let orphan = {
            let mut state = reg.lock();
            match state.members.get_mut(&spec.uid) {
                Some(slot) => {
                    slot.starting = None;
                    match started {
                        Ok(member) => {
                            tracing::info!(
                                namespace = spec.ns,
                                cluster = spec.name,
                                endpoint = member.endpoint,
                                "etcd member running"
                            );
                            slot.state = MemberState::Running(member.endpoint.clone());
                            slot.member = Some(member);
                        }
                        Err(e) => {
                            tracing::warn!(namespace = spec.ns, cluster = spec.name, error = %e, "etcd member failed");
                            slot.state = MemberState::Failed(e);
                        }
                    }
                    None
                }
                None => started.ok(),
            }
        };
        if let Some(member) = orphan {
            member.stop().await;
        }
        notify.notify_one();
    });
    registry.lock().members.insert(
        uid,
        Slot {
            state: MemberState::Starting,
            dir,
            starting: Some(task),
            member: None,
        },
    );
}

/// The data-plane job of a snapshot, started when it is due and its cluster's member runs.
fn snapshot_job(
    client: &kube::Client,
    plane: &Plane,
    registry: &Registry,
    notify: &Arc<Notify>,
    ns: &str,
    snapshot: &Value,
    cluster: Option<&Value>,
) -> SnapshotJob {
    let uid = snapshot["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    if let Some((_, job)) = registry.lock().jobs.get(&uid) {
        return job.clone();
    }
    let controls = cluster.map(annotations).unwrap_or_default();
    let due = snapshot["status"]["phase"] == "Started"
        && controls.get(ANNOTATION_HANG).map(String::as_str) != Some("true")
        && !controls.contains_key(ANNOTATION_FAIL_BACKUP);
    let cluster_uid = cluster
        .and_then(|c| c["metadata"]["uid"].as_str())
        .unwrap_or_default();
    let member = registry
        .lock()
        .members
        .get(cluster_uid)
        .map(|s| (s.state.clone(), s.dir.clone()));
    let (Some((MemberState::Running(endpoint), dir)), true) = (member, due) else {
        return SnapshotJob::Running;
    };
    let loc = match snapshot_location(snapshot) {
        Ok(loc) => loc,
        Err(e) => {
            let job = SnapshotJob::Done(Err(e));
            registry.lock().jobs.insert(uid, (None, job.clone()));
            return job;
        }
    };
    let name = snapshot["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    tracing::info!(
        namespace = ns,
        name,
        uri = loc.uri(),
        "etcd snapshot saving"
    );
    let (client, plane, reg, notify, ns) = (
        client.clone(),
        plane.clone(),
        registry.clone(),
        notify.clone(),
        ns.to_owned(),
    );
    let job_uid = uid.clone();
    let task = tokio::spawn(async move {
        let result = plane
            .snapshot(
                &client,
                &ns,
                &endpoint,
                &dir,
                &format!("snapshot-{job_uid}.db"),
                &loc,
            )
            .await;
        if let Err(e) = &result {
            tracing::warn!(namespace = ns, name, error = %e, "etcd snapshot failed");
        }
        if let Some(entry) = reg.lock().jobs.get_mut(&job_uid) {
            *entry = (None, SnapshotJob::Done(result));
        }
        notify.notify_one();
    });
    registry
        .lock()
        .jobs
        .insert(uid, (Some(task), SnapshotJob::Running));
    SnapshotJob::Running
}

/// Runs the simulator forever.
pub async fn run(
    client: kube::Client,
    options: Options,
    registry: Registry,
    readiness: runtime::Readiness,
) -> anyhow::Result<()> {
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
        let all_clusters = clusters.snapshot();
        let all_snapshots = snapshots.snapshot();
        if let Some(plane) = &options.plane {
            let uid = |v: &Value| v["metadata"]["uid"].as_str().unwrap_or_default().to_owned();
            let live: BTreeSet<String> = all_clusters
                .values()
                .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
                .map(uid)
                .collect();
            let live_snapshots: BTreeSet<String> = all_snapshots.values().map(uid).collect();
            registry.retain(&live, &live_snapshots).await;
            for ((ns, _), cluster) in &all_clusters {
                if live.contains(&uid(cluster)) && registry.member_state(&uid(cluster)).is_none() {
                    start_member(&client, plane, &registry, &notify, ns, cluster);
                }
            }
        }
        for ((ns, name), cluster) in all_clusters {
            let source = restore_source(&cluster).and_then(|uri| {
                all_snapshots
                    .iter()
                    .find(|((n, _), s)| *n == ns && s["status"]["artifact"]["uri"] == uri.as_str())
                    .map(|(_, s)| s)
            });
            let member = match &options.plane {
                None => MemberState::Simulated,
                Some(_) => registry
                    .member_state(cluster["metadata"]["uid"].as_str().unwrap_or_default())
                    .unwrap_or(MemberState::Starting),
            };
            let Some(cond) = cluster_condition(&cluster, source, &member) else {
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
        for ((ns, name), snapshot) in all_snapshots {
            let cluster_name = snapshot["spec"]["clusterRef"]["name"]
                .as_str()
                .unwrap_or_default();
            let cluster = clusters.get(&ns, cluster_name);
            let job = match &options.plane {
                None => SnapshotJob::Simulated,
                Some(plane) => snapshot_job(
                    &client,
                    plane,
                    &registry,
                    &notify,
                    &ns,
                    &snapshot,
                    cluster.as_ref(),
                ),
            };
            let Some(mut next) = next_status(&snapshot, cluster.as_ref(), &job) else {
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
        let c = cluster_condition(&cluster(json!({})), None, &MemberState::Simulated).unwrap();
        assert_eq!(
            (c["status"].clone(), c["reason"].clone()),
            (json!("True"), json!("QuorumHealthy"))
        );
        let mut healthy = cluster(json!({}));
        healthy["status"] = json!({"conditions": [c]});
        assert_eq!(
            cluster_condition(&healthy, None, &MemberState::Simulated),
            None
        );
        let lost = cluster_condition(
            &cluster(json!({ANNOTATION_UNAVAILABLE: "2 of 3 members down"})),
            None,
            &MemberState::Simulated,
        )
        .unwrap();
        assert_eq!(lost["message"], "2 of 3 members down");
    }

    #[test]
    fn snapshots_move_through_the_operators_phases() {
        let c = cluster(json!({}));
        assert_eq!(
            next_status(&snapshot(""), Some(&c), &SnapshotJob::Simulated),
            Some(json!({"phase": "Pending"}))
        );
        let missing = next_status(&snapshot("Pending"), None, &SnapshotJob::Simulated).unwrap();
        assert_eq!(missing["phase"], "Failed");
        assert_eq!(
            missing["ready"]["message"],
            "EtcdCluster \"etcd\" not found"
        );
        assert_eq!(
            next_status(&snapshot("Pending"), Some(&c), &SnapshotJob::Simulated).unwrap()["phase"],
            "Started"
        );
        let done = next_status(&snapshot("Started"), Some(&c), &SnapshotJob::Simulated).unwrap();
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
            next_status(
                &snapshot("Started"),
                Some(&failing),
                &SnapshotJob::Simulated
            )
            .unwrap()["ready"]["reason"],
            "JobFailed"
        );
        let hanging = cluster(json!({ANNOTATION_HANG: "true"}));
        assert_eq!(
            next_status(
                &snapshot("Started"),
                Some(&hanging),
                &SnapshotJob::Simulated
            ),
            None
        );
        assert_eq!(
            next_status(&snapshot("Complete"), Some(&c), &SnapshotJob::Simulated),
            None
        );
        assert_eq!(
            next_status(&snapshot("Failed"), Some(&c), &SnapshotJob::Simulated),
            None
        );
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
            let cond = cluster_condition(c, source, &MemberState::Simulated)?;
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

    #[test]
    fn with_a_data_plane_the_member_decides() {
        let c = cluster(json!({}));
        let starting = MemberState::Starting;
        assert_eq!(cluster_condition(&c, None, &starting), None, "waits");
        let up = MemberState::Running("http://127.0.0.1:1".into());
        assert_eq!(
            cluster_condition(&c, None, &up).unwrap()["reason"],
            "QuorumHealthy"
        );
        let mut restored = c.clone();
        restored["spec"] = json!({"bootstrap": {"restore": {"source": {"s3": {
            "bucket": "b", "key": "k.db"}}}}});
        let first = cluster_condition(&restored, None, &starting).unwrap();
        assert_eq!(first["reason"], "Restoring");
        restored["status"] = json!({"conditions": [first]});
        assert_eq!(cluster_condition(&restored, None, &starting), None);
        let broken = MemberState::Failed(
            "etcdctl snapshot restore failed: Error: expected sha256 [1], got [2]".into(),
        );
        let failed = cluster_condition(&restored, None, &broken).unwrap();
        assert_eq!(
            (failed["reason"].clone(), failed["message"].clone()),
            (
                json!("RestoreFailed"),
                json!("etcdctl snapshot restore failed: Error: expected sha256 [1], got [2]")
            )
        );
        assert_eq!(
            cluster_condition(&restored, None, &up).unwrap()["reason"],
            "QuorumHealthy"
        );

        let artifact = json!({"uri": "s3://b/tenant-a/etcd/nightly-x1.db", "sizeBytes": 3,
                              "checksum": "sha256:00"});
        assert_eq!(
            next_status(&snapshot("Started"), Some(&c), &SnapshotJob::Running),
            None
        );
        let done = next_status(
            &snapshot("Started"),
            Some(&c),
            &SnapshotJob::Done(Ok(artifact.clone())),
        )
        .unwrap();
        assert_eq!(
            (done["phase"].clone(), done["artifact"].clone()),
            (json!("Complete"), artifact)
        );
        let failed = next_status(
            &snapshot("Started"),
            Some(&c),
            &SnapshotJob::Done(Err(
                "etcdctl snapshot save failed: Error: context deadline exceeded".into(),
            )),
        )
        .unwrap();
        assert_eq!(failed["phase"], "Failed");
        assert_eq!(
            failed["ready"]["message"],
            "snapshot job failed: etcdctl snapshot save failed: Error: context deadline exceeded"
        );
        let loc = snapshot_location(&json!({"metadata": {"name": "s1"},
            "spec": {"destination": {"s3": {"bucket": "b", "key": "t/e/", "endpoint": "https://h",
                     "credentialsSecretRef": {"name": "creds"}}}}}))
        .unwrap();
        assert_eq!(loc.uri(), "s3://b/t/e/s1.db");
    }
}
