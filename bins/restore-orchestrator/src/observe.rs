//! What each driver's decision looks at, read fresh from the API, and the decision itself.
//!
//! ```text
//!  CNPG      strategy CR, target Postgres app, Cluster + PVCs + Pods postgres-<target>, its
//!            HelmRelease, the source cnpg Backup, the source Cluster and its ObjectStore, the
//!            namespace's catalog, the safety backup (cnpg Backup + catalog Backup <job>-safety)
//!  Etcd      EtcdCluster etcd, its PVCs, the application's HelmRelease
//!  MariaDB   the operator Backup, MariaDB mariadb-<target>, the job's Restores
//!  MongoDB   the operator Backup, PerconaServerMongoDB mongodb-<target>, the job's Restores
//!  FoundationDB  FoundationDBCluster foundationdb-<target>, the job's Restores
//!  Velero    strategy CR, the Velero Backup and the job's Restores and ConfigMap in cozy-velero,
//!            HelmReleases, the VM and its instance, PVCs, their PVs, DataVolumes
//!  Job, Altinity  strategy CR, the target application, the batch Job <job>-restore
//! ```

use api::backups::{Backup, RestoreJob};
use api::contract::{groups, labels};
use api::thirdparty as t;
use drivers::restore::{self, Driver, Step};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::core::ApiResource;
use serde_json::Value as Json;

use crate::context::{Context, Error, api_err, resource};

fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

fn metadata<'a>(backup: &'a Backup, key: &str) -> Option<&'a str> {
    backup
        .spec
        .driver_metadata
        .as_ref()
        .and_then(|m| m.get(key))
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

/// The object of `resource` named by the Backup's driverMetadata `name_key`, in the namespace
/// named by `namespace_key` (else `namespace`); `None` when the name is not recorded or the object
/// does not exist.
async fn recorded(
    ctx: &Context,
    backup: &Backup,
    resource: &ApiResource,
    name_key: &str,
    namespace_key: Option<&str>,
    namespace: &str,
) -> Result<Option<Json>, Error> {
    let namespace = namespace_key
        .and_then(|k| metadata(backup, k))
        .unwrap_or(namespace);
    match metadata(backup, name_key) {
        Some(name) => ctx.get(resource, Some(namespace), name).await,
        None => Ok(None),
    }
}

fn label(key: &str, value: &str) -> Vec<(String, String)> {
    vec![(key.to_owned(), value.to_owned())]
}

/// What a pass carries from one decision to the next (the logs read by a `ReadLogs` action).
#[derive(Debug, Default)]
pub struct Carry {
    /// Recovery logs read in this pass.
    pub logs: Option<Vec<(String, restore::cnpg::LogRead)>>,
}

/// Observes what `driver` looks at and decides its next step.
pub async fn decide(
    ctx: &Context,
    driver: Driver,
    job: &RestoreJob,
    backup: &Backup,
    now: Time,
    carry: &Carry,
) -> Result<Step, Error> {
    match driver {
        Driver::Cnpg => cnpg(ctx, job, backup, now, carry).await,
        Driver::Etcd => etcd(ctx, job, backup, now).await,
        Driver::MariaDb => mariadb(ctx, job, backup, now).await,
        Driver::MongoDb => mongodb(ctx, job, backup, now).await,
        Driver::FoundationDb => foundationdb(ctx, job, backup, now).await,
        Driver::Velero => velero(ctx, job, backup, now).await,
        Driver::Job => batch(ctx, &drivers::job::JOB, job, backup, now).await,
        Driver::Altinity => batch(ctx, &drivers::job::ALTINITY, job, backup, now).await,
    }
}

/// The CNPG inputs (also read by the metrics of a PITR).
pub struct CnpgView {
    strategy: Option<Json>,
    target_app: Option<Json>,
    cluster: Option<Json>,
    pvcs: Vec<Json>,
    helm_release: Option<Json>,
    source_cnpg_backup: Option<Json>,
    object_store: Option<Json>,
    source_cluster: Option<Json>,
    catalog: Vec<Backup>,
    safety_cnpg_backup: Option<Json>,
    safety_catalog: Option<Backup>,
    wal_switch_backup: Option<Json>,
    pods: Vec<Json>,
}

