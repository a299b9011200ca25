//! The real data plane for the restore-orchestrator's end-to-end tests and benchmark: the
//! emulator, the simulated operators over real PostgreSQL, barman-cloud and S3, and the real
//! strategy-renderer, credentials-projector, backup-runner and restore-orchestrator binaries; the
//! tenant's Postgres `orders-db`; and the waits and readings the tests share.
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use api::backups::RestoreJob;
use harness::dataplane::{DATAPLANE_DEADLINE, DataPlane, apply, psql};
use harness::{Audit, DaemonSpec, Harness, eventually_within};
use kube::api::{Api, PostParams};
use serde_json::json;

pub const TENANT: &str = "tenant-acme";
pub const READY: Duration = Duration::from_secs(60);

pub fn bin(name: &str) -> std::path::PathBuf {
    harness::locate_binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The real retention-cleaner with a 2 s failed-job TTL, after serving every operator kind it lists
/// before a failed job goes (those a simulator already installed stay as they are).
pub async fn spawn_failed_job_cleaner(h: &mut Harness) {
    use api::thirdparty::{cnpg, etcd, mariadb, percona, permissive_crd, velero};
    let crds = Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(h.client());
    for crd in [
        permissive_crd::<cnpg::Backup>(true),
        permissive_crd::<etcd::EtcdSnapshot>(true),
        permissive_crd::<mariadb::Backup>(true),
        permissive_crd::<percona::PerconaServerMongoDBBackup>(true),
        permissive_crd::<velero::Backup>(true),
        permissive_crd::<velero::DeleteBackupRequest>(true),
    ] {
        let _ = crds.create(&PostParams::default(), &crd).await;
    }
    h.spawn_ready(
        DaemonSpec::new("retention-cleaner", bin("retention-cleaner"))
            .args(["--failed-backup-ttl=2s", "--debounce=200ms"]),
        READY,
    )
    .await
    .unwrap();
}

pub struct Platform {
    /// The emulator and the daemons.
    pub h: Harness,
    /// The data plane.
    pub dp: DataPlane,
}

impl Platform {
    /// Data plane, renderer, projector, runner and orchestrator; Postgres `orders-db` healthy.
    pub async fn start() -> Platform {
        Self::start_with(async |_: &mut Harness| {
            vec![DaemonSpec::new(
                "restore-orchestrator",
                bin("restore-orchestrator"),
            )]
        })
        .await
    }

    /// The platform with the orchestrator replicas `orchestrators` returns (it may start the
    /// lease-server first).
    pub async fn start_with(
        orchestrators: impl AsyncFnOnce(&mut Harness) -> Vec<DaemonSpec>,
    ) -> Platform {
        let mut h = Harness::start().await.unwrap();
        h.create_namespaces(&[
            "tenant-root",
            "cozy-velero",
            "cozy-backup-controller",
            TENANT,
        ])
        .await
        .unwrap();
        let dp = h
            .spawn_dataplane("s3,cosi,cnpg,flux", &["--cosi-delay-ms=10"])
            .await
            .unwrap();
        h.spawn_renderer_and_projector(&dp, READY).await.unwrap();
        h.spawn_ready(
            DaemonSpec::new("backup-runner", bin("backup-runner")),
            READY,
        )
        .await
        .unwrap();
        // Configured as in production: the storage breaker's probe trusts the store's CA.
        let ca = format!("--storage-ca-file={}", dp.ca_file.display());
        for spec in orchestrators(&mut h).await {
            h.spawn_ready(spec.args([ca.clone()]), READY).await.unwrap();
        }
        let p = Platform { h, dp };
        p.app("orders-db").await;
        p
    }

    pub async fn app(&self, name: &str) {
        apply(
            &self.h.dynamic::<api::thirdparty::apps::Postgres>(TENANT),
            json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres",
                   "metadata": {"name": name, "namespace": TENANT},
                   "spec": {"size": "1Gi", "replicas": 1}}),
        )
        .await;
    }

    pub async fn uri(&self, app: &str) -> String {
        self.h
            .healthy_cluster_uri(TENANT, &format!("postgres-{app}"))
            .await
    }

    /// Rows of `orders` in `app`, by id.
    pub async fn rows(&self, app: &str) -> String {
        psql(
            &self.uri(app).await,
            "SELECT string_agg(item, ',' ORDER BY id) FROM orders",
        )
    }

    /// Runs a BackupJob of `orders-db` to `Succeeded`.
    pub async fn backup(&self, name: &str) {
        self.h
            .backup_succeeded(
                TENANT,
                name,
                ("Postgres", "orders-db"),
                "cozy-default",
                DATAPLANE_DEADLINE,
            )
            .await;
    }

    /// The seed's PITR scenario on `orders-db`: table `orders` with `before` (ids from 1), the base
    /// backup `orders-db-base` (it opens the recoverable window), the row `marked`, a recorded
    /// time, the row `after`, the backup `orders-db-adhoc`. Returns the recorded time.
    pub async fn pitr_scenario(&self, before: &[&str], marked: &str, after: &str) -> String {
        let uri = self.uri("orders-db").await;
        psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
        let mut id = 0;
        let mut insert = |item: &str| {
            id += 1;
            psql(&uri, &format!("INSERT INTO orders VALUES ({id}, '{item}')"));
        };
        for item in before {
            insert(item);
        }
        self.backup("orders-db-base").await;
        insert(marked);
        let t = mark(&uri).await;
        insert(after);
        self.backup("orders-db-adhoc").await;
        t
    }

    pub fn restores(&self) -> Api<RestoreJob> {
        Api::namespaced(self.h.client(), TENANT)
    }

    /// Creates RestoreJob `name` from Backup `backup` (into `target`, in place when `None`).
    pub async fn restore(
        &self,
        name: &str,
        backup: &str,
        target: Option<&str>,
        options: serde_json::Value,
    ) {
        let mut spec = json!({"backupRef": {"name": backup}, "options": options});
        if let Some(t) = target {
            spec["targetApplicationRef"] =
                json!({"apiGroup": "apps.cozystack.io", "kind": "Postgres", "name": t});
        }
        let job: RestoreJob = serde_json::from_value(json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
            "metadata": {"name": name, "namespace": TENANT}, "spec": spec}))
        .unwrap();
        self.restores()
            .create(&PostParams::default(), &job)
            .await
            .unwrap();
    }

    /// Waits for a terminal phase.
    pub async fn terminal(&self, name: &str, within: Duration) -> RestoreJob {
        let api = self.restores();
        eventually_within(&format!("RestoreJob {name} finished"), within, || {
            let api = api.clone();
            async move {
                let j = api.get(name).await.ok()?;
                j.is_terminal().then_some(j)
            }
        })
        .await
    }
}
/// Two orchestrator replicas, `orchestrator-0` and `orchestrator-1`, on the secured lease server
/// as in production (TLS, the orchestrator's ServiceAccount token reviewed by TokenReview,
/// authorized for `restore-orchestrator/`, its epoch in `cozy-backup-controller`), with a 3 s lease
/// TTL and `extra` arguments: for [`Platform::start_with`].
pub async fn two_leased_orchestrators(h: &mut Harness, extra: &[&str]) -> Vec<DaemonSpec> {
    let lease = h
        .spawn_component_lease_server(
            DaemonSpec::new("lease-server", bin("lease-server")).args([
                "--namespace",
                "cozy-backup-controller",
                "--max-ttl",
                "3s",
            ]),
            "restore-orchestrator",
            "cozy-backup-controller",
            READY,
        )
        .await
        .unwrap();
    ["orchestrator-0", "orchestrator-1"]
        .map(|who| {
            DaemonSpec::new(who, bin("restore-orchestrator"))
                .args(lease.args())
                .args(["--identity", who, "--lease-ttl", "3s"])
                .args(extra.iter().copied())
        })
        .to_vec()
}

pub fn condition(job: &RestoreJob, type_: &str) -> (String, String, String) {
    let c = job
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .unwrap_or_else(|| panic!("no {type_} on {:?}", job.status));
    (
        format!("{:?}", c.status),
        c.reason.clone(),
        c.message.clone(),
    )
}

pub fn phase(job: &RestoreJob) -> String {
    job.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// A timestamp strictly between the writes before and after it (PostgreSQL's clock, RFC 3339).
pub async fn mark(uri: &str) -> String {
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t = psql(
        uri,
        "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    t
}

/// The deletes of `name` by the orchestrator.
pub fn deletes(audit: &Audit, group: &str, resource: &str, name: &str) -> usize {
    let all: Vec<_> = audit
        .writes(Some("delete"), resource, Some(TENANT), Some(name))
        .filter(|r| r.group == group)
        .collect();
    let ours = all
        .iter()
        .filter(|r| r.user_agent.starts_with("restore-orchestrator/"))
        .count();
    assert_eq!(ours, all.len(), "deletes of {name} by others: {all:?}");
    ours
}
