//! End to end: the gates before projection, in upstream's order. Jobs that fail a gate get no
//! Secret and no `CredentialsProjected` condition, and their status is left alone; "nothing
//! happened" is asserted only after the reconcile counters show the daemon evaluated every job.

use crate::common;

use api::backups::BackupJob;
use common::*;
use harness::Harness;
use kube::Api;

const AK: &str = "AKIA-E2E-GATES-31c0";
const SK: &str = "e2e-gates-secret-5e77";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gated_jobs_get_no_secret_and_no_condition() {
    let mut h = Harness::start().await.unwrap();
    let src = h.temp_namespace("src").await.unwrap();
    set_source(
        &h,
        &src,
        &[
            ("accessKey", AK),
            ("secretKey", SK),
            ("endpoint", "s3.example.com"),
        ],
    )
    .await;
    backup_class(
        &h,
        "cozy-default",
        &[
            ("Foreign", "example.org", "CNPG"),
            ("Tape", STRATEGY, "Tape"),
        ],
    )
    .await;

    // Jobs exist before the daemon starts, so each is evaluated exactly from its stored state.
    let terminal = h.temp_namespace("terminal").await.unwrap();
    backup_job(&h, &terminal, "job", "cozy-default", "Postgres").await;
    set_phase(&h, &terminal, "job", "Succeeded").await;
    let foreign = h.temp_namespace("foreign").await.unwrap();
    backup_job(&h, &foreign, "job", "cozy-default", "Foreign").await;
    let unsupported = h.temp_namespace("unsupported").await.unwrap();
    backup_job(&h, &unsupported, "job", "cozy-default", "Tape").await;
    let nomatch = h.temp_namespace("nomatch").await.unwrap();
    backup_job(&h, &nomatch, "job", "cozy-default", "MariaDB").await;
    let noclass = h.temp_namespace("noclass").await.unwrap();
    backup_job(&h, &noclass, "job", "later", "Postgres").await;
    let r_foreign = h.temp_namespace("rforeign").await.unwrap();
    restore_job(&h, &r_foreign, "restore", "velero.io", "Velero").await;
    let r_kind = h.temp_namespace("rkind").await.unwrap();
    restore_job(&h, &r_kind, "restore", STRATEGY, "Tape").await;
    let r_ok = h.temp_namespace("rok").await.unwrap();
    restore_job(&h, &r_ok, "restore", STRATEGY, "CNPG").await;
    let control = h.temp_namespace("control").await.unwrap();
    backup_job(&h, &control, "job", "cozy-default", "Postgres").await;

    spawn(
        &mut h,
        &Setup {
            source_ns: src.clone(),
            endpoint: String::new(),
            region: "us-east-1".into(),
            force_path_style: "true".into(),
            system_namespaces: String::new(),
        },
    )
    .await;

    // Positive signals: the controls are projected, and every job has been reconciled.
    wait_bj(&h, &control, "job", "Projected").await;
    eventually("the RestoreJob control", || async {
        rj_condition(&h, &r_ok, "restore")
            .await
            .filter(|c| c.reason == "Projected")
    })
    .await;
    assert!(target(&h, &r_ok).await.is_some());
    eventually("every job reconciled", || {
        let text = metrics_text(&mut h);
        let done = runs(&text, "backupjobs") >= 6.0 && runs(&text, "restorejobs") >= 3.0;
        async move { done.then_some(()) }
    })
    .await;

    for ns in [&terminal, &foreign, &unsupported, &nomatch, &noclass] {
        assert!(target(&h, ns).await.is_none(), "a Secret leaked into {ns}");
        let job = Api::<BackupJob>::namespaced(h.client(), ns)
            .get("job")
            .await
            .unwrap();
        let conditions = job.status.map(|s| s.conditions).unwrap_or_default();
        assert!(conditions.is_empty(), "{ns}: {conditions:?}");
    }
    for ns in [&r_foreign, &r_kind] {
        assert!(target(&h, ns).await.is_none(), "a Secret leaked into {ns}");
        assert_eq!(rj_condition(&h, ns, "restore").await, None);
    }

    // The BackupClass appears: the BackupClass watch re-evaluates the waiting job at once.
    backup_class(&h, "later", &[]).await;
    wait_bj(&h, &noclass, "job", "Projected").await;
    assert!(target(&h, &noclass).await.is_some());

    assert_no_leak(&mut h, &[AK, SK]).await;
    h.cleanup().await.unwrap();
}
