//! FoundationDB (the FDB operator's `FoundationDBBackup`): the pure parts of the backup path,
//! shared with the restore path (names, template rendering, the one-running-backup rule, readiness,
//! the catalog fields and the snapshot).
//!
//! ```text
//!  BackupJob ─► FoundationDB app <ns>/<app> ─► FoundationDBCluster foundationdb-<app>
//!     gates: cluster exists, health.available, spec.version known, no chart-rendered backup
//!            Running against it, every Secret the agent pod template needs exists
//!     other driver-made FoundationDBBackups of the cluster ─► spec.backupState=Stopped
//!     FoundationDBBackup <job>-xxxxx (owned-by labels + backups.cozystack.io/foundationdb-cluster)
//!  restorable (running, snapshotTime > 0, spec reconciled) ─► catalog Backup <job>
//!     (driverMetadata apps.foundationdb.org/*, artifact = the blob store URL,
//!      underlyingResources FoundationDBBackupSnapshot)
//! ```
//!
//! The FoundationDBBackup drives a long-running `backup_agent` Deployment that keeps streaming to
//! the blob store after the job succeeded; it is stopped by the next job of the same cluster (or by
//! the job's own deadline), as upstream does.

use std::collections::BTreeMap;

use api::contract::labels;
use serde_json::{Value as Json, json};

/// The FoundationDB application kind.
pub const APP_KIND: &str = "FoundationDB";
/// Prefix of the operator-side cluster name (`foundationdb-<app>`).
pub const CLUSTER_PREFIX: &str = "foundationdb-";
/// `spec.backupState` of a streaming backup.
pub const STATE_RUNNING: &str = "Running";
/// `spec.backupState` of a stopped backup.
pub const STATE_STOPPED: &str = "Stopped";
/// Upstream's cap on reaching the first restorable snapshot.
pub const BACKUP_DEADLINE: std::time::Duration = std::time::Duration::from_secs(45 * 60);
/// The snapshot kind in `status.underlyingResources`.
pub const SNAPSHOT_KIND: &str = "FoundationDBBackupSnapshot";
/// The `Ready=True` message of a succeeded job.
pub const READY_MESSAGE: &str =
    "apps.foundationdb.org/FoundationDBBackup reached a restorable snapshot";
/// Message prefix of a failed create (or a failed stop of another backup before it).
pub const ENSURE_FAILED: &str = "failed to ensure apps.foundationdb.org/FoundationDBBackup";

/// Driver metadata keys on the catalog Backup.
pub mod keys {
    /// The FoundationDBBackup's name.
    pub const BACKUP_NAME: &str = "apps.foundationdb.org/backup-name";
    /// The FoundationDBBackup's namespace.
    pub const BACKUP_NAMESPACE: &str = "apps.foundationdb.org/backup-namespace";
    /// The blob store account (`<key>@<host>` or a bare host).
    pub const ACCOUNT_NAME: &str = "apps.foundationdb.org/account-name";
    /// The bucket.
    pub const BUCKET: &str = "apps.foundationdb.org/bucket";
    /// The backup's directory name in the blob store.
    pub const BLOB_BACKUP_NAME: &str = "apps.foundationdb.org/blob-backup-name";
    /// The blob store URL (operator-reported, else `blobstore://<bucket>/<backupName>`).
    pub const STORAGE_URI: &str = "apps.foundationdb.org/storage-uri";
}

/// The operator-side cluster of an application.
pub fn cluster_name(app: &str) -> String {
    format!("{CLUSTER_PREFIX}{app}")
}

/// Upstream's gate on the application reference (raw, not normalised).
pub fn validate_app_ref(r: &api::TypedLocalObjectReference) -> Result<(), String> {
    crate::app_ref::validate("FoundationDB", APP_KIND, r)
}

