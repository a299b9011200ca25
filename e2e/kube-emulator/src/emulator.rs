//! Starting, using and stopping an emulator instance: [`Config`] → [`Emulator::start`] → [`Running`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use crate::admin::{Admin, Fault, Hold};
use crate::chaos::{Chaos, ChaosCounts};
use crate::server::handle;
use crate::shared::Inner;
use crate::store::{State, WriteOpts};

/// Errors starting or driving the emulator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Binding or serving failed.
    #[error("listening on {addr}: {source}")]
    Listen {
        /// The address.
        addr: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A manifest could not be parsed.
    #[error("{path}: {message}")]
    Manifest {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        message: String,
    },
    /// The chaos schedule is out of range (the message names the field).
    #[error("invalid chaos schedule: {0}")]
    Chaos(String),
    /// Building the kube client failed.
    #[error("building a kube client: {0}")]
    Client(#[from] kube::Error),
    /// The TLS certificate could not be made.
    #[error("{0}")]
    Tls(String),
}

/// Whether requests are authenticated and authorised.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Auth {
    /// Bearer tokens (the admin token, ServiceAccount tokens) are required and RBAC is enforced; the
    /// kubeconfig points at `https://…` with the admin token. The default.
    #[default]
    On,
    /// Every request is the admin (no 401/403 for permissions); the kubeconfig points at `http://…`.
    Off,
}

/// How to run an emulator.
#[derive(Debug, Clone)]
pub struct Config {
    /// Listen address (default 127.0.0.1).
    pub host: String,
    /// Port; 0 picks a free one.
    pub port: u16,
    /// Where to write the kubeconfig; a temporary directory when None.
    pub kubeconfig_out: Option<PathBuf>,
    /// Context namespace in the kubeconfig.
    pub namespace: String,
    /// Directories (or files) of YAML/JSON manifests loaded at start, CRDs first.
    pub crd_dirs: Vec<PathBuf>,
    /// Watch history size in events; older resourceVersions get an in-stream 410.
    pub history_size: usize,
    /// Interval of BOOKMARK events on watches that allow them.
    pub bookmark_interval: Duration,
    /// Load this snapshot at start (if it exists) and write it on shutdown.
    pub snapshot: Option<PathBuf>,
    /// Mirror the audit log to this JSONL file.
    pub audit_log: Option<PathBuf>,
    /// Authentication and RBAC (default on).
    pub auth: Auth,
    /// A seeded fault schedule active from the start (see [`Chaos`]).
    pub chaos: Option<Chaos>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            host: "127.0.0.1".into(),
            port: 0,
            kubeconfig_out: None,
            namespace: "default".into(),
            crd_dirs: Vec::new(),
            history_size: 10_000,
            bookmark_interval: Duration::from_secs(60),
            snapshot: None,
            audit_log: None,
            auth: Auth::On,
            chaos: None,
        }
    }
}

impl Config {
    /// Adds a directory of manifests to preload.
    pub fn with_crds(mut self, dir: impl Into<PathBuf>) -> Self {
        self.crd_dirs.push(dir.into());
        self
    }

    /// Sets the watch history size.
    pub fn with_history_size(mut self, n: usize) -> Self {
        self.history_size = n;
        self
    }

    /// Sets the bookmark interval.
    pub fn with_bookmark_interval(mut self, d: Duration) -> Self {
        self.bookmark_interval = d;
        self
    }

    /// Turns authentication and RBAC on or off.
    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }
}

/// Entry point.
pub struct Emulator;

/// A running emulator; shuts down when dropped.
pub struct Running {
    inner: Arc<Inner>,
    addr: SocketAddr,
    kubeconfig: PathBuf,
    temp_dir: Option<PathBuf>,
    snapshot: Option<PathBuf>,
    server: Option<tokio::task::JoinHandle<()>>,
    ca_pem: String,
    /// The CA and server certificate, kept to serve again after a stop.
    certs: crate::tls::Certificates,
    history_size: usize,
    bookmark_interval: Duration,
    /// The stored state while stopped by [`Running::stop_serving`].
    stopped: Option<Value>,
}

