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

use sha2::{Digest, Sha256};

use crate::ctx::Ctx;
use crate::error::{Error, FailureSource as Src, Result, io_err};
use crate::format::{self, CHUNK_SIZE, HEADER_LEN, Manifest, TRAILER_LEN, Totals, Trailer};
use crate::limits::Limits;

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

/// Reads the whole archive once, checking every byte; returns the whole-archive SHA-256.
pub fn verify<R: Read + Seek>(r: &mut R, opened: &Opened, ctx: &Ctx) -> Result<[u8; 32]> {
    r.seek(SeekFrom::Start(0)).map_err(read_io)?;
    let payload_end = HEADER_LEN + opened.trailer.payload_len;
    let manifest_end = payload_end + opened.trailer.manifest_len;
    let mut extents = opened
        .manifest
        .entries
        .iter()
        .filter_map(|e| e.extents.as_deref())
        .flatten();
    let (tx, rx) = crossbeam_channel::bounded::<Vec<u8>>(4);
    let (spare_tx, spare_rx) = crossbeam_channel::unbounded::<Vec<u8>>();
    std::thread::scope(|s| {
        let hasher = s.spawn(move || {
            let mut h = Sha256::new();
            for b in rx {
                h.update(&b);
                let _ = spare_tx.send(b);
            }
            <[u8; 32]>::from(h.finalize())
        });
        let checked = (|| -> Result<()> {
            let mut pos = 0u64;
            let mut cur: Option<(u64, Sha256, &str)> = None;
            let mut manifest_hasher = Sha256::new();
            loop {
                ctx.check()?;
                let mut block = spare_rx.try_recv().unwrap_or_default();
                block.resize(CHUNK_SIZE as usize, 0);
                let n = fill(r, &mut block).map_err(read_io)?;
                if n == 0 {
                    break;
                }
                block.truncate(n);
                let end = pos + n as u64;
                if end > opened.file_len {
                    return Err(Error::Archive("archive_changed_during_read"));
                }
                let mut off = 0usize;
                while off < n {
                    let abs = pos + off as u64;
                    let rest = &block[off..];
                    let take = if abs < HEADER_LEN {
                        let k = rest.len().min((HEADER_LEN - abs) as usize);
                        if rest[..k] != opened.header[abs as usize..abs as usize + k] {
                            return Err(Error::Archive("archive_changed_during_read"));
                        }
                        k
                    } else if abs < payload_end {
                        let k0 = rest.len().min((payload_end - abs) as usize);
                        let (remaining, h, _) = match &mut cur {
                            Some(c) => c,
                            None => {
                                let format::Extent(_, len, sum) = extents
                                    .next()
                                    .ok_or(Error::Archive("payload_without_extent"))?;
                                cur.insert((*len, Sha256::new(), sum.as_str()))
                            }
                        };
                        let k = k0.min(*remaining as usize);
                        h.update(&rest[..k]);
                        *remaining -= k as u64;
                        if *remaining == 0 {
                            if let Some((_, h, sum)) = cur.take()
                                && hex::encode(h.finalize()) != sum
                            {
                                return Err(Error::Archive("extent_checksum_mismatch"));
                            }
                            ctx.files_done
                                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                        k
                    } else if abs < manifest_end {
                        let k = rest.len().min((manifest_end - abs) as usize);
                        manifest_hasher.update(&rest[..k]);
                        k
                    } else {
                        let t = (abs - manifest_end) as usize;
                        let k = rest.len().min(TRAILER_LEN as usize - t);
                        if rest[..k] != opened.trailer_bytes[t..t + k] {
                            return Err(Error::Archive("archive_changed_during_read"));
                        }
                        k
                    };
                    off += take;
                }
                ctx.bytes_done
                    .fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
                pos = end;
                tx.send(block)
                    .map_err(|_| Error::Archive("hasher_stopped"))?;
            }
            if pos != opened.file_len || cur.is_some() || extents.next().is_some() {
                return Err(Error::Archive("archive_changed_during_read"));
            }
            if manifest_hasher.finalize().as_slice() != opened.trailer.manifest_sha256 {
                return Err(Error::Archive("archive_changed_during_read"));
            }
            Ok(())
        })();
        drop(tx);
        let whole = hasher
            .join()
            .map_err(|_| Error::Archive("hasher_thread_panicked"))?;
        checked.map(|()| whole)
    })
}

/// Reads until `buf` is full or EOF; returns the bytes read.
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
    let sum = verify(r, &opened, ctx)?;
    Ok((opened, sum))
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
