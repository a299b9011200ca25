//! `status` against the emulator: golden tables, JSON, one application, every namespace, and
//! errors for bad input.

use crate::common;

use common::{ctl, failed, fixture, golden, ok};
use harness::Harness;
use serde_json::Value;

#[tokio::test]
async fn tables_match_the_golden_files() {
    let h = Harness::start().await.unwrap();
    fixture(&h, "tenant-acme").await;
    fixture(&h, "tenant-beta").await;

    golden(
        "status.txt",
        &ok(&ctl(&h, &["status", "-n", "tenant-acme"]).await),
    );
    golden(
        "status-all-namespaces.txt",
        &ok(&ctl(&h, &["status", "-A"]).await),
    );
    golden(
        "status-one-app.txt",
        &ok(&ctl(&h, &["status", "-n", "tenant-acme", "shop-db"]).await),
    );
}

#[tokio::test]
async fn json_carries_every_field() {
    let h = Harness::start().await.unwrap();
    fixture(&h, "tenant-acme").await;
    let run = ctl(&h, &["status", "-n", "tenant-acme", "-o", "json"]).await;
    let out = ok(&run);
    // CloudNativePG is not installed here: its kinds count as no object, the window comes from
    // the catalog, and one note says so (kube-apiserver answers those kinds with a plain-text 404).
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(
        stderr.trim_end(),
        "Note: the API server does not serve clusters.postgresql.cnpg.io/v1 or \
         objectstores.barmancloud.cnpg.io/v1 (CloudNativePG or its Barman Cloud plugin is not \
         installed), so the window comes from the catalog Backups alone.",
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    let items = v["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{out}");
    let pg = &items[0];
    assert_eq!(pg["kind"], "Postgres");
    assert_eq!(pg["name"], "orders-db");
    assert_eq!(pg["plans"], serde_json::json!(["orders-db-nightly"]));
    assert_eq!(pg["lastBackup"]["name"], "orders-db-nightly-2");
    assert_eq!(pg["lastBackup"]["takenAt"], "2026-12-02T02:00:00Z");
    assert_eq!(pg["recoverableWindow"]["server"], "postgres-orders-db");
    assert_eq!(pg["recoverableWindow"]["from"], "2026-12-01T02:00:00Z");
    assert_eq!(pg["recoverableWindow"]["to"], "2026-12-02T02:00:00Z");
    assert_eq!(pg["lastFailure"]["job"], "orders-db-manual-1");
    assert!(
        pg["lastFailure"]["message"]
            .as_str()
            .unwrap()
            .contains("barman-cloud-backup exited 1")
    );
    let maria = &items[1];
    assert_eq!(maria["kind"], "MariaDB");
    assert_eq!(maria["runningJobs"], serde_json::json!(["shop-db-ad-hoc"]));
    assert!(maria.get("recoverableWindow").is_none());

    let yaml = ok(&ctl(&h, &["status", "-n", "tenant-acme", "-o", "yaml"]).await);
    assert!(yaml.contains("name: orders-db-nightly-2"), "{yaml}");
}

#[tokio::test]
async fn bad_input_is_named() {
    let h = Harness::start().await.unwrap();
    fixture(&h, "tenant-acme").await;

    let err = failed(&ctl(&h, &["status", "-n", "no-such-tenant"]).await, 3);
    assert!(
        err.contains("namespace \"no-such-tenant\" not found"),
        "{err}"
    );

    // An application with nothing: an empty result is not an error, and says so on stderr.
    let out = ctl(&h, &["status", "-n", "tenant-acme", "nothing-here"]).await;
    assert_eq!(ok(&out), "");
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("No applications named \"nothing-here\" with Backups, BackupJobs or Plans found in tenant-acme namespace."),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let err = failed(&ctl(&h, &["status", "-o", "wide"]).await, 1);
    assert!(
        err.contains("invalid value 'wide' for '--output <OUTPUT>'"),
        "{err}"
    );

    let err = failed(
        &ctl(&h, &["status", "--kubeconfig", "/nonexistent/kc"]).await,
        1,
    );
    assert!(err.contains("read --kubeconfig /nonexistent/kc"), "{err}");
}
