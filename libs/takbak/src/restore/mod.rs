//! Restore: validate the whole archive, then rebuild the tree in an empty destination under the
//! incomplete-marker protocol, re-verify it, and only then publish.
//!
//! ```text
//!  destination empty? → open archive (framing, manifest, limits, records)
//!  → read the whole archive (O_DIRECT prefetch): whole-archive SHA-256 on the reading thread,
//!    each extent's SHA-256 = manifest? + its ExtentCheck on a pool            [verify_archive]
//!  → still empty? → create MARKER (O_EXCL) + fsync marker + fsync root         [create_marker]
//!  → reader thread: each extent's non-zero span, read again ──bounded channel──▶ here:
//!      mkdirat / openat(O_EXCL|O_NOFOLLOW) + ftruncate + pwrite non-zero blocks (O_DIRECT, on two
//!      writer threads, for files ≥ 1 MiB) / symlinkat / linkat, ownership, mode, times (after the
//!      file's writes finished); directory metadata last                      [write_tree]
//!  → re-read every entry against the manifest (type, mode, owner, ns times, size, content against
//!    the ExtentChecks, zero ranges, link identity and counts, symlink targets, no extra names)
//!                                                                            [verify_tree]
//!  → durability (crate::durable): one syncfs(root) on allow-listed file systems, otherwise
//!    syncfs + fsync of each file and each directory (children first) and the root  [sync_tree]
//!  → unlink MARKER → root times → fsync root → marker absent?                [publish_restore]
//! ```
//!
//! The second read of the archive is not trusted: the re-verification compares the written
//! tree with [`ExtentCheck`]s taken from the validated bytes (see [`crate::extent_hash`]), so an
//! archive that changes between the reads fails the restore with the marker in place.
//!
//! Invariants: nothing is written before the archive verified; every create is relative to a
//! directory descriptor we created, with `O_NOFOLLOW`/`O_EXCL`, so symlinks are never traversed and
//! nothing pre-existing is overwritten; the marker exists on disk whenever the tree is incomplete or
//! unverified; any failure after the marker's unlink is reported as
//! `restore_publication_uncertain_keep_clients_stopped` (and the marker is recreated if possible).
//! A partial tree is never resumed: the destination must be empty.
//!
//! Stages live in their own modules: [`write`] (`write_tree`: the tree from the archive) and
//! [`verify`] (`verify_tree`: the written tree against the manifest and the extent checks).

use std::ffi::CString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{AtFlags, Gid, Mode, OFlags, SeekFrom as RSeek, Uid};
use rustix::io::Errno;

use crate::ctx::{Ctx, Phase};
use crate::dio::{AlignedBuf, ExtentPrefetch, PrefetchReader};
use crate::durable::Durability;
use crate::error::{Error, FailureSource as Src, Result, errno_err, io_err};
use crate::extent_hash::{ExtentCheck, ExtentHasher};
use crate::format::{self, CHUNK_SIZE, Entry, HEADER_LEN, Kind, MARKER_NAME};
use crate::fsutil;
use crate::limits::Limits;
use crate::reader::{self, Opened};
use crate::records::{Identity, Record};
use crate::result::Report;

mod verify;
mod write;

use verify::verify_tree;
use write::write_tree;

/// Files at least this large are written with `O_DIRECT` (when allowed) and re-read through a
/// prefetching `O_DIRECT` reader; smaller files stay in the page cache like any other small write.
pub(crate) const DIRECT_MIN_FILE: u64 = 1 << 20;

/// Text of the incomplete marker (no paths, no record contents).
pub const MARKER_TEXT: &[u8] =
    b"TAKBAK1 restore incomplete or unverified: do not use this volume; delete it and restore into a fresh one.\n";

/// What to restore and where.
#[derive(Debug, Clone)]
pub struct RestoreOptions {
    /// The new, empty, mounted destination root.
    pub root: PathBuf,
    /// The archive to restore.
    pub archive: PathBuf,
    /// The destination identity (must differ in all fields from the archive's source).
    pub identity: Identity,
    /// The operator's `restore-isolated` record.
    pub record: Record,
    /// Limits in force.
    pub limits: Limits,
    /// The archive SHA-256 the operator recorded independently; when given, a different archive
    /// is refused before the destination is touched.
    pub expect_sha256: Option<[u8; 32]>,
}

