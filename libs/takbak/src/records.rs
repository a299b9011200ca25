//! Operator identity and audit records, validated strictly.
//!
//! Both tools read a small identity JSON (exactly `volume`, `generation`, `claimUID`) and an operator
//! record. Unknown, missing, duplicated or empty fields are rejected. The record is an audit
//! acknowledgement, not proof of fencing: this module checks only its shape and its consistency with
//! the identities involved. Record contents never reach result JSON or metrics.

use serde::{Deserialize, Serialize};

use crate::error::{Error, FailureSource, Result, io_err};

/// Largest identity or record file accepted.
pub const MAX_RECORD_FILE_BYTES: u64 = 64 << 10;
/// Largest accepted string field.
pub const MAX_FIELD_BYTES: usize = 1024;

/// The exact identity of a replicated volume generation and its claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// ReplicatedVolume name.
    pub volume: String,
    /// Volume generation.
    pub generation: String,
    /// UID of the bound PersistentVolumeClaim.
    #[serde(rename = "claimUID")]
    pub claim_uid: String,
}

/// The purpose a record acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Purpose {
    /// The source application was stopped and its descriptors closed before the backup.
    #[serde(rename = "backup-quiesced")]
    BackupQuiesced,
    /// The restore target is isolated from old clients and storage.
    #[serde(rename = "restore-isolated")]
    RestoreIsolated,
}

/// The operator's audit record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Record {
    /// Record schema version; must be 1.
    pub version: u32,
    /// What the operator acknowledges.
    pub purpose: Purpose,
    /// The identity of the backed-up source.
    pub source: Identity,
    /// Incident or change identifier.
    #[serde(rename = "recordID")]
    pub record_id: String,
    /// The responsible operator.
    pub operator: String,
    /// How quiescence or isolation was achieved.
    pub method: String,
    /// Where the private audited evidence lives.
    pub evidence_reference: String,
    /// Must be `true`.
    pub operator_acknowledged: bool,
}

fn check_field(v: &str) -> Result<()> {
    if v.is_empty() {
        return Err(Error::Record("empty_field"));
    }
    if v.len() > MAX_FIELD_BYTES {
        return Err(Error::Record("field_too_long"));
    }
    if v.chars().any(char::is_control) {
        return Err(Error::Record("control_character_in_field"));
    }
    Ok(())
}

impl Identity {
    /// Parses and validates identity JSON.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let id: Self =
            serde_json::from_slice(bytes).map_err(|_| Error::Record("identity_malformed"))?;
        id.validate()?;
        Ok(id)
    }

    /// Checks every field is a non-empty bounded string without control characters.
    pub fn validate(&self) -> Result<()> {
        check_field(&self.volume)?;
        check_field(&self.generation)?;
        check_field(&self.claim_uid)
    }

    /// True when all three fields differ from `other`'s.
    pub fn differs_in_all_fields(&self, other: &Self) -> bool {
        self.volume != other.volume
            && self.generation != other.generation
            && self.claim_uid != other.claim_uid
    }
}

impl Record {
    /// Parses and validates a record JSON for `purpose`.
    pub fn parse(bytes: &[u8], purpose: Purpose) -> Result<Self> {
        let r: Self =
            serde_json::from_slice(bytes).map_err(|_| Error::Record("record_malformed"))?;
        if r.version != 1 {
            return Err(Error::Record("record_version_unsupported"));
        }
        if r.purpose != purpose {
            return Err(Error::Record("record_purpose_mismatch"));
        }
        if !r.operator_acknowledged {
            return Err(Error::Record("operator_not_acknowledged"));
        }
        r.source.validate()?;
        for f in [&r.record_id, &r.operator, &r.method, &r.evidence_reference] {
            check_field(f)?;
        }
        Ok(r)
    }
}

/// Backup: the record acknowledges quiescence of exactly the identity being archived.
pub fn check_backup(identity: &Identity, record: &Record) -> Result<()> {
    if record.source != *identity {
        return Err(Error::Record("record_source_differs_from_identity"));
    }
    Ok(())
}

/// Restore: the record names the archive's source, and the destination identity is new in all fields.
pub fn check_restore(
    destination: &Identity,
    record: &Record,
    archive_source: &Identity,
) -> Result<()> {
    if record.source != *archive_source {
        return Err(Error::Record("record_source_differs_from_archive"));
    }
    if !destination.differs_in_all_fields(archive_source) {
        return Err(Error::Record("destination_identity_not_new"));
    }
    Ok(())
}

