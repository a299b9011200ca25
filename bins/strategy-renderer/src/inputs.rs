//! The renderer's watched inputs, all through the runtime's caches, and the snapshot one evaluation
//! reads from them.
//!
//! ```text
//!  ConfigMap <cfg-ns>/<cfg-name>        keeps only data.values.yaml
//!  BucketClaim <ns>/bucket-<bucket>     re-targeted when the configuration moves it (none for external S3)
//!  Secret <ns>/<systemSecretName>       re-targeted likewise; keeps only the endpoint and the bucket name
//!  BackupClass, 7 strategy kinds, BSL   every object (a kind not served = empty)
//!  Bucket                               only those labelled managed-by=strategy-renderer
//!        └────────── every change fires one Trigger ──► the evaluation loop
//! ```
//!
//! Invariant: no credential value stays in memory: the Secret cache strips the object on arrival
//! (the access and secret keys never leave the watch decoder).

use std::collections::BTreeMap;

use api::thirdparty::cosi::BucketClaim;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::DynamicObject;
use kube::core::ApiResource;
use runtime::{Cache, Target, Trigger, Watch, WatchContext};
use serde_json::Value;
use strategy_render::RenderConfig;

use crate::plan::Key;

/// A kind the renderer writes: a static label (the rendered `kind`) and its API resource.
#[derive(Clone, Debug)]
pub struct OwnedKind {
    /// The kind, also the metric label.
    pub label: &'static str,
    /// Its API resource.
    pub resource: ApiResource,
    /// Whether it is namespaced.
    pub namespaced: bool,
}

fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Every kind the renderer writes.
pub fn owned_kinds() -> Vec<OwnedKind> {
    use api::strategy as s;
    let k = |label, resource, namespaced| OwnedKind {
        label,
        resource,
        namespaced,
    };
    vec![
        k("Bucket", erase::<api::thirdparty::apps::Bucket>(), true),
        k("BackupClass", erase::<api::backups::BackupClass>(), false),
        k("CNPG", erase::<s::CNPG>(), false),
        k("Etcd", erase::<s::Etcd>(), false),
        k("MariaDB", erase::<s::MariaDB>(), false),
        k("Altinity", erase::<s::Altinity>(), false),
        k("MongoDB", erase::<s::MongoDB>(), false),
        k("FoundationDB", erase::<s::FoundationDB>(), false),
        k("Velero", erase::<s::Velero>(), false),
        k(
            "BackupStorageLocation",
            erase::<api::thirdparty::velero::BackupStorageLocation>(),
            true,
        ),
    ]
}

/// The watched inputs.
pub struct Inputs {
    config: Cache<ConfigMap>,
    claim: Cache<BucketClaim>,
    secret: Cache<Secret>,
    /// One cache per owned kind, parallel to [`Inputs::kinds`].
    owned: Vec<Cache<DynamicObject>>,
    /// The owned kinds.
    pub kinds: Vec<OwnedKind>,
}

/// What one evaluation reads.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `data.values.yaml` of the ConfigMap, if any.
    pub values: Option<String>,
    /// The ConfigMap's uid (for Events), if it exists.
    pub config_uid: Option<String>,
    /// `status.bucketName` of the BucketClaim, when the claim exists.
    pub claim_bucket_name: Option<String>,
    /// Whether the system Secret exists.
    pub secret_present: bool,
    /// The Secret's raw `endpoint` value, if it has one.
    pub secret_endpoint: Option<Vec<u8>>,
    /// The bucket the Secret names (flat `bucketName`, else `BucketInfo`'s `spec.bucketName`):
    /// what upstream's default-objects gate reads.
    pub secret_bucket_name: Option<String>,
    /// Every owned object, as JSON.
    pub observed: BTreeMap<Key, Value>,
}

/// Where the BucketClaim watch looks for a configuration (nothing for external S3).
pub fn claim_target(c: &RenderConfig) -> Option<Target> {
    let bs = &c.backup_storage;
    bs.provision_bucket.then(|| {
        Target::named(
            &bs.namespace,
            &backup_storage::bucket::bucket_claim_name(&bs.bucket_name),
        )
    })
}

