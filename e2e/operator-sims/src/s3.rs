//! An S3-protocol object store on loopback: the `s3s` protocol layer over `s3s-fs` (objects are
//! plain files under `<data-dir>/s3/buckets/<bucket>/`), with AWS SigV4 signature checking against
//! a registry of users and per-bucket authorisation.
//!
//! ```text
//!  COSI simulator ──register(bucket, accessKey, secretKey)──► Registry
//!                                                              │ secret key by access key (SigV4)
//!  barman-cloud / aws / boto3 ──► http://127.0.0.1:P   ──┐     │ bucket allowed for that key?
//!                              ──► https://127.0.0.1:Q ──┴► s3s service ──► s3s-fs (files)
//!                                   (dev CA: <data-dir>/s3/ca.crt)
//! ```
//!
//! The HTTPS listener stands for the platform's external S3 ingress (a certificate clients verify);
//! its certificate is issued at start by a development CA generated at start. The HTTP listener
//! stands for the in-cluster fallback endpoint. Invariants: every request must be signed with a
//! registered key pair (a wrong secret key gets the server's 403 `SignatureDoesNotMatch`, an
//! unknown access key 403 `InvalidAccessKeyId`), a key reaches only the buckets it was registered
//! for, and no key is ever logged.
//!
//! Fault switches (for tests and the dev control plane), set through [`S3Server::set_faults`] or
//! the admin endpoint (`PUT <admin>/faults`, the address in `endpoints.json`):
//!
//! ```text
//!  mode "stop"         both S3 listeners closed, open connections cut: connections refused;
//!                      switched back, the listeners are bound again on the same ports
//!  mode "unavailable"  every request answered 503 with S3's XML error `ServiceUnavailable`
//!  delayMs N           every request waits N ms before it is served (or refused)
//!  mode "none"         normal service
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnBuilder;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::path::S3Path;
use s3s::service::{S3Service, S3ServiceBuilder};
use s3s::{S3Result, s3_error};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Errors of the S3 server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file or directory could not be written.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The development CA or the server certificate could not be generated.
    #[error("generating the development certificates: {0}")]
    Certificate(#[from] rcgen::Error),
    /// The TLS configuration was rejected.
    #[error("configuring TLS: {0}")]
    Tls(#[from] rustls::Error),
    /// The file-system backend refused the data directory.
    #[error("opening the object store at {path}: {message}")]
    Backend {
        /// The directory.
        path: PathBuf,
        /// What s3s-fs said.
        message: String,
    },
    /// A bucket name that S3 would refuse.
    #[error("invalid bucket name {0:?}")]
    BucketName(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Where the S3 server listens and what it writes.
#[derive(Clone, Debug)]
pub struct Options {
    /// Data directory; objects go to `<dir>/buckets`, the CA to `<dir>/ca.crt`.
    pub dir: PathBuf,
    /// Plain-HTTP listen address (the in-cluster fallback endpoint).
    pub http_addr: SocketAddr,
    /// HTTPS listen address (the "external ingress" endpoint).
    pub https_addr: SocketAddr,
    /// Listen address of the fault-switch admin endpoint (plain HTTP, loopback).
    pub admin_addr: SocketAddr,
}

/// What clients need to reach the server; written to `<dir>/endpoints.json` at start.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Endpoints {
    /// `http://127.0.0.1:PORT`.
    pub http: String,
    /// `https://127.0.0.1:PORT`.
    pub https: String,
    /// PEM file of the development CA that issued the HTTPS certificate.
    pub ca_file: PathBuf,
    /// `http://127.0.0.1:PORT` of the fault-switch admin endpoint (`GET`/`PUT /faults`).
    #[serde(default)]
    pub admin: String,
}

impl Endpoints {
    /// Reads `<dir>/endpoints.json` as written by a running server.
    pub fn read(dir: &Path) -> std::io::Result<Self> {
        let text = std::fs::read_to_string(dir.join("endpoints.json"))?;
        serde_json::from_str(&text).map_err(std::io::Error::other)
    }

    /// The HTTPS endpoint as the bucket chart writes it into a credentials Secret: a bare
    /// `host:port`.
    pub fn https_host(&self) -> &str {
        self.https.trim_start_matches("https://")
    }
}

#[derive(Debug, Default)]
struct User {
    secret_key: String,
    buckets: BTreeSet<String>,
}

/// Registered key pairs and the buckets each may use.
#[derive(Debug, Default)]
pub struct Registry {
    users: Mutex<BTreeMap<String, User>>,
}

impl Registry {
    /// Registers (or replaces the secret of) `access_key` and grants it `bucket`.
    pub fn grant(&self, access_key: &str, secret_key: &str, bucket: &str) {
        let mut users = self.users.lock().unwrap_or_else(|e| e.into_inner());
        let user = users.entry(access_key.to_owned()).or_default();
        user.secret_key = secret_key.to_owned();
        user.buckets.insert(bucket.to_owned());
    }

    /// Forgets a key pair: requests signed with it are refused from now on.
    pub fn revoke(&self, access_key: &str) {
        self.users
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(access_key);
    }

    fn secret(&self, access_key: &str) -> Option<String> {
        self.users
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(access_key)
            .map(|u| u.secret_key.clone())
    }

    /// Whether `access_key` may touch `bucket`.
    pub fn allows(&self, access_key: &str, bucket: &str) -> bool {
        self.users
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(access_key)
            .is_some_and(|u| u.buckets.contains(bucket))
    }
}

struct RegistryAuth(Arc<Registry>);

#[async_trait::async_trait]
impl S3Auth for RegistryAuth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        match self.0.secret(access_key) {
            Some(s) => Ok(SecretKey::from(s)),
            None => Err(s3_error!(
                InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records."
            )),
        }
    }
}

