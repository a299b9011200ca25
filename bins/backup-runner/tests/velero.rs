//! End to end, the Velero driver: the real `backup-runner` and `credentials-projector` against the
//! emulator, with the simulated Velero (`operator-sims --sims=velero`) moving Velero Backups and
//! their DataUploads through their phases. VMInstance and VMDisk backups succeed with the catalog
//! Backup as upstream shapes it (and deleting it deletes the Velero Backup); a failed DataUpload,
//! a failed backup, a hanging one, a refused create, the bootstrap window, a missing application
//! and unprojected credentials.

use crate::sim_platform;
use crate::support;

use api::backups::BackupClass;
use api::thirdparty::apps;
use api::thirdparty::velero::{Backup as VeleroBackup, v2alpha1::DataUpload};
use harness::eventually_within;
use kube::core::ApiResource;
use serde_json::{Value, json};
use sim_platform::{Platform, TENANT};
use support::{FAIL, HANG, WAIT, ready, ready_of};

const FAIL_UPLOAD: &str = "operator-sims.cozy-backups.io/fail-data-upload";
const VELERO_NS: &str = "cozy-velero";

fn velero_backups() -> ApiResource {
    ApiResource::erase::<VeleroBackup>(&())
}

fn strategies() -> ApiResource {
    ApiResource::erase::<api::strategy::Velero>(&())
}

fn vms() -> ApiResource {
    ApiResource::erase::<apps::VMInstance>(&())
}

fn disks() -> ApiResource {
    ApiResource::erase::<apps::VMDisk>(&())
}

/// The platform's Velero strategy for `prefix` (`vm-instance` or `vm-disk`).
fn template(prefix: &str, resources: &[&str]) -> Value {
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
            "includeClusterResources": false,
            "storageLocation": "{{ .Parameters.backupStorageLocationName }}",
            "snapshotVolumes": true,
            "snapshotMoveData": true,
            "ttl": "720h0m0s",
            "itemOperationTimeout": "24h0m0s",
        },
        "restoreSpec": {
            "includedNamespaces": ["{{ .Application.metadata.namespace }}"],
            "orLabelSelectors": selectors,
            "existingResourcePolicy": "update",
        },
    })
}

/// Routes VMInstance and VMDisk to the two strategies with `parameters`.
async fn class(p: &Platform, name: &str, extra: &[(&str, &str)]) {
    let mut parameters = vec![("backupStorageLocationName", "cozy-default")];
    parameters.extend_from_slice(extra);
    let class = BackupClass::test(name)
        .route_to(
            "VMInstance",
            api::contract::groups::STRATEGY,
            "Velero",
            "vm",
            &parameters,
        )
        .route_to(
            "VMDisk",
            api::contract::groups::STRATEGY,
            "Velero",
            "disk",
            &parameters,
        )
        .build();
    p.h.create_cluster(&class).await;
}

async fn strategies_and_classes(p: &Platform) {
    p.strategy(
        &strategies(),
        "vm",
        template(
            "vm-instance",
            &[
                "helmreleases.helm.toolkit.fluxcd.io",
                "virtualmachines.kubevirt.io",
                "persistentvolumeclaims",
            ],
        ),
    )
    .await;
    p.strategy(
        &strategies(),
        "disk",
        template(
            "vm-disk",
            &[
                "helmreleases.helm.toolkit.fluxcd.io",
                "persistentvolumeclaims",
            ],
        ),
    )
    .await;
    class(p, "vms", &[]).await;
    class(p, "vms-quick", &[("backupDeadline", "5s")]).await;
}

/// VMInstance `web` with disk `web-root` (a VMDisk), its launcher pod with OVN addresses.
async fn vm(p: &Platform) {
    p.apply(
        &disks(),
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "VMDisk",
               "metadata": {"name": "web-root", "namespace": TENANT},
               "spec": {"storage": "10Gi", "storageClass": "replicated"}}),
    )
    .await;
    p.apply(
        &vms(),
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "VMInstance",
               "metadata": {"name": "web", "namespace": TENANT},
               "spec": {"disks": [{"name": "web-root"}], "runStrategy": "Always"}}),
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
}

async fn platform() -> Platform {
    let p = Platform::start("velero", &[]).await;
    strategies_and_classes(&p).await;
    vm(&p).await;
    p
}