impl CnpgView {
    /// Reads everything the CNPG restore of `job` looks at.
    pub async fn read(ctx: &Context, job: &RestoreJob, backup: &Backup) -> Result<Self, Error> {
        use drivers::cnpg::{cluster_name, keys};
        let target = restore::cnpg::target(job, backup);
        let ns = target.namespace.as_str();
        let clusters = erase::<t::cnpg::Cluster>();
        let cnpg_backups = erase::<t::cnpg::Backup>();
        let by_cluster = label(labels::CNPG_CLUSTER, &target.cluster);
        let safety = restore::cnpg::safety_backup_name(job.metadata.name.as_deref().unwrap_or(""));
        let cluster = ctx.get(&clusters, Some(ns), &target.cluster).await?;
        let source_cluster = if target.in_place() {
            cluster.clone()
        } else {
            ctx.get(&clusters, Some(ns), &cluster_name(&target.source))
                .await?
        };
        let catalog_api: kube::Api<Backup> = kube::Api::namespaced(ctx.client.clone(), ns);
        let catalog = catalog_api
            .list(&Default::default())
            .await
            .map_err(api_err("list", format!("Backups in {ns}")))?
            .items;
        let safety_catalog = catalog
            .iter()
            .find(|b| b.metadata.name.as_deref() == Some(safety.as_str()))
            .cloned();
        Ok(Self {
            strategy: ctx
                .strategy(
                    &backup.spec.strategy_ref.kind,
                    &backup.spec.strategy_ref.name,
                )
                .await?,
            target_app: ctx
                .get(&erase::<t::apps::Postgres>(), Some(ns), &target.app)
                .await?,
            pvcs: ctx
                .list(&resource("v1", "PersistentVolumeClaim"), ns, &by_cluster)
                .await?,
            helm_release: ctx
                .get(&erase::<t::flux::HelmRelease>(), Some(ns), &target.cluster)
                .await?,
            source_cnpg_backup: recorded(ctx, backup, &cnpg_backups, keys::BACKUP_NAME, None, ns)
                .await?,
            object_store: ctx
                .get(
                    &erase::<t::barman::ObjectStore>(),
                    Some(ns),
                    &cluster_name(&target.source),
                )
                .await?,
            safety_cnpg_backup: ctx.get(&cnpg_backups, Some(ns), &safety).await?,
            // Read only by a restore whose target lay past the archive (the archive catch-up).
            wal_switch_backup: if after_window(job) {
                ctx.get(
                    &cnpg_backups,
                    Some(ns),
                    &restore::cnpg::wal_switch_backup_name(job),
                )
                .await?
            } else {
                None
            },
            pods: ctx.list(&resource("v1", "Pod"), ns, &by_cluster).await?,
            cluster,
            source_cluster,
            catalog,
            safety_catalog,
        })
    }

    /// The recoverable window of the restore's source server as the archive shows it now.
    pub fn window(&self, backup: &Backup) -> Option<api::backups::RecoverableWindow> {
        let server = metadata(backup, drivers::cnpg::keys::SERVER_NAME)?;
        restore::cnpg::recoverable_window(
            server,
            self.object_store.as_ref(),
            self.source_cluster.as_ref(),
            &self.catalog,
        )
    }
}

/// Whether the PITR pre-flight found the job's target after the recoverable window.
fn after_window(job: &RestoreJob) -> bool {
    use api::contract::{condition_types, reasons};
    job.status.as_ref().is_some_and(|s| {
        api::meta::find_condition(&s.conditions, condition_types::RECOVERY_WINDOW_CHECKED)
            .is_some_and(|c| c.reason == reasons::RECOVERY_TARGET_AFTER_WINDOW)
    })
}

