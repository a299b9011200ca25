//! The safety backup (ours): before an in-place purge, a cnpg Backup of the live database and a
//! catalog Backup `<job>-safety` that restores it, or a refusal to purge.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use api::ConditionStatus;
use api::TypedLocalObjectReference;
use api::backups::{Backup, RestoreJob, RestoreJobStatus};
use api::contract::{condition_types, event_reasons, groups, labels, reasons};
use api::meta::find_condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value as Json, json};

use super::{Observed, Pass, Target, condition_is_true, deleting, remaining, set};
use crate::cnpg::{self as driver};
use crate::restore::skeleton::{fail, owned_by};
use crate::restore::{Action, Event, ObjectRef, OnError, Step, elapsed};
use crate::status::go_duration;

/// The name of the safety backup (the cnpg Backup and its catalog entry) of a RestoreJob.
pub fn safety_backup_name(job: &str) -> String {
    format!("{job}-safety")
}

/// The safety cnpg Backup of the live Cluster.
pub fn safety_cnpg_backup(job: &RestoreJob, t: &Target) -> Json {
    let name = safety_backup_name(job.metadata.name.as_deref().unwrap_or_default());
    let mut body = driver::cnpg_backup(&t.namespace, "", &t.cluster);
    let meta = &mut body["metadata"];
    if let Some(m) = meta.as_object_mut() {
        m.remove("generateName");
    }
    meta["name"] = json!(name);
    let mut l = Map::new();
    for (k, v) in owned_by(job) {
        l.insert(k, json!(v));
    }
    l.insert(labels::CNPG_CLUSTER.into(), json!(t.cluster));
    l.insert(labels::SAFETY_BACKUP.into(), json!("true"));
    l.insert(labels::SAFETY_BACKUP_FOR.into(), json!(job.metadata.name));
    meta["labels"] = Json::Object(l);
    body
}

/// The catalog entry of a completed safety backup: the target application as it was, restorable
/// by another RestoreJob through the same strategy; labelled as a safety backup.
pub fn safety_catalog_backup(
    o: &Observed<'_>,
    t: &Target,
    completed: &Json,
    live_cluster: &Json,
    app: &Json,
    parameters: &BTreeMap<String, String>,
) -> Backup {
    let (job, backup, object_store, now) = (o.job, o.backup, o.object_store, &o.now);
    let server = driver::live_server_name(live_cluster).unwrap_or_else(|| t.cluster.clone());
    // The live archive's coordinates, shaped like a rendered template for the shared helper.
    let conf = object_store.map(|o| &o["spec"]["configuration"]);
    let conf = conf.unwrap_or(&Json::Null);
    let rendered = json!({"barmanObjectStore": {
        "destinationPath": conf["destinationPath"],
        "endpointURL": conf["endpointURL"],
        "s3Credentials": if conf["s3Credentials"].is_object() {
            json!({"secretRef": {"name": conf["s3Credentials"]["accessKeyId"]["name"]}})
        } else { Json::Null },
    }});
    let (md, uri, taken) = driver::catalog_fields(&driver::Completed {
        cnpg_backup: completed,
        cluster: &t.cluster,
        server_name: &server,
        rendered: &rendered,
    });
    let name = safety_backup_name(job.metadata.name.as_deref().unwrap_or_default());
    let entry = crate::catalog::Entry {
        taken_at: taken.and_then(|s| s.parse().ok().map(Time)),
        driver_metadata: md,
        artifact_uri: Some(uri),
        underlying_resources: Some(driver::snapshot(app, parameters)),
        recoverable_window: driver::recoverable_window(completed, object_store, &server),
        ..Default::default()
    };
    // The catalog helper builds entries for a BackupJob; the safety backup has the shape of one
    // made by a job of that name for the target application (no Plan).
    let mut shape = api::backups::BackupJob::default();
    shape.metadata.name = Some(name);
    shape.metadata.namespace = Some(t.namespace.clone());
    shape.spec.application_ref =
        TypedLocalObjectReference::new(groups::APPS, driver::APP_KIND, &t.app);
    let mut b = crate::catalog::backup(&shape, &backup.spec.strategy_ref, entry, now);
    b.metadata.labels = Some(BTreeMap::from([
        (labels::SAFETY_BACKUP.to_owned(), "true".to_owned()),
        (
            labels::SAFETY_BACKUP_FOR.to_owned(),
            job.metadata.name.clone().unwrap_or_default(),
        ),
    ]));
    b
}

/// The `Failed` status of a refused safety backup (`SafetyBackupReady=False/SafetyBackupFailed`).
fn safety_failed(status: &RestoreJobStatus, message: &str, now: &Time) -> Step {
    let mut s = status.clone();
    set(
        &mut s,
        condition_types::SAFETY_BACKUP_READY,
        ConditionStatus::False,
        reasons::SAFETY_BACKUP_FAILED,
        message,
        now,
    );
    fail(
        &s,
        message,
        vec![Event::warning(event_reasons::SAFETY_BACKUP_FAILED, message)],
        now,
    )
}

