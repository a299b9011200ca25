//! Backup: scan a quiesced tree, stream its data into a temporary archive, publish it exclusively.
//!
//! ```text
//!  scan (metadata only, refusals, limits)        inventory: Vec<Entry> + file jobs
//!        │
//!  readers: small files (≤ 1 MiB, not sparse) in batches on N worker threads (openat relative to
//!           the parent, fstat, flistxattr, one pread, SHA-256), reordered to walk order within a
//!           window of 4 batches; large/sparse files in order on the consumer thread
//!           (SEEK_DATA/HOLE → 1 MiB chunks → span of non-zero 4 KiB blocks → SHA-256 per extent)
//!        │  1 MiB blocks (many small files packed per block; buffers recycled)
//!  hasher thread: whole-archive SHA-256
//!        │
//!  writer thread: O_DIRECT (dio::DirectWriter) → temp file ".NAME.PID.NANOS.takbak.tmp" (O_EXCL, 0600)
//!        │
//!  manifest JSON + trailer → fsync file → renameat2(NOREPLACE) → fsync directory
//! ```
//!
//! Invariants: the final archive name only ever appears complete and synced (a killed backup leaves
//! at most a `*.takbak.tmp`); an existing file is never replaced; nothing refused is silently skipped;
//! memory is the inventory plus a bounded number of 1 MiB buffers.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use rustix::fs::{AtFlags, OFlags, SeekFrom};
use rustix::io::Errno;
use sha2::{Digest, Sha256};

use crate::ctx::{Ctx, Phase};
use crate::dio::DirectWriter;
use crate::error::{Error, FailureSource as Src, Result, errno_err, io_err};
use crate::extent_hash;
use crate::format::{self, CHUNK_SIZE, Entry, Extent, Kind, Manifest, Trailer};
use crate::fsutil::{self, Xattrs};
use crate::limits::Limits;
use crate::records::{Identity, Record};
use crate::result::Report;

/// What to back up and where.
#[derive(Debug, Clone)]
pub struct BackupOptions {
    /// The quiesced source tree.
    pub root: PathBuf,
    /// The archive path to create (must not exist, must be outside `root`).
    pub archive: PathBuf,
    /// The source identity.
    pub identity: Identity,
    /// The operator's `backup-quiesced` record.
    pub record: Record,
    /// Limits in force.
    pub limits: Limits,
}

/// A regular file whose data must be read.
#[derive(Debug)]
struct FileJob {
    entry: usize,
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i64,
    ctime_ns: i64,
    sparse: bool,
}

/// The metadata inventory produced by the scan.
#[derive(Debug, Default)]
struct Inventory {
    entries: Vec<Entry>,
    jobs: Vec<FileJob>,
    logical_bytes: u64,
}

