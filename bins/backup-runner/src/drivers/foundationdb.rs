//! The FoundationDB driver's backup path: what to do next, decided from what is observed.
//!
//! ```text
//!  app ref valid? ─► startedAt (first pass only) ─► FoundationDB strategy (StrategyNotReady, 30 min)
//!  ─► FoundationDB app (missing: Failed) ─► render
//!  ─► FoundationDBCluster foundationdb-<app>: exists / health.available / spec.version
//!     (Ready=False FoundationDBClusterNotReady / …NotAvailable / …VersionUnknown until the deadline)
//!  ─► a chart-rendered FoundationDBBackup Running against the cluster: Failed
//!  ─► no FoundationDBBackup of the job yet: stop every other driver-made one of the cluster
//!     (backupState=Stopped), then create <job>-xxxxx
//!  ─► phase Running ─► restorable: catalog Backup + Succeeded
//!                      not yet: Ready=False FoundationDBBackupRunning (the operator's progress);
//!                      past min(45 min, backup deadline): stop it, Failed
//! ```
//!
//! Observation is from the caches, except right before the create, when the namespace's
//! FoundationDBBackups are listed fresh (the stops just made must be seen).
//!
//! Upstream also waits (`MissingBlobCredentialsSecret`) while a Secret the agent pod template
//! needs does not exist. The runner has no access to Secrets at all (least privilege), so it does
//! not: a missing agent Secret shows as the operator's progress never reaching a restorable
//! snapshot (`FoundationDBBackupRunning`), and the job fails at its deadline with that progress.

use std::ops::ControlFlow;
use std::time::Duration;

use api::contract::reasons;
use drivers::foundationdb as d;
use serde_json::Value as Json;

use super::{Run, Step};
use crate::context::{Context, Error};

/// Cache label of FoundationDBClusters.
pub const CLUSTERS: &str = "fdb.FoundationDBCluster";
/// Cache label of FoundationDBBackups (all of them: chart-rendered ones matter too).
pub const BACKUPS: &str = "fdb.FoundationDBBackup";
/// Cache label of FoundationDB applications.
pub const APPS: &str = "apps.FoundationDB";

/// What is observed for one job.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The FoundationDB strategy's `spec.template`.
    pub template: Option<Json>,
    /// The FoundationDB application.
    pub app: Option<Json>,
    /// The FoundationDBCluster.
    pub cluster: Option<Json>,
    /// Every FoundationDBBackup of the job's namespace.
    pub backups: Vec<Json>,
}

/// What the driver does next: a step, and possibly a best-effort stop of the job's own
/// FoundationDBBackup before it (when the job fails at its deadline).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The step.
    pub step: Step,
    /// Stop this FoundationDBBackup (name, in the job's namespace) first; a failure is logged only.
    pub stop_first: Option<String>,
}

impl From<Step> for Decision {
    fn from(step: Step) -> Self {
        Decision {
            step,
            stop_first: None,
        }
    }
}

fn cluster_usable(cluster: Option<&Json>) -> bool {
    cluster.is_some_and(|c| {
        c["status"]["health"]["available"].as_bool() == Some(true)
            && c["spec"]["version"].as_str().is_some_and(|v| !v.is_empty())
    })
}

/// Observes: the caches, plus the fresh list described in the module header.
pub async fn observe(ctx: &Context, run: &Run<'_>) -> Result<Observed, Error> {
    let ns = run.namespace();
    let app_name = &run.job.spec.application_ref.name;
    let mut o = Observed {
        template: ctx
            .caches
            .template("FoundationDB", &run.resolved.strategy_ref.name),
        app: run.application(ctx, APPS),
        cluster: ctx.caches.object(CLUSTERS, &ns, &d::cluster_name(app_name)),
        backups: ctx.caches.labelled(BACKUPS, &ns, &[]),
    };
    let ready_to_create = run.status.started_at.is_some()
        && o.template.is_some()
        && o.app.is_some()
        && cluster_usable(o.cluster.as_ref());
    let name = run.name();
    if ready_to_create && !o.backups.iter().any(|b| d::owned_by(b, &ns, &name)) {
        let resource = ctx.caches.resource(BACKUPS);
        o.backups = ctx.list_fresh(&resource, &ns, &[]).await?;
    }
    Ok(o)
}

