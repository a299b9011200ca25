//! Shared by the end-to-end tests: running the binary against the emulator, and a fixture set of
//! backup objects.
#![allow(dead_code, unreachable_pub)]

use api::backups::{Backup, BackupJob, BackupJobStatus, BackupStatus, Plan};
use harness::Harness;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use std::process::Output;

/// The reference time the fixture's ages are rendered against.
pub const NOW: &str = "2026-12-02T12:00:00Z";

/// Runs the binary with the harness's kubeconfig and a fixed `--now`, without blocking the
/// runtime that serves the in-process emulator.
pub async fn ctl(h: &Harness, args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_cozy-backups-ctl"))
        .args(args)
        .env("KUBECONFIG", h.kubeconfig_path())
        .env("COZY_BACKUPS_CTL_NOW", NOW)
        .env_remove("COZY_BACKUPS_CTL_OUTPUT")
        .output()
        .await
        .expect("run cozy-backups-ctl")
}

/// A `--wait` run in the background: the child, its stdout lines, and the name of the object
/// it reported as created on its first line (`<resource>.backups.cozystack.io/<name> created`).
pub async fn spawn_waiting(
    h: &Harness,
    resource: &str,
    args: &[&str],
) -> (
    tokio::process::Child,
    tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    String,
) {
    use tokio::io::AsyncBufReadExt as _;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_cozy-backups-ctl"))
        .args(args)
        .env("KUBECONFIG", h.kubeconfig_path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run cozy-backups-ctl");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("piped stdout")).lines();
    let created = lines.next_line().await.unwrap().unwrap();
    let name = created
        .strip_prefix(&format!("{resource}.backups.cozystack.io/"))
        .and_then(|s| s.strip_suffix(" created"))
        .unwrap_or_else(|| panic!("{created}"))
        .to_owned();
    (child, lines, name)
}

/// stdout, asserting the run succeeded.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// stderr, asserting the run exited with `code`.
pub fn failed(out: &Output, code: i32) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {err}",
        String::from_utf8_lossy(&out.stdout)
    );
    err
}

/// Compares `actual` with `tests/golden/<name>`; `UPDATE_GOLDEN=1` rewrites the file instead.
pub fn golden(name: &str, actual: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read {}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(
        actual,
        expected,
        "output differs from {} (UPDATE_GOLDEN=1 rewrites it)",
        path.display()
    );
}

fn time(s: &str) -> Time {
    Time(s.parse().unwrap())
}

/// A catalog Backup of Postgres `app` taken (and stopped) at `at`, phase Ready.
pub async fn postgres_backup(h: &Harness, ns: &str, name: &str, app: &str, at: &str) {
    let mut b = Backup::test(name)
        .namespace(ns)
        .for_app("Postgres", app)
        .driver_metadata(&[
            ("cnpg.io/server-name", &format!("postgres-{app}")),
            ("cnpg.io/stopped-at", at),
        ])
        .build();
    b.spec.taken_at = time(at);
    b.status = Some(BackupStatus {
        phase: Some("Ready".into()),
        ..Default::default()
    });
    Api::<Backup>::namespaced(h.client(), ns)
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
}

/// A BackupJob with this status (written through the status subresource).
pub async fn backup_job(
    h: &Harness,
    ns: &str,
    name: &str,
    kind: &str,
    app: &str,
    status: BackupJobStatus,
) {
    let api = Api::<BackupJob>::namespaced(h.client(), ns);
    let job = BackupJob::test(name)
        .namespace(ns)
        .for_app(kind, app)
        .class("cozy-default")
        .build();
    api.create(&PostParams::default(), &job).await.unwrap();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .unwrap();
}

/// The fixture of the status tests in `ns`: Postgres `orders-db` with a Plan, two Backups and a
/// failed job; MariaDB `shop-db` with a running job and an older successful Backup.
pub async fn fixture(h: &Harness, ns: &str) {
    h.create_namespaces(&[ns]).await.unwrap();
    let plan = Plan::test("orders-db-nightly", "0 2 * * *")
        .namespace(ns)
        .for_app("Postgres", "orders-db")
        .class("cozy-default")
        .build();
    Api::<Plan>::namespaced(h.client(), ns)
        .create(&PostParams::default(), &plan)
        .await
        .unwrap();
    postgres_backup(
        h,
        ns,
        "orders-db-nightly-1",
        "orders-db",
        "2026-12-01T02:00:00Z",
    )
    .await;
    postgres_backup(
        h,
        ns,
        "orders-db-nightly-2",
        "orders-db",
        "2026-12-02T02:00:00Z",
    )
    .await;
    backup_job(
        h,
        ns,
        "orders-db-manual-1",
        "Postgres",
        "orders-db",
        BackupJobStatus {
            phase: Some("Failed".into()),
            started_at: Some(time("2026-12-02T09:00:00Z")),
            completed_at: Some(time("2026-12-02T09:05:00Z")),
            message: Some(
                "cnpg.io/Backup orders-db-manual-1 failed: barman-cloud-backup exited 1".into(),
            ),
            ..Default::default()
        },
    )
    .await;
    backup_job(
        h,
        ns,
        "shop-db-ad-hoc",
        "MariaDB",
        "shop-db",
        BackupJobStatus {
            phase: Some("Running".into()),
            started_at: Some(time("2026-12-02T11:55:00Z")),
            ..Default::default()
        },
    )
    .await;
    let mut b = Backup::test("shop-db-weekly-1")
        .namespace(ns)
        .for_app("MariaDB", "shop-db")
        .strategy(
            "strategy.backups.cozystack.io",
            "MariaDB",
            "cozy-default-mariadb",
        )
        .build();
    b.spec.taken_at = time("2026-11-29T08:30:00Z");
    b.status = Some(BackupStatus {
        phase: Some("Ready".into()),
        verification: Some(api::backups::BackupVerification {
            last_verified_at: Some(time("2026-11-29T09:00:00Z")),
            result: Some("Passed".into()),
            message: Some("restored into the scratch application shop-db-verify-0a1b2c3d (RestoreJob Succeeded)".into()),
            restore_seconds: Some(95),
            check_seconds: None,
        }),
        ..Default::default()
    });
    Api::<Backup>::namespaced(h.client(), ns)
        .create(&PostParams::default(), &b)
        .await
        .unwrap();
}
