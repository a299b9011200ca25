//! End to end, the Velero restore of a VMInstance: the real orchestrator, runner and projector
//! against the emulator with the simulated Velero. A real Backup is taken first. In place, the
//! orchestrator prepares the namespace (suspends the HelmReleases, halts the VM and waits for its
//! instance to go, keeps the disk's PVC under another name bound to the same PV, deletes the
//! DataVolume) and then runs one Velero Restore to `Completed`; into another namespace
//! (`targetNamespace`) it skips the preparation and maps the namespace; the resource modifiers follow
//! `keepOriginalIpAndMac` and the copy; a copy over an existing
//! application is refused (`failIfTargetExists`). Velero's `Failed` ends the job with its reason; a
//! restore Velero keeps `InProgress` keeps the job running until Velero finishes it (the driver's
//! own deadline is 24 h and has no option, so it is not waited for here); malformed options fail
//! at once without a `MalformedOptions` Event.

use crate::support;

use api::thirdparty::{apps, flux, velero};
use kube::core::ApiResource;
use serde_json::{Value, json};
use support::{FAIL_RESTORE, HANG_RESTORE, Platform, TENANT, crd, name_of};

const VELERO_NS: &str = "cozy-velero";
const COPY_NS: &str = "tenant-copy";
const BUSY_NS: &str = "tenant-busy";

pub(crate) fn restores() -> ApiResource {
    ApiResource::erase::<velero::Restore>(&())
}

pub(crate) fn releases() -> ApiResource {
    ApiResource::erase::<flux::HelmRelease>(&())
}

pub(crate) fn vms() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    )
}

pub(crate) fn vmis() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
        "virtualmachineinstances",
    )
}

fn data_volumes() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "DataVolume"),
        "datavolumes",
    )
}

fn pvcs() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(&())
}

fn pvs() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::PersistentVolume>(&())
}

/// The platform's Velero strategy for `prefix` (`vm-instance` or `vm-disk`).
pub(crate) fn template(prefix: &str, resources: &[&str]) -> Value {
    let selectors = json!([
        {"matchLabels": {"app.kubernetes.io/instance": format!("{prefix}-{{{{ .Application.metadata.name }}}}")}},
        {"matchLabels": {
            "apps.cozystack.io/application.kind": "{{ .Application.kind }}",
            "apps.cozystack.io/application.name": "{{ .Application.metadata.name }}",
        }},
    ]);
    json!({
        "spec": {
            "includedNamespaces": ["{{ .Application.metadata.namespace }}"],
            "orLabelSelectors": selectors,
            "includedResources": resources,
            "storageLocation": "{{ .Parameters.backupStorageLocationName }}",
            "snapshotVolumes": true,
            "snapshotMoveData": true,
            "ttl": "720h0m0s",
        },
        "restoreSpec": {
            "includedNamespaces": ["{{ .Application.metadata.namespace }}"],
            "orLabelSelectors": selectors,
            "existingResourcePolicy": "update",
        },
    })
}

pub(crate) fn release(ns: &str, name: &str) -> Value {
    json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
           "metadata": {"name": name, "namespace": ns}, "spec": {"chart": {"spec": {"chart": name}}}})
}

