//! The real-API backend: a kube-apiserver, etcd and kube-controller-manager built by
//! `hack/install-kube.sh`, shared by every [`Harness`](crate::Harness) of one test process
//! (`COZY_E2E_API=real`, see docs/real-api.md).
//!
//! ```text
//!  first Harness::start() in the process ─► ControlPlane::shared() (later calls reuse it)
//!     <tmp>/cozy-real-api-<pid>/
//!        pki/      CA, serving certificate (127.0.0.1, localhost, kubernetes.default.svc…),
//!                  ServiceAccount signing key (rcgen)
//!        tokens.csv  static tokens: the harness admin and the controller manager (system:masters)
//!        audit-policy.yaml, audit.log   one Metadata-level event per request and stage
//!        etcd/     data dir of an etcd on two free loopback ports (fsync off)
//!     etcd ─► kube-apiserver (RBAC, TokenRequest/TokenReview, audit log) ─► /readyz
//!          ─► kube-controller-manager (garbage collector, namespace, ServiceAccount and PVC
//!             protection controllers)
//!          ─► deploy/crds/ server-side applied, each waited for until Established
//!     a watchdog shell kills the three and removes the directory when the test process ends
//! ```
//!
//! One harness at a time uses the shared control plane in a process (a permit is held for the
//! harness's life), so its slice of the audit log is its own. Every harness after the first starts
//! on a server put back to its freshly started state (`reset.rs`: custom objects, namespaces,
//! cluster RBAC and the CRDs added since the start deleted, in about a second), so a test binary
//! run pays the start once and its tests still never see each other's objects.

use std::io::{Read as _, Seek as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::Error;

/// Name of the admin user of the harness (static token, group `system:masters`).
pub const ADMIN_USER: &str = "cozy-e2e-admin";
/// User the controller manager runs as; its requests are left out of the audit log, as the
/// emulator's built-in controllers make none.
const CONTROLLER_MANAGER_USER: &str = "system:kube-controller-manager";

/// Which API server the harness runs against (`COZY_E2E_API`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiBackend {
    /// The project's kube-emulator (the default).
    Emulator,
    /// kube-apiserver + etcd + kube-controller-manager from `hack/install-kube.sh`.
    Real,
}

impl ApiBackend {
    /// From `COZY_E2E_API` (`real` or `emulator`; unset means the emulator). Panics on any other
    /// value, so that a typo never silently runs the emulator.
    pub fn from_env() -> Self {
        match std::env::var("COZY_E2E_API").as_deref() {
            Err(_) | Ok("") | Ok("emulator") => Self::Emulator,
            Ok("real") => Self::Real,
            Ok(other) => panic!("COZY_E2E_API={other}: expected `real` or `emulator`"),
        }
    }
}

/// The running control plane.
#[derive(Debug)]
pub struct ControlPlane {
    /// `https://127.0.0.1:PORT` of kube-apiserver.
    pub url: String,
    /// The CA that signed the serving certificate (PEM).
    pub ca_pem: String,
    /// The admin's bearer token.
    pub admin_token: String,
    /// Kubeconfig of the admin (context namespace `default`).
    pub kubeconfig: PathBuf,
    /// kube-apiserver's audit log (audit.k8s.io/v1 events, one JSON object a line).
    pub audit_log: PathBuf,
    /// The directory everything lives in.
    pub dir: PathBuf,
    /// Where the binaries were taken from.
    pub bin_dir: PathBuf,
    /// `(name, pid)` of etcd, kube-apiserver and kube-controller-manager.
    pub pids: Vec<(String, u32)>,
    /// How long the start took, up to the CRDs being Established.
    pub start_time: Duration,
    /// kube-apiserver's `gitVersion`.
    pub version: String,
    gate: Arc<tokio::sync::Semaphore>,
    /// The CRDs right after the start (`deploy/crds/`), which a reset keeps.
    baseline_crds: std::collections::BTreeSet<String>,
    /// Whether a harness has used the control plane: every later one starts with a reset.
    used: std::sync::atomic::AtomicBool,
}

static SHARED: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

