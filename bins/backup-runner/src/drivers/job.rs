//! The Job driver's backup path (a generic backup pod for any application kind), also the engine of
//! the Altinity driver: what to do next, decided from the caches.
//!
//! ```text
//!  startedAt + phase Running (first pass only) ─► Job strategy (missing: Failed at once; Altinity:
//!  StrategyNotReady, 30 min) ─► batch Job <job>-backup exists? ── no ─► application (missing or
//!  kind not served: Failed) ─► render the pod template ─► create the batch Job
//!  ─► Complete=True ─► catalog Backup + Succeeded │ Failed=True ─► Failed with the Job's message
//!     │ otherwise ─► wait; Failed after the backup deadline (upstream waits forever)
//! ```
//!
//! Reads: the strategy and the batch Job from the caches; the application from the runner's cache
//! of its kind when there is one, else (any kind can be backed up by the Job strategy) with one
//! discovery lookup and a GET — only while the batch Job does not exist yet, since the application
//! is needed only to render it.

use api::TypedLocalObjectReference;
use api::contract::{groups, labels};
use drivers::job::{self as d, Flavor};
use drivers::status::go_duration;
use kube::api::{Api, DynamicObject};
use serde_json::Value as Json;

use super::{Run, Step};
use crate::context::{Context, Error, api_err};

/// Cache label of batch Jobs labelled with an owning job.
pub const BATCH_JOBS: &str = "batch.Job";

/// The application as found.
#[derive(Debug, Clone, PartialEq)]
pub enum App {
    /// Not looked up (the batch Job exists already, or the driver is not that far).
    NotNeeded,
    /// The live object.
    Found(Json),
    /// Not found, or its kind is not served.
    Missing,
}

/// What the caches (and, for an uncached kind, the API) show for one job.
#[derive(Debug, Clone)]
pub struct Observed {
    /// The strategy's `spec.template` (a PodTemplateSpec).
    pub template: Option<Json>,
    /// The batch Job `<job>-backup` of this job.
    pub batch_job: Option<Json>,
    /// The application.
    pub app: App,
}

/// Reads the strategy of `kind` and the batch Job from the caches, and the application when the
/// batch Job does not exist yet.
pub async fn observe(
    ctx: &Context,
    run: &Run<'_>,
    kind: &str,
    flavor: &Flavor,
) -> Result<Observed, Error> {
    let ns = run.namespace();
    let name = run.name();
    let batch_name = d::backup_job_name(&name);
    let wanted = selector(flavor, &name, &ns);
    let wanted: Vec<(&str, &str)> = wanted.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let batch_job = ctx
        .caches
        .labelled(BATCH_JOBS, &ns, &wanted)
        .into_iter()
        .find(|j| j["metadata"]["name"] == batch_name.as_str());
    let template = ctx.caches.template(kind, &run.resolved.strategy_ref.name);
    // The application is needed only to render the Job, which happens after the first pass and
    // once the strategy exists.
    let needed = batch_job.is_none() && template.is_some() && run.status.started_at.is_some();
    let app = if !needed {
        App::NotNeeded
    } else {
        match application(ctx, &ns, run.app).await? {
            Some(a) => App::Found(a),
            None => App::Missing,
        }
    };
    Ok(Observed {
        template,
        batch_job,
        app,
    })
}

/// The labels that identify a BackupJob's batch Job (the mode keeps a RestoreJob's Job of the same
/// name apart: both use the owned-by keys).
fn selector(flavor: &Flavor, name: &str, ns: &str) -> Vec<(&'static str, String)> {
    vec![
        (flavor.mode_label, d::MODE_BACKUP.to_owned()),
        (labels::OWNED_BY_JOB_NAME, name.to_owned()),
        (labels::OWNED_BY_JOB_NAMESPACE, ns.to_owned()),
    ]
}

