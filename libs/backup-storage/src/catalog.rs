//! The catalog record: one object per catalog `Backup` in the system bucket, at
//! `catalog/v1/<namespace>/<name>.json`, authenticated with HMAC-SHA256 under a key only the
//! platform holds (docs/disaster-recovery.md, "Record format").
//!
//! ```text
//!  {"format": "cozy-backups.catalog.v1",
//!   "keyId":  "<16 hex: SHA-256 of a label and the key, truncated>",
//!   "mac":    "hmac-sha256:<64 hex>",          MAC = HMAC(key, FORMAT ‖ 0x00 ‖ canonical(payload))
//!   "payload": {"namespace": N, "name": B,     the path binding, inside the signed bytes
//!               "labels": {…}, "annotations": {…}, "spec": {…}, "status": {…}}}
//! ```
//!
//! `canonical` is JSON without whitespace, object keys sorted by their bytes at every depth,
//! strings and numbers printed by `serde_json`. [`open`] refuses, in this order: an object key that
//! is not a record path, more than [`RECORD_MAX_BYTES`], bytes that are not a JSON object, another
//! format, a missing or wrong MAC (also: a record signed with another key), a payload whose
//! namespace/name differ from the path. Nothing here ever prints the key or a MAC it computed.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The prefix of every record in the bucket.
pub const PREFIX: &str = "catalog/v1/";
/// The `format` of a version-1 record.
pub const FORMAT: &str = "cozy-backups.catalog.v1";
/// The largest record read or accepted (a Backup is bounded by the API server's ~1.5 MB object
/// limit; real records are a few kB).
pub const RECORD_MAX_BYTES: u64 = 1024 * 1024;
/// The size of the key the platform generates.
pub const KEY_BYTES: usize = 32;
/// The shortest key accepted.
pub const KEY_MIN_BYTES: usize = 16;
const MAC_PREFIX: &str = "hmac-sha256:";

/// Why a record was refused; [`Rejection::reason`] is the metric label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    /// The object key is not `catalog/v1/<namespace>/<name>.json` with valid names.
    #[error("object key is not catalog/v1/<namespace>/<name>.json with Kubernetes names")]
    Key,
    /// Larger than [`RECORD_MAX_BYTES`].
    #[error("record larger than {RECORD_MAX_BYTES} bytes")]
    TooLarge,
    /// Not a JSON object of the record's shape.
    #[error("malformed record: {0}")]
    Malformed(String),
    /// Another format than [`FORMAT`].
    #[error("unsupported record format {0:?}")]
    Version(String),
    /// No MAC, or one that does not verify under the platform's key.
    #[error("{0}")]
    Signature(&'static str),
    /// The signed namespace/name differ from the path the record was found at.
    #[error("record for {signed} found at the path of {path}")]
    PathMismatch {
        /// `<namespace>/<name>` inside the signed payload.
        signed: String,
        /// `<namespace>/<name>` of the object key.
        path: String,
    },
    /// Verified, but its Backup does not decode (set by the caller).
    #[error("invalid Backup in record: {0}")]
    Invalid(String),
}

impl Rejection {
    /// The bounded label of the rejected-records counter.
    pub fn reason(&self) -> &'static str {
        match self {
            Rejection::Key => "bad_key",
            Rejection::TooLarge => "too_large",
            Rejection::Malformed(_) => "malformed",
            Rejection::Version(_) => "unsupported_version",
            Rejection::Signature(_) => "bad_signature",
            Rejection::PathMismatch { .. } => "path_mismatch",
            Rejection::Invalid(_) => "invalid_backup",
        }
    }

    /// Every reason, for documentation and for zero-initialising the counter.
    pub const REASONS: [&'static str; 7] = [
        "bad_key",
        "too_large",
        "malformed",
        "unsupported_version",
        "bad_signature",
        "path_mismatch",
        "invalid_backup",
    ];
}

/// The signed content of a record.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Payload {
    /// The Backup's namespace (must match the path).
    pub namespace: String,
    /// The Backup's name (must match the path).
    pub name: String,
    /// User-set labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// User-set annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// `spec` as the API has it.
    pub spec: Value,
    /// `status` as the API has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Value>,
}