impl ControlPlane {
    /// The process's control plane, started on first use (blocking the calling thread for as long
    /// as that takes: some seconds).
    pub fn shared() -> Result<&'static ControlPlane, Error> {
        SHARED
            .get_or_init(|| {
                std::thread::spawn(Self::start_retrying_taken_ports)
                    .join()
                    .unwrap_or_else(|_| Err("the control plane's start panicked".into()))
            })
            .as_ref()
            .map_err(|e| Error::ControlPlane(e.clone()))
    }

    /// Waits until no other harness of this process uses the control plane; the permit is held
    /// for the harness's life.
    pub(crate) async fn acquire(&self) -> Result<tokio::sync::OwnedSemaphorePermit, Error> {
        tokio::time::timeout(Duration::from_secs(1800), self.gate.clone().acquire_owned())
            .await
            .map_err(|_| {
                Error::Timeout(
                "the shared real API server (another harness of this process held it for 30 min)"
                    .into(),
            )
            })?
            .map_err(|_| Error::ControlPlane("the control plane's gate was closed".into()))
    }

    /// Puts the server back to its state right after the start unless this is its first use in
    /// the process (see `reset.rs`): called by a harness holding the permit.
    pub(crate) async fn reset_unless_first_use(&self) -> Result<(), Error> {
        if self.used.swap(true, std::sync::atomic::Ordering::SeqCst) {
            let started = Instant::now();
            let phases =
                crate::reset::reset(&self.client(&self.admin_token), &self.baseline_crds).await?;
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "real control plane: reset after the previous harness in {:.1} s ({phases})",
                started.elapsed().as_secs_f64()
            );
        }
        Ok(())
    }

    /// A client of the control plane sending `token`.
    pub fn client(&self, token: &str) -> kube::Client {
        client(&self.url, Some(&self.ca_pem), token)
    }

    /// The current length of the audit log (where a harness's slice of it starts).
    pub fn audit_len(&self) -> u64 {
        std::fs::metadata(&self.audit_log)
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// The audit log from byte `offset` on, as the emulator's request log (JSONL: `time`,
    /// `path`, `query`, `verb`, `resource`, …), one line per request.
    pub fn audit_since(&self, offset: u64) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&self.audit_log)
            && f.seek(std::io::SeekFrom::Start(offset)).is_ok()
        {
            let _ = f.read_to_string(&mut text);
        }
        emulator_log_of(&text)
    }

    /// Resident memory of each process (`VmRSS` from /proc), for the cost report.
    pub fn rss(&self) -> Vec<(String, String)> {
        self.pids
            .iter()
            .map(|(n, pid)| (n.clone(), crate::rss(Some(*pid))))
            .collect()
    }

    /// [`ControlPlane::start`], again (at most three times in all) when a process found its port
    /// taken: the ports are free when chosen, but another process on the machine may bind one before
    /// etcd or kube-apiserver does. The processes of a failed attempt are stopped by its watchdog
    /// when the test process ends.
    fn start_retrying_taken_ports() -> Result<Self, String> {
        let mut attempt = 1;
        loop {
            match Self::start() {
                Ok(plane) => return Ok(plane),
                Err(e) if attempt < 3 && e.to_string().contains("address already in use") => {
                    attempt += 1;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
    }

    fn start() -> Result<Self, Error> {
        let started = Instant::now();
        let bin_dir = bin_dir()?;
        let dir = std::env::temp_dir().join(format!("cozy-real-api-{}", std::process::id()));
        remove_stale_dirs();
        let _ = std::fs::remove_dir_all(&dir);
        let pki = dir.join("pki");
        mkdir(&pki)?;
        mkdir(&dir.join("etcd"))?;
        {
            use std::os::unix::fs::PermissionsExt as _;
            // etcd warns about a data directory others can read.
            let _ =
                std::fs::set_permissions(dir.join("etcd"), std::fs::Permissions::from_mode(0o700));
        }
        start_watchdog(&dir)?;
        let certs = Pki::generate(&pki)?;

        let admin_token = random_token();
        let kcm_token = random_token();
        write(
            &dir.join("tokens.csv"),
            &format!(
                "{admin_token},{ADMIN_USER},{ADMIN_USER},\"system:masters\"\n\
                 {kcm_token},{CONTROLLER_MANAGER_USER},{CONTROLLER_MANAGER_USER},\"system:masters\"\n"
            ),
        )?;
        write(&dir.join("audit-policy.yaml"), &audit_policy())?;
        let audit_log = dir.join("audit.log");

        let (etcd_client, etcd_peer, api_port) = (free_port()?, free_port()?, free_port()?);
        let mut children = Vec::new();
        let etcd = spawn(
            &bin_dir.join("etcd"),
            &[
                "--name=cozy-e2e".into(),
                format!("--data-dir={}", dir.join("etcd").display()),
                format!("--listen-client-urls=http://127.0.0.1:{etcd_client}"),
                format!("--advertise-client-urls=http://127.0.0.1:{etcd_client}"),
                format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-cluster=cozy-e2e=http://127.0.0.1:{etcd_peer}"),
                "--unsafe-no-fsync=true".into(),
                "--log-level=warn".into(),
            ],
            &dir.join("etcd.log"),
        )?;
        let mut pids = vec![("etcd".to_owned(), etcd.id())];
        children.push(etcd);
        watchdog(&dir, &pids)?;

        let url = format!("https://127.0.0.1:{api_port}");
        let api = spawn(
            &bin_dir.join("kube-apiserver"),
            &[
                format!("--etcd-servers=http://127.0.0.1:{etcd_client}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                // The `kubernetes` Service's endpoints would have to name a non-loopback address;
                // nothing here reaches the API server through that Service.
                "--endpoint-reconciler-type=none".into(),
                format!("--secure-port={api_port}"),
                format!("--tls-cert-file={}", certs.serving_cert.display()),
                format!("--tls-private-key-file={}", certs.serving_key.display()),
                format!("--client-ca-file={}", certs.ca.display()),
                format!("--token-auth-file={}", dir.join("tokens.csv").display()),
                "--authorization-mode=RBAC".into(),
                "--anonymous-auth=false".into(),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", certs.sa_pub.display()),
                format!(
                    "--service-account-signing-key-file={}",
                    certs.sa_key.display()
                ),
                "--service-cluster-ip-range=10.0.0.0/24".into(),
                format!(
                    "--audit-policy-file={}",
                    dir.join("audit-policy.yaml").display()
                ),
                format!("--audit-log-path={}", audit_log.display()),
                "--audit-log-format=json".into(),
                "--audit-log-mode=blocking".into(),
                format!("--cert-dir={}", pki.display()),
                "--v=1".into(),
            ],
            &dir.join("kube-apiserver.log"),
        )?;
        pids.push(("kube-apiserver".to_owned(), api.id()));
        children.push(api);
        watchdog(&dir, &pids)?;

        let kubeconfig = dir.join("kubeconfig");
        write_kubeconfig(&kubeconfig, &url, &certs.ca_pem, &admin_token, "default")?;
        let kcm_kubeconfig = dir.join("kubeconfig.kube-controller-manager");
        write_kubeconfig(&kcm_kubeconfig, &url, &certs.ca_pem, &kcm_token, "default")?;

        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|source| Error::Process {
                what: "starting a runtime for the control plane's start".into(),
                source,
            })?;
        // A kube client spawns its buffer task on the runtime it is built in.
        let _entered = rt.enter();
        let admin = client(&url, Some(&certs.ca_pem), &admin_token);
        let version = rt.block_on(wait_ready(&admin, &mut children, &dir))?;

        let kcm = spawn(
            &bin_dir.join("kube-controller-manager"),
            &[
                format!("--kubeconfig={}", kcm_kubeconfig.display()),
                // The PVC protection controller removes the `kubernetes.io/pvc-protection` finalizer
                // admission puts on every claim: without it a deleted claim stays Terminating.
                "--controllers=garbage-collector-controller,namespace-controller,serviceaccount-controller,persistentvolumeclaim-protection-controller".into(),
                "--use-service-account-credentials=false".into(),
                "--leader-elect=false".into(),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={}", free_port()?),
                format!("--cert-dir={}", dir.join("kcm-certs").display()),
                "--v=1".into(),
            ],
            &dir.join("kube-controller-manager.log"),
        )?;
        pids.push(("kube-controller-manager".to_owned(), kcm.id()));
        children.push(kcm);
        watchdog(&dir, &pids)?;

        let baseline_crds = rt.block_on(async {
            crate::crds::apply_dir(&admin, &crate::crd_dir()).await?;
            // The ServiceAccount controller's first work: the `default` account of `default`.
            let sas: kube::Api<k8s_openapi::api::core::v1::ServiceAccount> =
                kube::Api::namespaced(admin.clone(), "default");
            let deadline = Instant::now() + Duration::from_secs(60);
            while sas.get_opt("default").await?.is_none() {
                check_alive(&mut children, &dir)?;
                if Instant::now() > deadline {
                    return Err(Error::Timeout(
                        "kube-controller-manager to create the default ServiceAccount".into(),
                    ));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            crate::reset::crd_names(&admin).await
        })?;
        // Dropping a Child neither kills nor waits for it: the watchdog ends them.
        drop(children);
        Ok(Self {
            url,
            ca_pem: certs.ca_pem,
            admin_token,
            kubeconfig,
            audit_log,
            dir,
            bin_dir,
            pids,
            start_time: started.elapsed(),
            version,
            gate: Arc::new(tokio::sync::Semaphore::new(1)),
            baseline_crds,
            used: Default::default(),
        })
    }
}

/// A kube client for `url`, trusting `ca_pem` (https) and sending `token` (none when empty).
pub(crate) fn client(url: &str, ca_pem: Option<&str>, token: &str) -> kube::Client {
    let Some(ca_pem) = ca_pem else {
        return kube_emulator::client_for(url, token);
    };
    let mut cfg = kube::Config::new(url.parse().expect("control plane url"));
    cfg.default_namespace = "default".into();
    cfg.root_cert = Some(pem_blocks(ca_pem));
    if !token.is_empty() {
        cfg.auth_info.token = Some(token.to_owned().into());
    }
    kube::Client::try_from(cfg).expect("kube client for the control plane")
}

/// The DER contents of each PEM block of `pem`.
fn pem_blocks(pem: &str) -> Vec<Vec<u8>> {
    use base64::Engine as _;
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in pem.lines() {
        let line = line.trim();
        if line.starts_with("-----BEGIN") {
            current = Some(String::new());
        } else if line.starts_with("-----END") {
            if let Some(b64) = current.take()
                && let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b64)
            {
                out.push(der);
            }
        } else if let Some(c) = current.as_mut() {
            c.push_str(line);
        }
    }
    out
}

/// Waits for `/readyz` to answer `ok`; answers the server's gitVersion.
async fn wait_ready(
    admin: &kube::Client,
    children: &mut [Child],
    dir: &Path,
) -> Result<String, Error> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        check_alive(children, dir)?;
        let req = http::Request::get("/readyz")
            .body(Vec::new())
            .expect("a GET request");
        if let Ok(body) = admin.request_text(req).await
            && body.trim() == "ok"
            && let Ok(v) = admin.apiserver_version().await
        {
            return Ok(v.git_version);
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout(format!(
                "kube-apiserver to be ready (logs in {})",
                dir.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An error naming the first process that exited, with the tail of its log.
fn check_alive(children: &mut [Child], dir: &Path) -> Result<(), Error> {
    for c in children.iter_mut() {
        if let Ok(Some(status)) = c.try_wait() {
            let logs: Vec<String> = ["etcd", "kube-apiserver", "kube-controller-manager"]
                .iter()
                .map(|n| {
                    let text =
                        std::fs::read_to_string(dir.join(format!("{n}.log"))).unwrap_or_default();
                    let lines: Vec<&str> = text.lines().collect();
                    format!(
                        "--- {n}.log (tail) ---\n{}",
                        lines[lines.len().saturating_sub(15)..].join("\n")
                    )
                })
                .collect();
            return Err(Error::ControlPlane(format!(
                "a control plane process (pid {}) exited with {status}\n{}",
                c.id(),
                logs.join("\n")
            )));
        }
    }
    Ok(())
}

/// The directory of the binaries: `COZY_KUBE_BIN`, else hack/install-kube.sh's cache for the
/// Kubernetes version hack/kube/go.mod pins.
pub fn bin_dir() -> Result<PathBuf, Error> {
    let dir = match std::env::var_os("COZY_KUBE_BIN") {
        Some(d) => PathBuf::from(d),
        None => {
            let go_mod = crate::workspace_root().join("hack/kube/go.mod");
            let text = std::fs::read_to_string(&go_mod).map_err(|source| Error::Process {
                what: format!("reading {}", go_mod.display()),
                source,
            })?;
            let version = text
                .lines()
                .map(|l| l.trim().trim_start_matches("require").trim())
                .find_map(|l| l.strip_prefix("k8s.io/kubernetes "))
                .and_then(|rest| rest.split_whitespace().next())
                .ok_or_else(|| {
                    Error::ControlPlane(format!("{} pins no k8s.io/kubernetes", go_mod.display()))
                })?
                .to_owned();
            let cache = std::env::var_os("COZY_KUBE_CACHE")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME")
                        .map(|h| PathBuf::from(h).join(".cache/cozy-backups/kube"))
                })
                .unwrap_or_else(|| PathBuf::from(".cache/cozy-backups/kube"));
            cache.join(version).join("bin")
        }
    };
    for b in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        if !dir.join(b).is_file() {
            return Err(Error::ControlPlane(format!(
                "{} is missing: run hack/install-kube.sh (or set COZY_KUBE_BIN)",
                dir.join(b).display()
            )));
        }
    }
    Ok(dir)
}

fn spawn(bin: &Path, args: &[String], log: &Path) -> Result<Child, Error> {
    let out = std::fs::File::create(log).map_err(|source| Error::Process {
        what: format!("creating {}", log.display()),
        source,
    })?;
    let err = out.try_clone().map_err(|source| Error::Process {
        what: format!("opening {}", log.display()),
        source,
    })?;
    Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .map_err(|source| Error::Process {
            what: format!("spawning {}", bin.display()),
            source,
        })
}

/// Records the control plane's pids for the watchdog.
fn watchdog(dir: &Path, pids: &[(String, u32)]) -> Result<(), Error> {
    let list: Vec<String> = pids.iter().map(|(_, p)| p.to_string()).collect();
    write(&dir.join("pids"), &list.join(" "))
}

/// Starts the watchdog: a shell that waits for this process to end, then stops the processes
/// whose pids `dir/pids` lists (SIGTERM, SIGKILL 3 s later) and removes `dir`.
///
/// It learns of the end from its stdin: this process keeps the pipe's write end (close-on-exec,
/// so no child inherits it) until it exits, however it exits, and the shell's read then ends.
/// Polling this process's pid instead could wait on another process that got the same pid, and a
/// signal to the whole process group (Ctrl-C, a test runner's cleanup) must not end the watchdog
/// before the processes it guards, so it ignores SIGINT, SIGTERM and SIGHUP.
fn start_watchdog(dir: &Path) -> Result<(), Error> {
    static HELD: std::sync::Mutex<Vec<std::process::ChildStdin>> =
        std::sync::Mutex::new(Vec::new());
    let script = format!(
        "trap '' INT TERM HUP; cat >/dev/null; \
         pids=$(cat '{dir}/pids' 2>/dev/null); \
         [ -n \"$pids\" ] && {{ kill $pids 2>/dev/null; sleep 3; kill -9 $pids 2>/dev/null; }}; \
         rm -rf '{dir}'",
        dir = dir.display()
    );
    // Never waited for: it ends after this process.
    let mut child = Command::new("bash")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|source| Error::Process {
            what: "spawning the control plane's watchdog".into(),
            source,
        })?;
    if let Some(stdin) = child.stdin.take() {
        HELD.lock().unwrap_or_else(|e| e.into_inner()).push(stdin);
    }
    Ok(())
}

/// Removes directories of earlier runs whose process is gone (a watchdog killed with SIGKILL
/// leaves its directory behind).
fn remove_stale_dirs() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = name.strip_prefix("cozy-real-api-")
            && let Ok(pid) = pid.parse::<u32>()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

fn free_port() -> Result<u16, Error> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| Error::Process {
            what: "finding a free loopback port".into(),
            source,
        })
}

