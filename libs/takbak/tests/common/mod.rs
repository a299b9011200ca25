//! Shared fixtures: operator records, tree builders, tree descriptions and tool runners.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{AtFlags, Mode, OFlags};
use sha2::{Digest, Sha256};
use takbak::backup::{BackupOptions, backup};
use takbak::ctx::Ctx;
use takbak::limits::Limits;
use takbak::records::{Identity, Purpose, Record};
use takbak::restore::{RestoreOptions, restore};
use takbak::result::Report;

pub fn source_identity() -> Identity {
    Identity {
        volume: "rv-source".into(),
        generation: "original-generation".into(),
        claim_uid: "original-claim".into(),
    }
}

pub fn destination_identity() -> Identity {
    Identity {
        volume: "rv-restored".into(),
        generation: "new-generation".into(),
        claim_uid: "new-claim".into(),
    }
}

pub fn record(purpose: Purpose) -> Record {
    Record {
        version: 1,
        purpose,
        source: source_identity(),
        record_id: "incident-42".into(),
        operator: "on-call".into(),
        method: "documented application stop and descriptor close".into(),
        evidence_reference: "private audited evidence location".into(),
        operator_acknowledged: true,
    }
}

pub fn ctx() -> Ctx {
    Ctx::new(Duration::from_secs(600))
}

pub fn run_backup(root: &Path, archive: &Path, limits: Limits) -> takbak::Result<Report> {
    let opts = BackupOptions {
        root: root.into(),
        archive: archive.into(),
        identity: source_identity(),
        record: record(Purpose::BackupQuiesced),
        limits,
    };
    backup(&opts, &ctx())
}

pub fn run_restore(root: &Path, archive: &Path, limits: Limits) -> takbak::Result<Report> {
    let opts = RestoreOptions {
        root: root.into(),
        archive: archive.into(),
        identity: destination_identity(),
        record: record(Purpose::RestoreIsolated),
        limits,
        expect_sha256: None,
    };
    restore(&opts, &ctx())
}

pub fn verify_path(archive: &Path) -> takbak::Result<Report> {
    takbak::tool::verify_file(archive, &Limits::default(), None, &ctx())
}

/// A node of a tree to build.
#[derive(Debug, Clone)]
pub enum Node {
    Dir {
        mode: u32,
    },
    /// `data` pieces at offsets; the file is `size` long (holes elsewhere).
    File {
        mode: u32,
        size: u64,
        data: Vec<(u64, Vec<u8>)>,
    },
    Symlink {
        target: String,
    },
    Hardlink {
        to: String,
    },
}

/// One entry of a tree spec: path, node, owner, times.
#[derive(Debug, Clone)]
pub struct Spec {
    pub path: String,
    pub node: Node,
    pub uid: u32,
    pub gid: u32,
    pub atime_ns: i64,
    pub mtime_ns: i64,
}

fn c(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap()
}

fn ts(a: i64, m: i64) -> rustix::fs::Timestamps {
    takbak::fsutil::timestamps(a, m)
}

/// Builds `specs` (parents listed before children) under `root`, then applies owners and times
/// children-first so directory times stick.
pub fn build(root: &Path, specs: &[Spec]) {
    use std::os::unix::fs::FileExt;
    for s in specs {
        let p = root.join(&s.path);
        match &s.node {
            Node::Dir { .. } => std::fs::create_dir(&p).unwrap(),
            Node::File { size, data, .. } => {
                let f = File::create(&p).unwrap();
                f.set_len(*size).unwrap();
                for (off, bytes) in data {
                    f.write_all_at(bytes, *off).unwrap();
                }
            }
            Node::Symlink { target } => std::os::unix::fs::symlink(target, &p).unwrap(),
            Node::Hardlink { to } => std::fs::hard_link(root.join(to), &p).unwrap(),
        }
    }
    for s in specs.iter().rev() {
        let p = c(&root.join(&s.path));
        let cwd = rustix::fs::CWD;
        let (u, g) = (
            Some(rustix::fs::Uid::from_raw(s.uid)),
            Some(rustix::fs::Gid::from_raw(s.gid)),
        );
        match &s.node {
            Node::Hardlink { .. } => continue,
            Node::Symlink { .. } => {
                rustix::fs::chownat(cwd, &p, u, g, AtFlags::SYMLINK_NOFOLLOW).unwrap();
            }
            Node::Dir { mode } | Node::File { mode, .. } => {
                rustix::fs::chownat(cwd, &p, u, g, AtFlags::empty()).unwrap();
                rustix::fs::chmodat(cwd, &p, Mode::from_raw_mode(*mode), AtFlags::empty()).unwrap();
            }
        }
        rustix::fs::utimensat(
            cwd,
            &p,
            &ts(s.atime_ns, s.mtime_ns),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .unwrap();
    }
}

/// Everything TAKBAK1 promises to preserve about one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desc {
    pub kind: &'static str,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime_ns: i64,
    pub mtime_ns: i64,
    pub size: u64,
    pub sha256: String,
    pub target: String,
    /// First path (in sorted order) sharing this inode: the link structure.
    pub link_group: String,
}

/// Describes a tree without disturbing access times (O_NOATIME reads, lstat before readlink).
pub fn describe(root: &Path) -> BTreeMap<String, Desc> {
    let mut out = BTreeMap::new();
    let mut inodes: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let rootfd = rustix::fs::open(
        root,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOATIME,
        Mode::empty(),
    )
    .unwrap();
    walk(&rootfd, ".", &mut out, &mut inodes);
    let st = rustix::fs::fstat(&rootfd).unwrap();
    let (a, m) = takbak::fsutil::stat_times(&st);
    out.insert(
        ".".into(),
        Desc {
            kind: "dir",
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            atime_ns: a,
            mtime_ns: m,
            size: 0,
            sha256: String::new(),
            target: String::new(),
            link_group: String::new(),
        },
    );
    out
}