/// The application as upstream's typed client sees it: type and object metadata and an empty
/// spec (its Go type declares no spec fields), so `.Application.spec.*` renders `<no value>`.
pub fn metadata_only(app: &Json) -> Json {
    let mut out = json!({"metadata": app["metadata"].clone(), "spec": {}});
    for k in ["apiVersion", "kind"] {
        if let Some(v) = app.get(k) {
            out[k] = v.clone();
        }
    }
    out
}

/// Renders the strategy template against the application and the route's parameters.
pub fn render_template(template: &Json, app: &Json, parameters: &BTreeMap<String, String>) -> Json {
    crate::template::render_for_app(template, &metadata_only(app), parameters)
}

fn is_true(v: &Json) -> bool {
    v.as_bool() == Some(true)
}

/// The Secrets the rendered agent pod template needs (volumes, `envFrom`, `env[].valueFrom`; init
/// containers included), without optional references, de-duplicated in order of appearance.
pub fn required_secrets(rendered: &Json) -> Vec<String> {
    let spec = &rendered["backupDeploymentPodTemplateSpec"]["spec"];
    let mut out: Vec<String> = Vec::new();
    let mut add = |name: &Json| {
        if let Some(n) = name.as_str().filter(|n| !n.is_empty())
            && !out.iter().any(|o| o == n)
        {
            out.push(n.to_owned());
        }
    };
    for v in spec["volumes"].as_array().into_iter().flatten() {
        let secret = &v["secret"];
        if secret.is_object() && !is_true(&secret["optional"]) {
            add(&secret["secretName"]);
        }
    }
    for list in ["initContainers", "containers"] {
        for c in spec[list].as_array().into_iter().flatten() {
            for ef in c["envFrom"].as_array().into_iter().flatten() {
                let r = &ef["secretRef"];
                if r.is_object() && !is_true(&r["optional"]) {
                    add(&r["name"]);
                }
            }
            for e in c["env"].as_array().into_iter().flatten() {
                let r = &e["valueFrom"]["secretKeyRef"];
                if r.is_object() && !is_true(&r["optional"]) {
                    add(&r["name"]);
                }
            }
        }
    }
    out
}

fn state(backup: &Json) -> &str {
    backup["spec"]["backupState"].as_str().unwrap_or_default()
}

fn label<'a>(backup: &'a Json, key: &str) -> Option<&'a str> {
    backup["metadata"]["labels"][key].as_str()
}

fn name(backup: &Json) -> &str {
    backup["metadata"]["name"].as_str().unwrap_or_default()
}

/// True when `backup` carries the owned-by labels of job `namespace/job`.
pub fn owned_by(backup: &Json, namespace: &str, job: &str) -> bool {
    label(backup, labels::OWNED_BY_JOB_NAME) == Some(job)
        && label(backup, labels::OWNED_BY_JOB_NAMESPACE) == Some(namespace)
}

/// A chart-rendered FoundationDBBackup (no `backups.cozystack.io/foundationdb-cluster` label)
/// `Running` against `cluster`, which this driver must not silently stop: its name.
pub fn conflicting_in_chart<'a>(backups: &'a [Json], cluster: &str) -> Option<&'a str> {
    backups
        .iter()
        .filter(|b| b["spec"]["clusterName"].as_str() == Some(cluster))
        .filter(|b| state(b) == STATE_RUNNING)
        .find(|b| label(b, labels::FOUNDATIONDB_CLUSTER).is_none())
        .map(name)
}

/// The driver-made FoundationDBBackups of `cluster` (by label) not yet `Stopped` and not owned by
/// job `namespace/job`: the operator permits one running backup per cluster.
pub fn others_to_stop<'a>(
    backups: &'a [Json],
    cluster: &str,
    namespace: &str,
    job: &str,
) -> Vec<&'a str> {
    backups
        .iter()
        .filter(|b| label(b, labels::FOUNDATIONDB_CLUSTER) == Some(cluster))
        .filter(|b| state(b) != STATE_STOPPED)
        .filter(|b| !owned_by(b, namespace, job))
        .map(name)
        .collect()
}

