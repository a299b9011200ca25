//! What every backup-runner end-to-end test builds on, whichever platform it starts (`operators`:
//! renderer and COSI bucket; `sim_platform`: a hand-made bucket Secret; `cnpg.rs`: the real data
//! plane): the workspace's binaries, the credentials projector as the platform runs it, BackupClass
//! routes, the waits on a job's phase and Ready condition, the words of the waits every driver
//! shares, and the simulated operators' test controls.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::time::Duration;

use api::backups::{Backup, BackupJob};
use harness::{Admin, DaemonSpec, Harness, eventually_within};
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

/// How long a step may take (daemons start, watches list, a job runs through its driver).
pub const WAIT: Duration = Duration::from_secs(60);
/// The annotation that makes a simulated operator fail a backup.
pub const FAIL: &str = "operator-sims.cozy-backups.io/fail-backup";
/// The annotation that makes a simulated operator hold a backup where it is.
pub const HANG: &str = "operator-sims.cozy-backups.io/hang";

/// A built binary of the workspace.
pub fn bin(name: &str) -> PathBuf {
    harness::locate_binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The credentials projector as the platform runs it, with the platform bucket at `endpoint`.
pub fn projector(endpoint: &str) -> DaemonSpec {
    DaemonSpec::new("credentials-projector", bin("credentials-projector")).args([
        "--source-namespace=tenant-root".to_owned(),
        "--source-name=bucket-cozy-backups-system-credentials".to_owned(),
        format!("--endpoint={endpoint}"),
        "--region=us-east-1".to_owned(),
        "--force-path-style=true".to_owned(),
        "--system-namespaces=cozy-velero".to_owned(),
    ])
}

/// Creates BackupClass `name` routing `app_kind` to strategy `strategy_kind`/`strategy` with
/// `parameters`.
pub async fn class(
    h: &Harness,
    name: &str,
    app_kind: &str,
    strategy_kind: &str,
    strategy: &str,
    parameters: &[(&str, &str)],
) {
    h.backup_class(name, app_kind, strategy_kind, strategy, parameters)
        .await;
}

/// Creates BackupJob `name` in `ns` for `kind`/`app` through `class`.
pub async fn backup_job(h: &Harness, ns: &str, name: &str, kind: &str, app: &str, class: &str) {
    let job = BackupJob::test(name)
        .for_app(kind, app)
        .class(class)
        .build();
    h.create(ns, &job).await;
}

/// The job's Ready condition.
pub fn ready(job: &BackupJob) -> Option<api::Condition> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .cloned()
}

/// The job's Ready condition `(reason, message)`.
pub fn ready_of(job: &BackupJob) -> (String, String) {
    let c = ready(job).expect("a Ready condition");
    (c.reason, c.message)
}

/// Waits (up to `within`) for job `name` to have a Ready condition with `reason`; returns the job.
pub async fn reason(
    jobs: &Api<BackupJob>,
    name: &str,
    reason: &str,
    within: Duration,
) -> BackupJob {
    eventually_within(
        &format!("BackupJob {name} Ready reason {reason}"),
        within,
        || async {
            let j = jobs.get_opt(name).await.ok()??;
            (ready(&j)?.reason == reason).then_some(j)
        },
    )
    .await
}

/// Waits (up to `within`) for job `name` to reach a terminal phase; returns the job.
pub async fn terminal(jobs: &Api<BackupJob>, name: &str, within: Duration) -> BackupJob {
    eventually_within(&format!("BackupJob {name} terminal"), within, || async {
        let j = jobs.get_opt(name).await.ok()??;
        api::contract::phases::is_terminal(j.status.as_ref()?.phase.as_deref()).then_some(j)
    })
    .await
}

/// Waits for job `name` to wait for its strategy, asserting upstream's words for `strategy` named
/// by BackupClass `class`; returns the job.
pub async fn strategy_not_ready(
    jobs: &Api<BackupJob>,
    name: &str,
    strategy: &str,
    class: &str,
) -> BackupJob {
    let job = reason(jobs, name, "StrategyNotReady", WAIT).await;
    assert_eq!(
        ready_of(&job).1,
        format!(
            "Strategy {strategy:?} referenced by BackupClass {class:?} is not yet provisioned; the platform may still be initialising backup storage"
        )
    );
    job
}

/// Waits for job `name` to wait for the credentials projection, asserting the message points at
/// the projector; returns the job.
pub async fn projection_pending(jobs: &Api<BackupJob>, name: &str) -> BackupJob {
    let job = reason(jobs, name, "CredentialsProjectionPending", WAIT).await;
    assert!(
        ready_of(&job).1.contains("credentials projector"),
        "{job:?}"
    );
    job
}

/// The objects of `api` labelled as owned by BackupJob `job`.
pub async fn owned(api: &Api<DynamicObject>, job: &str) -> Vec<DynamicObject> {
    let selector = format!("backups.cozystack.io/owned-by.BackupJobName={job}");
    api.list(&ListParams::default().labels(&selector))
        .await
        .unwrap()
        .items
}

/// Every API call the runner made is allowed by `deploy/backup-runner/rbac.yaml`, and no
/// credential value of the projected Secret in `ns` reached the runner's log, job `job`'s Events
/// (`kubectl describe`) or the metrics of `runner`.
pub async fn assert_clean(h: &mut Harness, runner: &Admin, ns: &str, job: &str) {
    harness::rbac::assert_allowed(&h.audit(), "backup-runner");
    let creds = h
        .secret_data(ns, api::contract::names::CREDENTIALS_SECRET)
        .await
        .expect("the projected credentials");
    let described = h.kubectl(&["-n", ns, "describe", "backupjob", job]);
    let log = h.daemon("backup-runner").unwrap().log();
    let metrics = runner.metrics();
    harness::leak::assert_no_leaks(
        &[
            ("runner log", &log),
            ("describe", &described),
            ("metrics", metrics.text()),
        ],
        &[&creds["AWS_SECRET_ACCESS_KEY"], &creds["AWS_ACCESS_KEY_ID"]],
    );
    h.assert_no_secret_leaks(
        &[&creds["AWS_SECRET_ACCESS_KEY"], &creds["AWS_ACCESS_KEY_ID"]],
        &[("describe", &described)],
    );
}

/// A Backup as JSON without the fields the API server and the finalizer controller add.
pub fn catalog_json(backup: &Backup) -> Value {
    let mut v = serde_json::to_value(backup).unwrap();
    let meta = v["metadata"].as_object_mut().unwrap();
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
        "finalizers",
    ] {
        meta.remove(k);
    }
    v
}
