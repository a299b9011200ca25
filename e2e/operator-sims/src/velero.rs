//! Simulated Velero: BackupStorageLocation validation, Backups with the CSI data mover's
//! DataUploads, and DeleteBackupRequests.
//!
//! BackupStorageLocations: a BSL is `Available` while the Secret key its `spec.credential` names
//! (default `cozy-backups-creds` / `cloud`) exists in the BSL's namespace, and `Unavailable`
//! otherwise. Both the BSLs and the Secrets are watched, so the phase follows a Secret appearing or
//! disappearing at once. Only key names of Secrets are kept in memory.
//!
//! Backups (the phases Velero's backup controller and data mover go through), and Restores (the
//! restore controller's phases):
//!
//! ```text
//!  "" ─► InProgress (startTimestamp, expiration = start + ttl)
//!     ─► snapshotMoveData and PVCs selected: one DataUpload <backup>-xxxxx per PVC
//!        ─► WaitingForPluginOperations ─► Finalizing[PartiallyFailed] ─► Completed │ PartiallyFailed
//!     ─► otherwise Completed
//!  DataUpload: "" ─► Accepted ─► Prepared ─► InProgress ─► Completed │ Failed (message)
//!  DeleteBackupRequest ─► the Backup and its DataUploads deleted ─► Processed
//!  Restore: "" ─► backup missing ─► FailedValidation (validationErrors)
//!              ─► InProgress (startTimestamp) ─► Completed (completionTimestamp, progress)
//!                                             │ Failed (failureReason) │ stays InProgress
//! ```
//!
//! What a backup selects is read the way Cozystack's strategies select it: the `VMInstance` and
//! `VMDisk` applications named by `apps.cozystack.io/application.{kind,name}` match labels in
//! `orLabelSelectors`/`labelSelector`, in `includedNamespaces`. Their PVCs are `vm-disk-<disk>`
//! (a VMDisk's own, a VMInstance's `spec.disks`). Test controls (annotations on a selected
//! application): [`crate::cnpg::ANNOTATION_FAIL_BACKUP`] (the backup ends `Failed` with the value as
//! `failureReason`), [`crate::cnpg::ANNOTATION_HANG`] (`"true"`: it stays `InProgress`),
//! [`ANNOTATION_FAIL_DATA_UPLOAD`] (on a VMDisk, or a VMInstance for all its disks: their
//! DataUploads fail with the value as message, the backup ends `PartiallyFailed`). Restore controls
//! sit on the Velero Backup a Restore names: [`crate::cnpg::ANNOTATION_FAIL_RESTORE`] (the restore
//! ends `Failed` with the value as `failureReason`), [`crate::cnpg::ANNOTATION_HANG_RESTORE`]
//! (`"true"`: it stays `InProgress`). A restore moves phases only: no object is recreated and no
//! data is downloaded. Every transition is one write; the next follows the watch event of that
//! write (no timers).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use api::contract::labels;
use api::thirdparty::apps::{VMDisk, VMInstance};
use api::thirdparty::velero::v2alpha1::DataUpload;
use api::thirdparty::velero::{Backup, BackupStorageLocation, DeleteBackupRequest, Restore};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::cache::{Cache, Key, spawn_sanitized_watches, spawn_watches};
use crate::cnpg::{
    ANNOTATION_FAIL_BACKUP, ANNOTATION_FAIL_RESTORE, ANNOTATION_HANG, ANNOTATION_HANG_RESTORE,
};
use crate::conditions::write_status;

/// Field manager of the simulated Velero.
pub const FIELD_MANAGER: &str = "operator-sims-velero";
/// Test control: DataUploads of this application's disks fail with this message.
pub const ANNOTATION_FAIL_DATA_UPLOAD: &str = "operator-sims.cozy-backups.io/fail-data-upload";
/// Label Velero puts on a backup's DataUploads.
pub const BACKUP_NAME_LABEL: &str = "velero.io/backup-name";
/// Label Velero puts on a backup's DataUploads (the backup's uid).
pub const BACKUP_UID_LABEL: &str = "velero.io/backup-uid";
/// Velero's default backup retention.
pub const DEFAULT_TTL: &str = "720h0m0s";

/// Replaces every Secret value with an empty string: the simulator needs only key names.
fn keys_only(v: &mut Value) {
    for field in ["data", "stringData"] {
        if let Some(map) = v.get_mut(field).and_then(Value::as_object_mut) {
            for value in map.values_mut() {
                *value = Value::String(String::new());
            }
        }
    }
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("annotations");
        meta.remove("managedFields");
    }
}

