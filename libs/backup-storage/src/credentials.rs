//! The credentials projection's pure part (docs/credentials-projector.md): parse the system credentials Secret,
//! compute the ten keys of `cozy-backups-creds`, and merge them into an existing Secret's data.
//!
//! Error messages never contain a credential value: they name the Secret and the missing or
//! malformed key only (the JSON parser's message carries a line and column, never input text).

use std::collections::BTreeMap;

use crate::endpoint::strip_scheme;
use crate::gojson;

/// Key of the access key id (CNPG, MariaDB, Etcd defaults).
pub const KEY_AWS_ACCESS_KEY_ID: &str = "AWS_ACCESS_KEY_ID";
/// Key of the secret access key.
pub const KEY_AWS_SECRET_ACCESS_KEY: &str = "AWS_SECRET_ACCESS_KEY";
/// Access key for the ClickHouse sidecar.
pub const KEY_ACCESS_KEY: &str = "accessKey";
/// Secret key for the ClickHouse sidecar.
pub const KEY_SECRET_KEY: &str = "secretKey";
/// AWS credentials file for the Velero BSL.
pub const KEY_CLOUD: &str = "cloud";
/// FoundationDB blob credentials.
pub const KEY_BLOB_CREDENTIALS: &str = "blob_credentials.json";
/// Bare host[:port][/path] (set or deleted).
pub const KEY_ENDPOINT: &str = "endpoint";
/// Real bucket name (set or deleted).
pub const KEY_BUCKET_NAME: &str = "bucketName";
/// Region (set or deleted).
pub const KEY_REGION: &str = "region";
/// `"true"`/`"false"` from configuration (set or deleted).
pub const KEY_FORCE_PATH_STYLE: &str = "forcePathStyle";
/// COSI key holding a `BucketInfo` JSON document in the source Secret.
pub const KEY_BUCKET_INFO: &str = "BucketInfo";

/// Projection configuration (upstream `BackupCredentialsConfig`, from `BACKUP_STORAGE_*`).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ProjectionConfig {
    /// Namespace of the system credentials Secret.
    pub source_namespace: String,
    /// Name of the system credentials Secret.
    pub source_name: String,
    /// Name of the projected Secret (`cozy-backups-creds`).
    pub target_name: String,
    /// Fallback endpoint when the source has none (full URL).
    pub endpoint: String,
    /// Fallback region.
    pub region: String,
    /// Value of the `forcePathStyle` key (`"true"`/`"false"`), written verbatim.
    pub force_path_style: String,
}

impl ProjectionConfig {
    /// Projection runs only when the source namespace, source name and target name are all set.
    pub fn is_enabled(&self) -> bool {
        !self.source_namespace.is_empty()
            && !self.source_name.is_empty()
            && !self.target_name.is_empty()
    }
}

/// Why a projection failed; the values are upstream's reason strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The source Secret does not exist (transient).
    SourceSecretMissing,
    /// The source Secret is unusable (terminal for a job).
    SourceSecretMalformed,
    /// The target Secret exists without our ownership label (terminal for a job).
    TargetSecretNotOwned,
    /// An API call failed (transient).
    ApiError,
}

impl Reason {
    /// Upstream's reason string (also the metric label).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SourceSecretMissing => "SourceSecretMissing",
            Self::SourceSecretMalformed => "SourceSecretMalformed",
            Self::TargetSecretNotOwned => "TargetSecretNotOwned",
            Self::ApiError => "APIError",
        }
    }

    /// Transient reasons are retried; terminal ones fail the job.
    pub fn is_transient(self) -> bool {
        matches!(self, Self::SourceSecretMissing | Self::ApiError)
    }
}

/// A projection failure with upstream's message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ProjectionError {
    /// The reason.
    pub reason: Reason,
    /// Upstream's message (never contains a credential value).
    pub message: String,
}

