//! MongoDB through the Percona operator (`PerconaServerMongoDBBackup`, pbm): the pure parts of the
//! backup path, shared with the restore path (names, rendering, the cluster's backup precondition,
//! the backup body, states, the catalog fields and the snapshot).
//!
//! ```text
//!  BackupJob ─► MongoDB app <ns>/<app> ─► PerconaServerMongoDB mongodb-<app>
//!     precondition: spec.backup.enabled and the storage (default s3-storage) declared
//!     PerconaServerMongoDBBackup <job>-xxxxx {clusterName, storageName, type (logical), compression}
//!  state ready ─► catalog Backup <job> (driverMetadata psmdb.percona.com/*, artifact = destination,
//!                 underlyingResources MongoDBBackupSnapshot)
//!        error / rejected ─► Failed with the operator's error
//! ```

use std::collections::BTreeMap;

use api::contract::labels;
use serde_json::{Value as Json, json};

/// The MongoDB application kind.
pub const APP_KIND: &str = "MongoDB";
/// Prefix of the Percona cluster's name (`mongodb-<app>`).
pub const CLUSTER_PREFIX: &str = "mongodb-";
/// The storage used when the strategy names none.
pub const DEFAULT_STORAGE: &str = "s3-storage";
/// The backup type used when the strategy names none.
pub const DEFAULT_TYPE: &str = "logical";
/// A finished backup.
pub const STATE_READY: &str = "ready";
/// A failed backup.
pub const STATE_ERROR: &str = "error";
/// A backup pbm refused.
pub const STATE_REJECTED: &str = "rejected";
/// Upstream's cap on every wait of this driver.
pub const DEADLINE: std::time::Duration = std::time::Duration::from_secs(30 * 60);
/// The snapshot kind in `status.underlyingResources`.
pub const SNAPSHOT_KIND: &str = "MongoDBBackupSnapshot";
/// The `Ready=True` message of a succeeded job.
pub const READY_MESSAGE: &str = "psmdb.percona.com PerconaServerMongoDBBackup completed";
/// Message prefix of a failed create.
pub const ENSURE_FAILED: &str = "failed to ensure psmdb.percona.com/PerconaServerMongoDBBackup";

/// Driver metadata keys on the catalog Backup.
pub mod keys {
    /// The PerconaServerMongoDBBackup's name.
    pub const BACKUP_NAME: &str = "psmdb.percona.com/backup-name";
    /// Its namespace.
    pub const BACKUP_NAMESPACE: &str = "psmdb.percona.com/backup-namespace";
    /// The pbm destination the operator reported.
    pub const DESTINATION: &str = "psmdb.percona.com/destination";
}

/// The Percona cluster of an application.
pub fn cluster_name(app: &str) -> String {
    format!("{CLUSTER_PREFIX}{app}")
}

/// Upstream's gate on the application reference (raw, not normalised).
pub fn validate_app_ref(r: &api::TypedLocalObjectReference) -> Result<(), String> {
    crate::app_ref::validate("MongoDB", APP_KIND, r)
}

/// Renders the strategy template against the application (its metadata; upstream's typed view
/// has no spec fields) and the route's parameters.
pub fn render_template(template: &Json, app: &Json, parameters: &BTreeMap<String, String>) -> Json {
    crate::template::render_for_app(
        template,
        &crate::foundationdb::metadata_only(app),
        parameters,
    )
}

fn nonempty<'a>(v: &'a Json, default: &'a str) -> &'a str {
    v.as_str().filter(|s| !s.is_empty()).unwrap_or(default)
}

/// The storage the backup goes to.
pub fn storage_name(rendered: &Json) -> String {
    nonempty(&rendered["storageName"], DEFAULT_STORAGE).to_owned()
}

/// The backup type.
pub fn backup_type(rendered: &Json) -> String {
    nonempty(&rendered["type"], DEFAULT_TYPE).to_owned()
}

/// Why the cluster cannot take on-demand backups into `storage`, if it cannot.
pub fn precondition(cluster: &Json, storage: &str) -> Option<String> {
    let backup = &cluster["spec"]["backup"];
    if backup["enabled"].as_bool() != Some(true) {
        return Some(
            "spec.backup.enabled is false; on-demand backups need the percona-backup-mongodb agents running"
                .into(),
        );
    }
    if backup["storages"].get(storage).is_none() {
        return Some(format!(
            "spec.backup.storages does not declare storage {storage:?}"
        ));
    }
    None
}

/// The per-job PerconaServerMongoDBBackup: `generateName <job>-`, the owned-by labels, no
/// ownerReferences.
pub fn backup_body(namespace: &str, job: &str, cluster: &str, rendered: &Json) -> Json {
    let mut spec = json!({
        "clusterName": cluster,
        "storageName": storage_name(rendered),
        "type": backup_type(rendered),
    });
    if let Some(c) = rendered["compressionType"]
        .as_str()
        .filter(|c| !c.is_empty())
    {
        spec["compressionType"] = json!(c);
    }
    if rendered["compressionLevel"].is_number() {
        spec["compressionLevel"] = rendered["compressionLevel"].clone();
    }
    json!({
        "apiVersion": "psmdb.percona.com/v1",
        "kind": "PerconaServerMongoDBBackup",
        "metadata": {
            "generateName": format!("{job}-"),
            "namespace": namespace,
            "labels": {
                labels::OWNED_BY_JOB_NAME: job,
                labels::OWNED_BY_JOB_NAMESPACE: namespace,
            },
        },
        "spec": spec,
    })
}

