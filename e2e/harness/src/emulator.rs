//! The [`Harness`]: one emulator (in-process or as a process), its kubeconfig, daemons and temporary
//! namespaces, with a failure dump on panic.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube_emulator::{Chaos, ChaosCounts, Config, Emulator, Running};
use serde_json::Value;

use crate::daemon::{Daemon, DaemonSpec};
use crate::real::{ApiBackend, ControlPlane};
use crate::{Error, http};

/// Where the emulator runs.
#[derive(Debug, Clone)]
pub enum EmulatorMode {
    /// Inside the test process (fastest; the default).
    InProcess,
    /// As a `kube-emulator` process from this binary path.
    Process(PathBuf),
}

enum Backend {
    InProcess(Box<Running>),
    Process(Box<Daemon>),
    /// The process's shared real control plane; `audit_offset` is where this harness's part of
    /// its audit log starts, and the permit keeps other harnesses of the process out meanwhile.
    Real {
        cp: &'static ControlPlane,
        audit_offset: u64,
        _permit: tokio::sync::OwnedSemaphorePermit,
    },
}

/// A test environment: emulator + daemons + namespaces.
pub struct Harness {
    backend: Backend,
    url: String,
    kubeconfig: PathBuf,
    work_dir: PathBuf,
    daemons: Vec<Daemon>,
    namespaces: Vec<String>,
    admin_token: String,
    /// The CA to trust (PEM) when the API server serves https (the real backend).
    ca_pem: Option<String>,
    /// The runtime the in-process emulator serves from: its own, so that the emulator answers
    /// while the test's thread is blocked (see [`Harness::spawn`]).
    runtime: Option<tokio::runtime::Runtime>,
    /// Component ServiceAccounts provisioned so far (see the `identity` module).
    pub(crate) identities: std::collections::BTreeMap<String, crate::identity::ComponentIdentity>,
}

impl Harness {
    /// The API server `COZY_E2E_API` chooses (the in-process emulator by default, or the
    /// process's shared real control plane) with `deploy/crds/` loaded.
    pub async fn start() -> Result<Self, Error> {
        Self::start_with(EmulatorMode::InProcess, Some(crate::crd_dir())).await
    }

    /// Chooses the emulator mode and CRD directory. With `COZY_E2E_API=real`,
    /// [`EmulatorMode::InProcess`] means the shared real control plane instead (which always has
    /// `deploy/crds/`; another `crds` directory is applied to it too); an emulator process stays
    /// an emulator process.
    pub async fn start_with(mode: EmulatorMode, crds: Option<PathBuf>) -> Result<Self, Error> {
        if matches!(mode, EmulatorMode::InProcess) && ApiBackend::from_env() == ApiBackend::Real {
            return Self::start_real(crds).await;
        }
        let work_dir = new_work_dir()?;
        let kubeconfig = work_dir.join("kubeconfig");
        let mut runtime = None;
        let (backend, url, admin_token) = match mode {
            EmulatorMode::InProcess => {
                let mut cfg = Config {
                    kubeconfig_out: Some(kubeconfig.clone()),
                    ..Config::default()
                };
                cfg.crd_dirs.extend(crds);
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .thread_name("kube-emulator")
                    .enable_all()
                    .build()
                    .map_err(|source| Error::Process {
                        what: "starting the emulator's runtime".into(),
                        source,
                    })?;
                let running =
                    rt.spawn(Emulator::start(cfg))
                        .await
                        .map_err(|e| Error::Process {
                            what: "starting the emulator".into(),
                            source: std::io::Error::other(e.to_string()),
                        })??;
                runtime = Some(rt);
                let url = running.url();
                let token = running.admin_token().to_owned();
                (Backend::InProcess(Box::new(running)), url, token)
            }
            EmulatorMode::Process(bin) => {
                let mut spec = DaemonSpec::new("kube-emulator", bin)
                    .args([
                        "--kubeconfig-out".to_string(),
                        kubeconfig.display().to_string(),
                    ])
                    .args([
                        "--audit-log".to_string(),
                        work_dir.join("audit.jsonl").display().to_string(),
                    ]);
                if let Some(c) = crds {
                    spec = spec.args(["--crds".to_string(), c.display().to_string()]);
                }
                spec.ready_path = "/readyz".into();
                spec.address = crate::daemon::AddressReport::Kubeconfig(kubeconfig.clone());
                let mut d = Daemon::spawn(spec, &kubeconfig, &work_dir)?;
                d.wait_ready(Duration::from_secs(30)).await?;
                let url = format!("http://{}", d.admin_addr);
                let token = kubeconfig_token(&kubeconfig);
                (Backend::Process(Box::new(d)), url, token)
            }
        };
        Ok(Harness {
            backend,
            url,
            kubeconfig,
            work_dir,
            daemons: Vec::new(),
            namespaces: Vec::new(),
            admin_token,
            ca_pem: None,
            runtime,
            identities: Default::default(),
        })
    }

