//! Reading TAKBAK1: open (header, trailer, manifest), full verification, and listing.
//!
//! ```text
//!  open():    seek end → trailer (self-checksum, offsets vs file length, limits)
//!             → header → manifest (bounded, SHA-256 vs trailer) → validate_manifest()
//!  verify():  one sequential pass over every byte, 1 MiB blocks:
//!             this thread checks header/trailer bytes, per-extent SHA-256 and the manifest SHA-256;
//!             a hasher thread computes the whole-archive SHA-256 in parallel (buffers recycled).
//! ```
//!
//! The reader is generic over `Read + Seek` so the fuzz target and the mutation tests drive exactly
//! the code the tools run. It never trusts a length before checking it against the file size and
//! the limits, so memory stays bounded by the manifest limit plus a few 1 MiB buffers.

use std::io::{BufReader, Read, Seek, SeekFrom, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};

use crate::ctx::Ctx;
use crate::error::{Error, FailureSource as Src, Result, io_err};
use crate::extent_hash::{ExtentCheck, ExtentHasher};
use crate::format::{self, CHUNK_SIZE, HEADER_LEN, Manifest, TRAILER_LEN, Totals, Trailer};
use crate::limits::Limits;

/// What a full verification established.
#[derive(Debug)]
pub struct Verified {
    /// SHA-256 of the whole archive file.
    pub archive_sha256: [u8; 32],
    /// One check per stored extent, in manifest order, taken while the extent's hash was verified
    /// (restore re-verifies the destination against these).
    pub checks: Vec<ExtentCheck>,
}

/// An archive whose framing and manifest passed every structural check.
#[derive(Debug, Clone)]
pub struct Opened {
    /// The validated manifest.
    pub manifest: Manifest,
    /// The decoded trailer.
    pub trailer: Trailer,
    /// Aggregates of the manifest.
    pub totals: Totals,
    /// Archive length in bytes.
    pub file_len: u64,
    header: [u8; HEADER_LEN as usize],
    trailer_bytes: [u8; TRAILER_LEN as usize],
}

fn read_io(e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        Error::Archive("truncated")
    } else {
        io_err("read_archive", Src::Archive)(e)
    }
}

struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    n: u64,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.n += n as u64;
        Ok(n)
    }
}

/// Opens an archive: checks the framing, reads and validates the manifest. Reads no payload.
pub fn open<R: Read + Seek>(r: &mut R, limits: &Limits) -> Result<Opened> {
    let file_len = r.seek(SeekFrom::End(0)).map_err(read_io)?;
    if file_len < HEADER_LEN + TRAILER_LEN {
        return Err(Error::Archive("truncated"));
    }
    let mut header = [0u8; HEADER_LEN as usize];
    r.seek(SeekFrom::Start(0)).map_err(read_io)?;
    r.read_exact(&mut header).map_err(read_io)?;
    format::check_header(&header)?;
    let mut trailer_bytes = [0u8; TRAILER_LEN as usize];
    r.seek(SeekFrom::Start(file_len - TRAILER_LEN))
        .map_err(read_io)?;
    r.read_exact(&mut trailer_bytes).map_err(read_io)?;
    let trailer = Trailer::decode(&trailer_bytes, file_len, limits)?;

    // Checksum the manifest before parsing it, so corruption is reported as such and the JSON parser
    // only ever sees bytes that match the trailer. Streaming, so memory stays at one buffer.
    let manifest_off = HEADER_LEN + trailer.payload_len;
    r.seek(SeekFrom::Start(manifest_off)).map_err(read_io)?;
    let mut pre = HashingReader {
        inner: (&mut *r).take(trailer.manifest_len),
        hasher: Sha256::new(),
        n: 0,
    };
    std::io::copy(&mut pre, &mut std::io::sink()).map_err(read_io)?;
    if pre.n != trailer.manifest_len {
        return Err(Error::Archive("truncated"));
    }
    if pre.hasher.finalize().as_slice() != trailer.manifest_sha256 {
        return Err(Error::Archive("manifest_checksum_mismatch"));
    }
    r.seek(SeekFrom::Start(manifest_off)).map_err(read_io)?;
    let mut hr = HashingReader {
        inner: (&mut *r).take(trailer.manifest_len),
        hasher: Sha256::new(),
        n: 0,
    };
    let manifest: Manifest = {
        let buffered = BufReader::with_capacity(CHUNK_SIZE as usize, &mut hr);
        serde_json::from_reader(buffered).map_err(|e| match e.io_error_kind() {
            Some(_) => read_io(std::io::Error::from(e)),
            None => Error::Archive("manifest_json_invalid"),
        })?
    };
    // `from_reader` reads to the end of the (bounded) section to reject trailing garbage.
    if hr.n != trailer.manifest_len {
        return Err(Error::Archive("truncated"));
    }
    if hr.hasher.finalize().as_slice() != trailer.manifest_sha256 {
        return Err(Error::Archive("manifest_checksum_mismatch"));
    }
    if manifest.entries.len() as u64 != trailer.entry_count {
        return Err(Error::Archive("entry_count_mismatch"));
    }
    let totals = format::validate_manifest(&manifest, trailer.payload_len, limits)?;
    Ok(Opened {
        manifest,
        trailer,
        totals,
        file_len,
        header,
        trailer_bytes,
    })
}

