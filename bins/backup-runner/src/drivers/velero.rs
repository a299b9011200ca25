//! The Velero driver's backup path (VMInstance and VMDisk applications, or any kind the API
//! serves): what to do next, decided from what is observed.
//!
//! ```text
//!  startedAt (first pass only; phase stays empty) ─► Velero strategy (StrategyNotReady, 30 min)
//!  ─► Velero Backups of the job in cozy-velero (owned-by labels):
//!     none ─► read the application and, for a VMInstance, its launcher pods (fresh, once)
//!             ─► create <ns>.<job>-xxxxx (Events VeleroBackupCreated / VeleroBackupCreationFailed)
//!     several ─► phase Failed (no message, as upstream)
//!     one ─► phase Running ─► Completed: catalog Backup + Succeeded (no Ready condition)
//!                            Failed / PartiallyFailed: Failed with Velero's and the DataUploads' reasons
//!                            other: wait; Failed after the backup deadline (upstream waits forever)
//! ```
//!
//! Observation is from the caches except right before the create (the application and the VM's
//! pods, which nothing else needs watched) and right after a failure (the backup's DataUploads,
//! listed fresh so that a failure that reached the Velero Backup first is still explained).

use std::ops::ControlFlow;
use std::time::Duration;

use api::contract::phases;
use drivers::velero as d;
use kube::api::{Api, ListParams};
use kube::core::{ApiResource, PartialObjectMeta};
use serde_json::Value as Json;

use super::{Announce, Run, Step};
use crate::context::{Context, Error, api_err};

/// Cache label of Velero Backups (labelled with the owning job, in cozy-velero).
pub const BACKUPS: &str = "velero.Backup";

/// What is observed for one job.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The Velero strategy's `spec.template.spec`.
    pub template: Option<Json>,
    /// The Velero Backups labelled with the job (normally one).
    pub backups: Vec<Json>,
    /// The application (raw object), or why it could not be read; read only when a Velero Backup
    /// is about to be created.
    pub app: Option<Result<Json, String>>,
    /// The VM's launcher pods (metadata, name order); VMInstance only, read with the application.
    pub pods: Vec<Json>,
    /// The DataUploads of cozy-velero; read only when the Velero Backup failed.
    pub data_uploads: Vec<Json>,
}

/// Observes: the caches, plus the fresh reads described in the module header.
pub async fn observe(ctx: &Context, run: &Run<'_>) -> Result<Observed, Error> {
    let template = ctx
        .caches
        .template("Velero", &run.resolved.strategy_ref.name)
        .map(|t| t["spec"].clone());
    let backups = ctx.caches.owned_by_job(BACKUPS, d::NAMESPACE, run.job);
    let mut o = Observed {
        template,
        backups,
        ..Default::default()
    };
    if run.status.started_at.is_none() || o.template.is_none() {
        return Ok(o);
    }
    if o.backups.is_empty() {
        let app = read_app(ctx, run).await?;
        if app.is_ok() && run.app.kind == d::VM_INSTANCE_KIND {
            o.pods = vm_pods(ctx, run).await;
        }
        o.app = Some(app);
    } else if let [backup] = o.backups.as_slice()
        && matches!(
            d::phase(backup),
            d::PHASE_FAILED | d::PHASE_PARTIALLY_FAILED
        )
    {
        o.data_uploads = data_uploads(ctx).await;
    }
    Ok(o)
}

/// The application as the API serves it; `Err(message)` when it does not exist or its kind is not
/// served (the job fails with it), `Error` when the API could not answer (retried).
async fn read_app(ctx: &Context, run: &Run<'_>) -> Result<Result<Json, String>, Error> {
    let group = run.app.api_group.as_deref().unwrap_or_default();
    let kind = run.app.kind.as_str();
    let ns = run.namespace();
    let no_match = || format!("no matches for kind {kind:?} in group {group:?}");
    let (resource, namespaced) = match (group, kind) {
        (api::contract::groups::APPS, d::VM_INSTANCE_KIND) => (
            ApiResource::erase::<api::thirdparty::apps::VMInstance>(&()),
            true,
        ),
        (api::contract::groups::APPS, d::VM_DISK_KIND) => (
            ApiResource::erase::<api::thirdparty::apps::VMDisk>(&()),
            true,
        ),
        _ => match discover(ctx, group, kind).await? {
            Some(found) => found,
            None => return Ok(Err(no_match())),
        },
    };
    let api = ctx.api(&resource, namespaced.then_some(ns.as_str()));
    let name = &run.app.name;
    match api.get_opt(name).await {
        Ok(Some(app)) => Ok(Ok(serde_json::to_value(app).unwrap_or_default())),
        Ok(None) => {
            let qualified = if resource.group.is_empty() {
                resource.plural.clone()
            } else {
                format!("{}.{}", resource.plural, resource.group)
            };
            Ok(Err(format!("{qualified} {name:?} not found")))
        }
        Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 429 => {
            Ok(Err(s.message))
        }
        Err(e) => Err(api_err("get", format!("{kind} {ns}/{name}"))(e)),
    }
}