/// The object key of the record of Backup `namespace/name`.
pub fn object_key(namespace: &str, name: &str) -> String {
    format!("{PREFIX}{namespace}/{name}.json")
}

/// The prefix of the records of one namespace.
pub fn namespace_prefix(namespace: &str) -> String {
    format!("{PREFIX}{namespace}/")
}

/// `(namespace, name)` of a record path, when both are valid Kubernetes names.
pub fn parse_object_key(key: &str) -> Option<(&str, &str)> {
    let rest = key.strip_prefix(PREFIX)?.strip_suffix(".json")?;
    let (ns, name) = rest.split_once('/')?;
    (is_dns_label(ns) && is_dns_subdomain(name)).then_some((ns, name))
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A short public identifier of a key (never the key): the first 8 bytes of
/// SHA-256("cozy-backups catalog key id" ‖ 0x00 ‖ key), hex. Lets an operator see that a bucket's
/// records were signed with another key than the installed one.
pub fn key_id(key: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(b"cozy-backups catalog key id\0");
    h.update(key);
    hex::encode(&h.finalize()[..8])
}

/// The canonical serialisation the MAC covers: no whitespace, keys sorted at every depth.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        other => {
            let _ = write!(out, "{other}");
        }
    }
}

fn mac(key: &[u8], payload: &Value) -> Hmac<Sha256> {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key size");
    mac.update(FORMAT.as_bytes());
    mac.update(&[0]);
    mac.update(canonical(payload).as_bytes());
    mac
}

/// The record bytes of `payload`, signed with `key`. Deterministic: the same payload and key give
/// the same bytes (rewriting an unchanged record is harmless).
pub fn seal(key: &[u8], payload: &Payload) -> Vec<u8> {
    let value = serde_json::to_value(payload).expect("a payload serialises");
    let tag = mac(key, &value).finalize().into_bytes();
    let mut record = serde_json::Map::new();
    record.insert("format".into(), FORMAT.into());
    record.insert("keyId".into(), key_id(key).into());
    record.insert(
        "mac".into(),
        format!("{MAC_PREFIX}{}", hex::encode(tag)).into(),
    );
    record.insert("payload".into(), value);
    canonical(&Value::Object(record)).into_bytes()
}

/// Verifies the record found at `object_key` and returns its payload (see the module's order).
pub fn open(key: &[u8], object_key: &str, bytes: &[u8]) -> Result<Payload, Rejection> {
    let (path_ns, path_name) = parse_object_key(object_key).ok_or(Rejection::Key)?;
    if bytes.len() as u64 > RECORD_MAX_BYTES {
        return Err(Rejection::TooLarge);
    }
    // serde_json's messages carry a line and column, never input text.
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| Rejection::Malformed(format!("not JSON: {e}")))?;
    let Value::Object(record) = value else {
        return Err(Rejection::Malformed("not a JSON object".into()));
    };
    match record.get("format") {
        Some(Value::String(f)) if f == FORMAT => {}
        Some(Value::String(f)) => {
            return Err(Rejection::Version(f.chars().take(64).collect()));
        }
        _ => return Err(Rejection::Malformed("no format".into())),
    }
    let payload = record
        .get("payload")
        .filter(|p| p.is_object())
        .ok_or_else(|| Rejection::Malformed("no payload object".into()))?;
    let tag = match record.get("mac") {
        Some(Value::String(m)) => m
            .strip_prefix(MAC_PREFIX)
            .and_then(|h| hex::decode(h).ok())
            .ok_or(Rejection::Signature("MAC is not hmac-sha256:<hex>"))?,
        _ => return Err(Rejection::Signature("record is not signed (no MAC)")),
    };
    if mac(key, payload).verify_slice(&tag).is_err() {
        let other_key =
            matches!(record.get("keyId"), Some(Value::String(id)) if *id != key_id(key));
        return Err(Rejection::Signature(if other_key {
            "MAC does not verify: the record names another signing key"
        } else {
            "MAC does not verify under the platform's key"
        }));
    }
    let payload: Payload = serde_json::from_value(payload.clone())
        .map_err(|e| Rejection::Malformed(format!("payload: {e}")))?;
    if payload.namespace != path_ns || payload.name != path_name {
        return Err(Rejection::PathMismatch {
            signed: format!(
                "{}/{}",
                truncated(&payload.namespace),
                truncated(&payload.name)
            ),
            path: format!("{path_ns}/{path_name}"),
        });
    }
    Ok(payload)
}

