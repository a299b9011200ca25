//! End to end, the orchestrator's storage breaker over the real data plane (MariaDB: a real
//! `mariadbd`, dumps in the project's S3 server), through the real renderer, projector, runner and
//! orchestrator. With the S3 server answering 503 to everything:
//!
//! - a restore whose operator Restore fails reading the dump waits `StorageUnavailable` (phase
//!   `Running`, the endpoint and S3's answer in the message) instead of failing;
//! - an in-place restore created meanwhile waits before it creates anything: its target keeps
//!   every row;
//! - a restore whose `restoreTimeoutSeconds` passes while it waits fails with a message that says
//!   storage was down;
//! - the orchestrator killed with `-9` comes back with both jobs still waiting, and probes again;
//!
//! and when S3 answers again, both restores finish (the failed operator Restore replaced by a new
//! one) with the backed-up rows, one at a time (`--storage-recovery-concurrency=1`).

use std::time::Duration;

use api::backups::RestoreJob;
use api::thirdparty::mariadb;
use harness::dataplane::DataPlane;
use harness::eventually_within;
use kube::api::ListParams;
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::dataplane::phase;
use crate::mariadb_dataplane::{mariadb_app, rows, start_with};
use crate::support::{self, ready};

const TENANT: &str = "tenant-acme";
/// How long a step of the scenario may take (a probe step is at most 60 s; a restore replays a
/// dump with a real server).
const STEP: Duration = Duration::from_secs(180);
const AVAILABLE: &str = "cozy_backups_restore_orchestrator_storage_available";
const PROBES: &str = "cozy_backups_restore_orchestrator_storage_probes_total";
const READY: Duration = Duration::from_secs(60);

/// The MariaDB data plane (the orchestrator trusting its CA), the breaker opened by one storage
/// failure and resuming one job at a time.
async fn start() -> (support::Platform, DataPlane) {
    start_with(&[
        "--storage-breaker-failures=1",
        "--storage-recovery-concurrency=1",
        "--log-format=json",
    ])
    .await
}

/// Waits until RestoreJob `name` waits for its object store; returns its Ready message.
async fn waiting(p: &support::Platform, name: &str) -> String {
    let api = p.restores(TENANT);
    eventually_within(
        &format!("RestoreJob {name} waits for storage"),
        STEP,
        || {
            let api = api.clone();
            async move {
                let j = api.get_opt(name).await.ok()??;
                assert!(
                    !j.is_terminal(),
                    "{name} ended instead of waiting: {:?}",
                    j.status
                );
                let (reason, message) = ready(&j)?;
                (reason == "StorageUnavailable" && phase(&j) == "Running").then_some(message)
            }
        },
    )
    .await
}

/// Waits until RestoreJob `name` ends (a step's time: a probe step may be a minute away);
/// asserts its phase.
async fn ended(p: &support::Platform, name: &str, expected: &str) -> RestoreJob {
    let api = p.restores(TENANT);
    let j = eventually_within(&format!("RestoreJob {name} ended"), STEP, || {
        let api = api.clone();
        async move { api.get_opt(name).await.ok()?.filter(|j| j.is_terminal()) }
    })
    .await;
    assert_eq!(phase(&j), expected, "{name}: {:?}", j.status);
    j
}

