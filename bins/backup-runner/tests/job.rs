//! End to end, the generic Job driver: the real runner, renderer and projector against the emulator
//! with the simulated Job controller. An application of a kind the runner knows nothing about
//! (found through discovery) is backed up by a batch Job rendered from the strategy's pod template;
//! the Job failing, hanging past the deadline, the strategy or the application or its kind missing,
//! and unprojected credentials each end as upstream words them.

use crate::operators;
use crate::support;

use k8s_openapi::api::batch::v1::Job;
use operators::{NOTEBOOK, Platform, app};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::{FAIL, HANG, catalog_json};

const TENANT: &str = "tenant-acme";

/// A pod template exercising every key of the render context, with pod `annotations`.
fn template(annotations: Value) -> Value {
    json!({
        "metadata": {"annotations": annotations},
        "spec": {"containers": [{"name": "backup", "image": "backup-tool:test", "args": [
            "--app={{ .Release.Name }}", "--namespace={{ .Release.Namespace }}", "--mode={{ .Mode }}",
            "--bucket={{ .Parameters.bucketName }}", "--replicas={{ .Application.spec.replicas }}"]}]},
    })
}

async fn notebook(p: &Platform, name: &str) {
    let api = kube::api::Api::namespaced_with(
        p.h.client(),
        TENANT,
        &kube::core::ApiResource {
            group: "apps.cozystack.io".into(),
            version: "v1alpha1".into(),
            api_version: "apps.cozystack.io/v1alpha1".into(),
            kind: NOTEBOOK.into(),
            plural: "notebooks".into(),
        },
    );
    harness::dataplane::apply(&api, app(NOTEBOOK, TENANT, name, json!({"replicas": 3}))).await;
}

