//! The MariaDB restore as one pure decision: `decide(&Observed) -> Step`. mariadb-operator does
//! the work: the driver creates one `k8s.mariadb.com/Restore` pointing the target MariaDB at the
//! operator Backup the catalog entry names, and reads its `Complete` condition.
//!
//! ```text
//!  source ref MariaDB? ─► target (name/kind/group overridden by the job) kind MariaDB, our group
//!  ─► startedAt (+ phase Running, option Warnings; nothing else) ─► options (permissive)
//!  ─► driverMetadata k8s.mariadb.com/backup-name ─► operator Backup still there
//!        (gone, and the Backup was re-created from its catalog record with an S3 snapshot:
//!         restore from the bucket instead, see below)
//!  ─► target MariaDB mariadb-<target> exists (else TargetMariaDBNotReady until the deadline)
//!  ─► Restore <job>-xxxxx {mariaDbRef, backupRef {kind: Backup}} labelled owned-by (one per job)
//!        or {mariaDbRef, s3: <the snapshot's storage.s3>, targetRecoveryTime: <takenAt>}
//!  Complete=True ─► Succeeded │ JobFailed ─► Failed │ otherwise poll until the deadline
//! ```
//!
//! A Backup re-created from its catalog record after a disaster (label
//! `backups.cozystack.io/restored-from-catalog`) has lost its operator Backup with the old cluster,
//! but its `underlyingResources` snapshot still names the S3 storage the dump went to. The operator
//! restores from a bucket location directly, taking the newest dump at or before
//! `targetRecoveryTime`; the Backup's `takenAt` (the dump's completion) selects its own dump. A
//! Backup without that label keeps upstream's failure when its operator Backup is gone.
//!
//! Invariants: no purge and no HelmRelease suspension (the operator restores into the running
//! server); at most one Restore per job, found again by its owned-by labels; every wait is bounded
//! by `restoreTimeoutSeconds` from `startedAt`.

use std::time::Duration;

use api::backups::{Backup, RestoreJob};
use api::contract::reasons;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value as Json, json};

use super::Step;
use super::skeleton::{self, Clock};
use super::skeleton::{fail, owned_by, status_of, target_app_name};
use crate::mariadb::{self as driver, keys};

/// How often a wait on the operator is re-examined without an event.
pub const POLL: Duration = Duration::from_secs(5);

/// What the MariaDB restore looks at.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The RestoreJob.
    pub job: &'a RestoreJob,
    /// The Backup it restores.
    pub backup: &'a Backup,
    /// Now.
    pub now: Time,
    /// The operator Backup named by `k8s.mariadb.com/backup-name` in the Backup's namespace
    /// (`None`: not found).
    pub source_backup: Option<&'a Json>,
    /// The target operator MariaDB `mariadb-<target>` (`None`: not found).
    pub target_mariadb: Option<&'a Json>,
    /// The `k8s.mariadb.com/Restore`s labelled as owned by this job.
    pub restores: &'a [Json],
}

/// The restore's target: `(application, kind, group)`, the Backup's overridden by the job's
/// non-empty name and kind and its non-nil group.
pub fn target(job: &RestoreJob, backup: &Backup) -> (String, String, String) {
    let source = &backup.spec.application_ref;
    let t = job.spec.target_application_ref.as_ref();
    let kind = t
        .map(|t| t.kind.clone())
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| source.kind.clone());
    let group = t
        .and_then(|t| t.api_group.clone())
        .or_else(|| source.api_group.clone())
        .unwrap_or_default();
    (target_app_name(job, backup), kind, group)
}

/// What an operator Restore restores from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// The operator Backup (upstream's way).
    Backup(&'a str),
    /// A bucket location (`storage.s3` of the Backup's snapshot) and the dump's time.
    Bucket {
        /// The operator's `s3` storage block.
        s3: &'a Json,
        /// `targetRecoveryTime`: the newest dump at or before it is restored.
        at: &'a Time,
    },
}

/// The S3 storage a Backup re-created from its catalog record can still be restored from once
/// its operator Backup is gone with the lost cluster (see the module's notes).
pub fn recovered_storage(backup: &Backup) -> Option<&Json> {
    let restored = backup
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(api::contract::labels::RESTORED_FROM_CATALOG))
        .is_some_and(|v| v == "true");
    let snapshot = backup.status.as_ref()?.underlying_resources.as_ref()?;
    (restored && snapshot["kind"] == driver::SNAPSHOT_KIND)
        .then(|| &snapshot["storage"]["s3"])
        .filter(|s3| s3.is_object())
}

