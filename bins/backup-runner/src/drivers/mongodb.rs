//! The MongoDB driver's backup path (Percona operator): what to do next, decided from the caches.
//!
//! ```text
//!  app ref valid? ─► startedAt (first pass only) ─► MongoDB strategy (StrategyNotReady, 30 min)
//!  ─► MongoDB app (Ready=False MongoDBApplicationNotReady) ─► render
//!  ─► PerconaServerMongoDB mongodb-<app> (Ready=False PerconaServerMongoDBNotReady)
//!  ─► backups enabled, storage declared (Ready=False PerconaServerMongoDBBackupsDisabled)
//!  ─► create PerconaServerMongoDBBackup <job>-xxxxx ─► phase Running
//!  ─► ready: catalog Backup + Succeeded │ error/rejected: Failed with the operator's error
//!     other: wait
//! ```
//!
//! Every wait ends at min(30 min, backup deadline) from `startedAt` (upstream: 30 min).

use std::ops::ControlFlow;

use api::contract::reasons;
use drivers::mongodb as d;
use serde_json::Value as Json;

use super::{Run, Step};
use crate::context::Context;

/// Cache label of Percona clusters.
pub const CLUSTERS: &str = "psmdb.PerconaServerMongoDB";
/// Cache label of PerconaServerMongoDBBackups (labelled with the owning job).
pub const BACKUPS: &str = "psmdb.PerconaServerMongoDBBackup";
/// Cache label of MongoDB applications.
pub const APPS: &str = "apps.MongoDB";

/// What the caches show for one job.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The MongoDB strategy's `spec.template`.
    pub template: Option<Json>,
    /// The MongoDB application.
    pub app: Option<Json>,
    /// The Percona cluster.
    pub cluster: Option<Json>,
    /// The PerconaServerMongoDBBackups labelled with the job (normally one).
    pub backups: Vec<Json>,
}

/// Reads the caches.
pub fn observe(ctx: &Context, run: &Run<'_>) -> Observed {
    let ns = run.namespace();
    let app = &run.job.spec.application_ref.name;
    Observed {
        template: ctx
            .caches
            .template("MongoDB", &run.resolved.strategy_ref.name),
        app: ctx.caches.object(APPS, &ns, app),
        cluster: ctx.caches.object(CLUSTERS, &ns, &d::cluster_name(app)),
        backups: ctx.caches.owned_by_job(BACKUPS, &ns, run.job),
    }
}

/// One step of the driver.
pub fn step(ctx: &Context, run: &Run<'_>) -> Step {
    decide(run, &observe(ctx, run))
}

