//! ObjectStore resolution: an ObjectStore and the Secrets it names become what barman-cloud needs
//! (destination, endpoint, credentials, CA, compression/encryption arguments), then a barman target
//! inside an instance directory. Credentials reach only 0600 files and child environments.

use std::collections::BTreeMap;

use serde_json::Value;

use super::shared::Shared;
use crate::cache::Cache;
use crate::pg::{BarmanTarget, InstanceDir};

/// An ObjectStore resolved against its Secrets: what barman-cloud needs, minus the server name.
#[derive(Clone, PartialEq)]
pub struct Resolved {
    /// `configuration.destinationPath`.
    pub destination_path: String,
    /// `configuration.endpointURL`.
    pub endpoint_url: Option<String>,
    /// AWS credentials and the sidecar environment.
    pub env: BTreeMap<String, String>,
    /// PEM of `configuration.endpointCA`, when set.
    pub ca_pem: Option<String>,
    /// `barman-cloud-wal-archive` compression/encryption arguments.
    pub wal_args: Vec<String>,
    /// `barman-cloud-backup` compression/encryption/jobs arguments.
    pub data_args: Vec<String>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("destination_path", &self.destination_path)
            .field("endpoint_url", &self.endpoint_url)
            .finish_non_exhaustive()
    }
}

fn secret_key(secrets: &Cache, ns: &str, selector: &Value, what: &str) -> Result<String, String> {
    use base64::Engine as _;
    let name = selector["name"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{what}: missing secret name"))?;
    let key = selector["key"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{what}: missing secret key"))?;
    let secret = secrets
        .get(ns, name)
        .ok_or_else(|| format!("while getting secret {name}: secrets \"{name}\" not found"))?;
    let encoded = secret["data"][key]
        .as_str()
        .ok_or_else(|| format!("missing key {key}, inside secret {name}"))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| format!("key {key} of secret {name} is not base64"))?;
    String::from_utf8(bytes).map_err(|_| format!("key {key} of secret {name} is not UTF-8"))
}

fn compression_args(compression: &Value) -> Vec<String> {
    match compression.as_str() {
        Some("gzip") => vec!["--gzip".into()],
        Some("bzip2") => vec!["--bzip2".into()],
        Some("snappy") => vec!["--snappy".into()],
        _ => vec![],
    }
}

/// Resolves ObjectStore `ns/name` against the Secrets it names.
pub fn resolve_object_store(
    object_stores: &Cache,
    secrets: &Cache,
    ns: &str,
    name: &str,
) -> Result<Resolved, String> {
    let store = object_stores
        .get(ns, name)
        .ok_or_else(|| format!("ObjectStore {ns}/{name} not found"))?;
    let cfg = &store["spec"]["configuration"];
    let destination_path = cfg["destinationPath"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("ObjectStore {ns}/{name}: missing configuration.destinationPath"))?
        .to_owned();
    let s3 = &cfg["s3Credentials"];
    if s3.is_null() {
        return Err(format!(
            "ObjectStore {ns}/{name}: only s3Credentials are supported by the simulator"
        ));
    }
    if s3["inheritFromIAMRole"] == true {
        return Err(format!(
            "ObjectStore {ns}/{name}: inheritFromIAMRole is not supported by the simulator"
        ));
    }
    let mut env = BTreeMap::new();
    env.insert(
        "AWS_ACCESS_KEY_ID".to_owned(),
        secret_key(secrets, ns, &s3["accessKeyId"], "accessKeyId")?,
    );
    env.insert(
        "AWS_SECRET_ACCESS_KEY".to_owned(),
        secret_key(secrets, ns, &s3["secretAccessKey"], "secretAccessKey")?,
    );
    if !s3["sessionToken"].is_null() {
        env.insert(
            "AWS_SESSION_TOKEN".to_owned(),
            secret_key(secrets, ns, &s3["sessionToken"], "sessionToken")?,
        );
    }
    if let Some(region) = s3["region"].as_object() {
        let region = secret_key(secrets, ns, &Value::Object(region.clone()), "region")?;
        env.insert("AWS_DEFAULT_REGION".to_owned(), region);
    }
    for e in store["spec"]["instanceSidecarConfiguration"]["env"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let (Some(k), Some(v)) = (e["name"].as_str(), e["value"].as_str()) {
            env.insert(k.to_owned(), v.to_owned());
        }
    }
    let ca_pem = if cfg["endpointCA"].is_null() {
        None
    } else {
        Some(secret_key(secrets, ns, &cfg["endpointCA"], "endpointCA")?)
    };
    let mut wal_args = compression_args(&cfg["wal"]["compression"]);
    if let Some(enc) = cfg["wal"]["encryption"].as_str().filter(|s| !s.is_empty()) {
        wal_args.extend(["--encryption".to_owned(), enc.to_owned()]);
    }
    let mut data_args = compression_args(&cfg["data"]["compression"]);
    if let Some(enc) = cfg["data"]["encryption"].as_str().filter(|s| !s.is_empty()) {
        data_args.extend(["--encryption".to_owned(), enc.to_owned()]);
    }
    if cfg["data"]["immediateCheckpoint"] == true {
        data_args.push("--immediate-checkpoint".to_owned());
    }
    if let Some(jobs) = cfg["data"]["jobs"].as_i64() {
        data_args.extend(["--jobs".to_owned(), jobs.to_string()]);
    }
    Ok(Resolved {
        destination_path,
        endpoint_url: cfg["endpointURL"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        env,
        ca_pem,
        wal_args,
        data_args,
    })
}

impl Shared {
    /// Turns a resolved ObjectStore into a barman target inside `dir` (writing its CA file).
    pub(super) fn target(
        &self,
        dir: &InstanceDir,
        store_name: &str,
        resolved: &Resolved,
        server_name: &str,
        args: &[String],
    ) -> Result<BarmanTarget, String> {
        let mut env = resolved.env.clone();
        // The CA is always copied into the instance directory, owned by the user barman runs as:
        // the S3 server's own directory may be one that user cannot enter (a private
        // --data-dir, e.g. made by `mktemp -d`), and barman would then fail every TLS handshake
        // with "[Errno 13] Permission denied".
        let pem = match (&resolved.ca_pem, &self.options.default_ca) {
            (Some(pem), _) => Some(pem.clone()),
            (None, Some(path)) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("reading the S3 server's CA {}: {e}", path.display()))?,
            ),
            (None, None) => None,
        };
        if let Some(pem) = pem {
            let name = format!("{store_name}-ca.crt");
            let ca = dir.root.join(&name);
            // Called at every change of a watched object: rewrite only what changed.
            if std::fs::read_to_string(&ca).ok().as_deref() != Some(pem.as_str()) {
                dir.write_private(&self.options.toolchain, &name, &pem)
                    .map_err(|e| e.to_string())?;
            }
            env.insert("AWS_CA_BUNDLE".to_owned(), ca.display().to_string());
        }
        Ok(BarmanTarget {
            destination_path: resolved.destination_path.clone(),
            server_name: server_name.to_owned(),
            endpoint_url: resolved.endpoint_url.clone(),
            args: args.to_vec(),
            env,
        })
    }
}
