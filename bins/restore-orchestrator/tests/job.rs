//! End to end, the generic Job restore: the real orchestrator, runner and projector against the
//! emulator with the simulated Job controller. Real Backups of an application of a kind known only
//! through discovery are taken first; restores run the strategy's pod template in `restore` mode as
//! the batch Job `<job>-restore`, in place and into a copy, and succeed when the Job completes. A
//! restore Job that runs out of retries fails the restore with the controller's message; one that
//! stays active keeps the restore running until it completes (the driver's own 24 h deadline has
//! no option and is not waited for here); options, which this driver does not read, are ignored
//! even when malformed; a missing target fails at once.

use crate::support;

use k8s_openapi::api::batch::v1::Job;
use kube::core::ApiResource;
use serde_json::{Value, json};
use support::{FAIL_RESTORE, HANG_RESTORE, Platform, TENANT, crd, ready};

pub(crate) const NOTEBOOK: &str = "Notebook";

pub(crate) fn notebooks() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("apps.cozystack.io", "v1alpha1", NOTEBOOK),
        "notebooks",
    )
}

fn jobs() -> ApiResource {
    ApiResource::erase::<Job>(&())
}

/// A pod template reading every key of the restore context, with pod `annotations`.
pub(crate) fn template(annotations: Value) -> Value {
    json!({
        "metadata": {"annotations": annotations},
        "spec": {"containers": [{"name": "tool", "image": "backup-tool:test", "args": [
            "--mode={{ .Mode }}", "--release={{ .Release.Name }}", "--namespace={{ .Release.Namespace }}",
            "--bucket={{ .Parameters.bucketName }}", "--replicas={{ .Application.spec.replicas }}",
            "--from={{ if eq .Mode \"restore\" }}{{ .Backup.Name }}/{{ .Backup.ApplicationRef.Kind }}/{{ .Backup.ApplicationRef.Name }}{{ end }}"]}]},
    })
}

/// Only in restore mode: the control's value renders empty for the backup Job.
const RESTORE_ONLY: &str = "{{ if eq .Mode \"restore\" }}true{{ end }}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_restores_succeed_fail_hang_ignore_options_and_refuse_a_missing_target() {
    let p = Platform::start(
        "jobs",
        &[],
        vec![crd(
            "apps.cozystack.io",
            "v1alpha1",
            NOTEBOOK,
            "notebooks",
            true,
        )],
    )
    .await;
    let strategies = ApiResource::erase::<api::strategy::Job>(&());
    p.strategy(&strategies, "generic", template(json!({})))
        .await;
    p.strategy(
        &strategies,
        "restore-fails",
        template(json!({FAIL_RESTORE: RESTORE_ONLY})),
    )
    .await;
    p.strategy(
        &strategies,
        "restore-hangs",
        template(json!({HANG_RESTORE: RESTORE_ONLY})),
    )
    .await;
    let params = [("bucketName", "gen-bucket")];
    for s in ["generic", "restore-fails", "restore-hangs"] {
        p.class(s, NOTEBOOK, "Job", s, &params).await;
    }
    p.app_of(&notebooks(), TENANT, "nb", json!({"replicas": 3}))
        .await;
    p.app_of(&notebooks(), TENANT, "nb-copy", json!({"replicas": 1}))
        .await;
    p.backup(TENANT, "nightly", NOTEBOOK, "nb", "generic").await;
    p.backup(TENANT, "nightly-f", NOTEBOOK, "nb", "restore-fails")
        .await;
    p.backup(TENANT, "nightly-h", NOTEBOOK, "nb", "restore-hangs")
        .await;

    let target = |app| Some((NOTEBOOK, app));
    p.restore(TENANT, "in-place", "nightly", None, json!(null))
        .await;
    p.restore(TENANT, "to-copy", "nightly", target("nb-copy"), json!({}))
        .await;
    p.restore(TENANT, "broken", "nightly-f", None, json!(null))
        .await;
    p.restore(TENANT, "slow", "nightly-h", None, json!(null))
        .await;
    p.restore(
        TENANT,
        "sloppy",
        "nightly",
        None,
        json!({"restoreTimeoutSeconds": "soon", "recoveryTime": 5}),
    )
    .await;
    p.restore(TENANT, "ghost", "nightly", target("ghost"), json!(null))
        .await;

    // In place and to a copy: the pod template rendered in restore mode against the target.
    for (job, release, replicas) in [("in-place", "nb", 3), ("to-copy", "nb-copy", 1)] {
        let done = p.succeeded(TENANT, job).await;
        assert_eq!(
            ready(&done).unwrap(),
            (
                "RestoreCompleted".to_owned(),
                "restore Job completed".to_owned()
            )
        );
        let batch = p
            .get(&jobs(), Some(TENANT), &format!("{job}-restore"))
            .await
            .unwrap();
        assert_eq!(
            batch["metadata"]["labels"]["job.strategy.backups.cozystack.io/mode"],
            "restore"
        );
        assert_eq!(
            batch["metadata"]["ownerReferences"][0]["kind"],
            "RestoreJob"
        );
        assert_eq!(batch["metadata"]["ownerReferences"][0]["name"], job);
        assert_eq!(batch["spec"]["backoffLimit"], 2);
        let pod = &batch["spec"]["template"];
        assert_eq!(pod["spec"]["restartPolicy"], "Never");
        assert_eq!(
            pod["spec"]["containers"][0]["args"],
            json!([
                "--mode=restore",
                format!("--release={release}"),
                format!("--namespace={TENANT}"),
                "--bucket=gen-bucket",
                format!("--replicas={replicas}"),
                "--from=nightly/Notebook/nb",
            ])
        );
        assert_eq!(batch["status"]["succeeded"], 1);
    }

    // The Job runs out of retries: Failed with the Job controller's message.
    assert_eq!(
        p.failed(TENANT, "broken").await,
        (
            "RestoreFailed".to_owned(),
            "Job has reached the specified backoff limit".to_owned()
        )
    );
    // The Job stays active: the restore keeps running until it completes.
    support::eventually(&p, "the slow restore Job active", async |p: &Platform| {
        let j = p.get(&jobs(), Some(TENANT), "slow-restore").await?;
        (j["status"]["active"] == 1).then_some(())
    })
    .await;
    let slow = p.restores(TENANT).get("slow").await.unwrap();
    assert_eq!(slow.status.unwrap().phase.as_deref(), Some("Running"));
    p.annotate(
        &jobs(),
        Some(TENANT),
        "slow-restore",
        HANG_RESTORE,
        Some("false"),
    )
    .await;
    p.succeeded(TENANT, "slow").await;

    // This driver reads no options: even ill-typed ones are ignored.
    p.succeeded(TENANT, "sloppy").await;
    let events = p.events(TENANT, "sloppy").await;
    assert!(events.iter().all(|(t, _, _)| t != "Warning"), "{events:?}");

    // A target that does not exist: Failed at once, no Job.
    assert_eq!(
        p.failed(TENANT, "ghost").await.1,
        "target application not found or kind not registered: tenant-acme/ghost (kind=\"Notebook\"; deploy it before requesting a restore)"
    );
    assert!(
        p.get(&jobs(), Some(TENANT), "ghost-restore")
            .await
            .is_none()
    );
    p.finish(&[TENANT]).await;
}