fn truncated(s: &str) -> String {
    s.chars().take(253).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn payload(ns: &str, name: &str) -> Payload {
        Payload {
            namespace: ns.into(),
            name: name.into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            spec: json!({"applicationRef": {"kind": "Postgres", "name": "db"}, "takenAt": "2026-01-01T00:00:00Z"}),
            status: Some(json!({"phase": "Ready", "artifact": {"uri": "cnpg://db/b1"}})),
        }
    }

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    #[test]
    fn round_trip_and_determinism() {
        let p = payload("tenant-a", "b1");
        let bytes = seal(KEY, &p);
        assert_eq!(bytes, seal(KEY, &p));
        assert_eq!(open(KEY, &object_key("tenant-a", "b1"), &bytes).unwrap(), p);
        // Key order and whitespace of the file do not matter: the MAC covers the canonical form.
        let mut v: Value = serde_json::from_slice(&bytes).unwrap();
        let pretty = serde_json::to_vec_pretty(&v).unwrap();
        assert_eq!(
            open(KEY, &object_key("tenant-a", "b1"), &pretty).unwrap(),
            p
        );
        v["payload"]["status"]["artifact"]["uri"] = json!("cnpg://other/b9");
        let tampered = serde_json::to_vec(&v).unwrap();
        assert_eq!(
            open(KEY, &object_key("tenant-a", "b1"), &tampered)
                .unwrap_err()
                .reason(),
            "bad_signature"
        );
    }

    #[test]
    fn refusals() {
        let good = seal(KEY, &payload("tenant-a", "b1"));
        let at = |k: &str, b: &[u8]| open(KEY, k, b).map(|_| ()).unwrap_err().reason();
        assert_eq!(at("catalog/v1/tenant-b/b1.json", &good), "path_mismatch");
        assert_eq!(at("catalog/v1/tenant-a/b2.json", &good), "path_mismatch");
        assert_eq!(at("catalog/v1/Tenant/b1.json", &good), "bad_key");
        assert_eq!(at("catalog/v1/tenant-a/b1", &good), "bad_key");
        assert_eq!(at("catalog/v1/a/b/c.json", &good), "bad_key");
        let k = "catalog/v1/tenant-a/b1.json";
        assert_eq!(at(k, &good[..good.len() / 2]), "malformed");
        assert_eq!(at(k, b"not json"), "malformed");
        assert_eq!(at(k, b"[1]"), "malformed");
        assert_eq!(
            at(k, br#"{"format":"cozy-backups.catalog.v9"}"#),
            "unsupported_version"
        );
        let forged = seal(
            b"the tenant's own key, not ours!!",
            &payload("tenant-a", "b1"),
        );
        assert_eq!(at(k, &forged), "bad_signature");
        let mut unsigned: Value = serde_json::from_slice(&good).unwrap();
        unsigned.as_object_mut().unwrap().remove("mac");
        assert_eq!(
            at(k, &serde_json::to_vec(&unsigned).unwrap()),
            "bad_signature"
        );
        let big = vec![b' '; RECORD_MAX_BYTES as usize + 1];
        assert_eq!(at(k, &big), "too_large");
        match open(b"the tenant's own key, not ours!!", k, &good) {
            Err(Rejection::Signature(m)) => assert!(m.contains("another signing key")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn canonical_sorts_keys_at_every_depth() {
        let v = json!({"b": [ {"z": 1, "a": "x\"y"} ], "a": null});
        assert_eq!(canonical(&v), r#"{"a":null,"b":[{"a":"x\"y","z":1}]}"#);
        assert_eq!(key_id(KEY).len(), 16);
        assert!(!key_id(KEY).contains(&hex::encode(KEY)[..8]));
    }
}