/// The application `reference` (normalised) in `namespace`: from the runner's cache of its kind
/// when there is one, else through discovery and a GET. `None` when it does not exist or its kind
/// is not served.
pub async fn application(
    ctx: &Context,
    namespace: &str,
    reference: &TypedLocalObjectReference,
) -> Result<Option<Json>, Error> {
    let group = reference.normalized_group();
    let label = format!("apps.{}", reference.kind);
    if group == groups::APPS && ctx.caches.objects.iter().any(|(l, _, _)| *l == label) {
        return Ok(ctx.caches.object(&label, namespace, &reference.name));
    }
    let discovered = match kube::discovery::group(&ctx.client, group).await {
        Ok(g) => g.recommended_kind(&reference.kind),
        Err(kube::Error::Discovery(_)) => None,
        Err(kube::Error::Api(e)) if e.code == 404 => None,
        Err(e) => return Err(api_err("discover", format!("API group {group:?}"))(e)),
    };
    let Some((resource, caps)) = discovered else {
        return Ok(None);
    };
    let api: Api<DynamicObject> = match caps.scope {
        kube::discovery::Scope::Namespaced => {
            Api::namespaced_with(ctx.client.clone(), namespace, &resource)
        }
        kube::discovery::Scope::Cluster => Api::all_with(ctx.client.clone(), &resource),
    };
    let object = api.get_opt(&reference.name).await.map_err(api_err(
        "get",
        format!("{} {namespace}/{}", reference.kind, reference.name),
    ))?;
    Ok(object.and_then(|o| serde_json::to_value(o).ok()))
}

/// One step of the Job driver.
pub async fn step(ctx: &Context, run: &Run<'_>) -> Result<Step, Error> {
    let o = observe(ctx, run, "Job", &d::JOB).await?;
    Ok(decide(run, &o))
}

/// The pure decision of the Job driver.
pub fn decide(run: &Run<'_>, o: &Observed) -> Step {
    if run.status.started_at.is_none() {
        return run.start(true);
    }
    if o.template.is_none() {
        // Unlike the other drivers, upstream's Job driver does not wait for its strategy.
        return run.fail(format!(
            "Job strategy not found: {}",
            run.resolved.strategy_ref.name
        ));
    }
    let r = &run.job.spec.application_ref;
    decide_batch(run, o, &d::JOB, || {
        format!(
            "application not found or kind not registered: {}/{} (kind={:?})",
            run.namespace(),
            r.name,
            r.kind
        )
    })
}

