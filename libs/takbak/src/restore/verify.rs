//! Restore stage `verify_tree`: every written entry re-read and compared with the manifest and the
//! extent checks taken from the validated archive bytes (type, mode, owner, times, size, content,
//! zero ranges, links, no extra names).

use super::*;

/// Compares the restored tree against the manifest and fsyncs it, children before parents.
#[allow(clippy::unnecessary_cast)]
pub(super) fn verify_tree(
    root: &OwnedFd,
    opened: &Opened,
    checks: &[ExtentCheck],
    ctx: &Ctx,
    fsync_each: bool,
) -> Result<()> {
    let entries = &opened.manifest.entries;
    // Index of each entry's first extent check.
    let first_check: Vec<usize> = entries
        .iter()
        .scan(0usize, |n, e| {
            let at = *n;
            *n += e.extents.as_ref().map_or(0, Vec::len);
            Some(at)
        })
        .collect();
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 2);
    // Content checks run on a small pool; the walk (names, types, metadata, link structure, the
    // optional per-inode fsyncs) stays in order on this thread. The reported failure is the one of
    // the earliest entry, whichever thread found it.
    let first: std::sync::Mutex<Option<(usize, Error)>> = std::sync::Mutex::new(None);
    let record = |i: usize, e: Error| {
        let mut f = first.lock().unwrap_or_else(|p| p.into_inner());
        if f.as_ref().is_none_or(|(j, _)| i < *j) {
            *f = Some((i, e));
        }
    };
    let failed = || first.lock().map(|f| f.is_some()).unwrap_or(true);
    let at = std::cell::Cell::new(0usize);
    let walked = std::thread::scope(|s| {
        let (jtx, jrx) = crossbeam_channel::bounded::<ContentJob>(64);
        for _ in 0..workers {
            let jrx = jrx.clone();
            let (record, failed, first_check) = (&record, &failed, &first_check);
            s.spawn(move || {
                let mut buf = Vec::new();
                for job in jrx {
                    if failed() {
                        continue; // drain: an earlier failure is already known
                    }
                    let e = &entries[job.i];
                    let n = e.extents.as_ref().map_or(0, Vec::len);
                    let Some(want) = checks.get(first_check[job.i]..first_check[job.i] + n) else {
                        record(job.i, Error::Archive("payload_without_extent"));
                        continue;
                    };
                    let mut pr = job.fd2.map(|fd| {
                        let ranges = e.extents.iter().flatten().map(|x| (x.0, x.1)).collect();
                        ExtentPrefetch::new(File::from(fd), ranges)
                    });
                    let r = verify_content(
                        &File::from(job.fd),
                        pr.as_mut(),
                        job.probe,
                        e,
                        want,
                        &mut buf,
                        ctx,
                    );
                    if let Err(err) = r {
                        record(job.i, err);
                    }
                }
            });
        }
        drop(jrx);
        walk_tree(root, opened, ctx, fsync_each, &jtx, &at)
    });
    if let Err(e) = walked {
        record(at.get(), e);
    }
    match first.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// A restored regular file whose content a pool thread checks.
struct ContentJob {
    i: usize,
    fd: OwnedFd,
    /// A second descriptor for the O_DIRECT prefetcher (large files).
    fd2: Option<OwnedFd>,
    probe: bool,
}