/// The merge patch that stops a FoundationDBBackup.
pub fn stop_patch() -> Json {
    json!({"spec": {"backupState": STATE_STOPPED}})
}

/// True when a FoundationDBBackup is already stopped.
pub fn is_stopped(backup: &Json) -> bool {
    state(backup) == STATE_STOPPED
}

/// The per-job FoundationDBBackup: `generateName <job>-`, the owned-by and cluster labels, no
/// ownerReferences (a re-created job of the same name re-adopts it by label), and the rendered
/// template's settings; the blob backup name defaults to the job's name.
pub fn backup_body(
    namespace: &str,
    job: &str,
    cluster: &str,
    version: &str,
    rendered: &Json,
) -> Json {
    let blob = &rendered["blobStoreConfiguration"];
    let s = |v: &Json| v.as_str().unwrap_or_default().to_owned();
    let mut store = json!({"accountName": s(&blob["accountName"])});
    let backup_name = match s(&blob["backupName"]) {
        n if n.is_empty() => job.to_owned(),
        n => n,
    };
    store["backupName"] = json!(backup_name);
    if let Some(b) = blob["bucket"].as_str().filter(|b| !b.is_empty()) {
        store["bucket"] = json!(b);
    }
    if let Some(p) = blob["urlParameters"].as_array().filter(|p| !p.is_empty()) {
        store["urlParameters"] = json!(p);
    }
    let mut spec = json!({
        "clusterName": cluster,
        "version": version,
        "backupState": STATE_RUNNING,
        "blobStoreConfiguration": store,
    });
    for k in ["agentCount", "snapshotPeriodSeconds"] {
        if rendered[k].is_number() {
            spec[k] = rendered[k].clone();
        }
    }
    if let Some(p) = rendered["customParameters"]
        .as_array()
        .filter(|p| !p.is_empty())
    {
        spec["customParameters"] = json!(p);
    }
    if let Some(k) = rendered["encryptionKeyPath"]
        .as_str()
        .filter(|k| !k.is_empty())
    {
        spec["encryptionKeyPath"] = json!(k);
    }
    let pod = &rendered["backupDeploymentPodTemplateSpec"];
    if pod.is_object() {
        spec["backupDeploymentSpec"] = json!({"podTemplateSpec": pod});
    }
    json!({
        "apiVersion": "apps.foundationdb.org/v1beta2",
        "kind": "FoundationDBBackup",
        "metadata": {
            "generateName": format!("{job}-"),
            "namespace": namespace,
            "labels": {
                labels::OWNED_BY_JOB_NAME: job,
                labels::OWNED_BY_JOB_NAMESPACE: namespace,
                labels::FOUNDATIONDB_CLUSTER: cluster,
            },
        },
        "spec": spec,
    })
}

fn generation(backup: &Json) -> i64 {
    backup["metadata"]["generation"].as_i64().unwrap_or(0)
}

/// `Some(reconciled)` when the operator reports generations and has not reconciled the spec.
fn behind(backup: &Json) -> Option<i64> {
    let g = &backup["status"]["generations"];
    if !g.is_object() {
        return None;
    }
    let reconciled = g["reconciled"].as_i64().unwrap_or(0);
    (reconciled < generation(backup)).then_some(reconciled)
}

fn snapshot_time(details: &Json) -> f64 {
    details["snapshotTime"].as_f64().unwrap_or(0.0)
}

/// Restorable: the agents run, at least one full snapshot was written (`snapshotTime > 0`), and
/// the operator reconciled the current spec (when it reports generations).
pub fn backup_ready(backup: &Json) -> bool {
    let details = &backup["status"]["backupDetails"];
    details.is_object()
        && is_true(&details["running"])
        && snapshot_time(details) > 0.0
        && behind(backup).is_none()
}

