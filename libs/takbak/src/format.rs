//! The TAKBAK1 byte layout, manifest schema and structural validation (pure: no I/O).
//!
//! ```text
//! offset 0            header   16 bytes  "TAKBAK1\0" | version u32le = 1 | flags u32le = 0
//! offset 16           payload  P bytes   every stored extent, in manifest order, back to back
//! offset 16+P         manifest M bytes   UTF-8 JSON object (schema: `Manifest`)
//! offset 16+P+M       trailer  128 bytes see `Trailer`
//! file length = 16 + P + M + 128
//! ```
//!
//! Invariants an archive must satisfy (checked by [`validate_manifest`] and the reader): every byte is
//! covered by a check (header constants, per-extent SHA-256, manifest SHA-256, trailer SHA-256);
//! entries are in pre-order (a parent directory entry precedes its children); paths are relative,
//! normalised and unique; an extent starts at a multiple of 4 KiB, is not empty, lies inside one
//! 1 MiB chunk and inside the file, at most one per chunk, in increasing order, and their lengths
//! sum to P.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::limits::Limits;
use crate::records::{Identity, Record};

/// Header magic.
pub const MAGIC: [u8; 8] = *b"TAKBAK1\0";
/// Trailer magic.
pub const TRAILER_MAGIC: [u8; 8] = *b"TAKBAK1T";
/// Alignment of an extent's start: a stored chunk keeps only its non-zero 4 KiB blocks.
pub const SPAN_ALIGN: u64 = 4096;
/// Format version.
pub const VERSION: u32 = 1;
/// Header length in bytes.
pub const HEADER_LEN: u64 = 16;
/// Trailer length in bytes.
pub const TRAILER_LEN: u64 = 128;
/// Extent granularity: files are cut into 1 MiB chunks; all-zero chunks are not stored.
pub const CHUNK_SIZE: u64 = 1 << 20;
/// Name of the restore incomplete marker in the destination root; reserved in archives.
pub const MARKER_NAME: &str = ".takbak-restore-incomplete";
/// Longest accepted relative path in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest accepted path component in bytes.
pub const MAX_NAME_BYTES: usize = 255;
/// Longest accepted symlink target in bytes.
pub const MAX_SYMLINK_TARGET_BYTES: usize = 4095;
/// Permission bits TAKBAK1 preserves; anything else (setuid, setgid, sticky) is refused.
pub const PERMISSION_BITS: u32 = 0o777;

/// Encodes the 16-byte header.
pub fn encode_header() -> [u8; HEADER_LEN as usize] {
    let mut h = [0u8; HEADER_LEN as usize];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&VERSION.to_le_bytes());
    h
}

/// Checks the 16-byte header.
pub fn check_header(h: &[u8]) -> Result<()> {
    if h.len() != HEADER_LEN as usize || h[..8] != MAGIC {
        return Err(Error::Archive("bad_magic"));
    }
    if h[8..12] != VERSION.to_le_bytes() {
        return Err(Error::Archive("unsupported_version"));
    }
    if h[12..16] != [0; 4] {
        return Err(Error::Archive("unknown_header_flags"));
    }
    Ok(())
}

/// The fixed-size trailer that locates and authenticates the manifest.
///
/// ```text
///   0..8    "TAKBAK1T"
///   8..16   payload offset u64le (= 16)
///  16..24   payload length P u64le
///  24..32   manifest offset u64le (= 16 + P)
///  32..40   manifest length M u64le
///  40..72   SHA-256 of the manifest bytes
///  72..80   entry count u64le (must equal the manifest's entries)
///  80..96   reserved, zero
///  96..128  SHA-256 of trailer bytes 0..96
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    /// Payload length in bytes.
    pub payload_len: u64,
    /// Manifest length in bytes.
    pub manifest_len: u64,
    /// SHA-256 of the manifest bytes.
    pub manifest_sha256: [u8; 32],
    /// Number of manifest entries.
    pub entry_count: u64,
}