/// Where the Secret watch looks for a configuration.
pub fn secret_target(c: &RenderConfig) -> Option<Target> {
    let bs = &c.backup_storage;
    Some(Target::named(&bs.namespace, &bs.system_secret_name))
}

impl Inputs {
    /// Starts every watch; `defaults` gives the first targets (the first evaluation re-targets them
    /// when the ConfigMap says otherwise).
    pub fn start(
        client: &kube::Client,
        ctx: &WatchContext,
        config_ref: (&str, &str),
        defaults: &RenderConfig,
        changed: &Trigger,
    ) -> Self {
        let (cfg_ns, cfg_name) = config_ref;
        let config = Watch::<ConfigMap>::new(client.clone())
            .in_namespace(cfg_ns)
            .named(cfg_name)
            .describe("ConfigMap")
            .strip(keep_values_only)
            .cache(ctx, changed);
        let claim = Watch::<BucketClaim>::new(client.clone())
            .targeting(claim_target(defaults).unwrap_or_default())
            .describe("BucketClaim")
            .cache(ctx, changed);
        claim.retarget(claim_target(defaults));
        let secret = Watch::<Secret>::new(client.clone())
            .targeting(secret_target(defaults).unwrap_or_default())
            .describe("Secret")
            .strip(keep_public_coordinates)
            .cache(ctx, changed);
        let kinds = owned_kinds();
        let owned = kinds
            .iter()
            .map(|k| {
                let watch = Watch::<DynamicObject>::new_with(client.clone(), k.resource.clone())
                    .describe(k.label)
                    .absent_is_empty();
                if k.label == "Bucket" {
                    // Tenants own Buckets by the thousand; the renderer only ever needs the ones
                    // carrying its label. The label is one of the rendered values, so an unlabelled
                    // object would be applied whether it is seen or not.
                    watch.labels(&ours_selector())
                } else {
                    watch
                }
                .cache(ctx, changed)
            })
            .collect();
        Self {
            config,
            claim,
            secret,
            owned,
            kinds,
        }
    }

    /// True when every watch has listed its current target.
    pub fn all_synced(&self) -> bool {
        self.config.is_synced()
            && self.claim.is_synced()
            && self.secret.is_synced()
            && self.owned.iter().all(Cache::is_synced)
    }

    /// A clone usable as the evaluation gate.
    pub fn synced_gate(&self) -> impl Fn() -> bool + Send + 'static + use<> {
        let (config, claim, secret) =
            (self.config.clone(), self.claim.clone(), self.secret.clone());
        let owned = self.owned.clone();
        move || {
            config.is_synced()
                && claim.is_synced()
                && secret.is_synced()
                && owned.iter().all(Cache::is_synced)
        }
    }

    /// Follows the configuration with the scoped watches. Returns true when one moved: its state is
    /// stale until it lists again (whose completion triggers the next evaluation).
    pub fn retarget(&self, config: &RenderConfig) -> bool {
        let claim = self.claim.retarget(claim_target(config));
        let secret = self.secret.retarget(secret_target(config));
        claim || secret
    }

    /// The ConfigMap's `values.yaml` (read before the configuration is known).
    pub fn config_values(&self) -> (Option<String>, Option<String>) {
        let cm = self.config.list().into_iter().next();
        let values = cm.as_ref().and_then(|c| {
            c.data
                .as_ref()?
                .get(strategy_render::config::VALUES_KEY)
                .cloned()
        });
        (values, cm.and_then(|c| c.metadata.uid.clone()))
    }

    /// Everything else one evaluation reads.
    pub fn snapshot(&self) -> Snapshot {
        let (values, config_uid) = self.config_values();
        let claim_bucket_name = self.claim.list().into_iter().next().map(|c| {
            c.status
                .as_ref()
                .and_then(|s| s.bucket_name.clone())
                .unwrap_or_default()
        });
        let secret = self.secret.list().into_iter().next();
        let secret_data = |key: &str| -> Option<Vec<u8>> {
            Some(secret.as_ref()?.data.as_ref()?.get(key)?.0.clone())
        };
        let mut observed = BTreeMap::new();
        for (kind, cache) in self.kinds.iter().zip(&self.owned) {
            for o in cache.list() {
                let mut v = serde_json::to_value(o.as_ref()).unwrap_or_default();
                v["kind"] = Value::from(kind.label);
                observed.insert(Key::of(&v), v);
            }
        }
        Snapshot {
            values,
            config_uid,
            claim_bucket_name,
            secret_present: secret.is_some(),
            secret_endpoint: secret_data("endpoint"),
            secret_bucket_name: secret_data(backup_storage::credentials::KEY_BUCKET_NAME)
                .and_then(|b| String::from_utf8(b).ok())
                .filter(|b| !b.is_empty()),
            observed,
        }
    }

    /// The cache of an owned kind.
    pub fn owned(&self, kind: &str) -> Option<(&OwnedKind, &Cache<DynamicObject>)> {
        self.kinds
            .iter()
            .zip(&self.owned)
            .find(|(k, _)| k.label == kind)
    }
}

