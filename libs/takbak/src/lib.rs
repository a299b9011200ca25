//! TAKBAK1: the archive format and the engines behind `backup-volume` and `restore-volume`.
//!
//! Role: archive a quiesced, mounted application directory into one verifiable file, verify or list
//! such a file, and restore it into a new empty directory, standalone (no Kubernetes calls).
//!
//! ```text
//!  records ──┐                       ┌──▶ reader::open ──▶ reader::verify ──▶ restore
//!  limits  ──┼──▶ backup ──▶ archive ┤
//!  format  ──┘   (scan → read/hash ║ write → publish)    └──▶ reader::list
//!                                 result (one JSON object) + optional metrics textfile
//! ```
//!
//! Invariants:
//! * Memory is bounded by the manifest, the metadata inventory and a fixed number of 1 MiB buffers.
//! * An archive appears under its final name only complete and fsynced, never over an existing file.
//! * A restore writes nothing before the whole archive verified, never follows a symlink for a write,
//!   keeps the incomplete marker on disk until the tree is synced and re-verified, and reports any
//!   failure after the marker's removal as `restore_publication_uncertain_keep_clients_stopped`.
//! * Results and metrics carry only counts, hashes, durations and static strings: never paths, file
//!   contents, record contents or foreign error text.
//!
//! The format itself is specified in `docs/takbak1.md`.

pub mod backup;
pub mod ctx;
pub mod dio;
pub mod durable;
pub mod error;
pub mod extent_hash;
pub mod format;
pub mod fsutil;
pub mod limits;
pub mod progress;
pub mod reader;
pub mod records;
pub mod restore;
pub mod result;
pub mod tool;

pub use error::{Error, Result};
