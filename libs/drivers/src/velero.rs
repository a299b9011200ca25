//! Velero (VMInstance and VMDisk applications): the pure parts of the backup path, shared with the
//! restore path (names, the underlying resources of a VM, the Velero Backup body, the failure
//! explanation with DataUpload details, the catalog fields).
//!
//! ```text
//!  BackupJob ─► application <group>/<kind> <ns>/<app> (raw object)
//!     VMInstance: spec.disks[].name ─► dataVolumes vm-disk-<disk>; ip/mac from the OVN annotations
//!                 of the first pod labelled vm.kubevirt.io/name=vm-instance-<app>
//!     template.spec rendered against {Application: <raw app>, Parameters} + one orLabelSelector
//!     per disk {application.kind: VMDisk, application.name: <disk>}
//!  ─► Velero Backup cozy-velero/<ns>.<job>-xxxxx (owned-by labels, annotation
//!     backups.cozystack.io/underlying-resources = {"dataVolumes":[…],"ip":…,"mac":…})
//!  Completed ─► catalog Backup <job> (driverMetadata velero.io/*, artifact velero://cozy-velero/<name>,
//!               underlyingResources = the annotation)
//!  Failed / PartiallyFailed ─► "Velero Backup failed with phase …" + failed DataUploads
//! ```

use std::collections::BTreeMap;

use api::contract::{annotations, labels, names};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;
use serde_json::{Value as Json, json};

/// Where every Velero object lives.
pub const NAMESPACE: &str = names::VELERO_NAMESPACE;
/// The VM application kind whose disks and addresses are collected.
pub const VM_INSTANCE_KIND: &str = "VMInstance";
/// The disk application kind.
pub const VM_DISK_KIND: &str = "VMDisk";
/// Prefix of a VM's KubeVirt name (`vm-instance-<app>`).
pub const VM_PREFIX: &str = "vm-instance-";
/// Prefix of a disk's DataVolume/PVC name (`vm-disk-<disk>`).
pub const DISK_PREFIX: &str = "vm-disk-";
/// Label of a VM's launcher pod.
pub const VM_POD_LABEL: &str = "vm.kubevirt.io/name";
/// OVN annotation carrying the pod's IP address.
pub const OVN_IP: &str = "ovn.kubernetes.io/ip_address";
/// OVN annotation carrying the pod's MAC address.
pub const OVN_MAC: &str = "ovn.kubernetes.io/mac_address";
/// A finished Velero Backup.
pub const PHASE_COMPLETED: &str = "Completed";
/// A failed Velero Backup.
pub const PHASE_FAILED: &str = "Failed";
/// A Velero Backup with some failed items.
pub const PHASE_PARTIALLY_FAILED: &str = "PartiallyFailed";
/// Message prefix of a failed create (also when the application cannot be read).
pub const CREATE_FAILED: &str = "failed to create Velero Backup";
/// Message prefix of a failed catalog create (Velero's wording differs from the other drivers').
pub const CATALOG_FAILED: &str = "failed to create Backup resource";

/// Driver metadata keys on the catalog Backup.
pub mod keys {
    /// The Velero Backup's name.
    pub const BACKUP_NAME: &str = "velero.io/backup-name";
    /// The Velero Backup's namespace.
    pub const BACKUP_NAMESPACE: &str = "velero.io/backup-namespace";
}

/// `generateName` of a job's Velero Backup: `<namespace>.<job>-`.
pub fn generate_name(job_namespace: &str, job: &str) -> String {
    format!("{job_namespace}.{job}-")
}

/// The Normal Event's note after the create (upstream names the object by its `generateName`).
pub fn created_note(generate_name: &str) -> String {
    format!("Created Velero Backup {NAMESPACE}/{generate_name}")
}

/// The Warning Event's note when the create failed, without the `: <error>` that follows it.
pub fn creation_failed_note(generate_name: &str) -> String {
    format!("Failed to create Velero Backup {NAMESPACE}/{generate_name}")
}

/// One disk of a VM in the underlying resources.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DataVolume {
    /// `vm-disk-<disk>`.
    pub data_volume_name: String,
    /// The VMDisk application's name.
    pub application_name: String,
}

/// What a VMInstance backup records about the VM (field order as upstream serialises it).
#[derive(Serialize, Debug, Clone, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct VmResources {
    /// The VM's disks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub data_volumes: Vec<DataVolume>,
    /// The VM's IP address (OVN).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub ip: String,
    /// The VM's MAC address (OVN).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub mac: String,
}

