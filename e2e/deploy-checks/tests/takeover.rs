//! Taking over from upstream's controllers: the objects upstream's chart and Go controllers leave
//! in a cluster, built object by object in upstream's shapes, then this project's daemons started
//! on them (README, "Installing on Cozystack"; docs/helm.md, "Taking over from upstream").
//!
//! The emulator with the real data plane (`operator-sims` with S3, COSI, CNPG over real
//! PostgreSQL and barman-cloud, Flux). The backup data upstream would have written to the bucket is
//! made first by this project's renderer, projector and runner, which are then stopped; every
//! object they made is replaced by upstream's version of it (Helm's labels and annotations on the
//! BackupClass and the strategies, upstream's label only on the projected Secrets, upstream's
//! Backup shape with its finalizer and no catalog annotation), and the rest is written as upstream
//! writes it: BackupJobs in every phase (no status, only `startedAt` (upstream's first pass),
//! Running with a live cnpg Backup, Succeeded, Failed), two Plans without status, and two
//! RestoreJobs stopped mid-PITR where upstream can stop: the HelmRelease suspended, the target
//! application patched, the Cluster and its PVCs deleted; for the second also the HelmRelease
//! resumed and the recovery Cluster re-rendered. Neither has `TargetPurged` (upstream records it
//! after resuming the HelmRelease).
//!
//! Then every daemon starts, and the API server's request log shows what they write: nothing to
//! what should stay but the adoption writes docs/helm.md lists, no delete at all (no second purge),
//! no BackupJob from a Plan's slot upstream ran.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use harness::dataplane::{DATAPLANE_DEADLINE, psql};
use harness::{Audit, DaemonSpec, Harness, Request, eventually_within};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

const TENANT: &str = "tenant-acme";
const READY: Duration = Duration::from_secs(60);
const GROUP: &str = "backups.cozystack.io";
const STRATEGY_GROUP: &str = "strategy.backups.cozystack.io";
const PLAN: &str = "orders-db-hourly";
const QUIET_PLAN: &str = "orders-db-daily";
/// The user agents of this project's daemons (operator-sims and the test's admin are others).
const OURS: [&str; 5] = [
    "strategy-renderer/",
    "credentials-projector/",
    "backup-runner/",
    "restore-orchestrator/",
    "retention-cleaner/",
];
const STRATEGY_PLURALS: [(&str, &str); 8] = [
    ("CNPG", "cnpgs"),
    ("Etcd", "etcds"),
    ("MariaDB", "mariadbs"),
    ("Altinity", "altinities"),
    ("MongoDB", "mongodbs"),
    ("FoundationDB", "foundationdbs"),
    ("Velero", "veleroes"),
    ("Job", "jobs"),
];

fn bin(name: &str) -> std::path::PathBuf {
    harness::locate_binary(name).unwrap_or_else(|e| panic!("{e}"))
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    }
}

fn ns_api(h: &Harness, r: &ApiResource, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(h.client(), ns, r)
}

fn ours(group: &str, kind: &str, plural: &str) -> ApiResource {
    resource(group, "v1alpha1", kind, plural)
}

fn backup_jobs(h: &Harness) -> Api<DynamicObject> {
    ns_api(h, &ours(GROUP, "BackupJob", "backupjobs"), TENANT)
}

fn backups(h: &Harness) -> Api<DynamicObject> {
    ns_api(h, &ours(GROUP, "Backup", "backups"), TENANT)
}

fn restore_jobs(h: &Harness) -> Api<DynamicObject> {
    ns_api(h, &ours(GROUP, "RestoreJob", "restorejobs"), TENANT)
}

fn plans(h: &Harness) -> Api<DynamicObject> {
    ns_api(h, &ours(GROUP, "Plan", "plans"), TENANT)
}

fn apps(h: &Harness) -> Api<DynamicObject> {
    ns_api(
        h,
        &resource("apps.cozystack.io", "v1alpha1", "Postgres", "postgreses"),
        TENANT,
    )
}

fn clusters(h: &Harness) -> Api<DynamicObject> {
    ns_api(
        h,
        &resource("postgresql.cnpg.io", "v1", "Cluster", "clusters"),
        TENANT,
    )
}

fn cnpg_backups(h: &Harness) -> Api<DynamicObject> {
    ns_api(
        h,
        &resource("postgresql.cnpg.io", "v1", "Backup", "backups"),
        TENANT,
    )
}

fn helm_releases(h: &Harness) -> Api<DynamicObject> {
    ns_api(
        h,
        &resource(
            "helm.toolkit.fluxcd.io",
            "v2",
            "HelmRelease",
            "helmreleases",
        ),
        TENANT,
    )
}

fn pvcs(h: &Harness) -> Api<DynamicObject> {
    ns_api(
        h,
        &resource("", "v1", "PersistentVolumeClaim", "persistentvolumeclaims"),
        TENANT,
    )
}

fn secrets(h: &Harness, ns: &str) -> Api<DynamicObject> {
    ns_api(h, &resource("", "v1", "Secret", "secrets"), ns)
}

