//! The simulated data plane for end-to-end tests: spawns `operator-sims` with the chosen
//! simulators (typically `s3,cosi,cnpg,flux`) and a data directory inside the harness's work
//! directory, and reads where its S3 server listens (see `docs/dataplane.md`).
//!
//! ```text
//! Harness::spawn_dataplane("s3,cosi,cnpg,flux")
//!   └─ operator-sims --data-dir <work>/dataplane ─► S3 (http + https, dev CA), PostgreSQL servers
//!        └─ <work>/dataplane/s3/endpoints.json ─► DataPlane { http, https, ca_file }
//! ```
//! Invariant: the simulator is an ordinary harness daemon (`"operator-sims"`), so `kill`, `restart`
//! and the failure dump apply; killing it stops every PostgreSQL server it started.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::Value;

use crate::{DaemonSpec, Error, Harness};

/// The PostgreSQL client binaries (Debian's postgresql-15).
pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// Where the data plane of a test lives.
#[derive(Debug, Clone)]
pub struct DataPlane {
    /// `--data-dir` of the simulator (S3 objects under `s3/buckets/<bucket>/`).
    pub data_dir: PathBuf,
    /// Plain-HTTP S3 endpoint (the in-cluster fallback), `http://127.0.0.1:PORT`.
    pub http: String,
    /// HTTPS S3 endpoint (the external ingress), `https://127.0.0.1:PORT`.
    pub https: String,
    /// The development CA that issued the HTTPS certificate (PEM).
    pub ca_file: PathBuf,
}

impl Harness {
    /// Spawns `operator-sims --sims <sims>` with its data directory in the work directory, waits for
    /// `/ready` and, when `s3` is among the simulators, for its endpoints. Extra arguments follow.
    pub async fn spawn_dataplane(
        &mut self,
        sims: &str,
        extra: &[&str],
    ) -> Result<DataPlane, Error> {
        let data_dir = self.work_dir().join("dataplane");
        let mut args = vec![
            format!("--sims={sims}"),
            format!("--data-dir={}", data_dir.display()),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        let bin = crate::locate_binary("operator-sims")?;
        self.spawn_ready(
            DaemonSpec::new("operator-sims", bin).args(args),
            Duration::from_secs(60),
        )
        .await?;
        let mut plane = DataPlane {
            data_dir: data_dir.clone(),
            http: String::new(),
            https: String::new(),
            ca_file: PathBuf::new(),
        };
        if sims.split(',').any(|s| s.trim() == "s3") {
            let path = data_dir.join("s3").join("endpoints.json");
            let text = std::fs::read_to_string(&path).map_err(|source| Error::Process {
                what: format!("reading {}", path.display()),
                source,
            })?;
            let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| Error::Process {
                what: format!("parsing {}", path.display()),
                source: std::io::Error::other(e),
            })?;
            plane.http = v["http"].as_str().unwrap_or_default().to_owned();
            plane.https = v["https"].as_str().unwrap_or_default().to_owned();
            plane.ca_file = PathBuf::from(v["caFile"].as_str().unwrap_or_default());
        }
        Ok(plane)
    }
}

impl DataPlane {
    /// Sets the S3 server's fault switch (`none`, `stop`, `unavailable`) through its admin
    /// endpoint (`PUT /faults`, docs/dataplane.md); panics unless the server says 200.
    pub async fn s3_mode(&self, mode: &str) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let endpoints: Value = serde_json::from_slice(
            &std::fs::read(self.data_dir.join("s3").join("endpoints.json")).unwrap(),
        )
        .unwrap();
        let admin = endpoints["admin"].as_str().unwrap();
        let host = admin.strip_prefix("http://").unwrap();
        let body = serde_json::json!({ "mode": mode }).to_string();
        let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
        let request = format!(
            "PUT /faults HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }
}

/// How long data-plane waits may take (a recovery replays WAL with real PostgreSQL).
pub const DATAPLANE_DEADLINE: Duration = Duration::from_secs(120);

impl Harness {
    /// A dynamic API for the typed kind `K` in `ns`.
    pub fn dynamic<K: kube::Resource<DynamicType = ()>>(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client(), ns, &ApiResource::erase::<K>(&()))
    }