    /// Runs against the process's shared real control plane (started on first use; see
    /// docs/real-api.md), whatever `COZY_E2E_API` says. Waits while another harness of this
    /// process uses it. `crds` other than `deploy/crds/` are applied too.
    pub async fn start_real(crds: Option<PathBuf>) -> Result<Self, Error> {
        let cp = tokio::task::spawn_blocking(ControlPlane::shared)
            .await
            .map_err(|e| Error::ControlPlane(e.to_string()))??;
        let permit = cp.acquire().await?;
        // Whatever an earlier harness of this process left (its namespaces, cluster-scoped
        // objects, simulators' CRDs) is gone before this one starts.
        cp.reset_unless_first_use().await?;
        let work_dir = new_work_dir()?;
        let kubeconfig = work_dir.join("kubeconfig");
        crate::real::write_admin_kubeconfig(cp, &kubeconfig)?;
        if let Some(dir) = crds.filter(|d| *d != crate::crd_dir()) {
            crate::crds::apply_dir(&cp.client(&cp.admin_token), &dir).await?;
        }
        Ok(Harness {
            backend: Backend::Real {
                cp,
                audit_offset: cp.audit_len(),
                _permit: permit,
            },
            url: cp.url.clone(),
            kubeconfig,
            work_dir,
            daemons: Vec::new(),
            namespaces: Vec::new(),
            admin_token: cp.admin_token.clone(),
            ca_pem: Some(cp.ca_pem.clone()),
            runtime: None,
            identities: Default::default(),
        })
    }

