//! Simulated Flux helm-controller for Cozystack's Postgres application, plus the `cozystack-api`
//! step that turns an application into its HelmRelease.
//!
//! ```text
//!  apps.cozystack.io Postgres <app> ──(values = app spec, always, even while suspended)──►
//!      HelmRelease postgres-<app>
//!          │ spec.suspend: true → nothing is rendered, applied, pruned or re-created
//!          │ values changed │ reconcile.fluxcd.io/requestedAt (+forceAt) changed │ a rendered
//!          │ Cluster deleted
//!          ▼
//!      render_postgres(values)  (what the Cozystack Postgres chart renders)
//!          ├─ Ok  → server-side apply (field manager helm-controller): Cluster postgres-<app>,
//!          │        ObjectStore postgres-<app> (chart-wired backups), ObjectStore
//!          │        postgres-<app>-recovery + bootstrap.recovery (restore), Secret
//!          │        postgres-<app>-s3-creds; prune what is no longer rendered;
//!          │        Ready/Released True (InstallSucceeded / UpgradeSucceeded), history v<N>
//!          └─ Err → Ready/Released False (InstallFailed / UpgradeFailed) with the chart's message
//! ```
//!
//! Invariants: rendering is a pure function of the values ([`render_postgres`]); only
//! helm-controller's own fields are applied, so fields other managers own (the CNPG backup
//! driver's `spec.plugins`) survive a re-render; a suspended HelmRelease is never acted on.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use api::thirdparty::apps::Postgres;
use api::thirdparty::barman::ObjectStore;
use api::thirdparty::cnpg::Cluster;
use api::thirdparty::flux::HelmRelease;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use sha2::Digest as _;
use tokio::sync::Notify;

use crate::cache::{Cache, spawn_watches};

/// Field manager of the simulated helm-controller (rendered objects, HelmRelease status).
pub const FIELD_MANAGER: &str = "helm-controller";
/// Field manager of the simulated cozystack-api (HelmRelease spec from the application).
pub const API_FIELD_MANAGER: &str = "cozystack-api";
/// The chart name and the version reported in conditions.
pub const CHART: &str = "postgres";
/// Chart version reported in HelmRelease conditions and history.
pub const CHART_VERSION: &str = "0.0.0-sim";
/// Flux's reconcile-request annotation.
pub const REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
/// Flux's force annotation (honoured only together with a new `requestedAt`).
pub const FORCE_AT: &str = "reconcile.fluxcd.io/forceAt";
const RELEASE_NAME_LABEL: &str = "helm.toolkit.fluxcd.io/name";
const RELEASE_NS_LABEL: &str = "helm.toolkit.fluxcd.io/namespace";

/// The Postgres chart's default values (the keys the simulated render reads).
pub fn default_values() -> Value {
    json!({
        "replicas": 2,
        "size": "10Gi",
        "storageClass": "",
        "version": "v18",
        "postgresql": {"parameters": {"max_connections": "100"}},
        "quorum": {"minSyncReplicas": 0, "maxSyncReplicas": 0},
        "users": {},
        "databases": {},
        "backup": {
            "enabled": false, "useSystemBucket": false, "retentionPolicy": "30d",
            "destinationPath": "s3://bucket/path/to/folder/",
            "endpointURL": "http://minio-gateway-service:9000",
            "schedule": "", "s3AccessKey": "", "s3SecretKey": "",
            "s3CredentialsSecret": {"name": "", "accessKeyIDKey": "", "secretAccessKeyKey": ""},
            "endpointCA": {"name": "", "key": ""},
        },
        "bootstrap": {"enabled": false, "recoveryTime": "", "oldName": "", "serverName": ""},
    })
}

