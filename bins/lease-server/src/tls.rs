//! TLS on the gRPC port: the certificate and key come from PEM files (a `kubernetes.io/tls`
//! Secret mounted into the pod) and are loaded again when the files change, so a renewed
//! certificate (cert-manager) is served without a restart.
//!
//! ```text
//!  TcpListener ─ accept ─► task per connection: TLS handshake (10 s at most, ALPN h2)
//!                              │ resolver: files changed (checked at most once a second)?
//!                              │   ─► load + check the key matches ─► serve the new pair
//!                              │   └ unreadable or mismatched ─► keep serving the old pair, warn
//!                              ▼
//!                          handshaken stream ─► tonic (serve_with_incoming_shutdown)
//! ```

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;

/// How long a client may take to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often, at most, the files are looked at for changes.
const CHECK_EVERY: Duration = Duration::from_secs(1);

/// The certificate chain and private key files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    /// PEM certificate chain, leaf first (`tls.crt`).
    pub cert: PathBuf,
    /// PEM private key (`tls.key`).
    pub key: PathBuf,
}

type Stamp = (Option<SystemTime>, u64, Option<SystemTime>, u64);

fn stamp(files: &CertFiles) -> Stamp {
    let one = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| (m.modified().ok(), m.len()))
            .unwrap_or((None, 0))
    };
    let (cm, cl) = one(&files.cert);
    let (km, kl) = one(&files.key);
    (cm, cl, km, kl)
}

/// Loads the pair, checking that the key belongs to the leaf certificate.
pub fn load(files: &CertFiles, provider: &CryptoProvider) -> anyhow::Result<Arc<CertifiedKey>> {
    let cert_pem = std::fs::read(&files.cert)
        .with_context(|| format!("read --tls-cert-file {}", files.cert.display()))?;
    let key_pem = std::fs::read(&files.key)
        .with_context(|| format!("read --tls-key-file {}", files.key.display()))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--tls-cert-file {}: {e}", files.cert.display()))?;
    if certs.is_empty() {
        bail!(
            "--tls-cert-file {}: no PEM certificate in it",
            files.cert.display()
        );
    }
    // The error names the file, never its content.
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        anyhow::anyhow!(
            "--tls-key-file {}: no usable PEM private key ({e})",
            files.key.display()
        )
    })?;
    let key = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| anyhow::anyhow!("--tls-key-file {}: {e}", files.key.display()))?;
    let pair = CertifiedKey::new(certs, key);
    pair.keys_match().map_err(|e| {
        anyhow::anyhow!(
            "--tls-key-file {} does not belong to the certificate in --tls-cert-file {}: {e}",
            files.key.display(),
            files.cert.display()
        )
    })?;
    Ok(Arc::new(pair))
}

/// Serves the pair in the files, loading it again when they change.
#[derive(Debug)]
pub struct ReloadingCert {
    files: CertFiles,
    provider: Arc<CryptoProvider>,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    current: Arc<CertifiedKey>,
    stamp: Stamp,
    checked: Instant,
    failed_stamp: Option<Stamp>,
}

impl ReloadingCert {
    /// Loads the pair once (an error names the flag and file).
    pub fn new(files: CertFiles, provider: Arc<CryptoProvider>) -> anyhow::Result<Self> {
        let stamp = stamp(&files);
        let current = load(&files, &provider)?;
        Ok(Self {
            files,
            provider,
            state: Mutex::new(State {
                current,
                stamp,
                checked: Instant::now(),
                failed_stamp: None,
            }),
        })
    }

    /// The pair to serve now, after looking at the files if a check is due.
    pub fn current(&self) -> Arc<CertifiedKey> {
        self.current_checked_every(CHECK_EVERY)
    }

    fn current_checked_every(&self, every: Duration) -> Arc<CertifiedKey> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.checked.elapsed() >= every {
            state.checked = Instant::now();
            let now = stamp(&self.files);
            if now != state.stamp && state.failed_stamp.as_ref() != Some(&now) {
                match load(&self.files, &self.provider) {
                    Ok(pair) => {
                        tracing::info!(cert = %self.files.cert.display(), "loaded the changed TLS certificate");
                        state.current = pair;
                        state.stamp = now;
                        state.failed_stamp = None;
                    }
                    Err(e) => {
                        // Half-written during a Secret update, or a bad pair: keep the old one.
                        tracing::warn!(error = %format!("{e:#}"), "keeping the TLS certificate in use");
                        state.failed_stamp = Some(now);
                    }
                }
            }
        }
        state.current.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The rustls provider of this workspace: ring.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A server configuration serving `cert` over HTTP/2 (gRPC), TLS 1.2 and 1.3.
pub fn server_config(
    cert: Arc<ReloadingCert>,
    provider: Arc<CryptoProvider>,
) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("TLS protocol versions")?
        .with_no_client_auth()
        .with_cert_resolver(cert);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// What a connection that does not open with a TLS handshake record speaks instead, judged by
/// its first bytes; `None` for TLS (a handshake record starts with byte 22).
pub fn not_tls(prefix: &[u8]) -> Option<&'static str> {
    const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";
    match prefix.first()? {
        0x16 => None,
        _ if prefix.len() >= 3
            && H2_PREFACE.starts_with(&prefix[..prefix.len().min(H2_PREFACE.len())]) =>
        {
            Some(
                "plaintext HTTP/2 (gRPC without TLS: an http:// lease endpoint, or a client \
                 built without TLS support)",
            )
        }
        // A request line: an upper-case method, then a space.
        _ if prefix
            .iter()
            .position(|&b| b == b' ')
            .is_some_and(|sp| sp >= 3 && prefix[..sp].iter().all(u8::is_ascii_uppercase)) =>
        {
            Some("plaintext HTTP/1")
        }
        _ => Some("something other than TLS"),
    }
}