async fn cnpg(
    ctx: &Context,
    job: &RestoreJob,
    backup: &Backup,
    now: Time,
    carry: &Carry,
) -> Result<Step, Error> {
    let v = CnpgView::read(ctx, job, backup).await?;
    Ok(restore::cnpg::decide(&restore::cnpg::Observed {
        job,
        backup,
        now,
        strategy: v.strategy.as_ref(),
        target_app: v.target_app.as_ref(),
        cluster: v.cluster.as_ref(),
        pvcs: &v.pvcs,
        helm_release: v.helm_release.as_ref(),
        source_cnpg_backup: v.source_cnpg_backup.as_ref(),
        object_store: v.object_store.as_ref(),
        source_cluster: v.source_cluster.as_ref(),
        catalog: &v.catalog,
        safety_cnpg_backup: v.safety_cnpg_backup.as_ref(),
        safety_catalog: v.safety_catalog.as_ref(),
        wal_switch_backup: v.wal_switch_backup.as_ref(),
        pods: &v.pods,
        logs: carry.logs.as_deref(),
    }))
}

async fn etcd(ctx: &Context, job: &RestoreJob, backup: &Backup, now: Time) -> Result<Step, Error> {
    let ns = backup.metadata.namespace.clone().unwrap_or_default();
    let cluster_ref = restore::etcd::cluster_ref(&ns);
    let pvcs = restore::etcd::pvc_selection(&ns);
    let cluster = ctx
        .get(
            &resource(cluster_ref.api_version, cluster_ref.kind),
            Some(&ns),
            &cluster_ref.name,
        )
        .await?;
    let pvcs = ctx
        .list(&resource(pvcs.api_version, pvcs.kind), &ns, &pvcs.labels)
        .await?;
    let release = ctx
        .get(
            &erase::<t::flux::HelmRelease>(),
            Some(&ns),
            &backup.spec.application_ref.name,
        )
        .await?;
    Ok(restore::etcd::decide(&restore::etcd::Observed {
        job,
        backup,
        now,
        cluster: cluster.as_ref(),
        pvcs: &pvcs,
        helm_release: release.as_ref(),
    }))
}

/// The operator objects this job created (its owned-by labels) in `namespace`.
async fn owned(
    ctx: &Context,
    resource: &ApiResource,
    namespace: &str,
    job: &RestoreJob,
) -> Result<Vec<Json>, Error> {
    ctx.list(resource, namespace, &restore::skeleton::owned_by(job))
        .await
}

async fn mariadb(
    ctx: &Context,
    job: &RestoreJob,
    backup: &Backup,
    now: Time,
) -> Result<Step, Error> {
    use drivers::mariadb::keys;
    let ns = backup.metadata.namespace.clone().unwrap_or_default();
    let (app, _, _) = restore::mariadb::target(job, backup);
    let source = recorded(
        ctx,
        backup,
        &erase::<t::mariadb::Backup>(),
        keys::BACKUP_NAME,
        Some(keys::BACKUP_NAMESPACE),
        &ns,
    )
    .await?;
    let server = ctx
        .get(
            &erase::<t::mariadb::MariaDB>(),
            Some(&ns),
            &format!("mariadb-{app}"),
        )
        .await?;
    let restores = owned(ctx, &erase::<t::mariadb::Restore>(), &ns, job).await?;
    Ok(restore::mariadb::decide(&restore::mariadb::Observed {
        job,
        backup,
        now,
        source_backup: source.as_ref(),
        target_mariadb: server.as_ref(),
        restores: &restores,
    }))
}

async fn mongodb(
    ctx: &Context,
    job: &RestoreJob,
    backup: &Backup,
    now: Time,
) -> Result<Step, Error> {
    use drivers::mongodb::{CLUSTER_PREFIX, keys};
    let ns = backup.metadata.namespace.clone().unwrap_or_default();
    let app = restore::skeleton::target_app_name(job, backup);
    let source = recorded(
        ctx,
        backup,
        &erase::<t::percona::PerconaServerMongoDBBackup>(),
        keys::BACKUP_NAME,
        Some(keys::BACKUP_NAMESPACE),
        &ns,
    )
    .await?;
    let cluster = ctx
        .get(
            &erase::<t::percona::PerconaServerMongoDB>(),
            Some(&ns),
            &format!("{CLUSTER_PREFIX}{app}"),
        )
        .await?;
    let job_ns = job.metadata.namespace.clone().unwrap_or_default();
    let restores = owned(
        ctx,
        &erase::<t::percona::PerconaServerMongoDBRestore>(),
        &job_ns,
        job,
    )
    .await?;
    Ok(restore::mongodb::decide(&restore::mongodb::Observed {
        job,
        backup,
        now,
        source_backup: source.as_ref(),
        target_cluster: cluster.as_ref(),
        restores: &restores,
    }))
}

