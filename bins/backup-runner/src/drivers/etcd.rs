//! The Etcd driver's backup path (etcd-operator snapshots): what to do next, decided from the
//! caches.
//!
//! ```text
//!  app ref valid? ─► startedAt (first pass only) ─► Etcd strategy (StrategyNotReady, 30 min)
//!  ─► Etcd app (missing: Failed) ─► render ─► destination valid? (else Failed)
//!  ─► EtcdCluster "etcd" exists and Available (phase Running, EtcdClusterNotAvailable)
//!  ─► create the EtcdSnapshot ─► phase Running
//!  ─► Complete ─► catalog Backup + Succeeded │ Failed ─► Failed with the operator's message
//!     │ otherwise ─► EtcdBackupRunning; every wait Failed after 20 min (or the backup deadline)
//! ```
//!
//! The EtcdCluster carries no owned-by labels: its events wake the Etcd jobs of its namespace.

use std::ops::ControlFlow;

use api::contract::reasons;
use drivers::etcd as d;
use drivers::status::go_duration;
use serde_json::Value as Json;

use super::{Run, Step};
use crate::context::Context;

/// Cache label of EtcdSnapshots (labelled with the owning job).
pub const SNAPSHOTS: &str = "etcd.EtcdSnapshot";
/// Cache label of EtcdClusters.
pub const CLUSTERS: &str = "etcd.EtcdCluster";
/// Cache label of Etcd applications.
pub const APPS: &str = "apps.Etcd";

/// What the caches show for one job.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The Etcd strategy's `spec.template`.
    pub template: Option<Json>,
    /// The Etcd application.
    pub app: Option<Json>,
    /// The EtcdCluster `etcd` of the job's namespace.
    pub cluster: Option<Json>,
    /// The EtcdSnapshots labelled with the job (normally one).
    pub snapshots: Vec<Json>,
}

/// Reads the caches.
pub fn observe(ctx: &Context, run: &Run<'_>) -> Observed {
    let ns = run.namespace();
    Observed {
        template: ctx.caches.template("Etcd", &run.resolved.strategy_ref.name),
        app: run.application(ctx, APPS),
        cluster: ctx.caches.object(CLUSTERS, &ns, d::CLUSTER_NAME),
        snapshots: ctx.caches.owned_by_job(SNAPSHOTS, &ns, run.job),
    }
}

/// One step of the driver.
pub fn step(ctx: &Context, run: &Run<'_>) -> Step {
    decide(run, &observe(ctx, run))
}

const CLUSTER: &str = "etcd-operator.cozystack.io/EtcdCluster";
const SNAPSHOT: &str = "etcd-operator.cozystack.io/EtcdSnapshot";