/// `status.state` of a backup (`""` before the operator saw it).
pub fn state(backup: &Json) -> &str {
    backup["status"]["state"].as_str().unwrap_or_default()
}

/// The failure message of a backup in state `error` or `rejected`.
pub fn failure_message(backup: &Json) -> String {
    match backup["status"]["error"].as_str().filter(|e| !e.is_empty()) {
        Some(e) => e.to_owned(),
        None => format!(
            "psmdb.percona.com PerconaServerMongoDBBackup reported state={}",
            state(backup)
        ),
    }
}

fn destination(backup: &Json) -> Option<&str> {
    backup["status"]["destination"]
        .as_str()
        .filter(|d| !d.is_empty())
}

/// The catalog Backup's `driverMetadata` of a ready backup.
pub fn driver_metadata(backup: &Json) -> BTreeMap<String, String> {
    let s = |v: &Json| v.as_str().unwrap_or_default().to_owned();
    let mut md = BTreeMap::from([
        (keys::BACKUP_NAME.to_owned(), s(&backup["metadata"]["name"])),
        (
            keys::BACKUP_NAMESPACE.to_owned(),
            s(&backup["metadata"]["namespace"]),
        ),
    ]);
    if let Some(d) = destination(backup) {
        md.insert(keys::DESTINATION.to_owned(), d.to_owned());
    }
    md
}

/// The artifact URI (the destination, when reported).
pub fn artifact_uri(backup: &Json) -> Option<String> {
    destination(backup).map(str::to_owned)
}

/// `spec.takenAt`: the backup's completion time (`None`: now).
pub fn taken_at(backup: &Json) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
    crate::catalog::time(&backup["status"]["completed"])
}

/// The S3 coordinates the operator reported, reduced to the fields upstream records (the
/// credentials Secret's *name* is one of them; no credential value is).
fn s3_fields(s3: &Json) -> Option<Json> {
    let s3 = s3.as_object()?;
    let mut out = serde_json::Map::new();
    for k in [
        "bucket",
        "credentialsSecret",
        "endpointUrl",
        "prefix",
        "region",
        "storageClass",
    ] {
        if let Some(v) = s3.get(k).and_then(Json::as_str).filter(|v| !v.is_empty()) {
            out.insert(k.into(), json!(v));
        }
    }
    if let Some(v) = s3.get("forcePathStyle").filter(|v| v.is_boolean()) {
        out.insert("forcePathStyle".into(), v.clone());
    }
    if s3.get("insecureSkipTLSVerify").and_then(Json::as_bool) == Some(true) {
        out.insert("insecureSkipTLSVerify".into(), json!(true));
    }
    Some(Json::Object(out))
}