/// The in-order part of [`verify_tree`]; `at` tells which entry an error belongs to.
#[allow(clippy::unnecessary_cast)]
fn walk_tree(
    root: &OwnedFd,
    opened: &Opened,
    ctx: &Ctx,
    fsync_each: bool,
    jobs: &crossbeam_channel::Sender<ContentJob>,
    at: &std::cell::Cell<usize>,
) -> Result<()> {
    let entries = &opened.manifest.entries;
    let index: std::collections::HashMap<&str, usize> = entries
        .iter()
        .enumerate()
        .map(|(i, e)| (e.path.as_str(), i))
        .collect();
    let mut children = vec![0usize; entries.len()];
    let mut links = vec![1u64; entries.len()];
    for e in entries.iter().skip(1) {
        let (p, _) = format::split_parent(&e.path);
        if let Some(&pi) = index.get(p) {
            children[pi] += 1;
        }
        if e.kind == Kind::Hardlink
            && let Some(&ti) = e.target.as_deref().and_then(|t| index.get(t))
        {
            links[ti] += 1;
        }
    }
    let mismatch = Error::RestoreMismatch;
    // Root: exactly the archived children plus the marker; ownership and mode.
    let names = fsutil::list_dir(root).map_err(dst("read_dir"))?;
    if names.len() != children[0] + 1 || !names.iter().any(|n| n == MARKER_NAME.as_bytes()) {
        return Err(mismatch("directory_children"));
    }
    let st = rustix::fs::fstat(root).map_err(dst("stat"))?;
    let r = &entries[0];
    if Some(st.st_mode & 0o7777) != r.mode || Some(st.st_uid) != r.uid || Some(st.st_gid) != r.gid {
        return Err(mismatch("root_metadata"));
    }

    let direct_ok = crate::dio::direct_allowed();
    let mut inodes = vec![0u64; entries.len()];
    let mut stack: Vec<(String, OwnedFd)> = Vec::new();
    let pop_sync = |stack: &mut Vec<(String, OwnedFd)>, parent: &str| -> Result<()> {
        while stack.last().is_some_and(|(p, _)| p != parent) {
            if let Some((_, fd)) = stack.pop()
                && fsync_each
            {
                rustix::fs::fsync(&fd).map_err(dst("fsync_dir"))?;
                ctx.step();
            }
        }
        Ok(())
    };
    for (i, e) in entries.iter().enumerate().skip(1) {
        at.set(i);
        ctx.check()?;
        let (parent, name) = format::split_parent(&e.path);
        let name = cname(name)?;
        pop_sync(&mut stack, parent)?;
        let pfd = match stack.last() {
            Some((_, fd)) => fd,
            None => root,
        };
        let st = match rustix::fs::statat(pfd, &name, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => return Err(mismatch("entry_missing")),
            r => r.map_err(dst("stat"))?,
        };
        let ty = fsutil::file_type(&st);
        let meta_ok = |with_mode: bool| {
            (!with_mode || Some(st.st_mode & 0o7777) == e.mode)
                && Some(st.st_uid) == e.uid
                && Some(st.st_gid) == e.gid
                && Some(fsutil::stat_times(&st)) == e.atime_ns.zip(e.mtime_ns)
        };
        match e.kind {
            Kind::Dir => {
                if ty != fsutil::S_IFDIR {
                    return Err(mismatch("entry_type"));
                }
                if !meta_ok(true) {
                    return Err(mismatch("metadata"));
                }
                let fd = fsutil::open_dir(pfd, &name).map_err(dst("open_dir"))?;
                if fsutil::list_dir(&fd).map_err(dst("read_dir"))?.len() != children[i] {
                    return Err(mismatch("directory_children"));
                }
                stack.push((e.path.clone(), fd));
            }
            Kind::File => {
                if ty != fsutil::S_IFREG {
                    return Err(mismatch("entry_type"));
                }
                if !meta_ok(true) {
                    return Err(mismatch("metadata"));
                }
                if Some(st.st_size as u64) != e.size || st.st_nlink as u64 != links[i] {
                    return Err(mismatch("size_or_link_count"));
                }
                let fd = fsutil::open_read(pfd, &name).map_err(dst("open_file"))?;
                let fst = rustix::fs::fstat(&fd).map_err(dst("stat"))?;
                if fst.st_ino != st.st_ino {
                    return Err(mismatch("entry_replaced"));
                }
                if fsync_each {
                    rustix::fs::fsync(&fd).map_err(dst("fsync_file"))?;
                    ctx.step();
                }
                let stored: u64 = e.extents.iter().flatten().map(|x| x.1).sum();
                let fd2 = if direct_ok && stored >= DIRECT_MIN_FILE {
                    // A second descriptor of the same inode for the O_DIRECT prefetcher, so the
                    // first one keeps plain reads for the zero-range checks.
                    let fd2 = fsutil::open_read(pfd, &name).map_err(dst("open_file"))?;
                    let st2 = rustix::fs::fstat(&fd2).map_err(dst("stat"))?;
                    if st2.st_ino != st.st_ino {
                        return Err(mismatch("entry_replaced"));
                    }
                    Some(fd2)
                } else {
                    None
                };
                // Fully allocated files have no holes to skip: read them without probing the map
                // (reading is always correct; the hole map only saves work).
                let probe = (st.st_blocks as u64).saturating_mul(512) < st.st_size as u64;
                jobs.send(ContentJob { i, fd, fd2, probe })
                    .map_err(|_| Error::Archive("verify_thread_stopped"))?;
                inodes[i] = st.st_ino as u64;
            }
            Kind::Symlink => {
                if ty != fsutil::S_IFLNK {
                    return Err(mismatch("entry_type"));
                }
                let t = rustix::fs::readlinkat(pfd, &name, Vec::new()).map_err(dst("readlink"))?;
                if Some(t.as_bytes()) != e.target.as_deref().map(str::as_bytes) {
                    return Err(mismatch("symlink_target"));
                }
                // readlink may have bumped the link's access time (there is no O_NOATIME for it):
                // put the archived times back, then compare what is on disk.
                let (a, m) = times(e)?;
                rustix::fs::utimensat(
                    pfd,
                    &name,
                    &fsutil::timestamps(a, m),
                    AtFlags::SYMLINK_NOFOLLOW,
                )
                .map_err(dst("set_times"))?;
                let st = rustix::fs::statat(pfd, &name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(dst("stat"))?;
                if Some(st.st_uid) != e.uid
                    || Some(st.st_gid) != e.gid
                    || Some(fsutil::stat_times(&st)) != e.atime_ns.zip(e.mtime_ns)
                {
                    return Err(mismatch("metadata"));
                }
            }
            Kind::Hardlink => {
                let ti = e.target.as_deref().and_then(|t| index.get(t)).copied();
                if ty != fsutil::S_IFREG || ti.map(|t| inodes[t]) != Some(st.st_ino as u64) {
                    return Err(mismatch("hardlink_identity"));
                }
            }
        }
        ctx.files_done.fetch_add(1, Ordering::Relaxed);
    }
    at.set(entries.len());
    pop_sync(&mut stack, "\0")?;
    if fsync_each {
        rustix::fs::fsync(root).map_err(dst("fsync_root"))?;
        ctx.step();
    }
    Ok(())
}

/// Like [`check_range`], from the prefetcher's data pieces (holes count as zeros).
fn check_prefetched(r: &mut ExtentPrefetch, off: u64, len: u64, ctx: &Ctx) -> Result<ExtentCheck> {
    let end = off + len;
    let mut h = ExtentHasher::new();
    let mut p = off;
    loop {
        ctx.check()?;
        let piece = r.peek().map_err(io_err("read_file", Src::Destination))?;
        match piece {
            Some(pc) if pc.off < end => {
                if pc.off < p {
                    return Err(Error::RestoreMismatch("content"));
                }
                h.update_zeros(pc.off - p);
                let b = pc.bytes();
                h.update(b);
                p = pc.off + b.len() as u64;
                r.consume();
            }
            _ => break,
        }
    }
    if p > end {
        return Err(Error::RestoreMismatch("content"));
    }
    h.update_zeros(end - p);
    Ok(h.check())
}

/// Checks stored extents against the checks taken while the archive was validated, and every other
/// byte range as zero, skipping holes.
fn verify_content(
    file: &File,
    mut pr: Option<&mut ExtentPrefetch>,
    probe: bool,
    e: &Entry,
    want: &[ExtentCheck],
    buf: &mut Vec<u8>,
    ctx: &Ctx,
) -> Result<()> {
    let size = e.size.unwrap_or(0);
    let mut pos = 0u64;
    for (format::Extent(off, len, _), want) in e.extents.iter().flatten().zip(want) {
        check_zero(file, pos, *off, buf, ctx)?;
        let got = match pr.as_deref_mut() {
            Some(r) => check_prefetched(r, *off, *len, ctx)?,
            None => check_range(file, probe, *off, *len, buf, ctx)?,
        };
        if got != *want {
            return Err(Error::RestoreMismatch("content"));
        }
        ctx.bytes_done.fetch_add(*len, Ordering::Relaxed);
        pos = off + len;
    }
    check_zero(file, pos, size, buf, ctx)
}

/// The [`ExtentCheck`] of the restored bytes `[off, off + len)`. Ranges the file system reports as
/// holes (`SEEK_DATA`/`SEEK_HOLE`) read as zeros by definition, so they are accounted without a
/// read; every range it reports as data is read and hashed.
fn check_range(
    file: &File,
    probe: bool,
    off: u64,
    len: u64,
    buf: &mut Vec<u8>,
    ctx: &Ctx,
) -> Result<ExtentCheck> {
    let end = off + len;
    let mut h = ExtentHasher::new();
    let mut p = off;
    while p < end {
        ctx.check()?;
        if !probe {
            let n = len as usize;
            buf.resize(n, 0);
            file.read_exact_at(&mut buf[..n], off)
                .map_err(io_err("read_file", Src::Destination))?;
            h.update(&buf[..n]);
            break;
        }
        let data = match rustix::fs::seek(file.as_fd(), RSeek::Data(p)) {
            Ok(d) => d.min(end),
            Err(Errno::NXIO) => end,
            Err(e) => return Err(dst("seek_data")(e)),
        };
        h.update_zeros(data.saturating_sub(p));
        if data >= end {
            break;
        }
        let hole = match rustix::fs::seek(file.as_fd(), RSeek::Hole(data)) {
            Ok(x) if x > data => x.min(end),
            Ok(_) | Err(Errno::NXIO) => end,
            Err(e) => return Err(dst("seek_hole")(e)),
        };
        let mut q = data;
        while q < hole {
            let n = CHUNK_SIZE.min(hole - q) as usize;
            buf.resize(n, 0);
            file.read_exact_at(&mut buf[..n], q)
                .map_err(io_err("read_file", Src::Destination))?;
            h.update(&buf[..n]);
            q += n as u64;
        }
        p = hole;
    }
    Ok(h.check())
}

fn check_zero(file: &File, mut from: u64, to: u64, buf: &mut Vec<u8>, ctx: &Ctx) -> Result<()> {
    while from < to {
        ctx.check()?;
        let data = match rustix::fs::seek(file.as_fd(), RSeek::Data(from)) {
            Ok(d) => d,
            Err(Errno::NXIO) => return Ok(()),
            Err(e) => return Err(dst("seek_data")(e)),
        };
        if data >= to {
            return Ok(());
        }
        let n = CHUNK_SIZE.min(to - data);
        buf.resize(n as usize, 0);
        file.read_exact_at(buf, data)
            .map_err(io_err("read_file", Src::Destination))?;
        if !fsutil::is_zero(buf) {
            return Err(Error::RestoreMismatch("content"));
        }
        from = data + n;
    }
    Ok(())
}