fn mkdir(p: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(p).map_err(|source| Error::Process {
        what: format!("creating {}", p.display()),
        source,
    })
}

fn write(p: &Path, text: &str) -> Result<(), Error> {
    std::fs::write(p, text).map_err(|source| Error::Process {
        what: format!("writing {}", p.display()),
        source,
    })
}

fn random_token() -> String {
    use std::io::Read as _;
    let mut bytes = [0u8; 24];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        let _ = f.read_exact(&mut bytes);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Metadata-level events for every request but the controller manager's and the API server's
/// own; no event when a request is received, only when its answer starts (a watch) and ends.
fn audit_policy() -> String {
    format!(
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n\
         - level: None\n  users: [\"{CONTROLLER_MANAGER_USER}\", \"system:apiserver\"]\n\
         - level: Metadata\n"
    )
}

fn write_kubeconfig(
    path: &Path,
    url: &str,
    ca_pem: &str,
    token: &str,
    namespace: &str,
) -> Result<(), Error> {
    use base64::Engine as _;
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: cozy-e2e\n  cluster:\n    server: {url}\n    certificate-authority-data: {ca}\ncontexts:\n- name: cozy-e2e\n  context:\n    cluster: cozy-e2e\n    user: cozy-e2e\n    namespace: {namespace}\ncurrent-context: cozy-e2e\nusers:\n- name: cozy-e2e\n  user:\n    token: {token}\n"
    );
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| Error::Process {
            what: format!("writing {}", path.display()),
            source,
        })?;
    f.write_all(text.as_bytes())
        .map_err(|source| Error::Process {
            what: format!("writing {}", path.display()),
            source,
        })
}