struct BucketAccess(Arc<Registry>);

#[async_trait::async_trait]
impl S3Access for BucketAccess {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let Some(creds) = cx.credentials() else {
            return Err(s3_error!(AccessDenied, "Anonymous access is not allowed"));
        };
        match cx.s3_path() {
            S3Path::Root => Ok(()),
            S3Path::Bucket { bucket } | S3Path::Object { bucket, .. } => {
                if self.0.allows(&creds.access_key, bucket) {
                    Ok(())
                } else {
                    Err(s3_error!(AccessDenied, "Access Denied"))
                }
            }
        }
    }
}

/// How the server answers: normally, not at all, or with 503 for everything.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultMode {
    /// Normal service.
    #[default]
    None,
    /// The listeners are closed (connections refused) and open connections cut.
    Stop,
    /// Every request gets 503 `ServiceUnavailable`.
    Unavailable,
}

/// The fault switches of the S3 server (`PUT /faults` body; absent fields mean no fault).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Faults {
    /// `none`, `stop` or `unavailable`.
    #[serde(default)]
    pub mode: FaultMode,
    /// Milliseconds every request waits before it is served.
    #[serde(default)]
    pub delay_ms: u64,
}

impl Faults {
    /// Parses a `PUT /faults` body; the error names what is wrong.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        let text = std::str::from_utf8(body).map_err(|_| "the body is not UTF-8".to_owned())?;
        if text.trim().is_empty() {
            return Err(
                "empty body; send a JSON object such as {\"mode\":\"stop\"}, {\"mode\":\"unavailable\"}, {\"delayMs\":2000} or {\"mode\":\"none\"}"
                    .to_owned(),
            );
        }
        serde_json::from_str(text).map_err(|e| {
            format!(
                "invalid faults {text:?}: {e} (mode: none|stop|unavailable; delayMs: milliseconds)"
            )
        })
    }

    fn delay(&self) -> Duration {
        Duration::from_millis(self.delay_ms)
    }
}

/// The XML body of the 503 a switched-off server answers (S3's error document).
pub const SERVICE_UNAVAILABLE_BODY: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>ServiceUnavailable</Code><Message>Service is unable to handle request.</Message><RequestId>operator-sims-fault</RequestId></Error>";

/// A running S3 server.
#[derive(Clone)]
pub struct S3Server {
    registry: Arc<Registry>,
    buckets_dir: PathBuf,
    endpoints: Endpoints,
    faults: watch::Sender<Faults>,
}

impl std::fmt::Debug for S3Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Server")
            .field("endpoints", &self.endpoints)
            .finish_non_exhaustive()
    }
}

