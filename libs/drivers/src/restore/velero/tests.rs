//! Table tests of the Velero restore.

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
    w.job.spec.target_application_ref = Some(api::TypedLocalObjectReference::new("", "", "vm2"));
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
            Box::new(|w: &mut World| w.job.spec.options = Some(json!({"keepOriginalPVC": "yes"}))),
            "invalid restore options: failed to parse restore options: keepOriginalPVC: expected a boolean, got a string",
        ),
        (
            Box::new(|w: &mut World| w.job.spec.options = Some(json!({"targetNamespace": "nope"}))),
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
    w.restores = vec![json!({"metadata": {"name": "t.rj-1"}, "status": {"phase": "InProgress"}})];
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
