//! `backup` and `restore` against the emulator: what they create, `--wait` following the phase,
//! the recoverable-window check before a restore, and errors for bad input.

use crate::common;

use api::backups::{BackupJob, RestoreJob};
use common::{ctl, failed, fixture, ok, spawn_waiting};
use harness::Harness;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const NS: &str = "tenant-acme";

#[tokio::test]
async fn backup_creates_a_job_and_waits_for_its_end() {
    let h = Harness::start().await.unwrap();
    fixture(&h, NS).await;
    let api = Api::<BackupJob>::namespaced(h.client(), NS);

    let out = ok(&ctl(&h, &["backup", "-n", NS, "orders-db", "-o", "name"]).await);
    let name = out
        .trim()
        .strip_prefix("backupjob.backups.cozystack.io/")
        .unwrap_or_else(|| panic!("{out}"))
        .to_owned();
    assert!(name.starts_with("orders-db-"), "{name}");
    let job = api.get(&name).await.unwrap();
    assert_eq!(job.spec.application_ref.kind, "Postgres");
    assert_eq!(job.spec.application_ref.name, "orders-db");
    assert_eq!(
        job.spec.application_ref.api_group.as_deref(),
        Some("apps.cozystack.io")
    );
    assert_eq!(job.spec.backup_class_name, "cozy-default");

    // --wait: the test plays the backup-runner and moves the job Running → Failed, each step only
    // once the CLI has printed the previous one.
    let (child, mut lines, name) = spawn_waiting(
        &h,
        "backupjob",
        &[
            "backup", "-n", NS, "shop-db", "--kind", "MariaDB", "--class", "nightly", "--wait",
        ],
    )
    .await;
    assert!(name.starts_with("shop-db-"), "{name}");
    assert_eq!(
        lines.next_line().await.unwrap().unwrap(),
        format!("backupjob/{name}: Pending (no phase yet)")
    );
    let status = |s: serde_json::Value| Patch::Merge(json!({ "status": s }));
    api.patch_status(
        &name,
        &PatchParams::default(),
        &status(json!({"phase": "Running"})),
    )
    .await
    .unwrap();
    assert_eq!(
        lines.next_line().await.unwrap().unwrap(),
        format!("backupjob/{name}: Running")
    );
    api.patch_status(
        &name,
        &PatchParams::default(),
        &status(json!({"phase": "Failed", "message": "BackupClass \"nightly\" not found"})),
    )
    .await
    .unwrap();
    assert_eq!(
        lines.next_line().await.unwrap().unwrap(),
        format!("backupjob/{name}: Failed")
    );
    let out = child.wait_with_output().await.unwrap();
    let err = failed(&out, 4);
    assert!(
        err.contains(&format!(
            "BackupJob {NS}/{name} failed: BackupClass \"nightly\" not found"
        )),
        "{err}"
    );

    // A job nobody runs: --timeout ends the wait with its own exit code, the job stays.
    let out = ctl(
        &h,
        &["backup", "-n", NS, "orders-db", "--wait", "--timeout", "1s"],
    )
    .await;
    let err = failed(&out, 5);
    assert!(
        err.contains("is not finished after --timeout 1s (last phase: none)"),
        "{err}"
    );

    let err = failed(&ctl(&h, &["backup", "-n", "nowhere", "orders-db"]).await, 3);
    assert!(err.contains("namespace \"nowhere\" not found"), "{err}");
    let err = failed(
        &ctl(&h, &["backup", "-n", NS, "orders-db", "--class", ""]).await,
        1,
    );
    assert!(err.contains("--class must not be empty"), "{err}");
}

