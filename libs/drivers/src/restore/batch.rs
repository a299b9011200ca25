//! The restores that run a `batch/v1` Job (the generic Job strategy and Altinity
//! clickhouse-backup) as one pure decision: `decide(flavor, &Observed) -> Step`.
//!
//! ```text
//!  Altinity: source and target must be ClickHouse in apps.cozystack.io (Job: any kind)
//!  ─► startedAt (+ phase Running; nothing else)
//!  ─► strategy (Job: missing ⇒ Failed; Altinity: StrategyNotReady) ─► target application exists
//!  ─► Job <job>-restore in the RestoreJob's namespace, rendered from the strategy's pod template
//!     with {Application: target, Release, Mode: restore, Parameters: the Backup's, Backup}
//!  Complete=True ─► Succeeded │ Failed=True ─► Failed │ otherwise poll until the deadline
//! ```
//!
//! Invariants: the batch Job has a deterministic name, so a repeated create finds it; it is
//! controlled by the RestoreJob and goes with it; the wait is bounded by [`DEADLINE`].

use std::time::Duration;

use api::backups::{Backup, RestoreJob};
use api::contract::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::Value as Json;

use super::skeleton::{self, fail, status_of, strategy_not_ready};
use super::{Action, OnError, Step, elapsed};
use crate::job::{self as driver, Flavor, Owner, SourceBackup, State};
use crate::status::go_duration;

/// How often the batch Job is re-examined without an event.
pub const POLL: Duration = Duration::from_secs(5);
/// Ours: how long a restore Job may run before the restore fails (a pod that never schedules
/// would otherwise wait forever; the strategy's template can set a shorter activeDeadlineSeconds).
pub const DEADLINE: Duration = Duration::from_secs(24 * 60 * 60);

/// What a batch restore looks at.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The RestoreJob.
    pub job: &'a RestoreJob,
    /// The Backup it restores.
    pub backup: &'a Backup,
    /// Now.
    pub now: Time,
    /// The strategy CR the Backup names (`None`: not found).
    pub strategy: Option<&'a Json>,
    /// The target application in the RestoreJob's namespace (`None`: not found, or its kind is
    /// not served).
    pub target_app: Option<&'a Json>,
    /// The batch Job `<job>-restore` (`None`: not found).
    pub batch_job: Option<&'a Json>,
}

/// The target reference: the Backup's application overridden by the job's non-empty name and
/// kind and its non-nil group.
pub fn target_ref(job: &RestoreJob, backup: &Backup) -> api::TypedLocalObjectReference {
    let source = &backup.spec.application_ref;
    let t = job.spec.target_application_ref.as_ref();
    let pick = |v: Option<&String>, d: &String| v.filter(|v| !v.is_empty()).unwrap_or(d).clone();
    let group = t
        .and_then(|t| t.api_group.clone())
        .or_else(|| source.api_group.clone())
        .unwrap_or_default();
    api::TypedLocalObjectReference::new(
        &group,
        &pick(t.map(|t| &t.kind), &source.kind),
        &pick(t.map(|t| &t.name), &source.name),
    )
}

fn altinity(flavor: &Flavor) -> bool {
    flavor.mode_label == labels::ALTINITY_STRATEGY_MODE
}

/// The restore's batch Job.
pub fn restore_job(
    flavor: &Flavor,
    job: &RestoreJob,
    backup: &Backup,
    strategy: &Json,
    app: &Json,
    target: &api::TypedLocalObjectReference,
) -> Json {
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let parameters = driver::parameters_of(
        flavor,
        &backup.spec.driver_metadata.clone().unwrap_or_default(),
    );
    let source = SourceBackup {
        name: backup.metadata.name.clone().unwrap_or_default(),
        namespace: backup.metadata.namespace.clone().unwrap_or_default(),
        application_ref: backup.spec.application_ref.clone(),
    };
    let context = driver::context(
        app,
        &target.name,
        &ns,
        driver::MODE_RESTORE,
        &parameters,
        Some(&source),
    );
    let rendered = driver::render_pod_template(&strategy["spec"]["template"], &context);
    let uid = job.metadata.uid.clone().unwrap_or_default();
    driver::batch_job(
        &ns,
        &driver::restore_job_name(&name),
        flavor,
        driver::MODE_RESTORE,
        &[
            (labels::OWNED_BY_JOB_NAME, &name),
            (labels::OWNED_BY_JOB_NAMESPACE, &ns),
        ],
        &Owner {
            api_version: "backups.cozystack.io/v1alpha1",
            kind: "RestoreJob",
            name: &name,
            uid: &uid,
        },
        &rendered,
    )
}

