//! Small safe wrappers over the Linux file-system calls the tools need (via rustix, no `unsafe`).
//!
//! Every open of a tree entry is relative to an already-open directory descriptor and uses
//! `O_NOFOLLOW`, so symbolic links are never traversed. Reads use `O_NOATIME` where permitted so that
//! neither the source nor the restored tree has its access times disturbed by the tools themselves.

use std::ffi::CStr;
use std::os::fd::{AsFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, RenameFlags, Stat, Timespec, Timestamps};
use rustix::io::Errno;

/// Access and modification times of a stat buffer, in nanoseconds since the epoch.
#[allow(clippy::unnecessary_cast)]
pub fn stat_times(st: &Stat) -> (i64, i64) {
    let a = (st.st_atime as i64)
        .saturating_mul(1_000_000_000)
        .saturating_add(st.st_atime_nsec as i64);
    let m = (st.st_mtime as i64)
        .saturating_mul(1_000_000_000)
        .saturating_add(st.st_mtime_nsec as i64);
    (a, m)
}

/// Change time of a stat buffer in nanoseconds.
#[allow(clippy::unnecessary_cast)]
pub fn stat_ctime(st: &Stat) -> i64 {
    (st.st_ctime as i64)
        .saturating_mul(1_000_000_000)
        .saturating_add(st.st_ctime_nsec as i64)
}

/// Converts nanoseconds since the epoch into a `Timespec` (floor division, so pre-1970 works).
pub fn timespec(ns: i64) -> Timespec {
    Timespec {
        tv_sec: ns.div_euclid(1_000_000_000),
        tv_nsec: ns.rem_euclid(1_000_000_000) as _,
    }
}

/// Both times as `Timestamps`.
pub fn timestamps(atime_ns: i64, mtime_ns: i64) -> Timestamps {
    Timestamps {
        last_access: timespec(atime_ns),
        last_modification: timespec(mtime_ns),
    }
}

/// File type bits of a stat mode.
pub fn file_type(st: &Stat) -> u32 {
    st.st_mode & 0o170_000
}
/// `S_IFDIR`.
pub const S_IFDIR: u32 = 0o040_000;
/// `S_IFREG`.
pub const S_IFREG: u32 = 0o100_000;
/// `S_IFLNK`.
pub const S_IFLNK: u32 = 0o120_000;
/// `S_IFCHR`.
pub const S_IFCHR: u32 = 0o020_000;
/// `S_IFBLK`.
pub const S_IFBLK: u32 = 0o060_000;
/// `S_IFIFO`.
pub const S_IFIFO: u32 = 0o010_000;
/// `S_IFSOCK`.
pub const S_IFSOCK: u32 = 0o140_000;

/// Opens with `O_NOATIME`, retrying without it when the kernel refuses (`EPERM` for non-owners).
pub fn open_noatime<Fd: AsFd>(dirfd: Fd, name: &CStr, flags: OFlags) -> Result<OwnedFd, Errno> {
    let base = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(&dirfd, name, base | OFlags::NOATIME, Mode::empty()) {
        Err(Errno::PERM) => rustix::fs::openat(&dirfd, name, base, Mode::empty()),
        r => r,
    }
}

/// Opens a directory entry as a directory without following symlinks.
pub fn open_dir<Fd: AsFd>(dirfd: Fd, name: &CStr) -> Result<OwnedFd, Errno> {
    open_noatime(dirfd, name, OFlags::RDONLY | OFlags::DIRECTORY)
}

/// Opens a regular file for reading without following symlinks.
pub fn open_read<Fd: AsFd>(dirfd: Fd, name: &CStr) -> Result<OwnedFd, Errno> {
    open_noatime(dirfd, name, OFlags::RDONLY)
}

