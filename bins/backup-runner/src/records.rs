//! The bucket side of the catalog (docs/disaster-recovery.md): the platform's signing key, the
//! system bucket's client, and the conversion between a `Backup` and its record.
//!
//! ```text
//!  Secret <key-ns>/cozy-backups-catalog-key ─(create if absent, then read)─► key (32 random bytes)
//!  Secret tenant-root/bucket-cozy-backups-system-credentials ─► endpoint, bucket, keys ─► S3Client
//!  Backup ─► payload (labels, annotations, spec, status; no server metadata) ─► seal ─► record
//!  record ─► open (MAC, path binding) ─► Backup labelled restored-from-catalog
//! ```
//!
//! Invariants: the key and the bucket credentials are held in memory only, never logged, never in
//! an error message; both Secrets are read by name. A missing bucket Secret means "not configured
//! yet" (nothing written, nothing deleted, nothing synced), looked up again after [`RESOLVE_TTL`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::backups::Backup;
use backup_storage::catalog::{self as record, Rejection};
use backup_storage::s3::S3Client;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::Client;
use kube::api::{Api, ObjectMeta, PostParams};

use crate::args::RunnerArgs;

pub use backup_storage::catalog_backup::{
    KEY_DATA, RECORD_ANNOTATION, RESTORED_LABEL, digest, payload,
};

/// How long a resolved (or missing) configuration is reused before the Secrets are read again.
pub const RESOLVE_TTL: Duration = Duration::from_secs(60);

/// Why the catalog's bucket side cannot be used right now.
#[derive(Debug, thiserror::Error)]
pub enum MirrorError {
    /// An API call failed.
    #[error("{action} Secret {secret}: {source}")]
    Api {
        /// What was attempted.
        action: &'static str,
        /// `<namespace>/<name>`.
        secret: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// A Secret that does not hold what it must (named, never its values).
    #[error("Secret {secret}: {problem}")]
    Secret {
        /// `<namespace>/<name>`.
        secret: String,
        /// What is wrong.
        problem: String,
    },
    /// The S3 side.
    #[error(transparent)]
    S3(#[from] backup_storage::s3::S3Error),
    /// The previous attempt's failure, reused until [`RESOLVE_TTL`] passes (so that thousands of
    /// Backups do not each read the Secrets again).
    #[error("{0} (cached)")]
    Cached(String),
}

impl From<storage_breaker::bucket::BucketError> for MirrorError {
    fn from(e: storage_breaker::bucket::BucketError) -> Self {
        use storage_breaker::bucket::BucketError as B;
        match e {
            B::Api { secret, source } => MirrorError::Api {
                action: "get",
                secret,
                source,
            },
            B::Secret { secret, problem } => MirrorError::Secret { secret, problem },
            B::S3(e) => MirrorError::S3(e),
        }
    }
}

impl MirrorError {
    /// A static label.
    pub fn kind(&self) -> &'static str {
        match self {
            MirrorError::Api { .. } => "api",
            MirrorError::Secret { .. } => "catalog_config",
            MirrorError::S3(_) => "s3",
            MirrorError::Cached(_) => "catalog_config",
        }
    }
}

/// The usable bucket side.
#[derive(Clone)]
pub struct Bucket {
    /// The S3 client of the system bucket.
    pub s3: S3Client,
    key: Arc<Vec<u8>>,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bucket")
            .field("bucket", &self.s3.bucket())
            .finish()
    }
}

impl Bucket {
    /// A bucket side from its parts (the benchmark and the plugin build one this way).
    pub fn new(s3: S3Client, key: Vec<u8>) -> Self {
        Bucket {
            s3,
            key: Arc::new(key),
        }
    }

    /// The record bytes of `backup` and their digest (the annotation's value).
    pub fn seal(&self, backup: &Backup) -> (Vec<u8>, String) {
        backup_storage::catalog_backup::seal(&self.key, backup)
    }

    /// Verifies a record's bytes found at `object_key` and returns the Backup to create.
    pub fn open(&self, object_key: &str, bytes: &[u8]) -> Result<Backup, Rejection> {
        backup_storage::catalog_backup::open(&self.key, object_key, bytes)
    }

    /// The public id of the signing key.
    pub fn key_id(&self) -> String {
        record::key_id(&self.key)
    }
}

fn split(s: &str) -> (String, String) {
    match s.split_once('/') {
        Some((ns, name)) => (ns.to_owned(), name.to_owned()),
        None => (String::new(), s.to_owned()),
    }
}

#[derive(Default)]
struct Cached {
    at: Option<Instant>,
    bucket: Option<Bucket>,
    error: Option<String>,
}

/// Resolves (and caches for [`RESOLVE_TTL`]) the bucket side.
pub struct Mirror {
    client: Client,
    enabled: bool,
    bucket_secret: (String, String),
    key_secret: (String, String),
    endpoint: String,
    ca_file: Option<std::path::PathBuf>,
    cached: tokio::sync::Mutex<Cached>,
}