/// Warns about clients that do not speak TLS, at most once per `WARN_EVERY` (a misconfigured
/// client retries every few hundred milliseconds), counting the ones it did not log.
struct PlaintextWarnings {
    last: Option<Instant>,
    quiet: u64,
}

const WARN_EVERY: Duration = Duration::from_secs(30);

static PLAINTEXT: Mutex<PlaintextWarnings> = Mutex::new(PlaintextWarnings {
    last: None,
    quiet: 0,
});

fn warn_not_tls(peer: std::net::SocketAddr, speaks: &str) {
    let mut w = PLAINTEXT.lock().unwrap_or_else(|e| e.into_inner());
    if w.last.is_some_and(|at| at.elapsed() < WARN_EVERY) {
        w.quiet += 1;
        tracing::debug!(%peer, speaks, "refused a connection that is not TLS");
        return;
    }
    tracing::warn!(
        %peer,
        speaks,
        also_refused_since_last_warning = w.quiet,
        "refused a connection to the TLS gRPC port that is not TLS; the client needs an https:// \
         lease endpoint and --lease-ca-file"
    );
    w.last = Some(Instant::now());
    w.quiet = 0;
}

/// Accepts connections on `listener` and yields those whose TLS handshake succeeded; handshakes
/// run concurrently, so a slow client holds up nobody else. Ends when the receiver is dropped.
/// A client that does not open with TLS is closed and named in a (rate-limited) warning.
pub fn incoming(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
) -> tokio_stream::wrappers::ReceiverStream<Result<TlsStream<TcpStream>, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                _ = tx.closed() => return,
                accepted = listener.accept() => accepted,
            };
            let (tcp, peer) = match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    // Out of file descriptors and the like: do not spin.
                    tracing::warn!(error = %e, "accepting a gRPC connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                let handshake = async {
                    let mut first = [0u8; 14];
                    let n = tcp.peek(&mut first).await?;
                    if let Some(speaks) = not_tls(&first[..n]) {
                        warn_not_tls(peer, speaks);
                        return Ok(None);
                    }
                    acceptor.accept(tcp).await.map(Some)
                };
                match tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake).await {
                    Ok(Ok(Some(stream))) => {
                        let _ = tx.send(Ok(stream)).await;
                    }
                    Ok(Ok(None)) => {}
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                    Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                }
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn files(dir: &Path) -> CertFiles {
        CertFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
        }
    }

    fn leaf(k: &CertifiedKey) -> Vec<u8> {
        k.cert[0].to_vec()
    }

    #[test]
    fn connections_that_do_not_open_with_tls_are_told_apart() {
        assert_eq!(not_tls(&[0x16, 3, 1, 0, 0xc4]), None);
        assert_eq!(not_tls(b""), None);
        assert!(
            not_tls(b"PRI * HTTP/2.0")
                .unwrap()
                .starts_with("plaintext HTTP/2")
        );
        assert!(not_tls(b"PRI *").unwrap().starts_with("plaintext HTTP/2"));
        assert_eq!(not_tls(b"GET / HTTP/1.1"), Some("plaintext HTTP/1"));
        assert_eq!(not_tls(b"\x00\x01"), Some("something other than TLS"));
    }

    #[test]
    fn the_pair_is_loaded_again_when_the_files_change_and_kept_when_they_are_bad() {
        let dir = std::env::temp_dir().join(format!("lease-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = files(&dir);
        let (c1, k1) = pair("one.example");
        std::fs::write(&f.cert, &c1).unwrap();
        std::fs::write(&f.key, &k1).unwrap();
        let cert = ReloadingCert::new(f.clone(), provider()).unwrap();
        let first = leaf(&cert.current_checked_every(Duration::ZERO));

        // A key of another certificate: refused, the old pair stays.
        let (c2, k2) = pair("two.example");
        std::fs::write(&f.cert, &c2).unwrap();
        assert_eq!(leaf(&cert.current_checked_every(Duration::ZERO)), first);
        // The matching key arrives: the new pair is served.
        std::fs::write(&f.key, &k2).unwrap();
        let second = leaf(&cert.current_checked_every(Duration::ZERO));
        assert_ne!(second, first);

        // Errors name the flag and the file, never the key.
        std::fs::write(&f.key, "not a key").unwrap();
        let err = format!("{:#}", load(&f, &provider()).unwrap_err());
        assert!(
            err.contains("--tls-key-file") && err.contains("tls.key"),
            "{err}"
        );
        std::fs::write(&f.key, &k1).unwrap();
        let err = format!("{:#}", load(&f, &provider()).unwrap_err());
        assert!(err.contains("does not belong"), "{err}");
        assert!(!err.contains("PRIVATE KEY"), "{err}");
        std::fs::write(&f.cert, "nothing").unwrap();
        let err = format!("{:#}", load(&f, &provider()).unwrap_err());
        assert!(err.contains("no PEM certificate"), "{err}");
        let err = format!(
            "{:#}",
            ReloadingCert::new(files(&dir.join("absent")), provider()).unwrap_err()
        );
        assert!(err.contains("--tls-cert-file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
