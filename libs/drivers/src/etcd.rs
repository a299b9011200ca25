//! etcd-operator snapshots (Etcd applications, `etcd-operator.cozystack.io/v1alpha2`): the pure parts
//! of the backup path, shared with the restore path (names, the rendered destination, the
//! EtcdSnapshot body, how the EtcdCluster and the snapshot read, the catalog fields).
//!
//! ```text
//!  BackupJob ─► Etcd app <ns>/<app> ─► render ─► destination.s3 {bucket, endpoint, credentials} set?
//!     ─► EtcdCluster "etcd" (the chart's singleton) Available=True?
//!     ─► EtcdSnapshot <job>-xxxxx {clusterRef: etcd, destination.s3} labelled owned-by, no owner
//!  phase Complete ─► catalog Backup <job> (driverMetadata etcd.aenix.io/*, artifact passed through
//!                    from status.artifact, EtcdBackupSnapshot)
//!  phase Failed ─► failed with the most failure-shaped condition message
//! ```
//!
//! The driver metadata keys keep the legacy `etcd.aenix.io/` prefix on purpose: Backups taken
//! before the operator moved to `etcd-operator.cozystack.io` must still restore.

use std::collections::BTreeMap;

use api::contract::labels;
use serde_json::{Map, Value as Json, json};

/// The Etcd application kind.
pub const APP_KIND: &str = "Etcd";
/// The operator's API version.
pub const API_VERSION: &str = "etcd-operator.cozystack.io/v1alpha2";
/// The EtcdCluster every Etcd application renders (the chart pins the release name).
pub const CLUSTER_NAME: &str = "etcd";
/// The EtcdCluster condition that means "quorum is healthy".
pub const CONDITION_AVAILABLE: &str = "Available";
/// EtcdSnapshot phases.
pub mod phases {
    /// The snapshot is stored.
    pub const COMPLETE: &str = "Complete";
    /// The snapshot failed (terminal).
    pub const FAILED: &str = "Failed";
}
/// The snapshot kind in `status.underlyingResources`.
pub const SNAPSHOT_KIND: &str = "EtcdBackupSnapshot";
/// Upstream's wall-clock cap on the cluster becoming Available and on the snapshot completing.
pub const DEADLINE: std::time::Duration = std::time::Duration::from_secs(20 * 60);

/// Driver metadata keys on the catalog Backup.
pub mod keys {
    /// The EtcdSnapshot's name.
    pub const BACKUP_NAME: &str = "etcd.aenix.io/backup-name";
    /// The destination bucket.
    pub const BUCKET: &str = "etcd.aenix.io/bucket";
    /// The S3 endpoint.
    pub const ENDPOINT: &str = "etcd.aenix.io/endpoint";
    /// The object key prefix (when set).
    pub const KEY: &str = "etcd.aenix.io/key";
    /// The region (when set).
    pub const REGION: &str = "etcd.aenix.io/region";
    /// `true`/`false` (when set).
    pub const FORCE_PATH_STYLE: &str = "etcd.aenix.io/force-path-style";
    /// The credentials Secret's name (never its values).
    pub const CREDENTIALS_SECRET: &str = "etcd.aenix.io/credentials-secret-name";
}

/// Upstream's gate on the application reference (raw, not normalised).
pub fn validate_app_ref(r: &api::TypedLocalObjectReference) -> Result<(), String> {
    crate::app_ref::validate("Etcd", APP_KIND, r)
}

/// Renders the strategy template against the application and the route's parameters and
/// re-shapes `destination` as upstream's typed template (`{"s3": {bucket, endpoint, key?,
/// region?, forcePathStyle?, credentialsSecretRef: {name}}}`; `s3` is `null` when absent).
pub fn render_template(template: &Json, app: &Json, parameters: &BTreeMap<String, String>) -> Json {
    let rendered = crate::template::render_for_app(template, app, parameters);
    let s3 = &rendered["destination"]["s3"];
    let shaped = if s3.is_object() {
        let mut out = Map::new();
        let s = |k: &str| json!(s3[k].as_str().unwrap_or_default());
        out.insert("bucket".into(), s("bucket"));
        out.insert("endpoint".into(), s("endpoint"));
        for key in ["key", "region"] {
            if let Some(v) = s3[key].as_str().filter(|v| !v.is_empty()) {
                out.insert(key.into(), json!(v));
            }
        }
        if let Some(b) = s3["forcePathStyle"].as_bool() {
            out.insert("forcePathStyle".into(), json!(b));
        }
        out.insert(
            "credentialsSecretRef".into(),
            json!({"name": s3["credentialsSecretRef"]["name"].as_str().unwrap_or_default()}),
        );
        Json::Object(out)
    } else {
        Json::Null
    };
    json!({"destination": {"s3": shaped}})
}

