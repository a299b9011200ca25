//! The Etcd restore (in place only) as one pure decision: `decide(&Observed) -> Step`, called
//! again after every action until it returns a status write or a wait.
//!
//! ```text
//!  source ref Etcd? ─► target: same name, kind Etcd, group apps.cozystack.io (no copy restore)
//!  ─► options (strict) ─► startedAt (+ phase Running, the snapshot's Warning; nothing else)
//!  ─► snapshot (unknown kind: terminal; malformed: driverMetadata) ─► S3 source of the restore
//!  not TargetPurged:
//!   ├─ live EtcdCluster "etcd" ─► spec captured in EtcdClusterSpecCaptured (≤ 24 KiB)
//!   ├─ suspend HelmRelease <app> ─► delete EtcdCluster ─► wait until it and its PVCs are gone
//!   └─ TargetPurged=True/ClusterPurged
//!  EtcdCluster absent ─► create it from the captured spec + spec.bootstrap.restore.source
//!  Available=True ─► resume HelmRelease ─► Succeeded/RestoreCompleted
//!  past restoreTimeoutSeconds (purge wait or bootstrap) ─► resume HelmRelease ─► Failed
//! ```
//!
//! Invariants: nothing is mutated before the live spec is durably captured in the job's status, so
//! the cluster can always be recreated; the HelmRelease stays suspended from the purge until the
//! recreated cluster is Available (Flux would otherwise re-render the cluster without its
//! bootstrap), and every terminal outcome after the suspension resumes it first; every wait is
//! bounded by the restore deadline from `startedAt`. The restore source names the credentials
//! Secret, never its values.

use std::time::Duration;

use api::ConditionStatus;
use api::backups::{Backup, RestoreJob, RestoreJobStatus};
use api::contract::{condition_types, groups, reasons};
use api::meta::find_condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value as Json, json};

use super::skeleton::{self, Clock, helm_release};
use super::skeleton::{fail, status_of};
use super::{Action, ObjectRef, OnError, Selection, Step, write_or_wait};
use crate::etcd::{self as driver, keys};

/// The largest live spec (JSON bytes) the driver captures in a condition message.
pub const CAPTURED_SPEC_MAX_BYTES: usize = 24 * 1024;
/// How often a wait on the operator is re-examined without an event.
pub const POLL: Duration = Duration::from_secs(10);
/// The label the operator puts on the member PVCs of EtcdCluster `etcd`.
pub const PVC_INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// The API version of the snapshot in `Backup.status.underlyingResources`.
pub const SNAPSHOT_API_VERSION: &str = "backups.cozystack.io/v1alpha1";

/// What the Etcd restore looks at. Objects are passed as JSON, as the executor's caches hold them.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The RestoreJob.
    pub job: &'a RestoreJob,
    /// The Backup it restores.
    pub backup: &'a Backup,
    /// Now.
    pub now: Time,
    /// The EtcdCluster `etcd` in the Backup's namespace (`None`: not found).
    pub cluster: Option<&'a Json>,
    /// PVCs labelled `app.kubernetes.io/instance=etcd` in that namespace.
    pub pvcs: &'a [Json],
    /// The HelmRelease named after the application (`None`: not found).
    pub helm_release: Option<&'a Json>,
}

/// The EtcdCluster reference.
pub fn cluster_ref(namespace: &str) -> ObjectRef {
    ObjectRef {
        api_version: driver::API_VERSION,
        kind: "EtcdCluster",
        namespace: namespace.to_owned(),
        name: driver::CLUSTER_NAME.to_owned(),
    }
}

/// The member PVCs of the EtcdCluster.
pub fn pvc_selection(namespace: &str) -> Selection {
    Selection {
        api_version: "v1",
        kind: "PersistentVolumeClaim",
        namespace: namespace.to_owned(),
        labels: vec![(PVC_INSTANCE_LABEL.into(), driver::CLUSTER_NAME.into())],
    }
}

/// The target checks: in place only, kind Etcd, group `apps.cozystack.io` or none.
pub fn check_target(job: &RestoreJob, backup: &Backup) -> Result<(), String> {
    let Some(t) = job.spec.target_application_ref.as_ref() else {
        return Ok(());
    };
    if !t.name.is_empty() && t.name != backup.spec.application_ref.name {
        return Err("Etcd driver does not support to-copy restore: RestoreJob.spec.targetApplicationRef is a same-namespace local reference, so a different target name in the same namespace cannot exist (and the chart pins release.name=\"etcd\", precluding two Etcd apps in one namespace regardless). Restore in-place by leaving spec.targetApplicationRef unset.".into());
    }
    if !t.kind.is_empty() && t.kind != driver::APP_KIND {
        return Err(format!(
            "target applicationRef.kind={:?} is not supported by the Etcd driver",
            t.kind
        ));
    }
    let group = t.api_group.as_deref().unwrap_or("");
    if !group.is_empty() && group != groups::APPS {
        return Err(format!(
            "target applicationRef.apiGroup={group:?} is not supported by the Etcd driver (want {:?})",
            groups::APPS
        ));
    }
    Ok(())
}