/// Writes the admin kubeconfig of `cp` to `path` (a harness's own copy).
pub fn write_admin_kubeconfig(cp: &ControlPlane, path: &Path) -> Result<(), Error> {
    write_kubeconfig(path, &cp.url, &cp.ca_pem, &cp.admin_token, "default")
}

struct Pki {
    ca: PathBuf,
    ca_pem: String,
    serving_cert: PathBuf,
    serving_key: PathBuf,
    sa_key: PathBuf,
    /// The public half of `sa_key` (kube-apiserver reads no public key from a PKCS#8 file).
    sa_pub: PathBuf,
}

impl Pki {
    fn generate(dir: &Path) -> Result<Self, Error> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let err = |e: rcgen::Error| Error::Process {
            what: "generating the control plane's certificates".into(),
            source: std::io::Error::other(e.to_string()),
        };
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "cozy-backups e2e control plane CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer =
            CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(err)?).map_err(err)?;
        let mut serving = CertificateParams::new(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "kubernetes".to_owned(),
            "kubernetes.default".to_owned(),
            "kubernetes.default.svc".to_owned(),
            "kubernetes.default.svc.cluster.local".to_owned(),
        ])
        .map_err(err)?;
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        let key = KeyPair::generate().map_err(err)?;
        let cert = serving.signed_by(&key, &issuer).map_err(err)?;
        let sa_key = KeyPair::generate().map_err(err)?;
        let ca_pem = issuer.pem();
        let file = |name: &str, content: &str| -> Result<PathBuf, Error> {
            let p = dir.join(name);
            write(&p, content)?;
            Ok(p)
        };
        Ok(Self {
            ca: file("ca.crt", &ca_pem)?,
            serving_cert: file("apiserver.crt", &cert.pem())?,
            serving_key: file("apiserver.key", &key.serialize_pem())?,
            sa_key: file("sa.key", &sa_key.serialize_pem())?,
            sa_pub: file("sa.pub", &sa_key.public_key_pem())?,
            ca_pem,
        })
    }
}