/// Runs a backup and returns its report; the archive exists under its final name only on success.
pub fn backup(opts: &BackupOptions, ctx: &Ctx) -> Result<Report> {
    crate::records::check_backup(&opts.identity, &opts.record)?;
    let root_abs =
        std::fs::canonicalize(&opts.root).map_err(io_err("resolve_root", Src::SourceTree))?;
    let root = rustix::fs::open(
        &root_abs,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(errno_err("open_root", Src::SourceTree))?;
    let (dir_fd, name) = archive_location(&opts.archive, &root_abs)?;
    match rustix::fs::statat(&dir_fd, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => return Err(Error::Refused("archive_already_exists")),
        Err(Errno::NOENT) => {}
        Err(e) => return Err(errno_err("stat_archive", Src::Archive)(e)),
    }

    ctx.set_phase(Phase::ScanSource);
    ctx.check()?;
    let inv = scan(&root, &root_abs, &opts.limits, ctx)?;
    ctx.files_total
        .store(inv.jobs.len() as u64, Ordering::Relaxed);
    ctx.bytes_total.store(inv.logical_bytes, Ordering::Relaxed);

    ctx.set_phase(Phase::WriteArchive);
    let tmp = tmp_name(&name);
    let fd = fsutil::create_exclusive(&dir_fd, &tmp)
        .map_err(errno_err("create_temp_archive", Src::Archive))?;
    ctx.step();
    let result = write_archive(fd, &root, inv, opts, ctx).and_then(|w| {
        ctx.set_phase(Phase::PublishArchive);
        ctx.step();
        fsutil::publish_noreplace(&dir_fd, &tmp, &name).map_err(|e| match e {
            Errno::EXIST => Error::Refused("archive_already_exists"),
            e => errno_err("publish_archive", Src::Archive)(e),
        })?;
        ctx.step();
        rustix::fs::fsync(&dir_fd).map_err(errno_err("fsync_archive_dir", Src::Archive))?;
        ctx.step();
        Ok(w)
    });
    if result.is_err() {
        // Best effort: the temp name never becomes the archive, so leaving it would only waste space.
        let _ = rustix::fs::unlinkat(&dir_fd, &tmp, AtFlags::empty());
    }
    result
}

/// Opens the archive's directory and returns it with the final name; refuses a location inside the
/// source tree (also through symlinks, because both sides are canonicalised).
fn archive_location(archive: &Path, root_abs: &Path) -> Result<(OwnedFd, CString)> {
    let name = archive
        .file_name()
        .ok_or(Error::Usage("archive_path_has_no_file_name"))?;
    let parent = match archive.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let parent_abs =
        std::fs::canonicalize(&parent).map_err(io_err("resolve_archive_dir", Src::Archive))?;
    if parent_abs.starts_with(root_abs) {
        return Err(Error::Refused("archive_inside_source"));
    }
    let dir = rustix::fs::open(
        &parent_abs,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(errno_err("open_archive_dir", Src::Archive))?;
    // A bind mount of the source elsewhere is caught by comparing the directory identities upwards.
    let root_st = rustix::fs::stat(root_abs).map_err(errno_err("stat_root", Src::SourceTree))?;
    let mut cur = Some(parent_abs.as_path());
    while let Some(p) = cur {
        let st = rustix::fs::stat(p).map_err(errno_err("stat_archive_dir", Src::Archive))?;
        if st.st_dev == root_st.st_dev && st.st_ino == root_st.st_ino {
            return Err(Error::Refused("archive_inside_source"));
        }
        cur = p.parent();
    }
    let name = CString::new(name.as_bytes()).map_err(|_| Error::Usage("archive_name_invalid"))?;
    Ok((dir, name))
}

fn tmp_name(name: &CStr) -> CString {
    let mut base = String::from_utf8_lossy(name.to_bytes()).into_owned();
    while base.len() > 180 {
        base.pop();
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let s = format!(".{base}.{}.{nanos}.takbak.tmp", std::process::id());
    CString::new(s.replace('\0', "_")).unwrap_or_else(|_| c".takbak.tmp".to_owned())
}

fn special_bits_reason(mode: u32) -> Option<&'static str> {
    if mode & 0o4000 != 0 {
        Some("setuid_bit")
    } else if mode & 0o2000 != 0 {
        Some("setgid_bit")
    } else if mode & 0o1000 != 0 {
        Some("sticky_bit")
    } else {
        None
    }
}

fn check_fd_xattrs<Fd: AsFd>(fd: Fd) -> Result<()> {
    match fsutil::fxattrs(fd).map_err(errno_err("listxattr", Src::SourceTree))? {
        Xattrs::None => Ok(()),
        Xattrs::Acl => Err(Error::Refused("acl")),
        Xattrs::Other => Err(Error::Refused("xattr")),
    }
}

fn check_xattrs(abs: &Path) -> Result<()> {
    let c =
        CString::new(abs.as_os_str().as_bytes()).map_err(|_| Error::Refused("non_utf8_name"))?;
    match fsutil::xattrs(&c).map_err(errno_err("listxattr", Src::SourceTree))? {
        Xattrs::None => Ok(()),
        Xattrs::Acl => Err(Error::Refused("acl")),
        Xattrs::Other => Err(Error::Refused("xattr")),
    }
}

/// Walks the source tree (pre-order, byte-sorted names) collecting metadata and refusing anything
/// TAKBAK1 cannot represent faithfully.
fn scan(root: &OwnedFd, root_abs: &Path, limits: &Limits, ctx: &Ctx) -> Result<Inventory> {
    let st = rustix::fs::fstat(root).map_err(errno_err("stat_root", Src::SourceTree))?;
    if let Some(r) = special_bits_reason(st.st_mode) {
        return Err(Error::Refused(r));
    }
    check_xattrs(root_abs)?;
    let (atime, mtime) = fsutil::stat_times(&st);
    let mut inv = Inventory::default();
    inv.entries.push(Entry {
        path: ".".into(),
        kind: Kind::Dir,
        mode: Some(st.st_mode & 0o777),
        uid: Some(st.st_uid),
        gid: Some(st.st_gid),
        atime_ns: Some(atime),
        mtime_ns: Some(mtime),
        size: None,
        extents: None,
        target: None,
    });
    let mut links: HashMap<(u64, u64), String> = HashMap::new();
    #[allow(clippy::unnecessary_cast)]
    let root_dev = st.st_dev as u64;
    scan_dir(
        root, ".", root_abs, root_dev, limits, ctx, &mut inv, &mut links,
    )?;
    Ok(inv)
}

#[allow(clippy::too_many_arguments, clippy::unnecessary_cast)]
fn scan_dir(
    dirfd: &OwnedFd,
    rel: &str,
    abs: &Path,
    root_dev: u64,
    limits: &Limits,
    ctx: &Ctx,
    inv: &mut Inventory,
    links: &mut HashMap<(u64, u64), String>,
) -> Result<()> {
    let names = fsutil::list_dir(dirfd).map_err(errno_err("read_dir", Src::SourceTree))?;
    for raw in names {
        ctx.check()?;
        let name = String::from_utf8(raw).map_err(|_| Error::Refused("non_utf8_name"))?;
        if rel == "." && name == format::MARKER_NAME {
            return Err(Error::Refused("restore_incomplete_marker_present"));
        }
        let path = if rel == "." {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        if format::check_path(&path).is_err() {
            return Err(Error::Refused("path_unrepresentable"));
        }
        let cname =
            CString::new(name.as_bytes()).map_err(|_| Error::Refused("path_unrepresentable"))?;
        let st = rustix::fs::statat(dirfd, &cname, AtFlags::SYMLINK_NOFOLLOW)
            .map_err(errno_err("stat", Src::SourceTree))?;
        let child_abs = abs.join(&name);
        if inv.entries.len() as u64 >= limits.max_entries {
            return Err(Error::Limit("entries"));
        }
        let (atime, mtime) = fsutil::stat_times(&st);
        let mut e = Entry {
            path: path.clone(),
            kind: Kind::Dir,
            mode: Some(st.st_mode & 0o777),
            uid: Some(st.st_uid),
            gid: Some(st.st_gid),
            atime_ns: Some(atime),
            mtime_ns: Some(mtime),
            size: None,
            extents: None,
            target: None,
        };
        match fsutil::file_type(&st) {
            fsutil::S_IFDIR => {
                if let Some(r) = special_bits_reason(st.st_mode) {
                    return Err(Error::Refused(r));
                }
                if st.st_dev as u64 != root_dev {
                    return Err(Error::Refused("mount_point_inside_source"));
                }
                let sub = fsutil::open_dir(dirfd, &cname)
                    .map_err(errno_err("open_dir", Src::SourceTree))?;
                check_fd_xattrs(&sub)?;
                inv.entries.push(e);
                scan_dir(&sub, &path, &child_abs, root_dev, limits, ctx, inv, links)?;
            }
            fsutil::S_IFREG => {
                if let Some(r) = special_bits_reason(st.st_mode) {
                    return Err(Error::Refused(r));
                }
                // Extended attributes of regular files are checked on the descriptor the data
                // is read through (`flistxattr`), which saves a path walk per file.
                let key = (st.st_dev as u64, st.st_ino as u64);
                if st.st_nlink > 1 {
                    if let Some(first) = links.get(&key) {
                        inv.entries.push(Entry {
                            path,
                            kind: Kind::Hardlink,
                            mode: None,
                            uid: None,
                            gid: None,
                            atime_ns: None,
                            mtime_ns: None,
                            size: None,
                            extents: None,
                            target: Some(first.clone()),
                        });
                        continue;
                    }
                    links.insert(key, path.clone());
                }
                let size = st.st_size as u64;
                if size > limits.max_file_size {
                    return Err(Error::Limit("file_size"));
                }
                e.kind = Kind::File;
                e.size = Some(size);
                inv.jobs.push(FileJob {
                    entry: inv.entries.len(),
                    dev: key.0,
                    ino: key.1,
                    size,
                    mtime_ns: mtime,
                    ctime_ns: fsutil::stat_ctime(&st),
                    sparse: (st.st_blocks as u64).saturating_mul(512) < size,
                });
                inv.logical_bytes += size;
                inv.entries.push(e);
            }
            fsutil::S_IFLNK => {
                if st.st_nlink > 1 {
                    return Err(Error::Refused("hardlinked_symlink"));
                }
                check_xattrs(&child_abs)?;
                let target = rustix::fs::readlinkat(dirfd, &cname, Vec::new())
                    .map_err(errno_err("readlink", Src::SourceTree))?;
                let target = String::from_utf8(target.into_bytes())
                    .map_err(|_| Error::Refused("non_utf8_symlink_target"))?;
                if target.len() > format::MAX_SYMLINK_TARGET_BYTES {
                    return Err(Error::Refused("symlink_target_too_long"));
                }
                e.kind = Kind::Symlink;
                e.mode = None;
                e.target = Some(target);
                inv.entries.push(e);
            }
            fsutil::S_IFCHR | fsutil::S_IFBLK => return Err(Error::Refused("device")),
            fsutil::S_IFIFO => return Err(Error::Refused("fifo")),
            fsutil::S_IFSOCK => return Err(Error::Refused("socket")),
            _ => return Err(Error::Refused("unknown_file_type")),
        }
    }
    Ok(())
}

/// Counts and hashes the manifest and trailer bytes (the payload is hashed by its own thread).
struct HashingWriter<W: Write> {
    inner: W,
    whole: Sha256,
    section: Sha256,
    section_len: u64,
    total_len: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.whole.update(&buf[..n]);
        self.section.update(&buf[..n]);
        self.section_len += n as u64;
        self.total_len += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Payload travels in blocks of up to this many bytes: one 1 MiB chunk, or many small files' data
/// packed back to back (so 50,000 small files cost ~500 channel hand-offs, not 50,000).
const BLOCK_CAP: usize = CHUNK_SIZE as usize;

/// A block of payload bytes: `buf[..len]` is valid, `buf.len() == BLOCK_CAP`.
type Block = (Vec<u8>, usize);

fn write_archive(
    fd: OwnedFd,
    root: &OwnedFd,
    mut inv: Inventory,
    opts: &BackupOptions,
    ctx: &Ctx,
) -> Result<Report> {
    let mut dw = DirectWriter::new(File::from(fd), 2 * CHUNK_SIZE as usize);
    let header = format::encode_header();
    dw.write_all(&header)
        .map_err(io_err("write_archive", Src::Archive))?;
    let mut whole = Sha256::new();
    whole.update(header);

    // reader (this thread) ─▶ hasher (whole-archive SHA-256) ─▶ writer (O_DIRECT) ─▶ spare buffers
    let (chunks_tx, chunks_rx) = crossbeam_channel::bounded::<Block>(2);
    let (hashed_tx, hashed_rx) = crossbeam_channel::bounded::<Block>(2);
    let (spare_tx, spare_rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    let jobs = std::mem::take(&mut inv.jobs);
    let (read_result, hashed, written) = std::thread::scope(|s| {
        let hasher = s.spawn(move || -> (Sha256, u64) {
            let mut whole = whole;
            let mut n = 0u64;
            for (buf, len) in chunks_rx {
                extent_hash::warmed(&buf[..len], |piece| whole.update(piece));
                n += len as u64;
                if hashed_tx.send((buf, len)).is_err() {
                    break; // the writer failed; it reports why
                }
            }
            (whole, n)
        });
        let writer = s.spawn(move || -> Result<DirectWriter> {
            let mut dw = dw;
            for (buf, len) in hashed_rx {
                dw.write_all(&buf[..len])
                    .map_err(io_err("write_archive", Src::Archive))?;
                ctx.step();
                let _ = spare_tx.send(buf);
            }
            Ok(dw)
        });
        let read_result = read_files(
            root,
            &inv.entries,
            &jobs,
            &opts.limits,
            ctx,
            &chunks_tx,
            &spare_rx,
        );
        drop(chunks_tx);
        let hashed = hasher.join();
        let written = writer
            .join()
            .unwrap_or(Err(Error::Archive("writer_thread_panicked")));
        (read_result, hashed, written)
    });
    // A writer failure (ENOSPC, EIO) makes the reader see a closed channel; report the cause.
    let dw = written?;
    let extents = read_result?;
    let (whole, payload_len) = hashed.map_err(|_| Error::Archive("hasher_thread_panicked"))?;
    for (job, ext) in jobs.iter().zip(extents) {
        inv.entries[job.entry].extents = Some(ext);
    }

    let manifest = Manifest {
        format: "TAKBAK1".into(),
        version: format::VERSION,
        chunk_size: CHUNK_SIZE,
        created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        source: opts.identity.clone(),
        record: opts.record.clone(),
        entries: inv.entries,
    };
    let totals = format::validate_manifest(&manifest, payload_len, &opts.limits)?;
    let mut out = HashingWriter {
        inner: dw,
        whole,
        section: Sha256::new(),
        section_len: 0,
        total_len: format::HEADER_LEN + payload_len,
    };
    {
        let mut buffered = BufWriter::with_capacity(256 << 10, &mut out);
        serde_json::to_writer(&mut buffered, &manifest).map_err(|e| match e.io_error_kind() {
            Some(_) => Error::Io {
                op: "write_manifest",
                source_kind: Src::Archive,
                source: std::io::Error::from(e),
            },
            None => Error::Archive("manifest_serialisation"),
        })?;
        buffered
            .flush()
            .map_err(io_err("write_manifest", Src::Archive))?;
    }
    let manifest_len = out.section_len;
    if manifest_len > opts.limits.max_manifest_bytes {
        return Err(Error::Limit("manifest_bytes"));
    }
    let manifest_sha256: [u8; 32] = out.section.clone().finalize().into();
    let trailer = Trailer {
        payload_len,
        manifest_len,
        manifest_sha256,
        entry_count: totals.entries,
    };
    out.write_all(&trailer.encode())
        .map_err(io_err("write_archive", Src::Archive))?;
    let archive_bytes = out.total_len;
    let archive_sha256: [u8; 32] = out.whole.finalize().into();
    let file = out
        .inner
        .finish()
        .map_err(io_err("write_archive", Src::Archive))?;
    ctx.set_phase(Phase::PublishArchive);
    ctx.step();
    file.sync_all()
        .map_err(io_err("fsync_archive", Src::Archive))?;
    ctx.step();
    Ok(Report {
        totals,
        archive_bytes: Some(archive_bytes),
        manifest_bytes: Some(manifest_len),
        archive_sha256: Some(hex::encode(archive_sha256)),
        manifest_sha256: Some(hex::encode(manifest_sha256)),
    })
}

/// The reader's current output block and the channels around it.
struct Out<'a> {
    block: Vec<u8>,
    len: usize,
    tx: &'a crossbeam_channel::Sender<Block>,
    spare: &'a crossbeam_channel::Receiver<Vec<u8>>,
}

impl Out<'_> {
    fn new_block(spare: &crossbeam_channel::Receiver<Vec<u8>>) -> Vec<u8> {
        spare.try_recv().unwrap_or_else(|_| vec![0u8; BLOCK_CAP])
    }
    /// Makes room for `n` more bytes, sending the current block when it is too full.
    fn reserve(&mut self, n: usize) -> Result<()> {
        if self.len + n > BLOCK_CAP {
            self.send()?;
        }
        Ok(())
    }
    fn send(&mut self) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let next = Self::new_block(self.spare);
        let full = std::mem::replace(&mut self.block, next);
        // A closed channel means the writer failed; its error is reported by the caller.
        self.tx
            .send((full, self.len))
            .map_err(|_| Error::Archive("writer_stopped"))?;
        self.len = 0;
        Ok(())
    }
}

/// The directory descriptors along the current pre-order path, so each file is opened with one
/// `openat` relative to its parent (no repeated path resolution from the root).
struct DirStack<'a> {
    root: &'a OwnedFd,
    stack: Vec<(String, OwnedFd)>,
}

impl DirStack<'_> {
    fn parent(&mut self, parent: &str) -> Result<&OwnedFd> {
        while let Some((p, _)) = self.stack.last() {
            if parent == p || parent.starts_with(p.as_str()) && parent.as_bytes()[p.len()] == b'/' {
                break;
            }
            self.stack.pop();
        }
        if parent != "." {
            loop {
                let base = self.stack.last().map_or("", |(p, _)| p.as_str());
                if base == parent {
                    break;
                }
                let rest = if base.is_empty() {
                    parent
                } else {
                    &parent[base.len() + 1..]
                };
                let comp = rest.split('/').next().unwrap_or(rest);
                let path = if base.is_empty() {
                    comp.to_owned()
                } else {
                    format!("{base}/{comp}")
                };
                let c = CString::new(comp).map_err(|_| Error::Refused("path_unrepresentable"))?;
                let dir = {
                    let at = self.stack.last().map_or(self.root, |(_, fd)| fd);
                    fsutil::open_dir(at, &c).map_err(errno_err("open_dir", Src::SourceTree))?
                };
                self.stack.push((path, dir));
            }
        }
        Ok(self.stack.last().map_or(self.root, |(_, fd)| fd))
    }
}