/// The part the Job and Altinity drivers share, from the batch Job on: create it (rendered from the
/// strategy's pod template; `missing_app` is the failure when the application is gone), then follow
/// its conditions.
pub fn decide_batch(
    run: &Run<'_>,
    o: &Observed,
    flavor: &Flavor,
    missing_app: impl FnOnce() -> String,
) -> Step {
    let ns = run.namespace();
    let name = run.name();
    let Some(batch) = &o.batch_job else {
        let app = match &o.app {
            App::Found(app) => app,
            App::Missing => return run.fail(missing_app()),
            // Not looked up: nothing to decide on yet (observe looks it up when it is needed).
            App::NotNeeded => return Step::Idle(None),
        };
        let template = o.template.clone().unwrap_or_default();
        let app_name = &run.job.spec.application_ref.name;
        let context = d::context(
            app,
            app_name,
            &ns,
            d::MODE_BACKUP,
            &run.resolved.parameters,
            None,
        );
        let rendered = d::render_pod_template(&template, &context);
        let uid = run.job.metadata.uid.clone().unwrap_or_default();
        let body = d::batch_job(
            &ns,
            &d::backup_job_name(&name),
            flavor,
            d::MODE_BACKUP,
            &[
                (labels::OWNED_BY_JOB_NAME, &name),
                (labels::OWNED_BY_JOB_NAMESPACE, &ns),
            ],
            &d::Owner {
                api_version: "backups.cozystack.io/v1alpha1",
                kind: "BackupJob",
                name: &name,
                uid: &uid,
            },
            &rendered,
        );
        return Step::Create {
            label: BATCH_JOBS,
            namespace: ns.clone(),
            body,
            selector: selector(flavor, &name, &ns)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            on_error: "failed to ensure batch/v1.Job",
            announce: None,
        };
    };
    match d::state(batch) {
        d::State::Complete => {
            let entry = drivers::catalog::Entry {
                driver_metadata: d::driver_metadata(flavor, &run.resolved.parameters),
                ..Default::default()
            };
            run.complete(entry, Some(flavor.backup_completed))
        }
        d::State::Failed(message) if message.is_empty() => run.fail(flavor.backup_failed),
        d::State::Failed(message) => run.fail(message),
        // Upstream waits forever for a Job that never finishes; ours ends at the backup deadline.
        d::State::Running => run.idle_until(run.deadline, || {
            let batch_name = batch["metadata"]["name"].as_str().unwrap_or_default();
            format!(
                "batch/v1 Job {ns}/{batch_name} did not complete within {}; raise the BackupClass parameter backupDeadline or the runner's --backup-deadline for long backups",
                go_duration(run.deadline)
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
    use crate::drivers::testkit::{Fixture, summary};

    fn observed() -> Observed {
        Observed {
            template: Some(
                json!({"spec": {"containers": [{"name": "backup", "image": "tool:1",
                "args": ["--app={{ .Release.Name }}", "--ns={{ .Release.Namespace }}", "--mode={{ .Mode }}",
                         "--bucket={{ .Parameters.bucketName }}", "--replicas={{ .Application.spec.replicas }}"]}]}}),
            ),
            batch_job: None,
            app: App::Found(json!({"metadata": {"name": "app-test"}, "spec": {"replicas": 3}})),
        }
    }

    fn with_job(conditions: Json) -> Observed {
        Observed {
            batch_job: Some(
                json!({"metadata": {"name": "nightly-backup"}, "status": {"conditions": conditions}}),
            ),
            app: App::NotNeeded,
            ..observed()
        }
    }

    fn f() -> Fixture {
        Fixture::new(
            "Generic",
            "app-test",
            "Job",
            &[("bucketName", "gen-bucket")],
        )
        .started(Duration::from_secs(60), Some("Running"))
    }

    #[test]
    fn the_first_pass_stamps_started_at_and_running() {
        let fresh = Fixture::new("Generic", "app-test", "Job", &[]);
        let step = decide(&fresh.run(None), &observed());
        let s = crate::drivers::testkit::status_of(&step);
        assert!(s.started_at.is_some());
        assert_eq!(s.phase.as_deref(), Some("Running"));
    }

    #[test]
    fn a_missing_strategy_or_application_fails_at_once() {
        let f = f();
        let run = f.run(None);
        assert_eq!(
            summary(&decide(
                &run,
                &Observed {
                    template: None,
                    ..observed()
                }
            )),
            (
                Some("Failed".into()),
                "BackupFailed".into(),
                "Job strategy not found: default".into()
            )
        );
        assert_eq!(
            summary(&decide(
                &run,
                &Observed {
                    app: App::Missing,
                    ..observed()
                }
            ))
            .2,
            "application not found or kind not registered: tenant-a/app-test (kind=\"Generic\")"
        );
    }

    #[test]
    fn the_batch_job_is_rendered_from_the_template() {
        let f = f();
        let Step::Create {
            label,
            body,
            selector,
            ..
        } = decide(&f.run(None), &observed())
        else {
            panic!("expected the batch Job to be created");
        };
        assert_eq!(label, BATCH_JOBS);
        assert_eq!(body["metadata"]["name"], "nightly-backup");
        assert_eq!(body["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(
            body["spec"]["template"]["spec"]["containers"][0]["args"],
            json!([
                "--app=app-test",
                "--ns=tenant-a",
                "--mode=backup",
                "--bucket=gen-bucket",
                "--replicas=3"
            ])
        );
        assert_eq!(
            selector[0],
            (
                "job.strategy.backups.cozystack.io/mode".to_owned(),
                "backup".to_owned()
            )
        );
    }

    #[test]
    fn job_conditions_decide() {
        let f = f();
        let run = f.run(None);
        let done = decide(
            &run,
            &with_job(json!([
            {"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}])),
        );
        assert_eq!(
            summary(&done),
            (
                Some("Succeeded".into()),
                "BackupCompleted".into(),
                "backup Job completed".into()
            )
        );
        let Step::Complete { backup, .. } = done else {
            unreachable!()
        };
        let b = serde_json::to_value(backup.as_ref()).unwrap();
        assert_eq!(
            b["spec"]["driverMetadata"],
            json!({"job.strategy.backups.cozystack.io/parameter/bucketName": "gen-bucket"})
        );
        assert!(b["status"].get("artifact").is_none());
        assert_eq!(
            summary(&decide(&run, &with_job(json!([{"type": "Failed", "status": "True",
                "reason": "BackoffLimitExceeded", "message": "Job has reached the specified backoff limit"}])))).2,
            "Job has reached the specified backoff limit"
        );
        assert_eq!(
            summary(&decide(
                &run,
                &with_job(json!([{"type": "Failed", "status": "True"}]))
            ))
            .2,
            "backup Job reported Failed"
        );
        assert_eq!(
            decide(&run, &with_job(json!([]))),
            Step::Idle(Some(Duration::from_secs(6 * 3600 - 60)))
        );
        assert_eq!(
            summary(&decide(
                &f.run(Some(Duration::from_secs(30))),
                &with_job(json!([]))
            ))
            .2,
            "batch/v1 Job tenant-a/nightly-backup did not complete within 30s; raise the BackupClass parameter backupDeadline or the runner's --backup-deadline for long backups"
        );
    }
}
