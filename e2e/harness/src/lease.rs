//! The lease server in tests: plaintext (`--insecure`) or secured like production, with a CA and
//! a server certificate generated into the work directory and callers authenticated by
//! ServiceAccount tokens the emulator issues (TokenRequest) and reviews (TokenReview).
//!
//! ```text
//!  spawn_secure_lease_server ─► <work dir>/lease-tls/{ca.crt, tls.crt, tls.key} (rcgen)
//!                             ─► lease-server --tls-cert-file … --tls-key-file … (TokenReview
//!                                against the emulator, with the harness's kubeconfig)
//!  lease_token(ns, sa) ─► ServiceAccount (created if missing) ─► TokenRequest (audience) ─► file
//!  SecureLeaseServer::client_env(token) ─► LEASE_ENDPOINT=https://127.0.0.1:PORT, LEASE_CA_FILE,
//!                                          LEASE_TOKEN_FILE
//!  spawn_component_lease_server(spec, component, ns) ─► the secure server with
//!      --authorize system:serviceaccount:<ns>:<component>=<component>/, and a lease token of that
//!      ServiceAccount ─► ComponentLease::args(): the replicas' --lease-* flags
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::daemon::DaemonSpec;
use crate::{Error, Harness};

/// The audience the lease server accepts by default (`--token-audience`).
pub const LEASE_AUDIENCE: &str = "cozy-backups-lease";

/// Files of a generated CA and the lease server's certificate.
#[derive(Debug, Clone)]
pub struct LeaseTls {
    /// The CA certificate clients verify the server with.
    pub ca_file: PathBuf,
    /// The server's certificate chain.
    pub cert_file: PathBuf,
    /// The server's private key.
    pub key_file: PathBuf,
}

impl LeaseTls {
    /// Generates a CA and a server certificate for `localhost`, `127.0.0.1` and the in-cluster
    /// Service names into `dir`.
    pub fn generate(dir: &Path) -> Result<Self, Error> {
        use rcgen::{
            BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
            KeyUsagePurpose,
        };
        let err = |e: rcgen::Error| Error::Process {
            what: "generating the lease server's test certificates".into(),
            source: std::io::Error::other(e.to_string()),
        };
        let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "cozy-backups test lease CA");
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let issuer =
            CertifiedIssuer::self_signed(ca, KeyPair::generate().map_err(err)?).map_err(err)?;
        let mut server = CertificateParams::new(vec![
            "localhost".to_owned(),
            "127.0.0.1".to_owned(),
            "lease-server.cozy-backup-controller.svc".to_owned(),
            "lease-server.cozy-backup-controller.svc.cluster.local".to_owned(),
        ])
        .map_err(err)?;
        server
            .distinguished_name
            .push(DnType::CommonName, "lease-server");
        let key = KeyPair::generate().map_err(err)?;
        let cert = server.signed_by(&key, &issuer).map_err(err)?;
        let write = |name: &str, content: String| -> Result<PathBuf, Error> {
            let path = dir.join(name);
            std::fs::write(&path, content).map_err(|source| Error::Process {
                what: format!("writing {}", path.display()),
                source,
            })?;
            Ok(path)
        };
        std::fs::create_dir_all(dir).map_err(|source| Error::Process {
            what: format!("creating {}", dir.display()),
            source,
        })?;
        Ok(Self {
            ca_file: write("ca.crt", issuer.pem())?,
            cert_file: write("tls.crt", cert.pem())?,
            key_file: write("tls.key", key.serialize_pem())?,
        })
    }
}

/// A lease server serving TLS with authenticated callers.
#[derive(Debug, Clone)]
pub struct SecureLeaseServer {
    /// `https://127.0.0.1:PORT`.
    pub endpoint: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// Its certificates.
    pub tls: LeaseTls,
}

impl SecureLeaseServer {
    /// The env of a daemon that uses this server with the token in `token_file`.
    pub fn client_env(&self, token_file: &Path) -> Vec<(String, String)> {
        vec![
            ("LEASE_ENDPOINT".into(), self.endpoint.clone()),
            (
                "LEASE_CA_FILE".into(),
                self.tls.ca_file.display().to_string(),
            ),
            ("LEASE_TOKEN_FILE".into(), token_file.display().to_string()),
        ]
    }

    /// `spec` with [`SecureLeaseServer::client_env`].
    pub fn client(&self, mut spec: DaemonSpec, token_file: &Path) -> DaemonSpec {
        for (k, v) in self.client_env(token_file) {
            spec = spec.env(&k, &v);
        }
        spec
    }

    /// The lease client security settings for this server and `token_file`.
    pub fn security(&self, token_file: &Path) -> SecurityFiles {
        SecurityFiles {
            ca_file: self.tls.ca_file.clone(),
            token_file: token_file.to_path_buf(),
        }
    }
}

/// A secured lease server for the replicas of one component, and the token they authenticate
/// with.
#[derive(Debug, Clone)]
pub struct ComponentLease {
    /// The server.
    pub server: SecureLeaseServer,
    /// A lease-audience token of the component's ServiceAccount.
    pub token_file: PathBuf,
}

impl ComponentLease {
    /// A replica's flags: `--lease-endpoint https://…`, `--lease-ca-file`, `--lease-token-file`.
    pub fn args(&self) -> Vec<String> {
        vec![
            "--lease-endpoint".to_owned(),
            self.server.endpoint.clone(),
            "--lease-ca-file".to_owned(),
            self.server.tls.ca_file.display().to_string(),
            "--lease-token-file".to_owned(),
            self.token_file.display().to_string(),
        ]
    }
}

