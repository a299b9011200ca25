//! The Velero restore (VMInstance and VMDisk applications, in place or into another namespace) as
//! one pure decision: `decide(&Observed) -> Step`, called again after every action.
//!
//! ```text
//!  options (strict) ─► target: targetNamespace ≠ Backup's ⇒ copy (namespace must exist);
//!                      same namespace with another name ⇒ Failed
//!  ─► startedAt (+ phase Running) ─► Velero strategy (StrategyNotReady) ─► velero.io/backup-name
//!  Velero Restores of this job: more than one ⇒ Failed
//!  none:
//!   copy ─► failIfTargetExists and the target's HelmRelease exists ⇒ Failed
//!   in place ─► suspend the VM's and disks' HelmReleases ─► runStrategy Halted, wait for no VMI
//!            ─► keepOriginalPVC: each disk's PVC kept as <pvc>-orig-<hash> (PV Retain, new claim
//!               bound to the PV, old claim deleted, PV claimRef re-pointed)
//!            ─► each DataVolume deleted, its PVC orphaned first
//!   ─► ConfigMap cozy-velero/restore-modifiers-<ns>-<job> ─► Velero Restore <ns>.<job>-xxxxx
//!  one: Completed ─► (renamed copy: HelmRelease vm-instance-<src> copied to vm-instance-<target>,
//!       old deleted) ─► Succeeded (no Ready condition) │ Failed / PartiallyFailed ─► Failed
//! ```
//!
//! Invariants: every preparation step is re-derived from the cluster's objects, so a crash at any
//! point resumes it and repeats nothing destructive (a PVC already kept is not kept again); the
//! preparation waits end at [`PREPARE_DEADLINE`] and the Velero Restore wait at
//! [`RESTORE_DEADLINE`], both from `startedAt`, in an explained `Failed`; the suspended
//! HelmReleases are not resumed (the restored objects carry their own state, as upstream).

use std::collections::BTreeMap;
use std::time::Duration;

use api::backups::{Backup, RestoreJob};
use api::contract::{event_reasons, labels};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value as Json, json};
use sha2::{Digest, Sha256};

use super::options::VeleroOptions;
use super::skeleton::{self, fail, helm_release, owned_by, status_of, strategy_not_ready};
use super::{Action, Event, ObjectRef, OnError, Step, elapsed};
use crate::status::go_duration;
use crate::velero::{self as driver, keys};

/// How often a wait is re-examined without an event.
pub const POLL: Duration = Duration::from_secs(5);
/// Ours: how long the in-place preparation may wait (VM shutdown, PVC and DataVolume deletion).
pub const PREPARE_DEADLINE: Duration = Duration::from_secs(30 * 60);
/// Ours: how long the Velero Restore may run (large disks take hours; Velero has no own limit
/// that always ends a stuck restore).
pub const RESTORE_DEADLINE: Duration = Duration::from_secs(24 * 60 * 60);
/// The field manager of the preparation's patches.
pub const FIELD_MANAGER: &str = "cozy-backups-velero-restore";
/// The key of the resource-modifier rules in their ConfigMap.
pub const MODIFIER_KEY: &str = "resource-modifier-rules.yaml";
/// The CDI annotation that lets a restored DataVolume adopt its restored PVC.
pub const ALLOW_CLAIM_ADOPTION: &str = "cdi.kubevirt.io/allowClaimAdoption";

/// What the Velero restore looks at. Namespaced objects of the preparation are read in the
/// Backup's namespace (in place only); HelmReleases in the target namespace.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The RestoreJob.
    pub job: &'a RestoreJob,
    /// The Backup it restores.
    pub backup: &'a Backup,
    /// Now.
    pub now: Time,
    /// The Velero strategy CR the Backup names (`None`: not found).
    pub strategy: Option<&'a Json>,
    /// Whether the target namespace exists (read for a copy only).
    pub target_namespace_exists: bool,
    /// The Velero Backup `cozy-velero/<velero.io/backup-name>` (`None`: not found).
    pub velero_backup: Option<&'a Json>,
    /// The Velero Restores in `cozy-velero` carrying the job's owned-by labels.
    pub restores: &'a [Json],
    /// The resource-modifier ConfigMap (`None`: not found).
    pub config_map: Option<&'a Json>,
    /// HelmReleases in the target namespace.
    pub releases: &'a [Json],
    /// The VirtualMachine `vm-instance-<app>` (`None`: not found).
    pub vm: Option<&'a Json>,
    /// The VirtualMachineInstance `vm-instance-<app>` (`None`: not found).
    pub vmi: Option<&'a Json>,
    /// PVCs in the Backup's namespace.
    pub pvcs: &'a [Json],
    /// The PersistentVolumes bound to those PVCs.
    pub pvs: &'a [Json],
    /// DataVolumes in the Backup's namespace.
    pub data_volumes: &'a [Json],
}

/// Where a Velero restore writes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The target namespace.
    pub namespace: String,
    /// The target application.
    pub app: String,
    /// The target kind.
    pub kind: String,
    /// Restoring into another namespace.
    pub copy: bool,
    /// The target name differs from the source's.
    pub renamed: bool,
}

/// The target: `targetNamespace` (a copy when it differs from the Backup's), the job's non-empty
/// target name and kind.
pub fn target(job: &RestoreJob, backup: &Backup, options: &VeleroOptions) -> Target {
    let source_ns = backup.metadata.namespace.clone().unwrap_or_default();
    let copy = !options.target_namespace.is_empty() && options.target_namespace != source_ns;
    let t = job.spec.target_application_ref.as_ref();
    let pick = |v: Option<&String>, default: &str| {
        v.filter(|v| !v.is_empty())
            .cloned()
            .unwrap_or_else(|| default.to_owned())
    };
    let app = pick(t.map(|t| &t.name), &backup.spec.application_ref.name);
    Target {
        namespace: if copy {
            options.target_namespace.clone()
        } else {
            source_ns
        },
        renamed: app != backup.spec.application_ref.name,
        kind: pick(t.map(|t| &t.kind), &backup.spec.application_ref.kind),
        app,
        copy,
    }
}