/// The pure decision.
pub fn decide(run: &Run<'_>, o: &Observed) -> Step {
    let (template, app) = match run.template_and_app(
        d::validate_app_ref,
        (APPS, "Etcd"),
        o.template.as_ref(),
        o.app.as_ref(),
    ) {
        ControlFlow::Continue(found) => found,
        ControlFlow::Break(step) => return step,
    };
    let ns = run.namespace();
    let rendered = d::render_template(template, app, &run.resolved.parameters);
    if let Err(e) = d::validate_destination(&rendered) {
        return run.fail(format!("rendered Etcd destination is invalid: {e}"));
    }
    // Upstream gives the cluster wait and the snapshot 20 minutes together; a shorter backup
    // deadline (flag or route parameter) bounds them too.
    let deadline = d::DEADLINE.min(run.deadline);
    let within = go_duration(deadline);
    let cluster = d::CLUSTER_NAME;
    let Some(live) = &o.cluster else {
        return run.wait(
            reasons::ETCD_CLUSTER_NOT_AVAILABLE,
            format!("waiting for {CLUSTER} {ns}/{cluster} to exist"),
            true,
            deadline,
            || {
                format!(
                    "{CLUSTER} {ns}/{cluster} did not appear within {within} (deploy the source Etcd application before requesting the backup)"
                )
            },
        );
    };
    if !d::cluster_available(live) {
        return run.wait(
            reasons::ETCD_CLUSTER_NOT_AVAILABLE,
            format!("waiting for {CLUSTER} {ns}/{cluster} to become Available"),
            true,
            deadline,
            || {
                format!(
                    "{CLUSTER} {ns}/{cluster} did not become Available within {within} (current Available condition: {})",
                    d::availability_summary(live)
                )
            },
        );
    }
    let Some(snapshot) = o.snapshots.first() else {
        return run.create_owned(
            SNAPSHOTS,
            d::snapshot_body(&ns, &run.name(), &rendered),
            "failed to ensure etcd-operator.cozystack.io/EtcdSnapshot",
        );
    };
    if let Some(step) = run.running() {
        return step;
    }
    let snapshot_name = snapshot["metadata"]["name"].as_str().unwrap_or_default();
    let phase = d::phase(snapshot);
    match phase.as_str() {
        d::phases::COMPLETE => {
            let artifact = d::artifact(snapshot);
            let entry = drivers::catalog::Entry {
                driver_metadata: d::driver_metadata(&rendered, snapshot_name),
                artifact_uri: artifact.as_ref().map(|a| a.0.clone()),
                artifact_size_bytes: artifact.as_ref().and_then(|a| a.1),
                artifact_checksum: artifact.and_then(|a| a.2),
                underlying_resources: Some(d::snapshot(&rendered, &run.resolved.parameters)),
                ..Default::default()
            };
            run.complete(entry, Some(&format!("{SNAPSHOT} reached phase=Complete")))
        }
        d::phases::FAILED => run.fail(format!(
            "{SNAPSHOT} {ns}/{snapshot_name} reached phase=Failed ({})",
            d::failure_message(snapshot)
        )),
        _ => run.wait(
            reasons::ETCD_BACKUP_RUNNING,
            format!("{SNAPSHOT} {ns}/{snapshot_name} phase={phase:?}"),
            true,
            deadline,
            || {
                format!(
                    "{SNAPSHOT} {ns}/{snapshot_name} did not reach phase=Complete within {within} (current phase={phase:?})"
                )
            },
        ),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;
    use crate::drivers::testkit::{Fixture, Summary, summary};

    fn available() -> Json {
        json!({"metadata": {"name": "etcd"}, "status": {"conditions": [
            {"type": "Available", "status": "True", "reason": "QuorumHealthy", "message": "All members are ready"}]}})
    }

    fn observed() -> Observed {
        Observed {
            template: Some(json!({"destination": {"s3": {
                "bucket": "{{ .Parameters.bucket }}", "endpoint": "http://s3", "key": "{{ .Application.metadata.namespace }}/etcd",
                "credentialsSecretRef": {"name": "cozy-backups-creds"}}}})),
            app: Some(json!({"metadata": {"name": "etcd", "namespace": "tenant-a"}})),
            cluster: Some(available()),
            snapshots: vec![],
        }
    }

    fn with_snapshot(status: Json) -> Observed {
        Observed {
            snapshots: vec![json!({"metadata": {"name": "nightly-x1"}, "status": status})],
            ..observed()
        }
    }

    fn min(m: u64) -> Duration {
        Duration::from_secs(m * 60)
    }

    fn f(ago: Duration, phase: Option<&str>) -> Fixture {
        Fixture::new("Etcd", "etcd", "Etcd", &[("bucket", "b")]).started(ago, phase)
    }

    #[test]
    fn the_path_to_the_snapshot() {
        let fresh = Fixture::new("Etcd", "etcd", "Etcd", &[("bucket", "b")]);
        assert!(matches!(
            decide(&fresh.run(None), &observed()),
            Step::Status { ref status, .. } if status.started_at.is_some() && status.phase.is_none()
        ));
        let started = f(min(1), None);
        let run = started.run(None);
        let running = Some("Running".to_owned());
        let lost = json!({"metadata": {"name": "etcd"}, "status": {"conditions": [
            {"type": "Available", "status": "False", "reason": "QuorumLost", "message": "2 of 3 members down"}]}});
        let cases: Vec<(&str, Observed, Summary)> = vec![
            ("no strategy", Observed { template: None, ..observed() },
             (None, "StrategyNotReady".into(), "Strategy \"default\" referenced by BackupClass \"cozy-default\" is not yet provisioned; the platform may still be initialising backup storage".into())),
            ("no application", Observed { app: None, ..observed() },
             (Some("Failed".into()), "BackupFailed".into(), "Etcd application not found: tenant-a/etcd".into())),
            ("no destination", Observed { template: Some(json!({"destination": {"s3": {"bucket": "", "endpoint": "e", "credentialsSecretRef": {"name": "c"}}}})), ..observed() },
             (Some("Failed".into()), "BackupFailed".into(), "rendered Etcd destination is invalid: destination.s3.bucket is empty after templating".into())),
            ("no cluster", Observed { cluster: None, ..observed() },
             (running.clone(), "EtcdClusterNotAvailable".into(), "waiting for etcd-operator.cozystack.io/EtcdCluster tenant-a/etcd to exist".into())),
            ("cluster not available", Observed { cluster: Some(lost.clone()), ..observed() },
             (running.clone(), "EtcdClusterNotAvailable".into(), "waiting for etcd-operator.cozystack.io/EtcdCluster tenant-a/etcd to become Available".into())),
        ];
        for (what, o, want) in cases {
            assert_eq!(summary(&decide(&run, &o)), want, "{what}");
        }
        let Step::Create { label, body, .. } = decide(&run, &observed()) else {
            panic!("expected the snapshot to be created");
        };
        assert_eq!(label, SNAPSHOTS);
        assert_eq!(body["spec"]["destination"]["s3"]["key"], "tenant-a/etcd");
        assert_eq!(body["spec"]["destination"]["s3"]["bucket"], "b");

        let late = f(min(21), Some("Running"));
        assert_eq!(
            summary(&decide(
                &late.run(None),
                &Observed {
                    cluster: None,
                    ..observed()
                }
            ))
            .2,
            "etcd-operator.cozystack.io/EtcdCluster tenant-a/etcd did not appear within 20m0s (deploy the source Etcd application before requesting the backup)"
        );
        assert_eq!(
            summary(&decide(
                &late.run(None),
                &Observed {
                    cluster: Some(lost),
                    ..observed()
                }
            ))
            .2,
            "etcd-operator.cozystack.io/EtcdCluster tenant-a/etcd did not become Available within 20m0s (current Available condition: Available=False/2 of 3 members down)"
        );
    }

    #[test]
    fn snapshot_phases() {
        let started = f(min(1), Some("Running"));
        let run = started.run(None);
        assert_eq!(
            summary(&decide(&run, &with_snapshot(json!({"phase": "Started"})))),
            (
                Some("Running".into()),
                "EtcdBackupRunning".into(),
                "etcd-operator.cozystack.io/EtcdSnapshot tenant-a/nightly-x1 phase=\"Started\""
                    .into()
            )
        );
        let failed = with_snapshot(json!({"phase": "Failed", "conditions": [
            {"type": "Ready", "status": "False", "reason": "JobFailed", "message": "snapshot job failed"}]}));
        assert_eq!(
            summary(&decide(&run, &failed)).2,
            "etcd-operator.cozystack.io/EtcdSnapshot tenant-a/nightly-x1 reached phase=Failed (snapshot job failed)"
        );
        let done = decide(
            &run,
            &with_snapshot(json!({"phase": "Complete", "artifact": {
                "uri": "s3://b/tenant-a/etcd/nightly-x1.db", "sizeBytes": 4096, "checksum": "sha256:00ff"}})),
        );
        assert_eq!(
            summary(&done),
            (
                Some("Succeeded".into()),
                "BackupCompleted".into(),
                "etcd-operator.cozystack.io/EtcdSnapshot reached phase=Complete".into()
            )
        );
        let Step::Complete { backup, .. } = done else {
            unreachable!()
        };
        let b = serde_json::to_value(backup.as_ref()).unwrap();
        assert_eq!(
            b["status"]["artifact"],
            json!({"uri": "s3://b/tenant-a/etcd/nightly-x1.db", "sizeBytes": 4096, "checksum": "sha256:00ff"})
        );
        assert_eq!(
            b["spec"]["driverMetadata"]["etcd.aenix.io/backup-name"],
            "nightly-x1"
        );
        assert_eq!(b["spec"]["takenAt"], "2026-01-01T01:00:00Z");

        let short = f(Duration::from_secs(20), Some("Running"));
        assert_eq!(
            summary(&decide(
                &short.run(Some(Duration::from_secs(15))),
                &with_snapshot(json!({"phase": "Pending"}))
            ))
            .2,
            "etcd-operator.cozystack.io/EtcdSnapshot tenant-a/nightly-x1 did not reach phase=Complete within 15s (current phase=\"Pending\")"
        );
        let before = f(min(1), None);
        assert_eq!(
            summary(&decide(&before.run(None), &with_snapshot(json!({}))))
                .0
                .as_deref(),
            Some("Running"),
            "phase Running as soon as the snapshot exists"
        );
    }
}