/// Small files (not sparse, at most one chunk) are read and hashed by this many worker threads in
/// batches; at most [`WINDOW`] batches are in flight, so memory stays bounded and the archive order
/// (and so the bytes) stays exactly the walk order whatever the thread timing.
fn worker_count() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
}
const WINDOW: u64 = 4;
/// Most files in one batch (bounds per-batch latency and the reorder state).
const BATCH_FILES: usize = 512;

fn is_small(job: &FileJob) -> bool {
    !job.sparse && job.size <= CHUNK_SIZE
}

/// Shared batch generator: hands out consecutive runs of small jobs, stopping at a large one until
/// the consumer has dealt with it.
#[derive(Debug, Default)]
struct Gen {
    next_job: usize,
    issued: u64,
    emitted: u64,
    abort: bool,
}

/// One batch's results: jobs `a..b`, their data packed in `block[..len]`, one optional extent each.
struct BatchOut {
    a: usize,
    b: usize,
    block: Vec<u8>,
    len: usize,
    extents: Vec<Option<Extent>>,
    err: Option<Error>,
}

fn job_name(entries: &[Entry], job: &FileJob) -> Result<(String, CString)> {
    let (parent, name) = format::split_parent(entries[job.entry].path.as_str());
    let name = CString::new(name).map_err(|_| Error::Refused("path_unrepresentable"))?;
    Ok((parent.to_owned(), name))
}