/// Helm's value merge: maps merge recursively, everything else is replaced.
pub fn merge_values(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                if v.is_null() {
                    continue;
                }
                merge_values(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o.clone(),
    }
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

fn truthy(v: &Value) -> bool {
    match v {
        Value::Bool(b) => *b,
        Value::String(s) => !s.is_empty(),
        Value::Number(n) => n.as_f64() != Some(0.0),
        Value::Null => false,
        _ => true,
    }
}

/// Renders what the Cozystack Postgres chart renders for release `release` from the application's
/// spec (merged over [`default_values`]): the cnpg Cluster, the barman-cloud ObjectStores and the
/// inline-credentials Secret. `Err` carries the chart's `fail` message.
pub fn render_postgres(release: &str, user_values: &Value) -> Result<Vec<Value>, String> {
    let mut v = default_values();
    merge_values(&mut v, user_values);
    let backup = &v["backup"];
    let bootstrap = &v["bootstrap"];
    let cred_cfg = &backup["s3CredentialsSecret"];
    let cred_name = if s(&cred_cfg["name"]).is_empty() {
        format!("{release}-s3-creds")
    } else {
        s(&cred_cfg["name"]).to_owned()
    };
    let (access_key_key, secret_key_key) = if s(&cred_cfg["name"]).is_empty() {
        (
            "AWS_ACCESS_KEY_ID".to_owned(),
            "AWS_SECRET_ACCESS_KEY".to_owned(),
        )
    } else {
        let or = |k: &str, d: &str| {
            let v = s(&cred_cfg[k]);
            if v.is_empty() {
                d.to_owned()
            } else {
                v.to_owned()
            }
        };
        (
            or("accessKeyIDKey", "AWS_ACCESS_KEY_ID"),
            or("secretAccessKeyKey", "AWS_SECRET_ACCESS_KEY"),
        )
    };
    let ca_cfg = &backup["endpointCA"];
    let ca_key = if s(&ca_cfg["key"]).is_empty() {
        "ca.crt"
    } else {
        s(&ca_cfg["key"])
    };
    let has_inline = !s(&backup["s3AccessKey"]).is_empty() && !s(&backup["s3SecretKey"]).is_empty();
    let has_legacy = has_inline || !s(&cred_cfg["name"]).is_empty();
    let use_system = truthy(&backup["useSystemBucket"]);
    let render_barman = truthy(&backup["enabled"])
        && !use_system
        && !s(&backup["destinationPath"]).is_empty()
        && has_legacy;
    let bootstrap_enabled = truthy(&bootstrap["enabled"]);

    let size = s(&v["size"]);
    if size.is_empty() {
        return Err(
            "execution error at (postgres/templates/db.yaml): .Values.size is required".into(),
        );
    }
    if bootstrap_enabled && use_system {
        return Err("execution error at (postgres/templates/db.yaml): postgres: bootstrap.enabled=true is incompatible with backup.useSystemBucket=true. Use a backups.cozystack.io/RestoreJob against the cozy-default BackupClass to restore from the system bucket; see docs/operations/backup-classes.md.".into());
    }
    if bootstrap_enabled && !use_system && s(&cred_cfg["name"]).is_empty() && !has_inline {
        return Err("execution error at (postgres/templates/db.yaml): postgres: bootstrap.enabled=true requires S3 credentials: set backup.s3AccessKey+backup.s3SecretKey, backup.s3CredentialsSecret.name, or backup.useSystemBucket=true (with a backups.cozystack.io/RestoreJob).".into());
    }
    let mut parameters = serde_json::Map::new();
    parameters.insert("max_wal_senders".into(), json!("30"));
    const DANGEROUS: &[&str] = &[
        "archive_command",
        "restore_command",
        "ssl_passphrase_command",
        "archive_cleanup_command",
        "recovery_end_command",
        "dynamic_library_path",
        "local_preload_libraries",
        "session_preload_libraries",
        "shared_preload_libraries",
    ];
    for (k, val) in v["postgresql"]["parameters"]
        .as_object()
        .into_iter()
        .flatten()
    {
        if DANGEROUS.contains(&k.to_lowercase().as_str()) {
            return Err(format!(
                "execution error at (postgres/templates/db.yaml): SECURITY: Parameter '{k}' is blocked. This parameter can enable arbitrary code execution and must not be set by tenants."
            ));
        }
        let text = match val {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        parameters.insert(k.clone(), json!(text));
    }
    let mut storage = json!({"size": size});
    if !s(&v["storageClass"]).is_empty() {
        storage["storageClass"] = v["storageClass"].clone();
    }
    let mut spec = json!({
        "instances": v["replicas"],
        "imageName": format!("ghcr.io/cloudnative-pg/postgresql:{}", s(&v["version"]).trim_start_matches('v')),
        "enableSuperuserAccess": true,
        "postgresql": {"parameters": parameters},
        "minSyncReplicas": v["quorum"]["minSyncReplicas"],
        "maxSyncReplicas": v["quorum"]["maxSyncReplicas"],
        "monitoring": {"enablePodMonitor": true},
        "storage": storage,
        "inheritedMetadata": {"labels": {
            "policy.cozystack.io/allow-to-apiserver": "true",
            "app.kubernetes.io/name": "postgres.apps.cozystack.io",
            "app.kubernetes.io/instance": release,
        }},
    });
    if render_barman {
        spec["plugins"] = json!([{
            "name": "barman-cloud.cloudnative-pg.io",
            "isWALArchiver": true,
            "parameters": {"barmanObjectName": release, "serverName": release},
        }]);
    }
    if bootstrap_enabled {
        let old_name = s(&bootstrap["oldName"]);
        let mut recovery = json!({"source": old_name});
        if !s(&bootstrap["recoveryTime"]).is_empty() {
            recovery["recoveryTarget"] = json!({"targetTime": bootstrap["recoveryTime"]});
        }
        spec["bootstrap"] = json!({"recovery": recovery});
        let server_name = if s(&bootstrap["serverName"]).is_empty() {
            old_name
        } else {
            s(&bootstrap["serverName"])
        };
        spec["externalClusters"] = json!([{
            "name": old_name,
            "plugin": {
                "name": "barman-cloud.cloudnative-pg.io",
                "parameters": {"barmanObjectName": format!("{release}-recovery"), "serverName": server_name},
            },
        }]);
    }
    let mut out = vec![json!({
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
        "metadata": {"name": release},
        "spec": spec,
    })];
    let store = |name: String, retention: bool| {
        let mut configuration = json!({
            "destinationPath": backup["destinationPath"],
            "endpointURL": backup["endpointURL"],
            "s3Credentials": {
                "accessKeyId": {"name": cred_name, "key": access_key_key},
                "secretAccessKey": {"name": cred_name, "key": secret_key_key},
            },
        });
        if !s(&ca_cfg["name"]).is_empty() {
            configuration["endpointCA"] = json!({"name": ca_cfg["name"], "key": ca_key});
        }
        let mut spec = json!({
            "instanceSidecarConfiguration": {"env": [
                {"name": "AWS_REQUEST_CHECKSUM_CALCULATION", "value": "when_required"}]},
            "configuration": configuration,
        });
        if retention && !s(&backup["retentionPolicy"]).is_empty() {
            spec["retentionPolicy"] = backup["retentionPolicy"].clone();
        }
        json!({"apiVersion": "barmancloud.cnpg.io/v1", "kind": "ObjectStore",
               "metadata": {"name": name}, "spec": spec})
    };
    if render_barman {
        out.push(store(release.to_owned(), true));
    }
    if bootstrap_enabled {
        out.push(store(format!("{release}-recovery"), false));
    }
    if (truthy(&backup["enabled"]) || bootstrap_enabled)
        && s(&cred_cfg["name"]).is_empty()
        && !use_system
        && has_inline
    {
        out.push(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{release}-s3-creds")},
            "stringData": {
                "AWS_ACCESS_KEY_ID": backup["s3AccessKey"],
                "AWS_SECRET_ACCESS_KEY": backup["s3SecretKey"],
            },
        }));
    }
    Ok(out)
}