impl ProjectionError {
    fn new(reason: Reason, message: String) -> Self {
        Self { reason, message }
    }

    /// The source Secret was not found.
    pub fn source_missing(namespace: &str, name: &str) -> Self {
        Self::new(
            Reason::SourceSecretMissing,
            format!("source credentials Secret {namespace}/{name} not found"),
        )
    }

    /// Reading the source Secret failed.
    pub fn source_read(err: impl std::fmt::Display) -> Self {
        Self::new(
            Reason::ApiError,
            format!("read source credentials Secret: {err}"),
        )
    }

    /// The target exists without the ownership label.
    pub fn target_not_owned(namespace: &str, name: &str) -> Self {
        Self::new(
            Reason::TargetSecretNotOwned,
            format!(
                "target Secret {namespace}/{name} exists without label apps.cozystack.io/managed-by=cozystack-backups; refusing to overwrite"
            ),
        )
    }

    /// Creating or updating the target failed.
    pub fn target_write(namespace: &str, name: &str, err: impl std::fmt::Display) -> Self {
        Self::new(
            Reason::ApiError,
            format!("project credentials Secret to {namespace}/{name}: {err}"),
        )
    }

    fn malformed(message: String) -> Self {
        Self::new(Reason::SourceSecretMalformed, message)
    }
}

/// Credentials parsed from the source Secret.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct SourceCredentials {
    /// Access key id.
    pub access_key: Vec<u8>,
    /// Secret access key.
    pub secret_key: Vec<u8>,
    /// Endpoint after `strip_scheme` (may be empty).
    pub endpoint: String,
    /// Bucket name (flat key or BucketInfo; may be empty).
    pub bucket_name: Vec<u8>,
    /// Region (flat key or BucketInfo; may be empty).
    pub region: Vec<u8>,
}

impl std::fmt::Debug for SourceCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print credential values.
        f.debug_struct("SourceCredentials")
            .field("access_key", &"<redacted>")
            .field("secret_key", &"<redacted>")
            .field("endpoint", &self.endpoint)
            .field("bucket_name", &String::from_utf8_lossy(&self.bucket_name))
            .field("region", &String::from_utf8_lossy(&self.region))
            .finish()
    }
}

#[derive(Default)]
struct BucketInfoFields {
    bucket_name: String,
    access_key: String,
    secret_key: String,
    endpoint: String,
    region: String,
}