fn cname(s: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::Archive("path_component_invalid"))
}

fn dst(op: &'static str) -> impl Fn(Errno) -> Error {
    errno_err(op, Src::Destination)
}

fn check_empty(root: &OwnedFd) -> Result<()> {
    let names = fsutil::list_dir(root).map_err(dst("read_destination"))?;
    if !names.is_empty() {
        return Err(Error::Destination("not_empty"));
    }
    Ok(())
}

/// Runs a restore. On success the destination holds exactly the archived tree and no marker.
pub fn restore(opts: &RestoreOptions, ctx: &Ctx) -> Result<Report> {
    ctx.set_phase(Phase::CheckDestination);
    let root = rustix::fs::open(
        &opts.root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        Errno::NOENT => Error::Destination("missing"),
        Errno::NOTDIR => Error::Destination("not_a_directory"),
        e => dst("open_destination")(e),
    })?;
    check_empty(&root)?;
    ctx.check()?;

    ctx.set_phase(Phase::VerifyArchive);
    let mut f = File::open(&opts.archive).map_err(io_err("open_archive", Src::Archive))?;
    let opened = reader::open(&mut f, &opts.limits)?;
    crate::records::check_restore(&opts.identity, &opts.record, &opened.manifest.source)?;
    ctx.bytes_total.store(opened.file_len, Ordering::Relaxed);
    let dup = || f.try_clone().map_err(io_err("open_archive", Src::Archive));
    let mut pr = PrefetchReader::new(dup()?).map_err(io_err("open_archive", Src::Archive))?;
    let verified = reader::verify(&mut pr, &opened, ctx)?;
    drop(pr);
    reader::check_expected(&verified.archive_sha256, opts.expect_sha256.as_ref())?;
    write_and_verify(&root, &f, &opened, &verified.checks, ctx)?;
    publish_restore(&root, &opened, ctx)?;
    Ok(Report {
        totals: opened.totals,
        archive_bytes: Some(opened.file_len),
        manifest_bytes: Some(opened.trailer.manifest_len),
        archive_sha256: Some(hex::encode(verified.archive_sha256)),
        manifest_sha256: Some(hex::encode(opened.trailer.manifest_sha256)),
    })
}

/// From the validated archive to a written, re-verified and durable tree (still marked incomplete).
fn write_and_verify(
    root: &OwnedFd,
    archive: &File,
    opened: &Opened,
    checks: &[ExtentCheck],
    ctx: &Ctx,
) -> Result<()> {
    ctx.set_phase(Phase::CheckDestination);
    check_empty(root)?;

    ctx.set_phase(Phase::CreateMarker);
    create_marker(root, ctx)?;

    ctx.set_phase(Phase::WriteTree);
    ctx.bytes_done.store(0, Ordering::Relaxed);
    ctx.files_done.store(0, Ordering::Relaxed);
    ctx.bytes_total
        .store(opened.totals.payload_bytes, Ordering::Relaxed);
    ctx.files_total
        .store(opened.totals.entries, Ordering::Relaxed);
    write_tree(root, archive, opened, checks, ctx)?;

    let durability = crate::durable::choose(root);
    let per_inode = !matches!(durability, Durability::Syncfs);
    if per_inode {
        // Flush everything first so the per-inode fsyncs below are cheap and write-back errors
        // surface early; the fsyncs, not this call, are what the durability argument relies on
        // (an error here is still an error).
        ctx.set_phase(Phase::SyncTree);
        rustix::fs::syncfs(root).map_err(dst("syncfs"))?;
        ctx.step();
    }

    ctx.set_phase(Phase::VerifyTree);
    ctx.bytes_done.store(0, Ordering::Relaxed);
    ctx.files_done.store(0, Ordering::Relaxed);
    verify_tree(root, opened, checks, ctx, per_inode)?;

    if !per_inode {
        // One syncfs on the destination file system: it writes back and waits for every dirty
        // page and inode of that file system (all restored data, inode metadata, directories, the
        // root's namespace) and commits the journal, and since Linux 5.8 it reports any write-back
        // error on the file system since `root` was opened. See docs/takbak-tools.md.
        ctx.set_phase(Phase::SyncTree);
        rustix::fs::syncfs(root).map_err(dst("syncfs"))?;
        ctx.step();
    }
    Ok(())
}