/// Reads every file job, sending non-zero chunks to the writer; returns the extents per job.
fn read_files(
    root: &OwnedFd,
    entries: &[Entry],
    jobs: &[FileJob],
    limits: &Limits,
    ctx: &Ctx,
    tx: &crossbeam_channel::Sender<Block>,
    spare: &crossbeam_channel::Receiver<Vec<u8>>,
) -> Result<Vec<Vec<Extent>>> {
    let gen_state = std::sync::Mutex::new(Gen::default());
    let cv = std::sync::Condvar::new();
    let (res_tx, res_rx) = crossbeam_channel::unbounded::<BatchOut>();
    let lock = || gen_state.lock().unwrap_or_else(|p| p.into_inner());
    std::thread::scope(|s| {
        for _ in 0..worker_count() {
            let res_tx = res_tx.clone();
            let (gen_state, cv) = (&gen_state, &cv);
            s.spawn(move || {
                let mut dirs = DirStack {
                    root,
                    stack: Vec::new(),
                };
                loop {
                    let (a, b) = {
                        let mut g = gen_state.lock().unwrap_or_else(|p| p.into_inner());
                        loop {
                            if g.abort || g.next_job >= jobs.len() {
                                return;
                            }
                            if is_small(&jobs[g.next_job]) && g.issued < g.emitted + WINDOW {
                                break;
                            }
                            g = cv.wait(g).unwrap_or_else(|p| p.into_inner());
                        }
                        let a = g.next_job;
                        let mut b = a;
                        let mut bytes = 0usize;
                        while b < jobs.len()
                            && b - a < BATCH_FILES
                            && is_small(&jobs[b])
                            && bytes + jobs[b].size as usize <= BLOCK_CAP
                        {
                            bytes += jobs[b].size as usize;
                            b += 1;
                        }
                        g.next_job = b;
                        g.issued += 1;
                        (a, b)
                    };
                    let mut out = BatchOut {
                        a,
                        b,
                        block: spare.try_recv().unwrap_or_else(|_| vec![0u8; BLOCK_CAP]),
                        len: 0,
                        extents: Vec::with_capacity(b - a),
                        err: None,
                    };
                    for job in &jobs[a..b] {
                        let r = job_name(entries, job).and_then(|(parent, name)| {
                            let pfd = dirs.parent(&parent)?;
                            read_small(pfd, &name, job, &mut out.block[out.len..])
                        });
                        match r {
                            Ok(Some(ext)) => {
                                out.len += ext.1 as usize;
                                out.extents.push(Some(ext));
                            }
                            Ok(None) => out.extents.push(None),
                            Err(e) => {
                                out.err = Some(e);
                                break;
                            }
                        }
                    }
                    if res_tx.send(out).is_err() {
                        return;
                    }
                }
            });
        }
        drop(res_tx);
        let r = consume(
            root, entries, jobs, limits, ctx, tx, spare, &res_rx, &lock, &cv,
        );
        lock().abort = true;
        cv.notify_all();
        r
    })
}

