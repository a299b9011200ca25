//! The retention-cleaner on the real data plane (real PostgreSQL, barman-cloud, S3): a Plan with
//! `keepLast: 1` over three base backups. The catalog keeps the newest; the backup-runner's
//! finalizer deletes the other two cnpg Backups; the ObjectStore's barman retention is raised to
//! cover the oldest Backup the catalog keeps; and the recoverable window the catalog reports
//! (`cozy-backups-ctl window`, the restore pre-flight's computation) is exactly what
//! `barman-cloud-backup-list` shows in the bucket: it opens where the oldest base backup still in
//! the bucket ended, and it reaches the newest.

// The data plane platform of the restore-orchestrator's tests (emulator, simulated operators over
// real PostgreSQL and barman-cloud, renderer, projector, runner), shared rather than copied.
use crate::dataplane;

use std::time::Duration;

use api::LocalObjectReference;
use api::backups::{Backup, BackupJob, Plan, RetentionPolicy};
use api::contract::annotations;
use chrono::{DateTime, Utc};
use dataplane::{Platform, TENANT, bin};
use harness::dataplane::{DATAPLANE_DEADLINE, psql};
use harness::{Audit, DaemonSpec, eventually_within};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::Value;

const PLAN: &str = "nightly";

/// A BackupJob of `orders-db` for the Plan's slot at `slot`, run to `Succeeded`.
async fn slot_backup(p: &Platform, slot: DateTime<Utc>) -> String {
    let name = schedule::backup_job_name(PLAN, slot);
    let mut job = BackupJob::test(&name)
        .for_app("Postgres", "orders-db")
        .class("cozy-default")
        .build();
    job.spec.plan_ref = Some(LocalObjectReference::new(PLAN));
    p.h.create(TENANT, &job).await;
    let jobs: Api<BackupJob> = Api::namespaced(p.h.client(), TENANT);
    let done = eventually_within(
        &format!("BackupJob {name} done"),
        DATAPLANE_DEADLINE,
        || {
            let jobs = jobs.clone();
            let name = name.clone();
            async move {
                let j = jobs.get(&name).await.ok()?;
                j.status.as_ref()?.completed_at.as_ref()?;
                Some(j)
            }
        },
    )
    .await;
    assert_eq!(
        done.status.unwrap().phase.as_deref(),
        Some("Succeeded"),
        "{name}"
    );
    name
}

fn rfc3339(v: &Value) -> DateTime<Utc> {
    v.as_str().unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_retention_the_catalog_window_is_what_the_bucket_holds() {
    let mut p = Platform::start_with(async |_| Vec::new()).await;
    let uri = p.uri("orders-db").await;
    psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    let now = Utc::now();
    let mut names = Vec::new();
    for (i, hours) in [3i64, 2, 1].into_iter().enumerate() {
        psql(&uri, &format!("INSERT INTO orders VALUES ({i}, 'row {i}')"));
        names.push(slot_backup(&p, now - chrono::Duration::hours(hours)).await);
    }
    let newest = names.last().unwrap().clone();

    let mut plan = Plan::test(PLAN, "0 3 1 1 *")
        .for_app("Postgres", "orders-db")
        .class("cozy-default")
        .build();
    plan.spec.retention_policy = Some(RetentionPolicy {
        keep_last: Some(1),
        ..Default::default()
    });
    p.h.create(TENANT, &plan).await;
    p.h.spawn_ready(
        DaemonSpec::new("retention-cleaner", bin("retention-cleaner"))
            .args(["--max-delete-percent=100", "--debounce=200ms"]),
        Duration::from_secs(60),
    )
    .await
    .unwrap();

    // The catalog keeps the newest; the finalizer removes the two older cnpg Backups.
    let backups: Api<Backup> = Api::namespaced(p.h.client(), TENANT);
    let cnpg_backups = p.h.dynamic::<api::thirdparty::cnpg::Backup>(TENANT);
    eventually_within(
        "the catalog keeps only the newest",
        DATAPLANE_DEADLINE,
        || {
            let (backups, cnpg_backups, newest) =
                (backups.clone(), cnpg_backups.clone(), newest.clone());
            async move {
                let left: Vec<String> = backups
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .into_iter()
                    .filter_map(|b| b.metadata.name)
                    .collect();
                let operator = cnpg_backups
                    .list(&ListParams::default())
                    .await
                    .ok()?
                    .items
                    .len();
                (left == [newest] && operator == 1).then_some(())
            }
        },
    )
    .await;

    // barman's retention covers the oldest Backup the catalog keeps: the floor is recorded and the
    // applied policy is the longer of it and the template's.
    let stores = p.h.dynamic::<api::thirdparty::barman::ObjectStore>(TENANT);
    let store = eventually_within(
        "the ObjectStore's retention floor",
        DATAPLANE_DEADLINE,
        || {
            let stores = stores.clone();
            async move {
                let s = stores.get("postgres-orders-db").await.ok()?;
                s.annotations().get(annotations::RETENTION_FLOOR)?;
                Some(serde_json::to_value(s).unwrap())
            }
        },
    )
    .await;
    let meta = &store["metadata"]["annotations"];
    let floor = meta[annotations::RETENTION_FLOOR].as_str().unwrap();
    assert_eq!(
        floor, "2d",
        "1 day since the newest base backup, rounded up, plus a day of margin"
    );
    assert_eq!(
        store["spec"]["retentionPolicy"].as_str(),
        drivers::cnpg::effective_retention(
            meta[annotations::TEMPLATE_RETENTION_POLICY].as_str(),
            Some(floor)
        )
        .as_deref(),
        "{store}"
    );

    // The window the catalog reports is the bucket's.
    let destination = store["spec"]["configuration"]["destinationPath"]
        .as_str()
        .unwrap()
        .to_owned();
    // The window the tenant's CLI reports, run as the binary it ships as.
    let out = std::process::Command::new(bin("cozy-backups-ctl"))
        .arg("--kubeconfig")
        .arg(p.h.kubeconfig_path())
        .args(["window", "-n", TENANT, "orders-db", "-o", "json"])
        .output()
        .expect("cozy-backups-ctl runs");
    assert!(
        out.status.success(),
        "cozy-backups-ctl window: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let window: Value = serde_json::from_slice(&out.stdout).unwrap();
    let server = window["server"].as_str().unwrap();
    let listed = p.h.barman_list(&p.dp, &destination, server).await["backups_list"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ends: Vec<DateTime<Utc>> = listed
        .iter()
        .filter(|b| b["status"] == "DONE")
        .filter_map(|b| {
            b["end_time"]
                .as_str()
                .and_then(operator_sims::pg::parse_ctime)
        })
        .collect();
    assert_eq!(
        ends.len(),
        3,
        "barman purges nothing inside its window: {listed:?}"
    );
    assert_eq!(
        rfc3339(&window["from"]),
        *ends.iter().min().unwrap(),
        "the window opens where the oldest base backup in the bucket ended: {window}"
    );
    assert!(
        rfc3339(&window["to"]) >= *ends.iter().max().unwrap(),
        "the window reaches the newest base backup: {window}"
    );

    harness::rbac::assert_allowed(&Audit::parse(&p.h.audit_log()), "retention-cleaner");
    p.h.cleanup().await.unwrap();
}
