//! Simulated third-party operators: small controllers that move foreign objects through the same
//! status transitions the real operators do, against any API server (the kube emulator in tests and
//! in the dev control plane), selectable one by one with `--sims`. Some of them have a real data
//! plane: an S3 server, PostgreSQL instances and barman-cloud (see `docs/dataplane.md`).
//!
//! ```text
//!  operator-sims --sims s3,cosi,velero,cnpg,flux --data-dir DIR
//!     │ installs permissive CRDs for the kinds it serves (if absent)
//!     ├─ s3:     S3 server on loopback (HTTP + HTTPS with a dev CA), SigV4 keys per bucket,
//!     │          objects under DIR/s3; endpoints in DIR/s3/endpoints.json; fault switches
//!     │          (stop, 503, delay) on its admin endpoint
//!     ├─ cosi:   Bucket ─► BucketClaim bucket-<name> ─(delay)─► bucket created, status.bucketName
//!     │          Bucket + bound claim ─► Secret bucket-<name>-<user>-credentials (real keys and the
//!     │                                   HTTPS endpoint as a bare host), like the bucket chart
//!     ├─ velero: BackupStorageLocation ─► status.phase Available iff its credential Secret key exists;
//!     │          Backup ─► InProgress ─► DataUploads per selected PVC ─► Completed/PartiallyFailed/Failed;
//!     │          DeleteBackupRequest ─► Backup deleted; Restore ─► InProgress ─► Completed/Failed
//!     ├─ fdb:    FoundationDBCluster health; FoundationDBBackup ─► running ─► restorable snapshot;
//!     │          FoundationDBRestore ─► Running ─► Completed
//!     ├─ psmdb:  PerconaServerMongoDB ready; PerconaServerMongoDBBackup ─► requested ─► running ─► ready;
//!     │          PerconaServerMongoDBRestore ─► requested ─► running ─► ready/error
//!     ├─ flux:   Postgres app ─► HelmRelease postgres-<name> ─► Cluster/ObjectStore/Secrets as the
//!     │          Cozystack Postgres chart renders them (suspend, requestedAt/forceAt honoured)
//!     ├─ cnpg:   Cluster ─► a real PostgreSQL (or a recovery from barman-cloud), PVCs, Pods, Secrets;
//!     │          ObjectStore + plugin entry ─► WAL archiving; plugin Backup ─► barman-cloud-backup
//!     ├─ mariadb: mariadb-operator Backup and Restore ─► Complete condition (JobRunning ─►
//!     │          JobComplete/JobFailed); with s3: MariaDB ─► a real mariadbd, Backup ─►
//!     │          mariadb-dump uploaded, Restore ─► the dump replayed with mariadb
//!     ├─ etcd:   EtcdCluster ─► (with s3: a real etcd member, restored from S3 first when it has
//!     │          bootstrap.restore) ─► Available; EtcdSnapshot ─► Pending ─► Started ─►
//!     │          (with s3: etcdctl snapshot save, uploaded) ─► Complete/Failed
//!     └─ jobs:   the Job controller: batch/v1 Job (backup or restore) ─► started ─► Complete/Failed
//! ```
//!
//! Restores: the operator-object restores move through their operator's progress states without
//! touching any data (only the CNPG simulator really restores, from barman-cloud). Test controls
//! are annotations like the backup side's: [`cnpg::ANNOTATION_FAIL_RESTORE`] (fail, the value as
//! the operator's message where it reports one) and [`cnpg::ANNOTATION_HANG_RESTORE`] (stay in
//! progress), on the object the real operator restores into (the MariaDB, the PerconaServerMongoDB,
//! the FoundationDBCluster), or on the backup a restore reads where its target is recreated or
//! restored from scratch (the EtcdSnapshot, the Velero Backup). A restore Job's controls are its
//! pod template's, as for a backup Job.
//!
//! Data flow: each simulator watches its kinds through a `kube::Client` into a [`Cache`] and
//! re-evaluates every object it serves whenever anything changes (event-driven; no polling).
//! Invariants: simulators only write objects and status fields the real operator owns, every
//! transition is one the real operator makes, and no credential value is ever logged. Every
//! PostgreSQL process is stopped, and its data removed, when its Cluster goes or this process exits.
//! Adding a simulator means adding a [`Sim`] variant, its CRDs and its module.