/// Upstream's check of the rendered destination (the operator would refuse it later).
pub fn validate_destination(rendered: &Json) -> Result<(), String> {
    let s3 = &rendered["destination"]["s3"];
    if !s3.is_object() {
        return Err(
            "destination.s3 is required (PVC destinations are not supported by this strategy)"
                .into(),
        );
    }
    let empty = |v: &Json| v.as_str().unwrap_or_default().is_empty();
    if empty(&s3["bucket"]) {
        return Err("destination.s3.bucket is empty after templating".into());
    }
    if empty(&s3["endpoint"]) {
        return Err("destination.s3.endpoint is empty after templating".into());
    }
    if empty(&s3["credentialsSecretRef"]["name"]) {
        return Err("destination.s3.credentialsSecretRef.name is empty after templating".into());
    }
    Ok(())
}

/// The EtcdSnapshot of a job (created with `generateName: <job>-`).
pub fn snapshot_body(job_namespace: &str, job_name: &str, rendered: &Json) -> Json {
    json!({
        "apiVersion": API_VERSION,
        "kind": "EtcdSnapshot",
        "metadata": {
            "generateName": format!("{job_name}-"),
            "namespace": job_namespace,
            "labels": {
                labels::OWNED_BY_JOB_NAME: job_name,
                labels::OWNED_BY_JOB_NAMESPACE: job_namespace,
            },
        },
        "spec": {
            "clusterRef": {"name": CLUSTER_NAME},
            "destination": {"s3": rendered["destination"]["s3"].clone()},
        },
    })
}