/// The operator Restore a job creates.
pub fn restore_body(job: &RestoreJob, mariadb: &str, source: Source<'_>) -> Json {
    let name = job.metadata.name.clone().unwrap_or_default();
    let mut labels = Map::new();
    for (k, v) in owned_by(job) {
        labels.insert(k, json!(v));
    }
    json!({
        "apiVersion": driver::API_VERSION,
        "kind": "Restore",
        "metadata": {
            "generateName": format!("{name}-"),
            "namespace": job.metadata.namespace,
            "labels": labels,
        },
        "spec": match source {
            Source::Backup(name) => json!({
                "mariaDbRef": {"name": mariadb},
                "backupRef": {"kind": "Backup", "name": name},
            }),
            Source::Bucket { s3, at } => json!({
                "mariaDbRef": {"name": mariadb},
                "s3": s3,
                "targetRecoveryTime": at,
            }),
        },
    })
}

/// How a Restore reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// `Complete=True` (not `JobFailed`).
    Completed,
    /// `JobFailed`: the message.
    Failed(String),
    /// Still running: the detail for a deadline message.
    Running(String),
}

/// Reads a Restore's `Complete` condition. As on the backup path, `JobFailed` fails whatever the
/// status (the operator marks a failed Job `Complete=True/JobFailed`).
pub fn outcome(restore: &Json) -> Outcome {
    let cond = restore["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == driver::CONDITION_COMPLETE);
    let Some(c) = cond else {
        return Outcome::Running("no Complete condition observed".into());
    };
    let s = |k: &str| c[k].as_str().unwrap_or_default();
    if s("reason") == driver::REASON_JOB_FAILED && matches!(s("status"), "True" | "False") {
        let message = if s("message").is_empty() {
            format!(
                "k8s.mariadb.com/Restore {}/{} terminal failure",
                restore["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or_default(),
                restore["metadata"]["name"].as_str().unwrap_or_default()
            )
        } else {
            s("message").to_owned()
        };
        return Outcome::Failed(message);
    }
    if s("status") == "True" {
        return Outcome::Completed;
    }
    Outcome::Running(format!("Complete={}/{}", s("status"), s("reason")))
}

/// Decides the next step of a MariaDB restore.
pub fn decide(o: &Observed<'_>) -> Step {
    let (job, backup, now) = (o.job, o.backup, &o.now);
    let status = status_of(job);

    // 1. Source and target, before any API call.
    if let Err(e) = driver::validate_app_ref(&backup.spec.application_ref) {
        return fail(&status, &e, Vec::new(), now);
    }
    let (app, kind, group) = target(job, backup);
    if let Err(message) = super::target_kind_gate(&kind, &group, driver::APP_KIND, "MariaDB") {
        return fail(&status, &message, Vec::new(), now);
    }

    // 2. startedAt (+ phase Running); option Warnings are recorded once, here.
    let parsed = super::options::mariadb(job.spec.options.as_ref());
    let started = proceed!(skeleton::start(&status, now, || parsed.events));
    let clock = Clock {
        started,
        limit: parsed.options,
        now,
        poll: POLL,
    };
    let namespace = backup.metadata.namespace.clone().unwrap_or_default();

    // 3. The operator Backup.
    let source = backup
        .spec
        .driver_metadata
        .as_ref()
        .and_then(|m| m.get(keys::BACKUP_NAME))
        .filter(|n| !n.is_empty());
    let Some(source) = source else {
        return fail(
            &status,
            "Backup driverMetadata is missing k8s.mariadb.com/backup-name (re-take the backup with a controller version that persists the operator Backup name)",
            Vec::new(),
            now,
        );
    };
    let from = match (o.source_backup, recovered_storage(backup)) {
        (Some(_), _) => Source::Backup(source),
        (None, Some(s3)) => Source::Bucket {
            s3,
            at: &backup.spec.taken_at,
        },
        (None, None) => {
            return fail(
                &status,
                &format!(
                    "k8s.mariadb.com/Backup {namespace}/{source} not found; the operator-side artifact has been reaped"
                ),
                Vec::new(),
                now,
            );
        }
    };

    // 4. The target MariaDB.
    let mariadb = driver::operator_name(&app);
    proceed!(skeleton::await_target(
        &status,
        &clock,
        o.target_mariadb.is_some(),
        &format!("k8s.mariadb.com/MariaDB {namespace}/{mariadb}"),
        reasons::TARGET_MARIADB_NOT_READY,
        "deploy the target MariaDB application before requesting the restore",
    ));

    // 5. One Restore per job.
    let restore = proceed!(skeleton::create_once(
        o.restores,
        "failed to ensure k8s.mariadb.com/Restore",
        || restore_body(job, &mariadb, from),
    ));

    // 6. Its outcome.
    match outcome(restore) {
        Outcome::Completed => skeleton::succeeded(
            &status,
            Some(&format!(
                "k8s.mariadb.com/Restore {} completed",
                skeleton::id(restore, &namespace)
            )),
            now,
        ),
        Outcome::Failed(message) => fail(&status, &message, Vec::new(), now),
        Outcome::Running(detail) => {
            skeleton::overdue(&status, &clock, "k8s.mariadb.com/Restore", &detail).unwrap_or(
                Step::Wait {
                    events: Vec::new(),
                    requeue: clock.requeue(),
                },
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restore::Action;
    use api::backups::RestoreJobStatus;
    use pretty_assertions::assert_eq;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    struct World {
        job: RestoreJob,
        backup: Backup,
        source_backup: Option<Json>,
        mariadb: Option<Json>,
        restores: Vec<Json>,
        events: Vec<(&'static str, String)>,
        created: usize,
    }

    fn world() -> World {
        let mut job = RestoreJob::test("rj", "bk").namespace("t").build();
        job.status = Some(RestoreJobStatus {
            phase: Some("Running".into()),
            started_at: Some(t("2026-03-01T10:00:00Z")),
            ..Default::default()
        });
        World {
            job,
            backup: Backup::test("bk")
                .namespace("t")
                .for_app("MariaDB", "db")
                .strategy("strategy.backups.cozystack.io", "MariaDB", "m")
                .driver_metadata(&[(keys::BACKUP_NAME, "bk-x1")])
                .build(),
            source_backup: Some(json!({"metadata": {"name": "bk-x1"}})),
            mariadb: Some(json!({"metadata": {"name": "mariadb-db"}})),
            restores: Vec::new(),
            events: Vec::new(),
            created: 0,
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
                    target_mariadb: self.mariadb.as_ref(),
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
                        self.created += 1;
                        body["metadata"]["name"] = json!(format!("rj-{}", self.created));
                        self.restores.push(body);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            panic!("no progress");
        }

        fn complete(&mut self, status: &str, reason: &str, message: &str) {
            self.restores[0]["status"] = json!({"conditions": [
                {"type": "Complete", "status": status, "reason": reason, "message": message}]});
        }

        fn ready(&self) -> (String, String, String) {
            let s = self.job.status.clone().unwrap();
            let r = crate::status::ready(&s.conditions).cloned().unwrap();
            (s.phase.unwrap_or_default(), r.reason, r.message)
        }
    }

    #[test]
    fn creates_one_restore_and_succeeds_when_complete() {
        let mut w = world();
        assert_eq!(w.run("2026-03-01T10:00:01Z"), Some(POLL));
        assert_eq!(w.created, 1);
        assert_eq!(
            w.restores[0]["spec"],
            json!({"mariaDbRef": {"name": "mariadb-db"}, "backupRef": {"kind": "Backup", "name": "bk-x1"}})
        );
        assert_eq!(w.restores[0]["metadata"]["generateName"], "rj-");
        assert_eq!(
            w.restores[0]["metadata"]["labels"][api::contract::labels::OWNED_BY_JOB_NAME],
            json!("rj")
        );
        w.run("2026-03-01T10:00:06Z");
        assert_eq!(w.created, 1, "found again by its labels");
        w.restores[0]["metadata"]["namespace"] = json!("t");
        w.complete("True", "JobComplete", "Success");
        w.run("2026-03-01T10:00:11Z");
        assert_eq!(
            w.ready(),
            (
                "Succeeded".into(),
                "RestoreCompleted".into(),
                "k8s.mariadb.com/Restore t/rj-1 completed".into()
            )
        );
    }

    #[test]
    fn operator_failure_and_deadline() {
        let mut w = world();
        w.run("2026-03-01T10:00:01Z");
        w.complete("True", "JobFailed", "");
        w.restores[0]["metadata"]["namespace"] = json!("t");
        w.run("2026-03-01T10:00:02Z");
        assert_eq!(
            w.ready(),
            (
                "Failed".into(),
                "RestoreFailed".into(),
                "k8s.mariadb.com/Restore t/rj-1 terminal failure".into()
            )
        );
        let mut w = world();
        w.job.spec.options = Some(json!({"restoreTimeoutSeconds": 60}));
        w.run("2026-03-01T10:00:01Z");
        w.complete("False", "JobRunning", "");
        assert_eq!(w.run("2026-03-01T10:00:58Z"), Some(Duration::from_secs(2)));
        w.run("2026-03-01T10:01:01Z");
        assert_eq!(
            w.ready().2,
            "k8s.mariadb.com/Restore did not complete within 1m0s (Complete=False/JobRunning; override via spec.options.restoreTimeoutSeconds)"
        );
    }

    #[test]
    fn a_missing_target_waits_until_the_deadline() {
        let mut w = world();
        w.mariadb = None;
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.ready(),
            (
                "Running".into(),
                "TargetMariaDBNotReady".into(),
                "waiting for target k8s.mariadb.com/MariaDB t/mariadb-db to exist".into()
            )
        );
        w.run("2026-03-01T10:30:01Z");
        assert_eq!(
            w.ready().2,
            "target k8s.mariadb.com/MariaDB t/mariadb-db not found within 30m0s (deploy the target MariaDB application before requesting the restore; override via spec.options.restoreTimeoutSeconds)"
        );
        assert_eq!(w.created, 0);
        // To a copy: the target's own MariaDB.
        let mut w = world();
        w.job.spec.target_application_ref =
            Some(api::TypedLocalObjectReference::new("", "", "copy"));
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.restores[0]["spec"]["mariaDbRef"]["name"], "mariadb-copy");
    }

    #[test]
    fn a_backup_restored_from_the_catalog_restores_from_its_bucket_location() {
        // The operator Backup went with the lost cluster; the re-created catalog Backup's
        // snapshot names the S3 storage, and its takenAt selects the dump.
        let s3 = json!({"bucket": "b1", "prefix": "t/db", "endpoint": "s3.example:443"});
        let recovered = |w: &mut World, label: bool| {
            w.source_backup = None;
            w.backup.spec.taken_at = t("2026-02-28T03:00:07Z");
            w.backup.status.get_or_insert_default().underlying_resources = Some(
                json!({"kind": driver::SNAPSHOT_KIND, "apiVersion": "backups.cozystack.io/v1alpha1",
                       "storage": {"s3": s3.clone()}}),
            );
            if label {
                w.backup.metadata.labels.get_or_insert_default().insert(
                    api::contract::labels::RESTORED_FROM_CATALOG.into(),
                    "true".into(),
                );
            }
        };
        let mut w = world();
        recovered(&mut w, true);
        assert_eq!(w.run("2026-03-01T10:00:01Z"), Some(POLL));
        assert_eq!(
            w.restores[0]["spec"],
            json!({"mariaDbRef": {"name": "mariadb-db"}, "s3": s3,
                   "targetRecoveryTime": "2026-02-28T03:00:07Z"})
        );
        w.complete("True", "JobComplete", "Success");
        w.run("2026-03-01T10:00:02Z");
        assert_eq!(w.ready().0, "Succeeded");
        // Without the label the operator Backup's absence is upstream's failure.
        let mut w = world();
        recovered(&mut w, false);
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.ready(),
            (
                "Failed".into(),
                "RestoreFailed".into(),
                "k8s.mariadb.com/Backup t/bk-x1 not found; the operator-side artifact has been reaped"
                    .into()
            )
        );
    }

    #[test]
    fn refusals() {
        type Change = Box<dyn Fn(&mut World)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|w: &mut World| {
                    w.job.spec.target_application_ref =
                        Some(api::TypedLocalObjectReference::new("", "Postgres", ""))
                }),
                "target applicationRef.kind=\"Postgres\" is not supported by the MariaDB driver",
            ),
            (
                Box::new(|w: &mut World| {
                    w.job.spec.target_application_ref =
                        Some(api::TypedLocalObjectReference::new("x.io", "", ""))
                }),
                "target applicationRef.apiGroup=\"x.io\" is not supported by the MariaDB driver",
            ),
            (
                Box::new(|w: &mut World| w.backup.spec.driver_metadata = None),
                "Backup driverMetadata is missing k8s.mariadb.com/backup-name (re-take the backup with a controller version that persists the operator Backup name)",
            ),
            (
                Box::new(|w: &mut World| w.source_backup = None),
                "k8s.mariadb.com/Backup t/bk-x1 not found; the operator-side artifact has been reaped",
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
            assert_eq!(w.created, 0);
        }
    }

    #[test]
    fn malformed_options_warn_once_and_use_the_default() {
        let mut w = world();
        w.job.status = None;
        w.job.spec.options = Some(json!({"restoreTimeoutSeconds": 1.5}));
        w.run("2026-03-01T10:00:00Z");
        w.run("2026-03-01T10:00:01Z");
        w.run("2026-03-01T10:20:00Z");
        assert_eq!(w.events.len(), 1);
        assert_eq!(w.events[0].0, "MalformedOptions");
        assert_eq!(
            w.job.status.as_ref().unwrap().phase.as_deref(),
            Some("Running")
        );
        w.run("2026-03-01T10:30:01Z");
        assert_eq!(w.ready().0, "Failed", "the 30-minute default applies");
    }
}