/// Reads a bounded JSON file (identity or record) into memory.
pub fn read_bounded(path: &std::path::Path, kind: FailureSource) -> Result<Vec<u8>> {
    use std::io::Read;
    let f = std::fs::File::open(path).map_err(io_err("open", kind))?;
    let mut buf = Vec::new();
    f.take(MAX_RECORD_FILE_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(io_err("read", kind))?;
    if buf.len() as u64 > MAX_RECORD_FILE_BYTES {
        return Err(Error::Record("record_file_too_large"));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = r#"{"volume": "rv-source", "generation": "original-generation", "claimUID": "original-claim"}"#;

    fn record(purpose: &str, extra: &str) -> String {
        format!(
            r#"{{"version": 1, "purpose": "{purpose}",
                "source": {ID},
                "recordID": "incident-or-change-id", "operator": "responsible-operator",
                "method": "documented application stop and descriptor close",
                "evidenceReference": "private audited evidence location",
                "operatorAcknowledged": true{extra}}}"#
        )
    }

    #[test]
    fn seed_example_is_accepted() {
        let id = Identity::parse(ID.as_bytes()).unwrap();
        let r = Record::parse(
            record("backup-quiesced", "").as_bytes(),
            Purpose::BackupQuiesced,
        )
        .unwrap();
        check_backup(&id, &r).unwrap();
    }

    #[test]
    fn identity_rejections() {
        let cases = [
            (r#"{"volume":"a","generation":"b"}"#, "identity_malformed"),
            (
                r#"{"volume":"a","generation":"b","claimUID":"c","extra":1}"#,
                "identity_malformed",
            ),
            (
                r#"{"volume":"a","generation":"b","claimUID":"c","volume":"d"}"#,
                "identity_malformed",
            ),
            (
                r#"{"volume":"","generation":"b","claimUID":"c"}"#,
                "empty_field",
            ),
            (
                r#"{"volume":"a\n","generation":"b","claimUID":"c"}"#,
                "control_character_in_field",
            ),
            (
                r#"{"volume":1,"generation":"b","claimUID":"c"}"#,
                "identity_malformed",
            ),
            (r#"[]"#, "identity_malformed"),
        ];
        for (json, reason) in cases {
            assert_eq!(
                Identity::parse(json.as_bytes()).unwrap_err().reason(),
                reason,
                "{json}"
            );
        }
    }

    #[test]
    fn record_rejections() {
        let b = Purpose::BackupQuiesced;
        let cases = [
            (
                record("backup-quiesced", r#", "note": "x""#),
                b,
                "record_malformed",
            ),
            (record("restore-isolated", ""), b, "record_purpose_mismatch"),
            (record("other", ""), b, "record_malformed"),
            (
                record("backup-quiesced", "").replace("true", "false"),
                b,
                "operator_not_acknowledged",
            ),
            (
                record("backup-quiesced", "").replace(r#""version": 1"#, r#""version": 2"#),
                b,
                "record_version_unsupported",
            ),
            (
                record("backup-quiesced", "").replace(r#""operator": "responsible-operator","#, ""),
                b,
                "record_malformed",
            ),
            (
                record("backup-quiesced", "").replace("incident-or-change-id", ""),
                b,
                "empty_field",
            ),
        ];
        for (json, purpose, reason) in cases {
            assert_eq!(
                Record::parse(json.as_bytes(), purpose)
                    .unwrap_err()
                    .reason(),
                reason,
                "{json}"
            );
        }
    }

    #[test]
    fn restore_needs_matching_source_and_new_destination() {
        let src = Identity::parse(ID.as_bytes()).unwrap();
        let r = Record::parse(
            record("restore-isolated", "").as_bytes(),
            Purpose::RestoreIsolated,
        )
        .unwrap();
        let new = Identity {
            volume: "rv-new".into(),
            generation: "g2".into(),
            claim_uid: "c2".into(),
        };
        check_restore(&new, &r, &src).unwrap();
        let partly_new = Identity {
            volume: "rv-new".into(),
            ..src.clone()
        };
        assert_eq!(
            check_restore(&partly_new, &r, &src).unwrap_err().reason(),
            "destination_identity_not_new"
        );
        let other_src = Identity {
            volume: "rv-other".into(),
            ..src.clone()
        };
        assert_eq!(
            check_restore(&new, &r, &other_src).unwrap_err().reason(),
            "record_source_differs_from_archive"
        );
    }
}
