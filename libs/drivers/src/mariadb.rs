//! mariadb-operator logical backups (MariaDB applications): the pure parts of the backup path,
//! shared with the restore path (names, template rendering, the operator Backup body, how its
//! `Complete` condition reads, the catalog fields).
//!
//! ```text
//!  BackupJob ─► MariaDB app <ns>/<app> ─► operator MariaDB mariadb-<app> (must exist)
//!     k8s.mariadb.com Backup <job>-xxxxx {mariaDbRef, storage (exactly one of s3 / PVC / volume),
//!                                         databases, compression, maxRetention, logLevel}
//!     labelled owned-by, no ownerReferences
//!  Complete=True/JobComplete ─► catalog Backup <job> (driverMetadata k8s.mariadb.com/*, artifact
//!                               s3://<bucket>/<prefix/><backup> for S3 storage, MariaDBBackupSnapshot)
//!  reason JobFailed ─► failed (the operator writes Complete=True/JobFailed for a failed dump Job)
//! ```
//!
//! Shapes follow upstream's typed round trip: the rendered template is re-shaped the way Go's
//! `encoding/json` marshals upstream's structs (required fields always present, `omitempty` ones
//! dropped when empty, unknown fields gone, `maxRetention` normalised as a Go duration).

use std::collections::BTreeMap;

use api::contract::labels;
use serde_json::{Map, Value as Json, json};

/// The MariaDB application kind.
pub const APP_KIND: &str = "MariaDB";
/// The operator's API version.
pub const API_VERSION: &str = "k8s.mariadb.com/v1alpha1";
/// The operator's condition on a Backup.
pub const CONDITION_COMPLETE: &str = "Complete";
/// The reason the operator gives a failed dump Job.
pub const REASON_JOB_FAILED: &str = "JobFailed";
/// The snapshot kind in `status.underlyingResources`.
pub const SNAPSHOT_KIND: &str = "MariaDBBackupSnapshot";
/// Upstream's wall-clock cap on the operator CR appearing and on the Backup completing.
pub const DEADLINE: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Driver metadata keys on the catalog Backup.
pub mod keys {
    /// The operator Backup's name.
    pub const BACKUP_NAME: &str = "k8s.mariadb.com/backup-name";
    /// The operator Backup's namespace.
    pub const BACKUP_NAMESPACE: &str = "k8s.mariadb.com/backup-namespace";
    /// `s3://<bucket>/<prefix/><backup>` (S3 storage only).
    pub const STORAGE_URI: &str = "k8s.mariadb.com/storage-uri";
}

/// The operator MariaDB CR of a MariaDB application (the chart's release name).
pub fn operator_name(app: &str) -> String {
    format!("mariadb-{app}")
}

/// Upstream's gate on the application reference (raw, not normalised).
pub fn validate_app_ref(r: &api::TypedLocalObjectReference) -> Result<(), String> {
    crate::app_ref::validate("MariaDB", APP_KIND, r)
}

/// Renders the strategy template against the application and the route's parameters, then
/// re-shapes it as upstream's typed template. The only render error upstream can hit is an
/// unparsable `maxRetention` (a Go duration).
pub fn render_template(
    template: &Json,
    app: &Json,
    parameters: &BTreeMap<String, String>,
) -> Result<Json, String> {
    let rendered = crate::template::render_for_app(template, app, parameters);
    let mut out = Map::new();
    out.insert("storage".into(), storage_template(&rendered["storage"]));
    if let Some(d) = string_list(&rendered["databases"]) {
        out.insert("databases".into(), d);
    }
    for key in ["compression", "logLevel"] {
        if let Some(v) = nonempty(&rendered[key]) {
            out.insert(key.into(), json!(v));
        }
    }
    match &rendered["maxRetention"] {
        Json::Null => {}
        Json::String(s) => {
            let nanos = parse_go_duration(s)?;
            out.insert("maxRetention".into(), json!(format_go_duration(nanos)));
        }
        other => return Err(format!("time: invalid duration {other}")),
    }
    Ok(Json::Object(out))
}

fn nonempty(v: &Json) -> Option<&str> {
    v.as_str().filter(|s| !s.is_empty())
}

fn string_list(v: &Json) -> Option<Json> {
    v.as_array().filter(|a| !a.is_empty()).map(|a| json!(a))
}

fn key_ref(v: &Json) -> Json {
    json!({
        "name": v["name"].as_str().unwrap_or_default(),
        "key": v["key"].as_str().unwrap_or_default(),
    })
}