/// The HelmRelease of an application of `kind` (`None` for kinds without one).
pub fn release_name(kind: &str, app: &str) -> Option<String> {
    match kind {
        driver::VM_INSTANCE_KIND => Some(format!("{}{app}", driver::VM_PREFIX)),
        driver::VM_DISK_KIND => Some(format!("{}{app}", driver::DISK_PREFIX)),
        _ => None,
    }
}

/// The VM's recorded disks and addresses: `Backup.status.underlyingResources`, else the Velero
/// Backup's annotation; `None` when neither decodes to an object.
pub fn vm_resources(backup: &Backup, velero_backup: Option<&Json>) -> Option<Json> {
    let stored = backup
        .status
        .as_ref()
        .and_then(|s| s.underlying_resources.clone())
        .filter(|u| !u.is_null());
    let ur = stored.or_else(|| {
        velero_backup
            .and_then(|b| {
                b["metadata"]["annotations"][api::contract::annotations::UNDERLYING_RESOURCES]
                    .as_str()
            })
            .filter(|s| !s.is_empty())
            .and_then(|s| serde_json::from_str(s).ok())
    })?;
    ur.is_object().then_some(ur)
}

/// `(dataVolumeName, applicationName)` of each recorded disk.
pub fn disks(resources: Option<&Json>) -> Vec<(String, String)> {
    resources
        .and_then(|r| r["dataVolumes"].as_array())
        .into_iter()
        .flatten()
        .filter_map(|d| {
            let dv = d["dataVolumeName"].as_str().filter(|n| !n.is_empty())?;
            Some((
                dv.to_owned(),
                d["applicationName"].as_str().unwrap_or_default().to_owned(),
            ))
        })
        .collect()
}

/// The name a kept PVC gets: `<pvc>-orig-<first 4 hex digits of sha256(job name)>`.
pub fn kept_name(pvc: &str, job: &str) -> String {
    let digest = Sha256::digest(job.as_bytes());
    format!("{pvc}-orig-{:02x}{:02x}", digest[0], digest[1])
}

/// The resource-modifier ConfigMap's name (at most 253 characters).
pub fn config_map_name(job_namespace: &str, job: &str) -> String {
    let mut name = format!("restore-modifiers-{job_namespace}-{job}");
    name.truncate(253);
    name
}

/// The resource-modifier rules (JSON, which YAML readers accept): claim adoption on every PVC of
/// the target namespace; on a copy, PVCs lose `spec.selector` and `spec.volumeName`; with
/// `keepOriginalIpAndMac`, the VM template carries the recorded OVN addresses.
pub fn modifier_rules(t: &Target, options: &VeleroOptions, resources: Option<&Json>) -> String {
    let rule = |group_resource: &str, patch: Json| {
        json!({
            "conditions": {"groupResource": group_resource, "resourceNameRegex": ".*", "namespaces": [t.namespace]},
            "mergePatches": [{"patchData": patch.to_string()}],
        })
    };
    let mut rules = vec![rule(
        "persistentvolumeclaims",
        json!({"metadata": {"annotations": {ALLOW_CLAIM_ADOPTION: "true"}}}),
    )];
    if t.copy {
        rules.push(rule(
            "persistentvolumeclaims",
            json!({"spec": {"selector": null, "volumeName": null}}),
        ));
    }
    if options.keep_original_ip_and_mac {
        let mut ovn = Map::new();
        for (key, field) in [(driver::OVN_IP, "ip"), (driver::OVN_MAC, "mac")] {
            if let Some(v) = resources
                .and_then(|r| r[field].as_str())
                .filter(|v| !v.is_empty())
            {
                ovn.insert(key.into(), json!(v));
            }
        }
        if !ovn.is_empty() {
            rules.push(rule(
                "virtualmachines.kubevirt.io",
                json!({"spec": {"template": {"metadata": {"annotations": ovn}}}}),
            ));
        }
    }
    serde_json::to_string_pretty(&json!({"version": "v1", "resourceModifierRules": rules}))
        .unwrap_or_default()
}

fn labelled(job: &RestoreJob) -> Json {
    let mut l = Map::new();
    for (k, v) in owned_by(job) {
        l.insert(k, json!(v));
    }
    Json::Object(l)
}

/// The resource-modifier ConfigMap.
pub fn config_map(job: &RestoreJob, rules: &str) -> Json {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": config_map_name(
                job.metadata.namespace.as_deref().unwrap_or_default(),
                job.metadata.name.as_deref().unwrap_or_default(),
            ),
            "namespace": driver::NAMESPACE,
            "labels": labelled(job),
        },
        "data": {MODIFIER_KEY: rules},
    })
}