/// VMInstance `web` with disk `web-root` and what its charts and KubeVirt/CDI run: the two
/// HelmReleases, the VM and its instance, the DataVolume and its PVC bound to a PV.
pub(crate) async fn vm(p: &Platform) {
    p.app_of(
        &ApiResource::erase::<apps::VMDisk>(&()),
        TENANT,
        "web-root",
        json!({"storage": "10Gi"}),
    )
    .await;
    p.app_of(
        &ApiResource::erase::<apps::VMInstance>(&()),
        TENANT,
        "web",
        json!({"disks": [{"name": "web-root"}], "runStrategy": "Always"}),
    )
    .await;
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "virt-launcher-vm-instance-web-x7k2p",
                     "labels": {"vm.kubevirt.io/name": "vm-instance-web"},
                     "annotations": {"ovn.kubernetes.io/ip_address": "10.244.0.15",
                                     "ovn.kubernetes.io/mac_address": "0a:58:0a:f4:00:0f"}},
        "spec": {"containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.5.0"}]},
    }))
    .unwrap();
    p.h.create(TENANT, &pod).await;
    for name in ["vm-instance-web", "vm-disk-web-root"] {
        p.apply(&releases(), release(TENANT, name)).await;
    }
    p.apply(
        &vms(),
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
               "metadata": {"name": "vm-instance-web", "namespace": TENANT}, "spec": {"runStrategy": "Always"}}),
    )
    .await;
    p.apply(
        &vmis(),
        json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
               "metadata": {"name": "vm-instance-web", "namespace": TENANT}, "spec": {}}),
    )
    .await;
    let dv = p
        .apply(
            &data_volumes(),
            json!({"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                   "metadata": {"name": "vm-disk-web-root", "namespace": TENANT}, "spec": {}}),
        )
        .await;
    let claim = json!({"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}},
                                "storageClassName": "replicated", "volumeMode": "Block", "volumeName": "pv-web-root"}});
    let mut pvc = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "vm-disk-web-root", "namespace": TENANT,
                     "ownerReferences": [{"apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
                                          "name": "vm-disk-web-root", "uid": dv.metadata.uid, "controller": true}]}});
    pvc["spec"] = claim["spec"].clone();
    let pvc = p.apply(&pvcs(), pvc).await;
    p.apply(
        &pvs(),
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-web-root"},
               "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                        "persistentVolumeReclaimPolicy": "Delete", "storageClassName": "replicated",
                        "volumeMode": "Block", "csi": {"driver": "driver.longhorn.io", "volumeHandle": "pv-web-root"},
                        "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": TENANT,
                                     "name": "vm-disk-web-root", "uid": pvc.metadata.uid}}}),
    )
    .await;
}

/// Runs a Backup `name` of VMInstance `web` and returns its Velero Backup's name.
async fn backup(p: &Platform, name: &str) -> String {
    let b = p.backup(TENANT, name, "VMInstance", "web", "vms").await;
    b.spec.driver_metadata.unwrap()["velero.io/backup-name"].clone()
}

