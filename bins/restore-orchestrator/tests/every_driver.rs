//! Every operator driver's restore once, on one platform, on either backend (the real-API suites
//! run it: hack/test-real-api.sh, so that each grant of deploy/restore-orchestrator/rbac.yaml a
//! driver needs is needed by a request on kube-apiserver too, docs/security.md). The real
//! orchestrator, runner and projector; `operator-sims` with the Job controller and the simulated
//! Velero, MariaDB, Percona MongoDB, FoundationDB and etcd operators. One Backup per driver, then
//! one RestoreJob each: in place for the operator kinds, the Job and Altinity strategies; the
//! Velero VM in place (the namespace prepared: HelmReleases suspended, the VM halted, the disk's
//! claim kept on its volume, the DataVolume deleted) and into another namespace.

use crate::support::{self, Platform, TENANT, crd};
use crate::{altinity, foundationdb, job, mongodb, velero};

use api::thirdparty::{apps, etcd, flux, mariadb};
use kube::core::ApiResource;
use serde_json::json;

const COPY_NS: &str = "tenant-copy";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_driver_restores_once() {
    let p = Platform::start(
        "jobs,velero,mariadb,psmdb,fdb,etcd",
        &[COPY_NS],
        vec![
            api::thirdparty::permissive_crd::<flux::HelmRelease>(true),
            api::thirdparty::permissive_crd::<apps::MariaDB>(true),
            api::thirdparty::permissive_crd::<apps::Etcd>(true),
            api::thirdparty::permissive_crd::<apps::ClickHouse>(true),
            crd(
                "apps.cozystack.io",
                "v1alpha1",
                job::NOTEBOOK,
                "notebooks",
                true,
            ),
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

    // The strategies and routes of every driver.
    let strategy = async |resource: ApiResource, name: &str, template| {
        p.strategy(&resource, name, template).await;
    };
    strategy(
        ApiResource::erase::<api::strategy::MariaDB>(&()),
        "mariadb",
        json!({"storage": {"s3": {
            "bucket": "bucket-cozy-backups", "endpoint": "seaweedfs-s3.tenant-root.svc:8333",
            "prefix": "{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/",
            "accessKeyIdSecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"},
            "secretAccessKeySecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_SECRET_ACCESS_KEY"},
            "tls": {"enabled": false}}}, "compression": "gzip"}),
    )
    .await;
    strategy(
        ApiResource::erase::<api::strategy::MongoDB>(&()),
        "mongo",
        json!({"storageName": "s3-storage", "type": "logical", "compressionType": "gzip"}),
    )
    .await;
    strategy(
        ApiResource::erase::<api::strategy::FoundationDB>(&()),
        "fdb",
        foundationdb::template(),
    )
    .await;
    strategy(
        ApiResource::erase::<api::strategy::Etcd>(&()),
        "etcd",
        json!({"destination": {"s3": {
            "bucket": "bucket-cozy-backups", "endpoint": "http://seaweedfs-s3.tenant-root.svc:8333",
            "key": "{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}/",
            "region": "us-east-1", "forcePathStyle": true,
            "credentialsSecretRef": {"name": "cozy-backups-creds"}}}}),
    )
    .await;
    strategy(
        ApiResource::erase::<api::strategy::Job>(&()),
        "generic",
        job::template(json!({})),
    )
    .await;
    strategy(altinity::strategies(), "ch", altinity::template(json!({}))).await;
    let vm_resources = [
        "helmreleases.helm.toolkit.fluxcd.io",
        "virtualmachines.kubevirt.io",
        "persistentvolumeclaims",
    ];
    strategy(
        ApiResource::erase::<api::strategy::Velero>(&()),
        "vm",
        velero::template("vm-instance", &vm_resources),
    )
    .await;
    for (class, app_kind, kind, name) in [
        ("mariadb", "MariaDB", "MariaDB", "mariadb"),
        ("mongo", "MongoDB", "MongoDB", "mongo"),
        ("fdb", "FoundationDB", "FoundationDB", "fdb"),
        ("etcd", "Etcd", "Etcd", "etcd"),
        ("ch", "ClickHouse", "Altinity", "ch"),
    ] {
        p.class(class, app_kind, kind, name, &[]).await;
    }
    p.class(
        "generic",
        job::NOTEBOOK,
        "Job",
        "generic",
        &[("bucketName", "gen-bucket")],
    )
    .await;
    p.class(
        "vms",
        "VMInstance",
        "Velero",
        "vm",
        &[("backupStorageLocationName", "cozy-default")],
    )
    .await;

    // One application per driver, with what its chart and operator run.
    p.app::<apps::MariaDB>("shop", json!({"replicas": 1})).await;
    p.apply(
        &ApiResource::erase::<mariadb::MariaDB>(&()),
        json!({"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "MariaDB",
               "metadata": {"name": "mariadb-shop", "namespace": TENANT}, "spec": {"replicas": 1}}),
    )
    .await;
    mongodb::mongodb(&p, "orders", json!({})).await;
    foundationdb::foundationdb(&p, "ledger", json!({})).await;
    p.app::<apps::Etcd>("etcd", json!({"replicas": 3})).await;
    p.apply(&velero::releases(), velero::release(TENANT, "etcd"))
        .await;
    p.apply(
        &ApiResource::erase::<etcd::EtcdCluster>(&()),
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
               "metadata": {"name": "etcd", "namespace": TENANT},
               "spec": {"replicas": 3, "storage": {"size": "1Gi"}}}),
    )
    .await;
    p.app_of(&job::notebooks(), TENANT, "nb", json!({"replicas": 3}))
        .await;
    p.app::<apps::ClickHouse>("events", json!({"backup": {"enabled": true}}))
        .await;
    velero::vm(&p).await;

    watches_open(&p).await;
    let runs = [
        ("maria", "MariaDB", "shop", "mariadb"),
        ("mongo", "MongoDB", "orders", "mongo"),
        ("fdb", "FoundationDB", "ledger", "fdb"),
        ("etcd", "Etcd", "etcd", "etcd"),
        ("nb", job::NOTEBOOK, "nb", "generic"),
        ("ch", "ClickHouse", "events", "ch"),
        ("vm", "VMInstance", "web", "vms"),
    ];
    for (name, kind, app, class) in runs {
        p.backup(TENANT, name, kind, app, class).await;
    }
    for (name, _, _, _) in runs {
        p.restore(TENANT, name, name, None, json!(null)).await;
    }
    p.restore(
        TENANT,
        "vm-copy",
        "vm",
        None,
        json!({"targetNamespace": COPY_NS, "keepOriginalPVC": false, "keepOriginalIpAndMac": false}),
    )
    .await;

    // The VM in place: halted first; KubeVirt then stops its instance.
    support::eventually(&p, "the VM halted", async |p: &Platform| {
        let vm = p
            .get(&velero::vms(), Some(TENANT), "vm-instance-web")
            .await?;
        (vm["spec"]["runStrategy"] == "Halted").then_some(())
    })
    .await;
    p.api(&velero::vmis(), Some(TENANT))
        .delete("vm-instance-web", &Default::default())
        .await
        .unwrap();
    for (name, _, _, _) in runs {
        p.succeeded(TENANT, name).await;
    }
    p.succeeded(TENANT, "vm-copy").await;
    let restore = p
        .one_restored_by(&velero::restores(), "cozy-velero", "vm-copy")
        .await;
    assert_eq!(
        restore["spec"]["namespaceMapping"],
        json!({TENANT: COPY_NS})
    );
    p.finish(&[TENANT, COPY_NS]).await;
}

/// Waits until the last watch of every resource by the runner and the orchestrator was answered
/// 200. kube-apiserver answers a watch of a CRD created moments ago 429 while its watch cache
/// initialises (the emulator serves it at once); the daemon retries, but a BackupJob it saw
/// before then would find no application in its cache.
async fn watches_open(p: &Platform) {
    support::eventually(
        p,
        "every watch of the runner and the orchestrator open",
        async |p: &Platform| {
            let mut last = std::collections::BTreeMap::new();
            for r in p.h.audit().requests {
                let daemon = ["backup-runner/", "restore-orchestrator/"]
                    .into_iter()
                    .find(|d| r.user_agent.starts_with(d));
                if let (Some(daemon), "watch") = (daemon, r.verb.as_str()) {
                    last.insert((daemon, r.group, r.resource), r.code);
                }
            }
            (!last.is_empty() && last.values().all(|c| *c == 200)).then_some(())
        },
    )
    .await;
}
