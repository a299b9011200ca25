//! The MariaDB driver's backup path (mariadb-operator logical dumps): what to do next, decided from
//! the caches.
//!
//! ```text
//!  app ref valid? ─► startedAt (first pass only) ─► MariaDB strategy (StrategyNotReady, 30 min)
//!  ─► MariaDB app (missing: Failed) ─► render ─► operator MariaDB mariadb-<app> (MariaDBNotReady,
//!     Failed after 30 min) ─► create the k8s.mariadb.com Backup ─► phase Running
//!  ─► Complete=True ─► catalog Backup + Succeeded │ JobFailed ─► Failed with the operator's message
//!     │ otherwise ─► wait; Failed after 30 min (or the backup deadline when shorter)
//! ```

use std::ops::ControlFlow;

use api::contract::reasons;
use drivers::mariadb as d;
use drivers::status::go_duration;
use serde_json::Value as Json;

use super::{Run, Step};
use crate::context::Context;

/// Cache label of the operator's Backups (labelled with the owning job).
pub const BACKUPS: &str = "mariadb.Backup";
/// Cache label of the operator's MariaDB servers (`mariadb-<app>`).
pub const SERVERS: &str = "mariadb.MariaDB";
/// Cache label of MariaDB applications.
pub const APPS: &str = "apps.MariaDB";

/// What the caches show for one job.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The MariaDB strategy's `spec.template`.
    pub template: Option<Json>,
    /// The MariaDB application.
    pub app: Option<Json>,
    /// The operator MariaDB `mariadb-<app>`.
    pub server: Option<Json>,
    /// The operator Backups labelled with the job (normally one).
    pub backups: Vec<Json>,
}

/// Reads the caches.
pub fn observe(ctx: &Context, run: &Run<'_>) -> Observed {
    let ns = run.namespace();
    let app = &run.job.spec.application_ref.name;
    Observed {
        template: ctx
            .caches
            .template("MariaDB", &run.resolved.strategy_ref.name),
        app: run.application(ctx, APPS),
        server: ctx.caches.object(SERVERS, &ns, &d::operator_name(app)),
        backups: ctx.caches.owned_by_job(BACKUPS, &ns, run.job),
    }
}

/// One step of the driver.
pub fn step(ctx: &Context, run: &Run<'_>) -> Step {
    decide(run, &observe(ctx, run))
}