fn to_object(v: Value) -> DynamicObject {
    serde_json::from_value(v).expect("an object")
}

fn as_value(o: &DynamicObject) -> Value {
    serde_json::to_value(o).expect("serialisable")
}

/// Creates `body` as the client named `manager` would (its field manager).
async fn create_as(api: &Api<DynamicObject>, manager: &str, body: Value) -> DynamicObject {
    let pp = PostParams {
        field_manager: Some(manager.to_owned()),
        ..PostParams::default()
    };
    api.create(&pp, &to_object(body.clone()))
        .await
        .unwrap_or_else(|e| panic!("create {body}: {e}"))
}

async fn patch_status(api: &Api<DynamicObject>, name: &str, manager: &str, status: Value) {
    api.patch_status(
        name,
        &PatchParams {
            field_manager: Some(manager.to_owned()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("status of {name}: {e}"));
}

/// Removes every finalizer of `name`, then deletes it and waits until it is gone.
async fn remove(api: &Api<DynamicObject>, name: &str) {
    let _ = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await;
    let _ = api.delete(name, &DeleteParams::default()).await;
    eventually_within(&format!("{name} gone"), READY, || {
        let api = api.clone();
        async move { api.get_opt(name).await.ok()?.is_none().then_some(()) }
    })
    .await;
}

/// RFC 3339 UTC, whole seconds, `offset` seconds from now (PostgreSQL's clock, the machine's).
fn at(uri: &str, offset: i64) -> String {
    psql(
        uri,
        &format!(
            "SELECT to_char((now() + interval '{offset} seconds') AT TIME ZONE 'UTC', \
             'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')"
        ),
    )
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// Successful writes by this project's daemons to `resource` `ns/name` (any subresource).
fn our_writes<'a>(
    audit: &'a [Request],
    resource: &str,
    ns: Option<&str>,
    name: &str,
) -> Vec<&'a Request> {
    audit
        .iter()
        .filter(|r| {
            r.is_write()
                && r.succeeded()
                && !r.is_dry_run()
                && r.resource == resource
                && r.namespace.as_deref() == ns
                && r.name.as_deref() == Some(name)
                && OURS.iter().any(|d| r.user_agent.starts_with(d))
        })
        .collect()
}

fn describe(reqs: &[&Request]) -> Vec<String> {
    reqs.iter()
        .map(|r| {
            format!(
                "{} {}/{} {:?} by {}",
                r.verb,
                r.resource,
                r.subresource.as_deref().unwrap_or(""),
                r.name,
                r.user_agent
            )
        })
        .collect()
}

async fn wait_job(h: &Harness, name: &str) -> Value {
    let api = backup_jobs(h);
    eventually_within(
        &format!("BackupJob {name} finished"),
        DATAPLANE_DEADLINE,
        || {
            let api = api.clone();
            async move {
                let j = as_value(&api.get(name).await.ok()?);
                j["status"]["completedAt"].as_str()?;
                Some(j)
            }
        },
    )
    .await
}

async fn healthy(h: &Harness, app: &str) -> String {
    h.healthy_cluster_uri(TENANT, &format!("postgres-{app}"))
        .await
}

async fn app(h: &Harness, name: &str) {
    harness::dataplane::apply(
        &apps(h),
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres",
               "metadata": {"name": name, "namespace": TENANT},
               "spec": {"size": "1Gi", "replicas": 1}}),
    )
    .await;
}

