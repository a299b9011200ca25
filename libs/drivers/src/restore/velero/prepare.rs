//! The in-place preparation of a Velero restore, step by step: suspend the VM's and disks'
//! HelmReleases, halt the VM and wait for its instance to go, keep each disk's PVC when asked
//! (`keepOriginalPVC`), and delete each DataVolume with its PVC orphaned first. Every step is
//! derived again from the cluster's objects, so a crash repeats nothing.

use api::contract::event_reasons;
use serde_json::{Value as Json, json};

use super::{FIELD_MANAGER, Observed, deleting, disks, kept_name, named, object};
use crate::restore::options::VeleroOptions;
use crate::restore::skeleton::helm_release;
use crate::restore::{Action, Event, OnError, Step};
use crate::velero as driver;

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

pub(super) fn note(text: String) -> Vec<Event> {
    vec![Event::normal(event_reasons::PREPARE_FOR_RESTORE, text)]
}

/// The in-place preparation's next step, `None` when it is complete, or a wait with what remains.
pub(super) fn preparation(
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