pub mod cache;
pub mod cluster_backups;
pub mod cnpg;
pub mod conditions;
pub mod cosi;
pub mod etcd;
pub mod etcd_plane;
pub mod flux;
pub mod foundationdb;
pub mod jobs;
pub mod mariadb;
pub mod mysqld;
pub mod pg;
pub mod podlog;
pub mod psmdb;
pub mod s3;
pub mod velero;

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

/// A simulated operator.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Sim {
    /// COSI provisioner plus the bucket application chart (BucketClaim, credentials Secret).
    Cosi,
    /// Velero: BackupStorageLocation validation, Backups with DataUploads, DeleteBackupRequests.
    Velero,
    /// The S3 object store (not an operator: the server the COSI buckets live in).
    S3,
    /// CloudNativePG and its barman-cloud plugin, over real PostgreSQL and barman-cloud.
    Cnpg,
    /// Flux helm-controller (and cozystack-api) for Postgres applications.
    Flux,
    /// mariadb-operator's one-shot logical Backups.
    Mariadb,
    /// etcd-operator's EtcdCluster availability and EtcdSnapshots.
    Etcd,
    /// The Job controller for batch/v1 Jobs (Job and Altinity strategies).
    Jobs,
    /// The FoundationDB operator: cluster health and FoundationDBBackup progress.
    Fdb,
    /// The Percona Server for MongoDB operator: PerconaServerMongoDBBackup states.
    Psmdb,
}

impl Sim {
    /// The third-party CRDs this simulator serves.
    pub fn crds(self) -> Vec<CustomResourceDefinition> {
        use api::thirdparty::{
            apps, barman, cnpg, cosi, etcd, fdb, flux, mariadb, percona, permissive_crd, velero,
        };
        match self {
            Sim::Cosi => vec![
                permissive_crd::<cosi::BucketClaim>(true),
                permissive_crd::<apps::Bucket>(true),
            ],
            Sim::Velero => vec![
                permissive_crd::<velero::BackupStorageLocation>(true),
                permissive_crd::<velero::Backup>(true),
                permissive_crd::<velero::v2alpha1::DataUpload>(true),
                permissive_crd::<velero::DeleteBackupRequest>(true),
                permissive_crd::<velero::Restore>(true),
                // The applications whose labels backups select (served by cozystack-api).
                permissive_crd::<apps::VMInstance>(true),
                permissive_crd::<apps::VMDisk>(true),
            ],
            Sim::S3 => vec![],
            Sim::Cnpg => vec![
                permissive_crd::<cnpg::Cluster>(true),
                permissive_crd::<cnpg::Backup>(true),
                permissive_crd::<barman::ObjectStore>(true),
            ],
            Sim::Flux => vec![
                permissive_crd::<apps::Postgres>(true),
                permissive_crd::<flux::HelmRelease>(true),
                // The rendered kinds, so that Flux alone can apply them.
                permissive_crd::<cnpg::Cluster>(true),
                permissive_crd::<barman::ObjectStore>(true),
            ],
            Sim::Mariadb => vec![
                permissive_crd::<mariadb::MariaDB>(true),
                permissive_crd::<mariadb::Backup>(true),
                permissive_crd::<mariadb::Restore>(true),
            ],
            Sim::Etcd => vec![
                permissive_crd::<etcd::EtcdCluster>(true),
                permissive_crd::<etcd::EtcdSnapshot>(true),
            ],
            // batch/v1 is built into the API server.
            Sim::Jobs => vec![],
            Sim::Fdb => vec![
                permissive_crd::<fdb::FoundationDBCluster>(true),
                permissive_crd::<fdb::FoundationDBBackup>(true),
                permissive_crd::<fdb::FoundationDBRestore>(true),
                permissive_crd::<apps::FoundationDB>(true),
            ],
            Sim::Psmdb => vec![
                permissive_crd::<percona::PerconaServerMongoDB>(true),
                permissive_crd::<percona::PerconaServerMongoDBBackup>(true),
                permissive_crd::<percona::PerconaServerMongoDBRestore>(true),
                permissive_crd::<apps::MongoDB>(true),
            ],
        }
    }
}