#[allow(clippy::unnecessary_cast)]
fn walk(
    dir: &std::os::fd::OwnedFd,
    rel: &str,
    out: &mut BTreeMap<String, Desc>,
    inodes: &mut BTreeMap<(u64, u64), String>,
) {
    for name in takbak::fsutil::list_dir(dir).unwrap() {
        let cname = CString::new(name.clone()).unwrap();
        let name = String::from_utf8(name).unwrap();
        let path = if rel == "." {
            name.clone()
        } else {
            format!("{rel}/{name}")
        };
        let st = rustix::fs::statat(dir, &cname, AtFlags::SYMLINK_NOFOLLOW).unwrap();
        let (a, m) = takbak::fsutil::stat_times(&st);
        let mut d = Desc {
            kind: "",
            mode: st.st_mode & 0o7777,
            uid: st.st_uid,
            gid: st.st_gid,
            atime_ns: a,
            mtime_ns: m,
            size: 0,
            sha256: String::new(),
            target: String::new(),
            link_group: String::new(),
        };
        match takbak::fsutil::file_type(&st) {
            takbak::fsutil::S_IFDIR => {
                d.kind = "dir";
                out.insert(path.clone(), d);
                let sub = takbak::fsutil::open_dir(dir, &cname).unwrap();
                walk(&sub, &path, out, inodes);
                continue;
            }
            takbak::fsutil::S_IFREG => {
                d.kind = "file";
                d.size = st.st_size as u64;
                let mut f = File::from(takbak::fsutil::open_read(dir, &cname).unwrap());
                let mut h = Sha256::new();
                let mut buf = vec![0u8; 1 << 16];
                loop {
                    let n = f.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    h.update(&buf[..n]);
                }
                d.sha256 = hex::encode(h.finalize());
                d.link_group = inodes
                    .entry((st.st_dev as u64, st.st_ino as u64))
                    .or_insert(path.clone())
                    .clone();
            }
            takbak::fsutil::S_IFLNK => {
                d.kind = "symlink";
                d.mode = 0;
                d.target = String::from_utf8(
                    rustix::fs::readlinkat(dir, &cname, Vec::new())
                        .unwrap()
                        .into_bytes(),
                )
                .unwrap();
                // readlink bumps a link's atime under relatime: put it back so describing a tree
                // never changes what a later backup records.
                rustix::fs::utimensat(dir, &cname, &ts(a, m), AtFlags::SYMLINK_NOFOLLOW).unwrap();
            }
            _ => d.kind = "other",
        }
        out.insert(path, d);
    }
}

/// Directory inside a fresh temp dir: (guard, src, out, dst).
pub struct Dirs {
    pub tmp: tempfile::TempDir,
    pub src: PathBuf,
    pub out: PathBuf,
    pub dst: PathBuf,
}

pub fn dirs() -> Dirs {
    let tmp = tempfile::Builder::new()
        .prefix("takbak-test")
        .tempdir()
        .unwrap();
    let (src, out, dst) = (
        tmp.path().join("src"),
        tmp.path().join("out"),
        tmp.path().join("dst"),
    );
    for d in [&src, &out, &dst] {
        std::fs::create_dir(d).unwrap();
    }
    Dirs { tmp, src, out, dst }
}

/// A small fixed tree touching every supported kind, with awkward names and a sparse file.
pub fn sample_specs() -> Vec<Spec> {
    let s = |path: &str, node: Node, uid: u32, t: i64| Spec {
        path: path.into(),
        node,
        uid,
        gid: uid + 1,
        atime_ns: t - 7_000_000_001,
        mtime_ns: t,
    };
    let base = 1_700_000_000_123_456_789i64;
    vec![
        s("a dir", Node::Dir { mode: 0o750 }, 10, base),
        s(
            "a dir/ünïcødé file.txt",
            Node::File {
                mode: 0o640,
                size: 13,
                data: vec![(0, b"hello, world\n".to_vec())],
            },
            11,
            base + 1,
        ),
        s(
            "a dir/empty",
            Node::File {
                mode: 0o600,
                size: 0,
                data: vec![],
            },
            12,
            base + 2,
        ),
        s(
            "a dir/link to file",
            Node::Hardlink {
                to: "a dir/ünïcødé file.txt".into(),
            },
            0,
            0,
        ),
        s(
            "sparse.img",
            Node::File {
                mode: 0o644,
                size: 5 << 20,
                data: vec![(0, vec![7u8; 4096]), ((3 << 20) + 17, b"blip".to_vec())],
            },
            13,
            base + 3,
        ),
        s(
            "tab\tname",
            Node::File {
                mode: 0o444,
                size: 70_000,
                data: vec![(0, (0..70_000u32).map(|i| (i % 251) as u8).collect())],
            },
            14,
            base + 4,
        ),
        s("empty dir", Node::Dir { mode: 0o700 }, 15, base + 5),
        s(
            "rel-link",
            Node::Symlink {
                target: "a dir/ünïcødé file.txt".into(),
            },
            16,
            base + 6,
        ),
        s(
            "abs-link",
            Node::Symlink {
                target: "/etc/passwd".into(),
            },
            17,
            base + 7,
        ),
        s(
            "dangling",
            Node::Symlink {
                target: "../nowhere/at all".into(),
            },
            18,
            base + 8,
        ),
    ]
}
