//! A catalog `Backup` as a signed record and back (feature `backup`): which of its fields a
//! record holds (user-set labels and annotations, spec, status; no server metadata, no
//! finalizers, no ownerReferences), the Backup re-created from a record (labelled
//! restored-from-catalog, annotated with the record's digest), and the digest itself. The
//! backup-runner and the catalog benchmark seal with the same code.

use std::collections::BTreeMap;

use api::backups::{Backup, BackupSpec, BackupStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use sha2::{Digest, Sha256};

use crate::catalog::{self as record, Payload, Rejection};

/// The label on a Backup re-created from its record.
pub const RESTORED_LABEL: &str = api::contract::labels::RESTORED_FROM_CATALOG;
/// The annotation naming the record a Backup was last written as (a digest of the record's bytes,
/// which reveals nothing of the key); absent means no record was written for it.
pub const RECORD_ANNOTATION: &str = "backups.cozystack.io/catalog-record";
/// The key of the signing key in its Secret.
pub const KEY_DATA: &str = "hmac-sha256.key";
/// Annotations never copied into a record.
const SKIPPED_ANNOTATIONS: [&str; 2] = [
    RECORD_ANNOTATION,
    "kubectl.kubernetes.io/last-applied-configuration",
];

/// The record bytes of `backup` sealed with `key`, and their digest (the annotation's value).
pub fn seal(key: &[u8], backup: &Backup) -> (Vec<u8>, String) {
    let bytes = record::seal(key, &payload(backup));
    let digest = digest(&bytes);
    (bytes, digest)
}

/// Verifies a record's bytes found at `object_key` and returns the Backup to create.
pub fn open(key: &[u8], object_key: &str, bytes: &[u8]) -> Result<Backup, Rejection> {
    let payload = record::open(key, object_key, bytes)?;
    restored_backup(payload, digest(bytes))
}

/// The digest of a record's bytes (first 16 bytes of SHA-256, hex).
pub fn digest(bytes: &[u8]) -> String {
    hex::encode(&Sha256::digest(bytes)[..16])
}

/// The signed payload of `backup`: its user-set metadata, spec and status; no server metadata, no
/// finalizers, no ownerReferences, and not the restored-from-catalog label (a restored Backup's
/// record is byte for byte the original's).
pub fn payload(backup: &Backup) -> Payload {
    let mut labels = backup.labels().clone();
    labels.remove(RESTORED_LABEL);
    let mut annotations = backup.annotations().clone();
    for skipped in SKIPPED_ANNOTATIONS {
        annotations.remove(skipped);
    }
    Payload {
        namespace: backup.namespace().unwrap_or_default(),
        name: backup.name_any(),
        labels,
        annotations,
        spec: serde_json::to_value(&backup.spec).unwrap_or_default(),
        status: backup
            .status
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok()),
    }
}

pub fn restored_backup(payload: Payload, digest: String) -> Result<Backup, Rejection> {
    let spec: BackupSpec = serde_json::from_value(payload.spec)
        .map_err(|e| Rejection::Invalid(format!("spec: {e}")))?;
    let status: Option<BackupStatus> = payload
        .status
        .map(serde_json::from_value)
        .transpose()
        .map_err(|e| Rejection::Invalid(format!("status: {e}")))?;
    let mut labels: BTreeMap<String, String> = payload.labels;
    labels.insert(RESTORED_LABEL.into(), "true".into());
    let mut annotations = payload.annotations;
    annotations.insert(RECORD_ANNOTATION.into(), digest);
    Ok(Backup {
        metadata: ObjectMeta {
            name: Some(payload.name),
            namespace: Some(payload.namespace),
            labels: Some(labels),
            annotations: Some(annotations),
            ..Default::default()
        },
        spec,
        status,
    })
}
