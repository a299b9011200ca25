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

use std::path::PathBuf;
use std::time::Duration;

use crate::{DaemonSpec, Error, Harness};

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
