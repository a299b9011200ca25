//! End to end, the Altinity (clickhouse-backup) restore: the real orchestrator, runner and
//! projector against the emulator with the simulated Job controller. Real Backups of a ClickHouse
//! application are taken first; restores run the strategy's client pod in `restore` mode as the
//! batch Job `<job>-restore`, in place and into a copy, and succeed when it completes. A client Job
//! out of retries fails the restore with the controller's message; one that stays active keeps the
//! restore running until it completes (the 24 h deadline has no option); options are ignored; a
//! strategy that is gone makes the restore wait (`StrategyNotReady`) until it is back.

use crate::support;

use k8s_openapi::api::batch::v1::Job;
use kube::core::ApiResource;
use serde_json::{Value, json};
use support::{FAIL_RESTORE, HANG_RESTORE, Platform, TENANT, ready};

fn jobs() -> ApiResource {
    ApiResource::erase::<Job>(&())
}

pub(crate) fn strategies() -> ApiResource {
    ApiResource::erase::<api::strategy::Altinity>(&())
}

/// A clickhouse-backup client pod, with pod `annotations`.
pub(crate) fn template(annotations: Value) -> Value {
    json!({
        "metadata": {"annotations": annotations},
        "spec": {"containers": [{"name": "client", "image": "curlimages/curl:8.5.0", "args": [
            "--mode={{ .Mode }}",
            "--host=chi-clickhouse-{{ .Release.Name }}-clickhouse-0-0.{{ .Release.Namespace }}.svc",
            "--from={{ if eq .Mode \"restore\" }}{{ .Backup.Name }}/{{ .Backup.ApplicationRef.Name }}{{ end }}"]}]},
    })
}

const RESTORE_ONLY: &str = "{{ if eq .Mode \"restore\" }}true{{ end }}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn altinity_restores_succeed_fail_hang_and_wait_for_their_strategy() {
    let p = Platform::start(
        "jobs",
        &[],
        vec![api::thirdparty::permissive_crd::<
            api::thirdparty::apps::ClickHouse,
        >(true)],
    )
    .await;
    p.strategy(&strategies(), "ch", template(json!({}))).await;
    p.strategy(
        &strategies(),
        "ch-fails",
        template(json!({FAIL_RESTORE: RESTORE_ONLY})),
    )
    .await;
    p.strategy(
        &strategies(),
        "ch-hangs",
        template(json!({HANG_RESTORE: RESTORE_ONLY})),
    )
    .await;
    p.strategy(&strategies(), "ch-late", template(json!({})))
        .await;
    for s in ["ch", "ch-fails", "ch-hangs", "ch-late"] {
        p.class(s, "ClickHouse", "Altinity", s, &[]).await;
    }
    for app in ["events", "events-copy"] {
        p.app::<api::thirdparty::apps::ClickHouse>(app, json!({"backup": {"enabled": true}}))
            .await;
    }
    p.backup(TENANT, "nightly", "ClickHouse", "events", "ch")
        .await;
    p.backup(TENANT, "nightly-f", "ClickHouse", "events", "ch-fails")
        .await;
    p.backup(TENANT, "nightly-h", "ClickHouse", "events", "ch-hangs")
        .await;
    p.backup(TENANT, "nightly-l", "ClickHouse", "events", "ch-late")
        .await;
    p.api(&strategies(), None)
        .delete("ch-late", &Default::default())
        .await
        .unwrap();

    let target = |app| Some(("ClickHouse", app));
    p.restore(
        TENANT,
        "in-place",
        "nightly",
        None,
        json!({"restoreTimeoutSeconds": "soon"}),
    )
    .await;
    p.restore(
        TENANT,
        "to-copy",
        "nightly",
        target("events-copy"),
        json!(null),
    )
    .await;
    p.restore(TENANT, "broken", "nightly-f", None, json!(null))
        .await;
    p.restore(TENANT, "slow", "nightly-h", None, json!(null))
        .await;
    p.restore(TENANT, "late", "nightly-l", None, json!(null))
        .await;

    for (job, release) in [("in-place", "events"), ("to-copy", "events-copy")] {
        let done = p.succeeded(TENANT, job).await;
        assert_eq!(
            ready(&done).unwrap(),
            (
                "RestoreCompleted".to_owned(),
                "clickhouse-backup Job completed".to_owned()
            )
        );
        let batch = p
            .get(&jobs(), Some(TENANT), &format!("{job}-restore"))
            .await
            .unwrap();
        assert_eq!(
            batch["metadata"]["labels"]["altinity.strategy.backups.cozystack.io/mode"],
            "restore"
        );
        assert_eq!(
            batch["spec"]["template"]["spec"]["containers"][0]["args"],
            json!([
                "--mode=restore",
                format!("--host=chi-clickhouse-{release}-clickhouse-0-0.{TENANT}.svc"),
                "--from=nightly/events",
            ])
        );
    }
    // Options are not read by this driver: no Warning for ill-typed ones.
    let events = p.events(TENANT, "in-place").await;
    assert!(events.iter().all(|(t, _, _)| t != "Warning"), "{events:?}");

    assert_eq!(
        p.failed(TENANT, "broken").await,
        (
            "RestoreFailed".to_owned(),
            "Job has reached the specified backoff limit".to_owned()
        )
    );
    support::eventually(&p, "the slow client Job active", async |p: &Platform| {
        let j = p.get(&jobs(), Some(TENANT), "slow-restore").await?;
        (j["status"]["active"] == 1).then_some(())
    })
    .await;
    assert_eq!(
        p.restores(TENANT)
            .get("slow")
            .await
            .unwrap()
            .status
            .unwrap()
            .phase
            .as_deref(),
        Some("Running")
    );
    p.annotate(
        &jobs(),
        Some(TENANT),
        "slow-restore",
        HANG_RESTORE,
        Some("false"),
    )
    .await;
    p.succeeded(TENANT, "slow").await;

    // The strategy is gone: the restore waits for it, and its return carries the restore through.
    let waiting = p.reason(TENANT, "late", "StrategyNotReady").await;
    assert_eq!(
        ready(&waiting).unwrap().1,
        "Strategy \"ch-late\" referenced by Backup is not yet provisioned; the platform may still be initialising backup storage"
    );
    assert!(p.get(&jobs(), Some(TENANT), "late-restore").await.is_none());
    p.strategy(&strategies(), "ch-late", template(json!({})))
        .await;
    p.succeeded(TENANT, "late").await;
    p.finish(&[TENANT]).await;
}