/// The files an in-process lease client needs.
#[derive(Debug, Clone)]
pub struct SecurityFiles {
    /// The CA certificate.
    pub ca_file: PathBuf,
    /// The bearer token.
    pub token_file: PathBuf,
}

impl Harness {
    /// Spawns a `lease-server` binary in insecure mode (plaintext, no authentication) whose gRPC
    /// listener binds `127.0.0.1:0`, waits for it to be ready and returns the address it reports
    /// on `/ready` (`gRPC on IP:PORT`). Its spec is then pinned to that address, so a
    /// [`Harness::restart`] serves on the same one (clients keep it).
    pub async fn spawn_lease_server(
        &mut self,
        spec: DaemonSpec,
        timeout: Duration,
    ) -> Result<String, Error> {
        self.spawn_lease_server_as_given(spec.args(["--insecure"]), timeout)
            .await
    }

    /// Spawns a `lease-server` binary serving TLS (a CA and certificate generated into the work
    /// directory) and authenticating callers with TokenReview against the emulator; otherwise as
    /// [`Harness::spawn_lease_server`].
    pub async fn spawn_secure_lease_server(
        &mut self,
        spec: DaemonSpec,
        timeout: Duration,
    ) -> Result<SecureLeaseServer, Error> {
        let tls = LeaseTls::generate(&self.work_dir().join("lease-tls"))?;
        let spec = spec.args([
            "--tls-cert-file".to_string(),
            tls.cert_file.display().to_string(),
            "--tls-key-file".to_string(),
            tls.key_file.display().to_string(),
        ]);
        let addr = self.spawn_lease_server_as_given(spec, timeout).await?;
        Ok(SecureLeaseServer {
            endpoint: format!("https://{addr}"),
            addr,
            tls,
        })
    }

    /// Spawns a secured lease server (as [`Harness::spawn_secure_lease_server`]) that authorizes
    /// the ServiceAccount `component` in `namespace` (created if missing) for the leases
    /// `<component>/…` and nobody else, and issues that account a lease token.
    pub async fn spawn_component_lease_server(
        &mut self,
        spec: DaemonSpec,
        component: &str,
        namespace: &str,
        timeout: Duration,
    ) -> Result<ComponentLease, Error> {
        let token_file = self
            .service_account_token(namespace, component, LEASE_AUDIENCE)
            .await?;
        let spec = spec.args([
            "--authorize".to_owned(),
            format!("system:serviceaccount:{namespace}:{component}={component}/"),
        ]);
        let server = self.spawn_secure_lease_server(spec, timeout).await?;
        Ok(ComponentLease { server, token_file })
    }

    /// Spawns a `lease-server` binary with its gRPC listener on `127.0.0.1:0` and otherwise its
    /// own settings (`--insecure` or TLS files from its spec); returns the bound address.
    pub async fn spawn_lease_server_as_given(
        &mut self,
        spec: DaemonSpec,
        timeout: Duration,
    ) -> Result<String, Error> {
        let spec = spec.args(["--grpc-addr", "127.0.0.1:0"]);
        let name = spec.name.clone();
        let d = self.spawn_ready(spec, timeout).await?;
        let report = d.admin().await?.ready_report();
        let addr = report
            .split("gRPC on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .map(str::to_owned)
            .ok_or_else(|| Error::Timeout(format!("{name} to report its gRPC address")))?;
        let args = &mut d.spec.args;
        if let Some(i) = args.iter().rposition(|a| a == "127.0.0.1:0") {
            args[i] = addr.clone();
        }
        Ok(addr)
    }

    /// A token of the ServiceAccount `namespace/name` for `audience`, issued through the
    /// TokenRequest API (`serviceaccounts/<name>/token`, one hour) and written to a file in the
    /// work directory. The namespace and the ServiceAccount are created when missing.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        audience: &str,
    ) -> Result<PathBuf, Error> {
        let namespaces: Api<Namespace> = Api::all(self.client());
        if namespaces.get_opt(namespace).await?.is_none() {
            let ns = Namespace {
                metadata: ObjectMeta {
                    name: Some(namespace.to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match namespaces.create(&PostParams::default(), &ns).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(self.client(), namespace);
        if accounts.get_opt(name).await?.is_none() {
            let sa = ServiceAccount {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(namespace.to_owned()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match accounts.create(&PostParams::default(), &sa).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: vec![audience.to_owned()],
                expiration_seconds: Some(3600),
                bound_object_ref: None,
            },
            ..Default::default()
        };
        let issued = accounts
            .create_token_request(name, &PostParams::default(), &request)
            .await?;
        let token = issued.status.map(|s| s.token).unwrap_or_default();
        if token.is_empty() {
            return Err(Error::Timeout(format!(
                "a token for {namespace}/{name} (the TokenRequest answer had none)"
            )));
        }
        let dir = self.work_dir().join("tokens");
        std::fs::create_dir_all(&dir).map_err(|source| Error::Process {
            what: format!("creating {}", dir.display()),
            source,
        })?;
        let path = dir.join(format!("{namespace}.{name}.{audience}"));
        std::fs::write(&path, token).map_err(|source| Error::Process {
            what: format!("writing {}", path.display()),
            source,
        })?;
        Ok(path)
    }

    /// A lease token of a daemon's ServiceAccount as `deploy/<component>/serviceaccount.yaml`
    /// names it (its namespace and name), for the lease server's default audience.
    pub async fn component_lease_token(&self, component: &str) -> Result<PathBuf, Error> {
        let sa = &crate::rbac::manifests(component, "serviceaccount.yaml")[0];
        let namespace = sa["metadata"]["namespace"].as_str().unwrap_or("default");
        let name = sa["metadata"]["name"].as_str().unwrap_or(component);
        self.service_account_token(namespace, name, LEASE_AUDIENCE)
            .await
    }
}