/// Parses the source Secret's data (upstream `parseSourceSecret`): flat keys win per field, a
/// non-empty `BucketInfo` JSON fills the empty ones, garbled JSON is ignored only when both flat
/// credentials are present, an empty value counts as absent.
pub fn parse_source(
    namespace: &str,
    name: &str,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<SourceCredentials, ProjectionError> {
    let flat = |key: &str| {
        data.get(key)
            .filter(|v| !v.is_empty())
            .cloned()
            .unwrap_or_default()
    };
    // Upstream copies the bytes as they are; a key, secret or endpoint that is not text can never
    // authenticate or resolve, so it is named here instead of being projected as garbage.
    for key in ["accessKey", "secretKey", "endpoint", "bucketName", "region"] {
        if std::str::from_utf8(&flat(key)).is_err() {
            return Err(ProjectionError::malformed(format!(
                "source credentials Secret {namespace}/{name} key {key} is not valid UTF-8"
            )));
        }
    }
    let mut creds = SourceCredentials {
        access_key: flat("accessKey"),
        secret_key: flat("secretKey"),
        endpoint: String::from_utf8_lossy(&flat("endpoint")).into_owned(),
        bucket_name: flat("bucketName"),
        region: flat("region"),
    };
    if let Some(blob) = data.get(KEY_BUCKET_INFO).filter(|v| !v.is_empty()) {
        match parse_bucket_info(blob) {
            Ok(info) => {
                fill(&mut creds.bucket_name, info.bucket_name);
                fill(&mut creds.access_key, info.access_key);
                fill(&mut creds.secret_key, info.secret_key);
                if creds.endpoint.is_empty() {
                    creds.endpoint = info.endpoint;
                }
                fill(&mut creds.region, info.region);
            }
            Err(err) if creds.access_key.is_empty() || creds.secret_key.is_empty() => {
                return Err(ProjectionError::malformed(format!(
                    "parse BucketInfo: {err}"
                )));
            }
            // Both flat credentials exist: the garbled blob is ignored entirely (no backfill).
            Err(_) => {}
        }
    }
    if creds.access_key.is_empty() {
        return Err(ProjectionError::malformed(format!(
            "source credentials Secret {namespace}/{name} missing accessKey"
        )));
    }
    if creds.secret_key.is_empty() {
        return Err(ProjectionError::malformed(format!(
            "source credentials Secret {namespace}/{name} missing secretKey"
        )));
    }
    creds.endpoint = strip_scheme(&creds.endpoint);
    Ok(creds)
}

/// The bucket name a source Secret carries, as upstream's default-objects gate reads it: the flat
/// `bucketName` key when non-empty, else `spec.bucketName` of the `BucketInfo` JSON. `None` when
/// neither names a bucket (a garbled `BucketInfo` names none). Only the name is read: the keys may
/// be absent, this is not a credentials check.
pub fn source_bucket_name(data: &BTreeMap<String, Vec<u8>>) -> Option<String> {
    let non_empty = |s: String| (!s.is_empty()).then_some(s);
    data.get(KEY_BUCKET_NAME)
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_owned)
        .and_then(non_empty)
        .or_else(|| {
            let blob = data.get(KEY_BUCKET_INFO).filter(|v| !v.is_empty())?;
            parse_bucket_info(blob)
                .ok()
                .map(|info| info.bucket_name)
                .and_then(non_empty)
        })
}

fn fill(field: &mut Vec<u8>, value: String) {
    if field.is_empty() {
        *field = value.into_bytes();
    }
}

/// Decodes the fields of a COSI `BucketInfo` the way Go's `encoding/json` fills a struct: keys match
/// case-insensitively (an exact match wins), `null` leaves a field empty, a value of the wrong type
/// is an error, unknown keys are ignored.
fn parse_bucket_info(blob: &[u8]) -> Result<BucketInfoFields, String> {
    let value: serde_json::Value = serde_json::from_slice(blob).map_err(|e| e.to_string())?;
    let mut out = BucketInfoFields::default();
    let Some(root) = object(&value, "BucketInfo")? else {
        return Ok(out);
    };
    let Some(spec) = member(root, "spec")
        .map(|v| object(v, "spec"))
        .transpose()?
        .flatten()
    else {
        return Ok(out);
    };
    out.bucket_name = string(spec, "bucketName")?;
    if let Some(s3) = member(spec, "secretS3")
        .map(|v| object(v, "secretS3"))
        .transpose()?
        .flatten()
    {
        out.access_key = string(s3, "accessKeyID")?;
        out.secret_key = string(s3, "accessSecretKey")?;
        out.endpoint = string(s3, "endpoint")?;
        out.region = string(s3, "region")?;
    }
    Ok(out)
}

type JsonObject = serde_json::Map<String, serde_json::Value>;

fn object<'a>(v: &'a serde_json::Value, what: &str) -> Result<Option<&'a JsonObject>, String> {
    match v {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::Object(o) => Ok(Some(o)),
        _ => Err(format!("{what} is not a JSON object")),
    }
}

