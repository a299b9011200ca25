//! Pure rendering of the platform default backup objects, exactly as upstream's
//! `backupstrategy-controller` Helm chart renders them, but from live inputs
//! instead of install-time `lookup`s.
//!
//! ```text
//!  RenderConfig (backupStorage, velero, --bind-foundationdb, image)
//!  BucketClaim bucket-<bucketName> .status.bucketName ──► backup_storage::bucket ──► B (or none)
//!  system Secret .data.endpoint ──────────────────────► backup_storage::endpoint ──► E, H, S
//!                                   │
//!                                   ▼
//!                    render() ──► DesiredObjects
//!                                   Bucket cozy-backups          (provisionBucket)
//!                                   BackupClass cozy-default     (always; 7 routes, 8 with FDB bound)
//!                                   8 cozy-default-* strategies  (B resolved; Velero ones also bslEnabled)
//!                                   BSL cozy-default             (B resolved and bslEnabled)
//! ```
//!
//! Invariants: no I/O and no Kubernetes client here; every value, JSON type (boolean vs string) and
//! literal `{{ .Application.metadata.* }}` placeholder equals the chart's output; every object carries
//! [`MANAGED_BY_LABEL`] so the daemon prunes only what it rendered.

pub mod config;
mod objects;

pub use config::{ConfigError, RenderConfig, parse_config};
pub use objects::ALTINITY_SCRIPT;

use serde_json::Value;

/// Label key put on every rendered object.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`MANAGED_BY_LABEL`]: only objects with it are ever deleted by the renderer.
pub const MANAGED_BY_VALUE: &str = "strategy-renderer";

/// Identity of a rendered object.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// `group/version` or `version`.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (`None` for cluster-scoped kinds).
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// The key of a rendered object (panics on an object without the identity fields; render()
    /// never produces one).
    pub fn of(obj: &Value) -> Self {
        let s = |v: &Value| v.as_str().map(str::to_owned);
        Self {
            api_version: s(&obj["apiVersion"]).expect("apiVersion"),
            kind: s(&obj["kind"]).expect("kind"),
            namespace: s(&obj["metadata"]["namespace"]),
            name: s(&obj["metadata"]["name"]).expect("name"),
        }
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// What the cluster should contain, for one set of inputs.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredObjects {
    /// The resolved bucket name B, when the gated objects are rendered.
    pub bucket_name: Option<String>,
    /// The resolved endpoint E.
    pub endpoint: String,
    /// Full apply bodies (`apiVersion`, `kind`, `metadata`, `spec`), in upstream template order.
    pub objects: Vec<Value>,
    /// `<Kind>/<name>` of every object the BackupClass `Ready` condition and the
    /// `cozystack_backup_default_objects_missing` gauge require: each routed strategy (Velero ones only
    /// when `bslEnabled`, as upstream's gate skips them without a Velero namespace) and, with
    /// `bslEnabled`, `BackupStorageLocation/cozy-default`. Sorted, deduplicated.
    pub required: Vec<RequiredObject>,
}

/// An object whose absence makes `cozy-default` not ready.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RequiredObject {
    /// Kind (`CNPG`, …, `BackupStorageLocation`).
    pub kind: String,
    /// Namespace, for the BSL.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl RequiredObject {
    /// Upstream's missing-list entry `<Kind>/<name>`.
    pub fn display(&self) -> String {
        format!("{}/{}", self.kind, self.name)
    }
}

/// Renders the desired objects.
///
/// * `claim_bucket_name`: `status.bucketName` of BucketClaim `bucket-<bucketName>` in
///   `backupStorage.namespace`, when that claim exists.
/// * `secret_endpoint`: the raw (decoded) `endpoint` value of Secret `systemSecretName` in
///   `backupStorage.namespace`, when the Secret exists and has the key.
pub fn render(
    config: &RenderConfig,
    claim_bucket_name: Option<&str>,
    secret_endpoint: Option<&[u8]>,
) -> DesiredObjects {
    let bs = &config.backup_storage;
    let bucket =
        backup_storage::bucket::resolve_bucket_name(&backup_storage::bucket::BucketInputs {
            provision_bucket: bs.provision_bucket,
            bucket_name: &bs.bucket_name,
            bucket_name_override: &bs.bucket_name_override,
            claim_bucket_name,
        });
    let endpoint =
        backup_storage::endpoint::resolve(bs.provision_bucket, &bs.endpoint, secret_endpoint);
    let mut objects = Vec::new();
    if bs.provision_bucket {
        objects.push(objects::bucket(config));
    }
    objects.push(objects::backup_class(config));
    if let Some(b) = &bucket {
        let s = objects::Storage {
            bucket: b,
            endpoint: &endpoint,
            host: backup_storage::endpoint::host_form(&endpoint),
            secure: backup_storage::endpoint::is_secure(&endpoint),
            region: &bs.region,
            force_path_style: bs.force_path_style,
        };
        objects.push(objects::cnpg(&s));
        objects.push(objects::etcd(&s));
        objects.push(objects::mariadb(&s));
        objects.push(objects::altinity(config));
        objects.push(objects::mongodb());
        objects.push(objects::foundationdb(&s));
        if config.velero.bsl_enabled {
            objects.push(objects::velero_vminstance());
            objects.push(objects::velero_vmdisk());
            objects.push(objects::bsl(config, &s));
        }
    }
    let mut required: Vec<RequiredObject> = objects::routes(config)
        .into_iter()
        .filter(|(_, kind, _)| config.velero.bsl_enabled || *kind != "Velero")
        .map(|(_, kind, name)| RequiredObject {
            kind: kind.into(),
            namespace: None,
            name: name.into(),
        })
        .collect();
    if config.velero.bsl_enabled {
        required.push(RequiredObject {
            kind: "BackupStorageLocation".into(),
            namespace: Some(config.velero.namespace.clone()),
            name: api::contract::names::DEFAULT_BSL.into(),
        });
    }
    required.sort();
    required.dedup_by(|a, b| a.kind == b.kind && a.name == b.name);
    DesiredObjects {
        bucket_name: bucket,
        endpoint,
        objects,
        required,
    }
}

/// True when `observed` already holds everything `desired` sets: objects compare key by key
/// (extra fields in `observed`, such as metadata the API server adds, are fine), while scalars and
/// lists compare exactly. Used to skip writes that would change nothing.
pub fn is_subset(desired: &Value, observed: &Value) -> bool {
    match (desired, observed) {
        (Value::Object(d), Value::Object(o)) => d
            .iter()
            .all(|(k, dv)| o.get(k).is_some_and(|ov| is_subset(dv, ov))),
        (Value::Array(d), Value::Array(o)) => {
            d.len() == o.len() && d.iter().zip(o).all(|(a, b)| is_subset_exact(a, b))
        }
        _ => desired == observed,
    }
}

/// List items compare like objects too (the API server may add defaulted fields inside items).
fn is_subset_exact(d: &Value, o: &Value) -> bool {
    is_subset(d, o)
}

#[cfg(test)]
mod tests;
