//! End to end on the real data plane (PostgreSQL, barman-cloud, the S3 server, the simulated CNPG
//! and Flux): the real `backup-runner`, `strategy-renderer` and `credentials-projector` binaries
//! against the emulator. The seed's tenant BackupJob, applied verbatim with kubectl, ends
//! `Succeeded` with a catalog `Backup` whose base backup is in the bucket; and the CNPG driver's
//! edges: strategy missing during the bootstrap window, application missing, credentials not yet
//! projected, a failing backup, a hanging one.

use crate::support;

use std::time::Duration;

use api::backups::{Backup, BackupJob};
use harness::dataplane::{DATAPLANE_DEADLINE, DataPlane, apply, psql};
use harness::{Admin, DaemonSpec, Harness, eventually_within};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;
use support::{bin, ready_of};

const TENANT: &str = "tenant-acme";
const READY: Duration = support::WAIT;

/// The seed's tenant workflow, verbatim.
const SEED_BACKUPJOB: &str = r#"
apiVersion: backups.cozystack.io/v1alpha1
kind: BackupJob
metadata:
  name: ad-hoc
  namespace: tenant-acme
spec:
  backupClassName: cozy-default
  applicationRef:
    apiGroup: apps.cozystack.io
    kind: Postgres
    name: orders-db
"#;

/// The platform: data plane, renderer, projector and runner; the tenant's Postgres `orders-db`
/// healthy with two rows.
struct Platform {
    h: Harness,
    dp: DataPlane,
    runner: Admin,
}

impl Platform {
    async fn start(runner_args: &[&str]) -> Platform {
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
        h.spawn_ready(
            DaemonSpec::new("strategy-renderer", bin("strategy-renderer"))
                .args([format!("--endpoint={}", dp.http)]),
            READY,
        )
        .await
        .unwrap();
        h.spawn_ready(support::projector(&dp.http), READY)
            .await
            .unwrap();
        let runner = h
            .spawn_ready(
                DaemonSpec::new("backup-runner", bin("backup-runner"))
                    .args(runner_args.iter().copied()),
                READY,
            )
            .await
            .unwrap()
            .admin()
            .await
            .unwrap();
        let p = Platform { h, dp, runner };
        p.app("orders-db").await;
        let uri = p.h.healthy_cluster_uri(TENANT, "postgres-orders-db").await;
        psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
        psql(&uri, "INSERT INTO orders VALUES (1, 'tea'), (2, 'cups')");
        p
    }

