//! Simulated Velero BackupStorageLocation validation: a BSL is `Available` while the Secret key its
//! `spec.credential` names (default `cozy-backups-creds` / `cloud`) exists in the BSL's namespace,
//! and `Unavailable` otherwise. Both the BSLs and the Secrets are watched, so the phase follows a
//! Secret appearing or disappearing at once. Only key names of Secrets are kept in memory.

use std::sync::Arc;

use api::thirdparty::velero::BackupStorageLocation;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::cache::Cache;

/// Field manager of the simulated Velero.
pub const FIELD_MANAGER: &str = "operator-sims-velero";

/// Replaces every Secret value with an empty string: the simulator needs only key names.
fn keys_only(v: &mut Value) {
    for field in ["data", "stringData"] {
        if let Some(map) = v.get_mut(field).and_then(Value::as_object_mut) {
            for value in map.values_mut() {
                *value = Value::String(String::new());
            }
        }
    }
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("annotations");
        meta.remove("managedFields");
    }
}

/// The phase and message a BSL should report given the Secrets seen.
pub fn desired_phase(bsl: &Value, secrets: &Cache) -> (&'static str, String) {
    let ns = bsl["metadata"]["namespace"].as_str().unwrap_or("");
    let name = bsl["spec"]["credential"]["name"]
        .as_str()
        .unwrap_or(api::contract::names::CREDENTIALS_SECRET);
    let key = bsl["spec"]["credential"]["key"].as_str().unwrap_or("cloud");
    let present = secrets
        .get(ns, name)
        .is_some_and(|s| s["data"].get(key).is_some());
    if present {
        ("Available", String::new())
    } else {
        (
            "Unavailable",
            format!("credentials Secret {ns}/{name} has no key {key}"),
        )
    }
}

/// Runs the simulator forever.
pub async fn run(client: kube::Client, readiness: runtime::Readiness) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let bsls = Arc::new(Cache::default());
    let secrets = Arc::new(Cache::default());
    let bsl_ar = ApiResource::erase::<BackupStorageLocation>(&());
    tokio::spawn(bsls.clone().watch(
        client.clone(),
        bsl_ar.clone(),
        watcher::Config::default(),
        notify.clone(),
        readiness.register("velero: watch BackupStorageLocation"),
        |_| {},
    ));
    tokio::spawn(secrets.clone().watch(
        client.clone(),
        ApiResource::erase::<Secret>(&()),
        watcher::Config::default(),
        notify.clone(),
        readiness.register("velero: watch Secret"),
        keys_only,
    ));
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    loop {
        notify.notified().await;
        for ((ns, name), bsl) in bsls.snapshot() {
            let (phase, message) = desired_phase(&bsl, &secrets);
            if bsl["status"]["phase"].as_str() == Some(phase)
                && bsl["status"]["message"].as_str().unwrap_or("") == message
            {
                continue;
            }
            let now = k8s_openapi::jiff::Timestamp::now().to_string();
            let patch = json!({
                "status": {
                    "phase": phase,
                    "message": if message.is_empty() { Value::Null } else { Value::String(message) },
                    "lastValidationTime": now,
                }
            });
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &bsl_ar);
            match api
                .patch_status(&name, &params, &Patch::Merge(&patch))
                .await
            {
                Ok(_) => tracing::info!(
                    namespace = ns,
                    name,
                    phase,
                    "BackupStorageLocation validated"
                ),
                Err(e) => tracing::warn!(namespace = ns, name, error = %e, "status update failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_follows_the_named_credentials_key_in_the_bsl_namespace() {
        let secrets = Cache::default();
        let bsl = |cred: Value| {
            json!({"metadata": {"namespace": "cozy-velero", "name": "cozy-default"},
                   "spec": {"credential": cred}})
        };
        let default_ref = bsl(Value::Null);
        let custom_ref = bsl(json!({"name": "other", "key": "k"}));
        assert_eq!(
            desired_phase(&default_ref, &secrets),
            (
                "Unavailable",
                "credentials Secret cozy-velero/cozy-backups-creds has no key cloud".into()
            )
        );
        let mut wrong_ns = json!({"metadata": {"namespace": "tenant-root", "name": "cozy-backups-creds"},
                                  "data": {"cloud": "c2VjcmV0"}});
        keys_only(&mut wrong_ns);
        assert_eq!(wrong_ns["data"]["cloud"], "", "values are dropped");
        secrets.insert(wrong_ns);
        assert_eq!(desired_phase(&default_ref, &secrets).0, "Unavailable");
        secrets.insert(
            json!({"metadata": {"namespace": "cozy-velero", "name": "cozy-backups-creds"},
                              "data": {"cloud": ""}}),
        );
        assert_eq!(
            desired_phase(&default_ref, &secrets),
            ("Available", String::new())
        );
        assert_eq!(desired_phase(&custom_ref, &secrets).0, "Unavailable");
    }
}