/// The operator Restores RestoreJob `job` created.
async fn restores_of(p: &support::Platform, job: &str) -> Vec<Value> {
    p.restored_by(&ApiResource::erase::<mariadb::Restore>(&()), TENANT, job)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restores_wait_for_storage_fail_past_deadline_survive_kill_and_resume_one_at_a_time() {
    let (mut p, dp) = start().await;
    let shop = mariadb_app(&p, "shop").await;
    let copy = mariadb_app(&p, "shop-copy").await;
    shop.sql(
        "CREATE DATABASE shop; CREATE TABLE shop.orders (id int PRIMARY KEY, item text);
         INSERT INTO shop.orders VALUES (1, 'apples'), (2, 'pears'), (3, 'plums')",
    );
    p.backup(TENANT, "nightly", "MariaDB", "shop", "cozy-default")
        .await;
    shop.sql("INSERT INTO shop.orders VALUES (4, 'later')");

    // S3 answers 503 to everything: the copy's restore fails reading the dump, which opens the
    // breaker; the job waits instead of failing.
    dp.s3_mode("unavailable").await;
    p.restore(
        TENANT,
        "to-copy",
        "nightly",
        Some(("MariaDB", "shop-copy")),
        Value::Null,
    )
    .await;
    let message = waiting(&p, "to-copy").await;
    assert!(
        message.starts_with("object storage at 127.0.0.1:")
            && message.contains("is unavailable (")
            && message.contains("503")
            && message.ends_with(
                "; the restore waits and resumes once the bucket answers again (the orchestrator probes it with backoff)"
            ),
        "{message}"
    );
    let failed = restores_of(&p, "to-copy").await;
    assert_eq!(failed.len(), 1, "{failed:?}");

    // An in-place restore created now waits before it creates anything: the source keeps its rows.
    p.restore(TENANT, "in-place", "nightly", None, Value::Null)
        .await;
    let message = waiting(&p, "in-place").await;
    assert!(message.contains("is unavailable ("), "{message}");
    assert!(restores_of(&p, "in-place").await.is_empty());
    assert_eq!(rows(&shop), "apples,pears,plums,later");

    // One that may take 20 s fails once they pass, saying why.
    p.restore(
        TENANT,
        "short",
        "nightly",
        Some(("MariaDB", "shop-copy")),
        json!({"restoreTimeoutSeconds": 20}),
    )
    .await;
    let (reason, message) = p.failed(TENANT, "short").await;
    assert_eq!(reason, "RestoreFailed");
    assert!(
        message.starts_with("object storage at 127.0.0.1:")
            && message.contains(
                " was unavailable, so the restore could not run within 20s (last storage error: "
            ),
        "{message}"
    );
    assert!(restores_of(&p, "short").await.is_empty());

    // kill -9: the new process finds both jobs waiting (their conditions), opens the breaker from
    // them and probes at once.
    p.h.restart("restore-orchestrator", READY).await.unwrap();
    let admin =
        p.h.daemon("restore-orchestrator")
            .unwrap()
            .admin()
            .await
            .unwrap();
    eventually_within("a failed probe after the restart", STEP, || async {
        let m = admin.metrics();
        (m.sum(PROBES, &[("result", "error")]) >= 1.0 && m.sum(AVAILABLE, &[]) == 0.0).then_some(())
    })
    .await;
    for job in ["to-copy", "in-place"] {
        let j = p.restores(TENANT).get(job).await.unwrap();
        assert_eq!(
            (phase(&j), ready(&j).map(|r| r.0).as_deref()),
            ("Running".to_owned(), Some("StorageUnavailable")),
            "{job}"
        );
    }

    // S3 back: the next probe succeeds, the failed Restore is replaced, both restores finish, one
    // at a time.
    dp.s3_mode("none").await;
    ended(&p, "to-copy", "Succeeded").await;
    ended(&p, "in-place", "Succeeded").await;
    assert_eq!(rows(&copy), "apples,pears,plums");
    assert_eq!(rows(&shop), "apples,pears,plums");
    let replaced = restores_of(&p, "to-copy").await;
    assert_eq!(replaced.len(), 1, "{replaced:?}");
    assert_ne!(
        replaced[0]["metadata"]["uid"], failed[0]["metadata"]["uid"],
        "the Restore that failed for storage was replaced"
    );
    let daemon = p.h.daemon("restore-orchestrator").unwrap();
    let log = daemon.log();
    assert_eq!(
        daemon.json_lines("storage recovered: the operator object that failed while storage was down is deleted; the restore creates a new one"
        )
        .len(),
        1,
        "{log}"
    );
    assert!(
        !daemon
            .json_lines("storage probe succeeded: the object store answers; waiting jobs resume")
            .is_empty()
    );
    // One resume slot: each job resumed while no other held one.
    let resumed: Vec<u64> = daemon
        .json_lines("storage recovered: job resumes")
        .iter()
        .map(|v| v["resumed"].as_u64().unwrap())
        .collect();
    assert_eq!(resumed, [1, 1], "{log}");
    let m = admin.metrics();
    assert_eq!(m.sum(AVAILABLE, &[]), 1.0);

    // The probes used the system credentials; none reached a status, the log or the metrics.
    let system =
        p.h.secret_data("tenant-root", "bucket-cozy-backups-system-credentials")
            .await
            .unwrap();
    let secret = system
        .iter()
        .find(|(k, _)| k.to_ascii_lowercase().contains("secret"))
        .map(|(_, v)| v.clone())
        .unwrap();
    let statuses = format!(
        "{:?}",
        p.restores(TENANT)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    );
    harness::leak::assert_no_leaks(
        &[
            ("orchestrator log", &log),
            ("statuses", &statuses),
            ("metrics", m.text()),
        ],
        &[&secret],
    );
    harness::rbac::assert_allowed(&p.h.audit(), "restore-orchestrator");
    p.h.cleanup().await.unwrap();
}
