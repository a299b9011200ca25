//! The FoundationDB restore as one pure decision: `decide(&Observed) -> Step`. The operator does
//! the work: the driver creates one `FoundationDBRestore` pointing the target cluster at the blob
//! store the Backup names, and reads its `status.state`.
//!
//! ```text
//!  source ref FoundationDB? ─► target (may be a copy) kind FoundationDB, our group
//!  ─► startedAt (+ phase Running, a malformed snapshot's Warning; nothing else)
//!  ─► options (strict) ─► snapshot (unknown kind: terminal; malformed: driverMetadata)
//!  ─► blob store {accountName, bucket, backupName, urlParameters} ─► target cluster exists
//!     (else TargetFoundationDBClusterNotReady until the deadline)
//!  ─► FoundationDBRestore <job>-xxxxx labelled owned-by (one per job)
//!  state Completed (any case) ─► Succeeded │ otherwise FoundationDBRestoreRunning until the deadline
//! ```
//!
//! Invariants: at most one FoundationDBRestore per job, found again by its owned-by labels; every
//! wait is bounded by `restoreTimeoutSeconds` from `startedAt`; the blob store settings name an
//! account and a bucket, never credentials.

use std::time::Duration;

use api::backups::{Backup, RestoreJob};
use api::contract::reasons;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value as Json, json};

use super::Step;
use super::mariadb::target;
use super::skeleton::{self, Clock};
use super::skeleton::{fail, owned_by, status_of};
use crate::foundationdb::{self as driver, keys};

/// The operator's API version.
pub const API_VERSION: &str = "apps.foundationdb.org/v1beta2";
/// How often a wait on the operator is re-examined without an event.
pub const POLL: Duration = Duration::from_secs(10);
/// The API version of the snapshot in `Backup.status.underlyingResources`.
pub const SNAPSHOT_API_VERSION: &str = "backups.cozystack.io/v1alpha1";

/// What the FoundationDB restore looks at.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The RestoreJob.
    pub job: &'a RestoreJob,
    /// The Backup it restores.
    pub backup: &'a Backup,
    /// Now.
    pub now: Time,
    /// The target `FoundationDBCluster foundationdb-<target>` (`None`: not found).
    pub target_cluster: Option<&'a Json>,
    /// The FoundationDBRestores labelled as owned by this job.
    pub restores: &'a [Json],
}

/// What a FoundationDB restore takes from the snapshot.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    /// `storage` (the blob store template).
    pub storage: Map<String, Json>,
    /// `customParameters`.
    pub custom_parameters: Vec<Json>,
    /// `encryptionKeyPath`.
    pub encryption_key_path: String,
}

/// How `Backup.status.underlyingResources` reads.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// None stored.
    Absent,
    /// A FoundationDB snapshot.
    Found(Snapshot),
    /// Not decodable (the detail): the restore falls back to driverMetadata.
    Malformed(String),
    /// Another kind or apiVersion (the message): terminal.
    Unrecognised(String),
}

fn bad(path: &str, want: &str) -> String {
    format!("decode Backup.status.underlyingResources: {path}: expected {want}")
}