/// How `Backup.status.underlyingResources` reads as an Etcd snapshot.
#[derive(Debug, Clone, PartialEq)]
pub enum Snapshot {
    /// None stored.
    Absent,
    /// An `EtcdBackupSnapshot`: its `destination.s3` (`None` when it has none).
    Found(Option<Json>),
    /// Not decodable (the detail); the restore falls back to driverMetadata.
    Malformed(String),
    /// Another kind or apiVersion (the message); terminal.
    Unrecognised(String),
}

fn expect_string(v: &Json, path: &str) -> Result<(), String> {
    match v {
        Json::Null | Json::String(_) => Ok(()),
        _ => Err(format!(
            "decode Backup.status.underlyingResources: {path}: expected a string"
        )),
    }
}

/// Decodes the snapshot with Go's rules: type errors first (malformed), then kind and apiVersion.
pub fn decode_snapshot(raw: Option<&Json>) -> Snapshot {
    let obj = match raw {
        None | Some(Json::Null) => return Snapshot::Absent,
        Some(Json::Object(o)) => o,
        Some(_) => {
            return Snapshot::Malformed(
                "decode Backup.status.underlyingResources: expected a JSON object".into(),
            );
        }
    };
    let null = Json::Null;
    let get = |k: &str| obj.get(k).unwrap_or(&null);
    let checks = || -> Result<Option<Json>, String> {
        expect_string(get("kind"), "kind")?;
        expect_string(get("apiVersion"), "apiVersion")?;
        let dest = get("destination");
        if !(dest.is_null() || dest.is_object()) {
            return Err(
                "decode Backup.status.underlyingResources: destination: expected an object".into(),
            );
        }
        let s3 = &dest["s3"];
        if s3.is_null() {
            return Ok(None);
        }
        if !s3.is_object() {
            return Err(
                "decode Backup.status.underlyingResources: destination.s3: expected an object"
                    .into(),
            );
        }
        for k in ["bucket", "endpoint", "key", "region"] {
            expect_string(&s3[k], &format!("destination.s3.{k}"))?;
        }
        if !(s3["forcePathStyle"].is_null() || s3["forcePathStyle"].is_boolean()) {
            return Err("decode Backup.status.underlyingResources: destination.s3.forcePathStyle: expected a boolean".into());
        }
        let creds = &s3["credentialsSecretRef"];
        if !(creds.is_null() || creds.is_object()) {
            return Err("decode Backup.status.underlyingResources: destination.s3.credentialsSecretRef: expected an object".into());
        }
        expect_string(&creds["name"], "destination.s3.credentialsSecretRef.name")?;
        Ok(Some(s3.clone()))
    };
    let s3 = match checks() {
        Ok(s3) => s3,
        Err(e) => return Snapshot::Malformed(e),
    };
    if let Err(message) = super::snapshot_identity(
        get("kind"),
        get("apiVersion"),
        driver::SNAPSHOT_KIND,
        SNAPSHOT_API_VERSION,
    ) {
        return Snapshot::Unrecognised(message);
    }
    Snapshot::Found(s3)
}

/// The object key of `s3://<bucket>/<key>` when the bucket is `bucket` and the key non-empty.
pub fn key_from_uri(uri: Option<&str>, bucket: &str) -> Option<String> {
    let rest = uri?.strip_prefix("s3://")?;
    let (b, key) = rest.split_once('/')?;
    (!b.is_empty() && !key.is_empty() && b == bucket).then(|| key.to_owned())
}

/// The object key from the stored prefix and the snapshot's name: `<prefix>/<name>.db`.
pub fn key_from_prefix(prefix: &str, backup_name: &str) -> String {
    if backup_name.is_empty() {
        return prefix.to_owned();
    }
    let trimmed = prefix.trim_end_matches('/');
    if trimmed.is_empty() {
        format!("{backup_name}.db")
    } else {
        format!("{trimmed}/{backup_name}.db")
    }
}