fn find_condition<'a>(obj: &'a Json, type_: &str) -> Option<&'a Json> {
    obj["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Whether the EtcdCluster reports `Available=True`.
pub fn cluster_available(cluster: &Json) -> bool {
    find_condition(cluster, CONDITION_AVAILABLE).is_some_and(|c| c["status"] == "True")
}

/// The EtcdCluster's `Available` condition in a few words, for a deadline message.
pub fn availability_summary(cluster: &Json) -> String {
    let Some(c) = find_condition(cluster, CONDITION_AVAILABLE) else {
        return "no Available condition emitted yet".into();
    };
    let s = |k: &str| c[k].as_str().unwrap_or_default();
    let detail = if s("message").is_empty() {
        s("reason")
    } else {
        s("message")
    };
    format!("{}={}/{detail}", s("type"), s("status"))
}

fn transition_time(c: &Json) -> chrono::DateTime<chrono::Utc> {
    c["lastTransitionTime"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or_default()
}

/// The message most likely to explain a failed snapshot: the latest failure-shaped condition
/// (type `Failed` in any case, a reason starting with `Failed`, or `Available=False`), else the
/// latest condition of any kind; empty without conditions.
pub fn failure_message(snapshot: &Json) -> String {
    let conditions: Vec<&Json> = snapshot["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let latest = |items: &mut dyn Iterator<Item = &&Json>| -> Option<String> {
        let mut best: Option<&Json> = None;
        for c in items {
            if best.is_none_or(|b| transition_time(c) > transition_time(b)) {
                best = Some(c);
            }
        }
        best.map(|c| c["message"].as_str().unwrap_or_default().to_owned())
    };
    let failure = latest(&mut conditions.iter().filter(|c| {
        let s = |k: &str| c[k].as_str().unwrap_or_default();
        s("type").eq_ignore_ascii_case("Failed")
            || s("reason").starts_with("Failed")
            || (s("type") == CONDITION_AVAILABLE && s("status") == "False")
    }));
    failure
        .or_else(|| latest(&mut conditions.iter()))
        .unwrap_or_default()
}

/// `status.phase` of an EtcdSnapshot.
pub fn phase(snapshot: &Json) -> String {
    snapshot["status"]["phase"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// The catalog Backup's `driverMetadata` for EtcdSnapshot `name`.
pub fn driver_metadata(rendered: &Json, name: &str) -> BTreeMap<String, String> {
    let mut md = BTreeMap::from([(keys::BACKUP_NAME.to_owned(), name.to_owned())]);
    let s3 = &rendered["destination"]["s3"];
    if s3.is_object() {
        let s = |k: &str| s3[k].as_str().unwrap_or_default().to_owned();
        md.insert(keys::BUCKET.into(), s("bucket"));
        md.insert(keys::ENDPOINT.into(), s("endpoint"));
        for (key, field) in [(keys::KEY, "key"), (keys::REGION, "region")] {
            if !s(field).is_empty() {
                md.insert(key.into(), s(field));
            }
        }
        if let Some(b) = s3["forcePathStyle"].as_bool() {
            md.insert(keys::FORCE_PATH_STYLE.into(), b.to_string());
        }
        md.insert(
            keys::CREDENTIALS_SECRET.into(),
            s3["credentialsSecretRef"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
    }
    md
}

/// The operator's `status.artifact` (`uri`, `sizeBytes`, `checksum`) when it reported a URI: the
/// snapshot's full object location, which the destination (a prefix) alone does not give.
pub fn artifact(snapshot: &Json) -> Option<(String, Option<i64>, Option<String>)> {
    let a = &snapshot["status"]["artifact"];
    let uri = a["uri"].as_str().filter(|u| !u.is_empty())?;
    Some((
        uri.to_owned(),
        a["sizeBytes"].as_i64().filter(|n| *n != 0),
        a["checksum"]
            .as_str()
            .filter(|c| !c.is_empty())
            .map(str::to_owned),
    ))
}

/// The source snapshot stored in `Backup.status.underlyingResources`: the rendered destination
/// (a Secret name, never its values) and the route's parameters.
pub fn snapshot(rendered: &Json, parameters: &BTreeMap<String, String>) -> Json {
    let mut snap = json!({
        "kind": SNAPSHOT_KIND,
        "apiVersion": "backups.cozystack.io/v1alpha1",
        "destination": rendered["destination"].clone(),
    });
    if !parameters.is_empty() {
        snap["parameters"] = json!(parameters);
    }
    snap
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn template() -> Json {
        json!({"destination": {"s3": {
            "bucket": "{{ .Parameters.bucket }}",
            "endpoint": "http://s3.local",
            "key": "{{ .Application.metadata.namespace }}/etcd/",
            "forcePathStyle": true,
            "credentialsSecretRef": {"name": "cozy-backups-creds"},
            "region": ""}}})
    }

    fn rendered() -> Json {
        let params = BTreeMap::from([("bucket".to_owned(), "b1".to_owned())]);
        render_template(
            &template(),
            &json!({"metadata": {"name": "etcd", "namespace": "tenant-a"}}),
            &params,
        )
    }

    #[test]
    fn app_refs_in_upstream_words() {
        assert_eq!(
            validate_app_ref(&api::TypedLocalObjectReference::new("", "Etcd", "etcd")),
            Ok(())
        );
        assert_eq!(
            validate_app_ref(&api::TypedLocalObjectReference::new(
                "apps.cozystack.io",
                "Kafka",
                "k"
            )),
            Err("Etcd strategy supports applicationRef.kind=\"Etcd\", got \"Kafka\"".into())
        );
        assert_eq!(
            validate_app_ref(&api::TypedLocalObjectReference::new("x.io", "Etcd", "e")),
            Err(
                "Etcd strategy supports applicationRef.apiGroup=\"apps.cozystack.io\", got \"x.io\""
                    .into()
            )
        );
    }

    #[test]
    fn destination_shape_and_validation() {
        let r = rendered();
        assert_eq!(
            r,
            json!({"destination": {"s3": {"bucket": "b1", "endpoint": "http://s3.local",
                "key": "tenant-a/etcd/", "forcePathStyle": true,
                "credentialsSecretRef": {"name": "cozy-backups-creds"}}}})
        );
        assert_eq!(validate_destination(&r), Ok(()));
        let mut no_bucket = r.clone();
        no_bucket["destination"]["s3"]["bucket"] = json!("");
        assert_eq!(
            validate_destination(&no_bucket),
            Err("destination.s3.bucket is empty after templating".into())
        );
        let mut no_creds = r.clone();
        no_creds["destination"]["s3"]["credentialsSecretRef"]["name"] = json!("");
        assert_eq!(
            validate_destination(&no_creds),
            Err("destination.s3.credentialsSecretRef.name is empty after templating".into())
        );
        let none = render_template(&json!({"destination": {}}), &json!({}), &BTreeMap::new());
        assert_eq!(none, json!({"destination": {"s3": null}}));
        assert_eq!(
            validate_destination(&none),
            Err(
                "destination.s3 is required (PVC destinations are not supported by this strategy)"
                    .into()
            )
        );
    }

    #[test]
    fn the_snapshot_body() {
        let body = snapshot_body("tenant-a", "nightly", &rendered());
        assert_eq!(
            body,
            json!({
                "apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdSnapshot",
                "metadata": {"generateName": "nightly-", "namespace": "tenant-a", "labels": {
                    "backups.cozystack.io/owned-by.BackupJobName": "nightly",
                    "backups.cozystack.io/owned-by.BackupJobNamespace": "tenant-a"}},
                "spec": {"clusterRef": {"name": "etcd"}, "destination": rendered()["destination"]}
            })
        );
    }

    #[test]
    fn cluster_availability() {
        let c = |conds: Json| json!({"status": {"conditions": conds}});
        assert!(cluster_available(&c(
            json!([{"type": "Available", "status": "True", "reason": "QuorumHealthy"}])
        )));
        let lost = c(
            json!([{"type": "Available", "status": "False", "reason": "QuorumLost", "message": "2 of 3 members down"}]),
        );
        assert!(!cluster_available(&lost));
        assert_eq!(
            availability_summary(&lost),
            "Available=False/2 of 3 members down"
        );
        assert_eq!(
            availability_summary(&c(
                json!([{"type": "Available", "status": "False", "reason": "Bootstrapping"}])
            )),
            "Available=False/Bootstrapping"
        );
        assert_eq!(
            availability_summary(&json!({})),
            "no Available condition emitted yet"
        );
    }

    #[test]
    fn failure_messages_prefer_failure_shaped_conditions() {
        let s = |conds: Json| json!({"status": {"phase": "Failed", "conditions": conds}});
        // The real operator: one Ready condition with reason JobFailed.
        assert_eq!(
            failure_message(&s(json!([
                {"type": "Ready", "status": "False", "reason": "JobFailed", "message": "snapshot job failed",
                 "lastTransitionTime": "2026-01-01T00:00:02Z"}]))),
            "snapshot job failed"
        );
        // A later housekeeping condition does not shadow the failure.
        assert_eq!(
            failure_message(&s(json!([
                {"type": "Failed", "status": "True", "reason": "Upload", "message": "403 Forbidden",
                 "lastTransitionTime": "2026-01-01T00:00:02Z"},
                {"type": "Uploading", "status": "False", "reason": "Done", "message": "housekeeping",
                 "lastTransitionTime": "2026-01-01T00:00:09Z"}]))),
            "403 Forbidden"
        );
        assert_eq!(
            failure_message(&s(json!([
                {"type": "Ready", "status": "False", "reason": "FailedUpload", "message": "a",
                 "lastTransitionTime": "2026-01-01T00:00:01Z"},
                {"type": "Ready2", "status": "False", "reason": "FailedAgain", "message": "b",
                 "lastTransitionTime": "2026-01-01T00:00:03Z"}]))),
            "b"
        );
        assert_eq!(
            failure_message(&s(json!([
                {"type": "Available", "status": "False", "reason": "Backoff",
                 "message": "etcdctl exited 1: tls handshake timeout", "lastTransitionTime": "2026-01-01T10:00:00Z"},
                {"type": "Started", "status": "False", "reason": "Idle", "message": "idle",
                 "lastTransitionTime": "2026-01-01T10:05:00Z"}]))),
            "etcdctl exited 1: tls handshake timeout"
        );
        assert_eq!(
            failure_message(&s(json!([
                {"type": "Started", "status": "True", "reason": "Started", "message": "snapshot in progress",
                 "lastTransitionTime": "2026-01-01T10:00:00Z"},
                {"type": "Uploaded", "status": "True", "reason": "Done", "message": "uploaded 20512 bytes",
                 "lastTransitionTime": "2026-01-01T10:05:00Z"}]))),
            "uploaded 20512 bytes",
            "no failure-shaped condition: the latest"
        );
        assert_eq!(failure_message(&json!({"status": {}})), "");
    }

    #[test]
    fn catalog_fields() {
        let r = rendered();
        assert_eq!(
            driver_metadata(&r, "nightly-x1"),
            BTreeMap::from([
                ("etcd.aenix.io/backup-name".into(), "nightly-x1".into()),
                ("etcd.aenix.io/bucket".into(), "b1".into()),
                ("etcd.aenix.io/endpoint".into(), "http://s3.local".into()),
                ("etcd.aenix.io/key".into(), "tenant-a/etcd/".into()),
                ("etcd.aenix.io/force-path-style".into(), "true".into()),
                (
                    "etcd.aenix.io/credentials-secret-name".into(),
                    "cozy-backups-creds".into()
                ),
            ])
        );
        let done = json!({"status": {"phase": "Complete", "artifact": {
            "uri": "s3://b1/tenant-a/etcd/nightly-x1.db", "sizeBytes": 20480, "checksum": "sha256:ab"}}});
        assert_eq!(
            artifact(&done),
            Some((
                "s3://b1/tenant-a/etcd/nightly-x1.db".into(),
                Some(20480),
                Some("sha256:ab".into())
            ))
        );
        assert_eq!(artifact(&json!({"status": {"phase": "Complete"}})), None);
        assert_eq!(
            snapshot(&r, &BTreeMap::new()),
            json!({"kind": "EtcdBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                   "destination": r["destination"]})
        );
    }
}