impl S3Server {
    /// Generates the CA and the server certificate, binds both listeners, writes
    /// `<dir>/ca.crt` and `<dir>/endpoints.json` and serves until the runtime stops.
    pub async fn start(options: &Options) -> Result<Self, Error> {
        let buckets_dir = options.dir.join("buckets");
        std::fs::create_dir_all(&buckets_dir)
            .map_err(io(format!("creating {}", buckets_dir.display())))?;
        let certs = DevCertificates::generate()?;
        let ca_file = options.dir.join("ca.crt");
        std::fs::write(&ca_file, &certs.ca_pem)
            .map_err(io(format!("writing {}", ca_file.display())))?;
        // The CA must be readable by the unprivileged user PostgreSQL (and barman) run as.
        set_mode(&ca_file, 0o644)?;
        set_mode(&options.dir, 0o755)?;

        let registry = Arc::new(Registry::default());
        let fs = s3s_fs::FileSystem::new(&buckets_dir).map_err(|e| Error::Backend {
            path: buckets_dir.clone(),
            message: format!("{e:?}"),
        })?;
        let mut builder = S3ServiceBuilder::new(fs);
        builder.set_auth(RegistryAuth(registry.clone()));
        builder.set_access(BucketAccess(registry.clone()));
        let service = builder.build();

        let http = TcpListener::bind(options.http_addr)
            .await
            .map_err(io(format!("binding {}", options.http_addr)))?;
        let https = TcpListener::bind(options.https_addr)
            .await
            .map_err(io(format!("binding {}", options.https_addr)))?;
        let http_addr = http.local_addr().map_err(io("local address"))?;
        let https_addr = https.local_addr().map_err(io("local address"))?;
        let admin = TcpListener::bind(options.admin_addr)
            .await
            .map_err(io(format!("binding {}", options.admin_addr)))?;
        let admin_addr = admin.local_addr().map_err(io("local address"))?;
        let tls = tokio_rustls::TlsAcceptor::from(Arc::new(certs.server_config()?));
        let (faults, _) = watch::channel(Faults::default());
        tokio::spawn(serve(http, service.clone(), None, faults.subscribe()));
        tokio::spawn(serve(https, service, Some(tls), faults.subscribe()));
        tokio::spawn(serve_admin(admin, faults.clone()));

        let endpoints = Endpoints {
            http: format!("http://{http_addr}"),
            https: format!("https://{https_addr}"),
            ca_file,
            admin: format!("http://{admin_addr}"),
        };
        let json = serde_json::to_string_pretty(&endpoints).unwrap_or_default();
        let path = options.dir.join("endpoints.json");
        std::fs::write(&path, json).map_err(io(format!("writing {}", path.display())))?;
        tracing::info!(
            http = endpoints.http,
            https = endpoints.https,
            ca = %endpoints.ca_file.display(),
            admin = endpoints.admin,
            "S3 server listening"
        );
        Ok(S3Server {
            registry,
            buckets_dir,
            endpoints,
            faults,
        })
    }

    /// Switches faults on or off (see the module documentation); takes effect for the next
    /// request, and `stop` closes the listeners at once.
    pub fn set_faults(&self, faults: Faults) {
        tracing::info!(?faults, "S3 fault switches set");
        self.faults.send_replace(faults);
    }

    /// The fault switches now.
    pub fn faults(&self) -> Faults {
        *self.faults.borrow()
    }

    /// Where clients reach the server.
    pub fn endpoints(&self) -> &Endpoints {
        &self.endpoints
    }

    /// The key registry.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Creates `bucket` (idempotent).
    pub fn ensure_bucket(&self, bucket: &str) -> Result<(), Error> {
        let valid = (3..=63).contains(&bucket.len())
            && bucket
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if !valid {
            return Err(Error::BucketName(bucket.to_owned()));
        }
        let dir = self.buckets_dir.join(bucket);
        std::fs::create_dir_all(&dir).map_err(io(format!("creating bucket {bucket}")))
    }
}

fn set_mode(path: &Path, mode: u32) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(io(format!("chmod {}", path.display())))
}