/// What a HelmRelease reconcile must do, decided from its spec, status and what exists.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    /// Suspended, or nothing changed: leave it alone.
    Nothing,
    /// Render and apply; `reason` says why (for the log).
    Reconcile {
        /// Why.
        reason: &'static str,
    },
}

/// The digest of a HelmRelease's values, as recorded in `status.lastAttemptedConfigDigest`.
pub fn config_digest(values: &Value) -> String {
    let text = serde_json::to_string(values).unwrap_or_default();
    format!(
        "sha256:{}",
        hex::encode(sha2::Sha256::digest(text.as_bytes()))
    )
}

/// Decides the next step for a HelmRelease.
pub fn next_step(hr: &Value, cluster_exists: bool) -> Step {
    if hr["spec"]["suspend"] == true {
        return Step::Nothing;
    }
    let status = &hr["status"];
    let values = hr["spec"]["values"].clone();
    if status["lastAttemptedConfigDigest"].as_str() != Some(config_digest(&values).as_str()) {
        return Step::Reconcile {
            reason: "values changed",
        };
    }
    let requested = &hr["metadata"]["annotations"][REQUESTED_AT];
    if requested.is_string() && *requested != status["lastHandledReconcileAt"] {
        return Step::Reconcile {
            reason: "reconcile requested",
        };
    }
    let released = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Released" && c["status"] == "True");
    if released && !cluster_exists {
        return Step::Reconcile {
            reason: "a rendered object is missing",
        };
    }
    Step::Nothing
}