/// The slot of the hourly Plan: the first whole minute after its creation, so that upstream's
/// controller has fired it (and written its BackupJob) before the takeover, within upstream's
/// 300 s starting deadline.
fn hourly_slot(created: u64) -> u64 {
    (created / 60 + 1) * 60
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemons_take_over_upstreams_objects_without_rewriting_them() {
    let started = std::time::Instant::now();
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

    // The Plans first, so that both are older than the hourly one's slot (the first whole minute
    // after their creation). While this project's daemons build the bucket's contents both carry
    // the daily schedule, so that nothing fires; the hourly one gets its schedule once they are
    // stopped, and both lose the status they wrote (upstream writes none).
    let slot = hourly_slot(unix_now() + 2);
    let minute = slot / 60;
    let plan_spec = |cron: String| {
        json!({"applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "Postgres", "name": "orders-db"},
               "backupClassName": "cozy-default",
               "schedule": {"type": "cron", "cron": cron}})
    };
    let quiet_cron = format!("15 {} * * *", (slot / 3600 + 12) % 24);
    let plan = create_as(
        &plans(&h),
        "kubectl-client-side-apply",
        json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Plan",
               "metadata": {"name": PLAN, "namespace": TENANT},
               "spec": plan_spec(quiet_cron.clone())}),
    )
    .await;
    // Daily, half a day away from the hourly slot: nothing is due during the test.
    create_as(
        &plans(&h),
        "kubectl-client-side-apply",
        json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Plan",
               "metadata": {"name": QUIET_PLAN, "namespace": TENANT},
               "spec": plan_spec(quiet_cron)}),
    )
    .await;

    // ---- Upstream's era. The bucket's contents come from this project's daemons (stopped below).
    let projector_args = [
        "--source-namespace=tenant-root".to_owned(),
        "--source-name=bucket-cozy-backups-system-credentials".to_owned(),
        format!("--endpoint={}", dp.http),
        "--region=us-east-1".to_owned(),
        "--force-path-style=true".to_owned(),
        "--system-namespaces=cozy-velero".to_owned(),
    ];
    let renderer = || {
        DaemonSpec::new("strategy-renderer", bin("strategy-renderer"))
            .args([format!("--endpoint={}", dp.http)])
    };
    let projector = || {
        DaemonSpec::new("credentials-projector", bin("credentials-projector"))
            .args(projector_args.clone())
    };
    let runner = || DaemonSpec::new("backup-runner", bin("backup-runner"));
    h.spawn_ready(renderer(), READY).await.unwrap();
    h.spawn_ready(projector(), READY).await.unwrap();
    h.spawn_ready(runner(), READY).await.unwrap();
    app(&h, "orders-db").await;
    app(&h, "orders-db-copy").await;
    app(&h, "orders-db-copy2").await;
    let uri = healthy(&h, "orders-db").await;
    psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    psql(&uri, "INSERT INTO orders VALUES (1, 'tea'), (2, 'cups')");
    let seed = |name: &str| {
        to_object(
            json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
            "metadata": {"name": name, "namespace": TENANT},
            "spec": {"applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "Postgres", "name": "orders-db"},
                     "backupClassName": "cozy-default"}}),
        )
    };
    backup_jobs(&h)
        .create(&PostParams::default(), &seed("seed-base"))
        .await
        .unwrap();
    assert_eq!(
        wait_job(&h, "seed-base").await["status"]["phase"],
        "Succeeded"
    );
    psql(&uri, "INSERT INTO orders VALUES (3, 'marker')");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let recovery_time = at(&uri, 0);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    psql(&uri, "INSERT INTO orders VALUES (4, 'after')");
    backup_jobs(&h)
        .create(&PostParams::default(), &seed("seed"))
        .await
        .unwrap();
    assert_eq!(wait_job(&h, "seed").await["status"]["phase"], "Succeeded");
    healthy(&h, "orders-db-copy").await;
    healthy(&h, "orders-db-copy2").await;
    for name in [
        "backup-runner",
        "credentials-projector",
        "strategy-renderer",
    ] {
        h.terminate(name, Duration::from_secs(20)).await.unwrap();
    }
    for name in [PLAN, QUIET_PLAN] {
        plans(&h)
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": null})),
            )
            .await
            .unwrap();
        let p = as_value(&plans(&h).get(name).await.unwrap());
        assert!(
            p["status"]
                .as_object()
                .is_none_or(serde_json::Map::is_empty),
            "{p}"
        );
    }
    plans(&h)
        .patch(
            PLAN,
            &PatchParams {
                field_manager: Some("kubectl-client-side-apply".to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(
                json!({"spec": {"schedule": {"cron": format!("{} * * * *", minute % 60)}}}),
            ),
        )
        .await
        .unwrap();

    // Upstream's chart rendered the BackupClass and the strategies: the same specs, Helm's
    // labels and annotations, Helm as their only field manager.
    let helm_meta = |mut o: Value| {
        let meta = o["metadata"].as_object_mut().unwrap();
        for k in [
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "generation",
            "managedFields",
        ] {
            meta.remove(k);
        }
        meta.insert(
            "labels".to_owned(),
            json!({"app.kubernetes.io/managed-by": "Helm"}),
        );
        meta.insert(
            "annotations".to_owned(),
            json!({"meta.helm.sh/release-name": "backupstrategy-controller",
                   "meta.helm.sh/release-namespace": "cozy-backup-controller"}),
        );
        o.as_object_mut().unwrap().remove("status");
        o
    };
    let mut rendered: Vec<(ApiResource, String)> = Vec::new();
    let class_r = ours(GROUP, "BackupClass", "backupclasses");
    rendered.push((class_r, "cozy-default".to_owned()));
    for (kind, plural) in STRATEGY_PLURALS {
        let r = ours(STRATEGY_GROUP, kind, plural);
        let all: Api<DynamicObject> = Api::all_with(h.client(), &r);
        for o in all.list(&ListParams::default()).await.unwrap() {
            if o.metadata
                .name
                .as_deref()
                .unwrap_or("")
                .starts_with("cozy-default")
            {
                rendered.push((r.clone(), o.metadata.name.clone().unwrap()));
            }
        }
    }
    assert!(
        rendered.len() >= 9,
        "the class and the strategies: {:?}",
        rendered.iter().map(|r| &r.1).collect::<Vec<_>>()
    );
    let mut upstream_specs = BTreeMap::new();
    for (r, name) in &rendered {
        let api: Api<DynamicObject> = Api::all_with(h.client(), r);
        let body = helm_meta(as_value(&api.get(name).await.unwrap()));
        remove(&api, name).await;
        let created = create_as(&api, "helm", body).await;
        upstream_specs.insert(name.clone(), as_value(&created));
    }

    // The projected Secrets, as upstream's projector writes them: the ten keys, upstream's one
    // label, no annotations.
    let mut upstream_secrets = BTreeMap::new();
    for ns in [TENANT, "cozy-velero"] {
        let api = secrets(&h, ns);
        let mine = as_value(&api.get("cozy-backups-creds").await.unwrap());
        remove(&api, "cozy-backups-creds").await;
        let created = create_as(
            &api,
            "backup-controller",
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": "cozy-backups-creds", "namespace": ns,
                                "labels": {"apps.cozystack.io/managed-by": "cozystack-backups"}},
                   "data": mine["data"]}),
        )
        .await;
        upstream_secrets.insert(ns, as_value(&created));
    }

    // The Plan's slot has passed: upstream created its BackupJob (owned by the Plan) and the
    // backup succeeded, with upstream's Backup (finalizer, no labels, no catalog annotation).
    while unix_now() <= slot {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let ours_backup = as_value(&backups(&h).get("seed").await.unwrap());
    let plan_job = format!("{PLAN}-{minute}");
    let job_spec = json!({"applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "Postgres", "name": "orders-db"},
                          "backupClassName": "cozy-default"});
    let mut plan_job_spec = job_spec.clone();
    plan_job_spec["planRef"] = json!({"name": PLAN});
    create_as(
        &backup_jobs(&h),
        "backup-controller",
        json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
               "metadata": {"name": plan_job, "namespace": TENANT,
                            "ownerReferences": [{"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Plan",
                                                 "name": PLAN, "uid": plan.metadata.uid.clone().unwrap(),
                                                 "controller": true, "blockOwnerDeletion": true}]},
               "spec": plan_job_spec}),
    )
    .await;
    let mut backup_spec = ours_backup["spec"].clone();
    backup_spec["planRef"] = json!({"name": PLAN});
    create_as(
        &backups(&h),
        "backup-controller",
        json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
               "metadata": {"name": plan_job, "namespace": TENANT,
                            "finalizers": ["backups.cozystack.io/cleanup"]},
               "spec": backup_spec,
               "status": ours_backup["status"]}),
    )
    .await;
    patch_status(
        &backup_jobs(&h),
        &plan_job,
        "backup-controller",
        json!({"phase": "Succeeded", "startedAt": at(&uri, -20), "completedAt": at(&uri, -5),
               "backupRef": {"name": plan_job},
               "conditions": [{"type": "Ready", "status": "True", "reason": "BackupCompleted",
                               "message": "cnpg.io Backup completed", "lastTransitionTime": at(&uri, -5)}]}),
    )
    .await;
    // This project's own objects of that era go (the cnpg Backups and the data stay).
    for name in ["seed", "seed-base"] {
        remove(&backups(&h), name).await;
        remove(&backup_jobs(&h), name).await;
    }

    // A Failed BackupJob, two hours old (inside the failed-backup TTL).
    create_as(
        &backup_jobs(&h),
        "backup-controller",
        json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
               "metadata": {"name": "orders-db-failed", "namespace": TENANT}, "spec": job_spec}),
    )
    .await;
    let failure =
        "failed to ensure cnpg.io/Backup: the server is currently unable to handle the request";
    patch_status(
        &backup_jobs(&h),
        "orders-db-failed",
        "backup-controller",
        json!({"phase": "Failed", "startedAt": at(&uri, -7300), "completedAt": at(&uri, -7200),
               "message": failure,
               "conditions": [{"type": "Ready", "status": "False", "reason": "BackupFailed",
                               "message": failure, "lastTransitionTime": at(&uri, -7200)}]}),
    )
    .await;
    // A Pending one (upstream never saw it) and a Running one with its live cnpg Backup.
    for name in [
        "orders-db-pending",
        "orders-db-stamped",
        "orders-db-running",
    ] {
        create_as(
            &backup_jobs(&h),
            "kubectl-create",
            json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
                   "metadata": {"name": name, "namespace": TENANT}, "spec": job_spec}),
        )
        .await;
    }
    // Upstream's first pass over a CNPG BackupJob stamps only `startedAt` (the phase stays empty).
    let stamped_started = json!(at(&uri, -4));
    patch_status(
        &backup_jobs(&h),
        "orders-db-stamped",
        "backup-controller",
        json!({"startedAt": stamped_started}),
    )
    .await;
    patch_status(
        &backup_jobs(&h),
        "orders-db-running",
        "backup-controller",
        json!({"phase": "Running", "startedAt": at(&uri, -3)}),
    )
    .await;
    let live = create_as(
        &cnpg_backups(&h),
        "backup-controller",
        json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Backup",
               "metadata": {"generateName": "orders-db-running-", "namespace": TENANT,
                            "labels": {"backups.cozystack.io/owned-by.BackupJobName": "orders-db-running",
                                       "backups.cozystack.io/owned-by.BackupJobNamespace": TENANT,
                                       "cnpg.io/cluster": "postgres-orders-db"}},
               "spec": {"method": "plugin", "cluster": {"name": "postgres-orders-db"},
                        "pluginConfiguration": {"name": "barman-cloud.cloudnative-pg.io"}}}),
    )
    .await;
    let live_name = live.metadata.name.clone().unwrap();

    // Two RestoreJobs of the Plan's Backup, each stopped by upstream mid-PITR. Into
    // orders-db-copy: started, the HelmRelease suspended, the application patched, the Cluster
    // and its PVCs deleted and gone; upstream had not yet resumed the HelmRelease nor recorded
    // TargetPurged (nor WALArchiveReady, which it keeps in memory until its next status write).
    // Into orders-db-copy2: one step further, the HelmRelease resumed and the recovery Cluster
    // re-rendered, TargetPurged still not recorded (upstream resumes first, then records).
    let dm = ours_backup["spec"]["driverMetadata"].clone();
    let upstream_restore_started = upstream_purge(
        &h,
        &uri,
        "orders-db-pitr",
        "orders-db-copy",
        &plan_job,
        &recovery_time,
        &dm,
    )
    .await;
    let upstream_restore_started_2 = upstream_purge(
        &h,
        &uri,
        "orders-db-pitr-2",
        "orders-db-copy2",
        &plan_job,
        &recovery_time,
        &dm,
    )
    .await;
    helm_releases(&h)
        .patch(
            "postgres-orders-db-copy2",
            &PatchParams {
                field_manager: Some("backup-controller".to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {"suspend": false}})),
        )
        .await
        .unwrap();
    let rerendered = eventually_within("the copy2's recovery Cluster re-rendered", READY, || {
        let api = clusters(&h);
        async move {
            let c = as_value(&api.get_opt("postgres-orders-db-copy2").await.ok()??);
            c["spec"]["bootstrap"]["recovery"]
                .is_object()
                .then(|| c["metadata"]["uid"].clone())
        }
    })
    .await;
    // The running backup completes while nobody watches its BackupJob.
    eventually_within("the live cnpg Backup completed", DATAPLANE_DEADLINE, || {
        let api = cnpg_backups(&h);
        let name = live_name.clone();
        async move {
            let b = as_value(&api.get(&name).await.ok()?);
            (b["status"]["phase"] == "completed").then_some(())
        }
    })
    .await;
    let upstream_backup = as_value(&backups(&h).get(&plan_job).await.unwrap());
    let terminal_jobs: BTreeMap<String, Value> = [plan_job.clone(), "orders-db-failed".to_owned()]
        .into_iter()
        .map(|n| (n, Value::Null))
        .collect();
    let mut terminal_jobs = terminal_jobs;
    for (name, v) in &mut terminal_jobs {
        *v = as_value(&backup_jobs(&h).get(name).await.unwrap());
    }
    let built = started.elapsed();

    // ---- The takeover.
    let from = h.audit().requests.len();
    let taken_over = std::time::Instant::now();
    h.spawn_ready(renderer(), READY).await.unwrap();
    h.spawn_ready(projector(), READY).await.unwrap();
    // As shipped: with the catalog (a record per Backup in the system bucket), its sync every
    // second (it would re-create a Backup that is missing but has a record).
    h.spawn_ready(
        runner().args([
            "--catalog=true".to_owned(),
            format!("--catalog-ca-file={}", dp.ca_file.display()),
            "--catalog-sync-interval=1s".to_owned(),
        ]),
        READY,
    )
    .await
    .unwrap();
    h.spawn_ready(
        DaemonSpec::new("restore-orchestrator", bin("restore-orchestrator")),
        READY,
    )
    .await
    .unwrap();
    h.spawn_ready(
        DaemonSpec::new("retention-cleaner", bin("retention-cleaner"))
            .args(["--debounce=200ms", "--lease-endpoint=none"]),
        READY,
    )
    .await
    .unwrap();

    // The running BackupJob finishes from upstream's cnpg Backup; the pending one runs.
    let running = wait_job(&h, "orders-db-running").await;
    assert_eq!(running["status"]["phase"], "Succeeded", "{running}");
    let stamped = wait_job(&h, "orders-db-stamped").await;
    assert_eq!(stamped["status"]["phase"], "Succeeded", "{stamped}");
    assert_eq!(
        stamped["status"]["startedAt"], stamped_started,
        "upstream's startedAt is kept"
    );
    let pending = wait_job(&h, "orders-db-pending").await;
    assert_eq!(pending["status"]["phase"], "Succeeded", "{pending}");
    let running_backup = as_value(&backups(&h).get("orders-db-running").await.unwrap());
    assert_eq!(
        running_backup["spec"]["driverMetadata"]["cnpg.io/backup-name"], live_name,
        "upstream's cnpg Backup is the one recorded"
    );

    // Both RestoreJobs resume: each recovery Cluster comes up with exactly the rows before the
    // mark; the one upstream had re-rendered is the same Cluster (never deleted again).
    for (job, target, started) in [
        (
            "orders-db-pitr",
            "orders-db-copy",
            &upstream_restore_started,
        ),
        (
            "orders-db-pitr-2",
            "orders-db-copy2",
            &upstream_restore_started_2,
        ),
    ] {
        let restore = eventually_within(
            &format!("RestoreJob {job} finished"),
            DATAPLANE_DEADLINE,
            || {
                let api = restore_jobs(&h);
                async move {
                    let j = as_value(&api.get(job).await.ok()?);
                    matches!(j["status"]["phase"].as_str(), Some("Succeeded" | "Failed"))
                        .then_some(j)
                }
            },
        )
        .await;
        assert_eq!(restore["status"]["phase"], "Succeeded", "{restore}");
        let condition = |t: &str| {
            restore["status"]["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == t))
                .map(|c| (c["status"].clone(), c["reason"].clone()))
        };
        assert_eq!(
            condition("TargetPurged"),
            Some((json!("True"), json!("ClusterPurged"))),
            "{job}"
        );
        assert_eq!(
            condition("RecoveryConverged"),
            Some((json!("True"), json!("RecoveryConverged"))),
            "{job}"
        );
        assert_eq!(
            &restore["status"]["startedAt"], started,
            "{job}: upstream's startedAt is kept"
        );
        let copy_uri = healthy(&h, target).await;
        assert_eq!(
            psql(
                &copy_uri,
                "SELECT string_agg(item, ',' ORDER BY id) FROM orders"
            ),
            "tea,cups,marker",
            "{job}"
        );
        let hr = as_value(
            &helm_releases(&h)
                .get(&format!("postgres-{target}"))
                .await
                .unwrap(),
        );
        assert_ne!(
            hr["spec"]["suspend"],
            json!(true),
            "{job}: the HelmRelease resumed"
        );
    }
    let cluster_2 = as_value(&clusters(&h).get("postgres-orders-db-copy2").await.unwrap());
    assert_eq!(
        cluster_2["metadata"]["uid"], rerendered,
        "the Cluster upstream's chart re-rendered is kept"
    );

    // The Plans keep their slots: the hourly one's BackupJob is upstream's, the daily one has none.
    let plan_status = eventually_within("the Plan's status", READY, || {
        let api = plans(&h);
        async move {
            let p = as_value(&api.get(PLAN).await.ok()?);
            p["status"]["nextScheduleTime"].as_str()?;
            Some(p["status"].clone())
        }
    })
    .await;
    let after_jobs = backup_jobs(&h).list(&ListParams::default()).await.unwrap();
    let of_plan = |plan: &str| {
        after_jobs
            .items
            .iter()
            .filter(|j| as_value(j)["spec"]["planRef"]["name"] == plan)
            .map(|j| j.metadata.name.clone().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(of_plan(PLAN), vec![plan_job.clone()]);
    assert_eq!(of_plan(QUIET_PLAN), Vec::<String>::new());

    // Retention has swept (at start and after each change, debounced) and deleted nothing: it saw
    // upstream's Failed BackupJob, two hours old, and kept it (the TTL is 24 h).
    let admin = h
        .daemon("retention-cleaner")
        .unwrap()
        .admin()
        .await
        .unwrap();
    let age = eventually_within("a sweep saw the failed job", READY, || {
        let admin = admin.clone();
        async move {
            let age = admin.metrics().get(
                "cozy_backups_retention_cleaner_oldest_failed_backup_age_seconds",
                &[],
            )?;
            (age > 7000.0).then_some(age)
        }
    })
    .await;
    assert!(age < 8000.0, "{age}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut present: Vec<String> = backups(&h)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|b| b.metadata.name)
        .collect();
    present.sort();
    let mut expected = vec![
        plan_job.clone(),
        "orders-db-pending".to_owned(),
        "orders-db-stamped".to_owned(),
        "orders-db-running".to_owned(),
    ];
    expected.sort();
    assert_eq!(present, expected, "no Backup deleted, none re-created");
    let audit: Audit = h.audit();
    let log = &audit.requests[from..];
    let deletes: Vec<_> = log
        .iter()
        .filter(|r| {
            r.verb == "delete" && r.succeeded() && OURS.iter().any(|d| r.user_agent.starts_with(d))
        })
        .collect();
    // No second purge: nothing of the copy (nor anything else) deleted by the daemons.
    assert!(deletes.is_empty(), "deletes: {:?}", describe(&deletes));
    let extra_creates: Vec<_> = log
        .iter()
        .filter(|r| {
            r.verb == "create"
                && r.succeeded()
                && r.group == GROUP
                && r.resource == "backupjobs"
                && OURS.iter().any(|d| r.user_agent.starts_with(d))
        })
        .collect();
    assert!(
        extra_creates.is_empty(),
        "BackupJobs created: {:?}",
        describe(&extra_creates)
    );
    let cnpg_creates = log
        .iter()
        .filter(|r| {
            r.verb == "create"
                && r.succeeded()
                && r.group == "postgresql.cnpg.io"
                && r.resource == "backups"
                && r.user_agent.starts_with("backup-runner/")
        })
        .count();
    assert_eq!(
        cnpg_creates, 2,
        "one cnpg Backup each for the pending and the stamped BackupJob"
    );

    // The chart's objects: one adoption write each and nothing more. The renderer labels what
    // it owns `app.kubernetes.io/managed-by: strategy-renderer` (only objects with that label are
    // ever pruned), so its one apply moves that label from Helm to itself; the specs and Helm's
    // annotations stay, and the BackupClass gets its status (upstream writes none).
    for (r, name) in &rendered {
        let w = our_writes(log, &r.plural, None, name);
        let mut expected = vec![format!(
            "patch {}/ Some({name:?}) by strategy-renderer/",
            r.plural
        )];
        if r.plural == "backupclasses" {
            expected.push(format!(
                "patch {}/status Some({name:?}) by strategy-renderer/",
                r.plural
            ));
        }
        let got: Vec<String> = describe(&w)
            .into_iter()
            .map(|d| {
                d.rsplit_once('/')
                    .map(|(a, _)| format!("{a}/"))
                    .unwrap_or(d)
            })
            .collect();
        assert_eq!(got, expected, "{}/{name}", r.plural);
        let api: Api<DynamicObject> = Api::all_with(h.client(), r);
        let now = as_value(&api.get(name).await.unwrap());
        let before = &upstream_specs[name];
        assert_eq!(now["spec"], before["spec"], "{name}");
        assert_eq!(
            now["metadata"]["annotations"], before["metadata"]["annotations"],
            "{name}"
        );
        assert_eq!(
            now["metadata"]["labels"],
            json!({"app.kubernetes.io/managed-by": "strategy-renderer"}),
            "{name}"
        );
    }
    for (ns, before) in &upstream_secrets {
        let w = our_writes(log, "secrets", Some(ns), "cozy-backups-creds");
        assert!(w.is_empty(), "{ns}: {:?}", describe(&w));
        let now = as_value(&secrets(&h, ns).get("cozy-backups-creds").await.unwrap());
        assert_eq!(now["data"], before["data"], "{ns}");
        assert_eq!(
            now["metadata"]["resourceVersion"],
            before["metadata"]["resourceVersion"]
        );
    }
    for (name, before) in &terminal_jobs {
        let w = our_writes(log, "backupjobs", Some(TENANT), name);
        assert!(w.is_empty(), "{name}: {:?}", describe(&w));
        let now = as_value(&backup_jobs(&h).get(name).await.unwrap());
        assert_eq!(now["status"], before["status"], "{name}");
    }
    // Upstream's Backup: its spec, status and finalizer stay; the only write is the catalog
    // record's annotation (docs/disaster-recovery.md), one merge patch.
    let w = our_writes(log, "backups", Some(TENANT), &plan_job);
    let got: Vec<String> = describe(&w)
        .into_iter()
        .map(|d| {
            d.rsplit_once('/')
                .map(|(a, _)| format!("{a}/"))
                .unwrap_or(d)
        })
        .collect();
    assert_eq!(
        got,
        vec![format!(
            "patch backups/ Some({plan_job:?}) by backup-runner/"
        )]
    );
    let now = as_value(&backups(&h).get(&plan_job).await.unwrap());
    assert_eq!(now["spec"], upstream_backup["spec"]);
    assert_eq!(now["status"], upstream_backup["status"]);
    assert_eq!(
        now["metadata"]["finalizers"],
        upstream_backup["metadata"]["finalizers"]
    );
    assert!(
        now["metadata"]["annotations"]["backups.cozystack.io/catalog-record"].is_string(),
        "{}",
        now["metadata"]
    );
    let mut annotations = now["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    annotations.remove("backups.cozystack.io/catalog-record");
    assert!(annotations.is_empty(), "{annotations:?}");
    assert!(now["metadata"]["labels"].is_null(), "{}", now["metadata"]);
    // The Plan: its status written once it is known (upstream writes none), with the slot
    // upstream ran and the next one.
    let slot_time = |s: &str| s.to_owned();
    assert_eq!(
        plan_status["lastScheduleTime"].as_str().map(slot_time),
        Some(rfc3339(slot))
    );
    assert_eq!(
        plan_status["nextScheduleTime"].as_str().map(slot_time),
        Some(rfc3339(slot + 3600))
    );

    for name in [PLAN, QUIET_PLAN] {
        let w = our_writes(log, "plans", Some(TENANT), name);
        assert_eq!(w.len(), 1, "{name}: {:?}", describe(&w));
        assert_eq!(w[0].subresource.as_deref(), Some("status"), "{name}");
    }
    // The RestoreJob's writes, for the record: no app patch (upstream's patch is the same), no
    // suspend; one resume.
    for target in ["orders-db-copy", "orders-db-copy2"] {
        let app_patches = our_writes(log, "postgreses", Some(TENANT), target);
        assert!(app_patches.is_empty(), "{:?}", describe(&app_patches));
    }
    let hr_writes = our_writes(
        log,
        "helmreleases",
        Some(TENANT),
        "postgres-orders-db-copy2",
    );
    assert!(
        hr_writes.is_empty(),
        "resumed by upstream already: {:?}",
        describe(&hr_writes)
    );
    let hr_writes = our_writes(log, "helmreleases", Some(TENANT), "postgres-orders-db-copy");
    assert_eq!(
        hr_writes.len(),
        1,
        "the resume only: {:?}",
        describe(&hr_writes)
    );

    let mut writes_by: BTreeMap<String, usize> = BTreeMap::new();
    for r in log.iter().filter(|r| r.is_write() && r.succeeded()) {
        if let Some(d) = OURS.iter().find(|d| r.user_agent.starts_with(*d)) {
            *writes_by
                .entry(format!(
                    "{d}{} {}{}",
                    r.verb,
                    r.resource,
                    r.subresource
                        .as_deref()
                        .map(|s| format!("/{s}"))
                        .unwrap_or_default()
                ))
                .or_insert(0) += 1;
        }
    }
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "takeover: state built in {:.1} s, taken over in {:.1} s; the daemons' writes: {writes_by:#?}",
        built.as_secs_f64(),
        taken_over.elapsed().as_secs_f64()
    );
    h.cleanup().await.unwrap();
}

/// Upstream's CNPG restore up to its purge (steps 1 to 12 of its driver): RestoreJob `job` of
/// Backup `backup` into `target` with its finalizer, `startedAt` three seconds ago and phase
/// `Running`; the HelmRelease suspended; the application patched as upstream's driver patches it;
/// the Cluster and its PVCs deleted and gone. Returns the `startedAt` written.
async fn upstream_purge(
    h: &Harness,
    uri: &str,
    job: &str,
    target: &str,
    backup: &str,
    recovery_time: &str,
    dm: &Value,
) -> Value {
    let cluster = format!("postgres-{target}");
    let server = dm["cnpg.io/server-name"].as_str().unwrap().to_owned();
    create_as(
        &restore_jobs(h),
        "kubectl-create",
        json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
               "metadata": {"name": job, "namespace": TENANT},
               "spec": {"backupRef": {"name": backup},
                        "targetApplicationRef": {"apiGroup": "apps.cozystack.io", "kind": "Postgres",
                                                 "name": target},
                        "options": {"recoveryTime": recovery_time}}}),
    )
    .await;
    let upstream_restore_started = json!(at(uri, -3));
    restore_jobs(h)
        .patch(
            job,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["backups.cozystack.io/cleanup"]}})),
        )
        .await
        .unwrap();
    patch_status(
        &restore_jobs(h),
        job,
        "backup-controller",
        json!({"phase": "Running", "startedAt": upstream_restore_started}),
    )
    .await;
    helm_releases(h)
        .patch(
            &cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"suspend": true}})),
        )
        .await
        .unwrap();
    apps(h)
        .patch(
            target,
            &PatchParams {
                field_manager: Some("cozystack-cnpg-backup-driver".to_owned()),
                ..PatchParams::default()
            },
            &Patch::Merge(json!({"spec": {
                "bootstrap": {"enabled": true, "oldName": server, "serverName": server,
                              "recoveryTime": recovery_time},
                "backup": {"destinationPath": dm["cnpg.io/destination-path"],
                           "endpointURL": dm["cnpg.io/endpoint-url"],
                           "s3AccessKey": null, "s3SecretKey": null, "endpointCA": null,
                           "s3CredentialsSecret": {"name": "cozy-backups-creds",
                                                   "accessKeyIDKey": "AWS_ACCESS_KEY_ID",
                                                   "secretAccessKeyKey": "AWS_SECRET_ACCESS_KEY"}}}})),
        )
        .await
        .unwrap();
    clusters(h)
        .delete(&cluster, &DeleteParams::default())
        .await
        .unwrap();
    let by_cluster = ListParams::default().labels(&format!("cnpg.io/cluster={cluster}"));
    pvcs(h)
        .delete_collection(&DeleteParams::default(), &by_cluster)
        .await
        .unwrap();
    eventually_within(&format!("{cluster} and its PVCs gone"), READY, || {
        let (c, p, l, n) = (clusters(h), pvcs(h), by_cluster.clone(), cluster.clone());
        async move {
            (c.get_opt(&n).await.ok()?.is_none() && p.list(&l).await.ok()?.items.is_empty())
                .then_some(())
        }
    })
    .await;
    upstream_restore_started
}

/// `secs` since the epoch as RFC 3339 UTC (whole seconds), civil-from-days.
fn rfc3339(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).unwrap();
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