fn s3_shape(s3: &Json) -> Json {
    let mut out = Map::new();
    out.insert(
        "bucket".into(),
        json!(s3["bucket"].as_str().unwrap_or_default()),
    );
    out.insert(
        "endpoint".into(),
        json!(s3["endpoint"].as_str().unwrap_or_default()),
    );
    for key in ["prefix", "region"] {
        if let Some(v) = nonempty(&s3[key]) {
            out.insert(key.into(), json!(v));
        }
    }
    out.insert(
        "accessKeyIdSecretKeyRef".into(),
        key_ref(&s3["accessKeyIdSecretKeyRef"]),
    );
    out.insert(
        "secretAccessKeySecretKeyRef".into(),
        key_ref(&s3["secretAccessKeySecretKeyRef"]),
    );
    if s3["sessionTokenSecretKeyRef"].is_object() {
        out.insert(
            "sessionTokenSecretKeyRef".into(),
            key_ref(&s3["sessionTokenSecretKeyRef"]),
        );
    }
    if let Some(tls) = s3["tls"].as_object() {
        let mut t = Map::new();
        if tls.get("enabled") == Some(&Json::Bool(true)) {
            t.insert("enabled".into(), json!(true));
        }
        if let Some(ca) = tls.get("caSecretKeyRef").filter(|c| c.is_object()) {
            t.insert("caSecretKeyRef".into(), key_ref(ca));
        }
        out.insert("tls".into(), Json::Object(t));
    }
    Json::Object(out)
}

/// A PersistentVolumeClaimSpec as Go marshals it (`resources` is always present).
fn pvc_shape(pvc: &Json) -> Json {
    let mut pvc = pvc.clone();
    if let Some(m) = pvc.as_object_mut() {
        m.entry("resources").or_insert_with(|| json!({}));
    }
    pvc
}

/// The storage template as upstream's typed `MariaDBStorageTemplate` marshals it.
fn storage_template(storage: &Json) -> Json {
    let mut out = Map::new();
    if storage["s3"].is_object() {
        out.insert("s3".into(), s3_shape(&storage["s3"]));
    }
    if storage["persistentVolumeClaim"].is_object() {
        out.insert(
            "persistentVolumeClaim".into(),
            pvc_shape(&storage["persistentVolumeClaim"]),
        );
    }
    if storage["volume"].is_object() {
        out.insert("volume".into(), storage["volume"].clone());
    }
    Json::Object(out)
}

/// The operator Backup's `spec.storage`: exactly one of s3, persistentVolumeClaim or volume.
pub fn operator_storage(rendered: &Json) -> Result<Json, String> {
    let storage = &rendered["storage"];
    let set = ["s3", "persistentVolumeClaim", "volume"]
        .iter()
        .filter(|k| storage[**k].is_object())
        .count();
    if set != 1 {
        return Err(format!(
            "strategy.spec.template.storage requires exactly one of s3, persistentVolumeClaim or volume; got {set}"
        ));
    }
    Ok(storage.clone())
}

/// The `k8s.mariadb.com` Backup of a job (created with `generateName: <job>-`).
pub fn operator_backup(
    job_namespace: &str,
    job_name: &str,
    app: &str,
    rendered: &Json,
) -> Result<Json, String> {
    let mut spec = Map::new();
    spec.insert("mariaDbRef".into(), json!({"name": operator_name(app)}));
    spec.insert("storage".into(), operator_storage(rendered)?);
    for key in ["databases", "compression", "maxRetention", "logLevel"] {
        if let Some(v) = rendered.get(key) {
            spec.insert(key.into(), v.clone());
        }
    }
    Ok(json!({
        "apiVersion": API_VERSION,
        "kind": "Backup",
        "metadata": {
            "generateName": format!("{job_name}-"),
            "namespace": job_namespace,
            "labels": {
                labels::OWNED_BY_JOB_NAME: job_name,
                labels::OWNED_BY_JOB_NAMESPACE: job_namespace,
            },
        },
        "spec": spec,
    }))
}

/// How an operator Backup's `Complete` condition reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The dump Job completed.
    Completed {
        /// The condition's lastTransitionTime (RFC 3339), if set.
        at: Option<String>,
    },
    /// The dump Job failed (terminal): the condition's message.
    Failed(String),
    /// Still running; the detail for a deadline message.
    Running(String),
}