/// Runs the simulator forever.
pub async fn run(client: kube::Client, readiness: runtime::Readiness) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let apps = Arc::new(Cache::default());
    let releases = Arc::new(Cache::default());
    let clusters = Arc::new(Cache::default());
    let app_ar = ApiResource::erase::<Postgres>(&());
    let hr_ar = ApiResource::erase::<HelmRelease>(&());
    let cluster_ar = ApiResource::erase::<Cluster>(&());
    spawn_watches(
        &client,
        &readiness,
        &notify,
        vec![
            (&apps, app_ar.clone(), "flux: watch Postgres"),
            (&releases, hr_ar.clone(), "flux: watch HelmRelease"),
            (&clusters, cluster_ar.clone(), "flux: watch Cluster"),
        ],
    );
    loop {
        notify.notified().await;
        // cozystack-api: each Postgres application is HelmRelease postgres-<name>.
        for ((ns, name), app) in apps.snapshot() {
            let release = format!("postgres-{name}");
            let values = app["spec"].clone();
            let current = releases.get(&ns, &release);
            if current
                .as_ref()
                .is_some_and(|hr| hr["spec"]["values"] == values)
            {
                continue;
            }
            let body = json!({
                "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
                "metadata": {
                    "name": release, "namespace": ns,
                    "labels": {
                        "apps.cozystack.io/application.kind": "Postgres",
                        "apps.cozystack.io/application.group": "apps.cozystack.io",
                        "apps.cozystack.io/application.name": name,
                    },
                    "ownerReferences": [{
                        "apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres",
                        "name": name, "uid": app["metadata"]["uid"],
                    }],
                },
                "spec": {
                    "interval": "5m",
                    "chart": {"spec": {"chart": CHART, "version": "*",
                        "sourceRef": {"kind": "HelmRepository", "name": "cozystack-apps",
                                      "namespace": "cozy-public"}}},
                    "values": values,
                },
            });
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &hr_ar);
            match api
                .patch(
                    &release,
                    &PatchParams::apply(API_FIELD_MANAGER).force(),
                    &Patch::Apply(&body),
                )
                .await
            {
                Ok(o) => {
                    releases.insert(serde_json::to_value(o).unwrap_or_default());
                    tracing::info!(
                        namespace = ns,
                        release,
                        "HelmRelease values from the application"
                    );
                }
                Err(e) => {
                    tracing::warn!(namespace = ns, release, error = %e, "applying the HelmRelease failed")
                }
            }
        }
        // helm-controller.
        for ((ns, name), hr) in releases.snapshot() {
            if hr["metadata"]["labels"]["apps.cozystack.io/application.kind"] != "Postgres" {
                continue;
            }
            let cluster_exists = clusters.get(&ns, &name).is_some();
            if next_step(&hr, cluster_exists) == Step::Nothing {
                continue;
            }
            // Decide again on a fresh read: the watches of HelmReleases and Clusters are separate
            // streams, and a suspension written just before a Cluster deletion must win.
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &hr_ar);
            let fresh = match api.get_opt(&name).await {
                Ok(Some(o)) => serde_json::to_value(o).unwrap_or_default(),
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(namespace = ns, release = name, error = %e, "reading the HelmRelease failed");
                    continue;
                }
            };
            if let Step::Reconcile { reason } = next_step(&fresh, cluster_exists) {
                let hr = fresh;
                tracing::info!(
                    namespace = ns,
                    release = name,
                    reason,
                    "reconciling HelmRelease"
                );
                let status = reconcile(&client, &ns, &name, &hr, &clusters).await;
                let params = PatchParams {
                    field_manager: Some(FIELD_MANAGER.into()),
                    ..Default::default()
                };
                match api
                    .patch_status(&name, &params, &Patch::Merge(&json!({ "status": status })))
                    .await
                {
                    Ok(o) => releases.insert(serde_json::to_value(o).unwrap_or_default()),
                    Err(e) => {
                        tracing::warn!(namespace = ns, release = name, error = %e, "HelmRelease status update failed")
                    }
                }
            }
        }
    }
}