    /// A Secret's data as strings, if the Secret exists.
    pub async fn secret_data(&self, ns: &str, name: &str) -> Option<BTreeMap<String, String>> {
        let s = Api::<Secret>::namespaced(self.client(), ns)
            .get_opt(name)
            .await
            .unwrap()?;
        Some(
            s.data?
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect(),
        )
    }

    /// Waits (up to [`DATAPLANE_DEADLINE`]) for cnpg Cluster `ns/name` to be healthy and returns
    /// the connection URI of its `-app` Secret, as a user would read it.
    pub async fn healthy_cluster_uri(&self, ns: &str, name: &str) -> String {
        let clusters = self.dynamic::<api::thirdparty::cnpg::Cluster>(ns);
        crate::eventually_within(
            &format!("Cluster {ns}/{name} healthy"),
            DATAPLANE_DEADLINE,
            || {
                let clusters = clusters.clone();
                async move {
                    let c = clusters.get_opt(name).await.ok()??;
                    (c.data["status"]["phase"] == "Cluster in healthy state").then_some(())
                }
            },
        )
        .await;
        self.secret_data(ns, &format!("{name}-app")).await.unwrap()["uri"].clone()
    }

    /// The strategy-renderer and the credentials-projector as the data-plane tests run them: the
    /// renderer with `dp`'s plain-HTTP S3 endpoint, the projector copying the platform bucket's
    /// credentials (`tenant-root/bucket-cozy-backups-system-credentials`) to tenants and
    /// `cozy-velero`; each waited for (`ready`).
    pub async fn spawn_renderer_and_projector(
        &mut self,
        dp: &DataPlane,
        ready: Duration,
    ) -> Result<(), Error> {
        self.spawn_ready(
            DaemonSpec::new(
                "strategy-renderer",
                crate::locate_binary("strategy-renderer")?,
            )
            .args([format!("--endpoint={}", dp.http)]),
            ready,
        )
        .await?;
        self.spawn_ready(
            DaemonSpec::new(
                "credentials-projector",
                crate::locate_binary("credentials-projector")?,
            )
            .args([
                "--source-namespace=tenant-root".to_owned(),
                "--source-name=bucket-cozy-backups-system-credentials".to_owned(),
                format!("--endpoint={}", dp.http),
                "--region=us-east-1".to_owned(),
                "--force-path-style=true".to_owned(),
                "--system-namespaces=cozy-velero".to_owned(),
            ]),
            ready,
        )
        .await?;
        Ok(())
    }

    /// Applies the operator `MariaDB` the chart renders for application `app` (`mariadb-<app>`,
    /// its root password in `mariadb-<app>-credentials`), waits (up to [`DATAPLANE_DEADLINE`]) for
    /// it to be Ready and returns how to reach it, as its connection Secret says.
    pub async fn ready_mariadb(&self, ns: &str, app: &str) -> MariaDbConn {
        let server = format!("mariadb-{app}");
        let servers = self.dynamic::<api::thirdparty::mariadb::MariaDB>(ns);
        apply(
            &servers,
            serde_json::json!({"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "MariaDB",
                   "metadata": {"name": server, "namespace": ns},
                   "spec": {"replicas": 1,
                            "rootPasswordSecretKeyRef": {"name": format!("{server}-credentials"), "key": "root"}}}),
        )
        .await;
        crate::eventually_within(
            &format!("MariaDB {ns}/{server} Ready"),
            DATAPLANE_DEADLINE,
            || {
                let servers = servers.clone();
                let server = server.clone();
                async move {
                    let s = servers.get_opt(&server).await.ok()??;
                    s.data["status"]["conditions"]
                        .as_array()?
                        .iter()
                        .any(|c| c["type"] == "Ready" && c["status"] == "True")
                        .then_some(())
                }
            },
        )
        .await;
        let secret = self
            .secret_data(ns, &format!("{server}-credentials"))
            .await
            .expect("the MariaDB connection Secret");
        MariaDbConn {
            host: secret["host"].clone(),
            port: secret["port"].clone(),
            password: secret["root"].clone(),
        }
    }