/// Removes the marker and makes that durable: the only step after which a failure is
/// "publication uncertain".
fn publish_restore(root: &OwnedFd, opened: &Opened, ctx: &Ctx) -> Result<()> {
    ctx.set_phase(Phase::PublishRestore);
    rustix::fs::unlinkat(root, MARKER_NAME, AtFlags::empty())
        .map_err(errno_err("unlink_marker", Src::Marker))?;
    ctx.marker_removed.store(true, Ordering::SeqCst);
    ctx.step();
    publish(root, &opened.manifest.entries[0], ctx).map_err(|e| {
        // The tree is complete and verified, but its publication is not known to be durable.
        // Recreate the marker so the volume is not mistaken for a finished restore.
        let _ = create_marker(root, ctx);
        Error::PublicationUncertain(Box::new(e))
    })
}

fn create_marker(root: &OwnedFd, ctx: &Ctx) -> Result<()> {
    let m = errno_err("create_marker", Src::Marker);
    let fd = fsutil::create_exclusive(root, c".takbak-restore-incomplete").map_err(&m)?;
    ctx.step();
    let mut f = File::from(fd);
    f.write_all(MARKER_TEXT)
        .map_err(io_err("write_marker", Src::Marker))?;
    f.sync_all().map_err(io_err("fsync_marker", Src::Marker))?;
    ctx.step();
    rustix::fs::fsync(root).map_err(dst("fsync_root"))?;
    ctx.step();
    Ok(())
}

fn publish(root: &OwnedFd, root_entry: &Entry, ctx: &Ctx) -> Result<()> {
    let (a, m) = times(root_entry)?;
    rustix::fs::futimens(root, &fsutil::timestamps(a, m)).map_err(dst("set_root_times"))?;
    rustix::fs::fsync(root).map_err(dst("fsync_root"))?;
    ctx.step();
    match rustix::fs::statat(root, MARKER_NAME, AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => {}
        Ok(_) => return Err(Error::RestoreMismatch("marker_still_present")),
        Err(e) => return Err(errno_err("stat_marker", Src::Marker)(e)),
    }
    let st = rustix::fs::fstat(root).map_err(dst("stat_root"))?;
    if fsutil::stat_times(&st) != (a, m) {
        return Err(Error::RestoreMismatch("root_times"));
    }
    Ok(())
}

fn times(e: &Entry) -> Result<(i64, i64)> {
    match (e.atime_ns, e.mtime_ns) {
        (Some(a), Some(m)) => Ok((a, m)),
        _ => Err(Error::Archive("times_missing")),
    }
}

fn owner(e: &Entry) -> (Option<Uid>, Option<Gid>) {
    (e.uid.map(Uid::from_raw), e.gid.map(Gid::from_raw))
}

fn set_dir_or_file_meta<Fd: AsFd>(fd: Fd, e: &Entry) -> Result<()> {
    let (u, g) = owner(e);
    rustix::fs::fchown(&fd, u, g).map_err(dst("chown"))?;
    rustix::fs::fchmod(&fd, Mode::from_raw_mode(e.mode.unwrap_or(0o700))).map_err(dst("chmod"))?;
    let (a, m) = times(e)?;
    rustix::fs::futimens(&fd, &fsutil::timestamps(a, m)).map_err(dst("set_times"))
}

/// Returns the directory descriptor for `parent`, popping the pre-order stack to it.
fn parent_fd<'a>(
    root: &'a OwnedFd,
    stack: &'a mut Vec<(String, OwnedFd)>,
    parent: &str,
) -> Result<&'a OwnedFd> {
    while stack.last().is_some_and(|(p, _)| p != parent) {
        stack.pop();
    }
    match stack.last() {
        Some((_, fd)) => Ok(fd),
        None if parent == "." => Ok(root),
        None => Err(Error::Archive("parent_missing_or_out_of_order")),
    }
}