/// The phase and message a BSL should report given the Secrets seen.
pub fn desired_phase(bsl: &Value, secrets: &Cache) -> (&'static str, String) {
    let ns = bsl["metadata"]["namespace"].as_str().unwrap_or("");
    let name = bsl["spec"]["credential"]["name"]
        .as_str()
        .unwrap_or(api::contract::names::CREDENTIALS_SECRET);
    let key = bsl["spec"]["credential"]["key"].as_str().unwrap_or("cloud");
    let present = secrets
        .get(ns, name)
        .is_some_and(|s| s["data"].get(key).is_some());
    if present {
        ("Available", String::new())
    } else {
        (
            "Unavailable",
            format!("credentials Secret {ns}/{name} has no key {key}"),
        )
    }
}

/// Runs the simulator forever.
pub async fn run(client: kube::Client, readiness: runtime::Readiness) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let bsls = Arc::new(Cache::default());
    let secrets = Arc::new(Cache::default());
    let bsl_ar = ApiResource::erase::<BackupStorageLocation>(&());
    spawn_watches(
        &client,
        &readiness,
        &notify,
        vec![(&bsls, bsl_ar.clone(), "velero: watch BackupStorageLocation")],
    );
    spawn_sanitized_watches(
        &client,
        &readiness,
        &notify,
        keys_only,
        vec![(
            &secrets,
            ApiResource::erase::<Secret>(&()),
            "velero: watch Secret",
        )],
    );
    tokio::spawn(run_backups(client.clone(), readiness.clone()));
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    loop {
        notify.notified().await;
        for ((ns, name), bsl) in bsls.snapshot() {
            let (phase, message) = desired_phase(&bsl, &secrets);
            if bsl["status"]["phase"].as_str() == Some(phase)
                && bsl["status"]["message"].as_str().unwrap_or("") == message
            {
                continue;
            }
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let patch = json!({
                "status": {
                    "phase": phase,
                    "message": if message.is_empty() { Value::Null } else { Value::String(message) },
                    "lastValidationTime": now,
                }
            });
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &bsl_ar);
            match api
                .patch_status(&name, &params, &Patch::Merge(&patch))
                .await
            {
                Ok(_) => tracing::info!(
                    namespace = ns,
                    name,
                    phase,
                    "BackupStorageLocation validated"
                ),
                Err(e) => tracing::warn!(namespace = ns, name, error = %e, "status update failed"),
            }
        }
    }
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj["metadata"]["annotations"][key]
        .as_str()
        .filter(|v| !v.is_empty())
}