impl Emulator {
    /// Binds, loads manifests and serves in the background of the current tokio runtime.
    pub async fn start(config: Config) -> Result<Running, Error> {
        let bind = format!("{}:{}", config.host, config.port);
        let listener = tokio::net::TcpListener::bind(&bind)
            .await
            .map_err(|source| Error::Listen {
                addr: bind.clone(),
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Listen {
            addr: bind.clone(),
            source,
        })?;
        let certs = crate::tls::Certificates::generate(&config.host).map_err(Error::Tls)?;
        let listener =
            crate::tls::DualListener::new(listener, &certs).map_err(|source| Error::Listen {
                addr: bind.clone(),
                source,
            })?;
        let audit_file = match &config.audit_log {
            Some(p) => Some(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p)
                    .map_err(|source| Error::Io {
                        path: p.clone(),
                        source,
                    })?,
            ),
            None => None,
        };
        let mut state = State::new(config.history_size);
        if let Some(snap) = config.snapshot.as_ref().filter(|p| p.exists()) {
            let data = std::fs::read(snap).map_err(|source| Error::Io {
                path: snap.clone(),
                source,
            })?;
            let v: Value = serde_json::from_slice(&data).map_err(|e| Error::Manifest {
                path: snap.clone(),
                message: e.to_string(),
            })?;
            state.restore(&v);
        }
        let mut admin = Admin::new(audit_file);
        if let Some(c) = &config.chaos {
            c.validate().map_err(Error::Chaos)?;
            admin.set_chaos(Some(c.clone()));
        }
        let auth = Arc::new(crate::auth::Authenticator::new(config.auth == Auth::On));
        let inner = new_inner(state, admin, auth, addr, config.bookmark_interval);
        for dir in &config.crd_dirs {
            load_manifests(&inner, dir)?;
        }
        let (kubeconfig, temp_dir) = match &config.kubeconfig_out {
            Some(p) => (p.clone(), None),
            None => {
                let dir = std::env::temp_dir().join(format!(
                    "kube-emulator-{}-{}",
                    std::process::id(),
                    crate::json::uuid()
                ));
                (dir.join("kubeconfig"), Some(dir))
            }
        };
        if config.auth == Auth::On {
            write_kubeconfig_with(
                &kubeconfig,
                &format!("https://{addr}"),
                &config.namespace,
                inner.auth.admin_token(),
                Some(&certs.ca_pem),
            )?;
        } else {
            write_kubeconfig(&kubeconfig, &format!("http://{addr}"), &config.namespace)?;
        }
        let server = serve(listener, &inner);
        tracing::info!(%addr, kubeconfig = %kubeconfig.display(), "kube-emulator listening");
        Ok(Running {
            inner,
            addr,
            kubeconfig,
            temp_dir,
            snapshot: config.snapshot.clone(),
            server: Some(server),
            ca_pem: certs.ca_pem.clone(),
            certs,
            history_size: config.history_size,
            bookmark_interval: config.bookmark_interval,
            stopped: None,
        })
    }
}

fn new_inner(
    state: State,
    admin: Admin,
    auth: Arc<crate::auth::Authenticator>,
    addr: SocketAddr,
    bookmark_interval: Duration,
) -> Arc<Inner> {
    let (drop_watches, _) = watch::channel(0u64);
    let (release_holds, _) = watch::channel(0u64);
    let (shutdown, _) = watch::channel(false);
    Arc::new(Inner {
        state: Mutex::new(state),
        admin: Mutex::new(admin),
        changed: Notify::new(),
        drop_watches,
        release_holds,
        shutdown,
        bookmark_interval,
        addr: addr.to_string(),
        openapi: Mutex::new(crate::openapi::Cache::default()),
        auth,
    })
}

/// Serves `inner` on `listener` until its shutdown signal, with the bundled controllers.
fn serve(listener: crate::tls::DualListener, inner: &Arc<Inner>) -> tokio::task::JoinHandle<()> {
    let app = axum::Router::new()
        .fallback(handle)
        .with_state(inner.clone());
    let mut shutdown_rx = inner.shutdown.subscribe();
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = shutdown_rx.changed().await;
            })
            .await;
    });
    tokio::spawn(crate::controllers::run(inner.clone()));
    server
}