/// Why a FoundationDBBackup is not restorable yet (upstream's wording).
pub fn not_ready_detail(backup: Option<&Json>) -> String {
    let Some(backup) = backup else {
        return "no FoundationDBBackup observed".into();
    };
    let details = &backup["status"]["backupDetails"];
    if !details.is_object() {
        return "no backupDetails observed".into();
    }
    if let Some(reconciled) = behind(backup) {
        return format!(
            "operator has not reconciled the spec yet (reconciled={reconciled}, generation={})",
            generation(backup)
        );
    }
    if !is_true(&details["running"]) {
        return "backup_agent has not reported running=true".into();
    }
    if snapshot_time(details) <= 0.0 {
        return "waiting for first full snapshot (snapshotTime is 0)".into();
    }
    "waiting".into()
}

/// The artifact URI: the operator-reported URL, else `blobstore://<bucket>/<backupName>` when both
/// are set (never the account name in the bucket's place).
pub fn storage_uri(backup: &Json) -> Option<String> {
    if let Some(url) = backup["status"]["backupDetails"]["url"]
        .as_str()
        .filter(|u| !u.is_empty())
    {
        return Some(url.to_owned());
    }
    let blob = &backup["spec"]["blobStoreConfiguration"];
    match (blob["bucket"].as_str(), blob["backupName"].as_str()) {
        (Some(b), Some(n)) if !b.is_empty() && !n.is_empty() => {
            Some(format!("blobstore://{b}/{n}"))
        }
        _ => None,
    }
}

/// The catalog Backup's `driverMetadata` of a restorable FoundationDBBackup.
pub fn driver_metadata(backup: &Json) -> BTreeMap<String, String> {
    let blob = &backup["spec"]["blobStoreConfiguration"];
    let s = |v: &Json| v.as_str().unwrap_or_default().to_owned();
    let mut md = BTreeMap::from([
        (keys::BACKUP_NAME.to_owned(), s(&backup["metadata"]["name"])),
        (
            keys::BACKUP_NAMESPACE.to_owned(),
            s(&backup["metadata"]["namespace"]),
        ),
        (keys::ACCOUNT_NAME.to_owned(), s(&blob["accountName"])),
        (keys::BUCKET.to_owned(), s(&blob["bucket"])),
        (keys::BLOB_BACKUP_NAME.to_owned(), s(&blob["backupName"])),
    ]);
    if let Some(uri) = storage_uri(backup) {
        md.insert(keys::STORAGE_URI.to_owned(), uri);
    }
    md
}

