//! Stage one of the dev control plane: the API server it runs on ([`Plane`]: the kube emulator or
//! kube-apiserver), how each daemon is started so that it ends with the plane, the lease tokens of
//! `--ha`, and the reports on the running daemons (leaders, `/metrics`).

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use kube::api::Api;

use crate::{Args, DAEMONS, HA_LEASE_TTL, is_replicated};

/// The API server the plane runs on.
pub(crate) enum Plane {
    /// The kube emulator, in this process.
    Emulator(Box<kube_emulator::Running>),
    /// kube-apiserver, etcd and kube-controller-manager (`--real-api`), started by the harness's
    /// real backend; its watchdog stops them and removes their directory when this process ends.
    Real(&'static harness::ControlPlane),
}

impl Plane {
    /// Starts the API server with the CRDs of `args.crds` served and writes the admin's kubeconfig
    /// to `kubeconfig`.
    pub(crate) async fn start(args: &Args, kubeconfig: &std::path::Path) -> anyhow::Result<Self> {
        if !args.real_api {
            let config = kube_emulator::Config {
                port: args.port,
                kubeconfig_out: Some(kubeconfig.to_path_buf()),
                crd_dirs: vec![args.crds.clone()],
                snapshot: args.persist.then(|| args.dev_dir.join("snapshot.json")),
                audit_log: Some(args.dev_dir.join("audit.jsonl")),
                ..Default::default()
            };
            let emulator = kube_emulator::Emulator::start(config)
                .await
                .context("starting the kube emulator")?;
            return Ok(Self::Emulator(Box::new(emulator)));
        }
        anyhow::ensure!(
            !args.persist,
            "--persist keeps the emulator's objects; the real API server keeps nothing across \
             restarts here (etcd runs in a temporary directory)"
        );
        anyhow::ensure!(
            args.port == 0,
            "--port {}: the real API server listens on a free port of its own choosing",
            args.port
        );
        let cp = tokio::task::spawn_blocking(harness::ControlPlane::shared)
            .await
            .context("starting the real control plane")?
            .context("starting the real control plane (hack/install-kube.sh builds it)")?;
        if args.crds != harness::crd_dir() {
            harness::crds::apply_dir(&cp.client(&cp.admin_token), &args.crds)
                .await
                .with_context(|| format!("applying the CRDs of {}", args.crds.display()))?;
        }
        harness::real::write_admin_kubeconfig(cp, kubeconfig)
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
        Ok(Self::Real(cp))
    }

    /// A client of the admin.
    pub(crate) fn client(&self) -> kube::Client {
        match self {
            Self::Emulator(e) => e.client(),
            Self::Real(cp) => cp.client(&cp.admin_token),
        }
    }

    /// The API server's URL.
    pub(crate) fn url(&self) -> String {
        match self {
            Self::Emulator(e) => e.url(),
            Self::Real(cp) => cp.url.clone(),
        }
    }

    /// What the plane's API server is and costs, for the summary: one line per process with its
    /// resident memory (the emulator runs inside this process).
    pub(crate) fn describe(&self) -> Vec<String> {
        match self {
            Self::Emulator(_) => vec![format!(
                "kube emulator in devcluster (pid {}): {}",
                std::process::id(),
                harness::rss(Some(std::process::id()))
            )],
            Self::Real(cp) => {
                let mut lines = vec![format!(
                    "kube-apiserver {} with etcd and kube-controller-manager (binaries {}, audit log {})",
                    cp.version,
                    cp.bin_dir.display(),
                    cp.audit_log.display()
                )];
                lines.extend(
                    cp.pids
                        .iter()
                        .zip(cp.rss())
                        .map(|((name, pid), (_, rss))| format!("{name} (pid {pid}): {rss}")),
                );
                lines
            }
        }
    }

    /// Stops the API server: the emulator at once; the real processes get SIGTERM (the harness's
    /// watchdog kills what is left and removes their directory once this process has ended).
    pub(crate) async fn shutdown(self) {
        match self {
            Self::Emulator(e) => e.shutdown().await,
            Self::Real(cp) => {
                for (_, pid) in &cp.pids {
                    if let Some(pid) = i32::try_from(*pid)
                        .ok()
                        .and_then(rustix::process::Pid::from_raw)
                    {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                    }
                }
            }
        }
    }
}

/// `spec` run through `setpriv --pdeathsig TERM`: the daemon gets SIGTERM when this process ends,
/// however it ends (also SIGKILL), and shuts down as on Ctrl-C; the simulators stop their
/// PostgreSQL servers, which in turn die with the simulators (docs/dataplane.md, "No process
/// outlives the plane"). The kernel signals when the thread that spawned the daemon exits: they are
/// all spawned from [`crate::run`], which runs on the main thread for the process's whole life. The
/// daemon keeps the identity its own binary gives it.
pub(crate) fn ending_with_the_plane(
    mut spec: harness::DaemonSpec,
) -> anyhow::Result<harness::DaemonSpec> {
    let setpriv = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(operator_sims::pg::SETPRIV))
        .find(|p| p.is_file())
        .context(
            "setpriv is not on PATH: the dev control plane starts its daemons through it so that \
             they stop when it does; install util-linux (Debian: apt-get install util-linux)",
        )?;
    let component = spec.component();
    let real = std::mem::replace(&mut spec.bin, setpriv);
    spec.args.splice(
        0..0,
        [
            "--pdeathsig".to_owned(),
            "TERM".to_owned(),
            "--".to_owned(),
            real.display().to_string(),
        ],
    );
    Ok(match component {
        Some(c) => spec.identity(&c),
        None => spec,
    })
}