/// One step of the driver (with the best-effort stop a deadline failure asks for).
pub async fn step(ctx: &Context, run: &Run<'_>) -> Result<Step, Error> {
    let decision = decide(run, &observe(ctx, run).await?);
    if let Some(name) = &decision.stop_first {
        let ns = run.namespace();
        let api = ctx.api(&ctx.caches.resource(BACKUPS), Some(&ns));
        let patch = kube::api::Patch::Merge(d::stop_patch());
        match api
            .patch(name, &kube::api::PatchParams::default(), &patch)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(job = %format!("{ns}/{}", run.name()), backup = %name, error = %e, "could not stop the FoundationDBBackup at the deadline; failing the job anyway");
            }
        }
    }
    Ok(decision.step)
}

fn late(what: String, deadline: Duration) -> impl FnOnce() -> String {
    move || format!("{what} within {}", drivers::status::go_duration(deadline))
}

/// The pure decision.
pub fn decide(run: &Run<'_>, o: &Observed) -> Decision {
    let (template, app) = match run.template_and_app(
        d::validate_app_ref,
        (APPS, "FoundationDB"),
        o.template.as_ref(),
        o.app.as_ref(),
    ) {
        ControlFlow::Continue(found) => found,
        ControlFlow::Break(step) => return step.into(),
    };
    let ns = run.namespace();
    let name = run.name();
    let app_name = &run.job.spec.application_ref.name;
    let rendered = d::render_template(template, app, &run.resolved.parameters);
    let cluster_name = d::cluster_name(app_name);
    let what = format!("apps.foundationdb.org/FoundationDBCluster {ns}/{cluster_name}");
    let Some(cluster) = &o.cluster else {
        return run
            .wait(
                reasons::FOUNDATIONDB_CLUSTER_NOT_READY,
                format!("waiting for {what} to exist"),
                false,
                run.deadline,
                late(format!("{what} did not appear"), run.deadline),
            )
            .into();
    };
    if cluster["status"]["health"]["available"].as_bool() != Some(true) {
        return run
            .wait(
                reasons::FOUNDATIONDB_CLUSTER_NOT_AVAILABLE,
                format!("waiting for {what} to become available"),
                false,
                run.deadline,
                late(format!("{what} did not become available"), run.deadline),
            )
            .into();
    }
    let version = cluster["spec"]["version"].as_str().unwrap_or_default();
    if version.is_empty() {
        return run
            .wait(
                reasons::FOUNDATIONDB_CLUSTER_VERSION_UNKNOWN,
                format!("{what} does not yet report spec.version"),
                false,
                run.deadline,
                late(format!("{what} did not report spec.version"), run.deadline),
            )
            .into();
    }
    if let Some(conflict) = d::conflicting_in_chart(&o.backups, &cluster_name) {
        return run
            .fail(format!(
                "conflicting in-chart FoundationDBBackup {ns}/{conflict} is Running against cluster {cluster_name:?}; disable the chart's backup.enabled and delete that CR before using the BackupClass flow"
            ))
            .into();
    }
    let mut mine: Vec<&Json> = o
        .backups
        .iter()
        .filter(|b| d::owned_by(b, &ns, &name))
        .collect();
    mine.sort_by_key(|b| {
        b["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    let Some(backup) = mine.first().copied() else {
        if let Some(other) = d::others_to_stop(&o.backups, &cluster_name, &ns, &name).first() {
            return Step::Patch {
                label: BACKUPS,
                namespace: ns.clone(),
                name: (*other).to_owned(),
                patch: d::stop_patch(),
                on_error: d::ENSURE_FAILED,
            }
            .into();
        }
        return run
            .create_owned(
                BACKUPS,
                d::backup_body(&ns, &name, &cluster_name, version, &rendered),
                d::ENSURE_FAILED,
            )
            .into();
    };
    if let Some(step) = run.running() {
        return step.into();
    }
    if !d::backup_ready(backup) {
        // Upstream's 45 minutes; a shorter backup deadline (flag or BackupClass parameter) bounds
        // it too.
        let deadline = d::BACKUP_DEADLINE.min(run.deadline);
        let detail = d::not_ready_detail(Some(backup));
        if run.elapsed() > deadline {
            let backup_name = backup["metadata"]["name"].as_str().unwrap_or_default();
            return Decision {
                step: run.fail(format!(
                    "apps.foundationdb.org/FoundationDBBackup did not reach a restorable snapshot within {} ({detail})",
                    drivers::status::go_duration(deadline)
                )),
                stop_first: (!d::is_stopped(backup)).then(|| backup_name.to_owned()),
            };
        }
        return run
            .wait(
                reasons::FOUNDATIONDB_BACKUP_RUNNING,
                detail,
                false,
                deadline,
                String::new,
            )
            .into();
    }
    let entry = drivers::catalog::Entry {
        // snapshotTime is an FDB version, not a time: the catalog records when it was observed.
        taken_at: None,
        driver_metadata: d::driver_metadata(backup),
        artifact_uri: d::storage_uri(backup),
        underlying_resources: Some(d::snapshot(&rendered, &run.resolved.parameters, backup)),
        ..Default::default()
    };
    run.complete(entry, Some(d::READY_MESSAGE)).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::contract::labels;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use crate::drivers::testkit::Fixture;

    fn fixture() -> Fixture {
        Fixture::new("FoundationDB", "fdb-src", "FoundationDB", &[]).named("bj", "tenant", "fdb")
    }

    fn run<'a>(f: &'a Fixture, phase: Option<&str>, elapsed_min: u64) -> Run<'a> {
        f.run_after(phase, elapsed_min, Duration::from_secs(6 * 3600))
    }

    fn observed() -> Observed {
        Observed {
            template: Some(
                json!({"blobStoreConfiguration": {"accountName": "s3:9000", "bucket": "bk"}}),
            ),
            app: Some(json!({"metadata": {"name": "fdb-src", "namespace": "tenant"}})),
            cluster: Some(json!({"metadata": {"name": "foundationdb-fdb-src"},
                                 "spec": {"version": "7.3.63"},
                                 "status": {"health": {"available": true}}})),
            backups: vec![],
        }
    }

    fn ready(step: &Step) -> (String, String, Option<String>) {
        let Step::Status { status, .. } = step else {
            panic!("not a status step: {step:?}")
        };
        let c = drivers::status::ready(&status.conditions).unwrap();
        (c.reason.clone(), c.message.clone(), status.phase.clone())
    }

    fn backup(name: &str, job: &str, state: &str, status: Json) -> Json {
        json!({"metadata": {"name": name, "namespace": "tenant", "generation": 1, "labels": {
                  labels::OWNED_BY_JOB_NAME: job, labels::OWNED_BY_JOB_NAMESPACE: "tenant",
                  labels::FOUNDATIONDB_CLUSTER: "foundationdb-fdb-src"}},
               "spec": {"clusterName": "foundationdb-fdb-src", "backupState": state,
                        "blobStoreConfiguration": {"accountName": "s3:9000", "bucket": "bk", "backupName": job}},
               "status": status})
    }

    #[test]
    fn the_cluster_gates_wait_with_upstreams_reasons() {
        let f = fixture();
        let mut o = observed();
        o.cluster = None;
        assert_eq!(
            ready(&decide(&run(&f, None, 1), &o).step),
            (
                "FoundationDBClusterNotReady".into(),
                "waiting for apps.foundationdb.org/FoundationDBCluster tenant/foundationdb-fdb-src to exist".into(),
                None
            )
        );
        let mut o = observed();
        o.cluster.as_mut().unwrap()["status"]["health"]["available"] = json!(false);
        assert_eq!(
            ready(&decide(&run(&f, None, 1), &o).step).0,
            "FoundationDBClusterNotAvailable"
        );
        let mut o = observed();
        o.cluster.as_mut().unwrap()["spec"]["version"] = json!("");
        assert_eq!(
            ready(&decide(&run(&f, None, 1), &o).step),
            (
                "FoundationDBClusterVersionUnknown".into(),
                "apps.foundationdb.org/FoundationDBCluster tenant/foundationdb-fdb-src does not yet report spec.version".into(),
                None
            )
        );
        let late = decide(&run(&f, None, 6 * 60 + 1), &o).step;
        let Step::Status { status, .. } = late else {
            panic!()
        };
        assert_eq!(
            status.message.as_deref(),
            Some(
                "apps.foundationdb.org/FoundationDBCluster tenant/foundationdb-fdb-src did not report spec.version within 6h0m0s"
            )
        );
    }

    #[test]
    fn a_running_chart_backup_is_a_terminal_conflict() {
        let f = fixture();
        let mut o = observed();
        o.backups = vec![
            json!({"metadata": {"name": "fdb-src-backup", "namespace": "tenant"},
                                "spec": {"clusterName": "foundationdb-fdb-src", "backupState": "Running"}}),
        ];
        let Step::Status { status, .. } = decide(&run(&f, None, 1), &o).step else {
            panic!()
        };
        assert_eq!(
            status.message.as_deref(),
            Some(
                "conflicting in-chart FoundationDBBackup tenant/fdb-src-backup is Running against cluster \"foundationdb-fdb-src\"; disable the chart's backup.enabled and delete that CR before using the BackupClass flow"
            )
        );
    }

    #[test]
    fn others_are_stopped_before_the_create() {
        let f = fixture();
        let mut o = observed();
        o.backups = vec![
            backup("bj-0-aaaaa", "bj-0", "Stopped", json!({})),
            backup("bj-9-bbbbb", "bj-9", "Running", json!({})),
        ];
        assert_eq!(
            decide(&run(&f, None, 1), &o).step,
            Step::Patch {
                label: BACKUPS,
                namespace: "tenant".into(),
                name: "bj-9-bbbbb".into(),
                patch: json!({"spec": {"backupState": "Stopped"}}),
                on_error: "failed to ensure apps.foundationdb.org/FoundationDBBackup",
            }
        );
        o.backups[1]["spec"]["backupState"] = json!("Stopped");
        match decide(&run(&f, None, 1), &o).step {
            Step::Create { label, body, .. } => {
                assert_eq!(label, BACKUPS);
                assert_eq!(body["spec"]["version"], "7.3.63");
                assert_eq!(body["spec"]["blobStoreConfiguration"]["backupName"], "bj");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn progress_deadline_and_success() {
        let f = fixture();
        let mut o = observed();
        o.backups = vec![backup("bj-ccccc", "bj", "Running", json!({}))];
        let running = decide(&run(&f, None, 1), &o).step;
        let Step::Status { status, .. } = &running else {
            panic!()
        };
        assert_eq!(status.phase.as_deref(), Some("Running"));

        let waiting = decide(&run(&f, Some("Running"), 5), &o);
        assert_eq!(
            ready(&waiting.step),
            (
                "FoundationDBBackupRunning".into(),
                "no backupDetails observed".into(),
                Some("Running".into())
            )
        );
        assert_eq!(waiting.stop_first, None);

        let late = decide(&run(&f, Some("Running"), 46), &o);
        assert_eq!(late.stop_first.as_deref(), Some("bj-ccccc"));
        let Step::Status { status, .. } = &late.step else {
            panic!()
        };
        assert_eq!(
            status.message.as_deref(),
            Some(
                "apps.foundationdb.org/FoundationDBBackup did not reach a restorable snapshot within 45m0s (no backupDetails observed)"
            )
        );

        o.backups = vec![backup(
            "bj-ccccc",
            "bj",
            "Running",
            json!({
            "backupDetails": {"running": true, "snapshotTime": 43017506, "url": "blobstore://s3:9000/bj?bucket=bk"},
            "generations": {"reconciled": 1}}),
        )];
        match decide(&run(&f, Some("Running"), 7), &o).step {
            Step::Complete { backup, status } => {
                assert_eq!(status.phase.as_deref(), Some("Succeeded"));
                let c = drivers::status::ready(&status.conditions).unwrap();
                assert_eq!(
                    (c.reason.as_str(), c.message.as_str()),
                    ("BackupCompleted", d::READY_MESSAGE)
                );
                let b = serde_json::to_value(&*backup).unwrap();
                assert_eq!(b["spec"]["takenAt"], "2026-01-01T00:07:00Z", "wall clock");
                assert_eq!(
                    b["status"]["artifact"]["uri"],
                    "blobstore://s3:9000/bj?bucket=bk"
                );
                assert_eq!(
                    b["spec"]["driverMetadata"]["apps.foundationdb.org/blob-backup-name"],
                    "bj"
                );
                assert_eq!(
                    b["status"]["underlyingResources"]["storage"],
                    json!({"accountName": "s3:9000", "bucket": "bk", "backupName": "bj"})
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn wrong_application_kind_and_missing_application() {
        let mut f = fixture();
        f.job.spec.application_ref.kind = "Postgres".into();
        let Step::Status { status, .. } = decide(&run(&f, None, 1), &observed()).step else {
            panic!()
        };
        assert_eq!(
            status.message.as_deref(),
            Some(
                "FoundationDB strategy supports applicationRef.kind=\"FoundationDB\", got \"Postgres\""
            )
        );
        let f = fixture();
        let mut o = observed();
        o.app = None;
        // Not in the cache: the API server is asked before the job fails (Step::Unseen).
        let Step::Unseen { status, label, .. } = decide(&run(&f, None, 1), &o).step else {
            panic!()
        };
        assert_eq!(label, APPS);
        assert_eq!(
            status.message.as_deref(),
            Some("FoundationDB application not found: tenant/fdb-src")
        );
    }
}
