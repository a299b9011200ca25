//! The dev control plane command works end to end: `devcluster --check` starts the emulator with
//! deploy/crds, writes a kubeconfig that kubectl can use, starts every listed daemon, runs the demo
//! backup and the demo point-in-time restore to `Succeeded`, seeds and plays the MariaDB demo (dump,
//! restore into a copy and in place) and the Etcd demo (snapshot, in-place restore), watches the
//! retention-cleaner delete the demo's failed BackupJob, and exits 0. After that work it scrapes every daemon's `/metrics`
//! (`--metrics-dir`): every metric the alerts and the dashboard in deploy/monitoring select must be
//! among the exported names. With `--real-api` the same check passes on kube-apiserver.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The whole demo runs in a private dev directory, as `mktemp -d` makes them (mode 0700): as root
/// PostgreSQL and barman-cloud run as the `postgres` user, who cannot enter it, and must still
/// archive, back up and restore over TLS with the dev CA.
#[test]
fn check_mode_starts_everything_and_prints_next_steps() {
    let stdout = check("devcluster-test", &[]);
    assert!(
        stdout.contains("kube emulator in devcluster (pid "),
        "{stdout}"
    );
}

/// The same check on kube-apiserver, etcd and kube-controller-manager (`--real-api`), when
/// their binaries are there (`COZY_KUBE_BIN`, as hack/test-real-api.sh sets it); skipped with a
/// note otherwise.
#[test]
fn check_mode_on_the_real_api() {
    let bin = std::env::var_os("COZY_KUBE_BIN").map(std::path::PathBuf::from);
    if !bin.is_some_and(|b| b.join("kube-apiserver").is_file()) {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "check_mode_on_the_real_api: skipped, COZY_KUBE_BIN names no kube-apiserver"
        );
        return;
    }
    let stdout = check("devcluster-real", &["--real-api"]);
    assert!(stdout.contains("kube-apiserver v1.37"), "{stdout}");
    for process in [
        "etcd (pid ",
        "kube-apiserver (pid ",
        "kube-controller-manager (pid ",
    ] {
        assert!(stdout.contains(process), "{process}: {stdout}");
    }
}