/// A token of `component`'s ServiceAccount (provisioned already) for the lease server's audience,
/// issued through TokenRequest and written to `<dev-dir>/lease-tokens/<component>` (mode 0600).
pub(crate) async fn lease_token(
    client: &kube::Client,
    component: &str,
    dev_dir: &std::path::Path,
) -> anyhow::Result<PathBuf> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let (ns, name) = harness::identity::service_account(component);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![harness::LEASE_AUDIENCE.to_owned()],
            expiration_seconds: Some(7 * 24 * 3600),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create_token_request(&name, &Default::default(), &request)
        .await?
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .with_context(|| format!("the TokenRequest for {ns}/{name} answered no token"))?;
    let dir = dev_dir.join("lease-tokens");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(component);
    let _ = std::fs::remove_file(&path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(token.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// Under `--ha`: which replica leads each component (waiting until each has exactly one leader)
/// and how to watch a failover.
pub(crate) async fn print_ha(grpc: &str, daemons: &[harness::Daemon]) -> anyhow::Result<()> {
    println!(
        "High availability (--ha): two replicas per daemon on the lease server at https://{grpc} (TLS, each replica authenticated by its ServiceAccount's token), lease TTL {HA_LEASE_TTL}."
    );
    let mut example: Option<(String, String, u32, PathBuf)> = None;
    for entry in DAEMONS.iter().filter(|e| is_replicated(e)) {
        let gauge = format!("cozy_backups_{}_leader", entry.bin.replace('-', "_"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let leader = loop {
            let leaders: Vec<&harness::Daemon> = daemons
                .iter()
                .filter(|d| d.spec.name.starts_with(&format!("{}-", entry.bin)))
                .filter(|d| {
                    harness::Admin::new(d.admin_addr.clone())
                        .metrics()
                        .get(&gauge, &[])
                        == Some(1.0)
                })
                .collect();
            if let [one] = leaders[..] {
                break one;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "{}: expected exactly one leading replica, found {}",
                entry.bin,
                leaders.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        println!(
            "  {:<22} leader {} (pid {}, admin http://{})",
            entry.bin,
            leader.spec.name,
            leader.pid().unwrap_or_default(),
            leader.admin_addr
        );
        if example.is_none() {
            example = Some((
                entry.bin.to_owned(),
                leader.spec.name.clone(),
                leader.pid().unwrap_or_default(),
                leader
                    .log_path
                    .parent()
                    .map(PathBuf::from)
                    .unwrap_or_default(),
            ));
        }
    }
    if let Some((bin, leader, pid, logs)) = example {
        let gauge = format!("cozy_backups_{}_leader", bin.replace('-', "_"));
        let admins: Vec<String> = daemons
            .iter()
            .filter(|d| d.spec.name.starts_with(&format!("{bin}-")))
            .map(|d| d.admin_addr.clone())
            .collect();
        println!("Watch a failover (e.g. {bin}):");
        println!(
            "  leadership: for a in {}; do curl -s http://$a/metrics | grep '^{gauge} '; done",
            admins.join(" ")
        );
        println!(
            "  graceful:   kill -TERM {pid}   # {leader} releases its leases; the other replica leads within a second"
        );
        println!(
            "  crash:      kill -9 {pid}      # the other replica leads within one TTL ({HA_LEASE_TTL})"
        );
        println!(
            "  logs:       grep -h 'leading\\|released\\|lost leadership' {}/{bin}-*.log",
            logs.display()
        );
        println!("  (a killed replica is not restarted; restart dev-up to get both back)");
    }
    Ok(())
}

/// Writes each daemon's `/metrics` exposition to `<dir>/<daemon>.prom`.
pub(crate) fn write_metrics(
    dir: &std::path::Path,
    daemons: &[harness::Daemon],
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for d in daemons {
        let (status, body) = harness::Admin::new(d.admin_addr.clone()).get("/metrics");
        anyhow::ensure!(
            status == 200,
            "{}: GET /metrics answered {status}",
            d.spec.name
        );
        let path = dir.join(format!("{}.prom", d.spec.name));
        std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))?;
    }
    println!("Metrics of every daemon written to {}", dir.display());
    Ok(())
}

/// Under `--persist`: the S3 server's listen addresses of the previous run (its
/// `endpoints.json`), as operator-sims arguments, when both ports are free again. Persisted
/// objects name the bucket's endpoint (catalog Backups, an EtcdCluster bootstrapped from a
/// snapshot), so the S3 server keeps it across restarts, as a real one would; otherwise (first
/// run, a port taken) the server picks free ports.
pub(crate) fn previous_s3_addrs(s3_dir: &std::path::Path) -> Vec<String> {
    let Ok(previous) = operator_sims::s3::Endpoints::read(s3_dir) else {
        return Vec::new();
    };
    let addr = |url: &str| -> Option<std::net::SocketAddr> {
        let addr = url
            .split("://")
            .nth(1)?
            .trim_end_matches('/')
            .parse()
            .ok()?;
        std::net::TcpListener::bind(addr).ok().map(|_| addr)
    };
    match (addr(&previous.http), addr(&previous.https)) {
        (Some(http), Some(https)) => {
            vec![
                format!("--s3-http-addr={http}"),
                format!("--s3-https-addr={https}"),
            ]
        }
        _ => Vec::new(),
    }
}
