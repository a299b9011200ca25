//! Simulated COSI provisioner plus the parts of Cozystack's bucket application chart the backup
//! platform depends on:
//!
//! 1. `apps.cozystack.io` Bucket `<name>` → BucketClaim `bucket-<name>` in the same namespace (the
//!    bucket chart's release is `bucket-<name>`), owned by the Bucket.
//! 2. BucketClaim without `status.bucketName` → after [`Options::delay`],
//!    `status: {bucketName: bucket-<claim uid>, bucketReady: true}` (the COSI driver); with the S3
//!    server running, the bucket `bucket-<claim uid>` is created there first.
//! 3. Bucket whose claim is bound → for each user in `spec.users`, Secret
//!    `bucket-<name>-<user>-credentials` (type Opaque, label `apps.cozystack.io/user-secret: "true"`)
//!    with flat keys `accessKey`, `secretKey`, `endpoint` (bare host) and `bucketName`, and no `region`.
//!
//! With the S3 server ([`crate::s3`]) the keys are random and registered there for that bucket
//! only, and `endpoint` is the server's HTTPS `host:port`, so the credentials really authenticate.
//! A Secret found at start (a restarted simulator, a persisted dev cluster) keeps its keys: they are
//! registered again and only a changed endpoint is patched. Deleting a credentials Secret rotates
//! the user's keys: a new pair is written and the old one is revoked, so stale copies fail with 403.
//! Without the S3 server the keys are random but unusable and `endpoint` is [`Options::endpoint`].
//! Key values are never logged.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::thirdparty::{apps::Bucket, cosi::BucketClaim};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::cache::{Cache, spawn_watches};
use crate::s3::S3Server;

/// Field manager of the simulated COSI driver.
pub const FIELD_MANAGER: &str = "operator-sims-cosi";

/// Label the bucket chart puts on user credentials Secrets.
pub const USER_SECRET_LABEL: &str = "apps.cozystack.io/user-secret";

/// Settings of the COSI simulator.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long "provisioning" takes.
    pub delay: Duration,
    /// Endpoint written to the credentials Secrets (bare host) when no S3 server runs.
    pub endpoint: String,
    /// The S3 server that really holds the buckets, when it runs.
    pub s3: Option<S3Server>,
}

impl Options {
    fn endpoint(&self) -> String {
        match &self.s3 {
            Some(s3) => s3.endpoints().https_host().to_owned(),
            None => self.endpoint.clone(),
        }
    }
}

/// A random key of `len` characters from `alphabet`.
pub fn random_key(alphabet: &[u8], len: usize) -> String {
    use rand::Rng as _;
    let mut rng = rand::rng();
    (0..len)
        .map(|_| alphabet[rng.random_range(0..alphabet.len())] as char)
        .collect()
}

/// A fresh key pair shaped like S3's (20-character access key id, 40-character secret).
pub fn new_key_pair() -> (String, String) {
    const UPPER: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    const ANY: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    (format!("AK{}", random_key(UPPER, 18)), random_key(ANY, 40))
}