    async fn app(&self, name: &str) {
        apply(
            &self.h.dynamic::<api::thirdparty::apps::Postgres>(TENANT),
            json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres",
                   "metadata": {"name": name, "namespace": TENANT},
                   "spec": {"size": "1Gi", "replicas": 1}}),
        )
        .await;
    }

    fn jobs(&self) -> Api<BackupJob> {
        Api::namespaced(self.h.client(), TENANT)
    }

    /// Creates BackupJob `name` for Postgres `app` through `class`.
    async fn job(&self, name: &str, app: &str, class: &str) {
        support::backup_job(&self.h, TENANT, name, "Postgres", app, class).await;
    }

    /// Waits for the job's Ready condition to have `reason` (any phase), returning the job.
    async fn reason(&self, name: &str, reason: &str, within: Duration) -> BackupJob {
        support::reason(&self.jobs(), name, reason, within).await
    }

    /// Waits for a terminal phase.
    async fn terminal(&self, name: &str, within: Duration) -> BackupJob {
        support::terminal(&self.jobs(), name, within).await
    }

    /// A BackupClass routing Postgres to the CNPG strategy `strategy` with these parameters.
    async fn class(&self, name: &str, strategy: &str, parameters: &[(&str, &str)]) {
        support::class(&self.h, name, "Postgres", "CNPG", strategy, parameters).await;
    }

    /// A copy of the platform's CNPG strategy under another name.
    async fn strategy_copy(&self, name: &str) {
        let strategies: Api<DynamicObject> = Api::all_with(
            self.h.client(),
            &kube::core::ApiResource::erase::<api::strategy::CNPG>(&()),
        );
        let default = strategies.get("cozy-default-cnpg").await.unwrap();
        apply(
            &strategies,
            json!({"apiVersion": "strategy.backups.cozystack.io/v1alpha1", "kind": "CNPG",
                   "metadata": {"name": name}, "spec": default.data["spec"]}),
        )
        .await;
    }

    async fn annotate_cluster(&self, key: &str, value: Option<&str>) {
        self.h
            .dynamic::<api::thirdparty::cnpg::Cluster>(TENANT)
            .patch(
                "postgres-orders-db",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_backupjob_succeeds_with_its_base_backup_in_the_bucket() {
    let mut p = Platform::start(&[]).await;
    p.h.apply_yaml(None, SEED_BACKUPJOB);
    let job = p.terminal("ad-hoc", DATAPLANE_DEADLINE).await;
    let status = job.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
    assert_eq!(status.backup_ref.as_ref().unwrap().name, "ad-hoc");
    assert_eq!(
        ready_of(&job),
        ("BackupCompleted".into(), "cnpg.io Backup completed".into())
    );
    assert!(status.started_at.is_some() && status.completed_at.is_some());

    // The catalog entry, in upstream's shape plus the base backup's coordinates and window.
    let backup: Backup = Api::namespaced(p.h.client(), TENANT)
        .get("ad-hoc")
        .await
        .unwrap();
    assert!(
        backup.metadata.owner_references.is_none(),
        "a Backup outlives its job"
    );
    assert_eq!(
        backup.metadata.finalizers.as_deref(),
        Some(&["backups.cozystack.io/cleanup".to_owned()][..])
    );
    let md = backup.spec.driver_metadata.clone().unwrap();
    let cnpg_backup = md["cnpg.io/backup-name"].clone();
    assert!(cnpg_backup.starts_with("ad-hoc-"), "{md:?}");
    // The platform strategy names the server <namespace>-<application>.
    assert_eq!(md["cnpg.io/server-name"], "tenant-acme-orders-db");
    assert_eq!(md["cnpg.io/cluster-name"], "postgres-orders-db");
    assert_eq!(md["cnpg.io/s3-secret-ref"], "cozy-backups-creds");
    let destination = md["cnpg.io/destination-path"].clone();
    assert!(
        destination.ends_with("/tenant-acme/orders-db/"),
        "{destination}"
    );
    assert!(md["cnpg.io/endpoint-url"].starts_with("https://"), "{md:?}");
    for key in [
        "cnpg.io/backup-id",
        "cnpg.io/begin-wal",
        "cnpg.io/end-wal",
        "cnpg.io/stopped-at",
    ] {
        assert!(
            md.get(key).is_some_and(|v| !v.is_empty()),
            "{key} in {md:?}"
        );
    }
    let bstatus = backup.status.clone().unwrap();
    assert_eq!(bstatus.phase.as_deref(), Some("Ready"));
    assert_eq!(
        bstatus.artifact.as_ref().unwrap().uri,
        format!("cnpg://tenant-acme-orders-db/{cnpg_backup}")
    );
    let window = bstatus.recoverable_window.clone().unwrap();
    assert!(window.from.unwrap().0 <= window.to.clone().unwrap().0);
    assert_eq!(
        window.to.unwrap().0.to_string(),
        md["cnpg.io/stopped-at"],
        "the window ends at the base backup's stop (its end WAL is archived)"
    );
    let snapshot = bstatus.underlying_resources.clone().unwrap();
    assert_eq!(snapshot["kind"], "CNPGBackupSnapshot");
    assert!(!snapshot.to_string().contains("password"), "{snapshot}");

    // The base backup is in the bucket: barman's own listing shows its id.
    let listing =
        p.h.barman_list(&p.dp, &destination, "tenant-acme-orders-db")
            .await;
    let ids: Vec<&str> = listing["backups_list"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["backup_id"].as_str())
        .collect();
    assert!(ids.contains(&md["cnpg.io/backup-id"].as_str()), "{listing}");

    // The plugin wiring: ObjectStore owned by the Cluster, the Cluster's plugin entry.
    let store =
        p.h.dynamic::<api::thirdparty::barman::ObjectStore>(TENANT)
            .get("postgres-orders-db")
            .await
            .unwrap();
    assert_eq!(store.metadata.owner_references.unwrap()[0].kind, "Cluster");
    assert!(
        store.data["spec"]["configuration"]
            .get("serverName")
            .is_none()
    );

    // kubectl describe tells the story; no credential value reached the runner's log or Events.
    let described =
        p.h.kubectl(&["-n", TENANT, "describe", "backupjob", "ad-hoc"]);
    for reason in ["BackupRunning", "BackupCreated", "BackupSucceeded"] {
        assert!(described.contains(reason), "{described}");
    }
    support::assert_clean(&mut p.h, &p.runner, TENANT, "ad-hoc").await;
    let m = p.runner.metrics();
    assert_eq!(
        m.value(
            "cozy_backups_backup_runner_backups_total",
            &[
                ("namespace", TENANT),
                ("kind", "Postgres"),
                ("strategy", "CNPG"),
                ("result", "succeeded")
            ]
        ),
        1.0
    );
    assert!(m.has("cozy_backups_backup_runner_last_success_timestamp_seconds"));
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strategy_missing_in_the_bootstrap_window_waits_then_succeeds() {
    let mut p = Platform::start(&[]).await;
    p.class("late-class", "late-cnpg", &[]).await;
    p.job("early", "orders-db", "late-class").await;
    let waiting = support::strategy_not_ready(&p.jobs(), "early", "late-cnpg", "late-class").await;
    assert_eq!(
        waiting.status.as_ref().unwrap().phase,
        None,
        "phaseless while waiting"
    );
    p.strategy_copy("late-cnpg").await;
    let job = p.terminal("early", DATAPLANE_DEADLINE).await;
    assert_eq!(job.status.unwrap().phase.as_deref(), Some("Succeeded"));
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_application_and_unprojected_credentials() {
    let mut p = Platform::start(&["--projection-grace=1s"]).await;
    p.job("ghost", "ghost", "cozy-default").await;
    let failed = p.terminal("ghost", READY).await;
    assert_eq!(
        failed.status.as_ref().unwrap().message.as_deref(),
        Some("Postgres application not found: tenant-acme/ghost")
    );
    assert_eq!(ready_of(&failed).0, "BackupFailed");

    // The projector is down: the job waits for it, says so, and proceeds once it is back.
    p.h.kill("credentials-projector").await.unwrap();
    p.job("patient", "orders-db", "cozy-default").await;
    support::projection_pending(&p.jobs(), "patient").await;
    p.h.restart("credentials-projector", READY).await.unwrap();
    let done = p.terminal("patient", DATAPLANE_DEADLINE).await;
    assert_eq!(done.status.unwrap().phase.as_deref(), Some("Succeeded"));
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_backup_and_a_hanging_one_end_failed_at_the_deadline() {
    let mut p = Platform::start(&[]).await;
    p.strategy_copy("quick-cnpg").await;
    p.class("quick", "quick-cnpg", &[("backupDeadline", "15s")])
        .await;

    p.annotate_cluster("operator-sims.cozy-backups.io/fail-backup", Some("true"))
        .await;
    p.job("broken", "orders-db", "quick").await;
    let transient = p
        .reason("broken", "CNPGBackupTransientFailure", DATAPLANE_DEADLINE)
        .await;
    assert_eq!(
        transient.status.as_ref().unwrap().phase.as_deref(),
        Some("Running")
    );
    let failed = p.terminal("broken", DATAPLANE_DEADLINE).await;
    let status = failed.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    assert_eq!(
        ready_of(&transient).1,
        status.message.clone().unwrap(),
        "the operator's error is the message"
    );
    p.annotate_cluster("operator-sims.cozy-backups.io/fail-backup", None)
        .await;

    p.annotate_cluster("operator-sims.cozy-backups.io/hang", Some("true"))
        .await;
    p.job("stuck", "orders-db", "quick").await;
    let failed = p.terminal("stuck", DATAPLANE_DEADLINE).await;
    let message = failed.status.unwrap().message.unwrap();
    assert!(
        message.starts_with("cnpg.io Backup tenant-acme/stuck-")
            && message.contains("did not complete within 15s"),
        "{message}"
    );
    p.annotate_cluster("operator-sims.cozy-backups.io/hang", None)
        .await;
    p.h.cleanup().await.unwrap();
}

/// Every write of a CNPG backup, in order: the runner is killed -9 right after each one is stored
/// and before it hears back — `(verb, group, resource, subresource)`. (The platform's Cluster
/// already carries the barman-cloud plugin, so the Cluster patch does not happen here.)
const CRASH_POINTS: [(&str, &str, &str, &str); 6] = [
    ("patch", "backups.cozystack.io", "backupjobs", "status"), // startedAt
    ("patch", "barmancloud.cnpg.io", "objectstores", ""),
    ("create", "postgresql.cnpg.io", "backups", ""),
    ("patch", "backups.cozystack.io", "backupjobs", "status"), // Running
    ("create", "backups.cozystack.io", "backups", ""),
    ("patch", "backups.cozystack.io", "backupjobs", "status"), // Succeeded
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_every_write_of_a_backup_repeats_nothing() {
    let mut p = Platform::start(&[]).await;
    let hold = |(verb, group, resource, sub): (&str, &str, &str, &str)| harness::Hold {
        verb: Some(verb.into()),
        group: Some(group.into()),
        resource: Some(resource.into()),
        subresource: Some(sub.into()),
        user_agent: Some("backup-runner/".into()),
    };
    // Each rule is installed before the runner (re)starts, so the write it names cannot slip by.
    p.h.emulator().unwrap().hold(hold(CRASH_POINTS[0]));
    p.h.apply_yaml(None, SEED_BACKUPJOB);
    let mut crashes = Vec::new();
    for (i, point) in CRASH_POINTS.into_iter().enumerate() {
        // The write is stored; the runner never hears back: kill it there, and start it again.
        eventually_within(
            &format!("the runner's {point:?} held"),
            DATAPLANE_DEADLINE,
            || async { (p.h.emulator().unwrap().held() > i as u64).then_some(()) },
        )
        .await;
        p.h.kill("backup-runner").await.unwrap();
        let emu = p.h.emulator().unwrap();
        emu.release_holds();
        if let Some(next) = CRASH_POINTS.get(i + 1) {
            emu.hold(hold(*next));
        }
        crashes.push(point);
        p.h.restart("backup-runner", READY).await.unwrap();
    }
    assert_eq!(crashes.len(), 6, "{crashes:?}");

    let job = p.terminal("ad-hoc", DATAPLANE_DEADLINE).await;
    let status = job.status.clone().unwrap();
    assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
    // Exactly one operator-side backup and one catalog entry, created once each.
    let cnpg_backups =
        p.h.dynamic::<api::thirdparty::cnpg::Backup>(TENANT)
            .list(&kube::api::ListParams::default().labels(&format!(
                "{}=ad-hoc",
                api::contract::labels::OWNED_BY_JOB_NAME
            )))
            .await
            .unwrap();
    assert_eq!(cnpg_backups.items.len(), 1);
    let catalog: Vec<Backup> = Api::<Backup>::namespaced(p.h.client(), TENANT)
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    assert_eq!(
        catalog.iter().map(|b| b.name_any()).collect::<Vec<_>>(),
        ["ad-hoc"]
    );
    let audit = p.h.audit();
    assert_eq!(
        audit.creates_by("backup-runner/", "postgresql.cnpg.io", "backups"),
        1
    );
    assert_eq!(
        audit.creates_by("backup-runner/", "backups.cozystack.io", "backups"),
        1
    );
    harness::rbac::assert_allowed(&audit, "backup-runner");
    // The base backup the catalog names is the one in the bucket.
    let md = catalog[0].spec.driver_metadata.clone().unwrap();
    assert_eq!(md["cnpg.io/backup-name"], cnpg_backups.items[0].name_any());
}
