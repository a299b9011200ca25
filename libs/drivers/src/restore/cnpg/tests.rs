//! Table tests of the CNPG restore, pass by pass. Over 1,000 lines because each test steps the
//! whole decision through its passes with the observed objects written out, one table per path
//! (copy, in place, safety backup, archive catch-up, purge, convergence, diagnosis); splitting them
//! by stage would separate a path's passes from each other.

use super::*;
use crate::restore::{Action, OnError};
use api::TypedLocalObjectReference;
use api::backups::BackupStatus;
use api::contract::labels;
use pretty_assertions::assert_eq;

fn t(s: &str) -> Time {
    Time(s.parse().unwrap())
}

const STARTED: &str = "2026-03-01T10:00:00Z";

/// A namespace as the executor would observe it, plus a fake executor and operators.
#[derive(Clone)]
struct World {
    job: RestoreJob,
    backup: Backup,
    strategy: Option<Json>,
    app: Option<Json>,
    cluster: Option<Json>,
    pvcs: Vec<Json>,
    release: Option<Json>,
    source_cnpg_backup: Option<Json>,
    object_store: Option<Json>,
    catalog: Vec<Backup>,
    safety_cnpg_backup: Option<Json>,
    safety_catalog: Option<Backup>,
    wal_switch_backup: Option<Json>,
    /// The source Cluster when it is not the target's (a copy restore); `None`: the target's.
    source_cluster: Option<Option<Json>>,
    pods: Vec<Json>,
    logs: Option<Vec<(String, LogRead)>>,
    /// What the executor did, in order.
    log: Vec<String>,
    events: Vec<(&'static str, String)>,
}

fn live_cluster(created: &str, recovery: bool) -> Json {
    let mut c = json!({
        "metadata": {"name": "postgres-db", "namespace": "t", "creationTimestamp": created},
        "spec": {"plugins": [{"name": driver::PLUGIN_NAME, "parameters": {"barmanObjectName": "postgres-db", "serverName": "postgres-db"}}]},
        "status": {"phase": "Cluster in healthy state"}});
    if recovery {
        c["spec"]["bootstrap"] = json!({"recovery": {"source": "postgres-db"}});
    }
    c
}

fn world() -> World {
    let mut job = RestoreJob::test("rj", "bk").namespace("t").build();
    job.metadata.finalizers = Some(vec!["backups.cozystack.io/cleanup".into()]);
    job.status = Some(RestoreJobStatus {
        phase: Some("Running".into()),
        started_at: Some(t(STARTED)),
        ..Default::default()
    });
    let mut backup = Backup::test("bk")
        .namespace("t")
        .driver_metadata(&[
            ("cnpg.io/backup-name", "bk-x1"),
            ("cnpg.io/server-name", "postgres-db"),
            ("cnpg.io/destination-path", "s3://bucket/t/db/"),
            ("cnpg.io/endpoint-url", "http://s3.local"),
            ("cnpg.io/stopped-at", "2026-03-01T08:00:00Z"),
        ])
        .build();
    backup.status = Some(BackupStatus {
        phase: Some("Ready".into()),
        underlying_resources: Some(json!({
            "kind": "CNPGBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
            "databases": {"orders": {"roles": {"admin": ["orders"]}}},
            "users": {"orders": {"replication": false}},
            "parameters": {"secret": "cozy-backups-creds"}})),
        ..Default::default()
    });
    World {
        job,
        backup: backup.clone(),
        strategy: Some(json!({"spec": {"template": {"barmanObjectStore": {
            "destinationPath": "s3://bucket/t/{{ .Application.metadata.name }}/",
            "s3Credentials": {"secretRef": {"name": "{{ .Parameters.secret }}"}}}}}})),
        app: Some(
            json!({"metadata": {"name": "db", "namespace": "t"}, "spec": {
            "databases": {"orders": {"roles": {"admin": ["orders"]}}, "scratch": {}},
            "users": {"orders": {"password": "keep-me", "replication": true}, "temp": {"password": "x"}},
            "backup": {"s3AccessKey": "AKIA", "s3SecretKey": "secret"}}}),
        ),
        cluster: Some(live_cluster("2026-02-01T00:00:00Z", false)),
        pvcs: vec![json!({"metadata": {"name": "postgres-db-1"}})],
        release: Some(json!({"metadata": {"name": "postgres-db"}, "spec": {"suspend": false}})),
        source_cnpg_backup: Some(
            json!({"metadata": {"name": "bk-x1"}, "status": {"phase": "completed", "endWal": "000000010000000000000003"}}),
        ),
        object_store: Some(json!({
            "spec": {"configuration": {"destinationPath": "s3://bucket/t/db/", "s3Credentials": {"accessKeyId": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"}}}},
            "status": {"serverRecoveryWindow": {"postgres-db": {
                "firstRecoverabilityPoint": "2026-03-01T08:00:00Z", "lastSuccessfulBackupTime": "2026-03-01T08:00:00Z"}}}})),
        catalog: vec![backup],
        safety_cnpg_backup: None,
        safety_catalog: None,
        wal_switch_backup: None,
        source_cluster: None,
        pods: Vec::new(),
        logs: None,
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
            strategy: self.strategy.as_ref(),
            target_app: self.app.as_ref(),
            cluster: self.cluster.as_ref(),
            pvcs: &self.pvcs,
            helm_release: self.release.as_ref(),
            source_cnpg_backup: self.source_cnpg_backup.as_ref(),
            object_store: self.object_store.as_ref(),
            source_cluster: match &self.source_cluster {
                Some(source) => source.as_ref(),
                None => self.cluster.as_ref(),
            },
            catalog: &self.catalog,
            safety_cnpg_backup: self.safety_cnpg_backup.as_ref(),
            safety_catalog: self.safety_catalog.as_ref(),
            wal_switch_backup: self.wal_switch_backup.as_ref(),
            pods: &self.pods,
            logs: self.logs.as_deref(),
        })
    }

    fn status(&self) -> RestoreJobStatus {
        self.job.status.clone().unwrap_or_default()
    }

    /// Runs decide → perform until a wait; returns the final wait's requeue. Deletions take
    /// effect at once (no finalizers in this world).
    fn run(&mut self, now: &str) -> Option<Duration> {
        for _ in 0..50 {
            let step = self.decide(now);
            match step {
                Step::Status {
                    status,
                    events,
                    requeue,
                } => {
                    self.log.push(format!("status {}", summary(&status)));
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
                Step::Act { action, events, .. } => {
                    self.events
                        .extend(events.into_iter().map(|e| (e.reason, e.note)));
                    self.perform(action);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        panic!("no progress: {:?}", self.log);
    }

    fn perform(&mut self, action: Action) {
        match action {
            Action::SetSuspend { release, suspend } => {
                self.log.push(format!("suspend {} {suspend}", release.name));
                if let Some(r) = self.release.as_mut() {
                    r["spec"]["suspend"] = json!(suspend);
                }
            }
            Action::MergePatch { target, patch, .. } => {
                self.log.push(format!("patch {}", target.name));
                let app = self.app.take().unwrap();
                self.app = Some(merge_patch_apply(&app, &patch));
            }
            Action::Delete(r) => {
                self.log.push(format!("delete {} {}", r.kind, r.name));
                self.cluster = None;
            }
            Action::DeleteAll(s) => {
                self.log.push(format!("delete-all {}", s.kind));
                self.pvcs.clear();
            }
            Action::Create(body) => {
                let kind = body["kind"].as_str().unwrap().to_owned();
                self.log.push(format!(
                    "create {kind} {}",
                    body["metadata"]["name"].as_str().unwrap()
                ));
                if kind == "Backup"
                    && body["apiVersion"] == "postgresql.cnpg.io/v1"
                    && body["metadata"]["labels"][labels::WAL_SWITCH_FOR].is_string()
                {
                    assert!(self.wal_switch_backup.is_none(), "a second switch Backup");
                    self.wal_switch_backup = Some(body);
                } else if kind == "Backup" && body["apiVersion"] == "postgresql.cnpg.io/v1" {
                    self.safety_cnpg_backup = Some(body);
                } else {
                    self.safety_catalog = Some(serde_json::from_value(body).unwrap());
                }
            }
            Action::ReadLogs { pods, .. } => {
                self.log.push(format!("read-logs {}", pods.join(",")));
                self.logs = Some(
                    pods.into_iter()
                        .map(|p| {
                            let read = self.pod_log(&p);
                            (p, read)
                        })
                        .collect(),
                );
            }
        }
    }

    fn pod_log(&self, pod: &str) -> LogRead {
        self.pods
            .iter()
            .find(|p| p["metadata"]["name"] == pod)
            .map(|p| match p["log"].as_str() {
                Some("forbidden") => LogRead::Forbidden,
                Some(l) => LogRead::Lines(l.to_owned()),
                None => LogRead::Failed,
            })
            .unwrap()
    }

    fn ready(&self) -> (String, String) {
        let s = self.status();
        let r = crate::status::ready(&s.conditions).cloned().unwrap();
        (r.reason, r.message)
    }

    fn condition(&self, type_: &str) -> Option<(ConditionStatus, String)> {
        find_condition(&self.status().conditions, type_).map(|c| (c.status, c.reason.clone()))
    }
}

/// Phase and the conditions' `type=status/reason`, for the action log.
fn summary(s: &RestoreJobStatus) -> String {
    let mut out = s.phase.clone().unwrap_or_default();
    for c in &s.conditions {
        out.push_str(&format!(" {}={:?}/{}", c.type_, c.status, c.reason));
    }
    out
}

#[test]
fn the_first_pass_only_stamps_started_at_and_records_option_events() {
    let mut w = world();
    w.job.status = None;
    w.job.spec.options = Some(json!({"restoreTimeoutSeconds": "5h"}));
    let step = w.decide("2026-03-01T10:00:00Z");
    let Step::Status { status, events, .. } = step else {
        panic!("{step:?}")
    };
    assert_eq!(
        (
            status.phase.as_deref(),
            status.started_at,
            events.len(),
            events[0].reason
        ),
        (
            Some("Running"),
            Some(t("2026-03-01T10:00:00Z")),
            1,
            "MalformedOptions"
        )
    );
}

#[test]
fn in_place_restore_end_to_end_purges_exactly_once() {
    let mut w = world();
    w.job.spec.options = Some(json!({"recoveryTime": "2026-03-01T09:00:00Z"}));
    // Pass 1: pre-flight + gate recorded; 2: safety started; the operator has not finished it.
    w.run("2026-03-01T10:00:01Z");
    assert_eq!(
        w.log,
        vec![
            "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow",
            "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp",
            "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp SafetyBackupReady=False/SafetyBackupRunning",
            "create Backup rj-safety",
        ]
    );
    let (_, window_message) = find_condition(&w.status().conditions, "RecoveryWindowChecked")
        .map(|c| (c.reason.clone(), c.message.clone()))
        .unwrap();
    assert!(
        window_message.starts_with(
            "recoveryTime 2026-03-01T09:00:00Z is 1h0m0s past the newest archived point known now"
        ),
        "{window_message}"
    );
    // The safety cnpg Backup completes (the plugin records its end on the ObjectStore, which
    // moves the window past the target: the safety backup served as the WAL switch): the catalog
    // entry, the archive catch-up without a switch Backup of its own, then the purge choreography.
    w.safety_cnpg_backup.as_mut().unwrap()["status"] = json!({
        "phase": "completed", "startedAt": "2026-03-01T10:00:02Z", "stoppedAt": "2026-03-01T10:00:05Z",
        "endWal": "000000010000000000000009"});
    w.object_store.as_mut().unwrap()["status"]["serverRecoveryWindow"]["postgres-db"]["lastSuccessfulBackupTime"] =
        json!("2026-03-01T10:00:05Z");
    w.log.clear();
    w.run("2026-03-01T10:00:10Z");
    assert_eq!(
        w.log,
        vec![
            "create Backup rj-safety",
            "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp SafetyBackupReady=True/SafetyBackupCompleted",
            "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp SafetyBackupReady=True/SafetyBackupCompleted RecoveryTargetArchived=True/ArchiveCoversTarget",
            "suspend postgres-db true",
            "patch db",
            "delete Cluster postgres-db",
            "delete-all PersistentVolumeClaim",
            "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp SafetyBackupReady=True/SafetyBackupCompleted RecoveryTargetArchived=True/ArchiveCoversTarget TargetPurged=True/ClusterPurged",
            "suspend postgres-db false",
        ]
    );
    assert!(
        w.wal_switch_backup.is_none(),
        "the safety backup was the switch"
    );
    let safety = w.safety_catalog.clone().unwrap();
    assert_eq!(
        (
            safety.metadata.labels.clone().unwrap(),
            safety.spec.application_ref.name.clone(),
            safety.spec.driver_metadata.as_ref().unwrap()["cnpg.io/backup-name"].clone(),
            safety
                .status
                .as_ref()
                .unwrap()
                .underlying_resources
                .as_ref()
                .unwrap()["users"]
                .clone(),
        ),
        (
            BTreeMap::from([
                (
                    "backups.cozystack.io/safety-backup".to_owned(),
                    "true".to_owned()
                ),
                (
                    "backups.cozystack.io/safety-backup.RestoreJobName".to_owned(),
                    "rj".to_owned()
                ),
            ]),
            "db".to_owned(),
            "rj-safety".to_owned(),
            json!({"orders": {"replication": true}, "temp": {}}),
        ),
        "the safety entry is restorable and carries no password"
    );
    // The purged Cluster took its ObjectStore with it: the window is not checked again.
    w.object_store = None;
    w.catalog.clear();
    // The chart re-renders a recovery Cluster after startedAt: never purged again.
    w.cluster = Some({
        let mut c = live_cluster("2026-03-01T10:01:00Z", true);
        c["status"]["phase"] = json!("Setting up primary");
        c
    });
    w.log.clear();
    let requeue = w.run("2026-03-01T10:05:00Z");
    assert_eq!(w.log, Vec::<String>::new());
    assert_eq!(
        requeue,
        Some(Duration::from_secs(25 * 60)),
        "wakes at the restore deadline"
    );
    // Healthy after the deadline still succeeds (health wins).
    w.cluster.as_mut().unwrap()["status"]["phase"] = json!("Cluster in healthy state");
    w.run("2026-03-01T11:00:00Z");
    assert_eq!(w.status().phase.as_deref(), Some("Succeeded"));
    assert_eq!(
        w.ready(),
        (
            "RestoreCompleted".into(),
            "target cnpg.io Cluster reached healthy state".into()
        )
    );
    assert_eq!(
        w.condition("RecoveryConverged"),
        Some((ConditionStatus::True, "RecoveryConverged".into()))
    );
    assert_eq!(
        w.events.iter().map(|e| e.0).collect::<Vec<_>>(),
        vec!["SafetyBackupStarted", "SafetyBackupCompleted"]
    );
}

#[test]
fn the_patch_bootstraps_from_the_source_and_replaces_databases_and_users() {
    let w = world();
    let app = w.app.clone().unwrap();
    let rendered = driver::render_template(
        &w.strategy.as_ref().unwrap()["spec"]["template"],
        &app,
        &BTreeMap::from([("secret".to_owned(), "cozy-backups-creds".to_owned())]),
    );
    let snapshot = w
        .backup
        .status
        .as_ref()
        .unwrap()
        .underlying_resources
        .clone()
        .unwrap();
    let md = w.backup.spec.driver_metadata.clone().unwrap();
    let patch = app_patch(&app, "postgres-db", &md, &rendered, &snapshot, "");
    assert_eq!(
        patch,
        json!({"spec": {
            "bootstrap": {"enabled": true, "oldName": "postgres-db", "serverName": "postgres-db"},
            "backup": {"destinationPath": "s3://bucket/t/db/", "endpointURL": "http://s3.local",
                       "s3AccessKey": null, "s3SecretKey": null,
                       "s3CredentialsSecret": {"name": "cozy-backups-creds",
                           "accessKeyIDKey": "AWS_ACCESS_KEY_ID", "secretAccessKeyKey": "AWS_SECRET_ACCESS_KEY"}},
            "databases": {"scratch": null},
            "users": {"orders": {"replication": false}, "temp": null}}})
    );
    let patched = merge_patch_apply(&app, &patch);
    assert_eq!(
        patched["spec"]["users"],
        json!({"orders": {"password": "keep-me", "replication": false}}),
        "our snapshots carry no password: the target keeps its own"
    );
    // An upstream snapshot with a password restores it; an empty recoveryTime clears a PITR.
    let mut upstream = snapshot.clone();
    upstream["users"]["orders"]["password"] = json!("from-backup");
    let mut pitr_app = patched.clone();
    pitr_app["spec"]["bootstrap"]["recoveryTime"] = json!("2026-01-01T00:00:00Z");
    let again = merge_patch_apply(
        &pitr_app,
        &app_patch(&pitr_app, "postgres-db", &md, &rendered, &upstream, ""),
    );
    assert_eq!(
        again["spec"]["users"]["orders"]["password"],
        json!("from-backup")
    );
    assert_eq!(again["spec"]["bootstrap"].get("recoveryTime"), None);
    // Applying it twice changes nothing (so the executor does not patch again).
    let p2 = app_patch(&patched, "postgres-db", &md, &rendered, &snapshot, "");
    assert_eq!(merge_patch_apply(&patched, &p2), patched);
}

#[test]
fn a_leftover_recovery_cluster_is_purged_and_a_tie_counts_as_stale() {
    for created in ["2026-02-01T00:00:00Z", STARTED] {
        let mut w = world();
        w.job.spec.options = Some(json!({"skipSafetyBackup": true}));
        w.cluster = Some(live_cluster(created, true));
        w.run("2026-03-01T10:00:01Z");
        assert!(
            w.log.contains(&"delete Cluster postgres-db".to_owned()),
            "{created}: {:?}",
            w.log
        );
    }
    // Created strictly after startedAt: this restore's own; TargetPurged is recorded, no delete.
    let mut w = world();
    w.cluster = Some(live_cluster("2026-03-01T10:00:01Z", true));
    w.run("2026-03-01T10:00:02Z");
    assert_eq!(
        w.log,
        vec![
            "status Running TargetPurged=True/ClusterPurged",
            "status Succeeded TargetPurged=True/ClusterPurged RecoveryConverged=True/RecoveryConverged Ready=True/RestoreCompleted",
        ]
    );
}

#[test]
fn a_copy_restore_takes_no_safety_backup_and_resumes_after_a_crash() {
    let mut w = world();
    w.job.spec.target_application_ref =
        Some(TypedLocalObjectReference::new("", "Postgres", "copy"));
    // A crash left the release suspended after the purge finished.
    w.cluster = None;
    w.pvcs.clear();
    w.release.as_mut().unwrap()["spec"]["suspend"] = json!(true);
    w.app.as_mut().unwrap()["metadata"]["name"] = json!("copy");
    w.run("2026-03-01T10:00:01Z");
    assert_eq!(
        w.log,
        vec![
            "status Running WALArchiveReady=True/ArchiveCaughtUp",
            "patch copy",
            "status Running WALArchiveReady=True/ArchiveCaughtUp TargetPurged=True/ClusterPurged",
            "suspend postgres-copy false",
        ]
    );
}

#[test]
fn the_wal_gate_waits_then_fails_and_a_reaped_backup_counts_as_ready() {
    let mut w = world();
    w.job.spec.options = Some(json!({"walArchiveTimeoutSeconds": 60}));
    w.source_cnpg_backup = Some(json!({"status": {"phase": "completed"}}));
    let requeue = w.run("2026-03-01T10:00:01Z");
    assert_eq!(requeue, Some(Duration::from_secs(60)));
    assert_eq!(
        w.condition("WALArchiveReady"),
        Some((ConditionStatus::False, "WaitingForArchive".into()))
    );
    assert_eq!(
        w.release.as_ref().unwrap()["spec"]["suspend"],
        json!(false),
        "no mutation while waiting"
    );
    w.run("2026-03-01T10:01:02Z");
    let (reason, message) = w.ready();
    assert_eq!(reason, "RestoreFailed");
    assert_eq!(
        message,
        "WAL archive did not catch up to the backup endWal within 1m0s: cnpg.io/Backup t/bk-x1 has phase=completed but has not recorded status.endWal yet (check that the source cnpg.io/Cluster has the barman-cloud plugin wired - spec.plugins referencing an ObjectStore - and is shipping WALs to object storage; override via spec.options.walArchiveTimeoutSeconds)"
    );
    assert_eq!(
        wal_archive_gate("t", Some("gone"), None),
        (
            true,
            "cnpg.io/Backup t/gone no longer exists; skipping archive gate".into()
        )
    );
    assert_eq!(
        wal_archive_gate("t", None, None),
        (
            false,
            "Backup driverMetadata is missing cnpg.io/backup-name".into()
        )
    );
    assert_eq!(
        wal_archive_gate(
            "t",
            Some("b"),
            Some(&json!({"status": {"phase": "running"}}))
        ),
        (
            false,
            "waiting for cnpg.io/Backup t/b to complete (current phase=\"running\")".into()
        )
    );
}

#[test]
fn a_failed_safety_backup_refuses_the_purge() {
    let mut w = world();
    w.run("2026-03-01T10:00:01Z");
    w.safety_cnpg_backup.as_mut().unwrap()["status"] =
        json!({"phase": "failed", "error": "no plugin"});
    w.run("2026-03-01T10:00:05Z");
    assert_eq!(w.status().phase.as_deref(), Some("Failed"));
    assert_eq!(
        w.ready(),
        ("RestoreFailed".into(), "safety backup cnpg.io/Backup t/rj-safety failed: no plugin; refusing to purge the live cluster t/postgres-db (set spec.options.skipSafetyBackup=true to restore without a safety backup)".into())
    );
    assert_eq!(
        w.condition("SafetyBackupReady"),
        Some((ConditionStatus::False, "SafetyBackupFailed".into()))
    );
    assert!(
        w.cluster.is_some()
            && !w
                .log
                .iter()
                .any(|l| l.starts_with("suspend") || l.starts_with("patch"))
    );
    // A safety backup that never completes fails at its own deadline.
    let mut w = world();
    w.job.spec.options = Some(json!({"safetyBackupTimeoutSeconds": 60}));
    w.run("2026-03-01T10:00:01Z");
    assert_eq!(w.run("2026-03-01T10:00:31Z"), Some(Duration::from_secs(30)));
    w.run("2026-03-01T10:01:02Z");
    assert!(
        w.ready()
            .1
            .contains("did not complete within 1m0s (phase=\"\")"),
        "{}",
        w.ready().1
    );
}

#[test]
fn a_target_before_the_window_is_rejected_before_anything_changes() {
    let mut w = world();
    w.job.spec.options = Some(json!({"recoveryTime": "2026-03-01T07:59:59Z"}));
    w.run("2026-03-01T10:00:01Z");
    let (reason, message) = w.ready();
    assert_eq!(reason, "RecoveryTargetBeforeWindow");
    assert_eq!(
        message,
        "point-in-time recovery target 2026-03-01T07:59:59Z is before the recoverable window of server \"postgres-db\" (2026-03-01T08:00:00Z … 2026-03-01T08:00:00Z): the oldest base backup in the archive stopped at 2026-03-01T08:00:00Z, and PostgreSQL would silently recover to that point instead. Pick a recoveryTime at or after it"
    );
    assert_eq!(
        w.log.len(),
        1,
        "one status write, nothing else: {:?}",
        w.log
    );
    let mut w = world();
    w.job.spec.options = Some(json!({"recoveryTime": "yesterday"}));
    w.run("2026-03-01T10:00:01Z");
    assert!(
        w.ready().1.starts_with(
            "spec.options.recoveryTime \"yesterday\" is not a valid RFC 3339 timestamp"
        )
    );
}

#[test]
fn the_window_from_the_archive_and_the_catalog() {
    let store = json!({"status": {"serverRecoveryWindow": {"s": {
        "firstRecoverabilityPoint": "2026-01-01T00:00:00Z", "lastSuccessfulBackupTime": "2026-01-03T00:00:00Z"}}}});
    let cluster = json!({"metadata": {"name": "postgres-db"}, "spec": {"plugins": [
        {"name": driver::PLUGIN_NAME, "parameters": {"serverName": "s"}}]},
        "status": {"lastArchivedWALTime": "2026-01-04T00:00:00Z"}});
    let w = recoverable_window("s", Some(&store), Some(&cluster), &[]).unwrap();
    assert_eq!(
        (w.from, w.to),
        (
            Some(t("2026-01-01T00:00:00Z")),
            Some(t("2026-01-04T00:00:00Z"))
        )
    );
    // Without the ObjectStore: the oldest and newest catalog entries of that server only.
    let entry = |stopped: &str, server: &str| {
        Backup::test("b")
            .driver_metadata(&[
                ("cnpg.io/server-name", server),
                ("cnpg.io/stopped-at", stopped),
            ])
            .build()
    };
    let catalog = [
        entry("2026-01-02T00:00:00Z", "s"),
        entry("2026-01-01T12:00:00Z", "s"),
        entry("2025-01-01T00:00:00Z", "other"),
    ];
    let w = recoverable_window("s", None, None, &catalog).unwrap();
    assert_eq!(
        (w.from, w.to),
        (
            Some(t("2026-01-01T12:00:00Z")),
            Some(t("2026-01-02T00:00:00Z"))
        )
    );
    assert_eq!(recoverable_window("s", None, None, &[]), None);
    assert!(matches!(
        place(&t("2026-01-01T00:00:00Z"), "x", None, "s"),
        Placement::Unknown(_)
    ));
}

fn recovery_pod(name: &str, created: &str, log: Option<&str>) -> Json {
    json!({"metadata": {"name": name, "creationTimestamp": created},
           "spec": {"containers": [{"name": "full-recovery"}]}, "log": log})
}

/// A restore past its purge, waiting for health, with a PITR target.
fn waiting(options: Json) -> World {
    let mut w = world();
    w.job.spec.options = Some(options);
    let mut c = live_cluster("2026-03-01T10:01:00Z", true);
    c["status"]["phase"] = json!("Setting up primary");
    w.cluster = Some(c);
    w.run("2026-03-01T10:01:01Z");
    assert_eq!(
        w.condition("TargetPurged"),
        Some((ConditionStatus::True, "ClusterPurged".into()))
    );
    w.log.clear();
    w
}

#[test]
fn at_the_deadline_the_recovery_logs_classify_the_failure() {
    let fatal =
        "LOG: redo done\nFATAL:  recovery ended before configured recovery target was reached\n";
    let mut w =
        waiting(json!({"recoveryTime": "2026-03-01T09:30:00Z", "restoreTimeoutSeconds": 300}));
    w.pods = vec![
        recovery_pod("full-recovery-old", "2026-03-01T10:01:00Z", Some(fatal)),
        recovery_pod("full-recovery-new", "2026-03-01T10:03:00Z", Some(fatal)),
        json!({"metadata": {"name": "postgres-db-1", "creationTimestamp": "2026-03-01T10:04:00Z"},
               "spec": {"containers": [{"name": "postgres"}]}}),
    ];
    assert_eq!(w.run("2026-03-01T10:04:59Z"), Some(Duration::from_secs(1)));
    w.run("2026-03-01T10:05:01Z");
    assert_eq!(w.log[0], "read-logs full-recovery-new,full-recovery-old");
    let (reason, message) = w.ready();
    assert_eq!(reason, "RecoveryTargetUnreachable");
    assert_eq!(
        message,
        "point-in-time recovery target 2026-03-01T09:30:00Z is past the latest WAL archived to object storage: over the 5m0s restore window recovery kept replaying all available WAL without reaching it and PostgreSQL gave up (\"recovery ended before configured recovery target was reached\"; most recent recovery pod: full-recovery-new). Pick a recoveryTime inside the recoverable window - see the PITR docs on discovering the earliest/latest restorable time."
    );
    assert_eq!(
        w.condition("RecoveryConverged"),
        Some((ConditionStatus::False, "RecoveryTargetUnreachable".into()))
    );

    // Forbidden logs: RestoreFailed with the note and the Event, no RecoveryConverged.
    let mut w =
        waiting(json!({"recoveryTime": "2026-03-01T09:30:00Z", "restoreTimeoutSeconds": 300}));
    w.pods = vec![recovery_pod(
        "full-recovery-a",
        "2026-03-01T10:01:00Z",
        Some("forbidden"),
    )];
    w.run("2026-03-01T10:05:01Z");
    assert_eq!(
        w.ready(),
        ("RestoreFailed".into(), "RestoreJob exceeded 5m0s deadline before target Cluster reached a healthy state (override via spec.options.restoreTimeoutSeconds); spec.options.recoveryTime 2026-03-01T09:30:00Z may be past the recoverable window, or the source may be large enough to need a longer restoreTimeoutSeconds. NOTE: could not read recovery pod logs to classify this failure - the controller's pods/log RBAC grant appears to be missing, so a RecoveryTargetUnreachable diagnosis was unavailable".into())
    );
    assert_eq!(w.condition("RecoveryConverged"), None);
    assert_eq!(
        w.events,
        vec![("RecoveryClassificationForbidden", "cannot read recovery pod logs (pods/log RBAC grant missing); unable to diagnose whether recoveryTime 2026-03-01T09:30:00Z is past the recoverable window".into())]
    );

    // Without a recoveryTime no logs are read: the plain deadline.
    let mut w = waiting(json!({"restoreTimeoutSeconds": 300}));
    w.pods = vec![recovery_pod(
        "full-recovery-a",
        "2026-03-01T10:01:00Z",
        Some(fatal),
    )];
    w.run("2026-03-01T10:05:01Z");
    assert_eq!(
        w.ready().1,
        "RestoreJob exceeded 5m0s deadline before target Cluster reached a healthy state (override via spec.options.restoreTimeoutSeconds)"
    );
    assert!(!w.log.iter().any(|l| l.starts_with("read-logs")));
}

#[test]
fn recovery_pods_are_the_five_newest_with_the_container() {
    let pods: Vec<Json> = (0..7)
        .map(|i| recovery_pod(&format!("p{i}"), &format!("2026-03-01T10:0{i}:00Z"), None))
        .collect();
    assert_eq!(recovery_pods(&pods), vec!["p6", "p5", "p4", "p3", "p2"]);
}

#[test]
fn gates_before_any_work() {
    type Change = Box<dyn Fn(&mut World)>;
    let cases: Vec<(&str, Change, &str)> = vec![
        (
            "target kind",
            Box::new(|w: &mut World| {
                w.job.spec.target_application_ref =
                    Some(TypedLocalObjectReference::new("", "MariaDB", "x"));
            }),
            "target applicationRef.kind=\"MariaDB\" is not supported by the CNPG driver",
        ),
        (
            "target group",
            Box::new(|w: &mut World| {
                w.job.spec.target_application_ref =
                    Some(TypedLocalObjectReference::new("example.org", "", ""));
            }),
            "target applicationRef.apiGroup=\"example.org\" is not supported by the CNPG driver",
        ),
        (
            "target app",
            Box::new(|w: &mut World| w.app = None),
            "target Postgres application not found: t/db (deploy it before requesting a copy restore)",
        ),
        (
            "metadata",
            Box::new(|w: &mut World| {
                w.backup.spec.driver_metadata = None;
            }),
            "Backup driverMetadata is missing required CNPG fields",
        ),
        (
            "snapshot",
            Box::new(|w: &mut World| {
                w.backup.status = None;
            }),
            "Backup t/bk carries no usable source-spec snapshot in status.underlyingResources: status.underlyingResources is empty (re-take the backup with a controller version that persists source spec)",
        ),
    ];
    for (name, change, message) in cases {
        let mut w = world();
        change(&mut w);
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.ready(),
            ("RestoreFailed".into(), message.into()),
            "{name}"
        );
    }
    let mut w = world();
    w.strategy = None;
    w.run("2026-03-01T10:00:01Z");
    assert_eq!(w.ready().0, "StrategyNotReady");
}

#[test]
fn a_refused_patch_or_purge_resumes_the_release() {
    let mut w = world();
    w.job.spec.options = Some(json!({"skipSafetyBackup": true}));
    let mut seen = Vec::new();
    for _ in 0..10 {
        match w.decide("2026-03-01T10:00:01Z") {
            Step::Act {
                action, on_error, ..
            } => {
                let kind = match &action {
                    Action::MergePatch { .. } => "patch",
                    Action::Delete(_) | Action::DeleteAll(_) => "purge",
                    _ => "other",
                };
                if kind != "other" {
                    seen.push((kind, on_error));
                }
                w.perform(action);
            }
            Step::Status { status, .. } => w.job.status = Some(status),
            _ => break,
        }
    }
    let resume = Some(helm_release("t", "postgres-db"));
    assert_eq!(
        seen,
        vec![
            (
                "patch",
                OnError {
                    prefix: "failed to patch Postgres app spec",
                    resume: resume.clone()
                }
            ),
            (
                "purge",
                OnError {
                    prefix: "failed to purge existing cluster",
                    resume: resume.clone()
                }
            ),
            (
                "purge",
                OnError {
                    prefix: "failed to purge existing cluster",
                    resume
                }
            ),
        ]
    );
}

/// A copy restore (`db` into `copy`) with a target past the window, its source Cluster live.
fn copy_past_the_window(recovery_time: &str, extra: Json) -> World {
    let mut w = world();
    w.job.metadata.uid = Some("0f1e2d3c-aaaa-bbbb-cccc-000000000000".into());
    w.job.spec.target_application_ref =
        Some(TypedLocalObjectReference::new("", "Postgres", "copy"));
    let mut options = json!({"recoveryTime": recovery_time});
    if let (Some(o), Some(e)) = (options.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    w.job.spec.options = Some(options);
    w.app.as_mut().unwrap()["metadata"]["name"] = json!("copy");
    let mut target = live_cluster("2026-02-01T00:00:00Z", false);
    target["metadata"]["name"] = json!("postgres-copy");
    w.cluster = Some(target);
    w.source_cluster = Some(Some(live_cluster("2026-02-01T00:00:00Z", false)));
    w
}

#[test]
fn a_target_past_the_archive_forces_one_wal_switch_before_the_purge() {
    let mut w = copy_past_the_window("2026-03-01T09:59:58Z", json!({}));
    let requeue = w.run("2026-03-01T10:00:01Z");
    assert_eq!(
        w.log,
        vec![
            "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow",
            "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp",
            "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp RecoveryTargetArchived=False/WaitingForWALSwitch",
            "create Backup rj-wal-switch-0f1e2d3c",
        ]
    );
    assert_eq!(
        requeue,
        Some(Duration::from_secs(5)),
        "the window is polled"
    );
    let status = w.status();
    let waiting = find_condition(&status.conditions, "RecoveryTargetArchived").unwrap();
    assert_eq!(
        waiting.message,
        "recoveryTime 2026-03-01T09:59:58Z is past the newest archived point 2026-03-01T08:00:00Z of server \"postgres-db\"; forcing a WAL switch of cnpg.io/Cluster t/postgres-db (cnpg.io/Backup t/rj-wal-switch-0f1e2d3c) and waiting up to 6m0s for the archive to reach it before anything is changed"
    );
    let switch = w.wal_switch_backup.clone().unwrap();
    assert_eq!(
        switch["spec"]["cluster"]["name"], "postgres-db",
        "the source"
    );
    assert_eq!(switch["spec"]["method"], "plugin");
    assert_eq!(
        switch["metadata"]["labels"],
        json!({
            "backups.cozystack.io/owned-by.BackupJobName": "rj",
            "backups.cozystack.io/owned-by.BackupJobNamespace": "t",
            "cnpg.io/cluster": "postgres-db",
            "backups.cozystack.io/wal-switch.RestoreJobName": "rj",
        })
    );
    assert_eq!(
        switch["metadata"]["ownerReferences"][0]["uid"],
        "0f1e2d3c-aaaa-bbbb-cccc-000000000000"
    );
    // A restarted orchestrator (any number of passes) finds it by name: no second switch (the
    // fake executor panics on one), nothing touched while the window is short of the target.
    w.log.clear();
    for now in ["2026-03-01T10:00:03Z", "2026-03-01T10:00:06Z"] {
        w.run(now);
    }
    assert_eq!(w.log, Vec::<String>::new());
    // The switch completes and the plugin records its end: the window covers the target.
    w.wal_switch_backup.as_mut().unwrap()["status"] = json!({"phase": "completed"});
    w.object_store.as_mut().unwrap()["status"]["serverRecoveryWindow"]["postgres-db"]["lastSuccessfulBackupTime"] =
        json!("2026-03-01T10:00:07Z");
    w.run("2026-03-01T10:00:08Z");
    assert_eq!(
        w.log,
        vec![
            "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp RecoveryTargetArchived=True/ArchiveCoversTarget",
            "suspend postgres-copy true",
            "patch copy",
            "delete Cluster postgres-copy",
            "delete-all PersistentVolumeClaim",
            "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp RecoveryTargetArchived=True/ArchiveCoversTarget TargetPurged=True/ClusterPurged",
            "suspend postgres-copy false",
        ]
    );
    let status = w.status();
    let covered = find_condition(&status.conditions, "RecoveryTargetArchived").unwrap();
    assert_eq!(
        covered.message,
        "the archive of server \"postgres-db\" now reaches 2026-03-01T10:00:07Z (window 2026-03-01T08:00:00Z … 2026-03-01T10:00:07Z), at or past recoveryTime 2026-03-01T09:59:58Z after the WAL switch of cnpg.io/Backup t/rj-wal-switch-0f1e2d3c"
    );
    // The source's last archived WAL time counts as well (e.g. PostgreSQL's own timed switch).
    let mut w = copy_past_the_window("2026-03-01T09:59:58Z", json!({}));
    w.run("2026-03-01T10:00:01Z");
    w.source_cluster.as_mut().unwrap().as_mut().unwrap()["status"]["lastArchivedWALTime"] =
        json!("2026-03-01T09:59:59Z");
    w.run("2026-03-01T10:00:02Z");
    assert_eq!(
        w.condition("RecoveryTargetArchived"),
        Some((ConditionStatus::True, "ArchiveCoversTarget".into()))
    );
    assert_eq!(
        w.condition("TargetPurged"),
        Some((ConditionStatus::True, "ClusterPurged".into()))
    );
}

#[test]
fn an_archive_that_never_reaches_the_target_fails_unreachable_and_touches_nothing() {
    let mut w = copy_past_the_window(
        "2026-03-01T09:59:58Z",
        json!({"walSwitchTimeoutSeconds": 20}),
    );
    w.run("2026-03-01T10:00:01Z");
    w.wal_switch_backup.as_mut().unwrap()["status"] =
        json!({"phase": "failed", "error": "upload failed: 503 ServiceUnavailable"});
    assert_eq!(
        w.run("2026-03-01T10:00:19Z"),
        Some(Duration::from_secs(2)),
        "the poll is capped by the deadline"
    );
    w.run("2026-03-01T10:00:22Z");
    assert_eq!(w.status().phase.as_deref(), Some("Failed"));
    let (reason, message) = w.ready();
    assert_eq!(reason, "RecoveryTargetUnreachable");
    assert_eq!(
        message,
        "point-in-time recovery target 2026-03-01T09:59:58Z is not covered by the WAL archive of server \"postgres-db\": the newest archived point is 2026-03-01T08:00:00Z (window 2026-03-01T08:00:00Z … 2026-03-01T08:00:00Z); the archive did not reach the target within the 20s deadline after a WAL switch was forced (cnpg.io/Backup t/rj-wal-switch-0f1e2d3c phase=\"failed\": upload failed: 503 ServiceUnavailable). Nothing was changed: t/copy is untouched (check the ContinuousArchiving condition of cnpg.io/Cluster t/postgres-db and its object storage; override the wait via spec.options.walSwitchTimeoutSeconds)"
    );
    assert_eq!(
        w.condition("RecoveryTargetArchived"),
        Some((ConditionStatus::False, "RecoveryTargetUnreachable".into()))
    );
    assert!(
        !w.log
            .iter()
            .any(|l| l.starts_with("suspend") || l.starts_with("patch") || l.starts_with("delete")),
        "{:?}",
        w.log
    );
    assert!(w.cluster.is_some() && w.pvcs.len() == 1);

    // No source Cluster, or one archiving elsewhere: nothing can archive the target; at once.
    let mut w = copy_past_the_window("2026-03-01T09:59:58Z", json!({}));
    w.source_cluster = Some(None);
    w.run("2026-03-01T10:00:01Z");
    assert_eq!(w.ready().0, "RecoveryTargetUnreachable");
    assert!(
        w.ready()
            .1
            .contains("; the source cnpg.io/Cluster t/postgres-db does not exist, so nothing can archive WAL past that point. Nothing was changed"),
        "{}",
        w.ready().1
    );
    // In place, purged before by a controller that did not record it: nothing left to protect,
    // the restore goes on as without the catch-up.
    let mut w = world();
    w.job.spec.options = Some(json!({"recoveryTime": "2026-03-01T09:59:58Z"}));
    w.cluster = None;
    w.pvcs.clear();
    w.run("2026-03-01T10:00:01Z");
    assert_eq!(
        w.condition("TargetPurged"),
        Some((ConditionStatus::True, "ClusterPurged".into()))
    );
    assert_eq!(w.condition("RecoveryTargetArchived"), None);
    let mut w = copy_past_the_window("2026-03-01T09:59:58Z", json!({}));
    w.source_cluster.as_mut().unwrap().as_mut().unwrap()["spec"]["plugins"][0]["parameters"]["serverName"] =
        json!("postgres-db-1a2b3c4d");
    w.run("2026-03-01T10:00:01Z");
    assert!(
        w.ready().1.contains("the source cnpg.io/Cluster t/postgres-db archives under server \"postgres-db-1a2b3c4d\", so the archive of \"postgres-db\" cannot grow"),
        "{}",
        w.ready().1
    );
    assert!(w.wal_switch_backup.is_none() && w.cluster.is_some());
}

#[test]
fn a_target_in_the_future_waits_for_it_before_switching() {
    let mut w = copy_past_the_window("2026-03-01T10:00:30Z", json!({}));
    assert_eq!(
        w.run("2026-03-01T10:00:01Z"),
        Some(Duration::from_secs(30)),
        "wakes just after the target"
    );
    assert!(w.wal_switch_backup.is_none());
    w.run("2026-03-01T10:00:31Z");
    assert!(w.wal_switch_backup.is_some(), "{:?}", w.log);
    // A target the deadline cannot reach fails at once, nothing touched.
    let mut w = copy_past_the_window("2026-03-01T11:00:00Z", json!({}));
    w.run("2026-03-01T10:00:01Z");
    assert_eq!(w.status().phase.as_deref(), Some("Failed"));
    assert!(
        w.ready().1.contains("; it lies in the future, after the 6m0s deadline for the archive to reach it ends (2026-03-01T10:06:01Z). Nothing was changed: t/copy is untouched"),
        "{}",
        w.ready().1
    );
    assert!(w.wal_switch_backup.is_none() && w.cluster.is_some());
    // A non-positive deadline is ignored with a Warning, as for the other timeouts.
    let mut w = copy_past_the_window(
        "2026-03-01T09:59:58Z",
        json!({"walSwitchTimeoutSeconds": 0}),
    );
    w.job.status = None;
    w.run("2026-03-01T10:00:00Z");
    assert!(
        w.events.iter().any(|(r, n)| *r == "RestoreOptionIgnored"
            && n == "spec.options.walSwitchTimeoutSeconds is 0, not a positive number of seconds; the default 6m0s applies"),
        "{:?}",
        w.events
    );
}