/// Renders and applies one release; returns the HelmRelease status to write.
async fn reconcile(
    client: &kube::Client,
    ns: &str,
    name: &str,
    hr: &Value,
    clusters: &Cache,
) -> Value {
    let values = hr["spec"]["values"].clone();
    let status = &hr["status"];
    let history: Vec<Value> = status["history"].as_array().cloned().unwrap_or_default();
    let installed = !history.is_empty();
    let version = history
        .first()
        .and_then(|h| h["version"].as_i64())
        .unwrap_or(0)
        + 1;
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let digest = config_digest(&values);
    let chart = format!("{CHART}@{CHART_VERSION}");
    let mut out = json!({
        "observedGeneration": hr["metadata"]["generation"],
        "lastAttemptedGeneration": hr["metadata"]["generation"],
        "lastAttemptedConfigDigest": digest,
        "lastAttemptedRevision": CHART_VERSION,
        "lastAttemptedReleaseAction": if installed { "upgrade" } else { "install" },
    });
    let annotations = &hr["metadata"]["annotations"];
    if annotations[REQUESTED_AT].is_string() {
        out["lastHandledReconcileAt"] = annotations[REQUESTED_AT].clone();
        if annotations[FORCE_AT].is_string() {
            out["lastHandledForceAt"] = annotations[FORCE_AT].clone();
        }
    }
    let result = match render_postgres(name, &values) {
        Err(e) => Err(e),
        Ok(objects) => apply_objects(client, ns, name, hr, objects, clusters).await,
    };
    let (ok, reason, message) = match result {
        Ok(()) => {
            let (reason, verb) = if installed {
                ("UpgradeSucceeded", "upgrade")
            } else {
                ("InstallSucceeded", "install")
            };
            (
                true,
                reason,
                format!(
                    "Helm {verb} succeeded for release {ns}/{name}.v{version} with chart {chart}"
                ),
            )
        }
        Err(e) => {
            let (reason, verb) = if installed {
                ("UpgradeFailed", "upgrade")
            } else {
                ("InstallFailed", "install")
            };
            (
                false,
                reason,
                format!("Helm {verb} failed for release {ns}/{name} with chart {chart}: {e}"),
            )
        }
    };
    let st = if ok { "True" } else { "False" };
    let cond = |t: &str| {
        json!({"type": t, "status": st, "reason": reason, "message": message,
               "lastTransitionTime": now, "observedGeneration": hr["metadata"]["generation"]})
    };
    out["conditions"] = json!([cond("Ready"), cond("Released")]);
    if ok {
        let mut h = vec![json!({
            "name": name, "namespace": ns, "version": version, "status": "deployed",
            "chartName": CHART, "chartVersion": CHART_VERSION, "configDigest": digest,
            "firstDeployed": history.last().map(|h| h["firstDeployed"].clone()).unwrap_or(json!(now)),
            "lastDeployed": now,
        })];
        h.extend(history.into_iter().take(4).map(|mut e| {
            e["status"] = json!("superseded");
            e
        }));
        out["history"] = Value::Array(h);
        out["installFailures"] = json!(0);
        out["upgradeFailures"] = json!(0);
    } else {
        let key = if installed {
            "upgradeFailures"
        } else {
            "installFailures"
        };
        out[key] = json!(status[key].as_i64().unwrap_or(0) + 1);
    }
    out
}