async fn foundationdb(
    ctx: &Context,
    job: &RestoreJob,
    backup: &Backup,
    now: Time,
) -> Result<Step, Error> {
    use drivers::foundationdb::CLUSTER_PREFIX;
    let ns = backup.metadata.namespace.clone().unwrap_or_default();
    let app = restore::skeleton::target_app_name(job, backup);
    let cluster = ctx
        .get(
            &erase::<t::fdb::FoundationDBCluster>(),
            Some(&ns),
            &format!("{CLUSTER_PREFIX}{app}"),
        )
        .await?;
    let restores = owned(ctx, &erase::<t::fdb::FoundationDBRestore>(), &ns, job).await?;
    Ok(restore::foundationdb::decide(
        &restore::foundationdb::Observed {
            job,
            backup,
            now,
            target_cluster: cluster.as_ref(),
            restores: &restores,
        },
    ))
}

async fn velero(
    ctx: &Context,
    job: &RestoreJob,
    backup: &Backup,
    now: Time,
) -> Result<Step, Error> {
    use drivers::velero::{NAMESPACE, VM_PREFIX, keys};
    // Malformed options are the decision's to reject; the reads then follow the defaults.
    let options = restore::options::velero(job.spec.options.as_ref()).unwrap_or_default();
    let target = restore::velero::target(job, backup, &options);
    let ns = backup.metadata.namespace.clone().unwrap_or_default();
    let job_name = job.metadata.name.clone().unwrap_or_default();
    let job_ns = job.metadata.namespace.clone().unwrap_or_default();
    let strategy = ctx
        .strategy(
            &backup.spec.strategy_ref.kind,
            &backup.spec.strategy_ref.name,
        )
        .await?;
    let target_namespace_exists = !target.copy
        || ctx
            .get(&resource("v1", "Namespace"), None, &target.namespace)
            .await?
            .is_some();
    let velero_backup = recorded(
        ctx,
        backup,
        &erase::<t::velero::Backup>(),
        keys::BACKUP_NAME,
        None,
        NAMESPACE,
    )
    .await?;
    let restores = owned(ctx, &erase::<t::velero::Restore>(), NAMESPACE, job).await?;
    let config_map = ctx
        .get(
            &resource("v1", "ConfigMap"),
            Some(NAMESPACE),
            &restore::velero::config_map_name(&job_ns, &job_name),
        )
        .await?;
    let releases = ctx
        .list(&erase::<t::flux::HelmRelease>(), &target.namespace, &[])
        .await?;
    let vm_name = format!("{VM_PREFIX}{}", backup.spec.application_ref.name);
    let vm = ctx
        .get(
            &resource("kubevirt.io/v1", "VirtualMachine"),
            Some(&ns),
            &vm_name,
        )
        .await?;
    let vmi = ctx
        .get(
            &resource("kubevirt.io/v1", "VirtualMachineInstance"),
            Some(&ns),
            &vm_name,
        )
        .await?;
    let pvcs = ctx
        .list(&resource("v1", "PersistentVolumeClaim"), &ns, &[])
        .await?;
    let mut pvs = Vec::new();
    for pvc in &pvcs {
        if let Some(pv) = pvc["spec"]["volumeName"].as_str()
            && let Some(pv) = ctx
                .get(&resource("v1", "PersistentVolume"), None, pv)
                .await?
        {
            pvs.push(pv);
        }
    }
    let data_volumes = ctx
        .list(&resource("cdi.kubevirt.io/v1beta1", "DataVolume"), &ns, &[])
        .await?;
    Ok(restore::velero::decide(&restore::velero::Observed {
        job,
        backup,
        now,
        strategy: strategy.as_ref(),
        target_namespace_exists,
        velero_backup: velero_backup.as_ref(),
        restores: &restores,
        config_map: config_map.as_ref(),
        releases: &releases,
        vm: vm.as_ref(),
        vmi: vmi.as_ref(),
        pvcs: &pvcs,
        pvs: &pvs,
        data_volumes: &data_volumes,
    }))
}