/// The step that attaches WAL archiving to the live Cluster before its safety backup, as the
/// backup path does: its ObjectStore (named after the Cluster, from the strategy rendered against
/// the target) and the barman-cloud plugin entry under the server name a backup would choose
/// (`archive_server_name`: a recovered Cluster gets a name of its own); `None` once the Cluster
/// archives.
fn attach_archiving(
    t: &Target,
    live: &Json,
    object_store: Option<&Json>,
    rendered: &Json,
) -> Option<Step> {
    if driver::live_server_name(live).is_some() {
        return None;
    }
    let on_error = OnError {
        prefix: "failed to attach barman-cloud plugin to Cluster",
        resume: None,
    };
    if object_store.is_none() {
        let uid = live["metadata"]["uid"].as_str().unwrap_or_default();
        return Some(Step::Act {
            action: Action::Create(driver::object_store(
                &t.namespace,
                &t.cluster,
                uid,
                rendered,
            )),
            events: Vec::new(),
            on_error,
        });
    }
    let template_server = rendered["serverName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or(&t.cluster);
    let server = driver::archive_server_name(live, template_server);
    let mut plugins = live["spec"]["plugins"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    plugins.extend(
        driver::cluster_plugins(&t.namespace, &t.cluster, &server)["spec"]["plugins"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    Some(Step::Act {
        action: Action::MergePatch {
            target: ObjectRef {
                api_version: "postgresql.cnpg.io/v1",
                kind: "Cluster",
                namespace: t.namespace.clone(),
                name: t.cluster.clone(),
            },
            patch: json!({"spec": {"plugins": plugins}}),
            field_manager: driver::FIELD_MANAGER,
        },
        events: Vec::new(),
        on_error,
    })
}

/// 12b (ours): the safety backup of the live database before an in-place purge.
pub(super) fn backup(p: &Pass<'_>, status: &mut RestoreJobStatus) -> ControlFlow<Step> {
    let Pass {
        o,
        now,
        options,
        t,
        app,
        parameters,
        rendered,
        ..
    } = p;
    let job = o.job;
    let live = o.cluster.filter(|c| !deleting(c));
    if let Some(live) = live
        && t.in_place()
        && !options.skip_safety_backup
        && !condition_is_true(status, condition_types::SAFETY_BACKUP_READY)
    {
        let job_name = job.metadata.name.clone().unwrap_or_default();
        let name = safety_backup_name(&job_name);
        let Some(since) = find_condition(&status.conditions, condition_types::SAFETY_BACKUP_READY)
            .map(|c| c.last_transition_time.clone())
        else {
            set(
                status,
                condition_types::SAFETY_BACKUP_READY,
                ConditionStatus::False,
                reasons::SAFETY_BACKUP_RUNNING,
                &format!(
                    "backing up the live cluster {}/{} as Backup {}/{name} before purging it",
                    t.namespace, t.cluster, t.namespace
                ),
                now,
            );
            return ControlFlow::Break(Step::Status {
                status: status.clone(),
                events: Vec::new(),
                requeue: None,
            });
        };
        let late = elapsed(&since, now) > options.safety_backup_timeout;
        let refuse = |why: String| {
            format!(
                "safety backup cnpg.io/Backup {}/{name} {why}; refusing to purge the live cluster {}/{} (set spec.options.skipSafetyBackup=true to restore without a safety backup)",
                t.namespace, t.namespace, t.cluster
            )
        };
        // A Cluster that does not archive (one a previous restore recreated, before any
        // backup attached the plugin again) gets the plugin the way a backup attaches it.
        if o.safety_cnpg_backup.is_none()
            && !late
            && let Some(step) = attach_archiving(t, live, o.object_store, rendered)
        {
            return ControlFlow::Break(step);
        }
        let Some(cnpg_backup) = o.safety_cnpg_backup else {
            if late {
                return ControlFlow::Break(safety_failed(
                    status,
                    &refuse(format!(
                        "was not created within {}",
                        go_duration(options.safety_backup_timeout)
                    )),
                    now,
                ));
            }
            return ControlFlow::Break(Step::Act {
                action: Action::Create(safety_cnpg_backup(job, t)),
                events: vec![Event::normal(
                    event_reasons::SAFETY_BACKUP_STARTED,
                    format!(
                        "backing up the live cluster {}/{} as {name} before purging it",
                        t.namespace, t.cluster
                    ),
                )],
                on_error: OnError {
                    prefix: "failed to create the safety backup",
                    resume: None,
                },
            });
        };
        let (phase, error) = driver::backup_phase(cnpg_backup);
        if phase == driver::PHASE_FAILED {
            let why = if error.is_empty() {
                "failed".to_owned()
            } else {
                format!("failed: {error}")
            };
            return ControlFlow::Break(safety_failed(status, &refuse(why), now));
        }
        if phase != driver::PHASE_COMPLETED {
            if late {
                return ControlFlow::Break(safety_failed(
                    status,
                    &refuse(format!(
                        "did not complete within {} (phase={phase:?})",
                        go_duration(options.safety_backup_timeout)
                    )),
                    now,
                ));
            }
            return ControlFlow::Break(Step::Wait {
                events: Vec::new(),
                requeue: Some(remaining(&since, options.safety_backup_timeout, now)),
            });
        }
        if o.safety_catalog.is_none() {
            let entry = safety_catalog_backup(o, t, cnpg_backup, live, app, parameters);
            return ControlFlow::Break(Step::Act {
                action: Action::Create(serde_json::to_value(entry).unwrap_or_default()),
                events: Vec::new(),
                on_error: OnError {
                    prefix: "failed to record the safety backup",
                    resume: None,
                },
            });
        }
        let message = format!(
            "Backup {}/{name} holds {}/{} as it was before this restore; restore from it to undo",
            t.namespace, t.namespace, t.app
        );
        set(
            status,
            condition_types::SAFETY_BACKUP_READY,
            ConditionStatus::True,
            reasons::SAFETY_BACKUP_COMPLETED,
            &message,
            now,
        );
        return ControlFlow::Break(Step::Status {
            status: status.clone(),
            events: vec![Event::normal(
                event_reasons::SAFETY_BACKUP_COMPLETED,
                message,
            )],
            requeue: None,
        });
    }
    ControlFlow::Continue(())
}