/// The resource-modifier rules of RestoreJob `job`: `{groupResource, namespaces, patch}` each.
async fn rules(p: &Platform, job: &str) -> Value {
    let cm = p
        .get(
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            Some(VELERO_NS),
            &format!("restore-modifiers-{TENANT}-{job}"),
        )
        .await
        .expect("the resource-modifier ConfigMap");
    let doc: Value =
        serde_json::from_str(cm["data"]["resource-modifier-rules.yaml"].as_str().unwrap()).unwrap();
    assert_eq!(doc["version"], "v1");
    doc["resourceModifierRules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let patches = r["mergePatches"].as_array().unwrap();
            assert_eq!(patches.len(), 1);
            assert_eq!(r["conditions"]["resourceNameRegex"], ".*");
            json!({"groupResource": r["conditions"]["groupResource"],
                   "namespaces": r["conditions"]["namespaces"],
                   "patch": serde_json::from_str::<Value>(patches[0]["patchData"].as_str().unwrap()).unwrap()})
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn velero_restores_in_place_and_to_a_copy_fail_hang_and_refuse_bad_options() {
    let p = Platform::start(
        "velero",
        &[COPY_NS, BUSY_NS],
        vec![
            api::thirdparty::permissive_crd::<flux::HelmRelease>(true),
            crd(
                "kubevirt.io",
                "v1",
                "VirtualMachine",
                "virtualmachines",
                true,
            ),
            crd(
                "kubevirt.io",
                "v1",
                "VirtualMachineInstance",
                "virtualmachineinstances",
                true,
            ),
            crd(
                "cdi.kubevirt.io",
                "v1beta1",
                "DataVolume",
                "datavolumes",
                true,
            ),
        ],
    )
    .await;
    let strategies = ApiResource::erase::<api::strategy::Velero>(&());
    let vm_resources = [
        "helmreleases.helm.toolkit.fluxcd.io",
        "virtualmachines.kubevirt.io",
        "persistentvolumeclaims",
    ];
    p.strategy(&strategies, "vm", template("vm-instance", &vm_resources))
        .await;
    p.strategy(&strategies, "disk", template("vm-disk", &vm_resources[..1]))
        .await;
    let class = api::backups::BackupClass::test("vms")
        .route_to(
            "VMInstance",
            api::contract::groups::STRATEGY,
            "Velero",
            "vm",
            &[("backupStorageLocationName", "cozy-default")],
        )
        .route_to(
            "VMDisk",
            api::contract::groups::STRATEGY,
            "Velero",
            "disk",
            &[("backupStorageLocationName", "cozy-default")],
        )
        .build();
    p.h.create_cluster(&class).await;
    vm(&p).await;
    p.apply(&releases(), release(BUSY_NS, "vm-instance-web"))
        .await;
    let nightly = backup(&p, "nightly").await;
    let weekly = backup(&p, "weekly").await;

    p.restore(
        TENANT,
        "copy",
        "nightly",
        None,
        json!({"targetNamespace": COPY_NS, "keepOriginalPVC": false, "keepOriginalIpAndMac": false}),
    )
    .await;
    p.restore(
        TENANT,
        "over-busy",
        "nightly",
        None,
        json!({"targetNamespace": BUSY_NS}),
    )
    .await;
    p.restore(
        TENANT,
        "malformed",
        "nightly",
        None,
        json!({"keepOriginalPVC": "yes"}),
    )
    .await;
    p.restore(TENANT, "in-place", "nightly", None, json!(null))
        .await;

    // In place: the preparation, step by step as the cluster answers.
    support::eventually(&p, "the VM halted", async |p: &Platform| {
        let vm = p.get(&vms(), Some(TENANT), "vm-instance-web").await?;
        (vm["spec"]["runStrategy"] == "Halted").then_some(())
    })
    .await;
    for r in ["vm-instance-web", "vm-disk-web-root"] {
        assert_eq!(
            p.get(&releases(), Some(TENANT), r).await.unwrap()["spec"]["suspend"],
            true,
            "{r}"
        );
    }
    assert!(
        p.restored_by(&restores(), VELERO_NS, "in-place")
            .await
            .is_empty(),
        "nothing is restored while the VM still runs"
    );
    // KubeVirt stops the instance of a halted VM.
    p.api(&vmis(), Some(TENANT))
        .delete("vm-instance-web", &Default::default())
        .await
        .unwrap();
    p.succeeded(TENANT, "in-place").await;
    let done = p.restores(TENANT).get("in-place").await.unwrap();
    assert_eq!(
        support::ready(&done),
        None,
        "the Velero driver writes no Ready condition"
    );
    let restore = p.one_restored_by(&restores(), VELERO_NS, "in-place").await;
    assert!(
        name_of(&restore).starts_with("tenant-acme.in-place-"),
        "{}",
        name_of(&restore)
    );
    assert_eq!(restore["spec"]["backupName"], nightly);
    assert_eq!(restore["spec"].get("namespaceMapping"), None);
    assert_eq!(restore["status"]["phase"], "Completed");
    assert_eq!(
        restore["spec"]["resourceModifier"],
        json!({"apiGroup": "", "kind": "ConfigMap", "name": "restore-modifiers-tenant-acme-in-place"})
    );
    let claims: Vec<Value> = p
        .api(&pvcs(), Some(TENANT))
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    let names: Vec<&str> = claims.iter().map(name_of).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(
        names[0].starts_with("vm-disk-web-root-orig-")
            && names[0].len() == "vm-disk-web-root-orig-".len() + 4,
        "{names:?}"
    );
    assert_eq!(claims[0]["spec"]["volumeName"], "pv-web-root");
    let pv = p.get(&pvs(), None, "pv-web-root").await.unwrap();
    assert_eq!(pv["spec"]["persistentVolumeReclaimPolicy"], "Retain");
    assert_eq!(pv["spec"]["claimRef"]["name"], names[0]);
    assert_eq!(pv["spec"]["claimRef"]["uid"], claims[0]["metadata"]["uid"]);
    assert!(
        p.get(&data_volumes(), Some(TENANT), "vm-disk-web-root")
            .await
            .is_none()
    );
    // The Events: one per preparation step (each names the object it is about, so none is folded
    // into another's series).
    let notes: Vec<String> = p
        .events(TENANT, "in-place")
        .await
        .into_iter()
        .map(|(_, r, n)| format!("{r}: {n}"))
        .collect();
    for want in [
        "PrepareForRestore: Suspended HelmRelease vm-instance-web",
        "PrepareForRestore: Deleted DataVolume vm-disk-web-root",
        "PrepareForRestore: Pre-restore preparation complete",
        "VeleroRestoreCreated: Created Velero Restore cozy-velero/tenant-acme.in-place-",
    ] {
        assert!(notes.iter().any(|n| n == want), "{want} in {notes:?}");
    }
    assert!(
        notes.iter().any(|n| n.starts_with(
            "PrepareForRestore: Keep old PVC vm-disk-web-root as vm-disk-web-root-orig-"
        )),
        "{notes:?}"
    );

    // The resource modifiers: claim adoption, and the VM keeps its recorded addresses.
    assert_eq!(
        rules(&p, "in-place").await,
        json!([
            {"groupResource": "persistentvolumeclaims", "namespaces": [TENANT],
             "patch": {"metadata": {"annotations": {"cdi.kubevirt.io/allowClaimAdoption": "true"}}}},
            {"groupResource": "virtualmachines.kubevirt.io", "namespaces": [TENANT],
             "patch": {"spec": {"template": {"metadata": {"annotations": {
                 "ovn.kubernetes.io/ip_address": "10.244.0.15",
                 "ovn.kubernetes.io/mac_address": "0a:58:0a:f4:00:0f"}}}}}},
        ])
    );

    // To a copy: no preparation, the namespace mapped, claims unbound, addresses not kept.
    p.succeeded(TENANT, "copy").await;
    let restore = p.one_restored_by(&restores(), VELERO_NS, "copy").await;
    assert_eq!(
        restore["spec"]["namespaceMapping"],
        json!({TENANT: COPY_NS})
    );
    assert_eq!(
        rules(&p, "copy").await,
        json!([
            {"groupResource": "persistentvolumeclaims", "namespaces": [COPY_NS],
             "patch": {"metadata": {"annotations": {"cdi.kubevirt.io/allowClaimAdoption": "true"}}}},
            {"groupResource": "persistentvolumeclaims", "namespaces": [COPY_NS],
             "patch": {"spec": {"selector": null, "volumeName": null}}},
        ])
    );
    assert_eq!(
        p.event(TENANT, "copy", "PrepareForRestore").await.1,
        "Restore to copy: skipping source application preparation"
    );
    // Into a namespace where the application exists: refused.
    assert_eq!(
        p.failed(TENANT, "over-busy").await.1,
        "target application \"web\" already exists in namespace \"tenant-busy\"; set options.failIfTargetExists=false to overwrite"
    );
    assert!(
        p.restored_by(&restores(), VELERO_NS, "over-busy")
            .await
            .is_empty()
    );

    // Malformed options: Failed at once, no Event, nothing created.
    let (_, message) = p.failed(TENANT, "malformed").await;
    assert!(
        message.starts_with("invalid restore options: failed to parse restore options: "),
        "{message}"
    );
    assert!(message.contains("keepOriginalPVC"), "{message}");
    let events = p.events(TENANT, "malformed").await;
    assert!(
        events.iter().all(|(_, r, _)| r != "MalformedOptions"),
        "{events:?}"
    );

    // Velero fails the restore: Failed with its phase and reason.
    let vb = ApiResource::erase::<velero::Backup>(&());
    p.annotate(
        &vb,
        Some(VELERO_NS),
        &weekly,
        FAIL_RESTORE,
        Some("DataDownload failed for PVC vm-disk-web-root"),
    )
    .await;
    p.restore(
        TENANT,
        "broken",
        "weekly",
        None,
        json!({"targetNamespace": COPY_NS, "failIfTargetExists": false}),
    )
    .await;
    assert_eq!(
        p.failed(TENANT, "broken").await,
        ("RestoreFailed".to_owned(), "Velero Restore failed with phase: Failed: DataDownload failed for PVC vm-disk-web-root".to_owned())
    );
    // Velero keeps a restore InProgress: the job keeps running until Velero finishes it.
    p.annotate(&vb, Some(VELERO_NS), &weekly, FAIL_RESTORE, None)
        .await;
    p.annotate(&vb, Some(VELERO_NS), &weekly, HANG_RESTORE, Some("true"))
        .await;
    p.restore(
        TENANT,
        "slow",
        "weekly",
        None,
        json!({"targetNamespace": COPY_NS, "failIfTargetExists": false}),
    )
    .await;
    support::eventually(
        &p,
        "the slow Velero Restore in progress",
        async |p: &Platform| {
            let r = p.restored_by(&restores(), VELERO_NS, "slow").await;
            (r.len() == 1 && r[0]["status"]["phase"] == "InProgress").then_some(())
        },
    )
    .await;
    let slow = p.restores(TENANT).get("slow").await.unwrap();
    assert_eq!(slow.status.unwrap().phase.as_deref(), Some("Running"));
    p.annotate(&vb, Some(VELERO_NS), &weekly, HANG_RESTORE, None)
        .await;
    p.succeeded(TENANT, "slow").await;
    p.finish(&[TENANT]).await;
}