/// Reads the whole archive once, checking every byte (header, every extent against the manifest,
/// manifest, trailer, length), and computes the whole-archive SHA-256.
pub fn verify<R: Read + Seek>(r: &mut R, opened: &Opened, ctx: &Ctx) -> Result<Verified> {
    let changed = || Error::Archive("archive_changed_during_read");
    let read_exact = |r: &mut R, b: &mut [u8]| -> Result<()> {
        match fill(r, b).map_err(read_io)? {
            n if n == b.len() => Ok(()),
            _ => Err(changed()),
        }
    };
    let mut whole = Sha256::new();
    let progress = |n: usize| {
        ctx.bytes_done.fetch_add(n as u64, Ordering::Relaxed);
    };
    let mut buf = vec![0u8; CHUNK_SIZE as usize];
    r.seek(SeekFrom::Start(0)).map_err(read_io)?;

    // The header and trailer were parsed by `open`; this read must return the same bytes.
    let same_again = |r: &mut R, buf: &mut [u8], parsed: &[u8], whole: &mut Sha256| {
        let b = &mut buf[..parsed.len()];
        read_exact(r, b)?;
        if b != parsed {
            return Err(changed());
        }
        whole.update(&*b);
        progress(b.len());
        Ok(())
    };
    same_again(r, &mut buf, &opened.header[..], &mut whole)?;

    let checks = verify_payload(r, opened, ctx, &mut whole)?;

    let mut manifest_hasher = Sha256::new();
    let mut left = opened.trailer.manifest_len;
    while left > 0 {
        ctx.check()?;
        let b = &mut buf[..left.min(CHUNK_SIZE) as usize];
        read_exact(r, b)?;
        manifest_hasher.update(&*b);
        whole.update(&*b);
        progress(b.len());
        left -= b.len() as u64;
    }
    if manifest_hasher.finalize().as_slice() != opened.trailer.manifest_sha256 {
        return Err(changed());
    }

    same_again(r, &mut buf, &opened.trailer_bytes[..], &mut whole)?;
    if fill(r, &mut buf[..1]).map_err(read_io)? != 0 {
        return Err(changed());
    }
    Ok(Verified {
        archive_sha256: whole.finalize().into(),
        checks,
    })
}