/// Runs the selected simulators.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "operator-sims", version, about)]
pub struct Args {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: runtime::ClientArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub admin: runtime::AdminArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub log: runtime::LogArgs,
    /// Simulators to run (comma-separated).
    #[arg(
        long,
        env = "SIMS",
        value_enum,
        value_delimiter = ',',
        default_value = "cosi,velero"
    )]
    pub sims: Vec<Sim>,
    /// Install the permissive CRDs of the selected simulators when absent.
    #[arg(long, env = "INSTALL_CRDS", action = clap::ArgAction::Set, default_value_t = true)]
    pub install_crds: bool,
    /// COSI: delay between a BucketClaim appearing and its bucket being reported ready.
    #[arg(long, env = "COSI_DELAY_MS", default_value_t = 200)]
    pub cosi_delay_ms: u64,
    /// COSI: S3 endpoint written to credentials Secrets (a bare host, as the bucket chart writes
    /// it) when the `s3` simulator does not run; with it, its HTTPS endpoint is written.
    #[arg(long, env = "COSI_ENDPOINT", default_value = "s3.cozy.local")]
    pub cosi_endpoint: String,
    /// Directory for the data plane (S3 objects, the dev CA, PostgreSQL data); default: a fresh
    /// temporary directory removed at exit.
    #[arg(long, env = "DATA_DIR")]
    pub data_dir: Option<std::path::PathBuf>,
    /// S3: plain-HTTP listen address (the in-cluster fallback endpoint).
    #[arg(long, env = "S3_HTTP_ADDR", default_value = "127.0.0.1:0")]
    pub s3_http_addr: std::net::SocketAddr,
    /// S3: HTTPS listen address (the external ingress endpoint, dev CA).
    #[arg(long, env = "S3_HTTPS_ADDR", default_value = "127.0.0.1:0")]
    pub s3_https_addr: std::net::SocketAddr,
    /// S3: listen address of the fault-switch admin endpoint (`GET`/`PUT /faults`).
    #[arg(long, env = "S3_ADMIN_ADDR", default_value = "127.0.0.1:0")]
    pub s3_admin_addr: std::net::SocketAddr,
    /// CNPG: directory of the PostgreSQL binaries.
    #[arg(long, env = "PG_BIN_DIR", default_value = "/usr/lib/postgresql/15/bin")]
    pub pg_bin_dir: std::path::PathBuf,
    /// CNPG: the unprivileged account PostgreSQL runs as when this process runs as root
    /// (`nobody` when it does not exist).
    #[arg(long, env = "PG_USER", default_value = "postgres")]
    pub pg_user: String,
    /// etcd: directory of `etcd` and `etcdctl` (Debian's etcd-server and etcd-client), used when
    /// the S3 server runs too (real members, snapshots and restores).
    #[arg(long, env = "ETCD_BIN_DIR", default_value = "/usr/bin")]
    pub etcd_bin_dir: std::path::PathBuf,
    /// CNPG: pause before a failed recovery is tried again in a new recovery pod.
    #[arg(long, env = "CNPG_RECOVERY_RETRY_MS", default_value_t = 2000)]
    pub cnpg_recovery_retry_ms: u64,
}