/// The in-order half of [`read_files`]: takes batch results in job order (reordering as needed),
/// reads large and sparse files itself, applies the limits and feeds the hasher.
#[allow(clippy::too_many_arguments)]
fn consume<'g>(
    root: &OwnedFd,
    entries: &[Entry],
    jobs: &[FileJob],
    limits: &Limits,
    ctx: &Ctx,
    tx: &crossbeam_channel::Sender<Block>,
    spare: &crossbeam_channel::Receiver<Vec<u8>>,
    res_rx: &crossbeam_channel::Receiver<BatchOut>,
    lock: &dyn Fn() -> std::sync::MutexGuard<'g, Gen>,
    cv: &std::sync::Condvar,
) -> Result<Vec<Vec<Extent>>> {
    let mut all: Vec<Vec<Extent>> = Vec::with_capacity(jobs.len());
    let mut payload = 0u64;
    let mut out = Out {
        block: Out::new_block(spare),
        len: 0,
        tx,
        spare,
    };
    let mut dirs = DirStack {
        root,
        stack: Vec::new(),
    };
    let mut pending: HashMap<usize, BatchOut> = HashMap::new();
    while all.len() < jobs.len() {
        ctx.check()?;
        let i = all.len();
        let job = &jobs[i];
        if !is_small(job) {
            let (parent, name) = job_name(entries, job)?;
            let pfd = dirs.parent(&parent)?;
            all.push(read_one(
                pfd,
                &name,
                job,
                limits,
                ctx,
                &mut out,
                &mut payload,
            )?);
            ctx.files_done.fetch_add(1, Ordering::Relaxed);
            let mut g = lock();
            if g.next_job == i {
                g.next_job = i + 1;
            }
            drop(g);
            cv.notify_all();
            continue;
        }
        let batch = loop {
            if let Some(b) = pending.remove(&i) {
                break b;
            }
            let b = res_rx
                .recv()
                .map_err(|_| Error::Archive("reader_thread_stopped"))?;
            pending.insert(b.a, b);
        };
        for (job, ext) in jobs[batch.a..batch.b].iter().zip(&batch.extents) {
            let mut v = Vec::new();
            if let Some(ext) = ext {
                payload += ext.1;
                if payload > limits.max_payload_bytes {
                    return Err(Error::Limit("payload_bytes"));
                }
                if limits.max_extents_per_file == 0 {
                    return Err(Error::Limit("extents_per_file"));
                }
                v.push(ext.clone());
            }
            all.push(v);
            ctx.bytes_done.fetch_add(job.size, Ordering::Relaxed);
            ctx.files_done.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(e) = batch.err {
            return Err(e);
        }
        if all.len() != batch.b {
            return Err(Error::Archive("reader_thread_stopped"));
        }
        if batch.len > 0 {
            out.send()?;
            tx.send((batch.block, batch.len))
                .map_err(|_| Error::Archive("writer_stopped"))?;
        }
        lock().emitted += 1;
        cv.notify_all();
    }
    out.send()?;
    Ok(all)
}

/// Opens a file job for reading (no symlink following), checks it is still the scanned inode and
/// refuses extended attributes or ACLs on it.
#[allow(clippy::unnecessary_cast)]
fn open_job(dirfd: &OwnedFd, name: &CStr, job: &FileJob) -> Result<OwnedFd> {
    let fd = fsutil::open_read(dirfd, name).map_err(errno_err("open_file", Src::SourceTree))?;
    let st = rustix::fs::fstat(&fd).map_err(errno_err("stat_file", Src::SourceTree))?;
    if st.st_dev as u64 != job.dev || st.st_ino as u64 != job.ino {
        return Err(Error::SourceChanged("file_replaced"));
    }
    check_fd_xattrs(&fd)?;
    Ok(fd)
}

/// Reads a small, non-sparse file (at most one chunk) into `buf`; returns its extent unless empty
/// or all zero. Same identity and change checks as [`read_one`].
#[allow(clippy::unnecessary_cast)]
fn read_small(
    dirfd: &OwnedFd,
    name: &CStr,
    job: &FileJob,
    buf: &mut [u8],
) -> Result<Option<Extent>> {
    let fd = open_job(dirfd, name, job)?;
    if job.size == 0 {
        return Ok(None);
    }
    let file = File::from(fd);
    let buf = &mut buf[..job.size as usize];
    file.read_exact_at(buf, 0).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => Error::SourceChanged("file_shrank"),
        _ => Error::Io {
            op: "read_file",
            source_kind: Src::SourceTree,
            source: e,
        },
    })?;
    let after = rustix::fs::fstat(&file).map_err(errno_err("stat_file", Src::SourceTree))?;
    if after.st_size as u64 != job.size
        || fsutil::stat_times(&after).1 != job.mtime_ns
        || fsutil::stat_ctime(&after) != job.ctime_ns
    {
        return Err(Error::SourceChanged("file_modified"));
    }
    if fsutil::is_zero(buf) {
        return Ok(None);
    }
    Ok(Some(Extent(
        0,
        job.size,
        hex::encode(extent_hash::sha256(buf)),
    )))
}