fn member<'a>(o: &'a JsonObject, key: &str) -> Option<&'a serde_json::Value> {
    o.get(key).or_else(|| {
        o.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

fn string(o: &JsonObject, key: &str) -> Result<String, String> {
    match member(o, key) {
        None | Some(serde_json::Value::Null) => Ok(String::new()),
        Some(serde_json::Value::String(s)) => Ok(s.clone()),
        Some(_) => Err(format!("{key} is not a JSON string")),
    }
}

/// The keys `cozy-backups-creds` must hold: six always written, four set-or-delete.
#[derive(Clone, PartialEq, Eq)]
pub struct DesiredKeys {
    /// Written on every projection.
    pub always: BTreeMap<&'static str, Vec<u8>>,
    /// Written when `Some`, removed when `None`.
    pub optional: BTreeMap<&'static str, Option<Vec<u8>>>,
}

impl std::fmt::Debug for DesiredKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DesiredKeys")
            .field("always", &self.always.keys().collect::<Vec<_>>())
            .field(
                "optional",
                &self
                    .optional
                    .iter()
                    .map(|(k, v)| (k, v.is_some()))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Computes the projected keys (upstream `ProjectBackupCredentials` steps 4–8).
pub fn desired_keys(
    config: &ProjectionConfig,
    source: &SourceCredentials,
) -> Result<DesiredKeys, ProjectionError> {
    let mut endpoint = source.endpoint.clone();
    if endpoint.is_empty() {
        endpoint = strip_scheme(&config.endpoint);
    }
    if endpoint.is_empty() {
        return Err(ProjectionError::malformed(format!(
            "endpoint is empty in both source Secret {}/{} and BACKUP_STORAGE_ENDPOINT",
            config.source_namespace, config.source_name
        )));
    }
    let mut region = source.region.clone();
    if region.is_empty() {
        region = config.region.clone().into_bytes();
    }
    let (ak, sk) = (&source.access_key, &source.secret_key);

    let mut cloud = b"[default]\naws_access_key_id=".to_vec();
    cloud.extend_from_slice(ak);
    cloud.extend_from_slice(b"\naws_secret_access_key=");
    cloud.extend_from_slice(sk);
    cloud.push(b'\n');

    let host = strip_scheme(&endpoint);
    if host.is_empty() {
        return Err(ProjectionError::malformed(
            "build blob_credentials.json: endpoint is empty; cannot build blob_credentials.json"
                .into(),
        ));
    }
    let mut blob = String::from("{\"accounts\":{");
    gojson::write_string(&mut blob, host.as_bytes());
    blob.push_str(":{\"api_key\":");
    gojson::write_string(&mut blob, ak);
    blob.push_str(",\"secret\":");
    gojson::write_string(&mut blob, sk);
    blob.push_str("}}}");

    let always = BTreeMap::from([
        (KEY_AWS_ACCESS_KEY_ID, ak.clone()),
        (KEY_AWS_SECRET_ACCESS_KEY, sk.clone()),
        (KEY_ACCESS_KEY, ak.clone()),
        (KEY_SECRET_KEY, sk.clone()),
        (KEY_CLOUD, cloud),
        (KEY_BLOB_CREDENTIALS, blob.into_bytes()),
    ]);
    let set_or_delete = |v: Vec<u8>| (!v.is_empty()).then_some(v);
    let optional = BTreeMap::from([
        (KEY_ENDPOINT, set_or_delete(endpoint.into_bytes())),
        (KEY_BUCKET_NAME, set_or_delete(source.bucket_name.clone())),
        (KEY_REGION, set_or_delete(region)),
        (
            KEY_FORCE_PATH_STYLE,
            set_or_delete(config.force_path_style.clone().into_bytes()),
        ),
    ]);
    let size: usize = always.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>()
        + optional
            .iter()
            .map(|(k, v)| v.as_ref().map_or(0, |v| k.len() + v.len()))
            .sum::<usize>();
    if size > SECRET_MAX_BYTES {
        return Err(ProjectionError::malformed(format!(
            "source credentials Secret {}/{}: the projected keys would hold {size} bytes, larger than the 1 MiB ({SECRET_MAX_BYTES} bytes) a Secret may hold; accessKey and secretKey are each copied four times",
            config.source_namespace, config.source_name
        )));
    }
    Ok(DesiredKeys { always, optional })
}

/// The most a Secret's data may hold (the API server refuses larger ones).
pub const SECRET_MAX_BYTES: usize = 1024 * 1024;

impl DesiredKeys {
    /// The target's data after projection: `existing` with the always-keys written, the optional
    /// keys set or removed, and every other key kept.
    pub fn apply_to(&self, existing: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
        let mut data = existing.clone();
        for (k, v) in &self.always {
            data.insert((*k).to_owned(), v.clone());
        }
        for (k, v) in &self.optional {
            match v {
                Some(v) => {
                    data.insert((*k).to_owned(), v.clone());
                }
                None => {
                    data.remove(*k);
                }
            }
        }
        data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bucket_name_of_a_source_secret() {
        let data = |pairs: &[(&str, &str)]| -> BTreeMap<String, Vec<u8>> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect()
        };
        let info = r#"{"spec":{"bucketName":"from-info","secretS3":{"accessKeyID":"AK"}}}"#;
        // The flat key wins; BucketInfo fills in when it is absent or empty.
        assert_eq!(
            source_bucket_name(&data(&[("bucketName", "flat"), ("BucketInfo", info)])),
            Some("flat".into())
        );
        assert_eq!(
            source_bucket_name(&data(&[("bucketName", ""), ("BucketInfo", info)])),
            Some("from-info".into())
        );
        assert_eq!(
            source_bucket_name(&data(&[("BucketInfo", info)])),
            Some("from-info".into())
        );
        // No keys are needed to name the bucket.
        assert_eq!(
            source_bucket_name(&data(&[("bucketName", "flat")])),
            Some("flat".into())
        );
        // Neither names one: no key, an empty name, garbled or nameless BucketInfo.
        for d in [
            data(&[]),
            data(&[("accessKey", "AK"), ("secretKey", "SK")]),
            data(&[("BucketInfo", "{not json")]),
            data(&[("BucketInfo", r#"{"spec":{"bucketName":""}}"#)]),
            data(&[("BucketInfo", r#"{"spec":null}"#)]),
        ] {
            assert_eq!(source_bucket_name(&d), None, "{:?}", d.keys());
        }
    }
    use pretty_assertions::assert_eq;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
            .collect()
    }

    fn config() -> ProjectionConfig {
        ProjectionConfig {
            source_namespace: "tenant-root".into(),
            source_name: "bucket-cozy-backups-system-credentials".into(),
            target_name: "cozy-backups-creds".into(),
            endpoint: "http://seaweedfs-s3.tenant-root.svc:8333".into(),
            region: "us-east-1".into(),
            force_path_style: "true".into(),
        }
    }

    fn project(
        src: &BTreeMap<String, Vec<u8>>,
    ) -> Result<BTreeMap<String, String>, ProjectionError> {
        let c = config();
        let parsed = parse_source(&c.source_namespace, &c.source_name, src)?;
        let keys = desired_keys(&c, &parsed)?;
        Ok(keys
            .apply_to(&BTreeMap::new())
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v).unwrap()))
            .collect())
    }

    fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn bytes_that_are_not_text_are_named() {
        for key in ["accessKey", "secretKey", "endpoint"] {
            let mut data: BTreeMap<String, Vec<u8>> = [
                ("accessKey", b"AK".to_vec()),
                ("secretKey", b"SK".to_vec()),
                ("endpoint", b"s3.example.com".to_vec()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
            data.insert(key.to_owned(), vec![0xff, 0xfe, b'x']);
            let err = parse_source("ns", "src", &data).unwrap_err();
            assert_eq!(err.reason, Reason::SourceSecretMalformed);
            assert_eq!(
                err.message,
                format!("source credentials Secret ns/src key {key} is not valid UTF-8")
            );
        }
    }

    #[test]
    fn flat_keys_produce_all_ten_keys_in_upstream_formats() {
        let got = project(&data(&[
            ("accessKey", "AK"),
            ("secretKey", "SK"),
            ("endpoint", "s3.example.com"),
            ("bucketName", "bucket-1"),
        ]))
        .unwrap();
        assert_eq!(
            got,
            expect(&[
                ("AWS_ACCESS_KEY_ID", "AK"),
                ("AWS_SECRET_ACCESS_KEY", "SK"),
                ("accessKey", "AK"),
                ("secretKey", "SK"),
                (
                    "cloud",
                    "[default]\naws_access_key_id=AK\naws_secret_access_key=SK\n"
                ),
                (
                    "blob_credentials.json",
                    r#"{"accounts":{"s3.example.com":{"api_key":"AK","secret":"SK"}}}"#
                ),
                ("endpoint", "s3.example.com"),
                ("bucketName", "bucket-1"),
                ("region", "us-east-1"),
                ("forcePathStyle", "true"),
            ])
        );
    }

    #[test]
    fn bucket_info_only() {
        let info = r#"{"metadata":{"name":"x"},"spec":{"bucketName":"bucket-2","authenticationType":"KEY",
            "secretS3":{"endpoint":"https://s3.example.com","region":"eu-1","accessKeyID":"AK2","accessSecretKey":"SK2"}}}"#;
        let got = project(&data(&[("BucketInfo", info)])).unwrap();
        assert_eq!(got["endpoint"], "s3.example.com");
        assert_eq!(got["bucketName"], "bucket-2");
        assert_eq!(got["region"], "eu-1");
        assert_eq!(got["AWS_ACCESS_KEY_ID"], "AK2");
        assert_eq!(
            got["blob_credentials.json"],
            r#"{"accounts":{"s3.example.com":{"api_key":"AK2","secret":"SK2"}}}"#
        );
    }

    #[test]
    fn flat_values_win_per_field_and_bucket_info_fills_the_rest() {
        let info = r#"{"spec":{"bucketName":"from-info","secretS3":{"accessKeyID":"AKI","accessSecretKey":"SKI","endpoint":"info.example.com"}}}"#;
        let got = project(&data(&[
            ("accessKey", "AKF"),
            ("secretKey", ""),
            ("BucketInfo", info),
        ]))
        .unwrap();
        assert_eq!(got["accessKey"], "AKF");
        assert_eq!(
            got["secretKey"], "SKI",
            "an empty flat value counts as absent"
        );
        assert_eq!(got["bucketName"], "from-info");
        assert_eq!(got["endpoint"], "info.example.com");
    }

    #[test]
    fn garbled_bucket_info() {
        // Both flat credentials present: the blob is ignored entirely, nothing is backfilled.
        let got = project(&data(&[
            ("accessKey", "AK"),
            ("secretKey", "SK"),
            ("BucketInfo", "{not json"),
        ]))
        .unwrap();
        assert_eq!(
            got["endpoint"], "seaweedfs-s3.tenant-root.svc:8333",
            "env fallback, no backfill"
        );
        assert!(!got.contains_key("bucketName"));
        // A flat credential missing: fatal, and the message names no value.
        let err = project(&data(&[("accessKey", "AK"), ("BucketInfo", "{not json")])).unwrap_err();
        assert_eq!(err.reason, Reason::SourceSecretMalformed);
        assert!(
            err.message.starts_with("parse BucketInfo: "),
            "{}",
            err.message
        );
        assert!(!err.message.contains("AK"));
        // Wrong JSON types are malformed too.
        let err = project(&data(&[("BucketInfo", r#"{"spec":{"bucketName":7}}"#)])).unwrap_err();
        assert_eq!(err.reason, Reason::SourceSecretMalformed);
    }

    #[test]
    fn missing_credentials_and_endpoint() {
        let err = project(&data(&[("secretKey", "SK")])).unwrap_err();
        assert_eq!(
            err,
            ProjectionError {
                reason: Reason::SourceSecretMalformed,
                message: "source credentials Secret tenant-root/bucket-cozy-backups-system-credentials missing accessKey".into()
            }
        );
        let err = project(&data(&[("accessKey", "AK")])).unwrap_err();
        assert!(err.message.ends_with("missing secretKey"));
        // No endpoint anywhere.
        let mut c = config();
        c.endpoint.clear();
        let parsed = parse_source(
            "tenant-root",
            "s",
            &data(&[("accessKey", "AK"), ("secretKey", "SK")]),
        )
        .unwrap();
        let err = desired_keys(&c, &parsed).unwrap_err();
        assert_eq!(
            err.message,
            "endpoint is empty in both source Secret tenant-root/bucket-cozy-backups-system-credentials and BACKUP_STORAGE_ENDPOINT"
        );
    }

    #[test]
    fn endpoint_fallback_strips_the_scheme() {
        let got = project(&data(&[("accessKey", "AK"), ("secretKey", "SK")])).unwrap();
        assert_eq!(got["endpoint"], "seaweedfs-s3.tenant-root.svc:8333");
        let got = project(&data(&[
            ("accessKey", "AK"),
            ("secretKey", "SK"),
            ("endpoint", "http://h:1/"),
        ]))
        .unwrap();
        assert_eq!(got["endpoint"], "h:1");
    }

    #[test]
    fn stale_optional_keys_are_removed_and_foreign_keys_kept() {
        let c = ProjectionConfig {
            region: String::new(),
            force_path_style: String::new(),
            ..config()
        };
        let parsed = parse_source(
            "ns",
            "s",
            &data(&[("accessKey", "AK"), ("secretKey", "SK"), ("endpoint", "h")]),
        )
        .unwrap();
        let keys = desired_keys(&c, &parsed).unwrap();
        let existing = data(&[
            ("region", "old"),
            ("bucketName", "old"),
            ("forcePathStyle", "false"),
            ("stale", "x"),
        ]);
        let got = keys.apply_to(&existing);
        assert!(
            !got.contains_key("region")
                && !got.contains_key("bucketName")
                && !got.contains_key("forcePathStyle")
        );
        assert_eq!(got["stale"], b"x");
        assert_eq!(got["endpoint"], b"h");
        // Projecting again onto the result changes nothing (idempotent: no write needed).
        assert_eq!(keys.apply_to(&got), got);
    }

    #[test]
    fn blob_credentials_escape_like_go() {
        let got = project(&data(&[
            ("accessKey", "A<K"),
            ("secretKey", "S&K>"),
            ("endpoint", "h"),
        ]))
        .unwrap();
        assert_eq!(
            got["blob_credentials.json"],
            r#"{"accounts":{"h":{"api_key":"A\u003cK","secret":"S\u0026K\u003e"}}}"#
        );
    }

    #[test]
    fn reasons_and_debug_output_never_leak_values() {
        assert!(Reason::SourceSecretMissing.is_transient() && Reason::ApiError.is_transient());
        assert!(
            !Reason::SourceSecretMalformed.is_transient()
                && !Reason::TargetSecretNotOwned.is_transient()
        );
        assert_eq!(Reason::ApiError.as_str(), "APIError");
        let parsed = parse_source(
            "ns",
            "s",
            &data(&[
                ("accessKey", "SECRET-AK"),
                ("secretKey", "SECRET-SK"),
                ("endpoint", "h"),
            ]),
        )
        .unwrap();
        let keys = desired_keys(&config(), &parsed).unwrap();
        let printed = format!("{parsed:?} {keys:?}");
        assert!(!printed.contains("SECRET-"), "{printed}");
        assert!(config().is_enabled());
        assert!(
            !ProjectionConfig {
                target_name: String::new(),
                ..config()
            }
            .is_enabled()
        );
    }
}