/// The pure decision.
pub fn decide(run: &Run<'_>, o: &Observed) -> Step {
    let (template, app) = match run.template_and_app(
        d::validate_app_ref,
        (APPS, "MariaDB"),
        o.template.as_ref(),
        o.app.as_ref(),
    ) {
        ControlFlow::Continue(found) => found,
        ControlFlow::Break(step) => return step,
    };
    let ns = run.namespace();
    let app_name = &run.job.spec.application_ref.name;
    let rendered = match d::render_template(template, app, &run.resolved.parameters) {
        Ok(r) => r,
        Err(e) => return run.fail(format!("failed to template MariaDB strategy: {e}")),
    };
    // Upstream caps the whole backup at 30 minutes; a shorter backup deadline (flag or route
    // parameter) bounds it too.
    let deadline = d::DEADLINE.min(run.deadline);
    let server = d::operator_name(app_name);
    if o.server.is_none() {
        return run.wait(
            reasons::MARIADB_NOT_READY,
            format!("waiting for k8s.mariadb.com/MariaDB {ns}/{server} to exist"),
            false,
            deadline,
            || {
                format!(
                    "k8s.mariadb.com/MariaDB {ns}/{server} never reached existence within {}",
                    go_duration(deadline)
                )
            },
        );
    }
    let Some(backup) = o.backups.first() else {
        return match d::operator_backup(&ns, &run.name(), app_name, &rendered) {
            Ok(body) => run.create_owned(BACKUPS, body, "failed to ensure k8s.mariadb.com/Backup"),
            Err(e) => run.fail(format!("failed to ensure k8s.mariadb.com/Backup: {e}")),
        };
    };
    if let Some(step) = run.running() {
        return step;
    }
    match d::outcome(backup) {
        d::Outcome::Completed { at } => {
            let backup_name = backup["metadata"]["name"].as_str().unwrap_or_default();
            let uri = d::storage_uri(&rendered, backup_name);
            let entry = drivers::catalog::Entry {
                taken_at: at.and_then(|t| drivers::catalog::time(&Json::from(t))),
                driver_metadata: d::driver_metadata(&rendered, &ns, backup_name),
                artifact_uri: uri,
                underlying_resources: Some(d::snapshot(&rendered, &run.resolved.parameters)),
                ..Default::default()
            };
            run.complete(entry, Some("k8s.mariadb.com Backup completed"))
        }
        d::Outcome::Failed(message) => run.fail(message),
        d::Outcome::Running(detail) => run.idle_until(deadline, || {
            format!(
                "k8s.mariadb.com Backup did not complete within {} ({detail})",
                go_duration(deadline)
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;
    use crate::drivers::testkit::{Fixture, Summary, summary};

    fn observed() -> Observed {
        Observed {
            template: Some(json!({"storage": {"s3": {
                "bucket": "b", "endpoint": "https://s3", "prefix": "{{ .Application.metadata.name }}",
                "accessKeyIdSecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"},
                "secretAccessKeySecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_SECRET_ACCESS_KEY"}}}})),
            app: Some(json!({"metadata": {"name": "shop", "namespace": "tenant-a"}, "spec": {}})),
            server: Some(json!({"metadata": {"name": "mariadb-shop"}})),
            backups: vec![],
        }
    }

    fn with_backup(condition: Option<Json>) -> Observed {
        let mut o = observed();
        let mut b = json!({"metadata": {"name": "nightly-x1", "namespace": "tenant-a"}});
        if let Some(c) = condition {
            b["status"] = json!({"conditions": [c]});
        }
        o.backups = vec![b];
        o
    }

    fn min(m: u64) -> Duration {
        Duration::from_secs(m * 60)
    }

    #[test]
    fn the_path_to_the_operator_backup() {
        let fresh = Fixture::new("MariaDB", "shop", "MariaDB", &[]);
        assert!(matches!(
            decide(&fresh.run(None), &observed()),
            Step::Status { ref status, recheck: None } if status.started_at.is_some() && status.phase.is_none()
        ));
        let started = Fixture::new("MariaDB", "shop", "MariaDB", &[]).started(min(1), None);
        let run = started.run(None);
        let cases: Vec<(&str, Observed, Summary)> = vec![
            (
                "no strategy",
                Observed { template: None, ..observed() },
                (None, "StrategyNotReady".into(),
                 "Strategy \"default\" referenced by BackupClass \"cozy-default\" is not yet provisioned; the platform may still be initialising backup storage".into()),
            ),
            (
                "no application",
                Observed { app: None, ..observed() },
                (Some("Failed".into()), "BackupFailed".into(), "MariaDB application not found: tenant-a/shop".into()),
            ),
            (
                "no operator MariaDB",
                Observed { server: None, ..observed() },
                (None, "MariaDBNotReady".into(), "waiting for k8s.mariadb.com/MariaDB tenant-a/mariadb-shop to exist".into()),
            ),
        ];
        for (what, o, want) in cases {
            assert_eq!(summary(&decide(&run, &o)), want, "{what}");
        }
        let Step::Create {
            label,
            body,
            selector,
            ..
        } = decide(&run, &observed())
        else {
            panic!("expected the operator Backup to be created");
        };
        assert_eq!(label, BACKUPS);
        assert_eq!(body["spec"]["storage"]["s3"]["prefix"], "shop");
        assert_eq!(selector.len(), 2);
        let bad = Observed {
            template: Some(json!({"storage": {}})),
            ..observed()
        };
        assert_eq!(
            summary(&decide(&run, &bad)).2,
            "failed to ensure k8s.mariadb.com/Backup: strategy.spec.template.storage requires exactly one of s3, persistentVolumeClaim or volume; got 0"
        );
        assert_eq!(
            summary(&decide(&run, &with_backup(None))).0.as_deref(),
            Some("Running")
        );
    }

    #[test]
    fn a_kind_other_than_mariadb_fails_before_anything() {
        let f = Fixture::new("Postgres", "db", "MariaDB", &[]);
        assert_eq!(
            summary(&decide(&f.run(None), &observed())).2,
            "MariaDB strategy supports applicationRef.kind=\"MariaDB\", got \"Postgres\""
        );
    }

    #[test]
    fn outcomes_of_the_operator_backup() {
        let f = Fixture::new("MariaDB", "shop", "MariaDB", &[("bucket", "b")])
            .started(min(2), Some("Running"));
        let run = f.run(None);
        let done = decide(
            &run,
            &with_backup(Some(
                json!({"type": "Complete", "status": "True", "reason": "JobComplete",
                "message": "Success", "lastTransitionTime": "2026-01-01T00:59:00Z"}),
            )),
        );
        let Step::Complete { backup, status } = &done else {
            panic!("expected completion, got {done:?}");
        };
        assert_eq!(
            summary(&done),
            (
                Some("Succeeded".into()),
                "BackupCompleted".into(),
                "k8s.mariadb.com Backup completed".into()
            )
        );
        assert_eq!(status.backup_ref.as_ref().unwrap().name, "nightly");
        let b = serde_json::to_value(backup.as_ref()).unwrap();
        assert_eq!(b["spec"]["takenAt"], "2026-01-01T00:59:00Z");
        assert_eq!(
            b["status"]["artifact"],
            json!({"uri": "s3://b/shop/nightly-x1"})
        );
        assert_eq!(
            b["spec"]["driverMetadata"]["k8s.mariadb.com/storage-uri"],
            "s3://b/shop/nightly-x1"
        );
        assert_eq!(
            b["status"]["underlyingResources"]["parameters"],
            json!({"bucket": "b"})
        );

        let failed = decide(
            &run,
            &with_backup(Some(
                json!({"type": "Complete", "status": "True", "reason": "JobFailed", "message": "Failed"}),
            )),
        );
        assert_eq!(
            summary(&failed),
            (
                Some("Failed".into()),
                "BackupFailed".into(),
                "Failed".into()
            )
        );
        let running = with_backup(Some(
            json!({"type": "Complete", "status": "False", "reason": "JobRunning", "message": "Running"}),
        ));
        assert_eq!(
            decide(&run, &running),
            Step::Idle(Some(min(28))),
            "waits, woken by the next event or the deadline"
        );
        let late =
            Fixture::new("MariaDB", "shop", "MariaDB", &[]).started(min(31), Some("Running"));
        assert_eq!(
            summary(&decide(&late.run(None), &running)).2,
            "k8s.mariadb.com Backup did not complete within 30m0s (Complete=False/JobRunning)"
        );
        assert_eq!(
            summary(&decide(
                &f.run(Some(Duration::from_secs(60))),
                &with_backup(None)
            ))
            .2,
            "k8s.mariadb.com Backup did not complete within 1m0s (no Complete condition observed)",
            "a shorter backup deadline bounds upstream's 30 minutes"
        );
        let no_server = Observed {
            server: None,
            ..observed()
        };
        assert_eq!(
            summary(&decide(&late.run(None), &no_server)).2,
            "k8s.mariadb.com/MariaDB tenant-a/mariadb-shop never reached existence within 30m0s"
        );
    }
}