fn secret_value(secret: &Value, key: &str) -> Option<String> {
    use base64::Engine as _;
    let encoded = secret["data"][key].as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// Runs the simulator forever.
pub async fn run(
    client: kube::Client,
    options: Options,
    readiness: runtime::Readiness,
) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let buckets = Arc::new(Cache::default());
    let claims = Arc::new(Cache::default());
    let secrets = Arc::new(Cache::default());
    let bucket_ar = ApiResource::erase::<Bucket>(&());
    let claim_ar = ApiResource::erase::<BucketClaim>(&());
    spawn_watches(
        &client,
        &readiness,
        &notify,
        vec![
            (&buckets, bucket_ar.clone(), "cosi: watch Bucket"),
            (&claims, claim_ar.clone(), "cosi: watch BucketClaim"),
        ],
    );
    tokio::spawn(secrets.clone().watch(
        client.clone(),
        ApiResource::erase::<Secret>(&()),
        watcher::Config::default().labels(&format!("{USER_SECRET_LABEL}=true")),
        notify.clone(),
        readiness.register("cosi: watch credentials Secrets"),
        |_| {},
    ));
    // Work already started (claims being provisioned), by uid.
    let provisioning: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    // Secrets this process created and not yet seen in the watch: (namespace, name) → access key.
    let mut pending_secrets: BTreeMap<(String, String), String> = BTreeMap::new();
    // Access key registered with the S3 server per credentials Secret, to revoke on rotation.
    let mut granted: BTreeMap<(String, String), String> = BTreeMap::new();
    let endpoint = options.endpoint();
    loop {
        notify.notified().await;
        for ((ns, name), bucket) in buckets.snapshot() {
            let claim_name = format!("bucket-{name}");
            let claim = claims.get(&ns, &claim_name);
            if claim.is_none() {
                let body = json!({
                    "apiVersion": "objectstorage.k8s.io/v1alpha1",
                    "kind": "BucketClaim",
                    "metadata": {
                        "name": claim_name,
                        "namespace": ns,
                        "ownerReferences": [{
                            "apiVersion": "apps.cozystack.io/v1alpha1",
                            "kind": "Bucket",
                            "name": name,
                            "uid": bucket["metadata"]["uid"],
                        }],
                    },
                    "spec": { "bucketClassName": "seaweedfs", "protocols": ["s3"] },
                });
                let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &claim_ar);
                let obj: DynamicObject = serde_json::from_value(body)?;
                match api.create(&PostParams::default(), &obj).await {
                    Ok(_) => {
                        tracing::info!(namespace = ns, name = claim_name, "created BucketClaim")
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => tracing::warn!(error = %e, "create BucketClaim failed"),
                }
                continue;
            }
            let claim = claim.unwrap_or_default();
            let Some(real) = claim["status"]["bucketName"]
                .as_str()
                .filter(|s| !s.is_empty())
            else {
                continue;
            };
            let users: Vec<String> = bucket["spec"]["users"]
                .as_object()
                .map(|u| u.keys().cloned().collect())
                .unwrap_or_default();
            for user in users {
                let secret_name = format!("bucket-{name}-{user}-credentials");
                let key = (ns.clone(), secret_name.clone());
                let secrets_api: Api<Secret> = Api::namespaced(client.clone(), &ns);
                if let Some(existing) = secrets.get(&ns, &secret_name) {
                    pending_secrets.remove(&key);
                    // Adopt the keys the Secret carries (they may predate this process).
                    if let (Some(s3), Some(ak), Some(sk)) = (
                        &options.s3,
                        secret_value(&existing, "accessKey"),
                        secret_value(&existing, "secretKey"),
                    ) && granted.get(&key) != Some(&ak)
                    {
                        if let Some(old) = granted.insert(key.clone(), ak.clone()) {
                            s3.registry().revoke(&old);
                        }
                        s3.registry().grant(&ak, &sk, real);
                    }
                    if secret_value(&existing, "endpoint").as_deref() != Some(endpoint.as_str()) {
                        let patch = json!({"stringData": {"endpoint": endpoint}});
                        match secrets_api
                            .patch(&secret_name, &merge_params(), &Patch::Merge(&patch))
                            .await
                        {
                            Ok(_) => tracing::info!(
                                namespace = ns,
                                name = secret_name,
                                endpoint,
                                "updated the endpoint of a credentials Secret"
                            ),
                            Err(e) => tracing::warn!(error = %e, "patch credentials Secret failed"),
                        }
                    }
                    continue;
                }
                if pending_secrets.contains_key(&key) {
                    continue;
                }
                let (access_key, secret_key) = new_key_pair();
                if let Some(s3) = &options.s3 {
                    if let Err(e) = s3.ensure_bucket(real) {
                        tracing::warn!(error = %e, "creating the bucket failed");
                        continue;
                    }
                    // Rotation: the Secret is gone, so its old key pair must stop working.
                    if let Some(old) = granted.insert(key.clone(), access_key.clone()) {
                        s3.registry().revoke(&old);
                    }
                    s3.registry().grant(&access_key, &secret_key, real);
                }
                let secret = json!({
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": "Opaque",
                    "metadata": {
                        "name": secret_name,
                        "namespace": ns,
                        "labels": { USER_SECRET_LABEL: "true" },
                    },
                    "stringData": {
                        "accessKey": access_key,
                        "secretKey": secret_key,
                        "endpoint": endpoint,
                        "bucketName": real,
                    },
                });
                match secrets_api
                    .create(&PostParams::default(), &serde_json::from_value(secret)?)
                    .await
                {
                    Ok(_) => {
                        pending_secrets.insert(key, access_key);
                        tracing::info!(
                            namespace = ns,
                            name = secret_name,
                            "created credentials Secret"
                        )
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => tracing::warn!(error = %e, "create credentials Secret failed"),
                }
            }
        }
        for ((ns, name), claim) in claims.snapshot() {
            if claim["status"]["bucketName"]
                .as_str()
                .is_some_and(|s| !s.is_empty())
            {
                continue;
            }
            let uid = claim["metadata"]["uid"].as_str().unwrap_or("").to_owned();
            if !provisioning
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(uid.clone())
            {
                continue;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &claim_ar);
            let delay = options.delay;
            let provisioning = provisioning.clone();
            let notify = notify.clone();
            let s3 = options.s3.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let bucket = format!("bucket-{uid}");
                if let Some(s3) = &s3
                    && let Err(e) = s3.ensure_bucket(&bucket)
                {
                    tracing::warn!(namespace = ns, name, error = %e, "creating the bucket failed");
                }
                let patch = json!({
                    "status": { "bucketName": bucket, "bucketReady": true }
                });
                match api
                    .patch_status(&name, &merge_params(), &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => tracing::info!(namespace = ns, name, "bucket provisioned"),
                    Err(e) => {
                        tracing::warn!(namespace = ns, name, error = %e, "status update failed");
                        provisioning
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&uid);
                        // Retry on the next evaluation, after the watch backoff.
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        notify.notify_one();
                    }
                }
            });
        }
    }
}

fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_pairs_are_random_and_shaped_like_s3_keys() {
        let (a1, s1) = new_key_pair();
        let (a2, s2) = new_key_pair();
        assert_eq!((a1.len(), s1.len()), (20, 40));
        assert!(a1.starts_with("AK"));
        assert_ne!(a1, a2);
        assert_ne!(s1, s2);
    }

    #[test]
    fn secret_values_are_read_from_base64_data() {
        let secret = json!({"data": {"accessKey": "QUsx", "bad": "!!"}});
        assert_eq!(secret_value(&secret, "accessKey").as_deref(), Some("AK1"));
        assert_eq!(secret_value(&secret, "bad"), None);
        assert_eq!(secret_value(&secret, "missing"), None);
    }
}
