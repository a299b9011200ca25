//! Scale benchmark (not a test; `hack/bench/scale/run.sh`): each daemon's release binary against
//! the kube emulator (release-built, as its own process so that its memory is measured alone)
//! holding 10,000 relevant objects. Per daemon: time to `/ready` and to caught up, CPU and API
//! requests over an idle window with no changes, RSS, the emulator's own cost, and a minimal
//! client's LIST+WATCH of the same objects as the baseline. Prints figures; asserts nothing.
//!
//! With several daemons selected, each runs in a child process of its own (a fresh emulator, a
//! fresh allocator), and the parent gathers their rows into one table.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use bench::scale::fixtures::{self, Seed};
use bench::scale::{Daemon, Options, Row, procfs, table};
use futures::StreamExt;
use harness::{AddressReport, Daemon as Process, DaemonSpec, Metrics};
use kube::api::{Api, DynamicObject, ListParams, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ApiResource;
use kube::runtime::watcher;
use serde_json::Value;

fn main() -> std::process::ExitCode {
    let opts = match Options::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            println!("{e}");
            return std::process::ExitCode::from(2);
        }
    };
    let result = if opts.only.len() == 1 {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
            .block_on(measure(opts.only[0], &opts))
            .map(|row| {
                println!("{}", row.to_line());
                println!("\n{}", table(&[row]));
            })
    } else {
        parent(&opts)
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            println!("scale-bench failed: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Runs one child per daemon, echoing its output, and prints the table of every row.
fn parent(opts: &Options) -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    let mut failed = Vec::new();
    for d in &opts.only {
        println!("===== {d} =====");
        let mut child = Command::new(&exe)
            .args(opts.child_args(*d))
            .stdout(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        let out = child.stdout.take().expect("piped stdout");
        let mut row = None;
        for line in BufReader::new(out).lines() {
            let line = line?;
            match Row::from_line(&line) {
                Some(r) => row = Some(r),
                None => println!("{line}"),
            }
        }
        let status = child.wait()?;
        match row {
            Some(r) if status.success() => rows.push(r),
            _ => failed.push(format!("{d} ({status})")),
        }
    }
    println!("\n{}", table(&rows));
    anyhow::ensure!(failed.is_empty(), "no figures for {}", failed.join(", "));
    Ok(())
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Loads the seed into an in-process emulator (every object through the emulator's own create
/// pipeline, no HTTP), puts the statuses back into its snapshot and writes the snapshot file the
/// emulator process starts from.
async fn write_snapshot(seed: &Seed, work: &Path) -> anyhow::Result<PathBuf> {
    let manifests = work.join("seed.yaml");
    let mut text = String::new();
    for m in &seed.manifests {
        text.push_str("---\n");
        text.push_str(&serde_json::to_string(m)?);
        text.push('\n');
    }
    std::fs::write(&manifests, text)?;
    let emulator = kube_emulator::Emulator::start(kube_emulator::Config {
        kubeconfig_out: Some(work.join("seed.kubeconfig")),
        crd_dirs: vec![harness::crd_dir()],
        ..Default::default()
    })
    .await?;
    let created = emulator.load_crds(&manifests)?;
    let mut snapshot = emulator.snapshot();
    emulator.shutdown().await;
    let mut restored = 0;
    for o in snapshot["objects"]
        .as_array_mut()
        .context("snapshot objects")?
    {
        if let Some(status) = seed.statuses.get(&fixtures::key_of(o)) {
            o["status"] = status.clone();
            restored += 1;
        }
    }
    anyhow::ensure!(
        restored == seed.statuses.len(),
        "{} of {} statuses found a seeded object",
        restored,
        seed.statuses.len()
    );
    let path = work.join("snapshot.json");
    std::fs::write(&path, serde_json::to_vec(&snapshot)?)?;
    println!(
        "seed: {created} objects created in process, {restored} statuses set, snapshot {:.1} MB",
        std::fs::metadata(&path)?.len() as f64 / 1e6
    );
    Ok(path)
}

async fn client_for(kubeconfig: &Path) -> anyhow::Result<kube::Client> {
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

/// A minimal controller's start: for every kind, a paged LIST then a WATCH (kube-runtime's
/// watcher, as every daemon uses), until each initial list is complete.
async fn list_and_watch(client: &kube::Client, kinds: &[ApiResource]) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let tasks = kinds.iter().map(|ar| {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
        async move {
            let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
            let mut n = 0usize;
            while let Some(ev) = stream.next().await {
                match ev? {
                    watcher::Event::InitApply(_) => n += 1,
                    watcher::Event::InitDone => return anyhow::Ok(n),
                    _ => {}
                }
            }
            anyhow::bail!("the watch of {} ended before its initial list", ar.kind)
        }
    });
    futures::future::try_join_all(tasks).await?;
    Ok(t.elapsed())
}

fn spec(d: Daemon) -> anyhow::Result<DaemonSpec> {
    let spec = DaemonSpec::new(d.name(), harness::locate_binary(d.name())?);
    Ok(match d {
        Daemon::CredentialsProjector => spec
            .env(
                "BACKUP_STORAGE_SECRET_NAMESPACE",
                fixtures::STORAGE_NAMESPACE,
            )
            .env("BACKUP_STORAGE_SECRET_NAME", fixtures::SOURCE_SECRET)
            .env(
                "BACKUP_STORAGE_SYSTEM_NAMESPACES",
                fixtures::VELERO_NAMESPACE,
            ),
        Daemon::ApidefRestarter => spec.args([
            "--namespace",
            fixtures::API_DEPLOYMENT.0,
            "--deployment",
            fixtures::API_DEPLOYMENT.1,
        ]),
        _ => spec,
    })
}

/// Whether the daemon's initial pass over the seeded objects is done, from its metrics.
fn caught_up(d: Daemon, seed: &Seed, m: &Metrics) -> bool {
    let p = d.metric_prefix();
    let runs = |controller: &str| {
        m.sum(
            &format!("{p}reconcile_runs_total"),
            &[("controller", controller)],
        )
    };
    match d {
        Daemon::StrategyRenderer => {
            m.value(&format!("{p}renders_total"), &[]) >= 1.0
                && m.get(
                    "cozystack_backup_default_objects_missing",
                    &[("backupclass", "cozy-default")],
                ) == Some(0.0)
        }
        Daemon::CredentialsProjector => {
            let tenant_projections: f64 = m
                .samples()
                .iter()
                .filter(|s| {
                    s.name == "cozystack_backup_credentials_projection_successes_total"
                        && s.labels
                            .get("namespace")
                            .is_some_and(|n| n.starts_with("tenant-p"))
                })
                .map(|s| s.value)
                .sum();
            runs("backupjobs") >= seed.reconciles as f64
                && tenant_projections >= seed.projections as f64
        }
        Daemon::ApidefRestarter => {
            m.value(&format!("{p}hash_computations_total"), &[]) >= 1.0
                && m.value(&format!("{p}patches_total"), &[])
                    + m.value(&format!("{p}skips_total"), &[])
                    >= 1.0
        }
        Daemon::BackupRunner => runs("backupjobs") >= seed.reconciles as f64,
        Daemon::RestoreOrchestrator => runs("restorejobs") >= seed.reconciles as f64,
        Daemon::RetentionCleaner => {
            runs("sweep") >= 1.0
                && m.sum(&format!("{p}deletions_total"), &[]) >= seed.deletions as f64
        }
    }
}

async fn metrics(admin: &harness::Admin) -> Metrics {
    let admin = admin.clone();
    tokio::task::spawn_blocking(move || admin.metrics())
        .await
        .unwrap_or_default()
}

/// The audit log's lines from `from` on: how many, and the commonest `verb resource (agent)`.
fn audit_since(path: &Path, from: usize) -> (usize, Vec<(String, usize)>) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for l in lines.iter().skip(from) {
        let v: Value = serde_json::from_str(l).unwrap_or_default();
        let agent = v["userAgent"].as_str().unwrap_or_default();
        let agent = agent.split('/').next().unwrap_or_default();
        // A kind that is not served has no resource in the log: show its path.
        let what = v["resource"]
            .as_str()
            .filter(|r| !r.is_empty())
            .or(v["path"].as_str())
            .unwrap_or("?");
        let code = v["code"].as_u64().unwrap_or_default();
        let key = format!(
            "{} {what} → {code} ({agent})",
            v["verb"].as_str().unwrap_or("?")
        );
        *counts.entry(key).or_default() += 1;
    }
    let mut top: Vec<(String, usize)> = counts.into_iter().collect();
    top.sort_by_key(|t| std::cmp::Reverse(t.1));
    top.truncate(6);
    (lines.len(), top)
}

async fn measure(d: Daemon, opts: &Options) -> anyhow::Result<Row> {
    let work = std::env::temp_dir().join(format!("scale-bench-{}-{d}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work)?;
    let result = measure_in(d, opts, &work).await;
    if result.is_ok() {
        let _ = std::fs::remove_dir_all(&work);
    } else {
        println!("work directory kept: {}", work.display());
    }
    result
}

async fn measure_in(d: Daemon, opts: &Options, work: &Path) -> anyhow::Result<Row> {
    let seed = fixtures::seed(d, opts.objects);
    println!("{d}: {}", seed.describe);
    let t = Instant::now();
    let snapshot = write_snapshot(&seed, work).await?;
    println!("seed: {:.2} s", secs(t.elapsed()));

    // The emulator as its own process, started from the snapshot.
    let kubeconfig = work.join("kubeconfig");
    let audit = work.join("audit.jsonl");
    let mut emu_spec = DaemonSpec::new("kube-emulator", harness::locate_binary("kube-emulator")?)
        .args([
            "--kubeconfig-out".to_string(),
            kubeconfig.display().to_string(),
        ])
        .args(["--snapshot".to_string(), snapshot.display().to_string()])
        .args([
            "--crds".to_string(),
            harness::crd_dir().display().to_string(),
        ])
        .args(["--audit-log".to_string(), audit.display().to_string()]);
    emu_spec.ready_path = "/readyz".into();
    emu_spec.address = AddressReport::Kubeconfig(kubeconfig.clone());
    let t = Instant::now();
    let mut emulator = Process::spawn(emu_spec, &kubeconfig, work)?;
    emulator.wait_ready(Duration::from_secs(120)).await?;
    let emu_pid = emulator.pid().context("emulator pid")?;
    let (emu_rss, _) = procfs::memory_mib(emu_pid).context("emulator memory")?;
    println!(
        "emulator: ready from the snapshot in {:.2} s, RSS {emu_rss:.1} MiB",
        secs(t.elapsed())
    );
    let client = client_for(&kubeconfig).await?;

    // The emulator's own cost: a plain LIST of the objects, and opening a watch.
    let mut lists = Vec::new();
    let mut rv = String::new();
    for _ in 0..3 {
        let t = Instant::now();
        let mut n = 0;
        for ar in &seed.measured {
            let list = Api::<DynamicObject>::all_with(client.clone(), ar)
                .list(&ListParams::default())
                .await?;
            n += list.items.len();
            rv = list.metadata.resource_version.unwrap_or_default();
        }
        lists.push(secs(t.elapsed()));
        anyhow::ensure!(
            n == seed.objects,
            "listed {n} objects, seeded {}",
            seed.objects
        );
    }
    let list_s = median(lists);
    let api = Api::<DynamicObject>::all_with(client.clone(), &seed.measured[0]);
    let t = Instant::now();
    let stream = api.watch(&WatchParams::default(), &rv).await?;
    let watch_open_s = secs(t.elapsed());
    drop(stream);
    println!(
        "emulator: plain LIST of {} objects {:.0} ms (median of 3), watch opened in {:.1} ms",
        seed.objects,
        list_s * 1e3,
        watch_open_s * 1e3
    );

    // The baseline: a minimal client's paged LIST + WATCH of the same objects.
    let mut baselines = Vec::new();
    for _ in 0..3 {
        baselines.push(secs(list_and_watch(&client, &seed.measured).await?));
    }
    let baseline_s = median(baselines);
    println!(
        "baseline: LIST (pages of 500) + WATCH of the same objects by a minimal client: {baseline_s:.2} s (median of 3)"
    );

    // The daemon.
    let t0 = Instant::now();
    let mut daemon = Process::spawn(spec(d)?, &kubeconfig, work)?;
    daemon.wait_ready(Duration::from_secs(600)).await?;
    let ready_s = secs(t0.elapsed());
    let pid = daemon.pid().context("daemon pid")?;
    let admin = daemon.admin().await?;
    loop {
        if caught_up(d, &seed, &metrics(&admin).await) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(900) {
            println!("{}", metrics(&admin).await.text());
            anyhow::bail!(
                "{d} did not catch up in 900 s; log: {}",
                daemon.log_path.display()
            );
        }
        anyhow::ensure!(
            daemon.is_running(),
            "{d} exited; log: {}",
            daemon.log_path.display()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let caught_up_s = secs(t0.elapsed());
    let catch_up_cpu_s = procfs::cpu_seconds(pid).unwrap_or(f64::NAN);
    let (rss_mib, _) = procfs::memory_mib(pid).context("daemon memory")?;
    println!(
        "{d}: ready after {ready_s:.2} s, caught up after {caught_up_s:.2} s ({catch_up_cpu_s:.2} CPU s), RSS {rss_mib:.1} MiB"
    );

    // Let the daemon's own follow-ups (the writes of its first pass coming back as events, a
    // debounced pass after them) settle: five seconds without a CPU tick, at most a minute.
    let settle = Instant::now();
    loop {
        let before = procfs::cpu_seconds(pid).unwrap_or_default();
        tokio::time::sleep(Duration::from_secs(5)).await;
        let after = procfs::cpu_seconds(pid).unwrap_or_default();
        if after - before <= 0.01 || settle.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    println!("settled {:.1} s after catching up", secs(settle.elapsed()));

    // What catching up and settling cost the API server (the baseline client's requests
    // included, under its own agent).
    let (catch_up_requests, top) = audit_since(&audit, 0);
    println!("requests until settled: {catch_up_requests}");
    for (what, n) in top {
        println!("  {n:>6}  {what}");
    }

    // The idle window: nothing changes in the cluster.
    let (audit_from, _) = audit_since(&audit, usize::MAX);
    let cpu0 = procfs::cpu_seconds(pid).unwrap_or_default();
    let emu_cpu0 = procfs::cpu_seconds(emu_pid).unwrap_or_default();
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(opts.idle_seconds)).await;
    let idle_window_s = secs(t.elapsed());
    let idle_cpu_s = procfs::cpu_seconds(pid).unwrap_or_default() - cpu0;
    let emu_idle_cpu_s = procfs::cpu_seconds(emu_pid).unwrap_or_default() - emu_cpu0;
    let (audit_to, top) = audit_since(&audit, audit_from);
    let idle_requests = audit_to.saturating_sub(audit_from) as u64;
    println!(
        "idle {idle_window_s:.0} s: daemon CPU {idle_cpu_s:.2} s ({:.2}% of a core), {idle_requests} API requests, emulator CPU {emu_idle_cpu_s:.2} s",
        idle_cpu_s / idle_window_s * 100.0
    );
    for (what, n) in top {
        println!("  {n:>6}  {what}");
    }
    let (rss_end, hwm_mib) = procfs::memory_mib(pid).context("daemon memory")?;
    let (emu_rss_end, emu_hwm) = procfs::memory_mib(emu_pid).unwrap_or_default();
    println!(
        "{d}: RSS {rss_end:.1} MiB after the idle window, peak (VmHWM) {hwm_mib:.1} MiB; emulator RSS {emu_rss_end:.1} MiB, peak {emu_hwm:.1} MiB"
    );
    let reconcile_errors = metrics(&admin).await.sum(
        &format!("{}reconcile_failures_total", d.metric_prefix()),
        &[],
    );
    if reconcile_errors > 0.0 {
        println!("{d}: {reconcile_errors} failed reconciles (see its log)");
    }
    daemon.kill().await?;
    emulator.kill().await?;
    Ok(Row {
        daemon: d.name().into(),
        objects: seed.describe.clone(),
        list_s,
        watch_open_s,
        emulator_rss_mib: emu_rss,
        baseline_s,
        ready_s,
        caught_up_s,
        catch_up_cpu_s,
        idle_cpu_s,
        idle_window_s,
        idle_requests,
        rss_mib,
        hwm_mib,
    })
}