#[allow(clippy::unnecessary_cast, clippy::too_many_arguments)]
fn read_one(
    dirfd: &OwnedFd,
    name: &CStr,
    job: &FileJob,
    limits: &Limits,
    ctx: &Ctx,
    out: &mut Out<'_>,
    payload: &mut u64,
) -> Result<Vec<Extent>> {
    let mut extents = Vec::new();
    let fd = open_job(dirfd, name, job)?;
    if job.size == 0 {
        return Ok(extents);
    }
    if job.size > CHUNK_SIZE {
        // Advice only: a larger read-ahead window when the data is not cached.
        let _ = rustix::fs::fadvise(&fd, 0, None, rustix::fs::Advice::Sequential);
    }
    let file = File::from(fd);
    let mut pos = 0u64;
    while pos < job.size {
        ctx.check()?;
        let start = if job.sparse {
            match rustix::fs::seek(file.as_fd(), SeekFrom::Data(pos)) {
                Ok(d) if d < job.size => d / CHUNK_SIZE * CHUNK_SIZE,
                Ok(_) | Err(Errno::NXIO) => break,
                Err(e) => return Err(errno_err("seek_data", Src::SourceTree)(e)),
            }
        } else {
            pos
        };
        let len = CHUNK_SIZE.min(job.size - start);
        out.reserve(len as usize)?;
        let at = out.len;
        let buf = &mut out.block[at..at + len as usize];
        file.read_exact_at(buf, start).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => Error::SourceChanged("file_shrank"),
            _ => Error::Io {
                op: "read_file",
                source_kind: Src::SourceTree,
                source: e,
            },
        })?;
        // A chunk is stored as the span of its non-zero 4 KiB blocks (docs/takbak1.md, Extents):
        // the zeros around a few real bytes are neither stored nor hashed.
        if let Some((lo, hi)) = fsutil::nonzero_span(buf, format::SPAN_ALIGN as usize) {
            let n = (hi - lo) as u64;
            *payload += n;
            if *payload > limits.max_payload_bytes {
                return Err(Error::Limit("payload_bytes"));
            }
            if extents.len() as u64 >= limits.max_extents_per_file {
                return Err(Error::Limit("extents_per_file"));
            }
            let sum = hex::encode(extent_hash::sha256(&buf[lo..hi]));
            extents.push(Extent(start + lo as u64, n, sum));
            out.block.copy_within(at + lo..at + hi, at);
            out.len += n as usize;
        }
        ctx.bytes_done
            .fetch_add(start + len - pos, Ordering::Relaxed);
        pos = start + len;
    }
    ctx.bytes_done.fetch_add(job.size - pos, Ordering::Relaxed);
    let after = rustix::fs::fstat(&file).map_err(errno_err("stat_file", Src::SourceTree))?;
    if after.st_size as u64 != job.size
        || fsutil::stat_times(&after).1 != job.mtime_ns
        || fsutil::stat_ctime(&after) != job.ctime_ns
    {
        return Err(Error::SourceChanged("file_modified"));
    }
    Ok(extents)
}