fn rfc3339(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// An application a backup selects: its kind and object.
pub type Selected = (&'static str, Value);

/// The `VMInstance` and `VMDisk` applications a Velero Backup selects (see the module header).
pub fn selected_apps(
    backup: &Value,
    vms: &BTreeMap<Key, Value>,
    disks: &BTreeMap<Key, Value>,
) -> Vec<Selected> {
    let spec = &backup["spec"];
    let namespaces: Option<Vec<&str>> = spec["includedNamespaces"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>())
        .filter(|v| !v.is_empty() && !v.contains(&"*"));
    let mut selectors: Vec<&Value> = spec["orLabelSelectors"]
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    if spec["labelSelector"].is_object() {
        selectors.push(&spec["labelSelector"]);
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for sel in selectors {
        let ml = &sel["matchLabels"];
        let (Some(kind), Some(name)) = (
            ml[labels::APPLICATION_KIND].as_str(),
            ml[labels::APPLICATION_NAME].as_str(),
        ) else {
            continue;
        };
        let (kind, cache): (&'static str, _) = match kind {
            "VMInstance" => ("VMInstance", vms),
            "VMDisk" => ("VMDisk", disks),
            _ => continue,
        };
        for ((ns, n), app) in cache {
            let in_scope = namespaces.as_ref().is_none_or(|v| v.contains(&ns.as_str()));
            if n == name && in_scope && seen.insert((kind, ns.clone(), n.clone())) {
                out.push((kind, app.clone()));
            }
        }
    }
    out
}

/// The PVCs `(namespace, pvc, disk)` of the selected applications, in order, without repeats.
pub fn selected_pvcs(apps: &[Selected]) -> Vec<(String, String, String)> {
    let mut out: Vec<(String, String, String)> = Vec::new();
    for (kind, app) in apps {
        let ns = app["metadata"]["namespace"].as_str().unwrap_or_default();
        let disks: Vec<&str> = match *kind {
            "VMDisk" => app["metadata"]["name"].as_str().into_iter().collect(),
            _ => app["spec"]["disks"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|d| d["name"].as_str().filter(|n| !n.is_empty()))
                .collect(),
        };
        for d in disks {
            let entry = (ns.to_owned(), format!("vm-disk-{d}"), d.to_owned());
            if !out.contains(&entry) {
                out.push(entry);
            }
        }
    }
    out
}

/// The failure message the DataUpload of `disk` gets, if a selected application asks for one.
pub fn data_upload_failure(apps: &[Selected], disk: &str) -> Option<String> {
    apps.iter()
        .filter(|(kind, app)| match *kind {
            "VMDisk" => app["metadata"]["name"].as_str() == Some(disk),
            _ => app["spec"]["disks"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|d| d["name"].as_str() == Some(disk)),
        })
        .find_map(|(_, app)| annotation(app, ANNOTATION_FAIL_DATA_UPLOAD).map(str::to_owned))
}

/// A DataUpload's name for a PVC: `<backup>-` and five characters derived from the PVC (stable,
/// so that a repeated create is a conflict rather than a duplicate).
pub fn data_upload_name(backup: &str, namespace: &str, pvc: &str) -> String {
    use sha2::Digest as _;
    let digest = hex::encode(sha2::Sha256::digest(
        format!("{namespace}/{pvc}").as_bytes(),
    ));
    format!("{backup}-{}", &digest[..5])
}

/// The DataUpload Velero's CSI data mover creates for a PVC of `backup`.
pub fn data_upload_body(backup: &Value, namespace: &str, pvc: &str) -> Value {
    let name = backup["metadata"]["name"].as_str().unwrap_or_default();
    let label: String = name.chars().take(63).collect();
    json!({
        "apiVersion": "velero.io/v2alpha1",
        "kind": "DataUpload",
        "metadata": {
            "name": data_upload_name(name, namespace, pvc),
            "namespace": backup["metadata"]["namespace"],
            "labels": {
                BACKUP_NAME_LABEL: label,
                BACKUP_UID_LABEL: backup["metadata"]["uid"],
            },
            "ownerReferences": [{
                "apiVersion": "velero.io/v1", "kind": "Backup", "name": name,
                "uid": backup["metadata"]["uid"], "controller": true,
            }],
        },
        "spec": {
            "snapshotType": "CSI",
            "sourcePVC": pvc,
            "sourceNamespace": namespace,
            "backupStorageLocation": backup["spec"]["storageLocation"],
            "operationTimeout": "10m0s",
            "csiSnapshot": {"volumeSnapshot": format!("velero-{pvc}-{}", &data_upload_name("", namespace, pvc)[1..])},
        },
    })
}

fn is_ours(upload: &Value, backup: &Value) -> bool {
    let name = backup["metadata"]["name"].as_str().unwrap_or_default();
    upload["metadata"]["namespace"] == backup["metadata"]["namespace"]
        && upload["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with(&format!("{name}-")))
        && upload["metadata"]["labels"][BACKUP_NAME_LABEL].is_string()
}

/// What the simulated Velero does next with a Backup.
#[derive(Debug, Clone, PartialEq)]
pub enum BackupAction {
    /// Replace its status with this.
    Status(Value),
    /// Create these DataUploads.
    CreateUploads(Vec<Value>),
}

/// The next step of a Velero Backup given the applications it selects and the DataUploads that
/// exist (`None`: nothing to do).
pub fn backup_next(
    backup: &Value,
    apps: &[Selected],
    uploads: &[Value],
    now: chrono::DateTime<chrono::Utc>,
) -> Option<BackupAction> {
    let status = if backup["status"].is_object() {
        backup["status"].clone()
    } else {
        json!({})
    };
    let with = |fields: Value| {
        let mut s = status.clone();
        for (k, v) in fields.as_object().into_iter().flatten() {
            s[k] = v.clone();
        }
        Some(BackupAction::Status(s))
    };
    let spec = &backup["spec"];
    let pvcs = if spec["snapshotMoveData"].as_bool() == Some(true)
        && spec["snapshotVolumes"].as_bool() != Some(false)
    {
        selected_pvcs(apps)
    } else {
        Vec::new()
    };
    let items = (apps.len() + pvcs.len()).max(1);
    let ours: Vec<&Value> = uploads.iter().filter(|u| is_ours(u, backup)).collect();
    match status["phase"].as_str().unwrap_or_default() {
        "" | "New" => {
            let ttl = spec["ttl"]
                .as_str()
                .filter(|t| !t.is_empty())
                .unwrap_or(DEFAULT_TTL);
            let ttl =
                runtime::duration::parse(ttl).unwrap_or(std::time::Duration::from_secs(720 * 3600));
            let expiration = now + chrono::Duration::from_std(ttl).unwrap_or_default();
            with(json!({
                "phase": "InProgress",
                "startTimestamp": rfc3339(now),
                "expiration": rfc3339(expiration),
                "version": 1,
                "formatVersion": "1.1.0",
            }))
        }
        "InProgress" => {
            if let Some(reason) = apps
                .iter()
                .find_map(|(_, a)| annotation(a, ANNOTATION_FAIL_BACKUP))
            {
                return with(json!({
                    "phase": "Failed",
                    "failureReason": reason,
                    "completionTimestamp": rfc3339(now),
                }));
            }
            if apps
                .iter()
                .any(|(_, a)| annotation(a, ANNOTATION_HANG) == Some("true"))
            {
                return None;
            }
            if pvcs.is_empty() {
                return with(json!({
                    "phase": "Completed",
                    "completionTimestamp": rfc3339(now),
                    "progress": {"totalItems": items, "itemsBackedUp": items},
                }));
            }
            let missing: Vec<Value> = pvcs
                .iter()
                .filter(|(ns, pvc, _)| {
                    !ours.iter().any(|u| {
                        u["spec"]["sourcePVC"].as_str() == Some(pvc.as_str())
                            && u["spec"]["sourceNamespace"].as_str() == Some(ns.as_str())
                    })
                })
                .map(|(ns, pvc, _)| data_upload_body(backup, ns, pvc))
                .collect();
            if !missing.is_empty() {
                return Some(BackupAction::CreateUploads(missing));
            }
            with(json!({
                "phase": "WaitingForPluginOperations",
                "backupItemOperationsAttempted": ours.len(),
            }))
        }
        "WaitingForPluginOperations" => {
            let phase = |u: &&Value| u["status"]["phase"].as_str().unwrap_or_default().to_owned();
            if ours
                .iter()
                .any(|u| !matches!(phase(u).as_str(), "Completed" | "Failed" | "Canceled"))
            {
                return None;
            }
            let failed = ours.iter().filter(|u| phase(u) != "Completed").count();
            with(json!({
                "phase": if failed == 0 { "Finalizing" } else { "FinalizingPartiallyFailed" },
                "backupItemOperationsCompleted": ours.len() - failed,
                "backupItemOperationsFailed": failed,
            }))
        }
        "Finalizing" => with(json!({
            "phase": "Completed",
            "completionTimestamp": rfc3339(now),
            "progress": {"totalItems": items, "itemsBackedUp": items},
        })),
        "FinalizingPartiallyFailed" => with(json!({
            "phase": "PartiallyFailed",
            "completionTimestamp": rfc3339(now),
            "errors": status["backupItemOperationsFailed"].as_u64().unwrap_or(1),
            "progress": {"totalItems": items, "itemsBackedUp": items},
        })),
        _ => None,
    }
}

/// The next status of a DataUpload (`None`: terminal). `failure` is the message it fails with.
pub fn upload_next(
    upload: &Value,
    failure: Option<&str>,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Value> {
    let mut s = if upload["status"].is_object() {
        upload["status"].clone()
    } else {
        json!({})
    };
    let now = rfc3339(now);
    match s["phase"].as_str().unwrap_or_default() {
        "" | "New" => {
            s["phase"] = json!("Accepted");
            s["acceptedTimestamp"] = json!(now);
            s["acceptedByNode"] = json!("node-1");
        }
        "Accepted" => s["phase"] = json!("Prepared"),
        "Prepared" => {
            s["phase"] = json!("InProgress");
            s["startTimestamp"] = json!(now);
            s["node"] = json!("node-1");
        }
        "InProgress" => {
            s["completionTimestamp"] = json!(now);
            match failure {
                Some(message) => {
                    s["phase"] = json!("Failed");
                    s["message"] = json!(message);
                }
                None => {
                    let uid = upload["metadata"]["uid"].as_str().unwrap_or_default();
                    s["phase"] = json!("Completed");
                    s["path"] = json!(format!("/host_pods/{uid}/volumes"));
                    s["snapshotID"] = json!(&data_upload_name("", uid, "snapshot")[1..]);
                    s["progress"] = json!({"totalBytes": 1_048_576, "bytesDone": 1_048_576});
                }
            }
        }
        _ => return None,
    }
    Some(s)
}

/// Runs the Backup, DataUpload and DeleteBackupRequest part of the simulated Velero forever.
/// The next status of a Velero Restore given the Backup it names (`None`: missing); `None` when
/// there is nothing to do.
pub fn restore_next(
    restore: &Value,
    backup: Option<&Value>,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<Value> {
    let status = &restore["status"];
    match status["phase"].as_str().unwrap_or_default() {
        "" | "New" => Some(match backup {
            None => json!({"phase": "FailedValidation", "validationErrors": [format!(
                "Error retrieving backup: backups.velero.io {:?} not found",
                restore["spec"]["backupName"].as_str().unwrap_or_default()
            )]}),
            Some(_) => json!({"phase": "InProgress", "startTimestamp": rfc3339(now)}),
        }),
        "InProgress" => {
            let mut next = status.clone();
            next["completionTimestamp"] = json!(rfc3339(now));
            match backup.and_then(|b| annotation(b, ANNOTATION_FAIL_RESTORE)) {
                Some(reason) => {
                    next["phase"] = json!("Failed");
                    next["failureReason"] = json!(reason);
                }
                None if backup.and_then(|b| annotation(b, ANNOTATION_HANG_RESTORE))
                    == Some("true") =>
                {
                    return None;
                }
                None => {
                    next["phase"] = json!("Completed");
                    next["progress"] = json!({"itemsRestored": 1, "totalItems": 1});
                }
            }
            Some(next)
        }
        _ => None,
    }
}

async fn run_backups(client: kube::Client, readiness: runtime::Readiness) {
    let notify = Arc::new(Notify::new());
    let backups = Arc::new(Cache::default());
    let uploads = Arc::new(Cache::default());
    let deletes = Arc::new(Cache::default());
    let restores = Arc::new(Cache::default());
    let vms = Arc::new(Cache::default());
    let disks = Arc::new(Cache::default());
    let backup_ar = ApiResource::erase::<Backup>(&());
    let upload_ar = ApiResource::erase::<DataUpload>(&());
    let delete_ar = ApiResource::erase::<DeleteBackupRequest>(&());
    let restore_ar = ApiResource::erase::<Restore>(&());
    spawn_watches(
        &client,
        &readiness,
        &notify,
        vec![
            (&backups, backup_ar.clone(), "velero: watch Backup"),
            (&uploads, upload_ar.clone(), "velero: watch DataUpload"),
            (
                &deletes,
                delete_ar.clone(),
                "velero: watch DeleteBackupRequest",
            ),
            (&restores, restore_ar.clone(), "velero: watch Restore"),
            (
                &vms,
                ApiResource::erase::<VMInstance>(&()),
                "velero: watch VMInstance",
            ),
            (
                &disks,
                ApiResource::erase::<VMDisk>(&()),
                "velero: watch VMDisk",
            ),
        ],
    );
    loop {
        notify.notified().await;
        let now = chrono::Utc::now();
        let (vm_list, disk_list) = (vms.snapshot(), disks.snapshot());
        let upload_list: Vec<Value> = uploads.snapshot().into_values().collect();
        let backup_list = backups.snapshot();
        for ((ns, name), backup) in &backup_list {
            let apps = selected_apps(backup, &vm_list, &disk_list);
            match backup_next(backup, &apps, &upload_list, now) {
                Some(BackupAction::Status(status)) => {
                    write_status(&client, &backup_ar, FIELD_MANAGER, backup, status).await;
                }
                Some(BackupAction::CreateUploads(bodies)) => {
                    let api: Api<DynamicObject> =
                        Api::namespaced_with(client.clone(), ns, &upload_ar);
                    for body in bodies {
                        let Ok(obj) = serde_json::from_value::<DynamicObject>(body) else {
                            continue;
                        };
                        match api.create(&PostParams::default(), &obj).await {
                            Ok(_) => {}
                            Err(kube::Error::Api(e)) if e.code == 409 => {}
                            Err(e) => {
                                tracing::warn!(backup = %name, error = %e, "DataUpload create failed")
                            }
                        }
                    }
                }
                None => {}
            }
        }
        for upload in &upload_list {
            let backup_name = upload["metadata"]["ownerReferences"][0]["name"]
                .as_str()
                .unwrap_or_default();
            let ns = upload["metadata"]["namespace"].as_str().unwrap_or_default();
            let Some(backup) = backup_list.get(&(ns.to_owned(), backup_name.to_owned())) else {
                continue;
            };
            let apps = selected_apps(backup, &vm_list, &disk_list);
            let disk = upload["spec"]["sourcePVC"]
                .as_str()
                .and_then(|p| p.strip_prefix("vm-disk-"))
                .unwrap_or_default();
            let failure = data_upload_failure(&apps, disk);
            if let Some(status) = upload_next(upload, failure.as_deref(), now) {
                write_status(&client, &upload_ar, FIELD_MANAGER, upload, status).await;
            }
        }
        for ((ns, name), restore) in restores.snapshot() {
            let backup_name = restore["spec"]["backupName"].as_str().unwrap_or_default();
            let backup = backup_list.get(&(ns.clone(), backup_name.to_owned()));
            if let Some(status) = restore_next(&restore, backup, now) {
                tracing::info!(namespace = ns, name, phase = %status["phase"], "Restore");
                write_status(&client, &restore_ar, FIELD_MANAGER, &restore, status).await;
            }
        }
        for ((ns, _), request) in deletes.snapshot() {
            if request["status"]["phase"].as_str() == Some("Processed") {
                continue;
            }
            let target = request["spec"]["backupName"].as_str().unwrap_or_default();
            let backup_api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &backup_ar);
            let upload_api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &upload_ar);
            for upload in upload_list.iter().filter(|u| {
                u["metadata"]["namespace"].as_str() == Some(ns.as_str())
                    && u["metadata"]["ownerReferences"][0]["name"].as_str() == Some(target)
            }) {
                let name = upload["metadata"]["name"].as_str().unwrap_or_default();
                let _ = upload_api.delete(name, &DeleteParams::default()).await;
            }
            let errors: Vec<String> =
                match backup_api.delete(target, &DeleteParams::default()).await {
                    Ok(_) => Vec::new(),
                    Err(kube::Error::Api(e)) if e.code == 404 => Vec::new(),
                    Err(e) => vec![e.to_string()],
                };
            let status = json!({"phase": "Processed", "errors": errors});
            write_status(&client, &delete_ar, FIELD_MANAGER, &request, status).await;
            tracing::info!(
                namespace = ns,
                backup = target,
                "DeleteBackupRequest processed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_follows_the_named_credentials_key_in_the_bsl_namespace() {
        let secrets = Cache::default();
        let bsl = |cred: Value| {
            json!({"metadata": {"namespace": "cozy-velero", "name": "cozy-default"},
                   "spec": {"credential": cred}})
        };
        let default_ref = bsl(Value::Null);
        let custom_ref = bsl(json!({"name": "other", "key": "k"}));
        assert_eq!(
            desired_phase(&default_ref, &secrets),
            (
                "Unavailable",
                "credentials Secret cozy-velero/cozy-backups-creds has no key cloud".into()
            )
        );
        let mut wrong_ns = json!({"metadata": {"namespace": "tenant-root", "name": "cozy-backups-creds"},
                                  "data": {"cloud": "c2VjcmV0"}});
        keys_only(&mut wrong_ns);
        assert_eq!(wrong_ns["data"]["cloud"], "", "values are dropped");
        secrets.insert(wrong_ns);
        assert_eq!(desired_phase(&default_ref, &secrets).0, "Unavailable");
        secrets.insert(
            json!({"metadata": {"namespace": "cozy-velero", "name": "cozy-backups-creds"},
                              "data": {"cloud": ""}}),
        );
        assert_eq!(
            desired_phase(&default_ref, &secrets),
            ("Available", String::new())
        );
        assert_eq!(desired_phase(&custom_ref, &secrets).0, "Unavailable");
    }

    fn apps() -> (BTreeMap<Key, Value>, BTreeMap<Key, Value>) {
        let key = |ns: &str, n: &str| (ns.to_owned(), n.to_owned());
        let vms = BTreeMap::from([(
            key("tenant", "web"),
            json!({"metadata": {"name": "web", "namespace": "tenant"},
                   "spec": {"disks": [{"name": "web-root"}, {"name": "web-data"}]}}),
        )]);
        let disks = BTreeMap::from([
            (
                key("tenant", "web-root"),
                json!({"metadata": {"name": "web-root", "namespace": "tenant"}}),
            ),
            (
                key("tenant", "web-data"),
                json!({"metadata": {"name": "web-data", "namespace": "tenant",
                "annotations": {ANNOTATION_FAIL_DATA_UPLOAD: "snapshot timed out"}}}),
            ),
            (
                key("other", "web-root"),
                json!({"metadata": {"name": "web-root", "namespace": "other"}}),
            ),
        ]);
        (vms, disks)
    }

    fn velero_backup(spec: Value) -> Value {
        json!({"metadata": {"name": "tenant.bj-x1", "namespace": "cozy-velero", "uid": "u1"}, "spec": spec})
    }

    fn sel(kind: &str, name: &str) -> Value {
        json!({"matchLabels": {labels::APPLICATION_KIND: kind, labels::APPLICATION_NAME: name}})
    }

    #[test]
    fn backups_select_applications_the_way_the_strategies_label_them() {
        let (vms, disks) = apps();
        let b = velero_backup(json!({"includedNamespaces": ["tenant"],
            "orLabelSelectors": [{"matchLabels": {"app.kubernetes.io/instance": "vm-instance-web"}},
                                 sel("VMInstance", "web"), sel("VMDisk", "web-root")]}));
        let selected = selected_apps(&b, &vms, &disks);
        let names: Vec<(&str, &str)> = selected
            .iter()
            .map(|(k, a)| (*k, a["metadata"]["name"].as_str().unwrap()))
            .collect();
        assert_eq!(names, [("VMInstance", "web"), ("VMDisk", "web-root")]);
        assert_eq!(
            selected_pvcs(&selected),
            [
                (
                    "tenant".to_owned(),
                    "vm-disk-web-root".to_owned(),
                    "web-root".to_owned()
                ),
                (
                    "tenant".to_owned(),
                    "vm-disk-web-data".to_owned(),
                    "web-data".to_owned()
                ),
            ]
        );
        assert_eq!(
            data_upload_failure(&selected, "web-data"),
            None,
            "web-data's VMDisk is not selected"
        );
        let with_disk = velero_backup(json!({"includedNamespaces": ["tenant"],
            "orLabelSelectors": [sel("VMInstance", "web"), sel("VMDisk", "web-data")]}));
        let selected = selected_apps(&with_disk, &vms, &disks);
        assert_eq!(
            data_upload_failure(&selected, "web-data").as_deref(),
            Some("snapshot timed out")
        );
        let all_namespaces = velero_backup(json!({"labelSelector": sel("VMDisk", "web-root")}));
        assert_eq!(selected_apps(&all_namespaces, &vms, &disks).len(), 2);
    }

    fn drive(backup: &mut Value, apps: &[Selected]) -> Vec<String> {
        let now = chrono::Utc::now();
        let mut uploads: Vec<Value> = Vec::new();
        let mut phases = Vec::new();
        for _ in 0..40 {
            let mut progressed = false;
            if let Some(action) = backup_next(backup, apps, &uploads, now) {
                progressed = true;
                match action {
                    BackupAction::Status(s) => {
                        phases.push(s["phase"].as_str().unwrap().to_owned());
                        backup["status"] = s;
                    }
                    BackupAction::CreateUploads(bodies) => uploads.extend(bodies),
                }
            }
            for u in uploads.iter_mut() {
                let disk = u["spec"]["sourcePVC"]
                    .as_str()
                    .unwrap()
                    .trim_start_matches("vm-disk-")
                    .to_owned();
                if let Some(s) = upload_next(u, data_upload_failure(apps, &disk).as_deref(), now) {
                    progressed = true;
                    u["status"] = s;
                }
            }
            if !progressed {
                break;
            }
        }
        backup["uploads"] = json!(uploads);
        phases
    }

    #[test]
    fn a_backup_with_the_data_mover_completes_or_partially_fails() {
        let (vms, disks) = apps();
        let spec = |extra: Value| {
            let mut s = json!({"includedNamespaces": ["tenant"], "snapshotMoveData": true, "ttl": "1h",
                               "orLabelSelectors": [sel("VMInstance", "web")]});
            for (k, v) in extra.as_object().unwrap() {
                s[k] = v.clone();
            }
            s
        };
        let mut ok = velero_backup(spec(json!({})));
        let selected = selected_apps(&ok, &vms, &disks);
        assert_eq!(
            drive(&mut ok, &selected),
            [
                "InProgress",
                "WaitingForPluginOperations",
                "Finalizing",
                "Completed"
            ]
        );
        assert_eq!(ok["uploads"].as_array().unwrap().len(), 2);
        assert!(
            ok["uploads"][0]["metadata"]["name"]
                .as_str()
                .unwrap()
                .starts_with("tenant.bj-x1-")
        );
        assert_eq!(ok["status"]["backupItemOperationsCompleted"], 2);

        let mut partial = velero_backup(spec(
            json!({"orLabelSelectors": [sel("VMInstance", "web"), sel("VMDisk", "web-data")]}),
        ));
        let selected = selected_apps(&partial, &vms, &disks);
        assert_eq!(
            drive(&mut partial, &selected),
            [
                "InProgress",
                "WaitingForPluginOperations",
                "FinalizingPartiallyFailed",
                "PartiallyFailed"
            ]
        );
        assert_eq!(partial["status"]["backupItemOperationsFailed"], 1);
        let failed: Vec<&Value> = partial["uploads"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|u| u["status"]["phase"] == "Failed")
            .collect();
        assert_eq!(failed.len(), 1);
        assert_eq!(failed[0]["status"]["message"], "snapshot timed out");
        assert_eq!(failed[0]["spec"]["sourcePVC"], "vm-disk-web-data");

        let mut plain = velero_backup(
            json!({"includedNamespaces": ["tenant"], "orLabelSelectors": [sel("VMDisk", "web-root")]}),
        );
        let selected = selected_apps(&plain, &vms, &disks);
        assert_eq!(drive(&mut plain, &selected), ["InProgress", "Completed"]);
    }

    #[test]
    fn failing_and_hanging_backups() {
        let (vms, mut disks) = apps();
        let key = ("tenant".to_owned(), "web-root".to_owned());
        disks.get_mut(&key).unwrap()["metadata"]["annotations"] =
            json!({ANNOTATION_FAIL_BACKUP: "BSL unavailable"});
        let mut b = velero_backup(
            json!({"includedNamespaces": ["tenant"], "orLabelSelectors": [sel("VMDisk", "web-root")]}),
        );
        let selected = selected_apps(&b, &vms, &disks);
        assert_eq!(drive(&mut b, &selected), ["InProgress", "Failed"]);
        assert_eq!(b["status"]["failureReason"], "BSL unavailable");
        disks.get_mut(&key).unwrap()["metadata"]["annotations"] = json!({ANNOTATION_HANG: "true"});
        let mut b = velero_backup(
            json!({"includedNamespaces": ["tenant"], "orLabelSelectors": [sel("VMDisk", "web-root")]}),
        );
        let selected = selected_apps(&b, &vms, &disks);
        assert_eq!(drive(&mut b, &selected), ["InProgress"]);
    }

    #[test]
    fn restores_complete_fail_or_hang_by_their_backup() {
        let now = chrono::Utc::now();
        let restore = |status: Value| {
            json!({"metadata": {"name": "t.rj-x1", "namespace": "cozy-velero"},
                   "spec": {"backupName": "t.bj-x1"}, "status": status})
        };
        let backup = |annotations: Value| json!({"metadata": {"name": "t.bj-x1", "annotations": annotations}});
        let missing = restore_next(&restore(json!({})), None, now).unwrap();
        assert_eq!(missing["phase"], "FailedValidation");
        assert_eq!(
            missing["validationErrors"][0],
            "Error retrieving backup: backups.velero.io \"t.bj-x1\" not found"
        );
        let plain = backup(json!({}));
        let started = restore_next(&restore(json!({})), Some(&plain), now).unwrap();
        assert_eq!(started["phase"], "InProgress");
        assert_eq!(started["startTimestamp"], rfc3339(now));
        let done = restore_next(&restore(started.clone()), Some(&plain), now).unwrap();
        assert_eq!(done["phase"], "Completed");
        assert_eq!(restore_next(&restore(done), Some(&plain), now), None);
        let failing = backup(json!({ANNOTATION_FAIL_RESTORE: "DataDownload failed"}));
        let failed = restore_next(&restore(started.clone()), Some(&failing), now).unwrap();
        assert_eq!(
            (failed["phase"].as_str(), failed["failureReason"].as_str()),
            (Some("Failed"), Some("DataDownload failed"))
        );
        assert_eq!(restore_next(&restore(failed), Some(&failing), now), None);
        let hanging = backup(json!({ANNOTATION_HANG_RESTORE: "true"}));
        assert_eq!(restore_next(&restore(started), Some(&hanging), now), None);
    }
}