#[tokio::test]
async fn restore_checks_the_window_before_creating_anything() {
    let h = Harness::start().await.unwrap();
    fixture(&h, NS).await;
    let api = Api::<RestoreJob>::namespaced(h.client(), NS);
    let count = || async { api.list(&ListParams::default()).await.unwrap().items.len() };

    // Before the window (2026-12-01T02:00:00Z …): refused, naming the window; nothing created.
    let out = ctl(
        &h,
        &[
            "restore",
            "-n",
            NS,
            "--from",
            "orders-db-nightly-2",
            "--at",
            "2026-11-30T00:00:00Z",
        ],
    )
    .await;
    let err = failed(&out, 1);
    assert!(
        err.contains("--at: point-in-time recovery target 2026-11-30T00:00:00Z is before the recoverable window of server \"postgres-orders-db\" (2026-12-01T02:00:00Z … 2026-12-02T02:00:00Z)")
            && err.contains("no RestoreJob was created"),
        "{err}"
    );
    assert_eq!(count().await, 0);

    // After the window's end: a warning, and the RestoreJob carries the time as given.
    let out = ctl(
        &h,
        &[
            "restore",
            "-n",
            NS,
            "--from",
            "orders-db-nightly-2",
            "--to",
            "orders-copy",
            "--at",
            "2026-12-02T11:00:00+01:00",
            "-o",
            "json",
        ],
    )
    .await;
    let job: RestoreJob = serde_json::from_str(&ok(&out)).unwrap();
    let warning = String::from_utf8_lossy(&out.stderr);
    assert!(
        warning.contains("Warning: --at: recoveryTime 2026-12-02T11:00:00+01:00 is 8h0m0s past the newest archived point known now"),
        "{warning}"
    );
    let name = job.metadata.name.clone().unwrap();
    assert!(name.starts_with("orders-copy-restore-"), "{name}");
    let stored = api.get(&name).await.unwrap();
    assert_eq!(stored.spec.backup_ref.name, "orders-db-nightly-2");
    let target = stored.spec.target_application_ref.unwrap();
    assert_eq!(
        (target.kind.as_str(), target.name.as_str()),
        ("Postgres", "orders-copy")
    );
    assert_eq!(
        stored.spec.options,
        Some(json!({"recoveryTime": "2026-12-02T11:00:00+01:00"}))
    );

    // Inside the window, in place, --wait until Succeeded (the test plays the orchestrator).
    let (child, mut lines, name) = spawn_waiting(
        &h,
        "restorejob",
        &[
            "restore",
            "-n",
            NS,
            "--from",
            "orders-db-nightly-1",
            "--at",
            "2026-12-01T12:00:00Z",
            "--wait",
        ],
    )
    .await;
    assert!(name.starts_with("orders-db-restore-"), "{name}");
    assert_eq!(
        api.get(&name).await.unwrap().spec.target_application_ref,
        None
    );
    assert_eq!(
        lines.next_line().await.unwrap().unwrap(),
        format!("restorejob/{name}: Pending (no phase yet)")
    );
    api.patch_status(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Succeeded"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        lines.next_line().await.unwrap().unwrap(),
        format!("restorejob/{name}: Succeeded")
    );
    let out = child.wait_with_output().await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "",
        "inside the window: no warning"
    );
}

#[tokio::test]
async fn restore_errors_name_what_was_wrong() {
    let h = Harness::start().await.unwrap();
    fixture(&h, NS).await;

    let err = failed(
        &ctl(&h, &["restore", "-n", NS, "--from", "no-such-backup"]).await,
        3,
    );
    assert!(
        err.contains("--from: Backup \"no-such-backup\" not found in namespace \"tenant-acme\""),
        "{err}"
    );
    let err = failed(
        &ctl(
            &h,
            &[
                "restore",
                "-n",
                NS,
                "--from",
                "orders-db-nightly-1",
                "--at",
                "2026-12-01 12:00",
            ],
        )
        .await,
        1,
    );
    assert!(
        err.contains("invalid value '2026-12-01 12:00' for '--at <RFC3339>'")
            && err.contains("not an RFC 3339 timestamp"),
        "{err}"
    );
    let err = failed(
        &ctl(&h, &["restore", "-n", "ghost", "--from", "x"]).await,
        3,
    );
    assert!(err.contains("namespace \"ghost\" not found"), "{err}");
    // A MariaDB backup has no point in time.
    let err = failed(
        &ctl(
            &h,
            &[
                "restore",
                "-n",
                NS,
                "--from",
                "shop-db-weekly-1",
                "--at",
                "2026-12-01T12:00:00Z",
            ],
        )
        .await,
        1,
    );
    assert!(
        err.contains(
            "--at: Backup tenant-acme/shop-db-weekly-1 was made by strategy kind \"MariaDB\""
        ),
        "{err}"
    );
    let restores = Api::<RestoreJob>::namespaced(h.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap();
    assert!(restores.items.is_empty(), "no RestoreJob after an error");
}