/// Writes a kubeconfig pointing at `server` with a context namespace (no credentials: for an emulator
/// with authentication off).
pub fn write_kubeconfig(path: &Path, server: &str, namespace: &str) -> Result<(), Error> {
    write_kubeconfig_with(path, server, namespace, "", None)
}

/// Writes a kubeconfig pointing at `server` with a context namespace, a bearer `token` (none when empty)
/// and, for an `https://` server, the CA to trust. The file is private to its owner (mode 0600).
pub(crate) fn write_kubeconfig_with(
    path: &Path,
    server: &str,
    namespace: &str,
    token: &str,
    ca_pem: Option<&str>,
) -> Result<(), Error> {
    use base64::Engine as _;
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(|source| Error::Io {
            path: parent.into(),
            source,
        })?;
    }
    let ca = ca_pem
        .map(|pem| {
            format!(
                "    certificate-authority-data: {}\n",
                base64::engine::general_purpose::STANDARD.encode(pem)
            )
        })
        .unwrap_or_default();
    let user = if token.is_empty() {
        "  user: {}\n".to_string()
    } else {
        format!("  user:\n    token: {token}\n")
    };
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-emulator\n  cluster:\n    server: {server}\n{ca}contexts:\n- name: kube-emulator\n  context:\n    cluster: kube-emulator\n    user: kube-emulator\n    namespace: {namespace}\ncurrent-context: kube-emulator\nusers:\n- name: kube-emulator\n{user}"
    );
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        f.write_all(text.as_bytes())
    };
    write().map_err(|source| Error::Io {
        path: path.into(),
        source,
    })
}

/// A kube-rs client for an emulator at `url` (`http://…`) sending `token` (none when empty).
pub fn client_for(url: &str, token: &str) -> kube::Client {
    let mut cfg = kube::Config::new(url.parse().expect("emulator url"));
    cfg.default_namespace = "default".into();
    if !token.is_empty() {
        cfg.auth_info.token = Some(secrecy::SecretString::from(token.to_string()));
    }
    kube::Client::try_from(cfg).expect("kube client for the emulator")
}