impl Trailer {
    /// Encodes the trailer, including its self-checksum.
    pub fn encode(&self) -> [u8; TRAILER_LEN as usize] {
        let mut t = [0u8; TRAILER_LEN as usize];
        t[..8].copy_from_slice(&TRAILER_MAGIC);
        t[8..16].copy_from_slice(&HEADER_LEN.to_le_bytes());
        t[16..24].copy_from_slice(&self.payload_len.to_le_bytes());
        t[24..32].copy_from_slice(&(HEADER_LEN + self.payload_len).to_le_bytes());
        t[32..40].copy_from_slice(&self.manifest_len.to_le_bytes());
        t[40..72].copy_from_slice(&self.manifest_sha256);
        t[72..80].copy_from_slice(&self.entry_count.to_le_bytes());
        let sum = Sha256::digest(&t[..96]);
        t[96..].copy_from_slice(&sum);
        t
    }

    /// Decodes and checks a trailer against the archive's total length and the limits.
    pub fn decode(t: &[u8], file_len: u64, limits: &Limits) -> Result<Self> {
        if t.len() != TRAILER_LEN as usize || t[..8] != TRAILER_MAGIC {
            return Err(Error::Archive("bad_trailer_magic"));
        }
        if Sha256::digest(&t[..96]).as_slice() != &t[96..] {
            return Err(Error::Archive("trailer_checksum_mismatch"));
        }
        let u = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&t[r]);
            u64::from_le_bytes(b)
        };
        let (payload_off, payload_len, manifest_off, manifest_len) =
            (u(8..16), u(16..24), u(24..32), u(32..40));
        if t[80..96] != [0; 16] {
            return Err(Error::Archive("trailer_reserved_nonzero"));
        }
        if payload_off != HEADER_LEN || Some(manifest_off) != HEADER_LEN.checked_add(payload_len) {
            return Err(Error::Archive("trailer_offsets_inconsistent"));
        }
        let end = manifest_off
            .checked_add(manifest_len)
            .and_then(|e| e.checked_add(TRAILER_LEN));
        if end != Some(file_len) {
            return Err(Error::Archive("archive_length_mismatch"));
        }
        if manifest_len > limits.max_manifest_bytes {
            return Err(Error::Limit("manifest_bytes"));
        }
        if payload_len > limits.max_payload_bytes {
            return Err(Error::Limit("payload_bytes"));
        }
        let entry_count = u(72..80);
        if entry_count > limits.max_entries {
            return Err(Error::Limit("entries"));
        }
        let mut manifest_sha256 = [0u8; 32];
        manifest_sha256.copy_from_slice(&t[40..72]);
        Ok(Self {
            payload_len,
            manifest_len,
            manifest_sha256,
            entry_count,
        })
    }
}

/// The manifest: archive-wide facts plus one entry per archived name, in pre-order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Manifest {
    /// Always `"TAKBAK1"`.
    pub format: String,
    /// Always 1.
    pub version: u32,
    /// Always 1048576.
    pub chunk_size: u64,
    /// RFC 3339 UTC time the backup started.
    pub created_at: String,
    /// The identity of the archived volume.
    pub source: Identity,
    /// The operator's backup record (purpose `backup-quiesced`).
    pub record: Record,
    /// All entries, root (`"."`) first, then pre-order with byte-wise sorted names.
    pub entries: Vec<Entry>,
}

/// Entry kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file (the first name of its inode in the archive).
    File,
    /// A symbolic link with an opaque target.
    Symlink,
    /// A further name of an earlier `file` entry's inode.
    Hardlink,
}

/// One stored extent: `[offset, length, sha256-hex]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Extent(pub u64, pub u64, pub String);

/// One archived name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Entry {
    /// `"."` for the root; otherwise `/`-separated relative components.
    pub path: String,
    /// Entry kind.
    #[serde(rename = "type")]
    pub kind: Kind,
    /// Permission bits (dir, file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// Owner (dir, file, symlink).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// Group (dir, file, symlink).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// Access time, nanoseconds since the epoch (dir, file, symlink).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub atime_ns: Option<i64>,
    /// Modification time, nanoseconds since the epoch (dir, file, symlink).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime_ns: Option<i64>,
    /// Logical size (file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Stored extents (file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extents: Option<Vec<Extent>>,
    /// Symlink target (symlink) or path of the earlier `file` entry (hardlink).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// Aggregate counts of a validated manifest.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// All entries including the root.
    pub entries: u64,
    /// Regular file inodes.
    pub files: u64,
    /// Directories including the root.
    pub directories: u64,
    /// Symbolic links.
    pub symlinks: u64,
    /// Extra names of regular files.
    pub hardlinks: u64,
    /// Sum of logical file sizes (once per inode).
    pub logical_bytes: u64,
    /// Stored payload bytes.
    pub payload_bytes: u64,
    /// Stored extents.
    pub extents: u64,
}

