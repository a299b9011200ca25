//! HTTPS next to plain HTTP on the same port.
//!
//! kubectl (client-go) sends credentials only over TLS, so with authentication on the kubeconfig points
//! at `https://…` and carries a per-instance CA. Plain HTTP keeps working on the same port for kube-rs
//! clients and scripts (a connection whose first byte is a TLS handshake record is served over TLS).
//!
//! ```text
//! TcpListener ─accept─► task per connection: peek 1 byte ─ 0x16 ─► rustls handshake ─┐
//!                                                       └ else ─► plain ──────────────┴► channel ─► axum
//! ```

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// A CA made for this emulator instance and the server certificate it signed for the loopback names.
pub(crate) struct Certificates {
    /// PEM of the CA certificate (the kubeconfig's `certificate-authority-data`).
    pub(crate) ca_pem: String,
    acceptor: TlsAcceptor,
}

impl Certificates {
    /// Generates a CA and a server certificate for `localhost`, `127.0.0.1`, `::1` and `host`.
    pub(crate) fn generate(host: &str) -> Result<Self, String> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let e = |e: rcgen::Error| format!("generating the TLS certificate: {e}");
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "kube-emulator CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let issuer =
            CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(e)?).map_err(e)?;
        let mut names = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        if !names.iter().any(|n| n == host) && !host.is_empty() && host != "0.0.0.0" {
            names.push(host.to_string());
        }
        let mut server = CertificateParams::new(names).map_err(e)?;
        server
            .distinguished_name
            .push(DnType::CommonName, "kube-emulator");
        let key = KeyPair::generate().map_err(e)?;
        let cert = server.signed_by(&key, &issuer).map_err(e)?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .map_err(|e| e.to_string())?;
        // HTTP/1.1 only: the emulator does not speak HTTP/2.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Certificates {
            ca_pem: issuer.pem(),
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// A served connection: plain or TLS.
pub(crate) enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// An axum listener yielding plain and TLS connections from one TCP listener; handshakes run in their own
/// tasks so a slow client never blocks accepting others.
pub(crate) struct DualListener {
    rx: mpsc::Receiver<(Conn, SocketAddr)>,
    local: SocketAddr,
}

impl DualListener {
    pub(crate) fn new(listener: TcpListener, certs: &Certificates) -> io::Result<Self> {
        let local = listener.local_addr()?;
        let (tx, rx) = mpsc::channel(64);
        let acceptor = certs.acceptor.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    a = listener.accept() => a,
                    // The server is gone: stop listening, so the port is free again.
                    _ = tx.closed() => return,
                };
                let (socket, peer) = match accepted {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let tx = tx.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let mut first = [0u8; 1];
                    let is_tls = matches!(
                        tokio::time::timeout(Duration::from_secs(30), socket.peek(&mut first))
                            .await,
                        Ok(Ok(1))
                    ) && first[0] == 0x16;
                    let conn = if is_tls {
                        match tokio::time::timeout(Duration::from_secs(30), acceptor.accept(socket))
                            .await
                        {
                            Ok(Ok(s)) => Conn::Tls(Box::new(s)),
                            Ok(Err(e)) => {
                                tracing::debug!(error = %e, "TLS handshake failed");
                                return;
                            }
                            Err(_) => return,
                        }
                    } else {
                        Conn::Plain(socket)
                    };
                    let _ = tx.send((conn, peer)).await;
                });
            }
        });
        Ok(DualListener { rx, local })
    }
}

impl axum::serve::Listener for DualListener {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(self.local)
    }
}