async fn apply_objects(
    client: &kube::Client,
    ns: &str,
    release: &str,
    hr: &Value,
    objects: Vec<Value>,
    clusters: &Cache,
) -> Result<(), String> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut desired: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
    for mut obj in objects {
        let obj_name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
        obj["metadata"]["namespace"] = json!(ns);
        obj["metadata"]["labels"] = json!({
            RELEASE_NAME_LABEL: release, RELEASE_NS_LABEL: ns,
            "app.kubernetes.io/managed-by": "Helm",
        });
        obj["metadata"]["annotations"] = json!({
            "meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": ns,
        });
        // Helm deletes a release's objects when the release goes; the owner reference gets
        // the same effect from the API server's garbage collector.
        obj["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
            "name": release, "uid": hr["metadata"]["uid"],
        }]);
        let (ar, kind) = match obj["kind"].as_str() {
            Some("Cluster") => (ApiResource::erase::<Cluster>(&()), "Cluster"),
            Some("ObjectStore") => (ApiResource::erase::<ObjectStore>(&()), "ObjectStore"),
            _ => (ApiResource::erase::<Secret>(&()), "Secret"),
        };
        desired.entry(kind).or_default().insert(obj_name.clone());
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let applied = api
            .patch(&obj_name, &params, &Patch::Apply(&obj))
            .await
            .map_err(|e| format!("{kind} {ns}/{obj_name}: {e}"))?;
        if kind == "Cluster" {
            clusters.insert(serde_json::to_value(applied).unwrap_or_default());
        }
    }
    // Prune what this release rendered before and renders no more.
    for (kind, ar) in [
        ("ObjectStore", ApiResource::erase::<ObjectStore>(&())),
        ("Secret", ApiResource::erase::<Secret>(&())),
    ] {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
        let selector = format!("{RELEASE_NAME_LABEL}={release}");
        let list = api
            .list(&ListParams::default().labels(&selector))
            .await
            .map_err(|e| format!("listing {kind}s: {e}"))?;
        for o in list.items {
            let n = o.metadata.name.clone().unwrap_or_default();
            if !desired.get(kind).is_some_and(|d| d.contains(&n)) {
                match api.delete(&n, &DeleteParams::default()).await {
                    Ok(_) => tracing::info!(namespace = ns, kind, name = n, "pruned"),
                    Err(kube::Error::Api(e)) if e.code == 404 => {}
                    Err(e) => return Err(format!("pruning {kind} {ns}/{n}: {e}")),
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_app_renders_one_cluster() {
        let out = render_postgres("postgres-db", &json!({"size": "1Gi", "replicas": 1})).unwrap();
        assert_eq!(out.len(), 1);
        let spec = &out[0]["spec"];
        assert_eq!(out[0]["metadata"]["name"], "postgres-db");
        assert_eq!(spec["instances"], 1);
        assert_eq!(spec["storage"], json!({"size": "1Gi"}));
        assert!(spec["plugins"].is_null() && spec["bootstrap"].is_null());
        assert_eq!(spec["postgresql"]["parameters"]["max_wal_senders"], "30");
        assert_eq!(spec["postgresql"]["parameters"]["max_connections"], "100");
    }

    #[test]
    fn the_restore_patch_renders_a_recovery_bootstrap() {
        let values = json!({
            "size": "1Gi",
            "bootstrap": {"enabled": true, "oldName": "postgres-src", "serverName": "postgres-src",
                          "recoveryTime": "2026-07-21T09:30:00Z"},
            "backup": {"destinationPath": "s3://b/tenant-acme/", "endpointURL": "https://s3:1",
                       "s3CredentialsSecret": {"name": "cozy-backups-creds",
                           "accessKeyIDKey": "AWS_ACCESS_KEY_ID", "secretAccessKeyKey": "AWS_SECRET_ACCESS_KEY"}},
        });
        let out = render_postgres("postgres-copy", &values).unwrap();
        let kinds: Vec<&str> = out.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["Cluster", "ObjectStore"]);
        let spec = &out[0]["spec"];
        assert_eq!(
            spec["bootstrap"],
            json!({"recovery": {"source": "postgres-src",
                                "recoveryTarget": {"targetTime": "2026-07-21T09:30:00Z"}}})
        );
        assert_eq!(
            spec["externalClusters"],
            json!([{"name": "postgres-src", "plugin": {"name": "barman-cloud.cloudnative-pg.io",
                "parameters": {"barmanObjectName": "postgres-copy-recovery", "serverName": "postgres-src"}}}])
        );
        assert_eq!(out[1]["metadata"]["name"], "postgres-copy-recovery");
        assert_eq!(
            out[1]["spec"]["configuration"],
            json!({"destinationPath": "s3://b/tenant-acme/", "endpointURL": "https://s3:1",
                   "s3Credentials": {
                       "accessKeyId": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"},
                       "secretAccessKey": {"name": "cozy-backups-creds", "key": "AWS_SECRET_ACCESS_KEY"}}})
        );
        assert!(out[1]["spec"]["retentionPolicy"].is_null());
    }

    #[test]
    fn chart_wired_backups_render_the_plugin_store_and_secret() {
        let values = json!({"backup": {"enabled": true, "destinationPath": "s3://b/p/",
            "endpointURL": "http://s3:1", "s3AccessKey": "AK", "s3SecretKey": "SK"}});
        let out = render_postgres("postgres-db", &values).unwrap();
        let kinds: Vec<&str> = out.iter().map(|o| o["kind"].as_str().unwrap()).collect();
        assert_eq!(kinds, ["Cluster", "ObjectStore", "Secret"]);
        assert_eq!(
            out[0]["spec"]["plugins"],
            json!([{"name": "barman-cloud.cloudnative-pg.io", "isWALArchiver": true,
                    "parameters": {"barmanObjectName": "postgres-db", "serverName": "postgres-db"}}])
        );
        assert_eq!(out[1]["spec"]["retentionPolicy"], "30d");
        assert_eq!(out[2]["metadata"]["name"], "postgres-db-s3-creds");
    }

    #[test]
    fn the_chart_refuses_bootstrap_without_credentials_or_with_the_system_bucket() {
        let no_creds = json!({"bootstrap": {"enabled": true, "oldName": "x"}});
        assert!(render_postgres("p", &no_creds).unwrap_err().contains(
            "postgres: bootstrap.enabled=true requires S3 credentials: set backup.s3AccessKey+backup.s3SecretKey"
        ));
        let system = json!({"bootstrap": {"enabled": true, "oldName": "x"},
                            "backup": {"useSystemBucket": true}});
        assert!(render_postgres("p", &system).unwrap_err().contains(
            "postgres: bootstrap.enabled=true is incompatible with backup.useSystemBucket=true."
        ));
        let dangerous = json!({"postgresql": {"parameters": {"Archive_Command": "x"}}});
        assert!(
            render_postgres("p", &dangerous)
                .unwrap_err()
                .contains("SECURITY: Parameter 'Archive_Command' is blocked.")
        );
    }

    #[test]
    fn next_step_honours_suspend_requests_and_missing_objects() {
        let values = json!({"size": "1Gi"});
        let released = |extra: Value| {
            let mut hr = json!({
                "metadata": {"annotations": {}},
                "spec": {"values": values},
                "status": {"lastAttemptedConfigDigest": config_digest(&values),
                           "conditions": [{"type": "Released", "status": "True"}]},
            });
            merge_values(&mut hr, &extra);
            hr
        };
        assert_eq!(next_step(&released(json!({})), true), Step::Nothing);
        assert_eq!(
            next_step(&released(json!({})), false),
            Step::Reconcile {
                reason: "a rendered object is missing"
            }
        );
        assert_eq!(
            next_step(&released(json!({"spec": {"suspend": true}})), false),
            Step::Nothing
        );
        assert_eq!(
            next_step(
                &released(json!({"spec": {"values": {"size": "2Gi"}}})),
                true
            ),
            Step::Reconcile {
                reason: "values changed"
            }
        );
        assert_eq!(
            next_step(
                &released(json!({"metadata": {"annotations": {REQUESTED_AT: "t1"}}})),
                true
            ),
            Step::Reconcile {
                reason: "reconcile requested"
            }
        );
        assert_eq!(
            next_step(
                &released(json!({"metadata": {"annotations": {REQUESTED_AT: "t1"}},
                                 "status": {"lastHandledReconcileAt": "t1"}})),
                true
            ),
            Step::Nothing
        );
    }
}