/// Lists a directory's names (without `.` and `..`), sorted byte-wise.
pub fn list_dir<Fd: AsFd>(dirfd: Fd) -> Result<Vec<Vec<u8>>, Errno> {
    // A duplicate descriptor has its own position only via a fresh open; `openat(fd, ".")` gives one,
    // so listing never disturbs a descriptor the caller is also using.
    let fd = open_noatime(&dirfd, c".", OFlags::RDONLY | OFlags::DIRECTORY)?;
    let mut dir = rustix::fs::Dir::read_from(&fd)?;
    let mut names = Vec::new();
    while let Some(ent) = dir.read() {
        let ent = ent?;
        let n = ent.file_name().to_bytes();
        if n != b"." && n != b".." {
            names.push(n.to_vec());
        }
    }
    names.sort_unstable();
    Ok(names)
}

/// What extended attributes an entry carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Xattrs {
    /// None.
    None,
    /// A POSIX ACL (`system.posix_acl_*`).
    Acl,
    /// Any other extended attribute.
    Other,
}

/// Classifies the extended attributes of `path` (not following a final symlink).
pub fn xattrs(path: &CStr) -> Result<Xattrs, Errno> {
    let n = match rustix::fs::llistxattr_query(path) {
        Ok(n) => n,
        Err(Errno::OPNOTSUPP) => return Ok(Xattrs::None),
        Err(e) => return Err(e),
    };
    if n == 0 {
        return Ok(Xattrs::None);
    }
    let mut buf = vec![0u8; n + 256];
    let n = match rustix::fs::llistxattr(path, &mut buf[..]) {
        Ok(n) => n,
        // The list grew between the calls: it is not empty, which is all that matters.
        Err(Errno::RANGE) => return Ok(Xattrs::Other),
        Err(e) => return Err(e),
    };
    let acl = buf[..n]
        .split(|b| *b == 0)
        .any(|name| name.starts_with(b"system.posix_acl_"));
    Ok(if acl {
        Xattrs::Acl
    } else if n == 0 {
        Xattrs::None
    } else {
        Xattrs::Other
    })
}

/// Classifies the extended attributes of an open file (one `flistxattr`, no path resolution).
pub fn fxattrs<Fd: AsFd>(fd: Fd) -> Result<Xattrs, Errno> {
    let mut buf = [0u8; 4096];
    let n = match rustix::fs::flistxattr(&fd, &mut buf[..]) {
        Ok(n) => n,
        Err(Errno::OPNOTSUPP) => return Ok(Xattrs::None),
        // Longer than 4 KiB: certainly not empty; an ACL or not, it is refused either way, and the
        // distinction only picks the reason, so look closer with a larger buffer.
        Err(Errno::RANGE) => {
            let mut big = vec![0u8; 1 << 16];
            match rustix::fs::flistxattr(&fd, &mut big[..]) {
                Ok(n) => return Ok(classify(&big[..n])),
                Err(_) => return Ok(Xattrs::Other),
            }
        }
        Err(e) => return Err(e),
    };
    Ok(classify(&buf[..n]))
}

fn classify(list: &[u8]) -> Xattrs {
    if list.is_empty() {
        Xattrs::None
    } else if list
        .split(|b| *b == 0)
        .any(|name| name.starts_with(b"system.posix_acl_"))
    {
        Xattrs::Acl
    } else {
        Xattrs::Other
    }
}

/// Creates `name` in `dirfd` exclusively (`O_EXCL`, mode 0600) for writing.
pub fn create_exclusive<Fd: AsFd>(dirfd: Fd, name: &CStr) -> Result<OwnedFd, Errno> {
    rustix::fs::openat(
        dirfd,
        name,
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o600),
    )
}

/// Publishes `tmp` as `name` in the same directory without ever replacing an existing `name`:
/// `renameat2(RENAME_NOREPLACE)`, or `link` + `unlink` where the file system lacks it.
pub fn publish_noreplace<Fd: AsFd>(dirfd: Fd, tmp: &CStr, name: &CStr) -> Result<(), Errno> {
    match rustix::fs::renameat_with(&dirfd, tmp, &dirfd, name, RenameFlags::NOREPLACE) {
        Err(Errno::INVAL) | Err(Errno::NOSYS) => {
            rustix::fs::linkat(&dirfd, tmp, &dirfd, name, AtFlags::empty())?;
            rustix::fs::unlinkat(&dirfd, tmp, AtFlags::empty())
        }
        r => r,
    }
}