/// The restore source `{"s3": {...}}`: from the snapshot's destination when it has one, else from
/// driverMetadata (bucket, endpoint and credentials Secret required); `None` when neither has it.
pub fn restore_source(backup: &Backup, snapshot_s3: Option<&Json>) -> Option<Json> {
    let md = backup.spec.driver_metadata.clone().unwrap_or_default();
    let get = |k: &str| md.get(k).cloned().unwrap_or_default();
    let uri = backup
        .status
        .as_ref()
        .and_then(|s| s.artifact.as_ref())
        .map(|a| a.uri.as_str());
    let s = |v: &Json| v.as_str().unwrap_or_default().to_owned();
    let (bucket, endpoint, prefix, region, force_path_style, creds) = match snapshot_s3 {
        Some(s3) => (
            s(&s3["bucket"]),
            s(&s3["endpoint"]),
            s(&s3["key"]),
            s(&s3["region"]),
            s3["forcePathStyle"].as_bool(),
            s(&s3["credentialsSecretRef"]["name"]),
        ),
        None => {
            let (bucket, endpoint, creds) = (
                get(keys::BUCKET),
                get(keys::ENDPOINT),
                get(keys::CREDENTIALS_SECRET),
            );
            if bucket.is_empty() || endpoint.is_empty() || creds.is_empty() {
                return None;
            }
            (
                bucket,
                endpoint,
                get(keys::KEY),
                get(keys::REGION),
                md.get(keys::FORCE_PATH_STYLE).map(|v| v == "true"),
                creds,
            )
        }
    };
    let key = key_from_uri(uri, &bucket)
        .unwrap_or_else(|| key_from_prefix(&prefix, &get(keys::BACKUP_NAME)));
    let mut s3 = Map::new();
    s3.insert("bucket".into(), json!(bucket));
    s3.insert("endpoint".into(), json!(endpoint));
    s3.insert("credentialsSecretRef".into(), json!({"name": creds}));
    if !key.is_empty() {
        s3.insert("key".into(), json!(key));
    }
    if !region.is_empty() {
        s3.insert("region".into(), json!(region));
    }
    if let Some(f) = force_path_style {
        s3.insert("forcePathStyle".into(), json!(f));
    }
    Some(json!({"s3": s3}))
}

/// The live spec to capture, or why the restore refuses to start.
pub fn capture(cluster: &Json) -> Result<String, String> {
    let spec = cluster["spec"].as_object().filter(|s| !s.is_empty());
    let Some(spec) = spec else {
        return Err("live etcd-operator.cozystack.io/EtcdCluster has empty spec; refusing to restore against an unconfigured cluster".into());
    };
    let payload = Json::Object(spec.clone()).to_string();
    if payload.len() > CAPTURED_SPEC_MAX_BYTES {
        return Err(format!(
            "live etcd-operator.cozystack.io/EtcdCluster spec is {} bytes which exceeds the {CAPTURED_SPEC_MAX_BYTES}-byte limit the driver can durably capture before the destructive purge; trim podTemplate / topologySpreadConstraints customisation on the source app or open an issue for a ConfigMap-backed capture path",
            payload.len()
        ));
    }
    Ok(payload)
}

/// The EtcdCluster to create: the captured spec with `bootstrap.restore.source` set.
pub fn recreated_cluster(
    namespace: &str,
    captured: Option<&str>,
    source: &Json,
) -> Result<Json, String> {
    let captured = captured.filter(|m| !m.is_empty()).ok_or_else(|| {
        "EtcdClusterSpecCaptured condition is missing or empty; cannot rebuild EtcdCluster spec"
            .to_owned()
    })?;
    let mut spec: Map<String, Json> =
        serde_json::from_str(captured).map_err(|e| format!("decode captured spec: {e}"))?;
    if spec.is_empty() {
        return Err(
            "captured EtcdCluster spec is empty; refusing to recreate against an unconfigured cluster"
                .into(),
        );
    }
    spec.insert(
        "bootstrap".into(),
        json!({"restore": {"source": source.clone()}}),
    );
    Ok(json!({
        "apiVersion": driver::API_VERSION,
        "kind": "EtcdCluster",
        "metadata": {"name": driver::CLUSTER_NAME, "namespace": namespace},
        "spec": spec,
    }))
}

fn condition_is_true(status: &RestoreJobStatus, type_: &str) -> bool {
    find_condition(&status.conditions, type_).is_some_and(|c| c.is_true())
}

fn suspended(release: Option<&Json>) -> bool {
    release.is_some_and(|r| r["spec"]["suspend"] == json!(true))
}