/// Creates each CRD unless a CRD of that name exists, then waits (up to a minute) until each is
/// Established: kube-apiserver serves a new CRD's kind only then, and a daemon started before
/// would find it missing and look again only after its backoff.
pub async fn install_crds(
    client: &kube::Client,
    crds: &[CustomResourceDefinition],
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), crd).await {
            Ok(_) => tracing::info!(crd = name, "installed permissive CRD"),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("create CRD {name}")),
        }
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        loop {
            let got = api
                .get_opt(&name)
                .await
                .with_context(|| format!("read CRD {name}"))?;
            let established = got
                .and_then(|c| c.status)
                .and_then(|s| s.conditions)
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
            if established {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                anyhow::bail!("CRD {name} was not Established within a minute");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(())
}

/// Runs the daemon until SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let daemon = runtime::Daemon::start(
        "operator-sims",
        &args.client,
        &args.admin,
        &args.log,
        &serde_json::json!({
            "sims": args.sims.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>(),
            "installCrds": args.install_crds,
            "cosiDelayMs": args.cosi_delay_ms,
            "cosiEndpoint": args.cosi_endpoint,
            "dataDir": args.data_dir,
            "s3HttpAddr": args.s3_http_addr.to_string(),
            "s3HttpsAddr": args.s3_https_addr.to_string(),
            "s3AdminAddr": args.s3_admin_addr.to_string(),
            "pgBinDir": args.pg_bin_dir,
            "pgUser": args.pg_user,
            "cnpgRecoveryRetryMs": args.cnpg_recovery_retry_ms,
            "etcdBinDir": args.etcd_bin_dir,
        }),
    )
    .await?;
    let client = daemon.client.clone();
    let crds_ready = daemon.readiness.register("crds");
    if args.install_crds {
        let crds: Vec<_> = args.sims.iter().flat_map(|s| s.crds()).collect();
        install_crds(&client, &crds).await?;
    }
    crds_ready.set_ready();
    let data_dir = DataDir::open(args.data_dir.clone())?;
    let s3 = if args.sims.contains(&Sim::S3) {
        Some(
            s3::S3Server::start(&s3::Options {
                dir: data_dir.path().join("s3"),
                http_addr: args.s3_http_addr,
                https_addr: args.s3_https_addr,
                admin_addr: args.s3_admin_addr,
            })
            .await?,
        )
    } else {
        None
    };
    let cnpg_registry = cnpg::Registry::default();
    let mariadb_registry = mariadb::Registry::default();
    let etcd_registry = etcd::Registry::default();
    let mut tasks = tokio::task::JoinSet::new();
    let mut pg_root: Option<std::path::PathBuf> = None;
    for sim in &args.sims {
        match sim {
            Sim::Cosi => {
                tasks.spawn(cosi::run(
                    client.clone(),
                    cosi::Options {
                        delay: Duration::from_millis(args.cosi_delay_ms),
                        endpoint: args.cosi_endpoint.clone(),
                        s3: s3.clone(),
                    },
                    daemon.readiness.clone(),
                ));
            }
            Sim::Velero => {
                tasks.spawn(velero::run(client.clone(), daemon.readiness.clone()));
            }
            Sim::S3 => {}
            Sim::Cnpg => {
                // Instance directories left by a process that did not stop cleanly are stale:
                // their servers died with it.
                let _ = std::fs::remove_dir_all(data_dir.path().join("pg"));
                let run_as = pg::resolve_run_as(&args.pg_user);
                let root = cnpg::usable_root(&data_dir.path().join("pg"), run_as);
                pg_root = Some(root.clone());
                tasks.spawn(cnpg::run(
                    client.clone(),
                    cnpg::Options {
                        toolchain: pg::Toolchain {
                            bin_dir: args.pg_bin_dir.clone(),
                            run_as,
                        },
                        root,
                        default_ca: s3.as_ref().map(|s| s.endpoints().ca_file.clone()),
                        recovery_retry: Duration::from_millis(args.cnpg_recovery_retry_ms),
                    },
                    cnpg_registry.clone(),
                    daemon.readiness.clone(),
                ));
            }
            Sim::Flux => {
                tasks.spawn(flux::run(client.clone(), daemon.readiness.clone()));
            }
            Sim::Mariadb => {
                // With the S3 server, every MariaDB is a real server (stale ones died with the
                // process that started them).
                let plane = s3.as_ref().map(|s| {
                    let root = data_dir.path().join("mariadb");
                    let _ = std::fs::remove_dir_all(&root);
                    mariadb::Plane {
                        root,
                        default_ca: Some(s.endpoints().ca_file.clone()),
                    }
                });
                tasks.spawn(mariadb::run(
                    client.clone(),
                    daemon.readiness.clone(),
                    plane,
                    mariadb_registry.clone(),
                ));
            }
            Sim::Etcd => {
                // With the S3 server, EtcdClusters are real etcd members (stale ones died with
                // the process that started them).
                let plane = s3.as_ref().map(|s| {
                    let root = data_dir.path().join("etcd");
                    let _ = std::fs::remove_dir_all(&root);
                    etcd_plane::Plane {
                        root,
                        bin_dir: args.etcd_bin_dir.clone(),
                        ca_pem: std::fs::read(&s.endpoints().ca_file).ok(),
                    }
                });
                tasks.spawn(etcd::run(
                    client.clone(),
                    etcd::Options { plane },
                    etcd_registry.clone(),
                    daemon.readiness.clone(),
                ));
            }
            Sim::Jobs => {
                tasks.spawn(jobs::run(client.clone(), daemon.readiness.clone()));
            }
            Sim::Fdb => {
                tasks.spawn(foundationdb::run(client.clone(), daemon.readiness.clone()));
            }
            Sim::Psmdb => {
                tasks.spawn(psmdb::run(client.clone(), daemon.readiness.clone()));
            }
        }
    }
    let shutdown = daemon.shutdown.clone();
    let result = daemon
        .run(async move {
            tokio::select! {
                _ = shutdown.signaled() => {}
                Some(r) = tasks.join_next() => {
                    r.context("simulator task")??;
                }
            }
            // Stop every PostgreSQL before the tasks that watch them go away.
            cnpg_registry.stop_all().await;
            mariadb_registry.stop_all().await;
            etcd_registry.stop_all().await;
            tasks.abort_all();
            Ok(())
        })
        .await;
    let _ = std::fs::remove_dir_all(data_dir.path().join("pg"));
    let _ = std::fs::remove_dir_all(data_dir.path().join("etcd"));
    let _ = std::fs::remove_dir_all(data_dir.path().join("mariadb"));
    // The temporary directory the instances used instead, when the data directory was private.
    if let Some(root) = pg_root {
        let _ = std::fs::remove_dir_all(root);
    }
    drop(data_dir);
    result
}

