//! The MongoDB (Percona Server for MongoDB) restore as one pure decision: `decide(&Observed) ->
//! Step`. The operator does the work: the driver creates one `PerconaServerMongoDBRestore` with
//! the backup's source (and a point-in-time target when `recoveryTime` is set) and reads its state.
//!
//! ```text
//!  source ref MongoDB? ─► target (may be a copy) kind MongoDB, our group
//!  ─► startedAt (+ phase Running, option Warnings; nothing else)
//!  ─► options (permissive unless they carry recoveryTime; recoveryTime RFC 3339 ─► pitr date)
//!  ─► backup source: the live operator Backup's status, else the snapshot / driverMetadata
//!  ─► target mongodb-<target> exists and has backups enabled (else wait until the deadline)
//!  ─► credentials re-pointed at the target's storage Secret
//!  ─► PerconaServerMongoDBRestore <job>-xxxxx labelled owned-by (one per job)
//!  state ready ─► Succeeded │ error / rejected ─► Failed │ otherwise poll until the deadline
//! ```
//!
//! Invariants: at most one restore object per job, found again by its owned-by labels; every wait
//! is bounded by `restoreTimeoutSeconds` from `startedAt`; the source names a credentials Secret,
//! never its values; a malformed `recoveryTime` never degrades into a full snapshot restore.

use std::time::Duration;

use api::backups::{Backup, RestoreJob};
use api::contract::reasons;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value as Json, json};

use super::Step;
use super::mariadb::target;
use super::options::MongoPitr;
use super::skeleton::{self, Clock};
use super::skeleton::{fail, owned_by, status_of};
use crate::mongodb::{self as driver, keys};

/// The operator's API version.
pub const API_VERSION: &str = "psmdb.percona.com/v1";
/// How often a wait on the operator is re-examined without an event.
pub const POLL: Duration = Duration::from_secs(10);

/// What the MongoDB restore looks at.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The RestoreJob.
    pub job: &'a RestoreJob,
    /// The Backup it restores.
    pub backup: &'a Backup,
    /// Now.
    pub now: Time,
    /// The operator Backup named by `psmdb.percona.com/backup-name` (`None`: not found or no
    /// name; a read error other than NotFound is the executor's to retry).
    pub source_backup: Option<&'a Json>,
    /// The target `PerconaServerMongoDB mongodb-<target>` (`None`: not found).
    pub target_cluster: Option<&'a Json>,
    /// The PerconaServerMongoDBRestores labelled as owned by this job.
    pub restores: &'a [Json],
}

fn str_of<'a>(v: &'a Json, k: &str) -> &'a str {
    v[k].as_str().unwrap_or_default()
}

/// The operator's `backupSource`: the live operator Backup's status when it records a
/// destination, else the snapshot's destination (or driverMetadata's) with the snapshot's type,
/// storage and S3 settings; an error when there is none or the snapshot does not decode.
pub fn backup_source(backup: &Backup, live: Option<&Json>) -> Result<Json, String> {
    if let Some(s) = live
        .map(|l| &l["status"])
        .filter(|s| !str_of(s, "destination").is_empty())
    {
        let mut src = json!({
            "type": non_empty(str_of(s, "type")).unwrap_or(driver::DEFAULT_TYPE),
            "destination": str_of(s, "destination"),
        });
        if let Some(n) = non_empty(str_of(s, "storageName")) {
            src["storageName"] = json!(n);
        }
        if s["s3"].is_object() {
            src["s3"] = s["s3"].clone();
        }
        return Ok(src);
    }
    let snap = backup
        .status
        .as_ref()
        .and_then(|s| s.underlying_resources.as_ref())
        .filter(|s| !s.is_null());
    if let Some(s) = snap {
        let ok = s.is_object()
            && ["kind", "apiVersion", "destination", "type", "storageName"]
                .iter()
                .all(|k| s[k].is_null() || s[k].is_string())
            && (s["s3"].is_null() || s["s3"].is_object());
        if !ok {
            return Err("decode Backup snapshot: Backup.status.underlyingResources does not have the shape of a MongoDB snapshot".into());
        }
    }
    let null = Json::Null;
    let snap = snap.unwrap_or(&null);
    let metadata = backup
        .spec
        .driver_metadata
        .as_ref()
        .and_then(|m| m.get(keys::DESTINATION))
        .map(String::as_str)
        .unwrap_or_default();
    let destination = non_empty(str_of(snap, "destination")).unwrap_or(metadata);
    if destination.is_empty() {
        return Err("Backup has no restorable destination (the operator PerconaServerMongoDBBackup was reaped and no snapshot destination is persisted); re-run the BackupJob".into());
    }
    let mut src = json!({
        "type": non_empty(str_of(snap, "type")).unwrap_or(driver::DEFAULT_TYPE),
        "destination": destination,
    });
    if let Some(n) = non_empty(str_of(snap, "storageName")) {
        src["storageName"] = json!(n);
    }
    if snap["s3"].is_object() {
        src["s3"] = snap["s3"].clone();
    }
    Ok(src)
}