/// The pure decision.
pub fn decide(run: &Run<'_>, o: &Observed) -> Step {
    let template = match run.opening(d::validate_app_ref, false, o.template.as_ref()) {
        ControlFlow::Continue(template) => template,
        ControlFlow::Break(step) => return step,
    };
    // Upstream's 30 minutes; a shorter backup deadline (flag or BackupClass parameter) bounds it.
    let deadline = d::DEADLINE.min(run.deadline);
    let within = drivers::status::go_duration(deadline);
    let ns = run.namespace();
    let app_name = &run.job.spec.application_ref.name;
    let Some(app) = &o.app else {
        return run.wait(
            reasons::MONGODB_APPLICATION_NOT_READY,
            format!("waiting for MongoDB application {ns}/{app_name} to exist"),
            false,
            deadline,
            || format!("MongoDB application {ns}/{app_name} not found within {within}"),
        );
    };
    let rendered = d::render_template(template, app, &run.resolved.parameters);
    let storage = d::storage_name(&rendered);
    let cluster_name = d::cluster_name(app_name);
    let what = format!("psmdb.percona.com/PerconaServerMongoDB {ns}/{cluster_name}");
    let Some(cluster) = &o.cluster else {
        return run.wait(
            reasons::PERCONA_SERVER_MONGODB_NOT_READY,
            format!("waiting for {what} to exist"),
            false,
            deadline,
            || format!("{what} never reached existence within {within}"),
        );
    };
    if let Some(msg) = d::precondition(cluster, &storage) {
        return run.wait(
            reasons::PERCONA_SERVER_MONGODB_BACKUPS_DISABLED,
            msg.clone(),
            false,
            deadline,
            || {
                format!(
                    "{what} not ready for backups within {within}: {msg} (set backup.enabled=true on the MongoDB application)"
                )
            },
        );
    }
    let Some(backup) = o.backups.first() else {
        return run.create_owned(
            BACKUPS,
            d::backup_body(&ns, &run.name(), &cluster_name, &rendered),
            d::ENSURE_FAILED,
        );
    };
    if let Some(step) = run.running() {
        return step;
    }
    match d::state(backup) {
        d::STATE_READY => {
            let entry = drivers::catalog::Entry {
                taken_at: d::taken_at(backup),
                driver_metadata: d::driver_metadata(backup),
                artifact_uri: d::artifact_uri(backup),
                underlying_resources: Some(d::snapshot(
                    backup,
                    &rendered,
                    &storage,
                    &run.resolved.parameters,
                )),
                ..Default::default()
            };
            run.complete(entry, Some(d::READY_MESSAGE))
        }
        d::STATE_ERROR | d::STATE_REJECTED => run.fail(d::failure_message(backup)),
        state => run.idle_until(deadline, || {
            let detail = if state.is_empty() {
                "no state observed".to_owned()
            } else {
                format!("state={state}")
            };
            format!(
                "psmdb.percona.com PerconaServerMongoDBBackup did not complete within {within} ({detail})"
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::backups::BackupJobStatus;
    use pretty_assertions::assert_eq;
    use serde_json::json;
    use std::time::Duration;

    use crate::drivers::testkit::Fixture;

    fn fixture() -> Fixture {
        Fixture::new("MongoDB", "m", "MongoDB", &[]).named("bj", "tenant", "mongo")
    }

    fn run<'a>(
        f: &'a Fixture,
        phase: Option<&str>,
        elapsed_min: u64,
        deadline_min: u64,
    ) -> Run<'a> {
        f.run_after(phase, elapsed_min, Duration::from_secs(deadline_min * 60))
    }

    fn observed() -> Observed {
        Observed {
            template: Some(
                json!({"storageName": "s3-storage", "type": "logical", "compressionType": "gzip"}),
            ),
            app: Some(json!({"metadata": {"name": "m", "namespace": "tenant"}})),
            cluster: Some(
                json!({"spec": {"backup": {"enabled": true, "storages": {"s3-storage": {"type": "s3"}}}}}),
            ),
            backups: vec![],
        }
    }

    fn status(step: &Step) -> &BackupJobStatus {
        match step {
            Step::Status { status, .. } | Step::Complete { status, .. } => status,
            other => panic!("{other:?}"),
        }
    }

    fn reason(step: &Step) -> (String, String) {
        let c = drivers::status::ready(&status(step).conditions).unwrap();
        (c.reason.clone(), c.message.clone())
    }

    #[test]
    fn waits_have_upstreams_reasons_and_deadlines() {
        let f = fixture();
        let mut o = observed();
        o.app = None;
        assert_eq!(
            reason(&decide(&run(&f, None, 1, 360), &o)),
            (
                "MongoDBApplicationNotReady".into(),
                "waiting for MongoDB application tenant/m to exist".into()
            )
        );
        assert_eq!(
            status(&decide(&run(&f, None, 31, 360), &o))
                .message
                .as_deref(),
            Some("MongoDB application tenant/m not found within 30m0s")
        );
        let mut o = observed();
        o.cluster = None;
        assert_eq!(
            reason(&decide(&run(&f, None, 1, 360), &o)),
            (
                "PerconaServerMongoDBNotReady".into(),
                "waiting for psmdb.percona.com/PerconaServerMongoDB tenant/mongodb-m to exist"
                    .into()
            )
        );
        assert_eq!(
            status(&decide(&run(&f, None, 11, 10), &o))
                .message
                .as_deref(),
            Some(
                "psmdb.percona.com/PerconaServerMongoDB tenant/mongodb-m never reached existence within 10m0s"
            ),
            "a shorter backup deadline bounds upstream's 30 minutes"
        );
        let mut o = observed();
        o.cluster = Some(json!({"spec": {"backup": {"enabled": false}}}));
        assert_eq!(
            reason(&decide(&run(&f, None, 1, 360), &o)).0,
            "PerconaServerMongoDBBackupsDisabled"
        );
        assert_eq!(
            status(&decide(&run(&f, None, 31, 360), &o))
                .message
                .as_deref(),
            Some(
                "psmdb.percona.com/PerconaServerMongoDB tenant/mongodb-m not ready for backups within 30m0s: spec.backup.enabled is false; on-demand backups need the percona-backup-mongodb agents running (set backup.enabled=true on the MongoDB application)"
            )
        );
    }

    #[test]
    fn create_run_and_finish() {
        let f = fixture();
        match decide(&run(&f, None, 1, 360), &observed()) {
            Step::Create {
                label,
                body,
                on_error,
                ..
            } => {
                assert_eq!(label, BACKUPS);
                assert_eq!(
                    on_error,
                    "failed to ensure psmdb.percona.com/PerconaServerMongoDBBackup"
                );
                assert_eq!(
                    body["spec"],
                    json!({"clusterName": "mongodb-m", "storageName": "s3-storage",
                                                "type": "logical", "compressionType": "gzip"})
                );
            }
            other => panic!("{other:?}"),
        }
        let mut o = observed();
        o.backups =
            vec![json!({"metadata": {"name": "bj-abcde", "namespace": "tenant"}, "status": {}})];
        assert_eq!(
            status(&decide(&run(&f, None, 1, 360), &o)).phase.as_deref(),
            Some("Running")
        );
        assert_eq!(
            decide(&run(&f, Some("Running"), 10, 360), &o),
            Step::Idle(Some(Duration::from_secs(20 * 60)))
        );
        assert_eq!(
            status(&decide(&run(&f, Some("Running"), 31, 360), &o))
                .message
                .as_deref(),
            Some(
                "psmdb.percona.com PerconaServerMongoDBBackup did not complete within 30m0s (no state observed)"
            )
        );
        o.backups[0]["status"] = json!({"state": "running"});
        assert_eq!(
            status(&decide(&run(&f, Some("Running"), 31, 360), &o))
                .message
                .as_deref(),
            Some(
                "psmdb.percona.com PerconaServerMongoDBBackup did not complete within 30m0s (state=running)"
            )
        );
        o.backups[0]["status"] = json!({"state": "error", "error": "starting deadline exceeded"});
        let failed = decide(&run(&f, Some("Running"), 3, 360), &o);
        assert_eq!(
            status(&failed).message.as_deref(),
            Some("starting deadline exceeded")
        );
        assert_eq!(reason(&failed).0, "BackupFailed");

        o.backups[0]["status"] = json!({"state": "ready", "destination": "s3://bk/p/2026-01-01T00:00:00Z",
                                         "completed": "2026-01-01T00:02:00Z"});
        match decide(&run(&f, Some("Running"), 3, 360), &o) {
            Step::Complete { backup, status } => {
                let c = drivers::status::ready(&status.conditions).unwrap();
                assert_eq!(
                    c.message,
                    "psmdb.percona.com PerconaServerMongoDBBackup completed"
                );
                let b = serde_json::to_value(&*backup).unwrap();
                assert_eq!(b["spec"]["takenAt"], "2026-01-01T00:02:00Z");
                assert_eq!(
                    b["status"]["artifact"]["uri"],
                    "s3://bk/p/2026-01-01T00:00:00Z"
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