/// Runs `devcluster --check` with `extra` arguments in a fresh private directory named after
/// `name`, asserts everything the check shows, and answers its stdout.
fn check(name: &str, extra: &[&str]) -> String {
    use std::os::unix::fs::DirBuilderExt as _;
    let dev_dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dev_dir);
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dev_dir)
        .unwrap();
    let metrics_dir = dev_dir.join("metrics");
    let out = Command::new(env!("CARGO_BIN_EXE_devcluster"))
        .args(["--check", "--port", "0", "--dev-dir"])
        .arg(&dev_dir)
        .arg("--metrics-dir")
        .arg(&metrics_dir)
        .args(extra)
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
    // The MariaDB and Etcd seeds: shop-db's rows (through the mariadb client and the Secret's
    // password), the keys of the tenant's etcd, and the commands to look at them.
    for seeded in [
        "  shop-db:     apples,pears,plums (MariaDB 127.0.0.1:",
        "  etcd:        3 keys under config/ (member http://127.0.0.1:",
        "-n tenant-acme get secret mariadb-shop-db-credentials -o jsonpath='{.data.root}' | base64 -d)\" mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P ",
        "-n tenant-acme get service etcd-client -o jsonpath='{.metadata.annotations.operator-sims\\.cozy-backups\\.io/endpoint}')\" get --prefix config/",
    ] {
        assert!(stdout.contains(seeded), "{seeded}: {stdout}");
    }
    // The MariaDB demo: the dump in the bucket, restored into the copy, then in place over a
    // changed row; the Etcd demo: a snapshot, a changed key, restored in place. In this order.
    let mut at = 0;
    for step in [
        "Demo (MariaDB): BackupJob tenant-acme/shop-db-adhoc of shop-db created\n",
        "  BackupJob tenant-acme/shop-db-adhoc: Succeeded\n",
        "  dump in the bucket: s3://bucket-",
        "  RestoreJob tenant-acme/shop-db-to-copy: Succeeded\n",
        "  shop-db-copy rows: apples,pears,plums\n",
        "  row 2 of shop-db changed: apples,oops,plums\n",
        "  RestoreJob tenant-acme/shop-db-in-place: Succeeded\n",
        "  shop-db rows: apples,pears,plums\n",
        "Demo (Etcd): BackupJob tenant-acme/etcd-adhoc of etcd created\n",
        "  BackupJob tenant-acme/etcd-adhoc: Succeeded\n",
        "  snapshot in the bucket: s3://bucket-",
        "  config/greeting changed: changed\n",
        "  RestoreJob tenant-acme/etcd-in-place: Succeeded\n",
        "  etcdctl get config/greeting: hello\n",
    ] {
        let found = stdout[at..]
            .find(step)
            .unwrap_or_else(|| panic!("{step:?} not after byte {at} of:\n{stdout}"));
        at += found + step.len();
    }
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
    // shop-db and etcd with the demos' backups.
    for (app, backup) in [
        ("MariaDB/shop-db ", "shop-db-adhoc"),
        ("Etcd/etcd ", "etcd-adhoc"),
    ] {
        let row = status
            .lines()
            .find(|l| l.trim_start().starts_with(app))
            .unwrap_or_else(|| panic!("no {app}row in:\n{status}"));
        assert!(row.contains(backup), "{row:?}");
    }
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    // Authentication is on: https with the emulator's CA (kubectl sends credentials only over TLS) and
    // the admin token.
    assert!(text.contains("server: https://127.0.0.1:"), "{text}");
    assert!(text.contains("certificate-authority-data: ") && text.contains("    token: "));
    assert!(stdout.contains("  started in:  "), "{stdout}");
    monitoring_names_are_exported(&metrics_dir);
    let _ = std::fs::remove_dir_all(&dev_dir);
    stdout.into_owned()
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
    // When it will stop, at start; that it stops, once it does; then that it stopped.
    let will = stdout
        .find("Will stop at ")
        .unwrap_or_else(|| panic!("{stdout}"));
    let stopping = stdout
        .find("Stopping: --exit-after 1s elapsed.\n")
        .unwrap_or_else(|| panic!("{stdout}"));
    let stopped = stdout
        .find("Stopped.\n")
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(will < stopping && stopping < stopped, "{stdout}");
    assert!(stdout.contains("(in 1s, --exit-after)"), "{stdout}");
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
    // The lease server is secured as in production: every replica reached it over TLS with its
    // ServiceAccount's token (a leader per component below proves they were let in).
    assert!(
        stdout.contains("on the lease server at https://127.0.0.1:")
            && stdout.contains("(TLS, each replica authenticated by its ServiceAccount's token)"),
        "{stdout}"
    );
    let lease_log = std::fs::read_to_string(dev_dir.join("logs/lease-server.log")).unwrap();
    assert!(
        lease_log.contains(r#""transport":"tls""#) && !lease_log.contains("insecure mode"),
        "{lease_log}"
    );
    assert!(dev_dir.join("lease-tokens/backup-runner").is_file());
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

/// Processes of the plane started in `dev_dir`: any whose command line, environment (the
/// daemons' `KUBECONFIG`, which every process they start inherits) or working directory names it.
/// PostgreSQL's own children rename themselves (`postgres: archiver`), so the command line alone
/// would miss them.
fn processes_of(dev_dir: &std::path::Path) -> Vec<String> {
    let needle = dev_dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let p = entry.path();
        let read = |f: &str| {
            String::from_utf8_lossy(&std::fs::read(p.join(f)).unwrap_or_default())
                .replace('\0', " ")
        };
        let cmdline = read("cmdline");
        let cwd = std::fs::read_link(p.join("cwd")).unwrap_or_default();
        if cmdline.contains(&needle)
            || read("environ").contains(&needle)
            || cwd.starts_with(dev_dir)
        {
            found.push(format!("{} {cmdline}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// No PostgreSQL server, barman command, simulator (with the S3 server in it) or daemon outlives
/// the dev control plane, whether its process group gets SIGTERM or SIGINT (Ctrl-C), or the
/// plane alone is SIGKILLed (its daemons, and through them their children, are then told by the
/// kernel). Each case first puts the data plane to work as when the defect was seen (a base
/// backup waiting on an archiver that is stuck in its archive command), sees those processes
/// running, ends the plane, then expects none of its processes left within a bounded wait.
#[test]
fn no_process_outlives_the_plane() {
    use rustix::process::{Pid, Signal};
    use std::io::BufRead as _;
    use std::os::unix::process::CommandExt as _;
    for (case, signal, group) in [
        ("term-group", Signal::TERM, true),
        ("int-group", Signal::INT, true),
        ("kill-parent", Signal::KILL, false),
    ] {
        // Short: PostgreSQL's socket path below it must fit in 107 bytes.
        let dev_dir = std::env::temp_dir().join(format!("dc-{case}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dev_dir);
        let stderr_path = dev_dir.with_extension("stderr");
        let mut child = Command::new(env!("CARGO_BIN_EXE_devcluster"))
            .args(["--no-demo", "--port", "0", "--dev-dir"])
            .arg(&dev_dir)
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .process_group(0)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Generous: a daemon binary older than its sources is rebuilt on the way up.
        let deadline = Instant::now() + Duration::from_secs(600);
        let mut seen = String::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) if line == "Press Ctrl-C to stop." => break,
                Ok(line) => seen.push_str(&(line + "\n")),
                Err(e) => {
                    let _ = child.kill();
                    let stderr = std::fs::read_to_string(&stderr_path).unwrap_or_default();
                    panic!("{case}: the plane did not come up ({e}):\n{seen}\n{stderr}");
                }
            }
        }
        if let Err(e) = start_a_stuck_backup(&dev_dir) {
            let _ = child.kill();
            panic!("{case}: {e}\n{:#?}", processes_of(&dev_dir));
        }
        let pid = Pid::from_raw(child.id() as i32).unwrap();
        if group {
            rustix::process::kill_process_group(pid, signal).unwrap();
        } else {
            rustix::process::kill_process(pid, signal).unwrap();
        }
        let status = child.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let left = processes_of(&dev_dir);
            if left.is_empty() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{case}: processes of the plane left 60 s after it ended ({status}): {left:#?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = std::fs::remove_dir_all(&dev_dir);
        let _ = std::fs::remove_file(&stderr_path);
    }
}

/// Makes `orders-db`'s archive command hang (the simulator's archive-delay control, one hour)
/// and starts a BackupJob of it through the platform: the runner turns on the Cluster's WAL
/// archiving (until then the simulator writes no archive configuration, so the delay has nothing
/// to act on) and starts a base backup, which then waits for its last WAL segment to be archived.
/// Returns once the plane's processes include that archive command, the `barman-cloud-backup` and
/// a PostgreSQL server.
fn start_a_stuck_backup(dev_dir: &Path) -> Result<(), String> {
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let client = runtime.block_on(async {
        let kubeconfig = kube::config::Kubeconfig::read_from(dev_dir.join("kubeconfig"))
            .map_err(|e| e.to_string())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .map_err(|e| e.to_string())?;
        kube::Client::try_from(config).map_err(|e| e.to_string())
    })?;
    let api = |group, version, kind| {
        Api::<DynamicObject>::namespaced_with(
            client.clone(),
            devcluster::TENANT,
            &ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind)),
        )
    };
    let annotations = serde_json::json!({"metadata": {"annotations": {
        operator_sims::cnpg::ANNOTATION_ARCHIVE_DELAY: "3600s"}}});
    runtime
        .block_on(api("postgresql.cnpg.io", "v1", "Cluster").patch(
            "postgres-orders-db",
            &PatchParams::default(),
            &Patch::Merge(&annotations),
        ))
        .map_err(|e| format!("annotating the Cluster: {e}"))?;
    let job = serde_json::from_value(serde_json::json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
        "metadata": {"name": "stuck"},
        "spec": {"backupClassName": "cozy-default", "applicationRef": {
            "apiGroup": "apps.cozystack.io", "kind": "Postgres", "name": "orders-db"}}}))
    .map_err(|e| e.to_string())?;
    runtime
        .block_on(
            api("backups.cozystack.io", "v1alpha1", "BackupJob").create(&Default::default(), &job),
        )
        .map_err(|e| format!("creating the BackupJob: {e}"))?;
    poll(
        "a barman-cloud-backup waiting on a stuck archive command",
        || {
            let running = processes_of(dev_dir);
            let has = |s: &str| running.iter().any(|p| p.contains(s));
            (has("barman-cloud-backup") && has("bin/archive-wal") && has("postgres -D "))
                .then_some(())
        },
    )
}

/// Polls `ready` every 200 ms for up to two minutes.
fn poll(what: &str, mut ready: impl FnMut() -> Option<()>) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(120);
    while ready().is_none() {
        if Instant::now() >= deadline {
            return Err(format!("timed out waiting for {what}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}