/// Serves one listener until the runtime stops. While the `stop` fault is on, the listener is
/// closed and every open connection cut; when it goes, the same address is bound again.
async fn serve(
    listener: TcpListener,
    service: S3Service,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut faults: watch::Receiver<Faults>,
) {
    let http = ConnBuilder::new(TokioExecutor::new());
    let addr = match listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            tracing::error!(error = %e, "S3 listener has no local address");
            return;
        }
    };
    let mut listener = Some(listener);
    loop {
        let current = match listener.take() {
            Some(l) => l,
            None => rebind(addr).await,
        };
        loop {
            let stopping = async {
                let _ = faults.wait_for(|f| f.mode == FaultMode::Stop).await;
            };
            let (socket, _) = tokio::select! {
                () = stopping => break,
                accepted = current.accept() => match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::warn!(error = %e, "S3 accept failed");
                        continue;
                    }
                },
            };
            tokio::spawn(connection(
                socket,
                http.clone(),
                service.clone(),
                tls.clone(),
                faults.clone(),
            ));
        }
        drop(current);
        tracing::info!(%addr, "S3 listener closed (fault: stop)");
        if faults
            .wait_for(|f| f.mode != FaultMode::Stop)
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Binds `addr` again after a stop (retrying while the port is still held, e.g. in TIME_WAIT by
/// a client that does not reuse addresses).
async fn rebind(addr: SocketAddr) -> TcpListener {
    let mut attempt = 0u32;
    loop {
        match TcpListener::bind(addr).await {
            Ok(l) => {
                tracing::info!(%addr, "S3 listener open again");
                return l;
            }
            Err(e) => {
                attempt += 1;
                if attempt % 50 == 1 {
                    tracing::warn!(%addr, error = %e, "S3 listener cannot bind again yet; retrying");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One client connection, cut when the `stop` fault comes on.
async fn connection(
    socket: tokio::net::TcpStream,
    http: ConnBuilder<TokioExecutor>,
    service: S3Service,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut faults: watch::Receiver<Faults>,
) {
    let switches = faults.clone();
    let handler = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
        let service = service.clone();
        let switches = switches.clone();
        async move {
            let delay = switches.borrow().delay();
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if switches.borrow().mode == FaultMode::Unavailable {
                return Ok(service_unavailable());
            }
            service.call(req.map(s3s::Body::from)).await
        }
    });
    let serve = async move {
        let result = match tls {
            Some(tls) => match tls.accept(socket).await {
                // A client that does not trust the CA aborts the handshake: nothing to serve.
                Err(e) => {
                    tracing::debug!(error = %e, "TLS handshake failed");
                    return;
                }
                Ok(stream) => http.serve_connection(TokioIo::new(stream), handler).await,
            },
            None => http.serve_connection(TokioIo::new(socket), handler).await,
        };
        if let Err(e) = result {
            tracing::debug!(error = %e, "S3 connection ended with an error");
        }
    };
    tokio::select! {
        () = serve => {}
        _ = faults.wait_for(|f| f.mode == FaultMode::Stop) => {
            tracing::debug!("S3 connection cut (fault: stop)");
        }
    }
}

/// Sets the fault switches of a running server through its admin endpoint (`admin` as in
/// `endpoints.json`, `http://127.0.0.1:PORT`); returns the switches the server now has.
pub async fn put_faults(admin: &str, faults: Faults) -> Result<Faults, String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let host = admin
        .strip_prefix("http://")
        .ok_or_else(|| format!("admin endpoint {admin:?} is not http://HOST:PORT"))?;
    let body = serde_json::to_string(&faults).map_err(|e| e.to_string())?;
    let mut stream = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| format!("connecting to {admin}: {e}"))?;
    let request = format!(
        "PUT /faults HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("writing to {admin}: {e}"))?;
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .await
        .map_err(|e| format!("reading from {admin}: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!(
            "{admin}/faults answered {:?}: {}",
            head.lines().next().unwrap_or_default(),
            rest.trim()
        ));
    }
    serde_json::from_str(rest.trim()).map_err(|e| format!("{admin}/faults answered {rest:?}: {e}"))
}

/// S3's answer while the `unavailable` fault is on.
fn service_unavailable() -> s3s::HttpResponse {
    let mut response = http::Response::new(s3s::Body::from(SERVICE_UNAVAILABLE_BODY.to_owned()));
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/xml"),
    );
    response
}

/// The admin endpoint: `GET /faults` (the switches as JSON), `PUT /faults` (set them; the body
/// replaces all of them, absent fields meaning no fault). Anything else is 404; a bad body 400
/// with what is wrong.
async fn serve_admin(listener: TcpListener, faults: watch::Sender<Faults>) {
    use axum::routing::get;
    let show = {
        let faults = faults.clone();
        move || {
            let current = *faults.borrow();
            async move { axum::Json(current) }
        }
    };
    let set = move |body: axum::body::Bytes| {
        let faults = faults.clone();
        async move {
            use axum::response::IntoResponse as _;
            match Faults::parse(&body) {
                Ok(f) => {
                    tracing::info!(faults = ?f, "S3 fault switches set");
                    faults.send_replace(f);
                    axum::Json(f).into_response()
                }
                Err(e) => (http::StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
            }
        }
    };
    let app = axum::Router::new().route("/faults", get(show).put(set));
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "S3 admin endpoint stopped");
    }
}