async fn batch_job(p: &Platform, job: &str) -> kube::api::DynamicObject {
    let mut owned = p.owned::<Job>(TENANT, job).await;
    assert_eq!(owned.len(), 1, "one batch Job per BackupJob");
    owned.remove(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_strategy_backups_succeed_fail_hang_and_refuse_what_is_missing() {
    let mut p = Platform::start(&[TENANT], "jobs", &[], true).await;
    let params = [("bucketName", "gen-bucket")];
    p.strategy::<api::strategy::Job>("generic", template(json!({})))
        .await;
    p.strategy::<api::strategy::Job>("generic-failing", template(json!({FAIL: "true"})))
        .await;
    p.strategy::<api::strategy::Job>("generic-hanging", template(json!({HANG: "true"})))
        .await;
    p.class("generic", NOTEBOOK, "Job", "generic", &params)
        .await;
    p.class("failing", NOTEBOOK, "Job", "generic-failing", &[])
        .await;
    p.class(
        "hanging",
        NOTEBOOK,
        "Job",
        "generic-hanging",
        &[("backupDeadline", "3s")],
    )
    .await;
    p.class("unprovisioned", NOTEBOOK, "Job", "missing", &[])
        .await;
    p.class("unicorns", "Unicorn", "Job", "generic", &[]).await;
    notebook(&p, "nb").await;
    p.backup(TENANT, "ok", NOTEBOOK, "nb", "generic").await;
    p.backup(TENANT, "broken", NOTEBOOK, "nb", "failing").await;
    p.backup(TENANT, "stuck", NOTEBOOK, "nb", "hanging").await;
    p.backup(TENANT, "nostrategy", NOTEBOOK, "nb", "unprovisioned")
        .await;
    p.backup(TENANT, "ghost", NOTEBOOK, "ghost", "generic")
        .await;
    p.backup(TENANT, "unicorn", "Unicorn", "u", "unicorns")
        .await;

    // Success: the batch Job as upstream builds it, and the catalog entry as a whole.
    let (job, backup) = p.succeeded(TENANT, "ok", "backup Job completed").await;
    let batch = batch_job(&p, "ok").await;
    assert_eq!(batch.metadata.name.as_deref(), Some("ok-backup"));
    let labels = json!({
        "job.strategy.backups.cozystack.io/mode": "backup",
        "backups.cozystack.io/owned-by.BackupJobName": "ok",
        "backups.cozystack.io/owned-by.BackupJobNamespace": TENANT,
    });
    assert_eq!(json!(batch.metadata.labels), labels);
    let owner = &batch.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            owner.kind.as_str(),
            owner.name.as_str(),
            owner.controller,
            owner.block_owner_deletion
        ),
        ("BackupJob", "ok", Some(true), Some(true))
    );
    assert_eq!(owner.uid, job.metadata.uid.clone().unwrap());
    assert_eq!(batch.data["spec"]["backoffLimit"], 2);
    let pod = &batch.data["spec"]["template"];
    assert_eq!(pod["spec"]["restartPolicy"], "Never");
    for (k, v) in labels.as_object().unwrap() {
        assert_eq!(&pod["metadata"]["labels"][k], v, "{k} on the pod template");
    }
    assert_eq!(
        pod["spec"]["containers"][0]["args"],
        json!([
            "--app=nb",
            "--namespace=tenant-acme",
            "--mode=backup",
            "--bucket=gen-bucket",
            "--replicas=3"
        ])
    );
    let conditions = batch.data["status"]["conditions"].as_array().unwrap();
    assert_eq!(conditions.last().unwrap()["type"], "Complete");
    assert_eq!(
        catalog_json(&backup),
        json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
            "metadata": {"name": "ok", "namespace": TENANT},
            "spec": {
                "applicationRef": {"apiGroup": "apps.cozystack.io", "kind": NOTEBOOK, "name": "nb"},
                "strategyRef": {"apiGroup": "strategy.backups.cozystack.io", "kind": "Job", "name": "generic"},
                "takenAt": job.status.as_ref().unwrap().completed_at,
                "driverMetadata": {"job.strategy.backups.cozystack.io/parameter/bucketName": "gen-bucket"},
            },
            "status": {"phase": "Ready"},
        })
    );
    p.assert_clean(TENANT, "ok").await;

    // The Job controller gives up after the backoff limit: its message is the job's.
    assert_eq!(
        p.failed(TENANT, "broken").await,
        "Job has reached the specified backoff limit"
    );
    assert_eq!(batch_job(&p, "broken").await.data["status"]["failed"], 3);
    // A Job that never finishes ends at the route's backup deadline (upstream waits forever).
    assert_eq!(
        p.failed(TENANT, "stuck").await,
        "batch/v1 Job tenant-acme/stuck-backup did not complete within 3s; raise the BackupClass parameter backupDeadline or the runner's --backup-deadline for long backups"
    );
    // Upstream's Job driver does not wait for a missing strategy.
    assert_eq!(
        p.failed(TENANT, "nostrategy").await,
        "Job strategy not found: missing"
    );
    // A missing application and an unknown kind end the same way, with nothing created.
    assert_eq!(
        p.failed(TENANT, "ghost").await,
        "application not found or kind not registered: tenant-acme/ghost (kind=\"Notebook\")"
    );
    assert_eq!(
        p.failed(TENANT, "unicorn").await,
        "application not found or kind not registered: tenant-acme/u (kind=\"Unicorn\")"
    );
    for job in ["nostrategy", "ghost", "unicorn"] {
        assert!(p.owned::<Job>(TENANT, job).await.is_empty(), "{job}");
    }
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_strategy_waits_for_credentials() {
    let mut p = Platform::start(&[TENANT], "jobs", &["--projection-grace=1s"], false).await;
    p.strategy::<api::strategy::Job>("generic", template(json!({})))
        .await;
    p.class("generic", NOTEBOOK, "Job", "generic", &[]).await;
    notebook(&p, "nb").await;
    p.backup(TENANT, "patient", NOTEBOOK, "nb", "generic").await;
    let pending = p.projection_pending(TENANT, "patient").await;
    assert_eq!(pending.status.unwrap().phase, None);
    assert!(p.owned::<Job>(TENANT, "patient").await.is_empty());
    p.start_projector().await;
    p.succeeded(TENANT, "patient", "backup Job completed").await;
    p.h.cleanup().await.unwrap();
}