    /// `barman-cloud-backup-list --format json` of `destination`/`server` in the data plane's
    /// bucket, with the platform bucket's keys (as an operator would list it by hand).
    pub async fn barman_list(&self, dp: &DataPlane, destination: &str, server: &str) -> Value {
        let creds = self
            .secret_data("tenant-root", "bucket-cozy-backups-system-credentials")
            .await
            .expect("the platform bucket's credentials");
        let out = std::process::Command::new("barman-cloud-backup-list")
            .env("AWS_ACCESS_KEY_ID", &creds["accessKey"])
            .env("AWS_SECRET_ACCESS_KEY", &creds["secretKey"])
            .env("AWS_CA_BUNDLE", &dp.ca_file)
            .args([
                "--endpoint-url",
                &dp.https,
                "--format",
                "json",
                destination,
                server,
            ])
            .output()
            .expect("barman-cloud-backup-list runs");
        assert!(
            out.status.success(),
            "barman-cloud-backup-list: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("barman-cloud-backup-list prints JSON")
    }

    /// `kubectl logs` of a container.
    pub fn kubectl_logs(&self, ns: &str, pod: &str, container: &str) -> String {
        let out = self.kubectl_output(&["-n", ns, "logs", pod, "-c", container], None);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// Server-side applies `body` (test fixtures) as field manager `e2e`.
pub async fn apply(api: &Api<DynamicObject>, body: Value) -> DynamicObject {
    let name = body["metadata"]["name"].as_str().unwrap().to_owned();
    api.patch(
        &name,
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&body),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {name}: {e}"))
}

/// Runs SQL through `psql` with a connection URI (unaligned, tuples only), as a user would with
/// the `-app` Secret; panics with psql's message on failure.
pub fn psql(uri: &str, sql: &str) -> String {
    let out = std::process::Command::new(Path::new(PG_BIN).join("psql"))
        .args([
            uri,
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Where a simulated MariaDB server listens and its root password, as its Secret says.
#[derive(Debug, Clone)]
pub struct MariaDbConn {
    /// The Secret's `host`.
    pub host: String,
    /// The Secret's `port`.
    pub port: String,
    /// The Secret's `root` password.
    pub password: String,
}

impl MariaDbConn {
    /// Runs SQL with the `mariadb` client over TCP as root (batch mode, no column names; the
    /// password in the environment, never in argv); panics with the client's message on failure.
    pub fn sql(&self, sql: &str) -> String {
        let out = mariadb_command(&self.host, &self.port, &self.password, sql)
            .output()
            .expect("mariadb");
        assert!(
            out.status.success(),
            "mariadb {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }
}

/// The `mariadb` client running `sql` on `host:port` over TCP as root, in batch mode without column
/// names; the password in the environment (`MYSQL_PWD`), never in argv.
pub fn mariadb_command(host: &str, port: &str, password: &str, sql: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new("mariadb");
    cmd.env("MYSQL_PWD", password).args([
        "--no-defaults",
        "--protocol=tcp",
        "-h",
        host,
        "-P",
        port,
        "-u",
        "root",
        "--batch",
        "--skip-column-names",
        "-e",
        sql,
    ]);
    cmd
}

/// Processes whose command line mentions `dir` (PostgreSQL servers, barman commands).
pub fn processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(&needle) {
                found.push(text);
            }
        }
    }
    found
}