fn manifest_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    if dir.is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    if !dir.exists() {
        return Ok(Vec::new());
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| Error::Io {
            path: dir.into(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .is_some_and(|e| e == "yaml" || e == "yml" || e == "json")
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Parses every document of every manifest file under `dir`.
pub fn read_manifests(dir: &Path) -> Result<Vec<Value>, Error> {
    let mut docs = Vec::new();
    for f in manifest_files(dir)? {
        let data = std::fs::read(&f).map_err(|source| Error::Io {
            path: f.clone(),
            source,
        })?;
        for d in serde_yaml::Deserializer::from_slice(&data) {
            let v: Value = serde::Deserialize::deserialize(d).map_err(|e| Error::Manifest {
                path: f.clone(),
                message: e.to_string(),
            })?;
            if v.is_object() {
                docs.push(v);
            }
        }
    }
    Ok(docs)
}

fn load_manifests(inner: &Inner, dir: &Path) -> Result<usize, Error> {
    let mut docs = read_manifests(dir)?;
    docs.sort_by_key(|d| d["kind"] != "CustomResourceDefinition");
    let mut st = inner.st();
    let mut n = 0;
    for d in docs {
        let api_version = d["apiVersion"].as_str().unwrap_or_default();
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let Some(kind) = st
            .kinds
            .iter()
            .find(|k| k.group == group && k.version == version && k.kind == d["kind"])
            .cloned()
        else {
            return Err(Error::Manifest {
                path: dir.into(),
                message: format!("no served kind for {api_version} {}", d["kind"]),
            });
        };
        let ns = kind.namespaced.then(|| {
            d["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string()
        });
        let opts = WriteOpts {
            dry_run: false,
            manager: "kube-emulator".into(),
            field_validation: crate::schema::FieldValidation::Ignore,
        };
        match st.create(&kind, ns.as_deref(), d, &opts) {
            Ok(_) => n += 1,
            Err(e) if e.code == 409 => {}
            Err(e) => {
                return Err(Error::Manifest {
                    path: dir.into(),
                    message: e.message,
                });
            }
        }
    }
    Ok(n)
}

impl Running {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Path of the kubeconfig written at start.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kube-rs client for this emulator as the admin (default namespace `default`).
    pub fn client(&self) -> kube::Client {
        client_for(&self.url(), self.admin_token())
    }

    /// A kube-rs client sending `token` (e.g. a ServiceAccount token from a TokenRequest).
    pub fn client_with_token(&self, token: &str) -> kube::Client {
        client_for(&self.url(), token)
    }

    /// The admin bearer token (user `kube-emulator-admin`, group `system:masters`); empty when
    /// authentication is off.
    pub fn admin_token(&self) -> &str {
        if self.inner.auth.enabled {
            self.inner.auth.admin_token()
        } else {
            ""
        }
    }

    /// PEM of the CA that signed the emulator's serving certificate (for `https://` clients).
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// `https://127.0.0.1:PORT` (the same port serves plain HTTP and TLS).
    pub fn https_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Writes a kubeconfig for this emulator that authenticates with `token` (e.g. a ServiceAccount's),
    /// with `namespace` as the context namespace: `https://` with the emulator's CA when authentication is
    /// on, so kubectl sends the token.
    pub fn write_kubeconfig_for_token(
        &self,
        path: &Path,
        token: &str,
        namespace: &str,
    ) -> Result<(), Error> {
        if self.inner.auth.enabled {
            write_kubeconfig_with(
                path,
                &self.https_url(),
                namespace,
                token,
                Some(&self.ca_pem),
            )
        } else {
            write_kubeconfig_with(path, &self.url(), namespace, token, None)
        }
    }

    /// Moves the clock ServiceAccount token expiry is checked against forward (tokens expire without
    /// waiting).
    pub fn advance_token_clock(&self, d: Duration) {
        self.inner.auth.advance_clock(d.as_secs() as i64);
    }

    /// Loads every manifest under `dir` (CRDs first); returns how many objects were created.
    pub fn load_crds(&self, dir: impl AsRef<Path>) -> Result<usize, Error> {
        let n = load_manifests(&self.inner, dir.as_ref())?;
        self.inner.changed.notify_one();
        Ok(n)
    }

    /// Sets (or with `append`, extends) the log text of a pod container; marks the pod Running.
    pub fn set_pod_log(
        &self,
        ns: &str,
        pod: &str,
        container: Option<&str>,
        text: &str,
        append: bool,
    ) -> Result<(), crate::ApiError> {
        self.inner
            .st()
            .set_pod_log(ns, pod, container, text, append)
    }

    /// The request audit log as JSONL.
    pub fn audit_log(&self) -> String {
        self.inner.admin().audit_jsonl()
    }

    /// Adds a fault-injection rule.
    pub fn inject_fault(&self, fault: Fault) {
        self.inner.admin().add_fault(fault);
    }

    /// Removes every fault rule.
    pub fn clear_faults(&self) {
        self.inner.admin().clear_faults();
    }

    /// Adds latency before every API request.
    pub fn set_latency(&self, d: Duration) {
        self.inner.admin().latency = d;
    }

    /// Holds back the answer to the first write matching `rule`, after applying it.
    pub fn hold(&self, rule: Hold) {
        self.inner.admin().add_hold(rule);
    }

    /// How many answers have been held back so far.
    pub fn held(&self) -> u64 {
        self.inner.admin().held
    }

    /// Removes every hold rule and releases every held answer.
    pub fn release_holds(&self) {
        self.inner.admin().clear_holds();
        self.inner.release_holds.send_modify(|n| *n += 1);
    }

    /// Ends every open watch stream.
    pub fn drop_watches(&self) {
        self.inner.drop_watches.send_modify(|n| *n += 1);
    }

    /// Sets (Some) or clears (None) the seeded fault schedule; a new one starts from its seed with
    /// zeroed counters.
    pub fn set_chaos(&self, schedule: Option<Chaos>) -> Result<(), Error> {
        if let Some(c) = &schedule {
            c.validate().map_err(Error::Chaos)?;
        }
        self.inner.admin().set_chaos(schedule);
        Ok(())
    }

    /// What the current (or last) chaos schedule injected so far.
    pub fn chaos_counts(&self) -> ChaosCounts {
        let report = self.inner.admin().chaos_report();
        serde_json::from_value(report["counts"].clone()).unwrap_or_default()
    }

    /// Stops serving like an API server going down: every watch stream ends, held answers are
    /// released, the port stops accepting connections (clients get "connection refused") and the
    /// stored state is kept as a snapshot (also written to the snapshot file, if configured). The
    /// audit log, fault rules and chaos schedule survive. No-op when already stopped.
    pub async fn stop_serving(&mut self) {
        if self.stopped.is_some() {
            return;
        }
        let _ = self.inner.shutdown.send(true);
        if let Some(s) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), s).await;
        }
        // Taken once nothing is served any more, so no answered write is missing from it.
        let snap = self.inner.st().snapshot();
        if let Some(p) = &self.snapshot {
            let _ = std::fs::write(p, serde_json::to_vec(&snap).unwrap_or_default());
        }
        self.stopped = Some(snap);
    }

    /// Serves again on the same address, from the snapshot taken by [`Running::stop_serving`]:
    /// the same objects and resourceVersion counter, an empty watch history (a watch resuming from
    /// an older resourceVersion gets 410 Expired and relists, as after an etcd compaction), the pod
    /// logs, audit log, faults, chaos schedule, certificates and tokens carried over. No-op while serving.
    pub async fn serve_again(&mut self) -> Result<(), Error> {
        let Some(snap) = self.stopped.take() else {
            return Ok(());
        };
        let bind = self.addr.to_string();
        // The old server's connections may take a moment to close; the bind retries briefly.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let listener = loop {
            match tokio::net::TcpListener::bind(&bind).await {
                Ok(l) => break l,
                Err(source) if tokio::time::Instant::now() > deadline => {
                    self.stopped = Some(snap);
                    return Err(Error::Listen { addr: bind, source });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let listener = match crate::tls::DualListener::new(listener, &self.certs) {
            Ok(l) => l,
            Err(source) => {
                self.stopped = Some(snap);
                return Err(Error::Listen { addr: bind, source });
            }
        };
        let mut state = State::new(self.history_size);
        state.restore(&snap);
        state.logs = std::mem::take(&mut self.inner.st().logs);
        let admin = std::mem::take(&mut *self.inner.admin());
        // The same tokens stay valid (the daemons' kubeconfigs and ServiceAccount tokens).
        let auth = self.inner.auth.clone();
        self.inner = new_inner(state, admin, auth, self.addr, self.bookmark_interval);
        self.server = Some(serve(listener, &self.inner));
        tracing::info!(addr = %self.addr, "kube-emulator serving again");
        Ok(())
    }

    /// [`Running::stop_serving`], then [`Running::serve_again`] at once.
    pub async fn restart(&mut self) -> Result<(), Error> {
        self.stop_serving().await;
        self.serve_again().await
    }

    /// True between [`Running::stop_serving`] and [`Running::serve_again`].
    pub fn is_stopped(&self) -> bool {
        self.stopped.is_some()
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.st().rv
    }

    /// Every stored object (storage form) plus the counter.
    pub fn snapshot(&self) -> Value {
        self.inner.st().snapshot()
    }

    /// Stops serving, ends every stream, and writes the snapshot if configured.
    pub async fn shutdown(mut self) {
        self.stop();
        if let Some(s) = self.server.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), s).await;
        }
    }

    fn stop(&mut self) {
        let _ = self.inner.shutdown.send(true);
        if let Some(p) = self.snapshot.take() {
            let snap = self.inner.st().snapshot();
            let _ = std::fs::write(&p, serde_json::to_vec(&snap).unwrap_or_default());
        }
    }

    /// A JSON summary for printing.
    pub fn describe(&self) -> Value {
        json!({"url": self.url(), "kubeconfig": self.kubeconfig.display().to_string(),
            "authentication": self.inner.auth.enabled})
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
        if let Some(d) = self.temp_dir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}