fn open_parent_beneath(root: &OwnedFd, parent: &str) -> Result<OwnedFd> {
    let p = if parent == "." { "." } else { parent };
    fsutil::open_beneath(root, p, OFlags::RDONLY | OFlags::DIRECTORY).map_err(dst("open_dir"))
}

/// The part of a stored extent that holds its non-zero bytes, widened to whole 4 KiB blocks (and
/// cut at the extent's end): `(start, end)` offsets in the extent; `None` for an extent of zeros.
/// Only this part is read back from the archive and written: the rest is zero by validation, and
/// zeros are left as holes.
fn data_span(c: &ExtentCheck, len: u64) -> Option<(u64, u64)> {
    const BLOCK: u64 = 4096;
    (c.data_end > c.data_start).then(|| {
        (
            c.data_start / BLOCK * BLOCK,
            c.data_end.div_ceil(BLOCK).saturating_mul(BLOCK).min(len),
        )
    })
}

/// Archive ranges to read for the given spans (increasing, disjoint): spans closer than 64 KiB are
/// read as one range, so many small files cost a few large reads instead of one read each.
fn read_groups(spans: &[(u64, u64)]) -> Vec<(u64, u64)> {
    const GAP: u64 = 64 << 10;
    let mut groups: Vec<(u64, u64)> = Vec::new();
    for &(start, n) in spans {
        match groups.last_mut() {
            Some((g, len)) if start <= *g + *len + GAP => *len = start + n - *g,
            _ => groups.push((start, n)),
        }
    }
    groups
}

