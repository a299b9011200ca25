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

mod prepare;

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

pub(super) fn named<'a>(objects: &'a [Json], name: &str) -> Option<&'a Json> {
    objects.iter().find(|o| o["metadata"]["name"] == name)
}

pub(super) fn deleting(o: &Json) -> bool {
    !o["metadata"]["deletionTimestamp"].is_null()
}

pub(super) fn object(
    api_version: &'static str,
    kind: &'static str,
    namespace: &str,
    name: &str,
) -> ObjectRef {
    ObjectRef {
        api_version,
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
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
            match prepare::preparation(o, &options, resources.as_ref()) {
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
                events: prepare::note(prepared.into()),
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
mod tests;