/// Resumes the HelmRelease if it is suspended, else fails with `message`.
fn resume_then_fail(o: &Observed<'_>, release: ObjectRef, message: &str) -> Step {
    if suspended(o.helm_release) {
        return skeleton::resume(release);
    }
    fail(&status_of(o.job), message, Vec::new(), &o.now)
}

/// Decides the next step of an Etcd restore.
pub fn decide(o: &Observed<'_>) -> Step {
    let (job, backup, now) = (o.job, o.backup, &o.now);
    let mut status = status_of(job);

    // 1. Source and target, before any API call.
    if let Err(e) = driver::validate_app_ref(&backup.spec.application_ref) {
        return fail(&status, &e, Vec::new(), now);
    }
    if let Err(e) = check_target(job, backup) {
        return fail(&status, &e, Vec::new(), now);
    }
    let namespace = backup.metadata.namespace.clone().unwrap_or_default();
    let release = helm_release(&namespace, &backup.spec.application_ref.name);
    let snapshot = decode_snapshot(
        backup
            .status
            .as_ref()
            .and_then(|s| s.underlying_resources.as_ref()),
    );

    // 2. startedAt (+ phase Running); the snapshot's Warning is recorded once, here.
    let started = proceed!(skeleton::start(&status, now, || match &snapshot {
        Snapshot::Malformed(e) => vec![skeleton::malformed_snapshot("Etcd", e)],
        _ => Vec::new(),
    }));

    // 3. Options (strict), snapshot, restore source.
    let limit = match super::options::etcd(o.job.spec.options.as_ref()) {
        Ok(d) => d,
        Err(r) => return fail(&status, &r.message, r.events, now),
    };
    let snapshot_s3 = match snapshot {
        Snapshot::Unrecognised(e) => return skeleton::unrecognised_snapshot(&status, &e, now),
        Snapshot::Found(s3) => s3,
        Snapshot::Absent | Snapshot::Malformed(_) => None,
    };
    let Some(source) = restore_source(backup, snapshot_s3.as_ref()) else {
        return fail(
            &status,
            "Backup driverMetadata/snapshot is missing the Etcd backup destination (re-take the backup with a controller version that persists it)",
            Vec::new(),
            now,
        );
    };
    let cluster_name = format!("{namespace}/{}", driver::CLUSTER_NAME);
    let clock = Clock {
        started,
        limit,
        now,
        poll: POLL,
    };

    // 4. Capture and purge, once.
    if !condition_is_true(&status, condition_types::TARGET_PURGED) {
        let captured = condition_is_true(&status, condition_types::ETCD_CLUSTER_SPEC_CAPTURED);
        if !captured {
            let Some(live) = o
                .cluster
                .filter(|c| c["metadata"]["deletionTimestamp"].is_null())
            else {
                return fail(
                    &status,
                    &format!(
                        "etcd-operator.cozystack.io/EtcdCluster {cluster_name} not found; cannot derive the spec to re-create with bootstrap.restore (deploy the source Etcd application before requesting the restore)"
                    ),
                    Vec::new(),
                    now,
                );
            };
            return match capture(live) {
                Err(e) => fail(&status, &e, Vec::new(), now),
                Ok(spec) => {
                    crate::status::set_condition(
                        &mut status,
                        condition_types::ETCD_CLUSTER_SPEC_CAPTURED,
                        ConditionStatus::True,
                        reasons::SPEC_CAPTURED,
                        &spec,
                        now,
                    );
                    Step::Status {
                        status,
                        events: Vec::new(),
                        requeue: None,
                    }
                }
            };
        }
        let gone = o.cluster.is_none() && o.pvcs.is_empty();
        if !gone && clock.passed() {
            return resume_then_fail(
                o,
                release,
                &format!(
                    "etcd-operator.cozystack.io/EtcdCluster {cluster_name} and its member PVCs were not gone within {} ({}; {} PVC(s) labelled {PVC_INSTANCE_LABEL}={} remain) (override via spec.options.restoreTimeoutSeconds)",
                    clock.limit(),
                    if o.cluster.is_some() {
                        "the cluster still exists"
                    } else {
                        "the cluster is gone"
                    },
                    o.pvcs.len(),
                    driver::CLUSTER_NAME,
                ),
            );
        }
        if o.helm_release.is_some() && !suspended(o.helm_release) {
            return skeleton::set_suspend(release, true, "failed to suspend HelmRelease");
        }
        if o.cluster
            .is_some_and(|c| c["metadata"]["deletionTimestamp"].is_null())
        {
            return Step::Act {
                action: Action::Delete(cluster_ref(&namespace)),
                events: Vec::new(),
                on_error: OnError {
                    prefix: "delete etcd-operator.cozystack.io/EtcdCluster etcd",
                    resume: Some(release),
                },
            };
        }
        if !gone {
            return Step::Wait {
                events: Vec::new(),
                requeue: clock.requeue(),
            };
        }
        let current = status.clone();
        crate::status::set_condition(
            &mut status,
            condition_types::TARGET_PURGED,
            ConditionStatus::True,
            reasons::CLUSTER_PURGED,
            &format!(
                "etcd-operator.cozystack.io/EtcdCluster {cluster_name} and member PVCs are gone; recreating with bootstrap.restore"
            ),
            now,
        );
        return write_or_wait(&current, status, Vec::new(), None);
    }

    // 5. Recreate from the captured spec.
    let Some(cluster) = o.cluster else {
        let captured = find_condition(
            &status.conditions,
            condition_types::ETCD_CLUSTER_SPEC_CAPTURED,
        )
        .map(|c| c.message.as_str());
        return match recreated_cluster(&namespace, captured, &source) {
            Err(e) => resume_then_fail(
                o,
                release,
                &format!("recover captured EtcdCluster spec: {e}"),
            ),
            Ok(body) => Step::Act {
                action: Action::Create(body),
                events: Vec::new(),
                on_error: OnError {
                    prefix: "create EtcdCluster with bootstrap.restore",
                    resume: Some(release),
                },
            },
        };
    };

    // 6. Available before the deadline.
    if !driver::cluster_available(cluster) {
        if clock.passed() {
            return resume_then_fail(
                o,
                release,
                &format!(
                    "etcd-operator.cozystack.io/EtcdCluster {cluster_name} did not become Available within {} after recreation with bootstrap.restore (current Available condition: {}) (override via spec.options.restoreTimeoutSeconds)",
                    clock.limit(),
                    driver::availability_summary(cluster)
                ),
            );
        }
        return skeleton::waiting(
            &status,
            &clock,
            reasons::ETCD_CLUSTER_BOOTSTRAPPING,
            &format!(
                "waiting for etcd-operator.cozystack.io/EtcdCluster {cluster_name} to become Available after bootstrap.restore"
            ),
        );
    }
    if suspended(o.helm_release) {
        return skeleton::resume(release);
    }
    skeleton::succeeded(
        &status,
        Some(&format!(
            "etcd-operator.cozystack.io/EtcdCluster {cluster_name} became Available after bootstrap.restore"
        )),
        now,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::backups::{BackupArtifact, BackupStatus};
    use pretty_assertions::assert_eq;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    const STARTED: &str = "2026-03-01T10:00:00Z";

    /// A namespace as the executor observes it, with a fake executor and operator.
    #[derive(Clone)]
    struct World {
        job: RestoreJob,
        backup: Backup,
        cluster: Option<Json>,
        pvcs: Vec<Json>,
        release: Option<Json>,
        /// Whether deleting the cluster also removes the PVCs at once (else they linger).
        pvcs_follow: bool,
        log: Vec<String>,
        events: Vec<(&'static str, String)>,
    }

    fn live() -> Json {
        json!({"apiVersion": driver::API_VERSION, "kind": "EtcdCluster",
               "metadata": {"name": "etcd", "namespace": "t"},
               "spec": {"replicas": 3, "storage": {"size": "1Gi"}},
               "status": {"conditions": [{"type": "Available", "status": "True"}]}})
    }

    fn world() -> World {
        let mut job = RestoreJob::test("rj", "bk").namespace("t").build();
        job.status = Some(RestoreJobStatus {
            phase: Some("Running".into()),
            started_at: Some(t(STARTED)),
            ..Default::default()
        });
        let mut backup = Backup::test("bk")
            .namespace("t")
            .for_app("Etcd", "etcd")
            .strategy("strategy.backups.cozystack.io", "Etcd", "cozy-default-etcd")
            .driver_metadata(&[
                (keys::BACKUP_NAME, "bk-x1"),
                (keys::BUCKET, "bucket"),
                (keys::ENDPOINT, "http://s3.local"),
                (keys::KEY, "t/etcd/"),
                (keys::CREDENTIALS_SECRET, "creds"),
            ])
            .build();
        backup.status = Some(BackupStatus {
            underlying_resources: Some(json!({
                "kind": "EtcdBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                "destination": {"s3": {"bucket": "bucket", "endpoint": "http://s3.local",
                    "key": "t/etcd/", "forcePathStyle": true, "credentialsSecretRef": {"name": "creds"}}}})),
            artifact: Some(BackupArtifact {
                uri: "s3://bucket/t/etcd/bk-x1.db".into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        World {
            job,
            backup,
            cluster: Some(live()),
            pvcs: vec![json!({"metadata": {"name": "data-etcd-0"}})],
            release: Some(json!({"metadata": {"name": "etcd"}, "spec": {"suspend": false}})),
            pvcs_follow: true,
            log: Vec::new(),
            events: Vec::new(),
        }
    }

    impl World {
        fn decide(&self, now: &str) -> Step {
            decide(&Observed {
                job: &self.job,
                backup: &self.backup,
                now: t(now),
                cluster: self.cluster.as_ref(),
                pvcs: &self.pvcs,
                helm_release: self.release.as_ref(),
            })
        }

        /// Runs decide → perform until a wait or a terminal status; returns the last requeue.
        fn run(&mut self, now: &str) -> Option<Duration> {
            for _ in 0..50 {
                match self.decide(now) {
                    Step::Status {
                        status,
                        events,
                        requeue,
                    } => {
                        self.log.push(format!(
                            "status {}",
                            status.phase.clone().unwrap_or_default()
                        ));
                        self.events
                            .extend(events.into_iter().map(|e| (e.reason, e.note)));
                        self.job.status = Some(status);
                        if self.job.is_terminal() {
                            return requeue;
                        }
                    }
                    Step::Wait { events, requeue } => {
                        self.events
                            .extend(events.into_iter().map(|e| (e.reason, e.note)));
                        return requeue;
                    }
                    Step::Act { action, .. } => self.perform(action),
                    other => panic!("unexpected {other:?}"),
                }
            }
            panic!("no progress: {:?}", self.log);
        }

        fn perform(&mut self, action: Action) {
            match action {
                Action::SetSuspend { suspend, .. } => {
                    self.log.push(format!("suspend {suspend}"));
                    if let Some(r) = self.release.as_mut() {
                        r["spec"]["suspend"] = json!(suspend);
                    }
                }
                Action::Delete(r) => {
                    assert_eq!(r, cluster_ref("t"));
                    self.log.push("delete".into());
                    self.cluster = None;
                    if self.pvcs_follow {
                        self.pvcs.clear();
                    }
                }
                Action::Create(body) => {
                    self.log.push("create".into());
                    let mut c = body;
                    c["status"] = json!({"conditions": [{"type": "Available", "status": "False"}]});
                    self.cluster = Some(c);
                }
                other => panic!("unexpected {other:?}"),
            }
        }

        fn ready(&self) -> (String, String) {
            let s = self.job.status.clone().unwrap_or_default();
            let r = crate::status::ready(&s.conditions).cloned().unwrap();
            (r.reason, r.message)
        }

        fn phase(&self) -> String {
            self.job
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default()
        }

        fn suspended(&self) -> bool {
            suspended(self.release.as_ref())
        }
    }

    fn become_available(w: &mut World) {
        w.cluster.as_mut().unwrap()["status"] =
            json!({"conditions": [{"type": "Available", "status": "True"}]});
    }

    #[test]
    fn captures_purges_recreates_and_succeeds() {
        let mut w = world();
        assert_eq!(w.run("2026-03-01T10:00:01Z"), Some(Duration::from_secs(10)));
        assert_eq!(
            w.log,
            [
                "status Running",
                "suspend true",
                "delete",
                "status Running",
                "create",
                "status Running"
            ]
        );
        assert!(w.suspended(), "suspended while bootstrapping");
        let created = w.cluster.clone().unwrap();
        assert_eq!(created["spec"]["replicas"], json!(3));
        assert_eq!(
            created["spec"]["bootstrap"],
            json!({"restore": {"source": {"s3": {"bucket": "bucket", "endpoint": "http://s3.local",
                "key": "t/etcd/bk-x1.db", "forcePathStyle": true, "credentialsSecretRef": {"name": "creds"}}}}})
        );
        let s = w.job.status.clone().unwrap();
        let captured = find_condition(&s.conditions, "EtcdClusterSpecCaptured").unwrap();
        assert_eq!(
            (captured.reason.as_str(), captured.message.as_str()),
            ("SpecCaptured", r#"{"replicas":3,"storage":{"size":"1Gi"}}"#)
        );
        let purged = find_condition(&s.conditions, "TargetPurged").unwrap();
        assert_eq!(purged.reason, "ClusterPurged");
        assert_eq!(
            w.ready(),
            ("EtcdClusterBootstrapping".into(), "waiting for etcd-operator.cozystack.io/EtcdCluster t/etcd to become Available after bootstrap.restore".into())
        );
        // A second pass while bootstrapping writes nothing and never deletes again.
        w.log.clear();
        w.run("2026-03-01T10:00:11Z");
        assert!(w.log.is_empty(), "{:?}", w.log);
        become_available(&mut w);
        w.run("2026-03-01T10:01:00Z");
        assert_eq!(w.log, ["suspend false", "status Succeeded"]);
        assert_eq!(
            w.ready(),
            ("RestoreCompleted".into(), "etcd-operator.cozystack.io/EtcdCluster t/etcd became Available after bootstrap.restore".into())
        );
    }

    #[test]
    fn the_purge_waits_for_the_pvcs_within_the_deadline() {
        let mut w = world();
        w.pvcs_follow = false;
        w.job.spec.options = Some(json!({"restoreTimeoutSeconds": 60}));
        assert_eq!(w.run("2026-03-01T10:00:01Z"), Some(Duration::from_secs(10)));
        assert!(w.cluster.is_none() && w.suspended());
        assert_eq!(w.run("2026-03-01T10:00:55Z"), Some(Duration::from_secs(5)));
        w.run("2026-03-01T10:01:01Z");
        assert_eq!(w.phase(), "Failed");
        assert!(!w.suspended(), "resumed before failing");
        assert_eq!(w.ready(), ("RestoreFailed".into(), "etcd-operator.cozystack.io/EtcdCluster t/etcd and its member PVCs were not gone within 1m0s (the cluster is gone; 1 PVC(s) labelled app.kubernetes.io/instance=etcd remain) (override via spec.options.restoreTimeoutSeconds)".into()));
        // PVCs that go in time let the restore continue.
        let mut w = world();
        w.pvcs_follow = false;
        w.run("2026-03-01T10:00:01Z");
        w.pvcs.clear();
        w.run("2026-03-01T10:00:11Z");
        assert!(w.log.contains(&"create".to_owned()), "{:?}", w.log);
    }

    #[test]
    fn a_cluster_that_never_becomes_available_fails_at_the_deadline() {
        let mut w = world();
        w.job.spec.options = Some(json!({"restoreTimeoutSeconds": 120}));
        w.run("2026-03-01T10:00:01Z");
        w.run("2026-03-01T10:02:01Z");
        assert_eq!(w.phase(), "Failed");
        assert!(!w.suspended());
        assert_eq!(
            w.ready().1,
            "etcd-operator.cozystack.io/EtcdCluster t/etcd did not become Available within 2m0s after recreation with bootstrap.restore (current Available condition: Available=False/) (override via spec.options.restoreTimeoutSeconds)"
        );
        // Available wins over a passed deadline.
        let mut w = world();
        w.run("2026-03-01T10:00:01Z");
        become_available(&mut w);
        w.run("2026-03-01T11:00:00Z");
        assert_eq!(w.phase(), "Succeeded");
    }

    #[test]
    fn refusals_before_anything_is_mutated() {
        type Change = Box<dyn Fn(&mut World)>;
        let cases: Vec<(&str, Change, &str)> = vec![
            (
                "copy",
                Box::new(|w: &mut World| {
                    w.job.spec.target_application_ref =
                        Some(api::TypedLocalObjectReference::new("", "", "other"));
                }),
                "Etcd driver does not support to-copy restore",
            ),
            (
                "kind",
                Box::new(|w: &mut World| {
                    w.job.spec.target_application_ref =
                        Some(api::TypedLocalObjectReference::new("", "Postgres", ""));
                }),
                "target applicationRef.kind=\"Postgres\" is not supported by the Etcd driver",
            ),
            (
                "group",
                Box::new(|w: &mut World| {
                    w.job.spec.target_application_ref =
                        Some(api::TypedLocalObjectReference::new("x.io", "", ""));
                }),
                "target applicationRef.apiGroup=\"x.io\" is not supported by the Etcd driver (want \"apps.cozystack.io\")",
            ),
            (
                "options",
                Box::new(|w: &mut World| {
                    w.job.spec.options = Some(json!({"restoreTimeoutSeconds": "soon"}));
                }),
                "malformed restoreJob.spec.options: decode restoreJob.spec.options: restoreTimeoutSeconds: expected an integer, got a string (clear the field or supply a valid EtcdRestoreOptions JSON object)",
            ),
            (
                "unrecognised snapshot",
                Box::new(|w: &mut World| {
                    w.backup.status.as_mut().unwrap().underlying_resources =
                        Some(json!({"kind": "CNPGBackupSnapshot"}));
                }),
                "Backup.status.underlyingResources carries a snapshot of an unrecognised kind/apiVersion: kind=\"CNPGBackupSnapshot\" (want \"EtcdBackupSnapshot\")",
            ),
            (
                "no destination",
                Box::new(|w: &mut World| {
                    w.backup.status = None;
                    w.backup.spec.driver_metadata = None;
                }),
                "Backup driverMetadata/snapshot is missing the Etcd backup destination",
            ),
            (
                "no cluster",
                Box::new(|w: &mut World| w.cluster = None),
                "etcd-operator.cozystack.io/EtcdCluster t/etcd not found; cannot derive the spec",
            ),
            (
                "empty spec",
                Box::new(|w: &mut World| w.cluster.as_mut().unwrap()["spec"] = json!({})),
                "live etcd-operator.cozystack.io/EtcdCluster has empty spec",
            ),
            (
                "huge spec",
                Box::new(|w: &mut World| {
                    w.cluster.as_mut().unwrap()["spec"]["podTemplate"] =
                        json!("x".repeat(CAPTURED_SPEC_MAX_BYTES));
                }),
                "exceeds the 24576-byte limit",
            ),
        ];
        for (name, change, message) in cases {
            let mut w = world();
            change(&mut w);
            w.run("2026-03-01T10:00:01Z");
            assert_eq!(w.phase(), "Failed", "{name}");
            let (reason, got) = w.ready();
            assert_eq!(reason, "RestoreFailed", "{name}");
            assert!(got.contains(message), "{name}: {got}");
            assert!(
                !w.suspended()
                    && w.cluster
                        .as_ref()
                        .map(|c| c["spec"]["bootstrap"].is_null())
                        .unwrap_or(true),
                "{name}"
            );
            assert!(
                !w.log
                    .iter()
                    .any(|l| l == "delete" || l.starts_with("suspend")),
                "{name}: {:?}",
                w.log
            );
        }
        let mut w = world();
        w.job.spec.options = Some(json!({"restoreTimeoutSeconds": "soon"}));
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.events[0].0, "MalformedOptions");
    }

    #[test]
    fn a_malformed_snapshot_falls_back_to_driver_metadata_with_one_warning() {
        let mut w = world();
        w.job.status = None;
        w.backup.status.as_mut().unwrap().underlying_resources = Some(json!({"kind": 7}));
        w.backup.status.as_mut().unwrap().artifact = None;
        w.run("2026-03-01T10:00:00Z");
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.events.len(), 1, "{:?}", w.events);
        assert_eq!(w.events[0].0, "MalformedSnapshot");
        assert_eq!(
            w.cluster.unwrap()["spec"]["bootstrap"]["restore"]["source"],
            json!({"s3": {"bucket": "bucket", "endpoint": "http://s3.local", "key": "t/etcd/bk-x1.db",
                          "credentialsSecretRef": {"name": "creds"}}})
        );
    }

    #[test]
    fn restore_keys() {
        assert_eq!(key_from_prefix("p/", "b"), "p/b.db");
        assert_eq!(key_from_prefix("", "b"), "b.db");
        assert_eq!(key_from_prefix("p/", ""), "p/");
        assert_eq!(
            key_from_uri(Some("s3://bk/a/b.db"), "bk"),
            Some("a/b.db".into())
        );
        assert_eq!(key_from_uri(Some("s3://other/a/b.db"), "bk"), None);
        assert_eq!(key_from_uri(Some("s3://bk/"), "bk"), None);
        assert_eq!(key_from_uri(Some("file:///x"), "bk"), None);
    }

    #[test]
    fn a_crash_after_the_purge_recreates_without_deleting_again() {
        let mut w = world();
        w.run("2026-03-01T10:00:01Z");
        // The recreated cluster vanished (someone deleted it): recreated, never purged again.
        w.cluster = None;
        w.log.clear();
        w.run("2026-03-01T10:00:20Z");
        assert_eq!(w.log, ["create"]);
        // A refused create resumes the release.
        match world_after_purge().decide("2026-03-01T10:00:02Z") {
            Step::Act {
                action: Action::Create(_),
                on_error,
                ..
            } => {
                assert_eq!(on_error.resume, Some(helm_release("t", "etcd")));
            }
            other => panic!("{other:?}"),
        }
    }

    fn world_after_purge() -> World {
        let mut w = world();
        w.run("2026-03-01T10:00:01Z");
        w.cluster = None;
        w
    }
}