/// Splits a validated non-root path into (parent, name); the root's children have parent `"."`.
pub fn split_parent(path: &str) -> (&str, &str) {
    match path.rfind('/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (".", path),
    }
}

/// Checks a relative path's syntax (not its place in the tree).
pub fn check_path(path: &str) -> Result<()> {
    if path.is_empty() || path.len() > MAX_PATH_BYTES {
        return Err(Error::Archive("path_length"));
    }
    if path.starts_with('/') {
        return Err(Error::Archive("path_absolute"));
    }
    for c in path.split('/') {
        if c.is_empty() || c == "." || c == ".." {
            return Err(Error::Archive("path_not_normalised"));
        }
        if c.len() > MAX_NAME_BYTES || c.contains('\0') {
            return Err(Error::Archive("path_component_invalid"));
        }
    }
    if path == MARKER_NAME {
        return Err(Error::Archive("path_reserved"));
    }
    Ok(())
}

fn is_sha_hex(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn need<T: Copy>(v: Option<T>, reason: &'static str) -> Result<T> {
    v.ok_or(Error::Archive(reason))
}

/// Validates a manifest's structure against `limits`, given the payload length from the trailer.
///
/// This is the single place that decides whether a manifest is acceptable; verify, list and restore
/// all call it before anything else uses the entries.
pub fn validate_manifest(m: &Manifest, payload_len: u64, limits: &Limits) -> Result<Totals> {
    if m.format != "TAKBAK1" || m.version != VERSION || m.chunk_size != CHUNK_SIZE {
        return Err(Error::Archive("manifest_header_fields"));
    }
    m.source
        .validate()
        .map_err(|_| Error::Archive("manifest_source_identity"))?;
    if m.record.source != m.source {
        return Err(Error::Archive("manifest_record_source_mismatch"));
    }
    if m.entries.len() as u64 > limits.max_entries {
        return Err(Error::Limit("entries"));
    }
    let mut t = Totals::default();
    // Path -> kind of every entry seen so far; also detects duplicates.
    let mut seen: HashMap<&str, Kind> = HashMap::with_capacity(m.entries.len());
    for (i, e) in m.entries.iter().enumerate() {
        t.entries += 1;
        if i == 0 {
            if e.path != "." || e.kind != Kind::Dir {
                return Err(Error::Archive("root_entry_missing"));
            }
        } else {
            check_path(&e.path)?;
            let (parent, _) = split_parent(&e.path);
            match seen.get(parent) {
                Some(Kind::Dir) => {}
                Some(_) => return Err(Error::Archive("parent_not_directory")),
                None => return Err(Error::Archive("parent_missing_or_out_of_order")),
            }
        }
        if seen.insert(e.path.as_str(), e.kind).is_some() {
            return Err(Error::Archive("duplicate_path"));
        }
        let meta_ok = |with_mode: bool| -> Result<()> {
            need(e.uid, "uid_missing")?;
            need(e.gid, "gid_missing")?;
            need(e.atime_ns, "atime_missing")?;
            need(e.mtime_ns, "mtime_missing")?;
            match (with_mode, e.mode) {
                (true, Some(m)) if m & !PERMISSION_BITS == 0 => Ok(()),
                (true, Some(_)) => Err(Error::Archive("mode_bits_invalid")),
                (true, None) => Err(Error::Archive("mode_missing")),
                (false, None) => Ok(()),
                (false, Some(_)) => Err(Error::Archive("unexpected_field")),
            }
        };
        match e.kind {
            Kind::Dir => {
                meta_ok(true)?;
                if e.size.is_some() || e.extents.is_some() || e.target.is_some() {
                    return Err(Error::Archive("unexpected_field"));
                }
                t.directories += 1;
            }
            Kind::Symlink => {
                meta_ok(false)?;
                let target = e
                    .target
                    .as_deref()
                    .ok_or(Error::Archive("target_missing"))?;
                if target.is_empty()
                    || target.len() > MAX_SYMLINK_TARGET_BYTES
                    || target.contains('\0')
                {
                    return Err(Error::Archive("symlink_target_invalid"));
                }
                if e.size.is_some() || e.extents.is_some() {
                    return Err(Error::Archive("unexpected_field"));
                }
                t.symlinks += 1;
            }
            Kind::Hardlink => {
                if e.mode.is_some()
                    || e.uid.is_some()
                    || e.gid.is_some()
                    || e.atime_ns.is_some()
                    || e.mtime_ns.is_some()
                    || e.size.is_some()
                    || e.extents.is_some()
                {
                    return Err(Error::Archive("unexpected_field"));
                }
                let target = e
                    .target
                    .as_deref()
                    .ok_or(Error::Archive("target_missing"))?;
                match seen.get(target) {
                    Some(Kind::File) => {}
                    Some(_) => return Err(Error::Archive("hardlink_target_not_regular")),
                    None => return Err(Error::Archive("hardlink_target_missing")),
                }
                t.hardlinks += 1;
            }
            Kind::File => {
                meta_ok(true)?;
                if e.target.is_some() {
                    return Err(Error::Archive("unexpected_field"));
                }
                let size = need(e.size, "size_missing")?;
                if size > limits.max_file_size {
                    return Err(Error::Limit("file_size"));
                }
                let extents = e
                    .extents
                    .as_deref()
                    .ok_or(Error::Archive("extents_missing"))?;
                if extents.len() as u64 > limits.max_extents_per_file {
                    return Err(Error::Limit("extents_per_file"));
                }
                let mut prev_chunk: Option<u64> = None;
                for Extent(off, len, sum) in extents {
                    if off % SPAN_ALIGN != 0 {
                        return Err(Error::Archive("extent_unaligned"));
                    }
                    let chunk = off / CHUNK_SIZE;
                    if prev_chunk.is_some_and(|p| chunk <= p) {
                        return Err(Error::Archive("extent_overlap_or_unordered"));
                    }
                    let chunk_end = (chunk + 1).saturating_mul(CHUNK_SIZE).min(size);
                    if *len == 0 || *off >= size || *len > chunk_end - off {
                        return Err(Error::Archive("extent_beyond_size_or_bad_length"));
                    }
                    if !is_sha_hex(sum) {
                        return Err(Error::Archive("extent_checksum_syntax"));
                    }
                    prev_chunk = Some(chunk);
                    t.payload_bytes += len;
                    if t.payload_bytes > limits.max_payload_bytes {
                        return Err(Error::Limit("payload_bytes"));
                    }
                }
                t.extents += extents.len() as u64;
                t.files += 1;
                t.logical_bytes += size;
            }
        }
    }
    if t.payload_bytes != payload_len {
        return Err(Error::Archive("payload_length_mismatch"));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_rejections() {
        let h = encode_header();
        check_header(&h).unwrap();
        let mut bad = h;
        bad[12] = 1;
        assert_eq!(
            check_header(&bad).unwrap_err().reason(),
            "unknown_header_flags"
        );
        bad = h;
        bad[8] = 2;
        assert_eq!(
            check_header(&bad).unwrap_err().reason(),
            "unsupported_version"
        );
    }

    #[test]
    fn trailer_round_trip() {
        let t = Trailer {
            payload_len: 10,
            manifest_len: 20,
            manifest_sha256: [7; 32],
            entry_count: 3,
        };
        let bytes = t.encode();
        let len = HEADER_LEN + 10 + 20 + TRAILER_LEN;
        assert_eq!(Trailer::decode(&bytes, len, &Limits::default()).unwrap(), t);
        assert_eq!(
            Trailer::decode(&bytes, len + 1, &Limits::default())
                .unwrap_err()
                .reason(),
            "archive_length_mismatch"
        );
    }

    #[test]
    fn path_syntax() {
        for ok in ["a", "a b/c", "ünï/côdé", "a\tb"] {
            check_path(ok).unwrap();
        }
        for (bad, reason) in [
            ("/etc", "path_absolute"),
            ("../x", "path_not_normalised"),
            ("a/../../b", "path_not_normalised"),
            ("a//b", "path_not_normalised"),
            ("./a", "path_not_normalised"),
            ("a/", "path_not_normalised"),
            ("", "path_length"),
            (MARKER_NAME, "path_reserved"),
        ] {
            assert_eq!(check_path(bad).unwrap_err().reason(), reason, "{bad}");
        }
        assert_eq!(split_parent("a/b/c"), ("a/b", "c"));
        assert_eq!(split_parent("c"), (".", "c"));
    }
}