/// Streams the validated extents' data spans from the archive (read again, with `O_DIRECT` where
/// allowed, in a prefetch thread) to [`create_entries`]. What this read returns is not trusted:
/// the re-verification compares the written tree with the checks taken during validation.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Purpose;

    fn id(v: &str) -> Identity {
        Identity {
            volume: v.into(),
            generation: format!("{v}-g"),
            claim_uid: format!("{v}-c"),
        }
    }

    fn rec(purpose: Purpose) -> Record {
        Record {
            version: 1,
            purpose,
            source: id("src"),
            record_id: "r".into(),
            operator: "o".into(),
            method: "m".into(),
            evidence_reference: "e".into(),
            operator_acknowledged: true,
        }
    }

    /// Restores a small tree (small files, a large dense file, a sparse file), then tampers with
    /// the restored copy and runs the re-verification directly: every change is caught, and with
    /// several bad entries the earliest one (in manifest order) is reported, whichever pool thread
    /// found it.
    #[test]
    fn nearby_spans_are_read_together() {
        assert_eq!(read_groups(&[]), vec![]);
        // Back to back, a 64 KiB gap (still merged), then a gap just over it.
        let spans = [
            (16, 100),
            (116, 4000),
            (4116 + (64 << 10), 10),
            (200_000, 5),
        ];
        assert_eq!(
            read_groups(&spans),
            vec![(16, 4100 + (64 << 10) + 10), (200_000, 5)]
        );
        let c = |data_start, data_end| ExtentCheck {
            data_start,
            data_end,
            prefix_sha256: [0; 32],
        };
        assert_eq!(data_span(&c(0, 0), 1 << 20), None, "all zeros");
        assert_eq!(data_span(&c(5000, 5001), 1 << 20), Some((4096, 8192)));
        assert_eq!(
            data_span(&c(0, 10), 10),
            Some((0, 10)),
            "cut at the extent's end"
        );
    }

    #[test]
    fn re_verification_catches_tampering_and_reports_the_earliest_entry() {
        let tmp = tempfile::tempdir().unwrap();
        let src = tmp.path().join("src");
        std::fs::create_dir_all(src.join("d")).unwrap();
        for i in 0..50u8 {
            std::fs::write(
                src.join(format!("d/s{i:02}")),
                vec![i + 1; 3000 + i as usize],
            )
            .unwrap();
        }
        let big: Vec<u8> = (0..(3 << 20) + 77)
            .map(|k: u32| (k % 251) as u8 | 1)
            .collect();
        std::fs::write(src.join("d/t-big"), &big).unwrap();
        let sparse = std::fs::File::create(src.join("d/u-sparse")).unwrap();
        sparse.set_len(4 << 20).unwrap();
        sparse.write_all_at(&[5u8; 100], (2 << 20) + 10).unwrap();
        drop(sparse);
        let archive = tmp.path().join("a.takbak");
        let ctx = Ctx::new(std::time::Duration::from_secs(60));
        crate::backup::backup(
            &crate::backup::BackupOptions {
                root: src,
                archive: archive.clone(),
                identity: id("src"),
                record: rec(Purpose::BackupQuiesced),
                limits: Limits::default(),
            },
            &ctx,
        )
        .unwrap();
        let dst = tmp.path().join("dst");
        std::fs::create_dir(&dst).unwrap();
        restore(
            &RestoreOptions {
                root: dst.clone(),
                archive: archive.clone(),
                identity: id("dst"),
                record: rec(Purpose::RestoreIsolated),
                limits: Limits::default(),
                expect_sha256: None,
            },
            &ctx,
        )
        .unwrap();
        let opened = reader::open(&mut File::open(&archive).unwrap(), &Limits::default()).unwrap();
        let checks = reader::verify(&mut File::open(&archive).unwrap(), &opened, &ctx)
            .unwrap()
            .checks;
        let root =
            rustix::fs::open(&dst, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
        std::fs::write(dst.join(MARKER_NAME), b"m").unwrap();
        let check = || verify_tree(&root, &opened, &checks, &ctx, false).map_err(|e| e.reason());
        check().unwrap();

        // Overwrite bytes in place, keeping size and times (so only the content check can see it).
        let tamper = |name: &str, off: u64, byte: u8| {
            let p = dst.join(name);
            let st = rustix::fs::stat(&p).unwrap();
            let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
            f.write_all_at(&[byte], off).unwrap();
            let (a, m) = fsutil::stat_times(&st);
            rustix::fs::futimens(&f, &fsutil::timestamps(a, m)).unwrap();
        };
        tamper("d/t-big", (2 << 20) + 5, 0);
        assert_eq!(check(), Err("content"), "large file, inside an extent");
        tamper("d/t-big", (2 << 20) + 5, big[(2 << 20) + 5]);
        check().unwrap();
        tamper("d/u-sparse", 3 << 20, 9);
        assert_eq!(check(), Err("content"), "data written into a hole");
        tamper("d/u-sparse", 3 << 20, 0);
        check().unwrap();
        // The chunk at 2 MiB is 100 bytes amid zeros, stored as its first 4 KiB block: zeros inside
        // that extent are re-verified without being hashed again, zeros after it as a zero range;
        // both are still checked.
        tamper("d/u-sparse", (2 << 20) + 3, 1);
        assert_eq!(check(), Err("content"), "leading zeros of a stored extent");
        tamper("d/u-sparse", (2 << 20) + 3, 0);
        check().unwrap();
        tamper("d/u-sparse", (2 << 20) + 111, 1);
        assert_eq!(check(), Err("content"), "just after the last non-zero byte");
        tamper("d/u-sparse", (2 << 20) + 111, 0);
        tamper("d/u-sparse", (3 << 20) - 1, 1);
        assert_eq!(
            check(),
            Err("content"),
            "zeros after a stored extent, in its chunk"
        );
        tamper("d/u-sparse", (3 << 20) - 1, 0);
        check().unwrap();
        tamper("d/u-sparse", (2 << 20) + 50, 1);
        // Content of an earlier small file and metadata of a later one: the earlier entry wins.
        tamper("d/s07", 10, 0);
        let mode40 = rustix::fs::stat(dst.join("d/s40")).unwrap().st_mode & 0o777;
        rustix::fs::chmod(dst.join("d/s40"), Mode::from_raw_mode(mode40 ^ 0o004)).unwrap();
        assert_eq!(check(), Err("content"));
        tamper("d/s07", 10, 8);
        assert_eq!(check(), Err("metadata"), "s40 precedes the sparse file");
        rustix::fs::chmod(dst.join("d/s40"), Mode::from_raw_mode(mode40)).unwrap();
        assert_eq!(check(), Err("content"), "the sparse file is still wrong");
    }
}