/// Reads the payload extent by extent, hashing it into `whole` on the way (while it is in this
/// core's cache), and checks each extent's SHA-256 on a small pool of threads; returns the
/// extents' checks in order.
///
/// The whole-archive hash is one sequential chain and bounds the speed of the pass; the extent
/// hashes are independent, so the pool keeps them off that path.
fn verify_payload<R: Read>(
    r: &mut R,
    opened: &Opened,
    ctx: &Ctx,
    whole: &mut Sha256,
) -> Result<Vec<ExtentCheck>> {
    let extents: Vec<&format::Extent> = opened
        .manifest
        .entries
        .iter()
        .filter_map(|e| e.extents.as_deref())
        .flatten()
        .collect();
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4);
    let failed = AtomicBool::new(false);
    let mut checks: Vec<Option<ExtentCheck>> = vec![None; extents.len()];
    // A job is a run of consecutive extents, `count` of them from index `first`, read back to back
    // into one buffer of at most one chunk (unless one extent is larger): small files travel in
    // batches, not one channel hand-off each.
    struct Job {
        first: usize,
        count: usize,
        buf: Vec<u8>,
    }
    type Done = (Job, Vec<ExtentCheck>, Option<Error>);
    let (read_result, hash_error) = std::thread::scope(|s| {
        let (job_tx, job_rx) = crossbeam_channel::bounded::<Job>(2 * workers);
        let (done_tx, done_rx) = crossbeam_channel::unbounded::<Done>();
        for _ in 0..workers {
            let (job_rx, done_tx, extents, failed) =
                (job_rx.clone(), done_tx.clone(), &extents, &failed);
            s.spawn(move || {
                for job in job_rx {
                    let mut at = 0usize;
                    let mut got = Vec::with_capacity(job.count);
                    let mut err = None;
                    for format::Extent(_, len, sum) in &extents[job.first..job.first + job.count] {
                        let mut h = ExtentHasher::new();
                        h.update(&job.buf[at..at + *len as usize]);
                        at += *len as usize;
                        let (digest, check) = h.finish();
                        if hex::encode(digest) != *sum {
                            failed.store(true, Ordering::Relaxed);
                            err = Some(Error::Archive("extent_checksum_mismatch"));
                            break;
                        }
                        got.push(check);
                    }
                    if done_tx.send((job, got, err)).is_err() {
                        break;
                    }
                }
            });
        }
        drop((job_rx, done_tx));
        let mut spare: Vec<Vec<u8>> = Vec::new();
        let mut hash_error = None;
        let mut collect = |(job, got, err): Done, spare: &mut Vec<Vec<u8>>| {
            ctx.files_done
                .fetch_add(got.len() as u64, Ordering::Relaxed);
            for (k, c) in got.into_iter().enumerate() {
                checks[job.first + k] = Some(c);
            }
            spare.push(job.buf);
            if let Some(e) = err {
                hash_error.get_or_insert(e);
            }
        };
        let read_result = (|| -> Result<()> {
            let mut i = 0usize;
            while i < extents.len() {
                ctx.check()?;
                if failed.load(Ordering::Relaxed) {
                    return Ok(()); // a hash mismatch is reported below
                }
                while let Ok(d) = done_rx.try_recv() {
                    collect(d, &mut spare);
                }
                let (first, mut total) = (i, 0u64);
                while i < extents.len() && (i == first || total + extents[i].1 <= CHUNK_SIZE) {
                    total += extents[i].1;
                    i += 1;
                }
                let mut buf = spare.pop().unwrap_or_default();
                buf.resize(total as usize, 0);
                if fill(r, &mut buf).map_err(read_io)? != buf.len() {
                    return Err(Error::Archive("archive_changed_during_read"));
                }
                whole.update(&buf);
                ctx.bytes_done.fetch_add(total, Ordering::Relaxed);
                let job = Job {
                    first,
                    count: i - first,
                    buf,
                };
                job_tx
                    .send(job)
                    .map_err(|_| Error::Archive("hasher_stopped"))?;
            }
            Ok(())
        })();
        drop(job_tx);
        for d in done_rx {
            collect(d, &mut spare);
        }
        (read_result, hash_error)
    });
    // A mismatch comes first in file order: only extents before a read failure were hashed.
    if let Some(e) = hash_error {
        return Err(e);
    }
    read_result?;
    checks
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or(Error::Archive("hasher_stopped"))
}

/// Reads until `buf` is full or EOF; returns the bytes read.
/// Compares the archive's computed SHA-256 with the digest the operator supplied, if any (for
/// `--verify` and, before the destination is touched, for a restore).
pub(crate) fn check_expected(computed: &[u8; 32], expected: Option<&[u8; 32]>) -> Result<()> {
    match expected {
        Some(e) if e != computed => Err(Error::Archive("archive_sha256_mismatch")),
        _ => Ok(()),
    }
}

pub(crate) fn fill<R: Read>(r: &mut R, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// Opens and fully verifies an archive held in any seekable reader (used by the fuzz target).
pub fn open_and_verify<R: Read + Seek>(
    r: &mut R,
    limits: &Limits,
    ctx: &Ctx,
) -> Result<(Opened, [u8; 32])> {
    let opened = open(r, limits)?;
    let verified = verify(r, &opened, ctx)?;
    Ok((opened, verified.archive_sha256))
}

/// Writes one JSON line per manifest entry (path, type, metadata, size, stored extents).
pub fn list<W: Write>(opened: &Opened, out: &mut W) -> std::io::Result<()> {
    for e in &opened.manifest.entries {
        let stored: u64 = e.extents.iter().flatten().map(|x| x.1).sum();
        let mut v = serde_json::json!({ "path": e.path, "type": e.kind });
        let o = v.as_object_mut().map(|o| {
            if let Some(m) = e.mode {
                o.insert("mode".into(), format!("{m:04o}").into());
            }
            if let Some(u) = e.uid {
                o.insert("uid".into(), u.into());
            }
            if let Some(g) = e.gid {
                o.insert("gid".into(), g.into());
            }
            if let Some(t) = e.mtime_ns {
                o.insert("mtimeNs".into(), t.into());
            }
            if let Some(sz) = e.size {
                o.insert("size".into(), sz.into());
                o.insert("storedBytes".into(), stored.into());
            }
            if let Some(t) = &e.target {
                o.insert("target".into(), t.clone().into());
            }
        });
        let _ = o;
        serde_json::to_writer(&mut *out, &v)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}