/// The Velero Backups labelled with the job.
async fn velero_of(p: &Platform, job: &str) -> Vec<Value> {
    p.owned(&velero_backups(), VELERO_NS, job).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vm_and_disk_backups_succeed_and_deleting_the_backup_deletes_veleros() {
    let mut p = platform().await;
    p.job("nightly", "VMInstance", "web", "vms").await;
    let job = p.succeeded("nightly").await;
    assert_eq!(
        ready(&job),
        None,
        "the Velero driver writes no Ready condition"
    );
    let status = job.status.clone().unwrap();
    assert_eq!(status.backup_ref.unwrap().name, "nightly");
    assert_eq!(
        p.event("nightly", "VeleroBackupCreated").await,
        "Created Velero Backup cozy-velero/tenant-acme.nightly-"
    );

    let created = velero_of(&p, "nightly").await;
    assert_eq!(created.len(), 1);
    let vb = &created[0];
    let vb_name = vb["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(vb_name.starts_with("tenant-acme.nightly-"), "{vb_name}");
    assert_eq!(vb["status"]["phase"], "Completed");
    let underlying = r#"{"dataVolumes":[{"dataVolumeName":"vm-disk-web-root","applicationName":"web-root"}],"ip":"10.244.0.15","mac":"0a:58:0a:f4:00:0f"}"#;
    assert_eq!(
        vb["metadata"]["annotations"]["backups.cozystack.io/underlying-resources"],
        underlying
    );
    assert_eq!(
        vb["spec"]["orLabelSelectors"],
        json!([
            {"matchLabels": {"app.kubernetes.io/instance": "vm-instance-web"}},
            {"matchLabels": {"apps.cozystack.io/application.kind": "VMInstance", "apps.cozystack.io/application.name": "web"}},
            {"matchLabels": {"apps.cozystack.io/application.kind": "VMDisk", "apps.cozystack.io/application.name": "web-root"}},
        ])
    );
    assert_eq!(vb["spec"]["includedNamespaces"], json!([TENANT]));
    assert_eq!(vb["spec"]["storageLocation"], "cozy-default");
    let uploads = p
        .list(&ApiResource::erase::<DataUpload>(&()), VELERO_NS)
        .await;
    assert_eq!(uploads.len(), 1, "one DataUpload for the VM's disk");
    assert_eq!(uploads[0]["spec"]["sourcePVC"], "vm-disk-web-root");
    assert_eq!(uploads[0]["status"]["phase"], "Completed");

    assert_eq!(
        p.catalog("nightly").await,
        json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": "nightly", "namespace": TENANT},
            "spec": {
                "applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "VMInstance", "name": "web"},
                "strategyRef": {"apiGroup": "strategy.backups.cozystack.io", "kind": "Velero", "name": "vm"},
                "takenAt": vb["status"]["startTimestamp"],
                "driverMetadata": {"velero.io/backup-name": vb_name, "velero.io/backup-namespace": VELERO_NS},
            },
            "status": {
                "phase": "Ready",
                "artifact": {"uri": format!("velero://cozy-velero/{vb_name}")},
                "underlyingResources": serde_json::from_str::<Value>(underlying).unwrap(),
            },
        })
    );

    // A VMDisk on its own: no underlying resources, no extra selectors.
    p.job("disk-only", "VMDisk", "web-root", "vms").await;
    p.succeeded("disk-only").await;
    let vb = velero_of(&p, "disk-only").await.remove(0);
    assert_eq!(vb["metadata"].get("annotations"), None);
    assert_eq!(vb["spec"]["orLabelSelectors"].as_array().unwrap().len(), 2);
    let catalog = p.catalog("disk-only").await;
    assert_eq!(catalog["status"].get("underlyingResources"), None);
    assert_eq!(catalog["spec"]["strategyRef"]["name"], "disk");

    p.assert_clean("nightly").await;

    // Deleting the catalog entry asks Velero to delete its backup (and the data in the bucket).
    let catalog_api: kube::Api<api::backups::Backup> = kube::Api::namespaced(p.h.client(), TENANT);
    harness::until("the cleanup finalizer on the Backup", || async {
        catalog_api
            .get("nightly")
            .await
            .unwrap()
            .metadata
            .finalizers
            .is_some_and(|f| f.iter().any(|f| f == "backups.cozystack.io/cleanup"))
    })
    .await;
    catalog_api
        .delete("nightly", &Default::default())
        .await
        .unwrap();
    harness::until(
        "the Velero Backup deleted through a DeleteBackupRequest",
        || async {
            p.get(&velero_backups(), Some(VELERO_NS), &vb_name)
                .await
                .is_none()
                && catalog_api.get_opt("nightly").await.unwrap().is_none()
        },
    )
    .await;
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_uploads_a_failed_backup_and_a_hanging_one_explain_themselves() {
    let mut p = platform().await;

    p.annotate(
        &disks(),
        TENANT,
        "web-root",
        FAIL_UPLOAD,
        Some("volume snapshot not ready within 10m0s"),
    )
    .await;
    p.job("upload-fails", "VMInstance", "web", "vms").await;
    let message = p.failed("upload-fails").await;
    let upload = eventually_within("the failed DataUpload", WAIT, || async {
        p.list(&ApiResource::erase::<DataUpload>(&()), VELERO_NS)
            .await
            .into_iter()
            .find(|u| u["status"]["phase"] == "Failed")
    })
    .await;
    assert_eq!(
        message,
        format!(
            "Velero Backup failed with phase PartiallyFailed; async item operations failed 1 (completed 0, attempted 1); DataUpload {} failed for PVC vm-disk-web-root: volume snapshot not ready within 10m0s",
            upload["metadata"]["name"].as_str().unwrap()
        )
    );
    let job = p.jobs().get("upload-fails").await.unwrap();
    assert_eq!(ready_of(&job), ("BackupFailed".into(), message.clone()));
    p.annotate(&disks(), TENANT, "web-root", FAIL_UPLOAD, None)
        .await;

    p.annotate(
        &vms(),
        TENANT,
        "web",
        FAIL,
        Some("BackupStorageLocation \"cozy-default\" is unavailable"),
    )
    .await;
    p.job("backup-fails", "VMInstance", "web", "vms").await;
    assert_eq!(
        p.failed("backup-fails").await,
        "Velero Backup failed with phase Failed: BackupStorageLocation \"cozy-default\" is unavailable"
    );
    p.annotate(&vms(), TENANT, "web", FAIL, None).await;

    p.annotate(&vms(), TENANT, "web", HANG, Some("true")).await;
    p.job("stuck", "VMInstance", "web", "vms-quick").await;
    let vb = eventually_within("the Velero Backup of stuck", WAIT, || async {
        velero_of(&p, "stuck").await.pop()
    })
    .await;
    assert_eq!(
        p.failed("stuck").await,
        format!(
            "Velero Backup cozy-velero/{} did not complete within 5s (current phase=\"InProgress\"); raise the BackupClass parameter backupDeadline or the runner's --backup-deadline for very large volumes",
            vb["metadata"]["name"].as_str().unwrap()
        )
    );
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_velero_refuses_fails_the_job_with_a_warning_event() {
    // Velero is not installed: its namespace does not exist.
    let mut p = Platform::start_in(&["tenant-root", TENANT], "velero", &[]).await;
    strategies_and_classes(&p).await;
    vm(&p).await;
    p.job("nowhere", "VMInstance", "web", "vms").await;
    assert_eq!(
        p.failed("nowhere").await,
        "failed to create Velero Backup: namespaces \"cozy-velero\" not found"
    );
    assert_eq!(
        p.event("nowhere", "VeleroBackupCreationFailed").await,
        "Failed to create Velero Backup cozy-velero/tenant-acme.nowhere-: namespaces \"cozy-velero\" not found"
    );
    // The failure's own Event is recorded after the status write the wait above saw.
    p.event("nowhere", "BackupFailed").await;
    let warnings: Vec<String> = p
        .events("nowhere")
        .await
        .into_iter()
        .filter(|(t, _, _)| t == "Warning")
        .map(|(_, r, _)| r)
        .collect();
    assert!(
        warnings.contains(&"BackupFailed".to_owned()),
        "{warnings:?}"
    );
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_window_a_missing_application_and_unprojected_credentials() {
    let mut p = platform().await;

    p.class(
        "late",
        "VMInstance",
        "Velero",
        "late-vm",
        &[("backupStorageLocationName", "cozy-default")],
    )
    .await;
    p.job("early", "VMInstance", "web", "late").await;
    let waiting = p.strategy_not_ready("early", "late-vm", "late").await;
    let status = waiting.status.unwrap();
    assert_eq!(status.phase, None);
    assert!(status.started_at.is_some(), "Velero stamps startedAt first");
    assert!(velero_of(&p, "early").await.is_empty());
    p.strategy(
        &strategies(),
        "late-vm",
        template("vm-instance", &["persistentvolumeclaims"]),
    )
    .await;
    let done = p.succeeded("early").await;
    assert_eq!(
        ready_of(&done).0,
        "StrategyNotReady",
        "as upstream, a Velero success leaves the last Ready condition as it was"
    );

    p.job("ghost", "VMInstance", "ghost", "vms").await;
    assert_eq!(
        p.failed("ghost").await,
        "failed to create Velero Backup: vminstances.apps.cozystack.io \"ghost\" not found"
    );

    p.waits_for_the_projector(
        "patient",
        "VMInstance",
        "web",
        "vms",
        &velero_backups(),
        VELERO_NS,
    )
    .await;
    p.assert_rbac();
    p.h.cleanup().await.unwrap();
}