/// Decides the next step of a Job or Altinity restore.
pub fn decide(flavor: &Flavor, o: &Observed<'_>) -> Step {
    let (job, backup, now) = (o.job, o.backup, &o.now);
    let mut status = status_of(job);
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let target = target_ref(job, backup);

    // 1. Altinity restores ClickHouse into ClickHouse.
    if altinity(flavor) {
        for r in [&backup.spec.application_ref, &target] {
            if let Err(e) = crate::altinity::validate_app_ref(r) {
                return fail(&status, &e, Vec::new(), now);
            }
        }
    }

    // 2. startedAt (+ phase Running).
    let started = proceed!(skeleton::start(&status, now, Vec::new));

    // 3. Strategy and target application.
    let strategy_name = &backup.spec.strategy_ref.name;
    let Some(strategy) = o.strategy else {
        if altinity(flavor) {
            return strategy_not_ready(&status, strategy_name, now);
        }
        return fail(
            &status,
            &format!("Job strategy not found: {strategy_name}"),
            Vec::new(),
            now,
        );
    };
    let Some(app) = o.target_app else {
        let message = if altinity(flavor) {
            format!(
                "target ClickHouse application not found: {ns}/{} (deploy it before requesting a copy restore)",
                target.name
            )
        } else {
            format!(
                "target application not found or kind not registered: {ns}/{} (kind={:?}; deploy it before requesting a restore)",
                target.name, target.kind
            )
        };
        return fail(&status, &message, Vec::new(), now);
    };

    // 4. The batch Job.
    let Some(batch) = o.batch_job else {
        return Step::Act {
            action: Action::Create(restore_job(flavor, job, backup, strategy, app, &target)),
            events: Vec::new(),
            on_error: OnError {
                prefix: "failed to ensure batch/v1.Job",
                resume: None,
            },
        };
    };
    match driver::state(batch) {
        State::Complete => {
            crate::status::restore_succeeded(&mut status, Some(flavor.restore_completed), now);
            Step::Status {
                status,
                events: Vec::new(),
                requeue: None,
            }
        }
        State::Failed(message) => {
            let message = if message.is_empty() {
                flavor.restore_failed.to_owned()
            } else {
                message
            };
            fail(&status, &message, Vec::new(), now)
        }
        State::Running if elapsed(&started, now) > DEADLINE => fail(
            &status,
            &format!(
                "batch/v1 Job {ns}/{} did not finish within {}",
                driver::restore_job_name(job.metadata.name.as_deref().unwrap_or_default()),
                go_duration(DEADLINE)
            ),
            Vec::new(),
            now,
        ),
        State::Running => Step::Wait {
            events: Vec::new(),
            requeue: Some(
                DEADLINE
                    .saturating_sub(elapsed(&started, now))
                    .clamp(Duration::from_secs(1), POLL),
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::backups::RestoreJobStatus;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    struct World {
        flavor: Flavor,
        job: RestoreJob,
        backup: Backup,
        strategy: Option<Json>,
        app: Option<Json>,
        batch: Option<Json>,
    }

    fn world(flavor: Flavor) -> World {
        let mut job = RestoreJob::test("rj", "bk").namespace("t").build();
        job.metadata.uid = Some("uid-rj".into());
        job.status = Some(RestoreJobStatus {
            phase: Some("Running".into()),
            started_at: Some(t("2026-03-01T10:00:00Z")),
            ..Default::default()
        });
        let prefix = flavor.parameter_prefix;
        let backup = Backup::test("bk")
            .namespace("t")
            .for_app("ClickHouse", "ch")
            .strategy("strategy.backups.cozystack.io", "Altinity", "s")
            .driver_metadata(&[(&format!("{prefix}bucket"), "b1")])
            .build();
        World {
            flavor,
            job,
            backup,
            strategy: Some(
                json!({"spec": {"template": {"spec": {"containers": [{"name": "r",
                "args": ["{{ .Mode }}", "{{ .Release.Name }}", "{{ .Parameters.bucket }}", "{{ .Backup.Name }}"]}]}}}}),
            ),
            app: Some(json!({"metadata": {"name": "ch"}})),
            batch: None,
        }
    }

    impl World {
        fn run(&mut self, now: &str) -> Option<Duration> {
            for _ in 0..10 {
                let step = decide(
                    &self.flavor,
                    &Observed {
                        job: &self.job,
                        backup: &self.backup,
                        now: t(now),
                        strategy: self.strategy.as_ref(),
                        target_app: self.app.as_ref(),
                        batch_job: self.batch.as_ref(),
                    },
                );
                match step {
                    Step::Status {
                        status, requeue, ..
                    } => {
                        self.job.status = Some(status);
                        if self.job.is_terminal() {
                            return requeue;
                        }
                    }
                    Step::Wait { requeue, .. } => return requeue,
                    Step::Act {
                        action: Action::Create(body),
                        ..
                    } => self.batch = Some(body),
                    other => panic!("unexpected {other:?}"),
                }
            }
            panic!("no progress");
        }

        fn outcome(&self) -> (String, String) {
            let s = self.job.status.clone().unwrap();
            (s.phase.unwrap_or_default(), s.message.unwrap_or_default())
        }

        fn finish(&mut self, type_: &str, message: &str) {
            self.batch.as_mut().unwrap()["status"] = json!({"conditions": [
                {"type": type_, "status": "True", "message": message}]});
        }
    }

    #[test]
    fn runs_the_restore_job_and_follows_it() {
        for flavor in [driver::JOB, driver::ALTINITY] {
            let mut w = world(flavor);
            assert_eq!(w.run("2026-03-01T10:00:01Z"), Some(POLL));
            let b = w.batch.clone().unwrap();
            assert_eq!(b["metadata"]["name"], "rj-restore");
            assert_eq!(b["metadata"]["labels"][flavor.mode_label], "restore");
            assert_eq!(b["metadata"]["ownerReferences"][0]["kind"], "RestoreJob");
            assert_eq!(b["metadata"]["ownerReferences"][0]["uid"], "uid-rj");
            assert_eq!(
                b["spec"]["template"]["spec"]["containers"][0]["args"],
                json!(["restore", "ch", "b1", "bk"])
            );
            w.finish("Complete", "");
            w.run("2026-03-01T10:05:00Z");
            let s = w.job.status.clone().unwrap();
            let ready = crate::status::ready(&s.conditions).unwrap();
            assert_eq!(
                (
                    s.phase.as_deref(),
                    ready.reason.as_str(),
                    ready.message.as_str()
                ),
                (
                    Some("Succeeded"),
                    "RestoreCompleted",
                    flavor.restore_completed
                )
            );
        }
    }

    #[test]
    fn failure_and_deadline() {
        let mut w = world(driver::JOB);
        w.run("2026-03-01T10:00:01Z");
        w.finish("Failed", "");
        w.run("2026-03-01T10:00:02Z");
        assert_eq!(
            w.outcome(),
            ("Failed".into(), "restore Job reported Failed".into())
        );
        let mut w = world(driver::ALTINITY);
        w.run("2026-03-01T10:00:01Z");
        w.finish("Failed", "BackoffLimitExceeded");
        w.run("2026-03-01T10:00:02Z");
        assert_eq!(w.outcome().1, "BackoffLimitExceeded");
        let mut w = world(driver::JOB);
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.run("2026-03-02T09:59:58Z"), Some(Duration::from_secs(2)));
        w.run("2026-03-02T10:00:01Z");
        assert_eq!(
            w.outcome(),
            (
                "Failed".into(),
                "batch/v1 Job t/rj-restore did not finish within 24h0m0s".into()
            )
        );
    }

    #[test]
    fn refusals_in_each_flavor_s_words() {
        let mut w = world(driver::JOB);
        w.strategy = None;
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.outcome().1, "Job strategy not found: s");
        let mut w = world(driver::ALTINITY);
        w.strategy = None;
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.outcome().0, "Running", "Altinity waits for its strategy");
        let mut w = world(driver::JOB);
        w.app = None;
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.outcome().1,
            "target application not found or kind not registered: t/ch (kind=\"ClickHouse\"; deploy it before requesting a restore)"
        );
        let mut w = world(driver::ALTINITY);
        w.app = None;
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.outcome().1,
            "target ClickHouse application not found: t/ch (deploy it before requesting a copy restore)"
        );
        let mut w = world(driver::ALTINITY);
        w.job.spec.target_application_ref =
            Some(api::TypedLocalObjectReference::new("", "Postgres", ""));
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.outcome().1,
            crate::altinity::validate_app_ref(&api::TypedLocalObjectReference::new(
                "", "Postgres", "ch"
            ))
            .unwrap_err()
        );
        assert!(w.batch.is_none());
        // The generic Job strategy accepts any kind.
        let mut w = world(driver::JOB);
        w.job.spec.target_application_ref =
            Some(api::TypedLocalObjectReference::new("", "Postgres", "pg"));
        w.run("2026-03-01T10:00:01Z");
        assert!(w.batch.is_some());
    }
}