/// The snapshot stored in `Backup.status.underlyingResources`.
pub fn snapshot(
    backup: &Json,
    rendered: &Json,
    storage: &str,
    parameters: &BTreeMap<String, String>,
) -> Json {
    let mut snap = json!({
        "kind": SNAPSHOT_KIND,
        "apiVersion": "backups.cozystack.io/v1alpha1",
    });
    if let Some(d) = destination(backup) {
        snap["destination"] = json!(d);
    }
    snap["type"] = json!(backup_type(rendered));
    if !storage.is_empty() {
        snap["storageName"] = json!(storage);
    }
    if let Some(s3) = s3_fields(&backup["status"]["s3"]) {
        snap["s3"] = s3;
    }
    if !parameters.is_empty() {
        snap["parameters"] = json!(parameters);
    }
    snap
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn app_ref_gate_and_names() {
        let ok = api::TypedLocalObjectReference::new("apps.cozystack.io", "MongoDB", "m");
        assert_eq!(validate_app_ref(&ok), Ok(()));
        let wrong = api::TypedLocalObjectReference::new("apps.cozystack.io", "Postgres", "m");
        assert_eq!(
            validate_app_ref(&wrong).unwrap_err(),
            "MongoDB strategy supports applicationRef.kind=\"MongoDB\", got \"Postgres\""
        );
        let foreign = api::TypedLocalObjectReference::new("x.example", "MongoDB", "m");
        assert_eq!(
            validate_app_ref(&foreign).unwrap_err(),
            "MongoDB strategy supports applicationRef.apiGroup=\"apps.cozystack.io\", got \"x.example\""
        );
        assert_eq!(cluster_name("m"), "mongodb-m");
    }

    #[test]
    fn defaults() {
        assert_eq!(storage_name(&json!({})), "s3-storage");
        assert_eq!(storage_name(&json!({"storageName": "other"})), "other");
        assert_eq!(backup_type(&json!({"type": ""})), "logical");
        assert_eq!(backup_type(&json!({"type": "physical"})), "physical");
    }

    #[test]
    fn the_precondition() {
        let cluster = |backup: Json| json!({"spec": {"backup": backup}});
        assert_eq!(
            precondition(&cluster(json!({"enabled": false})), "s3-storage").unwrap(),
            "spec.backup.enabled is false; on-demand backups need the percona-backup-mongodb agents running"
        );
        assert_eq!(
            precondition(&json!({"spec": {}}), "s3-storage").unwrap(),
            "spec.backup.enabled is false; on-demand backups need the percona-backup-mongodb agents running"
        );
        assert_eq!(
            precondition(
                &cluster(json!({"enabled": true, "storages": {"other": {}}})),
                "s3-storage"
            )
            .unwrap(),
            "spec.backup.storages does not declare storage \"s3-storage\""
        );
        assert_eq!(
            precondition(
                &cluster(json!({"enabled": true, "storages": {"s3-storage": {"type": "s3"}}})),
                "s3-storage"
            ),
            None
        );
    }

    #[test]
    fn the_backup_body() {
        let rendered = json!({"storageName": "s3-storage", "type": "logical", "compressionType": "gzip",
                              "compressionLevel": 6});
        assert_eq!(
            backup_body("tenant", "bj", "mongodb-m", &rendered),
            json!({"apiVersion": "psmdb.percona.com/v1", "kind": "PerconaServerMongoDBBackup",
                   "metadata": {"generateName": "bj-", "namespace": "tenant", "labels": {
                       "backups.cozystack.io/owned-by.BackupJobName": "bj",
                       "backups.cozystack.io/owned-by.BackupJobNamespace": "tenant"}},
                   "spec": {"clusterName": "mongodb-m", "storageName": "s3-storage", "type": "logical",
                            "compressionType": "gzip", "compressionLevel": 6}})
        );
        assert_eq!(
            backup_body("t", "bj", "mongodb-m", &json!({}))["spec"],
            json!({"clusterName": "mongodb-m", "storageName": "s3-storage", "type": "logical"})
        );
    }

    #[test]
    fn failure_messages() {
        assert_eq!(
            failure_message(&json!({"status": {"state": "error", "error": "pbm: no space left"}})),
            "pbm: no space left"
        );
        assert_eq!(
            failure_message(&json!({"status": {"state": "rejected"}})),
            "psmdb.percona.com PerconaServerMongoDBBackup reported state=rejected"
        );
    }

    #[test]
    fn catalog_fields_and_snapshot() {
        let ready = json!({
            "metadata": {"name": "bj-abcde", "namespace": "tenant"},
            "status": {"state": "ready", "destination": "s3://bk/tenant/m/2026-01-01T00:00:00Z",
                       "completed": "2026-01-01T00:01:00Z", "type": "logical", "storageName": "s3-storage",
                       "s3": {"bucket": "bk", "prefix": "tenant/m", "region": "us-east-1",
                              "endpointUrl": "http://s3", "credentialsSecret": "creds",
                              "forcePathStyle": true, "maxUploadParts": 10000}}});
        assert_eq!(
            driver_metadata(&ready),
            BTreeMap::from([
                (keys::BACKUP_NAME.to_owned(), "bj-abcde".to_owned()),
                (keys::BACKUP_NAMESPACE.to_owned(), "tenant".to_owned()),
                (
                    keys::DESTINATION.to_owned(),
                    "s3://bk/tenant/m/2026-01-01T00:00:00Z".to_owned()
                ),
            ])
        );
        assert_eq!(
            artifact_uri(&ready).as_deref(),
            Some("s3://bk/tenant/m/2026-01-01T00:00:00Z")
        );
        assert_eq!(
            taken_at(&ready).unwrap().0.to_string(),
            "2026-01-01T00:01:00Z"
        );
        assert_eq!(
            snapshot(
                &ready,
                &json!({"type": "logical"}),
                "s3-storage",
                &BTreeMap::from([("p".to_owned(), "v".to_owned())])
            ),
            json!({"kind": "MongoDBBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                   "destination": "s3://bk/tenant/m/2026-01-01T00:00:00Z", "type": "logical",
                   "storageName": "s3-storage",
                   "s3": {"bucket": "bk", "prefix": "tenant/m", "region": "us-east-1",
                          "endpointUrl": "http://s3", "credentialsSecret": "creds", "forcePathStyle": true},
                   "parameters": {"p": "v"}})
        );
        let bare =
            json!({"metadata": {"name": "b", "namespace": "t"}, "status": {"state": "ready"}});
        assert_eq!(driver_metadata(&bare).len(), 2);
        assert_eq!(artifact_uri(&bare), None);
        assert_eq!(taken_at(&bare), None);
        assert_eq!(
            snapshot(&bare, &json!({}), "s3-storage", &BTreeMap::new()),
            json!({"kind": "MongoDBBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                   "type": "logical", "storageName": "s3-storage"})
        );
    }
}