/// The underlying resources of a VMInstance application (`None` for other kinds, or when nothing
/// was found): its disks and the OVN addresses of the first of `pods` (the VM's launcher pods, in
/// name order).
pub fn vm_resources(app_kind: &str, app: &Json, pods: &[Json]) -> Option<VmResources> {
    if app_kind != VM_INSTANCE_KIND {
        return None;
    }
    let data_volumes = app["spec"]["disks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d["name"].as_str().filter(|n| !n.is_empty()))
        .map(|n| DataVolume {
            data_volume_name: format!("{DISK_PREFIX}{n}"),
            application_name: n.to_owned(),
        })
        .collect();
    let annotation = |k: &str| {
        pods.first()
            .and_then(|p| p["metadata"]["annotations"][k].as_str())
            .unwrap_or_default()
            .to_owned()
    };
    let res = VmResources {
        data_volumes,
        ip: annotation(OVN_IP),
        mac: annotation(OVN_MAC),
    };
    (res != VmResources::default()).then_some(res)
}

/// Renders the strategy's `template.spec` against the raw application object.
pub fn render_spec(spec: &Json, app: &Json, parameters: &BTreeMap<String, String>) -> Json {
    crate::template::render_for_app(spec, app, parameters)
}

/// The Velero Backup of a job: the rendered spec plus one `orLabelSelectors` entry per VM disk,
/// labelled with the job, annotated with the underlying resources when there are any.
pub fn backup_body(
    job_namespace: &str,
    job: &str,
    rendered_spec: &Json,
    resources: Option<&VmResources>,
) -> Json {
    let mut spec = if rendered_spec.is_object() {
        rendered_spec.clone()
    } else {
        json!({})
    };
    let mut metadata = json!({
        "generateName": generate_name(job_namespace, job),
        "namespace": NAMESPACE,
        "labels": {
            labels::OWNED_BY_JOB_NAME: job,
            labels::OWNED_BY_JOB_NAMESPACE: job_namespace,
        },
    });
    if let Some(res) = resources {
        if !res.data_volumes.is_empty() {
            let selectors = spec["orLabelSelectors"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let extra = res.data_volumes.iter().map(|dv| {
                json!({"matchLabels": {
                    labels::APPLICATION_KIND: VM_DISK_KIND,
                    labels::APPLICATION_NAME: dv.application_name,
                }})
            });
            spec["orLabelSelectors"] = Json::Array(selectors.into_iter().chain(extra).collect());
        }
        let raw = serde_json::to_string(res).unwrap_or_default();
        metadata["annotations"] = json!({annotations::UNDERLYING_RESOURCES: raw});
    }
    json!({
        "apiVersion": "velero.io/v1",
        "kind": "Backup",
        "metadata": metadata,
        "spec": spec,
    })
}

/// `status.phase` of a Velero Backup (`""` before Velero saw it).
pub fn phase(backup: &Json) -> &str {
    backup["status"]["phase"].as_str().unwrap_or_default()
}

fn count(v: &Json) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// The job's failure message for a `Failed`/`PartiallyFailed` Velero Backup, as `velero backup
/// describe` would explain it: phase, failure reason, validation errors, failed hooks, failed
/// async item operations, then every failed DataUpload of the backup (`<backup>-…`, name order).
pub fn failure_message(backup: &Json, data_uploads: &[Json]) -> String {
    let status = &backup["status"];
    let mut m = format!("Velero Backup failed with phase {}", phase(backup));
    if let Some(r) = status["failureReason"]
        .as_str()
        .map(str::trim)
        .filter(|r| !r.is_empty())
    {
        m.push_str(&format!(": {r}"));
    }
    if let Some(errors) = status["validationErrors"]
        .as_array()
        .filter(|e| !e.is_empty())
    {
        let list: Vec<&str> = errors.iter().filter_map(Json::as_str).collect();
        m.push_str(&format!("; validation: [{}]", list.join(" ")));
    }
    let hooks = &status["hookStatus"];
    if count(&hooks["hooksFailed"]) > 0 {
        m.push_str(&format!(
            "; hooks failed {}/{}",
            count(&hooks["hooksFailed"]),
            count(&hooks["hooksAttempted"])
        ));
    }
    if count(&status["backupItemOperationsFailed"]) > 0 {
        m.push_str(&format!(
            "; async item operations failed {} (completed {}, attempted {})",
            count(&status["backupItemOperationsFailed"]),
            count(&status["backupItemOperationsCompleted"]),
            count(&status["backupItemOperationsAttempted"])
        ));
    }
    let prefix = format!(
        "{}-",
        backup["metadata"]["name"].as_str().unwrap_or_default()
    );
    let mut uploads: Vec<&Json> = data_uploads
        .iter()
        .filter(|d| {
            d["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&prefix))
        })
        .filter(|d| d["status"]["phase"].as_str() == Some("Failed"))
        .collect();
    uploads.sort_by_key(|d| {
        d["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    for d in uploads {
        let name = d["metadata"]["name"].as_str().unwrap_or_default();
        let msg = d["status"]["message"]
            .as_str()
            .filter(|s| !s.trim().is_empty())
            .unwrap_or("(empty status.message)");
        match d["spec"]["sourcePVC"].as_str().filter(|p| !p.is_empty()) {
            Some(pvc) => m.push_str(&format!("; DataUpload {name} failed for PVC {pvc}: {msg}")),
            None => m.push_str(&format!("; DataUpload {name} failed: {msg}")),
        }
    }
    m
}

/// What the catalog Backup of a completed Velero Backup records.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    /// `spec.takenAt`: the Velero Backup's start, else its creation (`None`: now).
    pub taken_at: Option<Time>,
    /// `spec.driverMetadata`.
    pub driver_metadata: BTreeMap<String, String>,
    /// `status.artifact.uri`.
    pub artifact_uri: String,
    /// `status.underlyingResources` (the annotation, when it holds JSON).
    pub underlying_resources: Option<Json>,
}

/// The catalog fields of a completed Velero Backup.
pub fn catalog(backup: &Json) -> Catalog {
    let name = backup["metadata"]["name"].as_str().unwrap_or_default();
    let ns = backup["metadata"]["namespace"].as_str().unwrap_or_default();
    let taken_at = crate::catalog::time(&backup["status"]["startTimestamp"])
        .or_else(|| crate::catalog::time(&backup["metadata"]["creationTimestamp"]));
    let underlying_resources = backup["metadata"]["annotations"][annotations::UNDERLYING_RESOURCES]
        .as_str()
        .filter(|s| !s.is_empty())
        .and_then(|s| serde_json::from_str(s).ok());
    Catalog {
        taken_at,
        driver_metadata: BTreeMap::from([
            (keys::BACKUP_NAME.to_owned(), name.to_owned()),
            (keys::BACKUP_NAMESPACE.to_owned(), ns.to_owned()),
        ]),
        artifact_uri: format!("velero://{ns}/{name}"),
        underlying_resources,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn vm() -> Json {
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "VMInstance",
               "metadata": {"name": "web", "namespace": "tenant"},
               "spec": {"disks": [{"name": "web-root"}, {"name": ""}, {"bus": "virtio"}, {"name": "web-data"}]}})
    }

    #[test]
    fn a_vm_records_its_disks_and_addresses_in_upstreams_json() {
        let pods = [
            json!({"metadata": {"name": "virt-launcher-web-a", "annotations": {OVN_IP: "10.0.0.5", OVN_MAC: "0a:58:0a:00:00:05"}}}),
            json!({"metadata": {"name": "virt-launcher-web-b", "annotations": {OVN_IP: "10.0.0.6"}}}),
        ];
        let res = vm_resources("VMInstance", &vm(), &pods).unwrap();
        assert_eq!(
            serde_json::to_string(&res).unwrap(),
            r#"{"dataVolumes":[{"dataVolumeName":"vm-disk-web-root","applicationName":"web-root"},{"dataVolumeName":"vm-disk-web-data","applicationName":"web-data"}],"ip":"10.0.0.5","mac":"0a:58:0a:00:00:05"}"#
        );
        let no_pod = vm_resources("VMInstance", &vm(), &[]).unwrap();
        assert_eq!(
            serde_json::to_string(&no_pod).unwrap(),
            r#"{"dataVolumes":[{"dataVolumeName":"vm-disk-web-root","applicationName":"web-root"},{"dataVolumeName":"vm-disk-web-data","applicationName":"web-data"}]}"#
        );
        assert_eq!(vm_resources("VMDisk", &vm(), &pods), None);
        assert_eq!(vm_resources("VMInstance", &json!({"spec": {}}), &[]), None);
    }

    #[test]
    fn the_backup_body_adds_a_selector_per_disk() {
        let spec = render_spec(
            &json!({"includedNamespaces": ["{{ .Application.metadata.namespace }}"],
                    "orLabelSelectors": [{"matchLabels": {"app.kubernetes.io/instance": "vm-instance-{{ .Application.metadata.name }}"}}],
                    "storageLocation": "{{ .Parameters.bsl }}", "snapshotMoveData": true}),
            &vm(),
            &BTreeMap::from([("bsl".to_owned(), "cozy-default".to_owned())]),
        );
        let res = vm_resources("VMInstance", &vm(), &[]).unwrap();
        assert_eq!(
            backup_body("tenant", "bj", &spec, Some(&res)),
            json!({"apiVersion": "velero.io/v1", "kind": "Backup",
                   "metadata": {"generateName": "tenant.bj-", "namespace": "cozy-velero",
                                "labels": {"backups.cozystack.io/owned-by.BackupJobName": "bj",
                                           "backups.cozystack.io/owned-by.BackupJobNamespace": "tenant"},
                                "annotations": {"backups.cozystack.io/underlying-resources":
                                    r#"{"dataVolumes":[{"dataVolumeName":"vm-disk-web-root","applicationName":"web-root"},{"dataVolumeName":"vm-disk-web-data","applicationName":"web-data"}]}"#}},
                   "spec": {"includedNamespaces": ["tenant"],
                            "orLabelSelectors": [
                                {"matchLabels": {"app.kubernetes.io/instance": "vm-instance-web"}},
                                {"matchLabels": {"apps.cozystack.io/application.kind": "VMDisk", "apps.cozystack.io/application.name": "web-root"}},
                                {"matchLabels": {"apps.cozystack.io/application.kind": "VMDisk", "apps.cozystack.io/application.name": "web-data"}}],
                            "storageLocation": "cozy-default", "snapshotMoveData": true}})
        );
        let plain = backup_body("tenant", "bj", &json!({"ttl": "1h"}), None);
        assert_eq!(plain["metadata"].get("annotations"), None);
        assert_eq!(plain["spec"], json!({"ttl": "1h"}));
        assert_eq!(
            created_note("tenant.bj-"),
            "Created Velero Backup cozy-velero/tenant.bj-"
        );
        assert_eq!(
            creation_failed_note("tenant.bj-"),
            "Failed to create Velero Backup cozy-velero/tenant.bj-"
        );
    }

    #[test]
    fn failure_messages_explain_like_velero_describe() {
        let backup = json!({"metadata": {"name": "tenant.bj-x1"},
            "status": {"phase": "PartiallyFailed", "failureReason": "  ",
                       "validationErrors": ["a", "b"],
                       "hookStatus": {"hooksAttempted": 3, "hooksFailed": 1},
                       "backupItemOperationsAttempted": 2, "backupItemOperationsCompleted": 1,
                       "backupItemOperationsFailed": 1}});
        let uploads = [
            json!({"metadata": {"name": "tenant.bj-x1-zz"}, "spec": {},
                   "status": {"phase": "Failed", "message": ""}}),
            json!({"metadata": {"name": "tenant.bj-x1-aa"}, "spec": {"sourcePVC": "vm-disk-web-root"},
                   "status": {"phase": "Failed", "message": "snapshot timed out"}}),
            json!({"metadata": {"name": "tenant.bj-x1-bb"}, "spec": {"sourcePVC": "vm-disk-web-data"},
                   "status": {"phase": "Completed"}}),
            json!({"metadata": {"name": "other-aa"}, "spec": {"sourcePVC": "p"},
                   "status": {"phase": "Failed", "message": "not ours"}}),
        ];
        assert_eq!(
            failure_message(&backup, &uploads),
            "Velero Backup failed with phase PartiallyFailed; validation: [a b]; hooks failed 1/3; \
             async item operations failed 1 (completed 1, attempted 2); \
             DataUpload tenant.bj-x1-aa failed for PVC vm-disk-web-root: snapshot timed out; \
             DataUpload tenant.bj-x1-zz failed: (empty status.message)"
        );
        let failed = json!({"metadata": {"name": "n"}, "status": {"phase": "Failed", "failureReason": "BSL unavailable"}});
        assert_eq!(
            failure_message(&failed, &[]),
            "Velero Backup failed with phase Failed: BSL unavailable"
        );
    }

    #[test]
    fn catalog_fields() {
        let done = json!({"metadata": {"name": "tenant.bj-x1", "namespace": "cozy-velero",
                                       "creationTimestamp": "2026-01-01T00:00:00Z",
                                       "annotations": {annotations::UNDERLYING_RESOURCES: r#"{"ip":"10.0.0.5"}"#}},
                          "status": {"phase": "Completed", "startTimestamp": "2026-01-01T00:00:02Z"}});
        let c = catalog(&done);
        assert_eq!(c.taken_at.unwrap().0.to_string(), "2026-01-01T00:00:02Z");
        assert_eq!(c.artifact_uri, "velero://cozy-velero/tenant.bj-x1");
        assert_eq!(c.underlying_resources, Some(json!({"ip": "10.0.0.5"})));
        assert_eq!(
            c.driver_metadata,
            BTreeMap::from([
                (
                    "velero.io/backup-name".to_owned(),
                    "tenant.bj-x1".to_owned()
                ),
                (
                    "velero.io/backup-namespace".to_owned(),
                    "cozy-velero".to_owned()
                ),
            ])
        );
        let bare = json!({"metadata": {"name": "n", "namespace": "cozy-velero",
                                       "creationTimestamp": "2026-01-01T00:00:00Z"}});
        let c = catalog(&bare);
        assert_eq!(c.taken_at.unwrap().0.to_string(), "2026-01-01T00:00:00Z");
        assert_eq!(c.underlying_resources, None);
    }
}
