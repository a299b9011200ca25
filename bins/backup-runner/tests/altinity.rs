//! End to end, the Altinity driver: the real runner, renderer and projector against the emulator
//! with the simulated Job controller. A ClickHouse application backed up through `cozy-default` runs
//! the platform's clickhouse-backup client as a batch Job rendered for that application, and ends
//! `Succeeded` with the catalog Backup in upstream's shape; the Job failing, hanging past the
//! deadline, the application missing, unprojected credentials and a strategy missing in the
//! bootstrap window each end as upstream words them.

use crate::operators;
use crate::support;

use k8s_openapi::api::batch::v1::Job;
use operators::{Platform, app};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::{FAIL, HANG, catalog_json};

const TENANT: &str = "tenant-acme";

async fn clickhouse(p: &Platform, name: &str) {
    p.put::<api::thirdparty::apps::ClickHouse>(
        TENANT,
        app(
            "ClickHouse",
            TENANT,
            name,
            json!({"backup": {"enabled": true}}),
        ),
    )
    .await;
}

/// The platform's Altinity template with pod `annotations` (a simulator control).
fn annotated(platform: &Value, annotations: Value) -> Value {
    let mut t = platform["spec"]["template"].clone();
    t["metadata"] = json!({"annotations": annotations});
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn altinity_backups_succeed_fail_and_hang() {
    let mut p = Platform::start(&[TENANT], "jobs", &[], true).await;
    let platform = p
        .platform_strategy::<api::strategy::Altinity>("cozy-default-altinity")
        .await;
    p.strategy::<api::strategy::Altinity>(
        "ch-failing",
        annotated(&platform, json!({FAIL: "true"})),
    )
    .await;
    p.strategy::<api::strategy::Altinity>(
        "ch-hanging",
        annotated(&platform, json!({HANG: "true"})),
    )
    .await;
    p.class("ch-failing", "ClickHouse", "Altinity", "ch-failing", &[])
        .await;
    p.class(
        "ch-hanging",
        "ClickHouse",
        "Altinity",
        "ch-hanging",
        &[("backupDeadline", "3s")],
    )
    .await;
    clickhouse(&p, "events").await;
    p.backup(TENANT, "ok", "ClickHouse", "events", "cozy-default")
        .await;
    p.backup(TENANT, "broken", "ClickHouse", "events", "ch-failing")
        .await;
    p.backup(TENANT, "stuck", "ClickHouse", "events", "ch-hanging")
        .await;
    p.backup(TENANT, "ghost", "ClickHouse", "ghost", "cozy-default")
        .await;

    let (job, backup) = p
        .succeeded(TENANT, "ok", "clickhouse-backup Job completed")
        .await;
    let mut owned = p.owned::<Job>(TENANT, "ok").await;
    assert_eq!(owned.len(), 1);
    let batch = owned.remove(0);
    assert_eq!(batch.metadata.name.as_deref(), Some("ok-backup"));
    assert_eq!(
        batch.metadata.labels.as_ref().unwrap()["altinity.strategy.backups.cozystack.io/mode"],
        "backup"
    );
    assert_eq!(
        batch.metadata.owner_references.as_ref().unwrap()[0].uid,
        job.metadata.uid.clone().unwrap()
    );
    let container = &batch.data["spec"]["template"]["spec"]["containers"][0];
    let script = container["args"][0].as_str().unwrap();
    assert!(
        script.contains("HOST=\"chi-clickhouse-events-clickhouse-0-0.tenant-acme.svc\""),
        "{script}"
    );
    assert!(
        script.contains("TARGET=\"clickhouse-events-$(date"),
        "the backup branch: {script}"
    );
    assert!(!script.contains("{{"), "fully rendered: {script}");
    assert_eq!(
        container["env"][0]["valueFrom"]["secretKeyRef"]["name"],
        "clickhouse-events-backup-api-auth"
    );
    assert_eq!(
        catalog_json(&backup),
        json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": "ok", "namespace": TENANT},
            "spec": {
                "applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "ClickHouse", "name": "events"},
                "strategyRef": {"apiGroup": "strategy.backups.cozystack.io", "kind": "Altinity",
                                "name": "cozy-default-altinity"},
                "takenAt": job.status.as_ref().unwrap().completed_at,
            },
            "status": {"phase": "Ready"},
        })
    );
    p.assert_clean(TENANT, "ok").await;

    assert_eq!(
        p.failed(TENANT, "broken").await,
        "Job has reached the specified backoff limit"
    );
    assert_eq!(
        p.failed(TENANT, "stuck").await,
        "batch/v1 Job tenant-acme/stuck-backup did not complete within 3s; raise the BackupClass parameter backupDeadline or the runner's --backup-deadline for long backups"
    );
    assert_eq!(
        p.failed(TENANT, "ghost").await,
        "ClickHouse application not found: tenant-acme/ghost"
    );
    assert!(p.owned::<Job>(TENANT, "ghost").await.is_empty());
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn altinity_waits_for_credentials_then_for_its_strategy() {
    let mut p = Platform::start(&[TENANT], "jobs", &["--projection-grace=1s"], false).await;
    let platform = p
        .platform_strategy::<api::strategy::Altinity>("cozy-default-altinity")
        .await;
    clickhouse(&p, "events").await;
    p.class(
        "late-class",
        "ClickHouse",
        "Altinity",
        "late-altinity",
        &[("bucket", "b")],
    )
    .await;
    p.backup(TENANT, "early", "ClickHouse", "events", "late-class")
        .await;
    p.projection_pending(TENANT, "early").await;
    p.start_projector().await;
    let waiting = p
        .strategy_not_ready(TENANT, "early", "late-altinity", "late-class")
        .await;
    // Altinity marks the job Running with startedAt before it looks for the strategy.
    assert_eq!(waiting.status.unwrap().phase.as_deref(), Some("Running"));
    assert!(p.owned::<Job>(TENANT, "early").await.is_empty());
    p.strategy::<api::strategy::Altinity>("late-altinity", platform["spec"]["template"].clone())
        .await;
    let (_, backup) = p
        .succeeded(TENANT, "early", "clickhouse-backup Job completed")
        .await;
    assert_eq!(
        json!(backup.spec.driver_metadata),
        json!({"altinity.strategy.backups.cozystack.io/parameter/bucket": "b"})
    );
    p.h.cleanup().await.unwrap();
}