/// The data-plane directory: the one given, or a temporary one removed when dropped.
#[derive(Debug)]
pub struct DataDir {
    path: std::path::PathBuf,
    temporary: bool,
}

impl DataDir {
    /// Creates (if needed) the given directory, or a fresh temporary one.
    pub fn open(given: Option<std::path::PathBuf>) -> anyhow::Result<Self> {
        let (path, temporary) = match given {
            Some(p) => (p, false),
            None => (
                std::env::temp_dir().join(format!("operator-sims-{}", std::process::id())),
                true,
            ),
        };
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        let path = path
            .canonicalize()
            .with_context(|| format!("resolving {}", path.display()))?;
        Ok(DataDir { path, temporary })
    }

    /// The directory.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }
}

impl Drop for DataDir {
    fn drop(&mut self) {
        if self.temporary {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[test]
    fn args_and_crds() {
        Args::command().debug_assert();
        let args = Args::parse_from(["operator-sims", "--sims=velero", "--install-crds=false"]);
        assert_eq!(args.sims, [Sim::Velero]);
        assert!(!args.install_crds);
        let names = |s: Sim| -> Vec<String> {
            s.crds()
                .into_iter()
                .map(|c| c.metadata.name.unwrap())
                .collect()
        };
        assert_eq!(
            names(Sim::Cosi),
            [
                "bucketclaims.objectstorage.k8s.io",
                "buckets.apps.cozystack.io"
            ]
        );
        assert_eq!(
            names(Sim::Velero),
            [
                "backupstoragelocations.velero.io",
                "backups.velero.io",
                "datauploads.velero.io",
                "deletebackuprequests.velero.io",
                "restores.velero.io",
                "vminstances.apps.cozystack.io",
                "vmdisks.apps.cozystack.io"
            ]
        );
        assert_eq!(
            names(Sim::Fdb),
            [
                "foundationdbclusters.apps.foundationdb.org",
                "foundationdbbackups.apps.foundationdb.org",
                "foundationdbrestores.apps.foundationdb.org",
                "foundationdbs.apps.cozystack.io"
            ]
        );
        assert_eq!(
            names(Sim::Psmdb),
            [
                "perconaservermongodbs.psmdb.percona.com",
                "perconaservermongodbbackups.psmdb.percona.com",
                "perconaservermongodbrestores.psmdb.percona.com",
                "mongodbs.apps.cozystack.io"
            ]
        );
        let args = Args::parse_from(["operator-sims", "--sims=fdb,psmdb,velero"]);
        assert_eq!(args.sims, [Sim::Fdb, Sim::Psmdb, Sim::Velero]);
        assert_eq!(
            names(Sim::Cnpg),
            [
                "clusters.postgresql.cnpg.io",
                "backups.postgresql.cnpg.io",
                "objectstores.barmancloud.cnpg.io"
            ]
        );
        assert_eq!(
            names(Sim::Flux),
            [
                "postgreses.apps.cozystack.io",
                "helmreleases.helm.toolkit.fluxcd.io",
                "clusters.postgresql.cnpg.io",
                "objectstores.barmancloud.cnpg.io"
            ]
        );
        assert!(names(Sim::S3).is_empty());
        assert_eq!(
            names(Sim::Mariadb),
            [
                "mariadbs.k8s.mariadb.com",
                "backups.k8s.mariadb.com",
                "restores.k8s.mariadb.com"
            ]
        );
        assert_eq!(
            names(Sim::Etcd),
            [
                "etcdclusters.etcd-operator.cozystack.io",
                "etcdsnapshots.etcd-operator.cozystack.io"
            ]
        );
        assert!(names(Sim::Jobs).is_empty());
    }
}