/// The API resource serving `group`/`kind` and whether it is namespaced (`None`: not served).
async fn discover(
    ctx: &Context,
    group: &str,
    kind: &str,
) -> Result<Option<(ApiResource, bool)>, Error> {
    let found = if group.is_empty() {
        let gvk = kube::api::GroupVersionKind::gvk("", "v1", kind);
        kube::discovery::pinned_kind(&ctx.client, &gvk)
            .await
            .map(Some)
    } else {
        kube::discovery::group(&ctx.client, group)
            .await
            .map(|g| g.recommended_kind(kind))
    };
    match found {
        Ok(Some((resource, caps))) => Ok(Some((
            resource,
            caps.scope == kube::discovery::Scope::Namespaced,
        ))),
        Ok(None) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(kube::Error::Discovery(_)) => Ok(None),
        Err(e) => Err(api_err("discover", format!("{kind} in group {group:?}"))(e)),
    }
}

/// The VM's launcher pods (metadata only, name order). A failure only loses the IP and MAC, as
/// upstream.
async fn vm_pods(ctx: &Context, run: &Run<'_>) -> Vec<Json> {
    let api: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(ctx.client.clone(), &run.namespace());
    let selector = format!("{}={}{}", d::VM_POD_LABEL, d::VM_PREFIX, run.app.name);
    match api
        .list_metadata(&ListParams::default().labels(&selector))
        .await
    {
        Ok(list) => {
            let mut pods: Vec<PartialObjectMeta<_>> = list.items;
            pods.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            pods.into_iter()
                .filter_map(|p| serde_json::to_value(p).ok())
                .collect()
        }
        Err(e) => {
            tracing::warn!(error = %e, "could not list the VM's pods; backing up without its IP and MAC");
            Vec::new()
        }
    }
}

/// The DataUploads of cozy-velero (empty when they cannot be listed, as upstream).
async fn data_uploads(ctx: &Context) -> Vec<Json> {
    let resource = ApiResource::erase::<api::thirdparty::velero::v2alpha1::DataUpload>(&());
    match ctx
        .api(&resource, Some(d::NAMESPACE))
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list
            .items
            .into_iter()
            .filter_map(|o| serde_json::to_value(o).ok())
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "could not list DataUploads");
            Vec::new()
        }
    }
}

/// One step of the driver.
pub async fn step(ctx: &Context, run: &Run<'_>) -> Result<Step, Error> {
    Ok(decide(run, &observe(ctx, run).await?))
}

