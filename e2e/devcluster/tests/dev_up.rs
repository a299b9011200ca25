//! The dev control plane command works end to end: `devcluster --check` starts the emulator with
//! deploy/crds, writes a kubeconfig that kubectl can use, starts every listed daemon, runs the demo
//! backup and the demo point-in-time restore to `Succeeded`, watches the retention-cleaner delete the
//! demo's failed BackupJob, and exits 0. After that work it scrapes every daemon's `/metrics`
//! (`--metrics-dir`): every metric the alerts and the dashboard in deploy/monitoring select must be
//! among the exported names.

use std::process::Command;

#[test]
fn check_mode_starts_everything_and_prints_next_steps() {
    let dev_dir = std::env::temp_dir().join(format!("devcluster-test-{}", std::process::id()));
    let metrics_dir = dev_dir.join("metrics");
    let out = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["--check", "--port", "0", "--dev-dir"])
        .arg(&dev_dir)
        .arg("--metrics-dir")
        .arg(&metrics_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kubeconfig = dev_dir.join("kubeconfig");
    assert!(
        stdout.contains(&format!(
            "kubectl --kubeconfig {} get backupclasses",
            kubeconfig.display()
        )),
        "{stdout}"
    );
    assert!(stdout.contains("check passed"), "{stdout}");
    // The demo: the documentation's BackupJob ran to the end and its base backup is in the bucket.
    assert!(
        stdout.contains("BackupJob tenant-acme/ad-hoc: Succeeded"),
        "{stdout}"
    );
    assert!(
        stdout.contains("barman-cloud-backup-list of the bucket:"),
        "{stdout}"
    );
    // The point-in-time restore of the documentation: the copy holds the marker, not the later row.
    assert!(
        stdout.contains("RestoreJob tenant-acme/orders-db-pitr: Succeeded"),
        "{stdout}"
    );
    assert!(
        stdout.contains("orders-db-copy rows: alice,bob,carol,marker\n"),
        "{stdout}"
    );
    // The failed-backup cleanup: the demo's failed BackupJob is deleted after the dev TTL, with an
    // Event that says why.
    assert!(
        stdout.contains("retention-cleaner deleted BackupJob tenant-acme/orders-db-typo: failed BackupJob orders-db-typo ("),
        "{stdout}"
    );
    // The tenant's view through the kubectl plugin: orders-db with its last backup and a
    // recoverable window (two RFC 3339 times joined by `..`).
    let status = stdout
        .split("Demo: kubectl cozy-backups status -n tenant-acme\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no status table in:\n{stdout}"));
    let row = status
        .lines()
        .find(|l| l.trim_start().starts_with("Postgres/orders-db "))
        .unwrap_or_else(|| panic!("no orders-db row in:\n{status}"));
    assert!(row.contains("Z..20"), "no recoverable window in {row:?}");
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    // Authentication is on: https with the emulator's CA (kubectl sends credentials only over TLS) and
    // the admin token.
    assert!(text.contains("server: https://127.0.0.1:"), "{text}");
    assert!(text.contains("certificate-authority-data: ") && text.contains("    token: "));
    monitoring_names_are_exported(&metrics_dir);
    let _ = std::fs::remove_dir_all(&dev_dir);
}

/// Every metric name deploy/monitoring's alerts and dashboard select is one a daemon exported
/// after the demos (or Prometheus' own, or a rare metric named by a constant in the source).
fn monitoring_names_are_exported(metrics_dir: &std::path::Path) {
    let mut scraped = std::collections::BTreeSet::new();
    let mut files = 0;
    for e in std::fs::read_dir(metrics_dir).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        scraped.extend(monitoring_checks::exposition_names(&text));
        files += 1;
    }
    assert_eq!(
        files,
        devcluster::DAEMONS.len(),
        "one exposition per daemon"
    );
    let referenced = monitoring_checks::referenced_names().unwrap();
    assert!(referenced.len() > 20, "{referenced:?}");
    let problems = monitoring_checks::check_names(&referenced, &scraped);
    assert!(
        problems.is_empty(),
        "{}\nexported: {scraped:?}",
        problems.join("\n")
    );
}

#[test]
fn exit_after_serves_until_the_deadline() {
    let dev_dir = std::env::temp_dir().join(format!("devcluster-exit-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["--exit-after", "1", "--no-demo", "--port", "0", "--dev-dir"])
        .arg(&dev_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("Stopping after 1s."), "{stdout}");
    let _ = std::fs::remove_dir_all(&dev_dir);
}

/// `--ha`: every backup daemon runs two replicas on the lease server, exactly one of each leads,
/// and the summary says how to fail one over.
#[test]
fn ha_mode_runs_two_replicas_per_daemon_with_one_leader_each() {
    let dev_dir = std::env::temp_dir().join(format!("devcluster-ha-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["--check", "--ha", "--no-demo", "--port", "0", "--dev-dir"])
        .arg(&dev_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("High availability (--ha)"), "{stdout}");
    for entry in devcluster::DAEMONS
        .iter()
        .filter(|e| devcluster::is_replicated(e))
    {
        for replica in ["a", "b"] {
            assert!(
                stdout.contains(&format!("daemon:      {}-{replica} (admin", entry.bin)),
                "{} replica {replica} missing:\n{stdout}",
                entry.bin
            );
        }
        let line = stdout
            .lines()
            .find(|l| {
                l.trim_start().starts_with(&format!("{} ", entry.bin)) && l.contains(" leader ")
            })
            .unwrap_or_else(|| panic!("no leader line for {}:\n{stdout}", entry.bin));
        assert!(
            line.contains(&format!("leader {}-a", entry.bin))
                || line.contains(&format!("leader {}-b", entry.bin)),
            "{line}"
        );
    }
    assert!(stdout.contains("kill -TERM "), "{stdout}");
    assert!(stdout.contains("kill -9 "), "{stdout}");
    assert!(stdout.contains("check passed"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dev_dir);
}