/// Decodes the snapshot with Go's rules: type errors first (malformed), then kind and apiVersion.
pub fn decode_snapshot(raw: Option<&Json>) -> Decoded {
    let obj = match raw {
        None | Some(Json::Null) => return Decoded::Absent,
        Some(Json::Object(o)) => o,
        Some(_) => return Decoded::Malformed(bad("(root)", "a JSON object")),
    };
    let null = Json::Null;
    let get = |k: &str| obj.get(k).unwrap_or(&null);
    let checks = || -> Result<Snapshot, String> {
        for k in ["kind", "apiVersion", "encryptionKeyPath"] {
            if !(get(k).is_null() || get(k).is_string()) {
                return Err(bad(k, "a string"));
            }
        }
        let storage = match get("storage") {
            Json::Null => Map::new(),
            Json::Object(s) => s.clone(),
            _ => return Err(bad("storage", "an object")),
        };
        for k in ["accountName", "bucket", "backupName"] {
            let v = storage.get(k).unwrap_or(&null);
            if !(v.is_null() || v.is_string()) {
                return Err(bad(&format!("storage.{k}"), "a string"));
            }
        }
        let strings = |v: &Json, path: &str| -> Result<Vec<Json>, String> {
            match v {
                Json::Null => Ok(Vec::new()),
                Json::Array(a) if a.iter().all(Json::is_string) => Ok(a.clone()),
                _ => Err(bad(path, "an array of strings")),
            }
        };
        strings(
            storage.get("urlParameters").unwrap_or(&null),
            "storage.urlParameters",
        )?;
        Ok(Snapshot {
            storage,
            custom_parameters: strings(get("customParameters"), "customParameters")?,
            encryption_key_path: get("encryptionKeyPath")
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
    };
    let snap = match checks() {
        Ok(s) => s,
        Err(e) => return Decoded::Malformed(e),
    };
    if let Err(message) = super::snapshot_identity(
        get("kind"),
        get("apiVersion"),
        driver::SNAPSHOT_KIND,
        SNAPSHOT_API_VERSION,
    ) {
        return Decoded::Unrecognised(message);
    }
    Decoded::Found(snap)
}

/// The blob store configuration of the restore: the snapshot's when it names an account, a bucket
/// or a backup, else driverMetadata's; `None` when neither does.
pub fn blob_store(backup: &Backup, snap: Option<&Snapshot>) -> Option<Json> {
    let s = |m: &Map<String, Json>, k: &str| {
        m.get(k)
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (account, bucket, name, params) = match snap {
        Some(sn)
            if ["accountName", "bucket", "backupName"]
                .iter()
                .any(|k| !s(&sn.storage, k).is_empty()) =>
        {
            (
                s(&sn.storage, "accountName"),
                s(&sn.storage, "bucket"),
                s(&sn.storage, "backupName"),
                sn.storage
                    .get("urlParameters")
                    .and_then(Json::as_array)
                    .cloned()
                    .unwrap_or_default(),
            )
        }
        _ => {
            let md = backup.spec.driver_metadata.clone().unwrap_or_default();
            let get = |k: &str| md.get(k).cloned().unwrap_or_default();
            let (a, b, n) = (
                get(keys::ACCOUNT_NAME),
                get(keys::BUCKET),
                get(keys::BLOB_BACKUP_NAME),
            );
            if a.is_empty() && b.is_empty() && n.is_empty() {
                return None;
            }
            (a, b, n, Vec::new())
        }
    };
    let mut blob = Map::new();
    blob.insert("accountName".into(), json!(account));
    for (k, v) in [("bucket", bucket), ("backupName", name)] {
        if !v.is_empty() {
            blob.insert(k.into(), json!(v));
        }
    }
    if !params.is_empty() {
        blob.insert("urlParameters".into(), Json::Array(params));
    }
    Some(Json::Object(blob))
}

/// The FoundationDBRestore a job creates.
pub fn restore_body(job: &RestoreJob, cluster: &str, blob: &Json, snap: Option<&Snapshot>) -> Json {
    let name = job.metadata.name.clone().unwrap_or_default();
    let mut labels = Map::new();
    for (k, v) in owned_by(job) {
        labels.insert(k, json!(v));
    }
    let mut spec = json!({
        "destinationClusterName": cluster,
        "blobStoreConfiguration": blob,
    });
    if let Some(s) = snap {
        if !s.custom_parameters.is_empty() {
            spec["customParameters"] = Json::Array(s.custom_parameters.clone());
        }
        if !s.encryption_key_path.is_empty() {
            spec["encryptionKeyPath"] = json!(s.encryption_key_path);
        }
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "FoundationDBRestore",
        "metadata": {"generateName": format!("{name}-"), "namespace": job.metadata.namespace, "labels": labels},
        "spec": spec,
    })
}

/// Decides the next step of a FoundationDB restore.
pub fn decide(o: &Observed<'_>) -> Step {
    let (job, backup, now) = (o.job, o.backup, &o.now);
    let status = status_of(job);

    // 1. Source and target, before any API call.
    if let Err(e) = driver::validate_app_ref(&backup.spec.application_ref) {
        return fail(&status, &e, Vec::new(), now);
    }
    let (app, kind, group) = target(job, backup);
    if let Err(message) = super::target_kind_gate(&kind, &group, driver::APP_KIND, "FoundationDB") {
        return fail(&status, &message, Vec::new(), now);
    }
    let decoded = decode_snapshot(
        backup
            .status
            .as_ref()
            .and_then(|s| s.underlying_resources.as_ref()),
    );

    // 2. startedAt (+ phase Running); the snapshot's Warning is recorded once, here.
    let started = proceed!(skeleton::start(&status, now, || match &decoded {
        Decoded::Malformed(e) => vec![skeleton::malformed_snapshot("FoundationDB", e)],
        _ => Vec::new(),
    }));

    // 3. Options, snapshot, blob store.
    let limit = match super::options::foundationdb(job.spec.options.as_ref()) {
        Ok(d) => d,
        Err(r) => return fail(&status, &r.message, r.events, now),
    };
    let snap = match decoded {
        Decoded::Unrecognised(e) => return skeleton::unrecognised_snapshot(&status, &e, now),
        Decoded::Found(s) => Some(s),
        Decoded::Absent | Decoded::Malformed(_) => None,
    };
    let Some(blob) = blob_store(backup, snap.as_ref()) else {
        return fail(
            &status,
            "Backup driverMetadata/snapshot is missing FoundationDB blob-store configuration (re-take the backup with a controller version that persists it)",
            Vec::new(),
            now,
        );
    };
    let clock = Clock {
        started,
        limit,
        now,
        poll: POLL,
    };
    let namespace = backup.metadata.namespace.clone().unwrap_or_default();
    let cluster = driver::cluster_name(&app);

    // 4. The target cluster.
    proceed!(skeleton::await_target(
        &status,
        &clock,
        o.target_cluster.is_some(),
        &format!("apps.foundationdb.org/FoundationDBCluster {namespace}/{cluster}"),
        reasons::TARGET_FOUNDATIONDB_CLUSTER_NOT_READY,
        "deploy the target FoundationDB application before requesting the restore",
    ));

    // 5. One FoundationDBRestore per job.
    let restore = proceed!(skeleton::create_once(
        o.restores,
        "failed to ensure apps.foundationdb.org/FoundationDBRestore",
        || restore_body(job, &cluster, &blob, snap.as_ref()),
    ));
    let id = skeleton::id(restore, &namespace);
    let state = restore["status"]["state"].as_str().unwrap_or_default();
    let running = restore["status"]["running"].as_bool().unwrap_or(false);

    // 6. Its state.
    if state.eq_ignore_ascii_case("Completed") {
        return skeleton::succeeded(
            &status,
            Some(&format!(
                "apps.foundationdb.org/FoundationDBRestore {id} completed"
            )),
            now,
        );
    }
    let seen = format!("state={state:?} running={running}");
    if let Some(step) = skeleton::overdue(
        &status,
        &clock,
        "apps.foundationdb.org/FoundationDBRestore",
        &seen,
    ) {
        return step;
    }
    skeleton::waiting(
        &status,
        &clock,
        reasons::FOUNDATIONDB_RESTORE_RUNNING,
        &format!("apps.foundationdb.org/FoundationDBRestore {id} {seen}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restore::Action;
    use api::backups::{BackupStatus, RestoreJobStatus};
    use pretty_assertions::assert_eq;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    struct World {
        job: RestoreJob,
        backup: Backup,
        cluster: Option<Json>,
        restores: Vec<Json>,
        events: Vec<(&'static str, String)>,
    }

    fn world() -> World {
        let mut job = RestoreJob::test("rj", "bk").namespace("t").build();
        job.status = Some(RestoreJobStatus {
            phase: Some("Running".into()),
            started_at: Some(t("2026-03-01T10:00:00Z")),
            ..Default::default()
        });
        let mut backup = Backup::test("bk")
            .namespace("t")
            .for_app("FoundationDB", "db")
            .strategy("strategy.backups.cozystack.io", "FoundationDB", "f")
            .driver_metadata(&[
                (keys::ACCOUNT_NAME, "acct@s3.local"),
                (keys::BUCKET, "md-bucket"),
                (keys::BLOB_BACKUP_NAME, "md-name"),
            ])
            .build();
        backup.status = Some(BackupStatus {
            underlying_resources: Some(json!({
                "kind": "FoundationDBBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                "storage": {"accountName": "acct@s3.local", "bucket": "b", "backupName": "bj-1",
                            "urlParameters": ["secure_connection=0"]},
                "customParameters": ["knob_x=1"], "encryptionKeyPath": "/keys/k"})),
            ..Default::default()
        });
        World {
            job,
            backup,
            cluster: Some(json!({"metadata": {"name": "foundationdb-db"}})),
            restores: Vec::new(),
            events: Vec::new(),
        }
    }

    impl World {
        fn run(&mut self, now: &str) -> Option<Duration> {
            for _ in 0..20 {
                let step = decide(&Observed {
                    job: &self.job,
                    backup: &self.backup,
                    now: t(now),
                    target_cluster: self.cluster.as_ref(),
                    restores: &self.restores,
                });
                match step {
                    Step::Status {
                        status,
                        events,
                        requeue,
                    } => {
                        self.events
                            .extend(events.into_iter().map(|e| (e.reason, e.note)));
                        self.job.status = Some(status);
                        if self.job.is_terminal() {
                            return requeue;
                        }
                    }
                    Step::Wait { requeue, .. } => return requeue,
                    Step::Act {
                        action: Action::Create(mut body),
                        ..
                    } => {
                        body["metadata"]["name"] = json!("rj-abcde");
                        self.restores.push(body);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            panic!("no progress");
        }

        fn ready(&self) -> (String, String, String) {
            let s = self.job.status.clone().unwrap();
            let r = crate::status::ready(&s.conditions).cloned().unwrap();
            (s.phase.unwrap_or_default(), r.reason, r.message)
        }
    }

    #[test]
    fn creates_one_restore_and_succeeds_when_completed() {
        let mut w = world();
        assert_eq!(w.run("2026-03-01T10:00:01Z"), Some(POLL));
        assert_eq!(w.restores.len(), 1);
        assert_eq!(
            w.restores[0]["spec"],
            json!({"destinationClusterName": "foundationdb-db",
                   "blobStoreConfiguration": {"accountName": "acct@s3.local", "bucket": "b",
                       "backupName": "bj-1", "urlParameters": ["secure_connection=0"]},
                   "customParameters": ["knob_x=1"], "encryptionKeyPath": "/keys/k"})
        );
        assert_eq!(
            w.ready(),
            (
                "Running".into(),
                "FoundationDBRestoreRunning".into(),
                "apps.foundationdb.org/FoundationDBRestore t/rj-abcde state=\"\" running=false"
                    .into()
            )
        );
        w.restores[0]["status"] = json!({"state": "completed", "running": false});
        w.run("2026-03-01T10:05:00Z");
        assert_eq!(w.restores.len(), 1);
        assert_eq!(
            w.ready(),
            (
                "Succeeded".into(),
                "RestoreCompleted".into(),
                "apps.foundationdb.org/FoundationDBRestore t/rj-abcde completed".into()
            )
        );
    }

    #[test]
    fn a_restore_that_never_completes_fails_at_the_deadline() {
        let mut w = world();
        w.job.spec.options = Some(json!({"restoreTimeoutSeconds": 60}));
        w.run("2026-03-01T10:00:01Z");
        w.restores[0]["status"] = json!({"state": "Running", "running": true});
        assert_eq!(w.run("2026-03-01T10:00:55Z"), Some(Duration::from_secs(5)));
        w.run("2026-03-01T10:01:01Z");
        assert_eq!(w.ready(), ("Failed".into(), "RestoreFailed".into(), "apps.foundationdb.org/FoundationDBRestore did not complete within 1m0s (state=\"Running\" running=true; override via spec.options.restoreTimeoutSeconds)".into()));
    }

    #[test]
    fn a_missing_target_cluster_waits_until_the_deadline() {
        let mut w = world();
        w.cluster = None;
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.ready().1, "TargetFoundationDBClusterNotReady");
        w.run("2026-03-01T10:30:01Z");
        assert_eq!(
            w.ready().2,
            "target apps.foundationdb.org/FoundationDBCluster t/foundationdb-db not found within 30m0s (deploy the target FoundationDB application before requesting the restore; override via spec.options.restoreTimeoutSeconds)"
        );
        assert!(w.restores.is_empty());
    }

    #[test]
    fn refusals() {
        type Change = Box<dyn Fn(&mut World)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|w: &mut World| {
                    w.job.spec.target_application_ref =
                        Some(api::TypedLocalObjectReference::new("", "MariaDB", ""))
                }),
                "target applicationRef.kind=\"MariaDB\" is not supported by the FoundationDB driver",
            ),
            (
                Box::new(|w: &mut World| w.job.spec.options = Some(json!([1]))),
                "malformed restoreJob.spec.options: decode restoreJob.spec.options: expected a JSON object, got an array (clear the field or supply a valid FoundationDBRestoreOptions JSON object)",
            ),
            (
                Box::new(|w: &mut World| {
                    w.backup.status.as_mut().unwrap().underlying_resources =
                        Some(json!({"kind": "FoundationDBBackupSnapshot", "apiVersion": "v9"}))
                }),
                "Backup.status.underlyingResources carries a snapshot of an unrecognised kind/apiVersion: apiVersion=\"v9\" (want \"backups.cozystack.io/v1alpha1\") (re-take the backup with a controller version compatible with this snapshot schema, or clear Backup.status.underlyingResources to opt into the driverMetadata fallback)",
            ),
            (
                Box::new(|w: &mut World| {
                    w.backup.status = None;
                    w.backup.spec.driver_metadata = None;
                }),
                "Backup driverMetadata/snapshot is missing FoundationDB blob-store configuration (re-take the backup with a controller version that persists it)",
            ),
        ];
        for (change, message) in cases {
            let mut w = world();
            change(&mut w);
            w.run("2026-03-01T10:00:01Z");
            assert_eq!(
                w.ready(),
                ("Failed".into(), "RestoreFailed".into(), message.into())
            );
            assert!(w.restores.is_empty());
        }
    }

    #[test]
    fn a_malformed_snapshot_falls_back_to_driver_metadata_with_one_warning() {
        let mut w = world();
        w.job.status = None;
        w.backup.status.as_mut().unwrap().underlying_resources =
            Some(json!({"kind": "FoundationDBBackupSnapshot", "storage": {"bucket": 3}}));
        w.run("2026-03-01T10:00:00Z");
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.events.len(), 1);
        assert_eq!(w.events[0].0, "MalformedSnapshot");
        assert_eq!(
            w.restores[0]["spec"],
            json!({"destinationClusterName": "foundationdb-db",
                   "blobStoreConfiguration": {"accountName": "acct@s3.local", "bucket": "md-bucket", "backupName": "md-name"}})
        );
    }
}