/// kube-apiserver audit events (JSON lines) as the emulator's request log: one line per
/// request (a watch's `ResponseStarted` event, every other request's `ResponseComplete`).
pub fn emulator_log_of(audit: &str) -> String {
    let mut seen = std::collections::HashSet::new();
    let mut out = String::new();
    for line in audit.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let id = e["auditID"].as_str().unwrap_or_default().to_owned();
        let stage = e["stage"].as_str().unwrap_or_default();
        if !matches!(stage, "ResponseStarted" | "ResponseComplete" | "Panic") {
            continue;
        }
        if !seen.insert(id) {
            continue;
        }
        if let Some(l) = emulator_line(&e) {
            out.push_str(&l);
            out.push('\n');
        }
    }
    out
}

fn emulator_line(e: &Value) -> Option<String> {
    let uri = e["requestURI"].as_str()?;
    let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
    let r = &e["objectRef"];
    let s = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    let time = e["requestReceivedTimestamp"]
        .as_str()
        .map(|t| format!("{}Z", t.get(..19).unwrap_or(t)))
        .unwrap_or_default();
    let code = e["responseStatus"]["code"].as_u64().unwrap_or(0);
    let user = if code == 401 {
        String::new()
    } else {
        e["user"]["username"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let method = match e["verb"].as_str()? {
        "get" | "list" | "watch" => "GET",
        "create" => "POST",
        "update" => "PUT",
        "patch" | "apply" => "PATCH",
        "delete" | "deletecollection" => "DELETE",
        _ => "GET",
    };
    Some(
        json!({
            "time": time,
            "method": method,
            "path": path,
            "query": query,
            "verb": e["verb"],
            "resource": s(&r["resource"]),
            "namespace": s(&r["namespace"]),
            "name": s(&r["name"]),
            "subresource": s(&r["subresource"]),
            "userAgent": e["userAgent"],
            "code": code,
            "user": user,
            "auditID": e["auditID"],
        })
        .to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_events_become_one_request_line_each() {
        let audit = [
            r#"{"kind":"Event","level":"Metadata","auditID":"a","stage":"ResponseStarted","requestURI":"/apis/backups.cozystack.io/v1alpha1/namespaces/t/backupjobs?allowWatchBookmarks=true&watch=true","verb":"watch","user":{"username":"system:serviceaccount:s:r","groups":["system:serviceaccounts"]},"userAgent":"runner/1","objectRef":{"resource":"backupjobs","namespace":"t","apiGroup":"backups.cozystack.io","apiVersion":"v1alpha1"},"responseStatus":{"metadata":{},"code":200},"requestReceivedTimestamp":"2026-12-06T07:40:01.123456Z"}"#,
            r#"{"kind":"Event","level":"Metadata","auditID":"b","stage":"ResponseComplete","requestURI":"/api/v1/namespaces/t/secrets/s","verb":"patch","user":{"username":"cozy-e2e-admin"},"userAgent":"kubectl","objectRef":{"resource":"secrets","namespace":"t","name":"s","apiVersion":"v1"},"responseStatus":{"metadata":{},"code":201},"requestReceivedTimestamp":"2026-12-06T07:40:02.5Z"}"#,
            r#"{"kind":"Event","level":"Metadata","auditID":"a","stage":"ResponseComplete","requestURI":"/apis/backups.cozystack.io/v1alpha1/namespaces/t/backupjobs?watch=true","verb":"watch","user":{"username":"system:serviceaccount:s:r"},"userAgent":"runner/1","objectRef":{"resource":"backupjobs","namespace":"t"},"responseStatus":{"code":200},"requestReceivedTimestamp":"2026-12-06T07:40:01.123456Z"}"#,
            r#"{"kind":"Event","level":"Metadata","auditID":"c","stage":"ResponseComplete","requestURI":"/api/v1/namespaces","verb":"list","user":{},"userAgent":"x","objectRef":{"resource":"namespaces"},"responseStatus":{"code":401},"requestReceivedTimestamp":"2026-12-06T07:40:03Z"}"#,
        ]
        .join("\n");
        let log = emulator_log_of(&audit);
        let parsed = crate::Audit::parse(&log);
        assert_eq!(parsed.requests.len(), 3, "{log}");
        let watch = &parsed.requests[0];
        assert_eq!(
            (
                watch.verb.as_str(),
                watch.group.as_str(),
                watch.resource.as_str(),
                watch.namespace.as_deref(),
                watch.time.as_str(),
                watch.user.as_str()
            ),
            (
                "watch",
                "backups.cozystack.io",
                "backupjobs",
                Some("t"),
                "2026-12-06T07:40:01Z",
                "system:serviceaccount:s:r"
            )
        );
        assert!(watch.query.contains("watch=true"));
        let patch = &parsed.requests[1];
        assert!(patch.is_write() && patch.succeeded());
        assert_eq!(patch.name.as_deref(), Some("s"));
        assert_eq!(patch.group, "");
        assert_eq!(parsed.requests[2].user, "");
        assert_eq!(parsed.requests[2].code, 401);
    }

    #[test]
    fn the_ca_bundle_decodes_to_der() {
        let dir = std::env::temp_dir().join(format!("cozy-real-pki-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let pki = Pki::generate(&dir).unwrap();
        let der = pem_blocks(&pki.ca_pem);
        assert_eq!(der.len(), 1);
        assert_eq!(der[0][0], 0x30, "a DER SEQUENCE");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