/// The Velero Restore: the strategy's `template.restoreSpec` rendered against the source
/// (`{metadata: {name, namespace}, kind}`, no parameters), then `backupName`, the namespace
/// mapping of a copy, one `orLabelSelectors` entry per disk and the resource modifier.
pub fn restore_body(
    job: &RestoreJob,
    backup: &Backup,
    strategy: &Json,
    velero_backup: &str,
    t: &Target,
    resources: Option<&Json>,
) -> Json {
    let source_ns = backup.metadata.namespace.clone().unwrap_or_default();
    let app = json!({
        "metadata": {"name": backup.spec.application_ref.name, "namespace": source_ns},
        "kind": backup.spec.application_ref.kind,
    });
    let template = &strategy["spec"]["template"]["restoreSpec"];
    let mut spec = if template.is_object() {
        crate::template::render_for_app(template, &app, &BTreeMap::new())
    } else {
        json!({})
    };
    if !spec.is_object() {
        spec = json!({});
    }
    spec["backupName"] = json!(velero_backup);
    if t.copy {
        if !spec["namespaceMapping"].is_object() {
            spec["namespaceMapping"] = json!({});
        }
        spec["namespaceMapping"][&source_ns] = json!(t.namespace);
    }
    let selectors: Vec<Json> = disks(resources)
        .into_iter()
        .map(|(_, app)| {
            json!({"matchLabels": {
                labels::APPLICATION_KIND: driver::VM_DISK_KIND,
                labels::APPLICATION_NAME: app,
            }})
        })
        .collect();
    if !selectors.is_empty() {
        let mut all = spec["orLabelSelectors"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        all.extend(selectors);
        spec["orLabelSelectors"] = Json::Array(all);
    }
    let job_ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    spec["resourceModifier"] =
        json!({"apiGroup": "", "kind": "ConfigMap", "name": config_map_name(&job_ns, &name)});
    json!({
        "apiVersion": "velero.io/v1",
        "kind": "Restore",
        "metadata": {
            "generateName": driver::generate_name(&job_ns, &name),
            "namespace": driver::NAMESPACE,
            "labels": labelled(job),
        },
        "spec": spec,
    })
}

/// The HelmRelease of a renamed copy: the source's, renamed, relabelled, without server fields,
/// Velero's restore annotation and status.
pub fn renamed_release(source: &Json, target_name: &str, target_app: &str) -> Json {
    let mut hr = source.clone();
    let meta = &mut hr["metadata"];
    if let Some(m) = meta.as_object_mut() {
        for k in [
            "resourceVersion",
            "uid",
            "creationTimestamp",
            "managedFields",
            "generation",
        ] {
            m.remove(k);
        }
        m.insert("name".into(), json!(target_name));
    }
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][labels::APPLICATION_NAME] = json!(target_app);
    meta["labels"]["app.kubernetes.io/instance"] = json!(target_name);
    meta["labels"]["helm.toolkit.fluxcd.io/name"] = json!(target_name);
    if let Some(a) = meta["annotations"].as_object_mut() {
        a.remove("velero.io/restore-name");
    }
    if let Some(o) = hr.as_object_mut() {
        o.remove("status");
    }
    hr
}

fn named<'a>(objects: &'a [Json], name: &str) -> Option<&'a Json> {
    objects.iter().find(|o| o["metadata"]["name"] == name)
}

fn deleting(o: &Json) -> bool {
    !o["metadata"]["deletionTimestamp"].is_null()
}