/// The API resource of an application kind: `apps.cozystack.io` kinds directly, any other group
/// through discovery (`None` when the kind is not served).
async fn app_resource(
    ctx: &Context,
    group: &str,
    kind: &str,
) -> Result<Option<ApiResource>, Error> {
    if group.is_empty() || group == groups::APPS {
        return Ok(Some(resource(&format!("{}/v1alpha1", groups::APPS), kind)));
    }
    match kube::discovery::group(&ctx.client, group).await {
        Ok(g) => Ok(g.recommended_kind(kind).map(|(r, _)| r)),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(source) => Err(Error::Api {
            action: "discover",
            object: format!("API group {group}"),
            source,
        }),
    }
}

async fn batch(
    ctx: &Context,
    flavor: &drivers::job::Flavor,
    job: &RestoreJob,
    backup: &Backup,
    now: Time,
) -> Result<Step, Error> {
    let job_ns = job.metadata.namespace.clone().unwrap_or_default();
    let strategy = ctx
        .strategy(
            &backup.spec.strategy_ref.kind,
            &backup.spec.strategy_ref.name,
        )
        .await?;
    let target = restore::batch::target_ref(job, backup);
    let app =
        match app_resource(ctx, target.api_group.as_deref().unwrap_or(""), &target.kind).await? {
            Some(r) => ctx.get(&r, Some(&job_ns), &target.name).await?,
            None => None,
        };
    let batch_job = ctx
        .get(
            &resource("batch/v1", "Job"),
            Some(&job_ns),
            &format!("{}-restore", job.metadata.name.as_deref().unwrap_or("")),
        )
        .await?;
    Ok(restore::batch::decide(
        flavor,
        &restore::batch::Observed {
            job,
            backup,
            now,
            strategy: strategy.as_ref(),
            target_app: app.as_ref(),
            batch_job: batch_job.as_ref(),
        },
    ))
}

/// The operator objects of `job` that ended in a storage fault (their `status`, as text,
/// classifies as one; `docs/storage-breaker.md`): what a restore that waited for its object store
/// deletes so that its driver creates them anew. Only the drivers that create one restore object
/// per job have such objects; a CNPG or Etcd recovery is retried by its operator.
pub async fn storage_failed(
    ctx: &Context,
    driver: Driver,
    job: &RestoreJob,
) -> Result<Vec<(ApiResource, String, String)>, Error> {
    let job_ns = job.metadata.namespace.clone().unwrap_or_default();
    let (resource, ns, objects) = match driver {
        Driver::MariaDb | Driver::MongoDb | Driver::FoundationDb | Driver::Velero => {
            let (resource, ns) = match driver {
                Driver::MariaDb => (erase::<t::mariadb::Restore>(), job_ns),
                Driver::MongoDb => (erase::<t::percona::PerconaServerMongoDBRestore>(), job_ns),
                Driver::FoundationDb => (erase::<t::fdb::FoundationDBRestore>(), job_ns),
                _ => (
                    erase::<t::velero::Restore>(),
                    drivers::velero::NAMESPACE.to_owned(),
                ),
            };
            let objects = owned(ctx, &resource, &ns, job).await?;
            (resource, ns, objects)
        }
        Driver::Job | Driver::Altinity => {
            let resource = resource("batch/v1", "Job");
            let name = format!("{}-restore", job.metadata.name.as_deref().unwrap_or(""));
            let objects = ctx.get(&resource, Some(&job_ns), &name).await?;
            (resource, job_ns, objects.into_iter().collect())
        }
        Driver::Cnpg | Driver::Etcd => return Ok(Vec::new()),
    };
    Ok(objects
        .iter()
        .filter(|o| drivers::storage_fault::classify(&o["status"].to_string()).is_some())
        .filter_map(|o| o["metadata"]["name"].as_str())
        .map(|name| (resource.clone(), ns.clone(), name.to_owned()))
        .collect())
}