/// Reads the operator Backup's `Complete` condition. Upstream treats `Complete=True` as success
/// whatever its reason, and fails only on `Complete=False/JobFailed`; the operator however marks
/// a failed dump Job `Complete=True/JobFailed`, so any `JobFailed` is a failure here.
pub fn outcome(backup: &Json) -> Outcome {
    let cond = backup["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == CONDITION_COMPLETE);
    let Some(c) = cond else {
        return Outcome::Running("no Complete condition observed".into());
    };
    let status = c["status"].as_str().unwrap_or_default();
    let reason = c["reason"].as_str().unwrap_or_default();
    if reason == REASON_JOB_FAILED && (status == "True" || status == "False") {
        let message = nonempty(&c["message"])
            .unwrap_or("k8s.mariadb.com Backup terminal failure")
            .to_owned();
        return Outcome::Failed(message);
    }
    if status == "True" {
        return Outcome::Completed {
            at: nonempty(&c["lastTransitionTime"]).map(str::to_owned),
        };
    }
    Outcome::Running(format!("Complete={status}/{reason}"))
}

/// The artifact URI of an S3-stored backup: `s3://<bucket>/<prefix with a trailing slash><name>`
/// (`None` for PVC or volume storage, which has no stable URI).
pub fn storage_uri(rendered: &Json, backup_name: &str) -> Option<String> {
    let s3 = rendered["storage"]["s3"].as_object()?;
    let bucket = s3.get("bucket").and_then(Json::as_str).unwrap_or_default();
    let mut prefix = s3
        .get("prefix")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_owned();
    if !prefix.is_empty() && !prefix.ends_with('/') {
        prefix.push('/');
    }
    Some(format!("s3://{bucket}/{prefix}{backup_name}"))
}

/// The catalog Backup's `driverMetadata` for operator Backup `namespace/name`.
pub fn driver_metadata(rendered: &Json, namespace: &str, name: &str) -> BTreeMap<String, String> {
    let mut md = BTreeMap::from([
        (keys::BACKUP_NAME.to_owned(), name.to_owned()),
        (keys::BACKUP_NAMESPACE.to_owned(), namespace.to_owned()),
    ]);
    if let Some(uri) = storage_uri(rendered, name) {
        md.insert(keys::STORAGE_URI.to_owned(), uri);
    }
    md
}

/// The source snapshot stored in `Backup.status.underlyingResources`: the rendered storage
/// (Secret references only, never values), the databases and the route's parameters.
pub fn snapshot(rendered: &Json, parameters: &BTreeMap<String, String>) -> Json {
    let mut snap = json!({
        "kind": SNAPSHOT_KIND,
        "apiVersion": "backups.cozystack.io/v1alpha1",
        "storage": rendered["storage"].clone(),
    });
    if let Some(d) = rendered.get("databases") {
        snap["databases"] = d.clone();
    }
    if !parameters.is_empty() {
        snap["parameters"] = json!(parameters);
    }
    snap
}

/// Parses a Go duration (`time.ParseDuration`) into nanoseconds, with Go's error messages:
/// `goduration`, the workspace's one Go-duration parser, step for step what Go does (upstream
/// shows the outcome to users: `720h` becomes `720h0m0s`, a bad value is quoted in a failure
/// message).
pub fn parse_go_duration(text: &str) -> Result<i128, String> {
    goduration::parse_go(text.as_bytes()).map(i128::from)
}

/// Formats nanoseconds as Go's `time.Duration.String()` does (`720h0m0s`, `1.5s`, `300ms`); a
/// value outside Go's `int64` range is shown at the nearest end of it.
pub fn format_go_duration(nanos: i128) -> String {
    let nanos = i64::try_from(nanos).unwrap_or(if nanos < 0 { i64::MIN } else { i64::MAX });
    goduration::format(nanos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn s3_template() -> Json {
        json!({
            "storage": {"s3": {
                "bucket": "{{ .Parameters.bucket }}",
                "endpoint": "https://s3.example.com",
                "prefix": "{{ .Application.metadata.namespace }}/{{ .Application.metadata.name }}",
                "accessKeyIdSecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"},
                "secretAccessKeySecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_SECRET_ACCESS_KEY"},
                "tls": {"enabled": false},
                "unknownField": "dropped"}},
            "databases": [],
            "compression": "gzip",
            "maxRetention": "720h",
        })
    }

    fn app() -> Json {
        json!({"metadata": {"name": "shop", "namespace": "tenant-a"}, "spec": {}})
    }

    #[test]
    fn app_refs_in_upstream_words() {
        let ok = api::TypedLocalObjectReference::new("", "MariaDB", "db");
        assert_eq!(validate_app_ref(&ok), Ok(()));
        let r = api::TypedLocalObjectReference::new("apps.cozystack.io", "Postgres", "db");
        assert_eq!(
            validate_app_ref(&r),
            Err(
                "MariaDB strategy supports applicationRef.kind=\"MariaDB\", got \"Postgres\""
                    .into()
            )
        );
        let r = api::TypedLocalObjectReference::new("other.example.com", "MariaDB", "db");
        assert_eq!(
            validate_app_ref(&r),
            Err("MariaDB strategy supports applicationRef.apiGroup=\"apps.cozystack.io\", got \"other.example.com\"".into())
        );
    }

    #[test]
    fn the_rendered_template_takes_upstreams_typed_shape() {
        let params = BTreeMap::from([("bucket".to_owned(), "b1".to_owned())]);
        let rendered = render_template(&s3_template(), &app(), &params).unwrap();
        assert_eq!(
            rendered,
            json!({
                "storage": {"s3": {
                    "bucket": "b1", "endpoint": "https://s3.example.com", "prefix": "tenant-a/shop",
                    "accessKeyIdSecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"},
                    "secretAccessKeySecretKeyRef": {"name": "cozy-backups-creds", "key": "AWS_SECRET_ACCESS_KEY"},
                    "tls": {}}},
                "compression": "gzip",
                "maxRetention": "720h0m0s",
            })
        );
        let bad = json!({"storage": {"volume": {"emptyDir": {}}}, "maxRetention": "a week"});
        assert_eq!(
            render_template(&bad, &app(), &params),
            Err("time: invalid duration \"a week\"".into())
        );
    }

    #[test]
    fn the_operator_backup_and_its_storage_rule() {
        let params = BTreeMap::new();
        let rendered = render_template(&s3_template(), &app(), &params).unwrap();
        let body = operator_backup("tenant-a", "nightly", "shop", &rendered).unwrap();
        assert_eq!(body["metadata"]["generateName"], "nightly-");
        assert_eq!(
            body["metadata"]["labels"],
            json!({"backups.cozystack.io/owned-by.BackupJobName": "nightly",
                   "backups.cozystack.io/owned-by.BackupJobNamespace": "tenant-a"})
        );
        assert!(body["metadata"].get("ownerReferences").is_none());
        assert_eq!(body["spec"]["mariaDbRef"], json!({"name": "mariadb-shop"}));
        assert_eq!(body["spec"]["maxRetention"], "720h0m0s");
        assert!(
            body["spec"].get("databases").is_none(),
            "empty list omitted"
        );

        let none = json!({"storage": {}});
        assert_eq!(
            operator_backup("t", "j", "a", &none),
            Err("strategy.spec.template.storage requires exactly one of s3, persistentVolumeClaim or volume; got 0".into())
        );
        let two = render_template(
            &json!({"storage": {"s3": {"bucket": "b"}, "persistentVolumeClaim": {"accessModes": ["ReadWriteOnce"]}}}),
            &app(),
            &params,
        )
        .unwrap();
        assert_eq!(
            operator_storage(&two),
            Err("strategy.spec.template.storage requires exactly one of s3, persistentVolumeClaim or volume; got 2".into())
        );
        assert_eq!(
            two["storage"]["persistentVolumeClaim"],
            json!({"accessModes": ["ReadWriteOnce"], "resources": {}}),
            "Go marshals the PVC spec's resources struct even when empty"
        );
    }

    #[test]
    fn complete_conditions_as_upstream_and_the_real_operator_write_them() {
        let b = |c: Json| json!({"status": {"conditions": [c]}});
        assert_eq!(
            outcome(&json!({})),
            Outcome::Running("no Complete condition observed".into())
        );
        assert_eq!(
            outcome(&b(
                json!({"type": "Complete", "status": "False", "reason": "JobRunning", "message": "Running"})
            )),
            Outcome::Running("Complete=False/JobRunning".into())
        );
        assert_eq!(
            outcome(&b(
                json!({"type": "Complete", "status": "True", "reason": "JobComplete", "message": "Success",
                            "lastTransitionTime": "2026-01-01T00:00:05Z"})
            )),
            Outcome::Completed {
                at: Some("2026-01-01T00:00:05Z".into())
            }
        );
        // What mariadb-operator writes for a failed dump Job, and upstream's own failure shape.
        assert_eq!(
            outcome(&b(
                json!({"type": "Complete", "status": "True", "reason": "JobFailed", "message": "Failed"})
            )),
            Outcome::Failed("Failed".into())
        );
        assert_eq!(
            outcome(&b(
                json!({"type": "Complete", "status": "False", "reason": "JobFailed"})
            )),
            Outcome::Failed("k8s.mariadb.com Backup terminal failure".into())
        );
    }

    #[test]
    fn catalog_fields_with_and_without_an_s3_uri() {
        let params = BTreeMap::from([("bucket".to_owned(), "b1".to_owned())]);
        let rendered = render_template(&s3_template(), &app(), &params).unwrap();
        assert_eq!(
            driver_metadata(&rendered, "tenant-a", "nightly-x1"),
            BTreeMap::from([
                ("k8s.mariadb.com/backup-name".into(), "nightly-x1".into()),
                ("k8s.mariadb.com/backup-namespace".into(), "tenant-a".into()),
                (
                    "k8s.mariadb.com/storage-uri".into(),
                    "s3://b1/tenant-a/shop/nightly-x1".into()
                ),
            ])
        );
        let no_prefix = json!({"storage": {"s3": {"bucket": "b"}}});
        assert_eq!(storage_uri(&no_prefix, "x").as_deref(), Some("s3://b/x"));
        let slash = json!({"storage": {"s3": {"bucket": "b", "prefix": "p/"}}});
        assert_eq!(storage_uri(&slash, "x").as_deref(), Some("s3://b/p/x"));
        let pvc = json!({"storage": {"persistentVolumeClaim": {}}});
        assert_eq!(storage_uri(&pvc, "x"), None);
        assert_eq!(driver_metadata(&pvc, "t", "x").len(), 2);
        assert_eq!(
            snapshot(&rendered, &params),
            json!({"kind": "MariaDBBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                   "storage": rendered["storage"], "parameters": {"bucket": "b1"}})
        );
    }

    #[test]
    fn go_durations() {
        for (text, nanos, shown) in [
            ("720h", 720 * 3_600_000_000_000, "720h0m0s"),
            ("1h30m", 5_400_000_000_000, "1h30m0s"),
            ("90s", 90_000_000_000, "1m30s"),
            ("1.5s", 1_500_000_000, "1.5s"),
            ("300ms", 300_000_000, "300ms"),
            ("2us", 2_000, "2µs"),
            ("0", 0, "0s"),
            ("-5m", -300_000_000_000, "-5m0s"),
        ] {
            assert_eq!(parse_go_duration(text), Ok(nanos), "{text}");
            assert_eq!(format_go_duration(nanos), shown, "{text}");
        }
        assert_eq!(
            parse_go_duration("10"),
            Err("time: missing unit in duration \"10\"".into())
        );
        assert_eq!(
            parse_go_duration("3d"),
            Err("time: unknown unit \"d\" in duration \"3d\"".into())
        );
        assert_eq!(
            parse_go_duration(""),
            Err("time: invalid duration \"\"".into())
        );
    }

    /// Cases where an earlier parser differed from Go's `time.ParseDuration` (found by the
    /// differential run against Go itself, `e2e/go-differential`).
    #[test]
    fn go_durations_where_go_is_odd() {
        // The fraction goes through one f64 multiplication, digits past 2^63 are dropped.
        assert_eq!(
            parse_go_duration("2.9223372036854775808m"),
            Ok(175_340_232_221)
        );
        assert_eq!(
            parse_go_duration("0.3333333333333333333h"),
            Ok(1_200_000_000_000)
        );
        // Terms sum in an unsigned 64-bit accumulator that wraps: 2^63 + 2^63 is 0.
        assert_eq!(
            parse_go_duration("-9223372036854775808ns9223372036854775808ns"),
            Ok(0)
        );
        assert_eq!(
            parse_go_duration("-9223372036854775808ns"),
            Ok(-9_223_372_036_854_775_808)
        );
        assert_eq!(
            parse_go_duration("9223372036854775808ns"),
            Err("time: invalid duration \"9223372036854775808ns\"".into())
        );
        // Go's quoting: every byte of a non-ASCII or control character as \xNN.
        assert_eq!(
            parse_go_duration("-0\u{b5}"),
            Err("time: unknown unit \"\\xc2\\xb5\" in duration \"-0\\xc2\\xb5\"".into())
        );
        assert_eq!(
            parse_go_duration("\u{ff11}h\t\"\\"),
            Err("time: invalid duration \"\\xef\\xbc\\x91h\\x09\\\"\\\\\"".into())
        );
        assert_eq!(parse_go_duration("1\u{3bc}s"), Ok(1_000));
    }
}