/// The label selector of the objects the renderer writes.
fn ours_selector() -> String {
    format!(
        "{}={}",
        strategy_render::MANAGED_BY_LABEL,
        strategy_render::MANAGED_BY_VALUE
    )
}

/// The ConfigMap cache keeps only `data.values.yaml`.
fn keep_values_only(cm: &mut ConfigMap) {
    let values = cm
        .data
        .as_ref()
        .and_then(|d| d.get(strategy_render::config::VALUES_KEY).cloned());
    cm.data = values.map(|v| BTreeMap::from([(strategy_render::config::VALUES_KEY.to_owned(), v)]));
    cm.binary_data = None;
    cm.metadata.managed_fields = None;
    cm.metadata.annotations = None;
}

/// The Secret cache keeps only public coordinates: `endpoint` as it is, and the bucket name the
/// Secret carries (flat `bucketName`, else read out of `BucketInfo`) under `bucketName`. The keys,
/// and the `BucketInfo` document that holds them, never stay in memory.
pub(crate) fn keep_public_coordinates(secret: &mut Secret) {
    let mut data = secret.data.take().unwrap_or_default();
    let bucket = backup_storage::credentials::source_bucket_name(
        &data.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect(),
    );
    let mut kept = BTreeMap::new();
    if let Some(e) = data.remove("endpoint") {
        kept.insert("endpoint".to_owned(), e);
    }
    if let Some(b) = bucket {
        kept.insert(
            backup_storage::credentials::KEY_BUCKET_NAME.to_owned(),
            k8s_openapi::ByteString(b.into_bytes()),
        );
    }
    secret.data = Some(kept);
    secret.string_data = None;
    // last-applied annotations may carry the whole Secret.
    secret.metadata.annotations = None;
    secret.metadata.managed_fields = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_secret_cache_keeps_only_public_coordinates() {
        let mut s: Secret = serde_json::from_value(json!({
            "metadata": {"name": "x", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{secret}"}},
            "data": {"accessKey": "QUs=", "secretKey": "U0s=", "endpoint": "czMuZXhhbXBsZS5jb20=",
                     "bucketName": "YnVja2V0LTE="},
            "stringData": {"secretKey": "SK"},
        }))
        .unwrap();
        keep_public_coordinates(&mut s);
        assert_eq!(
            serde_json::to_value(&s).unwrap(),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"},
                   "data": {"endpoint": "czMuZXhhbXBsZS5jb20=", "bucketName": "YnVja2V0LTE="}})
        );
    }

    #[test]
    fn the_bucket_name_is_read_out_of_bucket_info_and_the_document_dropped() {
        use k8s_openapi::ByteString;
        let info = r#"{"spec":{"bucketName":"bucket-2","secretS3":{"accessKeyID":"AK","accessSecretKey":"SK"}}}"#;
        let mut s = Secret {
            data: Some(BTreeMap::from([(
                "BucketInfo".to_owned(),
                ByteString(info.as_bytes().to_vec()),
            )])),
            ..Default::default()
        };
        keep_public_coordinates(&mut s);
        assert_eq!(
            s.data,
            Some(BTreeMap::from([(
                "bucketName".to_owned(),
                ByteString(b"bucket-2".to_vec())
            )]))
        );
    }
}
