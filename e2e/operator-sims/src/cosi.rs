//! Simulated COSI provisioner plus the parts of Cozystack's bucket application chart the backup
//! platform depends on:
//!
//! 1. `apps.cozystack.io` Bucket `<name>` → BucketClaim `bucket-<name>` in the same namespace (the
//!    bucket chart's release is `bucket-<name>`), owned by the Bucket.
//! 2. BucketClaim without `status.bucketName` → after [`Options::delay`],
//!    `status: {bucketName: bucket-<claim uid>, bucketReady: true}` (the COSI driver).
//! 3. Bucket whose claim is bound → for each user in `spec.users`, Secret
//!    `bucket-<name>-<user>-credentials` (type Opaque, label `apps.cozystack.io/user-secret: "true"`)
//!    with flat keys `accessKey`, `secretKey`, `endpoint` (bare host) and `bucketName`, and no `region`.
//!
//! The generated keys are fake and never logged.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::thirdparty::{apps::Bucket, cosi::BucketClaim};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::Notify;

use crate::cache::Cache;

/// Field manager of the simulated COSI driver.
pub const FIELD_MANAGER: &str = "operator-sims-cosi";

/// Settings of the COSI simulator.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long "provisioning" takes.
    pub delay: Duration,
    /// Endpoint written to the credentials Secrets (bare host).
    pub endpoint: String,
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
    let bucket_ar = ApiResource::erase::<Bucket>(&());
    let claim_ar = ApiResource::erase::<BucketClaim>(&());
    tokio::spawn(buckets.clone().watch(
        client.clone(),
        bucket_ar.clone(),
        watcher::Config::default(),
        notify.clone(),
        readiness.register("cosi: watch Bucket"),
        |_| {},
    ));
    tokio::spawn(claims.clone().watch(
        client.clone(),
        claim_ar.clone(),
        watcher::Config::default(),
        notify.clone(),
        readiness.register("cosi: watch BucketClaim"),
        |_| {},
    ));
    // Work already started (claims being provisioned, Secrets written), by uid.
    let provisioning: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let mut secrets_written: BTreeSet<(String, String)> = BTreeSet::new();
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
            let uid = bucket["metadata"]["uid"].as_str().unwrap_or("").to_owned();
            for user in users {
                if !secrets_written.insert((uid.clone(), user.clone())) {
                    continue;
                }
                let secret_name = format!("bucket-{name}-{user}-credentials");
                let secret = json!({
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "type": "Opaque",
                    "metadata": {
                        "name": secret_name,
                        "namespace": ns,
                        "labels": { "apps.cozystack.io/user-secret": "true" },
                    },
                    "stringData": {
                        "accessKey": format!("SIMAK{}", uid.replace('-', "").chars().take(12).collect::<String>()),
                        "secretKey": format!("simsk-{uid}-{user}"),
                        "endpoint": options.endpoint,
                        "bucketName": real,
                    },
                });
                let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
                match api
                    .create(&PostParams::default(), &serde_json::from_value(secret)?)
                    .await
                {
                    Ok(_) => {
                        tracing::info!(
                            namespace = ns,
                            name = secret_name,
                            "created credentials Secret"
                        )
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => {
                        secrets_written.remove(&(uid.clone(), user.clone()));
                        tracing::warn!(error = %e, "create credentials Secret failed");
                    }
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
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let patch = json!({
                    "status": { "bucketName": format!("bucket-{uid}"), "bucketReady": true }
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
