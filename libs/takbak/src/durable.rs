//! How a restored tree is made durable: one `syncfs` where that is a proven whole-file-system
//! barrier, otherwise an `fsync` of every file, every directory (children first) and the root.
//!
//! ```text
//!  choose(root) ─▶ TAKBAK_FSYNC_EACH_INODE set?            ─▶ PerInode("forced")
//!               ─▶ kernel < 5.8 (syncfs hides write-back errors) ─▶ PerInode("kernel_lacks_syncfs_errors")
//!               ─▶ fstatfs type not in the allow-list      ─▶ PerInode("filesystem_not_allowlisted")
//!               ─▶ otherwise                                ─▶ Syncfs
//! ```
//!
//! Why an allow-list: `syncfs` writes back and waits for every dirty page and inode of the file
//! system and then calls its `sync_fs` hook (ext4/XFS/btrfs: journal commit plus a device cache
//! flush), which covers everything per-inode fsyncs would. File systems without a real `sync_fs`
//! (FUSE without `FUSE_SYNCFS`, NFS, overlay stacks, anything unknown) would report success while
//! the server or lower layer has not persisted anything: a per-inode `fsync` there reaches the
//! server (`FUSE_FSYNC`/`FUSE_FSYNCDIR`, NFS COMMIT), so those keep the fsync-every-inode path.
//! Before Linux 5.8 `syncfs` returned 0 even after a write-back error, so old kernels fall back too.

use std::os::fd::AsFd;

/// Environment variable forcing the per-inode fsync path (tests; operator escape hatch).
pub const FSYNC_EACH_ENV: &str = "TAKBAK_FSYNC_EACH_INODE";

/// The durability strategy for a restore destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// One `syncfs` on the destination file system after the tree is written and re-verified.
    Syncfs,
    /// `fsync` of every restored file and directory and the root, with the reason.
    PerInode(&'static str),
}

/// ext2/3/4.
pub const EXT4_SUPER_MAGIC: u64 = 0xEF53;
/// XFS.
pub const XFS_SUPER_MAGIC: u64 = 0x5846_5342;
/// btrfs.
pub const BTRFS_SUPER_MAGIC: u64 = 0x9123_683E;
/// tmpfs (nothing survives a reboot either way; syncfs and fsync are both no-ops there).
pub const TMPFS_MAGIC: u64 = 0x0102_1994;
/// FUSE (never allow-listed: `syncfs` does not reach the server without `FUSE_SYNCFS`).
pub const FUSE_SUPER_MAGIC: u64 = 0x6573_5546;

/// The pure decision, given the file-system magic, the kernel (major, minor) and the override.
pub fn decide(fs_magic: Option<u64>, kernel: Option<(u32, u32)>, forced: bool) -> Durability {
    if forced {
        return Durability::PerInode("forced");
    }
    match kernel {
        Some(k) if k >= (5, 8) => {}
        _ => return Durability::PerInode("kernel_lacks_syncfs_errors"),
    }
    match fs_magic {
        Some(EXT4_SUPER_MAGIC | XFS_SUPER_MAGIC | BTRFS_SUPER_MAGIC | TMPFS_MAGIC) => {
            Durability::Syncfs
        }
        _ => Durability::PerInode("filesystem_not_allowlisted"),
    }
}

/// Parses "6.18.44-foo" into (6, 18).
pub fn parse_kernel_release(r: &str) -> Option<(u32, u32)> {
    let mut it = r.split(['.', '-']);
    let major = it.next()?.parse().ok()?;
    let minor = it
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()?;
    Some((major, minor))
}

/// Chooses the strategy for the file system holding `root`.
#[allow(clippy::unnecessary_cast)]
pub fn choose<Fd: AsFd>(root: Fd) -> Durability {
    let forced = std::env::var_os(FSYNC_EACH_ENV).is_some_and(|v| !v.is_empty() && v != "0");
    let magic = rustix::fs::fstatfs(root).ok().map(|s| s.f_type as u64);
    let uname = rustix::system::uname();
    let kernel = uname.release().to_str().ok().and_then(parse_kernel_release);
    decide(magic, kernel, forced)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_release_parsing() {
        assert_eq!(parse_kernel_release("6.18.44-fc-v857"), Some((6, 18)));
        assert_eq!(parse_kernel_release("5.8.0"), Some((5, 8)));
        assert_eq!(parse_kernel_release("4.19-rc1"), Some((4, 19)));
        assert_eq!(parse_kernel_release("5.10+"), Some((5, 10)));
        assert_eq!(parse_kernel_release("garbage"), None);
    }

    #[test]
    fn decision_table() {
        let new = Some((6, 1));
        assert_eq!(
            decide(Some(EXT4_SUPER_MAGIC), new, false),
            Durability::Syncfs
        );
        assert_eq!(
            decide(Some(XFS_SUPER_MAGIC), new, false),
            Durability::Syncfs
        );
        assert_eq!(
            decide(Some(BTRFS_SUPER_MAGIC), new, false),
            Durability::Syncfs
        );
        assert_eq!(
            decide(Some(FUSE_SUPER_MAGIC), new, false),
            Durability::PerInode("filesystem_not_allowlisted")
        );
        assert_eq!(
            decide(None, new, false),
            Durability::PerInode("filesystem_not_allowlisted")
        );
        assert_eq!(
            decide(Some(EXT4_SUPER_MAGIC), Some((5, 7)), false),
            Durability::PerInode("kernel_lacks_syncfs_errors")
        );
        assert_eq!(
            decide(Some(EXT4_SUPER_MAGIC), None, false),
            Durability::PerInode("kernel_lacks_syncfs_errors")
        );
        assert_eq!(
            decide(Some(EXT4_SUPER_MAGIC), new, true),
            Durability::PerInode("forced")
        );
    }
}