fn non_empty(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

/// The S3 credentials Secret of the target cluster: that of the preferred storage, else of
/// `s3-storage`, else of the only declared storage.
pub fn target_credentials_secret(cluster: &Json, preferred: &str) -> Option<String> {
    let storages = cluster["spec"]["backup"]["storages"].as_object()?;
    let cred = |name: &str| {
        storages
            .get(name)
            .and_then(|s| s["s3"]["credentialsSecret"].as_str())
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
    };
    non_empty(preferred)
        .and_then(cred)
        .or_else(|| cred(driver::DEFAULT_STORAGE))
        .or_else(|| {
            (storages.len() == 1)
                .then(|| storages.keys().next().and_then(|k| cred(k)))
                .flatten()
        })
}

/// The PerconaServerMongoDBRestore a job creates.
pub fn restore_body(
    job: &RestoreJob,
    cluster: &str,
    source: &Json,
    pitr: Option<&MongoPitr>,
) -> Json {
    let name = job.metadata.name.clone().unwrap_or_default();
    let mut labels = Map::new();
    for (k, v) in owned_by(job) {
        labels.insert(k, json!(v));
    }
    let mut spec = json!({"clusterName": cluster, "backupSource": source});
    if let Some(p) = pitr {
        spec["pitr"] = json!({"type": "date", "date": p.date});
    }
    json!({
        "apiVersion": API_VERSION,
        "kind": "PerconaServerMongoDBRestore",
        "metadata": {"generateName": format!("{name}-"), "namespace": job.metadata.namespace, "labels": labels},
        "spec": spec,
    })
}

/// Whether `pitr` is a point this Backup can be restored to: not after now (nothing is written
/// there yet) and not before the Backup's `takenAt` (a point-in-time restore replays the oplog
/// forward from the backup).
fn reachable(pitr: &MongoPitr, backup: &Backup, now: &Time) -> Result<(), String> {
    if pitr.at > now.0 {
        return Err(format!(
            "invalid restoreJob.spec.options.recoveryTime: recoveryTime {} is in the future (now {}); only a point that has already been written can be restored",
            pitr.at, now.0
        ));
    }
    let taken = &backup.spec.taken_at.0;
    if pitr.at < *taken {
        return Err(format!(
            "invalid restoreJob.spec.options.recoveryTime: recoveryTime {} is before the Backup's takenAt {taken}; a point-in-time restore replays forward from the backup, so pick a later time or an older Backup",
            pitr.at
        ));
    }
    Ok(())
}

/// Decides the next step of a MongoDB restore.
pub fn decide(o: &Observed<'_>) -> Step {
    let (job, backup, now) = (o.job, o.backup, &o.now);
    let status = status_of(job);

    // 1. Source and target, before any API call.
    if let Err(e) = driver::validate_app_ref(&backup.spec.application_ref) {
        return fail(&status, &e, Vec::new(), now);
    }
    let (app, kind, group) = target(job, backup);
    if let Err(message) = super::target_kind_gate(&kind, &group, driver::APP_KIND, "MongoDB") {
        return fail(&status, &message, Vec::new(), now);
    }

    // 2. startedAt (+ phase Running); option Warnings are recorded once, here. A terminal
    //    rejection waits for the next pass, as upstream parses after the stamp.
    let parsed = super::options::mongodb(job.spec.options.as_ref());
    let started = proceed!(skeleton::start(&status, now, || {
        parsed
            .as_ref()
            .map(|p| p.events.clone())
            .unwrap_or_default()
    }));
    let options = match parsed {
        Ok(p) => p.options,
        Err(r) => return fail(&status, &r.message, r.events, now),
    };
    // Ours: a point in time that cannot be restored from this Backup fails here, naming the
    // option, rather than at the operator (or never, with a simulator that accepts anything).
    if let Some(pitr) = options.pitr.as_ref()
        && let Err(message) = reachable(pitr, backup, now)
    {
        return fail(&status, &message, Vec::new(), now);
    }
    let clock = Clock {
        started,
        limit: options.restore_timeout,
        now,
        poll: POLL,
    };
    let namespace = backup.metadata.namespace.clone().unwrap_or_default();

    // 3. The backup source.
    let mut source = match backup_source(backup, o.source_backup) {
        Ok(s) => s,
        Err(e) => return fail(&status, &e, Vec::new(), now),
    };

    // 4. The target cluster, with backups enabled.
    let cluster = driver::cluster_name(&app);
    let what = format!("psmdb.percona.com/PerconaServerMongoDB {namespace}/{cluster}");
    proceed!(skeleton::await_target(
        &status,
        &clock,
        o.target_cluster.is_some(),
        &what,
        reasons::TARGET_PERCONA_SERVER_MONGODB_NOT_READY,
        "deploy the target MongoDB application with backup.enabled=true before requesting the restore",
    ));
    let target_cluster = o.target_cluster.unwrap_or(&Json::Null);
    if target_cluster["spec"]["backup"]["enabled"] != json!(true) {
        if clock.passed() {
            return fail(
                &status,
                &format!(
                    "target {what} has spec.backup.enabled=false within {}; the percona-backup-mongodb agents must run to restore (set backup.enabled=true on the target MongoDB application)",
                    clock.limit()
                ),
                Vec::new(),
                now,
            );
        }
        return skeleton::waiting(
            &status,
            &clock,
            reasons::TARGET_PERCONA_SERVER_MONGODB_BACKUPS_DISABLED,
            &format!("waiting for target {what} to enable backups"),
        );
    }

    // 5. Credentials of the target's storage, then one restore object per job.
    if source["s3"].is_object() {
        let preferred = str_of(&source, "storageName").to_owned();
        if let Some(cred) = target_credentials_secret(target_cluster, &preferred) {
            source["s3"]["credentialsSecret"] = json!(cred);
        }
    }
    let restore = proceed!(skeleton::create_once(
        o.restores,
        "failed to ensure psmdb.percona.com/PerconaServerMongoDBRestore",
        || restore_body(job, &cluster, &source, options.pitr.as_ref()),
    ));
    let id = skeleton::id(restore, &namespace);

    // 6. Its state.
    let state = str_of(&restore["status"], "state");
    match state {
        driver::STATE_READY => skeleton::succeeded(
            &status,
            Some(&format!(
                "psmdb.percona.com/PerconaServerMongoDBRestore {id} completed"
            )),
            now,
        ),
        driver::STATE_ERROR | driver::STATE_REJECTED => {
            let message = non_empty(str_of(&restore["status"], "error"))
                .map(str::to_owned)
                .unwrap_or_else(|| {
                    format!(
                        "psmdb.percona.com/PerconaServerMongoDBRestore {id} reported state={state}"
                    )
                });
            fail(&status, &message, Vec::new(), now)
        }
        _ => {
            let detail = non_empty(state)
                .map(|s| format!("state={s}"))
                .unwrap_or_else(|| "no state observed".into());
            skeleton::overdue(
                &status,
                &clock,
                "psmdb.percona.com/PerconaServerMongoDBRestore",
                &detail,
            )
            .unwrap_or(Step::Wait {
                events: Vec::new(),
                requeue: clock.requeue(),
            })
        }
    }
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
        source_backup: Option<Json>,
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
            .for_app("MongoDB", "db")
            .strategy("strategy.backups.cozystack.io", "MongoDB", "m")
            .driver_metadata(&[
                (keys::BACKUP_NAME, "bj-1"),
                (keys::DESTINATION, "s3://b/md-dest"),
            ])
            .build();
        backup.status = Some(BackupStatus {
            underlying_resources: Some(json!({
                "kind": "MongoDBBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                "destination": "s3://b/snap-dest", "type": "logical", "storageName": "s3-storage",
                "s3": {"bucket": "b", "credentialsSecret": "source-creds"}})),
            ..Default::default()
        });
        World {
            job,
            backup,
            source_backup: Some(
                json!({"status": {"state": "ready", "destination": "s3://b/live-dest",
                "type": "physical", "storageName": "s3-storage",
                "s3": {"bucket": "b", "credentialsSecret": "source-creds"}}}),
            ),
            cluster: Some(json!({"spec": {"backup": {"enabled": true, "storages": {
                "s3-storage": {"type": "s3", "s3": {"bucket": "b", "credentialsSecret": "target-creds"}}}}}})),
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
                    source_backup: self.source_backup.as_ref(),
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
    fn a_point_in_time_restore_from_the_live_backup_succeeds() {
        let mut w = world();
        w.job.spec.options = Some(json!({"recoveryTime": "2026-02-28T23:30:15+01:00"}));
        assert_eq!(w.run("2026-03-01T10:00:01Z"), Some(POLL));
        assert_eq!(
            w.restores[0]["spec"],
            json!({"clusterName": "mongodb-db",
                   "backupSource": {"type": "physical", "destination": "s3://b/live-dest", "storageName": "s3-storage",
                                    "s3": {"bucket": "b", "credentialsSecret": "target-creds"}},
                   "pitr": {"type": "date", "date": "2026-02-28 22:30:15"}})
        );
        w.restores[0]["status"] = json!({"state": "ready"});
        w.run("2026-03-01T10:03:00Z");
        assert_eq!(w.restores.len(), 1);
        assert_eq!(
            w.ready(),
            (
                "Succeeded".into(),
                "RestoreCompleted".into(),
                "psmdb.percona.com/PerconaServerMongoDBRestore t/rj-abcde completed".into()
            )
        );
    }

    #[test]
    fn without_the_live_backup_the_snapshot_then_driver_metadata() {
        let mut w = world();
        w.source_backup = None;
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.restores[0]["spec"]["backupSource"]["destination"],
            "s3://b/snap-dest"
        );
        assert!(w.restores[0]["spec"]["pitr"].is_null());
        let mut w = world();
        w.source_backup = None;
        w.backup.status = None;
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.restores[0]["spec"]["backupSource"],
            json!({"type": "logical", "destination": "s3://b/md-dest"})
        );
    }

    #[test]
    fn operator_failure_and_deadline() {
        let mut w = world();
        w.run("2026-03-01T10:00:01Z");
        w.restores[0]["status"] = json!({"state": "error", "error": "pbm: no such backup"});
        w.run("2026-03-01T10:00:20Z");
        assert_eq!(
            w.ready(),
            (
                "Failed".into(),
                "RestoreFailed".into(),
                "pbm: no such backup".into()
            )
        );
        let mut w = world();
        w.run("2026-03-01T10:00:01Z");
        w.restores[0]["status"] = json!({"state": "rejected"});
        w.run("2026-03-01T10:00:20Z");
        assert_eq!(
            w.ready().2,
            "psmdb.percona.com/PerconaServerMongoDBRestore t/rj-abcde reported state=rejected"
        );
        let mut w = world();
        w.job.spec.options = Some(json!({"restoreTimeoutSeconds": 60}));
        w.run("2026-03-01T10:00:01Z");
        w.restores[0]["status"] = json!({"state": "running"});
        assert_eq!(w.run("2026-03-01T10:00:57Z"), Some(Duration::from_secs(3)));
        w.run("2026-03-01T10:01:01Z");
        assert_eq!(
            w.ready().2,
            "psmdb.percona.com/PerconaServerMongoDBRestore did not complete within 1m0s (state=running; override via spec.options.restoreTimeoutSeconds)"
        );
    }

    #[test]
    fn the_target_must_exist_with_backups_enabled_before_the_deadline() {
        let mut w = world();
        w.cluster = None;
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.ready().1, "TargetPerconaServerMongoDBNotReady");
        w.cluster = Some(json!({"spec": {"backup": {"enabled": false}}}));
        w.run("2026-03-01T10:00:11Z");
        assert_eq!(
            w.ready(),
            (
                "Running".into(),
                "TargetPerconaServerMongoDBBackupsDisabled".into(),
                "waiting for target psmdb.percona.com/PerconaServerMongoDB t/mongodb-db to enable backups".into()
            )
        );
        w.run("2026-03-01T10:30:01Z");
        assert_eq!(
            w.ready().2,
            "target psmdb.percona.com/PerconaServerMongoDB t/mongodb-db has spec.backup.enabled=false within 30m0s; the percona-backup-mongodb agents must run to restore (set backup.enabled=true on the target MongoDB application)"
        );
        assert!(w.restores.is_empty());
    }

    #[test]
    fn options_and_source_refusals() {
        type Change = Box<dyn Fn(&mut World)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|w: &mut World| {
                    w.job.spec.options = Some(json!({"recoveryTime": 5}));
                }),
                "restoreJob.spec.options carries a recoveryTime but is malformed (decode restoreJob.spec.options: recoveryTime: expected a string, got a number); refusing to fall back to a plain snapshot restore, which would silently ignore the requested point-in-time",
            ),
            (
                Box::new(|w: &mut World| {
                    w.job.spec.options = Some(json!({"recoveryTime": "yesterday"}));
                }),
                "invalid restoreJob.spec.options.recoveryTime: recoveryTime \"yesterday\" is not a valid RFC3339 timestamp",
            ),
            (
                Box::new(|w: &mut World| {
                    w.source_backup = None;
                    w.backup.status = None;
                    w.backup.spec.driver_metadata = None;
                }),
                "Backup has no restorable destination (the operator PerconaServerMongoDBBackup was reaped and no snapshot destination is persisted); re-run the BackupJob",
            ),
            (
                Box::new(|w: &mut World| {
                    w.source_backup = None;
                    w.backup.status.as_mut().unwrap().underlying_resources =
                        Some(json!({"destination": 1}));
                }),
                "decode Backup snapshot:",
            ),
            (
                Box::new(|w: &mut World| {
                    w.job.spec.target_application_ref =
                        Some(api::TypedLocalObjectReference::new("", "Postgres", ""));
                }),
                "target applicationRef.kind=\"Postgres\" is not supported by the MongoDB driver",
            ),
        ];
        for (change, message) in cases {
            let mut w = world();
            change(&mut w);
            w.run("2026-03-01T10:00:01Z");
            let (phase, reason, got) = w.ready();
            assert_eq!(
                (phase.as_str(), reason.as_str()),
                ("Failed", "RestoreFailed")
            );
            assert!(got.starts_with(message), "{got}");
            assert!(w.restores.is_empty());
        }
    }

    #[test]
    fn unknown_and_malformed_options_warn_once() {
        let mut w = world();
        w.job.status = None;
        w.job.spec.options = Some(json!({"restoreTimeoutSeconds": "x", "speed": 1}));
        w.run("2026-03-01T10:00:00Z");
        w.run("2026-03-01T10:00:01Z");
        w.run("2026-03-01T10:00:11Z");
        let reasons: Vec<&str> = w.events.iter().map(|e| e.0).collect();
        assert_eq!(reasons, ["MalformedOptions", "UnknownRestoreOption"]);
        assert_eq!(w.restores.len(), 1, "the defaults apply");
    }
}