/// The pure decision.
pub fn decide(run: &Run<'_>, o: &Observed) -> Step {
    // Upstream's Velero driver has no gate on the application kind: any kind the API serves.
    let template = match run.opening(|_| Ok(()), false, o.template.as_ref()) {
        ControlFlow::Continue(template) => template,
        ControlFlow::Break(step) => return step,
    };
    let ns = run.namespace();
    let name = run.name();
    match o.backups.as_slice() {
        [] => {
            let app = match &o.app {
                Some(Ok(app)) => app,
                Some(Err(e)) => return run.fail(format!("{}: {e}", d::CREATE_FAILED)),
                // Not read (cannot happen after observe); look again.
                None => return Step::Idle(Some(Duration::from_secs(1))),
            };
            let resources = d::vm_resources(&run.app.kind, app, &o.pods);
            let spec = d::render_spec(template, app, &run.resolved.parameters);
            let generate_name = d::generate_name(&ns, &name);
            Step::Create {
                label: BACKUPS,
                namespace: d::NAMESPACE.into(),
                body: d::backup_body(&ns, &name, &spec, resources.as_ref()),
                selector: run.owned_by(),
                on_error: d::CREATE_FAILED,
                announce: Some(Announce {
                    created: (
                        api::contract::event_reasons::VELERO_BACKUP_CREATED,
                        d::created_note(&generate_name),
                    ),
                    failed: (
                        api::contract::event_reasons::VELERO_BACKUP_CREATION_FAILED,
                        d::creation_failed_note(&generate_name),
                    ),
                }),
            }
        }
        [backup] => {
            if let Some(step) = run.running() {
                return step;
            }
            let phase = d::phase(backup);
            match phase {
                d::PHASE_COMPLETED => {
                    let c = d::catalog(backup);
                    let entry = drivers::catalog::Entry {
                        taken_at: c.taken_at,
                        driver_metadata: c.driver_metadata,
                        artifact_uri: Some(c.artifact_uri),
                        underlying_resources: c.underlying_resources,
                        ..Default::default()
                    };
                    // Upstream writes no Ready condition for a Velero success.
                    run.complete(entry, None)
                }
                d::PHASE_FAILED | d::PHASE_PARTIALLY_FAILED => {
                    run.fail(d::failure_message(backup, &o.data_uploads))
                }
                _ => run.idle_until(run.deadline, || {
                    let velero_name = backup["metadata"]["name"].as_str().unwrap_or_default();
                    format!(
                        "Velero Backup {}/{velero_name} did not complete within {} (current phase={phase:?}); raise the BackupClass parameter backupDeadline or the runner's --backup-deadline for very large volumes",
                        d::NAMESPACE,
                        drivers::status::go_duration(run.deadline)
                    )
                }),
            }
        }
        _ => {
            // Upstream marks the job Failed without a message, condition or completion time.
            let mut status = run.status.clone();
            status.phase = Some(phases::FAILED.into());
            Step::Status {
                status,
                recheck: None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::contract::{annotations, reasons};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    use crate::drivers::testkit::Fixture;

    fn fixture() -> Fixture {
        Fixture::new("VMInstance", "web", "Velero", &[("bsl", "cozy-default")])
            .named("bj", "tenant", "vm")
    }

    /// The run `elapsed_min` minutes after the start; before it (`startedAt` unset) when negative.
    fn run<'a>(f: &'a Fixture, phase: Option<&str>, elapsed_min: i64) -> Run<'a> {
        let mut run = f.run_after(
            phase,
            elapsed_min.max(0).unsigned_abs(),
            Duration::from_secs(60 * 60),
        );
        if elapsed_min < 0 {
            run.status.started_at = None;
        }
        run
    }

    fn velero(phase: &str, status: Json) -> Json {
        let mut s = status;
        if !phase.is_empty() {
            s["phase"] = json!(phase);
        }
        json!({"metadata": {"name": "tenant.bj-x1", "namespace": "cozy-velero",
                            "creationTimestamp": "2026-01-01T00:00:01Z",
                            "annotations": {annotations::UNDERLYING_RESOURCES: r#"{"ip":"10.0.0.5"}"#}},
               "status": s})
    }

    fn observed(backups: Vec<Json>) -> Observed {
        Observed {
            template: Some(json!({"storageLocation": "{{ .Parameters.bsl }}",
                                  "includedNamespaces": ["{{ .Application.metadata.namespace }}"]})),
            backups,
            ..Default::default()
        }
    }

    fn status_of(step: &Step) -> &api::backups::BackupJobStatus {
        match step {
            Step::Status { status, .. } => status,
            Step::Complete { status, .. } => status,
            other => panic!("not a status step: {other:?}"),
        }
    }

    #[test]
    fn start_then_strategy_then_create() {
        let f = fixture();
        let first = decide(&run(&f, None, -1), &observed(vec![]));
        assert_eq!(status_of(&first).phase, None, "startedAt only");
        assert!(status_of(&first).started_at.is_some());

        let mut o = observed(vec![]);
        o.template = None;
        let waiting = decide(&run(&f, None, 1), &o);
        assert_eq!(
            drivers::status::ready(&status_of(&waiting).conditions)
                .unwrap()
                .reason,
            reasons::STRATEGY_NOT_READY
        );

        let mut o = observed(vec![]);
        o.app = Some(Ok(
            json!({"kind": "VMInstance", "metadata": {"name": "web", "namespace": "tenant"},
                               "spec": {"disks": [{"name": "web-root"}]}}),
        ));
        o.pods = vec![json!({"metadata": {"name": "p", "annotations": {d::OVN_IP: "10.0.0.5"}}})];
        match decide(&run(&f, None, 1), &o) {
            Step::Create {
                label,
                namespace,
                body,
                selector,
                on_error,
                announce: Some(Announce { created, failed }),
            } => {
                assert_eq!(
                    (label, namespace.as_str(), on_error),
                    (BACKUPS, "cozy-velero", "failed to create Velero Backup")
                );
                assert_eq!(body["metadata"]["generateName"], "tenant.bj-");
                assert_eq!(body["spec"]["storageLocation"], "cozy-default");
                assert_eq!(body["spec"]["includedNamespaces"], json!(["tenant"]));
                assert_eq!(
                    body["spec"]["orLabelSelectors"],
                    json!([{"matchLabels": {"apps.cozystack.io/application.kind": "VMDisk",
                                            "apps.cozystack.io/application.name": "web-root"}}])
                );
                assert_eq!(
                    body["metadata"]["annotations"][annotations::UNDERLYING_RESOURCES],
                    r#"{"dataVolumes":[{"dataVolumeName":"vm-disk-web-root","applicationName":"web-root"}],"ip":"10.0.0.5"}"#
                );
                assert_eq!(selector.len(), 2);
                assert_eq!(
                    created,
                    (
                        "VeleroBackupCreated",
                        "Created Velero Backup cozy-velero/tenant.bj-".to_owned()
                    )
                );
                assert_eq!(
                    failed,
                    (
                        "VeleroBackupCreationFailed",
                        "Failed to create Velero Backup cozy-velero/tenant.bj-".to_owned()
                    )
                );
            }
            other => panic!("{other:?}"),
        }

        let mut o = observed(vec![]);
        o.app = Some(Err("vminstances.apps.cozystack.io \"web\" not found".into()));
        let failed = decide(&run(&f, None, 1), &o);
        assert_eq!(
            status_of(&failed).message.as_deref(),
            Some("failed to create Velero Backup: vminstances.apps.cozystack.io \"web\" not found")
        );
    }

    #[test]
    fn the_backup_phases() {
        let f = fixture();
        let running = decide(&run(&f, None, 1), &observed(vec![velero("", json!({}))]));
        assert_eq!(status_of(&running).phase.as_deref(), Some("Running"));

        for phase in [
            "",
            "New",
            "InProgress",
            "WaitingForPluginOperations",
            "Finalizing",
        ] {
            assert_eq!(
                decide(
                    &run(&f, Some("Running"), 10),
                    &observed(vec![velero(phase, json!({}))])
                ),
                Step::Idle(Some(Duration::from_secs(50 * 60))),
                "{phase}"
            );
        }
        let late = decide(
            &run(&f, Some("Running"), 61),
            &observed(vec![velero("InProgress", json!({}))]),
        );
        assert_eq!(
            status_of(&late).message.as_deref(),
            Some(
                "Velero Backup cozy-velero/tenant.bj-x1 did not complete within 1h0m0s (current phase=\"InProgress\"); raise the BackupClass parameter backupDeadline or the runner's --backup-deadline for very large volumes"
            )
        );

        let mut o = observed(vec![velero(
            "PartiallyFailed",
            json!({"backupItemOperationsAttempted": 1, "backupItemOperationsFailed": 1}),
        )]);
        o.data_uploads = vec![
            json!({"metadata": {"name": "tenant.bj-x1-abcde"}, "spec": {"sourcePVC": "vm-disk-web-root"},
                                     "status": {"phase": "Failed", "message": "boom"}}),
        ];
        let failed = decide(&run(&f, Some("Running"), 2), &o);
        let s = status_of(&failed);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(
            s.message.as_deref(),
            Some(
                "Velero Backup failed with phase PartiallyFailed; async item operations failed 1 (completed 0, attempted 1); DataUpload tenant.bj-x1-abcde failed for PVC vm-disk-web-root: boom"
            )
        );

        let done = decide(
            &run(&f, Some("Running"), 2),
            &observed(vec![velero(
                "Completed",
                json!({"startTimestamp": "2026-01-01T00:00:02Z"}),
            )]),
        );
        match done {
            Step::Complete { backup, status } => {
                assert_eq!(status.phase.as_deref(), Some("Succeeded"));
                assert!(
                    status.conditions.is_empty(),
                    "Velero writes no Ready condition"
                );
                assert_eq!(status.backup_ref.unwrap().name, "bj");
                let b = serde_json::to_value(&*backup).unwrap();
                assert_eq!(
                    b,
                    json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
                           "metadata": {"name": "bj", "namespace": "tenant"},
                           "spec": {"applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "VMInstance", "name": "web"},
                                    "strategyRef": {"apiGroup": "strategy.backups.cozystack.io", "kind": "Velero", "name": "vm"},
                                    "takenAt": "2026-01-01T00:00:02Z",
                                    "driverMetadata": {"velero.io/backup-name": "tenant.bj-x1",
                                                       "velero.io/backup-namespace": "cozy-velero"}},
                           "status": {"phase": "Ready", "artifact": {"uri": "velero://cozy-velero/tenant.bj-x1"},
                                      "underlyingResources": {"ip": "10.0.0.5"}}})
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn two_velero_backups_fail_the_job_without_a_message() {
        let f = fixture();
        let step = decide(
            &run(&f, Some("Running"), 1),
            &observed(vec![velero("", json!({})), velero("", json!({}))]),
        );
        let s = status_of(&step);
        assert_eq!(s.phase.as_deref(), Some("Failed"));
        assert_eq!(
            (s.message.as_deref(), s.completed_at.as_ref()),
            (None, None)
        );
        assert!(s.conditions.is_empty());
    }
}