    /// For a test about kube-apiserver itself, whatever `COZY_E2E_API` says: [`Harness::start_real`],
    /// or None (with a note on stderr) when the control plane's binaries are not built and
    /// `COZY_E2E_API` is not `real` (with it, missing binaries are an error).
    pub async fn start_real_or_skip(test: &str) -> Option<Self> {
        if ApiBackend::from_env() != ApiBackend::Real
            && let Err(e) = crate::real::bin_dir()
        {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "{test}: skipped, no real control plane: {e}"
            );
            return None;
        }
        Some(
            Self::start_real(None)
                .await
                .expect("the real control plane"),
        )
    }

    /// The real control plane this harness runs against; None on the emulator.
    pub fn control_plane(&self) -> Option<&'static ControlPlane> {
        match &self.backend {
            Backend::Real { cp, .. } => Some(cp),
            _ => None,
        }
    }

    /// True on the real API server backend.
    pub fn is_real(&self) -> bool {
        self.control_plane().is_some()
    }

    /// A kube-rs client of this harness's API server sending `token` (none when empty).
    pub fn client_with_token(&self, token: &str) -> kube::Client {
        crate::real::client(&self.url, self.ca_pem.as_deref(), token)
    }

    /// What [`Harness::client_with_token`] needs, to build clients on another thread.
    pub(crate) fn endpoint(&self) -> (String, Option<String>) {
        (self.url.clone(), self.ca_pem.clone())
    }

    /// `http://127.0.0.1:PORT` of the emulator (`https://…` of the real API server).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The kubeconfig daemons and kubectl should use.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The private work directory (logs, kubeconfig).
    pub fn work_dir(&self) -> &Path {
        &self.work_dir
    }

    /// A kube-rs client for the emulator, as its admin.
    pub fn client(&self) -> kube::Client {
        self.client_with_token(&self.admin_token)
    }

    /// The admin bearer token (`system:masters`); empty when the emulator's authentication is off.
    pub fn admin_token(&self) -> &str {
        &self.admin_token
    }

    /// The in-process emulator, for admin hooks (logs, faults); None in process mode.
    pub fn emulator(&self) -> Option<&Running> {
        match &self.backend {
            Backend::InProcess(r) => Some(r),
            _ => None,
        }
    }

    fn in_process(&mut self, what: &str) -> Result<&mut Running, Error> {
        match &mut self.backend {
            Backend::InProcess(r) => Ok(r),
            Backend::Process(_) => Err(Error::Unsupported(format!(
                "{what} needs the in-process emulator"
            ))),
            Backend::Real { .. } => Err(Error::Unsupported(format!(
                "{what} needs the in-process emulator: the real API server (COZY_E2E_API=real) \
                 has no such hook"
            ))),
        }
    }

    /// Sets (Some) or clears (None) the emulator's seeded fault schedule.
    pub fn set_chaos(&mut self, schedule: Option<Chaos>) -> Result<(), Error> {
        self.in_process("a chaos schedule")?
            .set_chaos(schedule)
            .map_err(Error::Emulator)
    }

    /// What the current (or last) chaos schedule injected.
    pub fn chaos_counts(&mut self) -> Result<ChaosCounts, Error> {
        Ok(self.in_process("chaos counts")?.chaos_counts())
    }

    /// Takes the API server down (watches end, connections are refused); its state is kept. Daemons
    /// keep running.
    pub async fn stop_api_server(&mut self) -> Result<(), Error> {
        self.in_process("an API server restart")?
            .stop_serving()
            .await;
        Ok(())
    }

    /// Serves again on the same port with the state kept by [`Harness::stop_api_server`].
    pub async fn start_api_server(&mut self) -> Result<(), Error> {
        self.in_process("an API server restart")?
            .serve_again()
            .await
            .map_err(Error::Emulator)
    }

    /// An API server outage observed from the daemons: stops the API server, waits until every
    /// named daemon's `/ready` answers 503, serves again and waits until each answers 200. Returns
    /// each daemon's `/ready` body during the outage (the reasons it gave). A `kube::Client` made
    /// before the outage may hold a pooled connection the old server closed: a test that must not
    /// see a transport error takes a new one from [`Harness::client`].
    pub async fn api_server_outage(
        &mut self,
        daemons: &[&str],
        timeout: Duration,
    ) -> Result<Vec<(String, String)>, Error> {
        let mut admins = Vec::new();
        for name in daemons {
            admins.push(((*name).to_owned(), self.daemon(name)?.admin().await?));
        }
        self.stop_api_server().await?;
        let mut reports = Vec::new();
        for (name, admin) in &admins {
            let report = poll_ready(admin, false, timeout)
                .await
                .ok_or_else(|| Error::Timeout(format!("{name} to report the outage on /ready")))?;
            reports.push((name.clone(), report));
        }
        self.start_api_server().await?;
        for (name, admin) in &admins {
            poll_ready(admin, true, timeout)
                .await
                .ok_or_else(|| Error::Timeout(format!("{name} to be ready after the outage")))?;
        }
        Ok(reports)
    }

    /// Creates a namespace named `e2e-<prefix>-xxxxx`; it is deleted by [`Harness::cleanup`].
    pub async fn temp_namespace(&mut self, prefix: &str) -> Result<String, Error> {
        let api: Api<Namespace> = Api::all(self.client());
        let ns = Namespace {
            metadata: ObjectMeta {
                generate_name: Some(format!("e2e-{prefix}-")),
                ..Default::default()
            },
            ..Default::default()
        };
        let created = api.create(&PostParams::default(), &ns).await?;
        let name = created.metadata.name.unwrap_or_default();
        self.namespaces.push(name.clone());
        Ok(name)
    }

    /// Creates namespaces with fixed names (the well-known ones the daemons expect, such as
    /// `tenant-root`); they live as long as the emulator.
    pub async fn create_namespaces(&self, names: &[&str]) -> Result<(), Error> {
        let api: Api<Namespace> = Api::all(self.client());
        for name in names {
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some((*name).to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            };
            if self.is_real() {
                // The shared server may still have it from an earlier harness: reuse it, or wait
                // for a deletion in progress to end.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                loop {
                    match api.get_opt(name).await? {
                        Some(n) if n.metadata.deletion_timestamp.is_none() => break,
                        Some(_) if tokio::time::Instant::now() < deadline => {
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Some(_) => {
                            return Err(Error::Timeout(format!("namespace {name} to be deleted")));
                        }
                        None => match api.create(&PostParams::default(), &ns).await {
                            Ok(_) => break,
                            Err(kube::Error::Api(s)) if s.code == 409 => {}
                            Err(e) => return Err(e.into()),
                        },
                    }
                }
                continue;
            }
            api.create(&PostParams::default(), &ns).await?;
        }
        Ok(())
    }

    /// Deletes a namespace and waits until it is gone (content finalizers must be released by someone).
    pub async fn delete_namespace(&mut self, name: &str, timeout: Duration) -> Result<(), Error> {
        let api: Api<Namespace> = Api::all(self.client());
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        let deadline = tokio::time::Instant::now() + timeout;
        while api.get_opt(name).await?.is_some() {
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Timeout(format!("namespace {name} to be deleted")));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.namespaces.retain(|n| n != name);
        Ok(())
    }

    /// Spawns a daemon pointed at the emulator (env `KUBECONFIG`, `ADMIN_ADDR=127.0.0.1:<free port>`).
    ///
    /// A project component (see [`DaemonSpec::component`]) runs as its own ServiceAccount with
    /// the RBAC of `deploy/<component>/`, provisioned into the emulator on first use (this call
    /// then blocks its thread for the few API calls that takes); anything else runs as the admin.
    pub fn spawn(&mut self, spec: DaemonSpec) -> Result<&mut Daemon, Error> {
        let kubeconfig = self.kubeconfig_for(&spec)?;
        let d = Daemon::spawn(spec, &kubeconfig, &self.work_dir)?;
        self.daemons.push(d);
        Ok(self.daemons.last_mut().expect("just pushed"))
    }

    /// Spawns a daemon and waits for its `/ready`.
    pub async fn spawn_ready(
        &mut self,
        spec: DaemonSpec,
        timeout: Duration,
    ) -> Result<&mut Daemon, Error> {
        let d = self.spawn(spec)?;
        d.wait_ready(timeout).await?;
        Ok(d)
    }

    /// The daemon with this name.
    pub fn daemon(&mut self, name: &str) -> Result<&mut Daemon, Error> {
        self.daemons
            .iter_mut()
            .find(|d| d.spec.name == name)
            .ok_or_else(|| Error::UnknownDaemon(name.into()))
    }

    /// The daemon's `/metrics` now, parsed (scraped off the async runtime).
    pub async fn metrics_of(&mut self, name: &str) -> Result<crate::Metrics, Error> {
        let admin = self.daemon(name)?.admin().await?;
        tokio::task::spawn_blocking(move || admin.metrics())
            .await
            .map_err(|e| Error::Process {
                what: format!("scraping {name}'s metrics"),
                source: std::io::Error::other(e.to_string()),
            })
    }

    /// `kill -9` a daemon.
    pub async fn kill(&mut self, name: &str) -> Result<(), Error> {
        self.daemon(name)?.kill().await
    }

    /// SIGTERM a daemon and wait (at most `deadline`) for it to exit by itself; see
    /// [`Daemon::terminate`].
    pub async fn terminate(
        &mut self,
        name: &str,
        deadline: Duration,
    ) -> Result<std::process::ExitStatus, Error> {
        self.daemon(name)?.terminate(deadline).await
    }

    /// Kill -9 (if running) and start again with the same spec; waits for `/ready`.
    pub async fn restart(&mut self, name: &str, timeout: Duration) -> Result<(), Error> {
        let d = self.daemon(name)?;
        d.kill().await?;
        d.start()?;
        d.wait_ready(timeout).await
    }

    /// The emulator's request audit log (JSONL).
    pub fn audit_log(&self) -> String {
        match &self.backend {
            Backend::InProcess(r) => r.audit_log(),
            Backend::Process(d) => {
                http::get_with_token(&d.admin_addr, "/emulator/v1/audit", &self.admin_token)
                    .map(|(_, b)| b)
                    .unwrap_or_default()
            }
            Backend::Real {
                cp, audit_offset, ..
            } => cp.audit_since(*audit_offset),
        }
    }

    /// Every daemon spawned so far.
    pub fn daemons(&self) -> &[Daemon] {
        &self.daemons
    }

    pub(crate) fn snapshot(&self) -> Value {
        match &self.backend {
            Backend::InProcess(r) => r.snapshot(),
            Backend::Process(d) => {
                http::get_with_token(&d.admin_addr, "/emulator/v1/snapshot", &self.admin_token)
                    .ok()
                    .and_then(|(_, b)| serde_json::from_str(&b).ok())
                    .unwrap_or(Value::Null)
            }
            // kube-apiserver has no snapshot; the dump lists no objects there.
            Backend::Real { .. } => Value::Null,
        }
    }

    /// A human-readable dump: objects in the harness's namespaces plus cluster-scoped custom objects, the
    /// tail of the audit log, and every daemon's log.
    pub fn dump(&self) -> String {
        let mut out = String::from("===== e2e harness dump =====\n");
        let snap = self.snapshot();
        out.push_str("----- objects -----\n");
        for o in snap["objects"].as_array().into_iter().flatten() {
            let ns = o["metadata"]["namespace"].as_str();
            let relevant = match ns {
                Some(n) => self.namespaces.iter().any(|x| x == n),
                None => {
                    let av = o["apiVersion"].as_str().unwrap_or_default();
                    av.contains('.')
                        && !av.starts_with("apiextensions.k8s.io")
                        && o["kind"] != "Namespace"
                }
            };
            if relevant {
                out.push_str(&serde_json::to_string_pretty(o).unwrap_or_default());
                out.push('\n');
            }
        }
        out.push_str("----- audit log (last 200 requests) -----\n");
        let audit = self.audit_log();
        let lines: Vec<&str> = audit.lines().collect();
        for l in &lines[lines.len().saturating_sub(200)..] {
            out.push_str(l);
            out.push('\n');
        }
        for d in &self.daemons {
            out.push_str(&format!(
                "----- daemon {} (started {} times) log -----\n",
                d.spec.name, d.starts
            ));
            out.push_str(&d.log());
        }
        out
    }

    /// Deletes every temporary namespace (waiting for each) and kills every daemon.
    pub async fn cleanup(&mut self) -> Result<(), Error> {
        for ns in self.namespaces.clone() {
            self.delete_namespace(&ns, Duration::from_secs(30)).await?;
        }
        for d in &mut self.daemons {
            d.kill().await?;
        }
        Ok(())
    }
}