/// The snapshot stored in `Backup.status.underlyingResources`: the rendered blob store settings
/// (backup name filled from the live FoundationDBBackup when the template left it empty), the
/// agent parameters and the route's parameters, so a restore re-renders the same coordinates.
pub fn snapshot(rendered: &Json, parameters: &BTreeMap<String, String>, backup: &Json) -> Json {
    let blob = &rendered["blobStoreConfiguration"];
    let mut storage = json!({"accountName": blob["accountName"].as_str().unwrap_or_default()});
    if let Some(b) = blob["bucket"].as_str().filter(|b| !b.is_empty()) {
        storage["bucket"] = json!(b);
    }
    let backup_name = blob["backupName"]
        .as_str()
        .filter(|n| !n.is_empty())
        .or_else(|| backup["spec"]["blobStoreConfiguration"]["backupName"].as_str())
        .filter(|n| !n.is_empty());
    if let Some(n) = backup_name {
        storage["backupName"] = json!(n);
    }
    if let Some(p) = blob["urlParameters"].as_array().filter(|p| !p.is_empty()) {
        storage["urlParameters"] = json!(p);
    }
    let mut snap = json!({
        "kind": SNAPSHOT_KIND,
        "apiVersion": "backups.cozystack.io/v1alpha1",
        "storage": storage,
    });
    if let Some(p) = rendered["customParameters"]
        .as_array()
        .filter(|p| !p.is_empty())
    {
        snap["customParameters"] = json!(p);
    }
    if let Some(k) = rendered["encryptionKeyPath"]
        .as_str()
        .filter(|k| !k.is_empty())
    {
        snap["encryptionKeyPath"] = json!(k);
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

    fn app() -> Json {
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "FoundationDB",
               "metadata": {"name": "fdb-src", "namespace": "tenant"},
               "spec": {"replicas": 3, "backup": {"enabled": false}},
               "status": {"conditions": []}})
    }

    #[test]
    fn app_ref_gate() {
        let ok = api::TypedLocalObjectReference::new("apps.cozystack.io", "FoundationDB", "a");
        assert_eq!(validate_app_ref(&ok), Ok(()));
        let mut no_group = ok.clone();
        no_group.api_group = None;
        assert_eq!(validate_app_ref(&no_group), Ok(()));
        let wrong_kind = api::TypedLocalObjectReference::new("apps.cozystack.io", "Postgres", "a");
        assert_eq!(
            validate_app_ref(&wrong_kind).unwrap_err(),
            "FoundationDB strategy supports applicationRef.kind=\"FoundationDB\", got \"Postgres\""
        );
        let wrong_group =
            api::TypedLocalObjectReference::new("other.example.com", "FoundationDB", "a");
        assert_eq!(
            validate_app_ref(&wrong_group).unwrap_err(),
            "FoundationDB strategy supports applicationRef.apiGroup=\"apps.cozystack.io\", got \"other.example.com\""
        );
        assert_eq!(cluster_name("fdb-src"), "foundationdb-fdb-src");
    }

    #[test]
    fn rendering_sees_metadata_but_not_the_spec() {
        let template = json!({
            "blobStoreConfiguration": {
                "accountName": "key@s3.example:9000",
                "bucket": "{{ .Parameters.bucket }}",
                "backupName": "{{ .Application.metadata.name }}-fdb",
                "urlParameters": ["region={{ .Parameters.region }}"],
            },
            "customParameters": ["--blob_credentials=/var/{{ .Application.metadata.name }}/creds",
                                 "replicas={{ .Application.spec.replicas }}"],
            "snapshotPeriodSeconds": 3600,
        });
        let params = BTreeMap::from([
            ("bucket".to_owned(), "shared-bucket".to_owned()),
            ("region".to_owned(), "us-east-1".to_owned()),
        ]);
        let got = render_template(&template, &app(), &params);
        assert_eq!(
            got,
            json!({
                "blobStoreConfiguration": {
                    "accountName": "key@s3.example:9000",
                    "bucket": "shared-bucket",
                    "backupName": "fdb-src-fdb",
                    "urlParameters": ["region=us-east-1"],
                },
                "customParameters": ["--blob_credentials=/var/fdb-src/creds",
                                     "replicas=<no value>"],
                "snapshotPeriodSeconds": 3600,
            })
        );
    }

    #[test]
    fn required_secrets_dedupe_and_skip_optional_references() {
        let rendered = json!({"backupDeploymentPodTemplateSpec": {"spec": {
            "initContainers": [{"name": "init", "env": [
                {"name": "A", "valueFrom": {"secretKeyRef": {"name": "init-secret", "key": "k"}}}]}],
            "containers": [{
                "name": "foundationdb",
                "envFrom": [{"secretRef": {"name": "blob-creds"}},
                            {"secretRef": {"name": "opt-env", "optional": true}},
                            {"configMapRef": {"name": "cm"}}],
                "env": [{"name": "B", "valueFrom": {"secretKeyRef": {"name": "opt-key", "key": "k", "optional": true}}},
                        {"name": "C", "value": "plain"}],
            }],
            "volumes": [{"name": "v", "secret": {"secretName": "blob-creds"}},
                        {"name": "w", "secret": {"secretName": "opt-vol", "optional": true}},
                        {"name": "x", "emptyDir": {}}],
        }}});
        assert_eq!(required_secrets(&rendered), ["blob-creds", "init-secret"]);
        assert!(required_secrets(&json!({})).is_empty());
    }

    fn fdb(name: &str, cluster: &str, state: &str, labels: Json) -> Json {
        json!({"metadata": {"name": name, "namespace": "tenant", "labels": labels},
               "spec": {"clusterName": cluster, "backupState": state}})
    }

    #[test]
    fn one_running_backup_per_cluster() {
        let c = "foundationdb-fdb-src";
        let mine = json!({labels::OWNED_BY_JOB_NAME: "bj-1", labels::OWNED_BY_JOB_NAMESPACE: "tenant",
                          labels::FOUNDATIONDB_CLUSTER: c});
        let theirs = json!({labels::OWNED_BY_JOB_NAME: "bj-0", labels::OWNED_BY_JOB_NAMESPACE: "tenant",
                            labels::FOUNDATIONDB_CLUSTER: c});
        let backups = vec![
            fdb("bj-0-aaa", c, "Running", theirs.clone()),
            fdb("bj-0-bbb", c, "Stopped", theirs.clone()),
            fdb("bj-0-ccc", c, "", theirs),
            fdb("bj-1-ddd", c, "Running", mine),
            fdb(
                "other",
                "foundationdb-other",
                "Running",
                json!({labels::FOUNDATIONDB_CLUSTER: "foundationdb-other"}),
            ),
        ];
        assert_eq!(
            others_to_stop(&backups, c, "tenant", "bj-1"),
            ["bj-0-aaa", "bj-0-ccc"]
        );
        assert_eq!(
            conflicting_in_chart(&backups, c),
            None,
            "driver-made ones are not conflicts"
        );
        let mut with_chart = backups.clone();
        with_chart.push(fdb("chart-backup", c, "Stopped", json!({})));
        assert_eq!(
            conflicting_in_chart(&with_chart, c),
            None,
            "a stopped chart backup is fine"
        );
        with_chart.push(fdb("chart-live", c, "Running", json!({})));
        assert_eq!(conflicting_in_chart(&with_chart, c), Some("chart-live"));
        assert_eq!(stop_patch(), json!({"spec": {"backupState": "Stopped"}}));
    }

    #[test]
    fn the_backup_body() {
        let rendered = json!({
            "blobStoreConfiguration": {"accountName": "s3.example:9000", "bucket": "b",
                                       "urlParameters": ["secure_connection=0"]},
            "agentCount": 2,
            "customParameters": ["--knob=1"],
            "backupDeploymentPodTemplateSpec": {"spec": {"containers": [{"name": "foundationdb"}]}},
        });
        assert_eq!(
            backup_body(
                "tenant",
                "bj-1",
                "foundationdb-fdb-src",
                "7.3.63",
                &rendered
            ),
            json!({
                "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
                "metadata": {"generateName": "bj-1-", "namespace": "tenant", "labels": {
                    "backups.cozystack.io/owned-by.BackupJobName": "bj-1",
                    "backups.cozystack.io/owned-by.BackupJobNamespace": "tenant",
                    "backups.cozystack.io/foundationdb-cluster": "foundationdb-fdb-src"}},
                "spec": {
                    "clusterName": "foundationdb-fdb-src", "version": "7.3.63", "backupState": "Running",
                    "blobStoreConfiguration": {"accountName": "s3.example:9000", "bucket": "b",
                                               "backupName": "bj-1", "urlParameters": ["secure_connection=0"]},
                    "agentCount": 2,
                    "customParameters": ["--knob=1"],
                    "backupDeploymentSpec": {"podTemplateSpec": {"spec": {"containers": [{"name": "foundationdb"}]}}},
                },
            })
        );
    }

    fn with_status(generation: i64, status: Json) -> Json {
        json!({"metadata": {"name": "b", "namespace": "tenant", "generation": generation},
               "spec": {"blobStoreConfiguration": {"accountName": "a", "bucket": "bk", "backupName": "bj"}},
               "status": status})
    }

    #[test]
    fn readiness_and_its_explanation() {
        let cases = [
            (
                with_status(1, json!({})),
                false,
                "no backupDetails observed",
            ),
            (
                with_status(
                    2,
                    json!({"backupDetails": {"running": true, "snapshotTime": 5},
                                       "generations": {"reconciled": 1}}),
                ),
                false,
                "operator has not reconciled the spec yet (reconciled=1, generation=2)",
            ),
            (
                with_status(
                    1,
                    json!({"backupDetails": {"running": false}, "generations": {"reconciled": 1}}),
                ),
                false,
                "backup_agent has not reported running=true",
            ),
            (
                with_status(1, json!({"backupDetails": {"running": true}})),
                false,
                "waiting for first full snapshot (snapshotTime is 0)",
            ),
            (
                with_status(
                    1,
                    json!({"backupDetails": {"running": true, "snapshotTime": 43017506},
                                       "generations": {"reconciled": 1}}),
                ),
                true,
                "waiting",
            ),
            (
                with_status(
                    3,
                    json!({"backupDetails": {"running": true, "snapshotTime": 1}}),
                ),
                true,
                "waiting",
            ),
        ];
        for (b, ready, detail) in cases {
            assert_eq!(backup_ready(&b), ready, "{b}");
            assert_eq!(not_ready_detail(Some(&b)), detail, "{b}");
        }
        assert_eq!(not_ready_detail(None), "no FoundationDBBackup observed");
    }

    #[test]
    fn storage_uri_prefers_the_operator_url_and_never_uses_the_account() {
        let reported = with_status(
            1,
            json!({"backupDetails": {"url": "blobstore://a@h:443/bj?bucket=bk"}}),
        );
        assert_eq!(
            storage_uri(&reported).as_deref(),
            Some("blobstore://a@h:443/bj?bucket=bk")
        );
        assert_eq!(
            storage_uri(&with_status(1, json!({}))).as_deref(),
            Some("blobstore://bk/bj")
        );
        let no_bucket =
            json!({"spec": {"blobStoreConfiguration": {"accountName": "a", "backupName": "bj"}}});
        assert_eq!(storage_uri(&no_bucket), None);
        let no_bucket_md = driver_metadata(&json!({"metadata": {"name": "b", "namespace": "t"},
            "spec": {"blobStoreConfiguration": {"accountName": "a", "backupName": "bj"}}}));
        assert_eq!(
            no_bucket_md,
            BTreeMap::from([
                (keys::BACKUP_NAME.to_owned(), "b".to_owned()),
                (keys::BACKUP_NAMESPACE.to_owned(), "t".to_owned()),
                (keys::ACCOUNT_NAME.to_owned(), "a".to_owned()),
                (keys::BUCKET.to_owned(), String::new()),
                (keys::BLOB_BACKUP_NAME.to_owned(), "bj".to_owned()),
            ])
        );
    }

    #[test]
    fn the_snapshot_fills_the_backup_name_from_the_live_backup() {
        let rendered = json!({"blobStoreConfiguration": {"accountName": "a", "bucket": "bk"},
                              "customParameters": ["--x"], "encryptionKeyPath": "/k"});
        let live = json!({"spec": {"blobStoreConfiguration": {"backupName": "bj-1"}}});
        assert_eq!(
            snapshot(
                &rendered,
                &BTreeMap::from([("p".to_owned(), "v".to_owned())]),
                &live
            ),
            json!({"kind": "FoundationDBBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                   "storage": {"accountName": "a", "bucket": "bk", "backupName": "bj-1"},
                   "customParameters": ["--x"], "encryptionKeyPath": "/k", "parameters": {"p": "v"}})
        );
    }
}