fn object(api_version: &'static str, kind: &'static str, namespace: &str, name: &str) -> ObjectRef {
    ObjectRef {
        api_version,
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

/// A preparation action: a refusal fails the restore (`pre-restore preparation failed: <err>`).
fn prepare(action: Action, events: Vec<Event>) -> Step {
    Step::Act {
        action,
        events,
        on_error: OnError {
            prefix: "pre-restore preparation failed",
            resume: None,
        },
    }
}

fn note(text: String) -> Vec<Event> {
    vec![Event::normal(event_reasons::PREPARE_FOR_RESTORE, text)]
}

/// The in-place preparation's next step, `None` when it is complete, or a wait with what remains.
fn preparation(
    o: &Observed<'_>,
    options: &VeleroOptions,
    resources: Option<&Json>,
) -> Result<Option<Step>, String> {
    let backup = o.backup;
    let ns = backup.metadata.namespace.clone().unwrap_or_default();
    let app = &backup.spec.application_ref.name;
    let vm_kind = backup.spec.application_ref.kind == driver::VM_INSTANCE_KIND;
    let job_name = o.job.metadata.name.clone().unwrap_or_default();
    let disks = disks(resources);

    // Suspend the VM's and disks' HelmReleases.
    let mut releases: Vec<String> = Vec::new();
    if vm_kind {
        releases.push(format!("{}{app}", driver::VM_PREFIX));
    }
    releases.extend(disks.iter().map(|(dv, _)| dv.clone()));
    for r in &releases {
        if named(o.releases, r).is_some_and(|hr| hr["spec"]["suspend"] != json!(true)) {
            return Ok(Some(prepare(
                Action::SetSuspend {
                    release: helm_release(&ns, r),
                    suspend: true,
                },
                note(format!("Suspended HelmRelease {r}")),
            )));
        }
    }

    // Halt the VM and wait for its instance to go.
    let vm_name = format!("{}{app}", driver::VM_PREFIX);
    if vm_kind {
        if o.vm.is_some_and(|vm| vm["spec"]["runStrategy"] != "Halted") {
            return Ok(Some(prepare(
                Action::MergePatch {
                    target: object("kubevirt.io/v1", "VirtualMachine", &ns, &vm_name),
                    patch: json!({"spec": {"runStrategy": "Halted"}}),
                    field_manager: FIELD_MANAGER,
                },
                Vec::new(),
            )));
        }
        if o.vm.is_some() && o.vmi.is_some() {
            return Err(format!(
                "VM {ns}/{vm_name} to shut down (its VirtualMachineInstance still exists)"
            ));
        }
    }

    // Keep each disk's PVC under another name, bound to the same PV.
    if options.keep_original_pvc {
        for (dv, _) in &disks {
            let kept = kept_name(dv, &job_name);
            let old = named(o.pvcs, dv);
            let new = named(o.pvcs, &kept);
            match (old, new) {
                (Some(old), None) if !deleting(old) => {
                    let pv_name = old["spec"]["volumeName"].as_str().unwrap_or_default();
                    if pv_name.is_empty() {
                        return Ok(Some(prepare(
                            Action::Delete(object("v1", "PersistentVolumeClaim", &ns, dv)),
                            Vec::new(),
                        )));
                    }
                    let Some(pv) = named(o.pvs, pv_name) else {
                        return Err(format!(
                            "PersistentVolume {pv_name} of PVC {ns}/{dv} to be readable"
                        ));
                    };
                    if pv["spec"]["persistentVolumeReclaimPolicy"] != "Retain" {
                        return Ok(Some(prepare(
                            Action::MergePatch {
                                target: object("v1", "PersistentVolume", "", pv_name),
                                patch: json!({"spec": {"persistentVolumeReclaimPolicy": "Retain"}}),
                                field_manager: FIELD_MANAGER,
                            },
                            Vec::new(),
                        )));
                    }
                    let s = &old["spec"];
                    let mut spec = json!({"accessModes": s["accessModes"], "resources": s["resources"], "volumeName": pv_name});
                    for k in ["storageClassName", "volumeMode"] {
                        if !s[k].is_null() {
                            spec[k] = s[k].clone();
                        }
                    }
                    return Ok(Some(prepare(
                        Action::Create(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                            "metadata": {"name": kept, "namespace": ns}, "spec": spec})),
                        Vec::new(),
                    )));
                }
                (Some(old), Some(new)) if !deleting(old) => {
                    let pv = new["spec"]["volumeName"].as_str().unwrap_or_default();
                    return Ok(Some(prepare(
                        Action::Delete(object("v1", "PersistentVolumeClaim", &ns, dv)),
                        note(format!("Keep old PVC {dv} as {kept} (PV: {pv})")),
                    )));
                }
                (Some(_), _) => {
                    return Err(format!("PVC {ns}/{dv} to be deleted"));
                }
                (None, Some(new)) => {
                    let pv_name = new["spec"]["volumeName"].as_str().unwrap_or_default();
                    let uid = new["metadata"]["uid"].as_str().unwrap_or_default();
                    let pv = named(o.pvs, pv_name);
                    let bound = pv.is_some_and(|pv| {
                        let c = &pv["spec"]["claimRef"];
                        c["name"] == kept.as_str()
                            && c["namespace"] == ns.as_str()
                            && c["uid"] == uid
                    });
                    if pv.is_some() && !uid.is_empty() && !bound {
                        return Ok(Some(prepare(
                            Action::MergePatch {
                                target: object("v1", "PersistentVolume", "", pv_name),
                                patch: json!({"spec": {"claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                    "namespace": ns, "name": kept, "uid": uid, "resourceVersion": null}}}),
                                field_manager: FIELD_MANAGER,
                            },
                            Vec::new(),
                        )));
                    }
                }
                (None, None) => {}
            }
        }
    }

    // Delete each DataVolume, orphaning its PVC first (the restore brings both back).
    for (dv, _) in &disks {
        let Some(volume) = named(o.data_volumes, dv) else {
            continue;
        };
        if let Some(pvc) = named(o.pvcs, dv) {
            let refs = pvc["metadata"]["ownerReferences"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let kept: Vec<Json> = refs
                .iter()
                .filter(|r| !(r["kind"] == "DataVolume" && r["name"] == dv.as_str()))
                .cloned()
                .collect();
            if kept.len() != refs.len() {
                return Ok(Some(prepare(
                    Action::MergePatch {
                        target: object("v1", "PersistentVolumeClaim", &ns, dv),
                        patch: json!({"metadata": {"ownerReferences": kept}}),
                        field_manager: FIELD_MANAGER,
                    },
                    Vec::new(),
                )));
            }
        }
        if !deleting(volume) {
            return Ok(Some(prepare(
                Action::Delete(object("cdi.kubevirt.io/v1beta1", "DataVolume", &ns, dv)),
                note(format!("Deleted DataVolume {dv}")),
            )));
        }
        return Err(format!("DataVolume {ns}/{dv} to be deleted"));
    }
    Ok(None)
}

fn wait(started: &Time, deadline: Duration, now: &Time) -> Step {
    Step::Wait {
        events: Vec::new(),
        requeue: Some(
            deadline
                .saturating_sub(elapsed(started, now))
                .clamp(Duration::from_secs(1), POLL),
        ),
    }
}

/// Decides the next step of a Velero restore.
pub fn decide(o: &Observed<'_>) -> Step {
    let (job, backup, now) = (o.job, o.backup, &o.now);
    let mut status = status_of(job);

    // 1. Options and target, before anything else.
    let options = match super::options::velero(job.spec.options.as_ref()) {
        Ok(v) => v,
        Err(r) => return fail(&status, &r.message, r.events, now),
    };
    let t = target(job, backup, &options);
    if t.copy && !o.target_namespace_exists {
        return fail(
            &status,
            &format!(
                "target namespace {:?} does not exist; create it before requesting a cross-namespace restore",
                t.namespace
            ),
            Vec::new(),
            now,
        );
    }
    if !t.copy && t.renamed {
        return fail(
            &status,
            "restoring to the same namespace with a different application name is not supported due to Velero DataUpload limitations: data is always uploaded to PVCs with the original name. Use options.targetNamespace to restore into a different namespace",
            Vec::new(),
            now,
        );
    }

    // 2. startedAt (+ phase Running).
    let started = proceed!(skeleton::start(&status, now, Vec::new));

    // 3. Strategy and the Velero Backup's name.
    let Some(strategy) = o.strategy else {
        return strategy_not_ready(&status, &backup.spec.strategy_ref.name, now);
    };
    let Some(velero_backup) = backup
        .spec
        .driver_metadata
        .as_ref()
        .and_then(|m| m.get(keys::BACKUP_NAME))
    else {
        return fail(
            &status,
            &format!(
                "Backup missing Velero backup name in driverMetadata (key: {})",
                keys::BACKUP_NAME
            ),
            Vec::new(),
            now,
        );
    };

    // 4. The job's Velero Restore.
    let restore = match o.restores {
        [] => None,
        [one] => Some(one),
        _ => {
            return fail(
                &status,
                "found multiple Velero Restores for this RestoreJob",
                Vec::new(),
                now,
            );
        }
    };
    let Some(restore) = restore else {
        let resources = vm_resources(backup, o.velero_backup);
        if t.copy
            && options.fail_if_target_exists
            && release_name(&t.kind, &t.app).is_some_and(|r| named(o.releases, &r).is_some())
        {
            return fail(
                &status,
                &format!(
                    "target application {:?} already exists in namespace {:?}; set options.failIfTargetExists=false to overwrite",
                    t.app, t.namespace
                ),
                Vec::new(),
                now,
            );
        }
        if !t.copy {
            match preparation(o, &options, resources.as_ref()) {
                Ok(Some(step)) => return step,
                Ok(None) => {}
                Err(what) => {
                    if elapsed(&started, now) > PREPARE_DEADLINE {
                        return fail(
                            &status,
                            &format!(
                                "pre-restore preparation failed: waited {} for {what}",
                                go_duration(PREPARE_DEADLINE)
                            ),
                            Vec::new(),
                            now,
                        );
                    }
                    return wait(&started, PREPARE_DEADLINE, now);
                }
            }
        }
        if o.config_map.is_none() {
            let prepared = if t.copy {
                "Restore to copy: skipping source application preparation"
            } else {
                "Pre-restore preparation complete"
            };
            return Step::Act {
                action: Action::Create(config_map(
                    job,
                    &modifier_rules(&t, &options, resources.as_ref()),
                )),
                events: note(prepared.into()),
                on_error: OnError {
                    prefix: "failed to create Velero Restore: failed to create resourceModifiers ConfigMap",
                    resume: None,
                },
            };
        }
        let body = restore_body(job, backup, strategy, velero_backup, &t, resources.as_ref());
        let generate_name = body["metadata"]["generateName"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        return Step::Act {
            action: Action::Create(body),
            events: vec![Event::normal(
                event_reasons::VELERO_RESTORE_CREATED,
                format!(
                    "Created Velero Restore {}/{generate_name}",
                    driver::NAMESPACE
                ),
            )],
            on_error: OnError {
                prefix: "failed to create Velero Restore",
                resume: None,
            },
        };
    };

    // 5. Its phase.
    let phase = restore["status"]["phase"].as_str().unwrap_or_default();
    match phase {
        "Completed" => {
            if t.renamed {
                let source = format!("{}{}", driver::VM_PREFIX, backup.spec.application_ref.name);
                let renamed = format!("{}{}", driver::VM_PREFIX, t.app);
                if let Some(old) = named(o.releases, &source) {
                    let on_error = OnError {
                        prefix: "post-restore rename failed",
                        resume: None,
                    };
                    if named(o.releases, &renamed).is_none() {
                        return Step::Act {
                            action: Action::Create(renamed_release(old, &renamed, &t.app)),
                            events: vec![Event::normal(
                                event_reasons::POST_RESTORE_RENAME,
                                format!("Created renamed HelmRelease {renamed} (from {source})"),
                            )],
                            on_error,
                        };
                    }
                    return Step::Act {
                        action: Action::Delete(helm_release(&t.namespace, &source)),
                        events: vec![Event::normal(
                            event_reasons::POST_RESTORE_RENAME,
                            format!("Deleted old HelmRelease {source}"),
                        )],
                        on_error,
                    };
                }
            }
            crate::status::restore_succeeded(&mut status, None, now);
            Step::Status {
                status,
                events: Vec::new(),
                requeue: None,
            }
        }
        "Failed" | "PartiallyFailed" => {
            let mut message = format!("Velero Restore failed with phase: {phase}");
            if let Some(r) = restore["status"]["failureReason"]
                .as_str()
                .filter(|r| !r.is_empty())
            {
                message = format!("{message}: {r}");
            }
            fail(&status, &message, Vec::new(), now)
        }
        _ if elapsed(&started, now) > RESTORE_DEADLINE => fail(
            &status,
            &format!(
                "Velero Restore {}/{} did not finish within {} (phase={phase:?})",
                driver::NAMESPACE,
                restore["metadata"]["name"].as_str().unwrap_or_default(),
                go_duration(RESTORE_DEADLINE)
            ),
            Vec::new(),
            now,
        ),
        _ => wait(&started, RESTORE_DEADLINE, now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restore::cnpg::merge_patch_apply;
    use api::backups::{BackupStatus, RestoreJobStatus};
    use pretty_assertions::assert_eq;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    /// A namespace as the executor observes it, with a fake executor, KubeVirt and Velero.
    struct World {
        job: RestoreJob,
        backup: Backup,
        strategy: Option<Json>,
        namespace_exists: bool,
        restores: Vec<Json>,
        config_map: Option<Json>,
        releases: Vec<Json>,
        vm: Option<Json>,
        vmi: Option<Json>,
        /// The VMI goes as soon as the VM is halted.
        vmi_follows: bool,
        pvcs: Vec<Json>,
        pvs: Vec<Json>,
        data_volumes: Vec<Json>,
        log: Vec<String>,
        events: Vec<(&'static str, String)>,
    }

    fn world() -> World {
        let mut job = RestoreJob::test("rj", "bk").namespace("t").build();
        job.status = Some(RestoreJobStatus {
            phase: Some("Running".into()),
            started_at: Some(t("2026-03-01T10:00:00Z")),
            ..Default::default()
        });
        let mut backup = Backup::test("bk")
            .namespace("t")
            .for_app("VMInstance", "vm1")
            .strategy(
                "strategy.backups.cozystack.io",
                "Velero",
                "cozy-default-velero",
            )
            .driver_metadata(&[(keys::BACKUP_NAME, "t.bj-abcde")])
            .build();
        backup.status = Some(BackupStatus {
            underlying_resources: Some(json!({
                "dataVolumes": [{"dataVolumeName": "vm-disk-d1", "applicationName": "d1"}],
                "ip": "10.0.0.5", "mac": "aa:bb:cc:dd:ee:ff"})),
            ..Default::default()
        });
        World {
            job,
            backup,
            strategy: Some(json!({"spec": {"template": {"restoreSpec": {
                "includedNamespaces": ["{{ .Application.metadata.namespace }}"]}}}})),
            namespace_exists: false,
            restores: Vec::new(),
            config_map: None,
            releases: vec![
                json!({"metadata": {"name": "vm-instance-vm1"}, "spec": {"suspend": false}}),
                json!({"metadata": {"name": "vm-disk-d1"}, "spec": {}}),
            ],
            vm: Some(
                json!({"metadata": {"name": "vm-instance-vm1"}, "spec": {"runStrategy": "Always"}}),
            ),
            vmi: Some(json!({"metadata": {"name": "vm-instance-vm1"}})),
            vmi_follows: true,
            pvcs: vec![json!({"metadata": {"name": "vm-disk-d1", "uid": "u-old",
                    "ownerReferences": [{"kind": "DataVolume", "name": "vm-disk-d1"}]},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "5Gi"}},
                         "storageClassName": "replicated", "volumeMode": "Block", "volumeName": "pv-1"}})],
            pvs: vec![
                json!({"metadata": {"name": "pv-1"}, "spec": {"persistentVolumeReclaimPolicy": "Delete",
                "claimRef": {"namespace": "t", "name": "vm-disk-d1", "uid": "u-old"}}}),
            ],
            data_volumes: vec![json!({"metadata": {"name": "vm-disk-d1"}})],
            log: Vec::new(),
            events: Vec::new(),
        }
    }

    fn find<'a>(objects: &'a mut [Json], name: &str) -> &'a mut Json {
        objects
            .iter_mut()
            .find(|o| o["metadata"]["name"] == name)
            .unwrap()
    }

    impl World {
        fn decide(&self, now: &str) -> Step {
            decide(&Observed {
                job: &self.job,
                backup: &self.backup,
                now: t(now),
                strategy: self.strategy.as_ref(),
                target_namespace_exists: self.namespace_exists,
                velero_backup: None,
                restores: &self.restores,
                config_map: self.config_map.as_ref(),
                releases: &self.releases,
                vm: self.vm.as_ref(),
                vmi: self.vmi.as_ref(),
                pvcs: &self.pvcs,
                pvs: &self.pvs,
                data_volumes: &self.data_volumes,
            })
        }

        fn run(&mut self, now: &str) -> Option<Duration> {
            for _ in 0..50 {
                match self.decide(now) {
                    Step::Status {
                        status,
                        events,
                        requeue,
                    } => {
                        self.log.push(format!(
                            "status {}",
                            status.phase.clone().unwrap_or_default()
                        ));
                        self.events
                            .extend(events.into_iter().map(|e| (e.reason, e.note)));
                        self.job.status = Some(status);
                        if self.job.is_terminal() {
                            return requeue;
                        }
                    }
                    Step::Wait { requeue, .. } => return requeue,
                    Step::Act { action, events, .. } => {
                        self.events
                            .extend(events.into_iter().map(|e| (e.reason, e.note)));
                        self.perform(action);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            panic!("no progress: {:?}", self.log);
        }

        fn perform(&mut self, action: Action) {
            match action {
                Action::SetSuspend { release, suspend } => {
                    self.log.push(format!("suspend {}", release.name));
                    find(&mut self.releases, &release.name)["spec"]["suspend"] = json!(suspend);
                }
                Action::MergePatch { target, patch, .. } => {
                    self.log
                        .push(format!("patch {} {}", target.kind, target.name));
                    let obj = match target.kind {
                        "VirtualMachine" => self.vm.as_mut().unwrap(),
                        "PersistentVolume" => find(&mut self.pvs, &target.name),
                        "PersistentVolumeClaim" => find(&mut self.pvcs, &target.name),
                        other => panic!("patch of {other}"),
                    };
                    *obj = merge_patch_apply(obj, &patch);
                    if target.kind == "VirtualMachine" && self.vmi_follows {
                        self.vmi = None;
                    }
                }
                Action::Delete(r) => {
                    self.log.push(format!("delete {} {}", r.kind, r.name));
                    let list = match r.kind {
                        "PersistentVolumeClaim" => &mut self.pvcs,
                        "DataVolume" => &mut self.data_volumes,
                        "HelmRelease" => &mut self.releases,
                        other => panic!("delete of {other}"),
                    };
                    list.retain(|o| o["metadata"]["name"] != r.name.as_str());
                }
                Action::Create(mut body) => {
                    let kind = body["kind"].as_str().unwrap().to_owned();
                    self.log.push(format!("create {kind}"));
                    match kind.as_str() {
                        "PersistentVolumeClaim" => {
                            body["metadata"]["uid"] = json!("u-new");
                            self.pvcs.push(body);
                        }
                        "ConfigMap" => self.config_map = Some(body),
                        "Restore" => {
                            body["metadata"]["name"] = json!("t.rj-xyz12");
                            self.restores.push(body);
                        }
                        "HelmRelease" => self.releases.push(body),
                        other => panic!("create of {other}"),
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }

        fn phase(&self) -> String {
            self.job
                .status
                .as_ref()
                .and_then(|s| s.phase.clone())
                .unwrap_or_default()
        }

        fn message(&self) -> String {
            self.job
                .status
                .as_ref()
                .and_then(|s| s.message.clone())
                .unwrap_or_default()
        }
    }

    #[test]
    fn in_place_prepares_keeps_the_pvc_and_restores() {
        let mut w = world();
        assert_eq!(w.run("2026-03-01T10:00:01Z"), Some(POLL));
        assert_eq!(
            w.log,
            [
                "suspend vm-instance-vm1",
                "suspend vm-disk-d1",
                "patch VirtualMachine vm-instance-vm1",
                "patch PersistentVolume pv-1",
                "create PersistentVolumeClaim",
                "delete PersistentVolumeClaim vm-disk-d1",
                "patch PersistentVolume pv-1",
                "delete DataVolume vm-disk-d1",
                "create ConfigMap",
                "create Restore",
            ]
        );
        let kept = named(&w.pvcs, "vm-disk-d1-orig-8604").unwrap();
        assert_eq!(kept["spec"]["volumeName"], "pv-1");
        assert_eq!(kept["spec"]["volumeMode"], "Block");
        assert_eq!(
            w.pvs[0]["spec"],
            json!({"persistentVolumeReclaimPolicy": "Retain", "claimRef": {"apiVersion": "v1",
                "kind": "PersistentVolumeClaim", "namespace": "t", "name": "vm-disk-d1-orig-8604", "uid": "u-new"}})
        );
        let restore = &w.restores[0];
        assert_eq!(restore["metadata"]["generateName"], "t.rj-");
        assert_eq!(restore["metadata"]["namespace"], "cozy-velero");
        assert_eq!(
            restore["spec"],
            json!({"includedNamespaces": ["t"], "backupName": "t.bj-abcde",
                   "orLabelSelectors": [{"matchLabels": {"apps.cozystack.io/application.kind": "VMDisk",
                                                          "apps.cozystack.io/application.name": "d1"}}],
                   "resourceModifier": {"apiGroup": "", "kind": "ConfigMap", "name": "restore-modifiers-t-rj"}})
        );
        let rules: Json = serde_json::from_str(
            w.config_map.as_ref().unwrap()["data"][MODIFIER_KEY]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        let patches: Vec<&str> = rules["resourceModifierRules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["mergePatches"][0]["patchData"].as_str().unwrap())
            .collect();
        assert_eq!(
            patches,
            [
                r#"{"metadata":{"annotations":{"cdi.kubevirt.io/allowClaimAdoption":"true"}}}"#,
                r#"{"spec":{"template":{"metadata":{"annotations":{"ovn.kubernetes.io/ip_address":"10.0.0.5","ovn.kubernetes.io/mac_address":"aa:bb:cc:dd:ee:ff"}}}}}"#,
            ]
        );
        let notes: Vec<&str> = w.events.iter().map(|e| e.1.as_str()).collect();
        assert_eq!(
            notes,
            [
                "Suspended HelmRelease vm-instance-vm1",
                "Suspended HelmRelease vm-disk-d1",
                "Keep old PVC vm-disk-d1 as vm-disk-d1-orig-8604 (PV: pv-1)",
                "Deleted DataVolume vm-disk-d1",
                "Pre-restore preparation complete",
                "Created Velero Restore cozy-velero/t.rj-",
            ]
        );
        // Waiting for Velero, then success without a Ready condition.
        w.log.clear();
        assert_eq!(w.run("2026-03-01T10:01:00Z"), Some(POLL));
        assert!(w.log.is_empty(), "{:?}", w.log);
        w.restores[0]["status"] = json!({"phase": "Completed"});
        w.run("2026-03-01T10:30:00Z");
        assert_eq!(w.phase(), "Succeeded");
        assert!(w.job.status.as_ref().unwrap().conditions.is_empty());
    }

    #[test]
    fn a_vm_that_never_stops_fails_the_preparation_at_its_deadline() {
        let mut w = world();
        w.vmi_follows = false;
        assert_eq!(w.run("2026-03-01T10:00:01Z"), Some(POLL));
        assert_eq!(w.run("2026-03-01T10:29:58Z"), Some(Duration::from_secs(2)));
        assert!(
            w.pvcs.iter().any(|p| p["metadata"]["name"] == "vm-disk-d1"),
            "disks untouched while the VM runs"
        );
        w.run("2026-03-01T10:30:01Z");
        assert_eq!(w.phase(), "Failed");
        assert_eq!(
            w.message(),
            "pre-restore preparation failed: waited 30m0s for VM t/vm-instance-vm1 to shut down (its VirtualMachineInstance still exists)"
        );
        assert!(w.restores.is_empty());
    }

    #[test]
    fn without_keeping_the_pvc_it_is_orphaned_before_the_data_volume_goes() {
        let mut w = world();
        w.job.spec.options = Some(json!({"keepOriginalPVC": false, "keepOriginalIpAndMac": false}));
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.log[3..6],
            [
                "patch PersistentVolumeClaim vm-disk-d1",
                "delete DataVolume vm-disk-d1",
                "create ConfigMap"
            ]
        );
        assert_eq!(w.pvcs.len(), 1);
        assert_eq!(w.pvcs[0]["metadata"]["ownerReferences"], json!([]));
        let rules = w.config_map.as_ref().unwrap()["data"][MODIFIER_KEY]
            .as_str()
            .unwrap();
        assert!(!rules.contains("ovn.kubernetes.io"), "{rules}");
    }

    #[test]
    fn a_renamed_copy_restores_into_the_other_namespace_and_renames_the_release() {
        let mut w = world();
        w.namespace_exists = true;
        w.job.spec.options = Some(json!({"targetNamespace": "t2"}));
        w.job.spec.target_application_ref =
            Some(api::TypedLocalObjectReference::new("", "", "vm2"));
        w.releases.clear();
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.log,
            ["create ConfigMap", "create Restore"],
            "no preparation of the source"
        );
        assert_eq!(
            w.restores[0]["spec"]["namespaceMapping"],
            json!({"t": "t2"})
        );
        let rules = w.config_map.as_ref().unwrap()["data"][MODIFIER_KEY]
            .as_str()
            .unwrap();
        assert!(
            rules.contains(r#"{\"spec\":{\"selector\":null,\"volumeName\":null}}"#),
            "{rules}"
        );
        assert!(
            rules.contains(
                r#""namespaces": [
          "t2"
        ]"#
            ),
            "{rules}"
        );
        // Velero brought back the source's release into t2.
        w.releases.push(
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {"name": "vm-instance-vm1", "uid": "x", "resourceVersion": "7",
            "labels": {"apps.cozystack.io/application.name": "vm1"},
            "annotations": {"velero.io/restore-name": "t.rj-xyz12", "keep": "me"}},
            "spec": {"values": {"a": 1}}, "status": {"ready": true}}),
        );
        w.restores[0]["status"] = json!({"phase": "Completed"});
        w.log.clear();
        w.run("2026-03-01T10:10:00Z");
        assert_eq!(
            w.log,
            [
                "create HelmRelease",
                "delete HelmRelease vm-instance-vm1",
                "status Succeeded"
            ]
        );
        assert_eq!(
            w.releases[0],
            json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {"name": "vm-instance-vm2",
                "labels": {"apps.cozystack.io/application.name": "vm2", "app.kubernetes.io/instance": "vm-instance-vm2",
                           "helm.toolkit.fluxcd.io/name": "vm-instance-vm2"},
                "annotations": {"keep": "me"}}, "spec": {"values": {"a": 1}}})
        );
    }

    #[test]
    fn refusals() {
        type Change = Box<dyn Fn(&mut World)>;
        let cases: Vec<(Change, &str)> = vec![
            (
                Box::new(|w: &mut World| {
                    w.job.spec.options = Some(json!({"keepOriginalPVC": "yes"}))
                }),
                "invalid restore options: failed to parse restore options: keepOriginalPVC: expected a boolean, got a string",
            ),
            (
                Box::new(|w: &mut World| {
                    w.job.spec.options = Some(json!({"targetNamespace": "nope"}))
                }),
                "target namespace \"nope\" does not exist; create it before requesting a cross-namespace restore",
            ),
            (
                Box::new(|w: &mut World| {
                    w.job.spec.target_application_ref =
                        Some(api::TypedLocalObjectReference::new("", "", "vm2"))
                }),
                "restoring to the same namespace with a different application name is not supported due to Velero DataUpload limitations: data is always uploaded to PVCs with the original name. Use options.targetNamespace to restore into a different namespace",
            ),
            (
                Box::new(|w: &mut World| {
                    w.namespace_exists = true;
                    w.job.spec.options = Some(json!({"targetNamespace": "t2"}));
                }),
                "target application \"vm1\" already exists in namespace \"t2\"; set options.failIfTargetExists=false to overwrite",
            ),
            (
                Box::new(|w: &mut World| w.backup.spec.driver_metadata = None),
                "Backup missing Velero backup name in driverMetadata (key: velero.io/backup-name)",
            ),
            (
                Box::new(|w: &mut World| {
                    w.restores = vec![
                        json!({"metadata": {"name": "a"}}),
                        json!({"metadata": {"name": "b"}}),
                    ]
                }),
                "found multiple Velero Restores for this RestoreJob",
            ),
            (
                Box::new(|w: &mut World| {
                    w.restores = vec![json!({"metadata": {"name": "a"},
                        "status": {"phase": "PartiallyFailed", "failureReason": "DataDownload failed"}})]
                }),
                "Velero Restore failed with phase: PartiallyFailed: DataDownload failed",
            ),
        ];
        for (change, message) in cases {
            let mut w = world();
            change(&mut w);
            w.run("2026-03-01T10:00:01Z");
            assert_eq!((w.phase(), w.message()), ("Failed".into(), message.into()));
            assert!(
                !w.log
                    .iter()
                    .any(|l| l.starts_with("suspend") || l.starts_with("create")),
                "{message}: {:?}",
                w.log
            );
        }
        // A missing strategy waits (StrategyNotReady); a Velero Restore that never ends fails.
        let mut w = world();
        w.strategy = None;
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.phase(), "Running");
        let mut w = world();
        w.restores =
            vec![json!({"metadata": {"name": "t.rj-1"}, "status": {"phase": "InProgress"}})];
        w.run("2026-03-02T10:00:01Z");
        assert_eq!(
            w.message(),
            "Velero Restore cozy-velero/t.rj-1 did not finish within 24h0m0s (phase=\"InProgress\")"
        );
    }

    #[test]
    fn a_crash_mid_preparation_resumes_without_repeating() {
        // Kept PVC created, old claim not yet deleted: the next pass deletes it, creates nothing.
        let mut w = world();
        w.vm.as_mut().unwrap()["spec"]["runStrategy"] = json!("Halted");
        w.vmi = None;
        for r in &mut w.releases {
            r["spec"]["suspend"] = json!(true);
        }
        w.pvs[0]["spec"]["persistentVolumeReclaimPolicy"] = json!("Retain");
        w.pvcs.push(
            json!({"metadata": {"name": "vm-disk-d1-orig-8604", "uid": "u-new"},
            "spec": {"volumeName": "pv-1"}}),
        );
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.log[0], "delete PersistentVolumeClaim vm-disk-d1");
        assert_eq!(
            w.log
                .iter()
                .filter(|l| l.starts_with("create PersistentVolumeClaim"))
                .count(),
            0
        );
        assert_eq!(kept_name("vm-disk-d1", "rj"), "vm-disk-d1-orig-8604");
        assert_eq!(config_map_name("t", &"x".repeat(300)).len(), 253);
    }
}