impl Mirror {
    /// The mirror configured by the runner's flags.
    pub fn new(client: Client, args: &RunnerArgs) -> Self {
        Mirror {
            client,
            enabled: args.catalog,
            bucket_secret: split(&args.catalog_bucket_secret),
            key_secret: split(&args.catalog_key_secret),
            endpoint: args.catalog_endpoint.clone(),
            ca_file: args.catalog_ca_file.clone(),
            cached: Default::default(),
        }
    }

    /// Whether the catalog mirror is switched on at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Forgets the cached configuration (after an S3 refusal: the credentials may have rotated).
    pub async fn invalidate(&self) {
        *self.cached.lock().await = Cached::default();
    }

    /// The bucket side, `None` while the bucket Secret does not exist (or the mirror is off).
    pub async fn bucket(&self) -> Result<Option<Bucket>, MirrorError> {
        if !self.enabled {
            return Ok(None);
        }
        let mut cached = self.cached.lock().await;
        if let Some(at) = cached.at
            && at.elapsed() < RESOLVE_TTL
        {
            return match &cached.error {
                Some(e) => Err(MirrorError::Cached(e.clone())),
                None => Ok(cached.bucket.clone()),
            };
        }
        let resolved = self.resolve().await;
        *cached = Cached {
            at: Some(Instant::now()),
            bucket: resolved.as_ref().ok().cloned().flatten(),
            error: resolved.as_ref().err().map(ToString::to_string),
        };
        resolved
    }

    async fn resolve(&self) -> Result<Option<Bucket>, MirrorError> {
        let (ns, name) = &self.bucket_secret;
        let system = storage_breaker::bucket::SystemBucket {
            namespace: ns,
            name,
            endpoint: &self.endpoint,
            endpoint_flag: "--catalog-endpoint",
            ca_file: self.ca_file.as_deref(),
        };
        let Some(s3) = system.client(&self.client).await? else {
            tracing::debug!(secret = %system.secret(), "the system bucket's credentials do not exist yet; the catalog mirror waits");
            return Ok(None);
        };
        let key = ensure_key(&self.client, &self.key_secret.0, &self.key_secret.1).await?;
        Ok(Some(Bucket::new(s3, key)))
    }

    /// Makes sure the signing key exists (the sync loop calls this on start, configured or not).
    pub async fn ensure_key(&self) -> Result<(), MirrorError> {
        if self.enabled {
            ensure_key(&self.client, &self.key_secret.0, &self.key_secret.1).await?;
        }
        Ok(())
    }
}

/// Reads the signing key, creating it (32 random bytes) when absent; two replicas racing both
/// end with the one key that was created first (create-if-absent, then read).
pub async fn ensure_key(client: &Client, ns: &str, name: &str) -> Result<Vec<u8>, MirrorError> {
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let shown = format!("{ns}/{name}");
    let api_err = |action: &'static str| {
        let secret = shown.clone();
        move |source| MirrorError::Api {
            action,
            secret,
            source,
        }
    };
    let existing = api.get_opt(name).await.map_err(api_err("get"))?;
    let secret = match existing {
        Some(s) => s,
        None => {
            let key: [u8; record::KEY_BYTES] = rand::random();
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some(ns.into()),
                    labels: Some(BTreeMap::from([
                        ("app.kubernetes.io/part-of".into(), "cozy-backups".into()),
                        (
                            "app.kubernetes.io/component".into(),
                            "catalog-signing-key".into(),
                        ),
                    ])),
                    ..Default::default()
                },
                type_: Some("Opaque".into()),
                data: Some(BTreeMap::from([(
                    KEY_DATA.into(),
                    ByteString(key.to_vec()),
                )])),
                ..Default::default()
            };
            match api.create(&PostParams::default(), &secret).await {
                Ok(_) => {
                    tracing::info!(secret = %shown, "created the catalog signing key");
                    secret
                }
                Err(kube::Error::Api(e)) if e.code == 409 => api
                    .get(name)
                    .await
                    .map_err(api_err("get (after losing the create race)"))?,
                Err(source) => {
                    return Err(MirrorError::Api {
                        action: "create",
                        secret: shown,
                        source,
                    });
                }
            }
        }
    };
    let key = secret
        .data
        .and_then(|mut d| d.remove(KEY_DATA))
        .map(|b| b.0)
        .unwrap_or_default();
    if key.len() < record::KEY_MIN_BYTES {
        return Err(MirrorError::Secret {
            secret: shown,
            problem: format!(
                "key {KEY_DATA} holds {} bytes; at least {} are needed",
                key.len(),
                record::KEY_MIN_BYTES
            ),
        });
    }
    Ok(key)
}
