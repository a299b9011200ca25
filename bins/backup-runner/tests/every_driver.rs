//! Every operator driver once, on one platform, on either backend (the real-API suites run it:
//! hack/test-real-api.sh, so that each grant of deploy/backup-runner/rbac.yaml a driver needs is
//! needed by a request on kube-apiserver too, docs/security.md). The real runner (as its
//! ServiceAccount, under a lease server, with the catalog on), renderer and projector;
//! `operator-sims` with S3, COSI, the Job controller and the simulated MariaDB, etcd, FoundationDB,
//! Percona MongoDB and Velero operators, whose CRDs exist before the runner starts. One BackupJob
//! per driver succeeds through the platform's strategies (the Job strategy's after waiting for the
//! credentials projection); a failed Velero upload is explained; deleting the Velero and a CNPG
//! catalog Backup files their upstream deletions.

use crate::catalog::{Dr, backup as cnpg_backup, runner_spec};
use crate::operators::{self, NOTEBOOK, app};
use crate::support::{self, WAIT};

use api::backups::{Backup, BackupClass, BackupJob};
use api::thirdparty::{apps, etcd, fdb, mariadb, percona, velero};
use harness::dataplane::apply;
use harness::eventually_within;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::json;

const TENANT: &str = "tenant-acme";
const FAIL_UPLOAD: &str = "operator-sims.cozy-backups.io/fail-data-upload";
const STRATEGIES: [(&str, &str); 6] = [
    ("MariaDB", "cozy-default-mariadb"),
    ("Etcd", "cozy-default-etcd"),
    ("Altinity", "cozy-default-altinity"),
    ("FoundationDB", "cozy-default-foundationdb"),
    ("MongoDB", "cozy-default-mongodb"),
    ("Velero", "cozy-default-velero-vminstance"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_driver_backs_up_once_and_deleting_backups_cleans_up_upstream() {
    let mut dr = Dr::start(
        &[TENANT],
        "s3,cosi,jobs,mariadb,etcd,fdb,psmdb,velero",
        false,
    )
    .await;
    operators::install_app_crds(&dr.h).await;
    let grpc = operators::lease_server(&mut dr.h, "3s").await;
    dr.h.spawn_ready(
        runner_spec(&dr.dp).args([
            "--projection-grace=1s",
            "--lease-endpoint",
            &grpc,
            "--identity",
            "runner-0",
            "--lease-ttl",
            "3s",
        ]),
        WAIT,
    )
    .await
    .unwrap();
    let h = &dr.h;
    let put = async |resource: ApiResource, body: serde_json::Value| {
        apply(&Api::namespaced_with(h.client(), TENANT, &resource), body).await;
    };
    let erase = |group: &str, kind: &str, plural: &str| ApiResource {
        group: group.into(),
        version: "v1alpha1".into(),
        api_version: format!("{group}/v1alpha1"),
        kind: kind.into(),
        plural: plural.into(),
    };

    // The Job strategy first, with no credentials projected yet: it waits for the projector.
    let jobs_strategy = ApiResource::erase::<api::strategy::Job>(&());
    apply(
        &Api::<DynamicObject>::all_with(h.client(), &jobs_strategy),
        json!({"apiVersion": jobs_strategy.api_version, "kind": "Job",
               "metadata": {"name": "generic"},
               "spec": {"template": {"spec": {"containers": [{"name": "backup",
                   "image": "backup-tool:test", "args": ["--app={{ .Release.Name }}"]}]}}}}),
    )
    .await;
    h.backup_class("generic", NOTEBOOK, "Job", "generic", &[])
        .await;
    put(
        erase("apps.cozystack.io", NOTEBOOK, "notebooks"),
        app(NOTEBOOK, TENANT, "nb", json!({"replicas": 1})),
    )
    .await;
    support::backup_job(h, TENANT, "nb", NOTEBOOK, "nb", "generic").await;
    let jobs: Api<BackupJob> = Api::namespaced(h.client(), TENANT);
    support::projection_pending(&jobs, "nb").await;
    dr.h.spawn_ready(support::projector(&dr.dp.http), WAIT)
        .await
        .unwrap();
    let h = &dr.h;
    let put = async |resource: ApiResource, body: serde_json::Value| {
        apply(&Api::namespaced_with(h.client(), TENANT, &resource), body).await;
    };

    // The platform's strategies and BackupClass, as the renderer writes them.
    for (kind, name) in STRATEGIES {
        let resource = erase(api::contract::groups::STRATEGY, kind, "");
        let resource = ApiResource {
            plural: strategy_plural(kind).into(),
            ..resource
        };
        let api: Api<DynamicObject> = Api::all_with(h.client(), &resource);
        eventually_within(&format!("strategy {name}"), WAIT, || async {
            api.get_opt(name).await.ok()?
        })
        .await;
    }
    eventually_within("BackupClass cozy-default", WAIT, || async {
        Api::<BackupClass>::all(h.client())
            .get_opt("cozy-default")
            .await
            .ok()?
    })
    .await;

    // One application per driver, with what its chart renders.
    put(
        ApiResource::erase::<apps::MariaDB>(&()),
        app("MariaDB", TENANT, "shop", json!({"replicas": 1})),
    )
    .await;
    put(
        ApiResource::erase::<mariadb::MariaDB>(&()),
        json!({"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "MariaDB",
               "metadata": {"name": "mariadb-shop", "namespace": TENANT}, "spec": {"replicas": 1}}),
    )
    .await;
    put(
        ApiResource::erase::<apps::Etcd>(&()),
        app("Etcd", TENANT, "etcd", json!({"replicas": 3})),
    )
    .await;
    put(
        ApiResource::erase::<etcd::EtcdCluster>(&()),
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
               "metadata": {"name": "etcd", "namespace": TENANT}, "spec": {"replicas": 3}}),
    )
    .await;
    put(
        ApiResource::erase::<apps::ClickHouse>(&()),
        app(
            "ClickHouse",
            TENANT,
            "events",
            json!({"backup": {"enabled": true}}),
        ),
    )
    .await;
    put(
        ApiResource::erase::<apps::FoundationDB>(&()),
        app("FoundationDB", TENANT, "ledger", json!({"replicas": 3})),
    )
    .await;
    put(
        ApiResource::erase::<fdb::FoundationDBCluster>(&()),
        json!({"apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBCluster",
               "metadata": {"name": "foundationdb-ledger", "namespace": TENANT},
               "spec": {"version": "7.3.63", "processCounts": {"storage": 3}}}),
    )
    .await;
    // The agents of an earlier job still stream to the bucket: the driver stops them first.
    put(
        ApiResource::erase::<fdb::FoundationDBBackup>(&()),
        json!({"apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
               "metadata": {"name": "earlier-abcde", "namespace": TENANT, "labels": {
                   "backups.cozystack.io/owned-by.BackupJobName": "earlier",
                   "backups.cozystack.io/owned-by.BackupJobNamespace": TENANT,
                   "backups.cozystack.io/foundationdb-cluster": "foundationdb-ledger"}},
               "spec": {"clusterName": "foundationdb-ledger", "version": "7.3.63",
                        "backupState": "Running",
                        "blobStoreConfiguration": {"accountName": "s3.example.com",
                                                   "backupName": "earlier"}}}),
    )
    .await;
    put(
        ApiResource::erase::<apps::MongoDB>(&()),
        app(
            "MongoDB",
            TENANT,
            "orders",
            json!({"replicas": 3, "backup": {"enabled": true}}),
        ),
    )
    .await;
    put(
        ApiResource::erase::<percona::PerconaServerMongoDB>(&()),
        json!({"apiVersion": "psmdb.percona.com/v1", "kind": "PerconaServerMongoDB",
               "metadata": {"name": "mongodb-orders", "namespace": TENANT},
               "spec": {"crVersion": "1.20.1", "backup": {"enabled": true, "storages": {
                   "s3-storage": {"type": "s3", "s3": {"bucket": "bucket-cozy-backups",
                       "prefix": "tenant-acme/orders", "region": "us-east-1",
                       "endpointUrl": "http://seaweedfs-s3.tenant-root.svc:8333",
                       "credentialsSecret": "mongodb-orders-s3-creds"}}}}}}),
    )
    .await;
    // Two VMs with a disk each, the launcher pod of the first (its addresses); the second's upload
    // fails.
    for (vm, annotations) in [
        ("web", json!({})),
        (
            "db",
            json!({FAIL_UPLOAD: "volume snapshot not ready within 10m0s"}),
        ),
    ] {
        put(
            ApiResource::erase::<apps::VMDisk>(&()),
            json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "VMDisk",
                   "metadata": {"name": format!("{vm}-root"), "namespace": TENANT,
                                "annotations": annotations},
                   "spec": {"storage": "10Gi", "storageClass": "replicated"}}),
        )
        .await;
        put(
            ApiResource::erase::<apps::VMInstance>(&()),
            json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "VMInstance",
                   "metadata": {"name": vm, "namespace": TENANT},
                   "spec": {"disks": [{"name": format!("{vm}-root")}], "runStrategy": "Always"}}),
        )
        .await;
    }
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
        "metadata": {"name": "virt-launcher-vm-instance-web-x7k2p",
                     "labels": {"vm.kubevirt.io/name": "vm-instance-web"},
                     "annotations": {"ovn.kubernetes.io/ip_address": "10.244.0.15",
                                     "ovn.kubernetes.io/mac_address": "0a:58:0a:f4:00:0f"}},
        "spec": {"containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.5.0"}]},
    }))
    .unwrap();
    h.create(TENANT, &pod).await;

    let ok = [
        ("maria", "MariaDB", "shop"),
        ("etcd", "Etcd", "etcd"),
        ("ch", "ClickHouse", "events"),
        ("fdb", "FoundationDB", "ledger"),
        ("mongo", "MongoDB", "orders"),
        ("vm", "VMInstance", "web"),
    ];
    // cozy-default binds FoundationDB only when the renderer is told to; a class of its own here.
    h.backup_class(
        "fdb",
        "FoundationDB",
        "FoundationDB",
        "cozy-default-foundationdb",
        &[],
    )
    .await;
    for (job, kind, app) in ok {
        let class = if kind == "FoundationDB" {
            "fdb"
        } else {
            "cozy-default"
        };
        support::backup_job(h, TENANT, job, kind, app, class).await;
    }
    support::backup_job(h, TENANT, "vm-upload", "VMInstance", "db", "cozy-default").await;
    for (job, _, _) in ok.iter().chain([&("nb", "", "")]) {
        let done = support::terminal(&jobs, job, WAIT).await;
        let status = done.status.unwrap();
        assert_eq!(
            status.phase.as_deref(),
            Some("Succeeded"),
            "{job}: {status:?}"
        );
    }
    let failed = support::terminal(&jobs, "vm-upload", WAIT).await;
    let status = failed.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"), "{status:?}");
    assert!(
        status
            .message
            .as_deref()
            .unwrap_or_default()
            .contains("volume snapshot not ready within 10m0s"),
        "the failed DataUpload explains the failure: {status:?}"
    );
    // The earlier FoundationDB backup of the cluster was stopped.
    let earlier = h
        .dynamic::<fdb::FoundationDBBackup>(TENANT)
        .get("earlier-abcde")
        .await
        .unwrap();
    assert_eq!(earlier.data["spec"]["backupState"], "Stopped");

    // A job routed to another group's strategy is left to its controller, said so in an Event;
    // each later pass over the job repeats that Event, as a series of it (a patch).
    let foreign: BackupClass = serde_json::from_value(json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupClass",
        "metadata": {"name": "foreign"},
        "spec": {"strategies": [{"application": {"kind": NOTEBOOK},
                                 "strategyRef": {"apiGroup": "example.org", "kind": "Custom",
                                                 "name": "x"}}]}}))
    .unwrap();
    h.create_cluster(&foreign).await;
    support::backup_job(h, TENANT, "foreign", NOTEBOOK, "nb", "foreign").await;
    let events: Api<Event> = Api::namespaced(h.client(), TENANT);
    let not_handled = async |repeated: bool| {
        eventually_within("the StrategyNotHandled Event", WAIT, || async {
            events
                .list(&Default::default())
                .await
                .ok()?
                .items
                .into_iter()
                .find(|e| {
                    e.reason.as_deref() == Some("StrategyNotHandled")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("foreign")
                        && (!repeated || e.series.is_some())
                })
        })
        .await
    };
    not_handled(false).await;
    jobs.patch(
        "foreign",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"example.org/touched": "1"}}})),
    )
    .await
    .unwrap();
    not_handled(true).await;

    // Deleting catalog Backups: the Velero one files a DeleteBackupRequest for its Velero Backup,
    // a CNPG one deletes its CNPG Backup; both go once the finalizer is done.
    h.create(TENANT, &cnpg_backup(TENANT, "pg-1")).await;
    let backups: Api<Backup> = Api::namespaced(h.client(), TENANT);
    eventually_within("the catalog finalizer on pg-1", WAIT, || async {
        let b = backups.get_opt("pg-1").await.ok()??;
        (!b.metadata.finalizers.unwrap_or_default().is_empty()).then_some(())
    })
    .await;
    for name in ["vm", "pg-1"] {
        backups
            .delete(name, &DeleteParams::default())
            .await
            .unwrap();
    }
    eventually_within("the deleted Backups gone", WAIT, || async {
        let vm = backups.get_opt("vm").await.ok()?;
        let pg = backups.get_opt("pg-1").await.ok()?;
        (vm.is_none() && pg.is_none()).then_some(())
    })
    .await;
    let requests = Api::<DynamicObject>::namespaced_with(
        h.client(),
        "cozy-velero",
        &ApiResource::erase::<velero::DeleteBackupRequest>(&()),
    );
    let filed = requests.list(&Default::default()).await.unwrap().items;
    assert_eq!(filed.len(), 1, "one DeleteBackupRequest: {filed:?}");
    // The catalog signed its records with the key the runner created.
    assert!(
        h.secret_data("cozy-backup-controller", "cozy-backups-catalog-key")
            .await
            .is_some()
    );
    dr.h.cleanup().await.unwrap();
}

fn strategy_plural(kind: &str) -> &'static str {
    match kind {
        "MariaDB" => "mariadbs",
        "Etcd" => "etcds",
        "Altinity" => "altinities",
        "FoundationDB" => "foundationdbs",
        "MongoDB" => "mongodbs",
        _ => "veleroes",
    }
}