/// The development CA and the server certificate it issued for the loopback names.
struct DevCertificates {
    ca_pem: String,
    server_der: rustls::pki_types::CertificateDer<'static>,
    server_key_der: Vec<u8>,
}

impl DevCertificates {
    fn generate() -> Result<Self, Error> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let mut ca = CertificateParams::new(Vec::<String>::new())?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "cozy-backups development CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;
        let mut server = CertificateParams::new(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "::1".to_owned(),
        ])?;
        server
            .distinguished_name
            .push(DnType::CommonName, "cozy-backups dev S3");
        let server_key = KeyPair::generate()?;
        let server_cert = server.signed_by(&server_key, &issuer)?;
        Ok(DevCertificates {
            ca_pem: issuer.pem(),
            server_der: server_cert.der().clone(),
            server_key_der: server_key.serialize_der(),
        })
    }

    fn server_config(&self) -> Result<rustls::ServerConfig, Error> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(self.server_key_der.clone().into());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![self.server_der.clone()], key)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_reach_only_their_buckets() {
        let r = Registry::default();
        r.grant("AK1", "s1", "bucket-a");
        assert!(r.allows("AK1", "bucket-a"));
        assert!(!r.allows("AK1", "bucket-b"));
        assert!(!r.allows("AK2", "bucket-a"));
        r.grant("AK1", "s2", "bucket-b");
        assert_eq!(r.secret("AK1").as_deref(), Some("s2"));
        assert!(r.allows("AK1", "bucket-a") && r.allows("AK1", "bucket-b"));
        r.revoke("AK1");
        assert_eq!(r.secret("AK1"), None);
        assert!(!r.allows("AK1", "bucket-a"));
    }

    #[test]
    fn https_host_is_the_bare_host_the_bucket_chart_writes() {
        let e = Endpoints {
            http: "http://127.0.0.1:1".into(),
            https: "https://127.0.0.1:2".into(),
            ca_file: PathBuf::from("/x/ca.crt"),
            admin: "http://127.0.0.1:3".into(),
        };
        assert_eq!(e.https_host(), "127.0.0.1:2");
    }

    #[test]
    fn fault_bodies_parse_or_say_what_is_wrong() {
        assert_eq!(
            Faults::parse(br#"{"mode":"stop"}"#),
            Ok(Faults {
                mode: FaultMode::Stop,
                delay_ms: 0
            })
        );
        assert_eq!(
            Faults::parse(br#"{"mode":"unavailable","delayMs":250}"#),
            Ok(Faults {
                mode: FaultMode::Unavailable,
                delay_ms: 250
            })
        );
        assert_eq!(Faults::parse(b"{}"), Ok(Faults::default()));
        let bad = Faults::parse(br#"{"mode":"broken"}"#).unwrap_err();
        assert!(bad.contains("unknown variant `broken`"), "{bad}");
        let bad = Faults::parse(br#"{"delay":5}"#).unwrap_err();
        assert!(bad.contains("unknown field `delay`"), "{bad}");
        let bad = Faults::parse(br#"{"delayMs":-1}"#).unwrap_err();
        assert!(bad.contains("delayMs"), "{bad}");
        assert!(Faults::parse(b"").unwrap_err().starts_with("empty body"));
    }
}
