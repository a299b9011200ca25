//! Operation limits: defaults from the TAKBAK1 contract and the only ways flags may change them.
//!
//! Entry and payload limits may only be lowered; the deadline may be chosen between one second and
//! one hour. The manifest, extents-per-file and logical-file-size limits are fixed by the format.

use std::time::Duration;

use crate::error::{Error, Result};

/// Default maximum number of manifest entries (including the root).
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;
/// Maximum manifest size in bytes (64 MiB).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;
/// Maximum extents per regular file.
pub const MAX_EXTENTS_PER_FILE: u64 = 65_536;
/// Maximum logical size of one regular file (1 TiB).
pub const MAX_FILE_SIZE: u64 = 1 << 40;
/// Default maximum stored payload bytes (8 GiB).
pub const DEFAULT_MAX_PAYLOAD_BYTES: u64 = 8 << 30;
/// Default operation deadline in seconds.
pub const DEFAULT_DEADLINE_SECS: u64 = 600;
/// Largest deadline a flag may select (one hour).
pub const MAX_DEADLINE_SECS: u64 = 3600;

/// The limits in force for one operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Maximum manifest entries.
    pub max_entries: u64,
    /// Maximum stored payload bytes.
    pub max_payload_bytes: u64,
    /// Maximum manifest bytes (fixed).
    pub max_manifest_bytes: u64,
    /// Maximum extents per file (fixed).
    pub max_extents_per_file: u64,
    /// Maximum logical file size (fixed).
    pub max_file_size: u64,
    /// Operation deadline.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_entries: DEFAULT_MAX_ENTRIES,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            max_manifest_bytes: MAX_MANIFEST_BYTES,
            max_extents_per_file: MAX_EXTENTS_PER_FILE,
            max_file_size: MAX_FILE_SIZE,
            deadline: Duration::from_secs(DEFAULT_DEADLINE_SECS),
        }
    }
}

impl Limits {
    /// Applies operator flags. Entry and payload limits can only go down (to at least 1 / 0), the
    /// deadline must lie in `1..=3600` seconds.
    pub fn from_flags(
        max_entries: Option<u64>,
        max_payload_bytes: Option<u64>,
        deadline_secs: Option<u64>,
    ) -> Result<Self> {
        let mut l = Self::default();
        if let Some(n) = max_entries {
            if n == 0 || n > DEFAULT_MAX_ENTRIES {
                return Err(Error::Usage("max_entries_out_of_range"));
            }
            l.max_entries = n;
        }
        if let Some(n) = max_payload_bytes {
            if n > DEFAULT_MAX_PAYLOAD_BYTES {
                return Err(Error::Usage("max_payload_bytes_out_of_range"));
            }
            l.max_payload_bytes = n;
        }
        if let Some(s) = deadline_secs {
            if s == 0 || s > MAX_DEADLINE_SECS {
                return Err(Error::Usage("deadline_out_of_range"));
            }
            l.deadline = Duration::from_secs(s);
        }
        Ok(l)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_only_lower_limits_and_bound_the_deadline() {
        assert_eq!(
            Limits::from_flags(None, None, None).unwrap(),
            Limits::default()
        );
        let l = Limits::from_flags(Some(10), Some(4096), Some(3600)).unwrap();
        assert_eq!(
            (l.max_entries, l.max_payload_bytes, l.deadline),
            (10, 4096, Duration::from_secs(3600))
        );
        for (e, p, d, reason) in [
            (Some(100_001), None, None, "max_entries_out_of_range"),
            (Some(0), None, None, "max_entries_out_of_range"),
            (
                None,
                Some((8 << 30) + 1),
                None,
                "max_payload_bytes_out_of_range",
            ),
            (None, None, Some(3601), "deadline_out_of_range"),
            (None, None, Some(0), "deadline_out_of_range"),
        ] {
            assert_eq!(Limits::from_flags(e, p, d).unwrap_err().reason(), reason);
        }
    }
}