/// Opens `rel` (a validated relative path) beneath `root` without following any symlink on the way:
/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, or a component-by-component `O_NOFOLLOW` walk
/// on kernels without `openat2`.
pub fn open_beneath<Fd: AsFd>(root: Fd, rel: &str, flags: OFlags) -> Result<OwnedFd, Errno> {
    use rustix::fs::ResolveFlags;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    let base = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let r = match rustix::fs::openat2(&root, rel, base | OFlags::NOATIME, Mode::empty(), resolve) {
        Err(Errno::PERM) => rustix::fs::openat2(&root, rel, base, Mode::empty(), resolve),
        r => r,
    };
    match r {
        Err(Errno::NOSYS) => {
            let mut comps = rel.split('/').peekable();
            let mut dir = open_noatime(&root, c".", OFlags::RDONLY | OFlags::DIRECTORY)?;
            while let Some(c) = comps.next() {
                let c = std::ffi::CString::new(c).map_err(|_| Errno::INVAL)?;
                if comps.peek().is_none() {
                    return open_noatime(&dir, &c, flags);
                }
                dir = open_dir(&dir, &c)?;
            }
            Err(Errno::INVAL)
        }
        r => r,
    }
}

/// The smallest range of whole `block`-byte blocks of `buf` (the last one may be short) that holds
/// every non-zero byte, or `None` when `buf` is all zeros.
pub fn nonzero_span(buf: &[u8], block: usize) -> Option<(usize, usize)> {
    let blocks = buf.len().div_ceil(block);
    let at = |k: usize| &buf[k * block..((k + 1) * block).min(buf.len())];
    let first = (0..blocks).find(|&k| !is_zero(at(k)))?;
    let last = (first..blocks).rev().find(|&k| !is_zero(at(k)))?;
    Some((first * block, ((last + 1) * block).min(buf.len())))
}

/// True when every byte is zero (written so the compiler vectorises the inner fold).
pub fn is_zero(buf: &[u8]) -> bool {
    // Quick reject on the first and last bytes (dense data almost always fails here), then a
    // branch-free OR over 64-bit words per 4 KiB block.
    if buf.first().is_some_and(|b| *b != 0) || buf.last().is_some_and(|b| *b != 0) {
        return false;
    }
    buf.chunks(4096).all(|c| {
        let words = c.chunks_exact(8);
        let tail = words.remainder().iter().fold(0u8, |a, b| a | b);
        words
            .map(|w| u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
            .fold(0u64, |a, b| a | b)
            == 0
            && tail == 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nonzero_span_is_whole_blocks_around_the_data() {
        let mut b = vec![0u8; 3 * 4096 + 100];
        assert_eq!(nonzero_span(&b, 4096), None);
        b[5000] = 1;
        assert_eq!(nonzero_span(&b, 4096), Some((4096, 8192)));
        b[3 * 4096 + 99] = 1;
        assert_eq!(
            nonzero_span(&b, 4096),
            Some((4096, 3 * 4096 + 100)),
            "short last block"
        );
        b[0] = 1;
        assert_eq!(nonzero_span(&b, 4096), Some((0, b.len())));
    }

    #[test]
    fn timespec_handles_negative_times() {
        let t = timespec(-1);
        assert_eq!((t.tv_sec, t.tv_nsec), (-1, 999_999_999));
        let t = timespec(1_500_000_000_123);
        assert_eq!((t.tv_sec, t.tv_nsec), (1500, 123));
    }

    #[test]
    fn zero_detection() {
        let mut b = vec![0u8; 10_000];
        assert!(is_zero(&b));
        b[9_999] = 1;
        assert!(!is_zero(&b));
        assert!(is_zero(&[]));
        for at in [0usize, 1, 7, 8, 4095, 4096, 5003, 9_998] {
            let mut b = vec![0u8; 9_999];
            b[at] = 0x80;
            assert!(!is_zero(&b), "{at}");
            assert!(is_zero(&b[..at]), "{at}");
        }
    }
}