/// A new private work directory `<tmp>/e2e-harness-<pid>-<n>`.
fn new_work_dir() -> Result<PathBuf, Error> {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let work_dir = std::env::temp_dir().join(format!(
        "e2e-harness-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    // A directory left by an earlier process with the same pid is not ours.
    let _ = std::fs::remove_dir_all(&work_dir);
    std::fs::create_dir_all(&work_dir).map_err(|source| Error::Process {
        what: format!("creating {}", work_dir.display()),
        source,
    })?;
    Ok(work_dir)
}

/// Polls `/ready` until it answers 200 (`ready`) or 503 (not `ready`); the body, or None at the deadline.
async fn poll_ready(admin: &crate::Admin, ready: bool, timeout: Duration) -> Option<String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let a = admin.clone();
        let (code, body) = tokio::task::spawn_blocking(move || a.get("/ready"))
            .await
            .unwrap_or_default();
        if (ready && code == 200) || (!ready && code == 503) {
            return Some(body);
        }
        if tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// The bearer token of the kubeconfig an emulator process wrote (empty without one).
fn kubeconfig_token(path: &Path) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.trim().strip_prefix("token:"))
        .map(|t| t.trim().trim_matches(['\'', '"']).to_owned())
        .unwrap_or_default()
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.record_rbac_usage();
        if std::thread::panicking() {
            let dump = self.dump();
            let path = self.work_dir.join("dump.txt");
            let _ = std::fs::write(&path, &dump);
            // stdout is captured by the test runner and shown with the failure.
            println!("{dump}\n(dump also written to {})", path.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.work_dir);
        }
        if let Some(rt) = self.runtime.take() {
            // Dropping a runtime may block, which an async context (where a harness usually
            // ends) forbids; its tasks end with the emulator's shutdown signal.
            rt.shutdown_background();
        }
    }
}
