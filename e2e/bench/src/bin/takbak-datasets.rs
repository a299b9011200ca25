//! Writes the TAKBAK1 benchmark's datasets (`hack/bench/takbak/run.sh`): deterministic for a seed,
//! sized by `--scale` (1.0 is the full set: about 4.3 GiB of real data, 12 GiB logical).
//!
//! ```text
//!  many-small  50,000 files of 1–16 KiB of incompressible bytes in about 7,500 nested directories;
//!              names with UTF-8, spaces and a tab; varied modes and owners (owners only as root);
//!              nanosecond mtimes; hardlinks; symlinks (relative, dangling, absolute, to a
//!              directory); empty directories with varied modes
//!  large       4 files of incompressible bytes, 3.0 GiB in all, with sizes that are not multiples
//!              of any block size
//!  sparse-vm   two 4 GiB images, each with about 256 MiB of data in 1 MiB extents, runs of written
//!              zeros, a few non-zero bytes inside otherwise-zero MiB chunks, holes for the rest;
//!              a hardlink to one image, symlinks and a 0600 config file
//! ```
//!
//! No entry gets a setuid, setgid or sticky bit: TAKBAK1 refuses those by contract, and the
//! benchmark compares tools on data every tool archives.
//!
//! Usage: `takbak-datasets DEST [--only many-small,large,sparse-vm] [--scale F] [--seed N] [--force]`

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::os::unix::fs::{PermissionsExt, lchown, symlink};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use clap::Parser;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;

/// Writes the TAKBAK1 benchmark's datasets under DEST.
#[derive(Parser, Debug)]
struct Args {
    /// Where the datasets go (one directory per dataset); keep it outside any checkout.
    dest: PathBuf,
    /// Which datasets, comma-separated.
    #[arg(
        long,
        default_value = "many-small,large,sparse-vm",
        value_delimiter = ','
    )]
    only: Vec<String>,
    /// Size factor: 1.0 is the full set, 0.01 a smoke set of about a minute.
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Seed of the generator: the same seed and scale give the same bytes, names and metadata.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replace a dataset directory that exists (otherwise it is an error).
    #[arg(long)]
    force: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if !(args.scale > 0.0 && args.scale <= 4.0) {
        bail!("--scale must be in (0, 4], got {}", args.scale);
    }
    fs::create_dir_all(&args.dest).with_context(|| format!("creating {}", args.dest.display()))?;
    let root = is_root();
    for (i, name) in args.only.iter().enumerate() {
        let dir = args.dest.join(name);
        if dir.exists() {
            if !args.force {
                bail!("{} exists (pass --force to replace it)", dir.display());
            }
            remove_tree(&dir)?;
        }
        let mut rng = SmallRng::seed_from_u64(args.seed.wrapping_mul(31).wrapping_add(i as u64));
        let made = match name.as_str() {
            "many-small" => many_small(&dir, args.scale, root, &mut rng)?,
            "large" => large(&dir, args.scale, &mut rng)?,
            "sparse-vm" => sparse_vm(&dir, args.scale, &mut rng)?,
            other => bail!("unknown dataset {other:?} (many-small, large, sparse-vm)"),
        };
        println!(
            "{name}: {} files, {} directories, {} links, {:.1} MiB written, {:.1} MiB logical",
            made.files,
            made.dirs,
            made.links,
            made.written as f64 / MIB as f64,
            made.logical as f64 / MIB as f64
        );
    }
    Ok(())
}

/// What a dataset holds.
#[derive(Default)]
struct Made {
    files: u64,
    dirs: u64,
    links: u64,
    /// Bytes actually written (data and explicit zeros).
    written: u64,
    /// Apparent size of the regular files.
    logical: u64,
}

fn scaled(n: u64, scale: f64) -> u64 {
    ((n as f64 * scale).round() as u64).max(1)
}

fn is_root() -> bool {
    // The owner of a file this process creates is its effective uid.
    let probe = std::env::temp_dir().join(format!("takbak-datasets-uid-{}", std::process::id()));
    let uid = File::create(&probe)
        .and_then(|f| f.metadata())
        .map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    let _ = fs::remove_file(&probe);
    matches!(uid, Ok(0))
}

/// Removes a dataset tree, making read-only directories writable first.
fn remove_tree(dir: &Path) -> Result<()> {
    fn writable(dir: &Path) -> io::Result<()> {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o755))?;
        for entry in fs::read_dir(dir)? {
            let entry = entry?;
            if entry.file_type()?.is_dir() {
                writable(&entry.path())?;
            }
        }
        Ok(())
    }
    writable(dir).with_context(|| format!("making {} writable", dir.display()))?;
    fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))
}

/// A time between 2001 and 2033 with a nanosecond part.
fn mtime(rng: &mut SmallRng) -> SystemTime {
    UNIX_EPOCH
        + Duration::new(
            rng.random_range(1_000_000_000..2_000_000_000),
            rng.random_range(0..1_000_000_000),
        )
}

fn set_mtime(path: &Path, t: SystemTime) -> io::Result<()> {
    File::open(path)?.set_modified(t)
}

/// Writes `len` incompressible bytes to `path`.
fn random_file(path: &Path, len: u64, rng: &mut SmallRng) -> io::Result<()> {
    let mut out = BufWriter::with_capacity(MIB as usize, File::create(path)?);
    let mut buf = vec![0u8; MIB as usize];
    let mut left = len;
    while left > 0 {
        let n = left.min(MIB) as usize;
        rng.fill_bytes(&mut buf[..n]);
        out.write_all(&buf[..n])?;
        left -= n as u64;
    }
    out.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// Parts that file and directory names are made of: ASCII, accents, CJK, an emoji, spaces, a tab.
const NAME_PARTS: &[&str] = &[
    "data",
    "log",
    "report",
    "Ärger",
    "café",
    "naïve",
    "日本語",
    "데이터",
    "файл",
    "🎉",
    "a b",
    "tab\there",
    "x",
    "2026-12",
    "v1.2",
    "-dash",
    "under_score",
    "MiXeD",
];

fn name(rng: &mut SmallRng, i: u64) -> String {
    let a = NAME_PARTS[rng.random_range(0..NAME_PARTS.len())];
    let b = NAME_PARTS[rng.random_range(0..NAME_PARTS.len())];
    // The index keeps names unique within a directory.
    format!("{a} {b}-{i}")
}

const FILE_MODES: &[u32] = &[0o644, 0o600, 0o640, 0o755, 0o444, 0o664, 0o700];
const DIR_MODES: &[u32] = &[0o755, 0o700, 0o750, 0o555, 0o775];
const OWNERS: &[(u32, u32)] = &[(0, 0), (1000, 1000), (65534, 65534), (33, 33), (1000, 100)];

fn many_small(dir: &Path, scale: f64, root: bool, rng: &mut SmallRng) -> Result<Made> {
    let files = scaled(50_000, scale);
    let dir_count = scaled(7_500, scale);
    let mut made = Made::default();
    fs::create_dir_all(dir)?;
    // Directories: each new one under a random earlier one, so the tree is both wide and deep.
    let mut dirs = vec![dir.to_path_buf()];
    for i in 0..dir_count {
        let parent = dirs[rng.random_range(0..dirs.len())].clone();
        let d = parent.join(name(rng, i));
        fs::create_dir(&d).with_context(|| format!("creating {}", d.display()))?;
        dirs.push(d);
        made.dirs += 1;
    }
    let mut regular = Vec::with_capacity(files as usize);
    for i in 0..files {
        let parent = &dirs[rng.random_range(0..dirs.len())];
        let f = parent.join(name(rng, i));
        let len = rng.random_range(KIB..=16 * KIB);
        random_file(&f, len, rng).with_context(|| format!("writing {}", f.display()))?;
        made.files += 1;
        made.written += len;
        made.logical += len;
        regular.push(f);
    }
    // Hardlinks (one file in a hundred gets a second name elsewhere) and symlinks of every kind.
    for i in 0..(files / 100).max(1) {
        let target = &regular[rng.random_range(0..regular.len())];
        let link = dirs[rng.random_range(0..dirs.len())].join(format!("hardlink-{i}"));
        fs::hard_link(target, &link)?;
        made.links += 1;
    }
    for i in 0..(files / 200).max(4) {
        let at = &dirs[rng.random_range(0..dirs.len())];
        let link = at.join(format!("symlink-{i}"));
        match i % 4 {
            0 => {
                let target = &regular[rng.random_range(0..regular.len())];
                symlink(relative(at, target), &link)?;
            }
            1 => symlink(format!("missing-{i}/nowhere"), &link)?,
            2 => symlink("/etc/hostname", &link)?,
            _ => {
                let target = &dirs[rng.random_range(0..dirs.len())];
                symlink(relative(at, target), &link)?;
            }
        }
        made.links += 1;
    }
    // Empty directories, made last so that a read-only one stays empty.
    let mut empty = Vec::new();
    for i in 0..(dir_count / 50).max(2) {
        let d = dirs[rng.random_range(0..dirs.len())].join(format!("empty-{i}"));
        fs::create_dir(&d)?;
        made.dirs += 1;
        empty.push(d);
    }
    // Metadata: modes and owners of files, then times; directories last (children's writes change
    // a directory's mtime) and deepest first (a read-only parent still allows chmod of a child).
    for f in &regular {
        fs::set_permissions(f, fs::Permissions::from_mode(pick(rng, FILE_MODES)))?;
        if root {
            let (u, g) = OWNERS[rng.random_range(0..OWNERS.len())];
            lchown(f, Some(u), Some(g))?;
        }
        set_mtime_even_read_only(f, mtime(rng))?;
    }
    let mut all_dirs: Vec<PathBuf> = dirs.into_iter().skip(1).chain(empty).collect();
    all_dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for d in &all_dirs {
        if root {
            let (u, g) = OWNERS[rng.random_range(0..OWNERS.len())];
            lchown(d, Some(u), Some(g))?;
        }
        set_mtime(d, mtime(rng))?;
        fs::set_permissions(d, fs::Permissions::from_mode(pick(rng, DIR_MODES)))?;
    }
    Ok(made)
}

fn pick(rng: &mut SmallRng, from: &[u32]) -> u32 {
    from[rng.random_range(0..from.len())]
}

/// Sets a file's mtime even when its mode no longer lets the owner write it (root may anyway;
/// otherwise the mode is widened for the call and put back).
fn set_mtime_even_read_only(path: &Path, t: SystemTime) -> io::Result<()> {
    match set_mtime(path, t) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let mode = fs::metadata(path)?.permissions().mode();
            fs::set_permissions(path, fs::Permissions::from_mode(mode | 0o400))?;
            set_mtime(path, t)?;
            fs::set_permissions(path, fs::Permissions::from_mode(mode))
        }
        Err(e) => Err(e),
    }
}

/// `target` as seen from directory `from` (`../../a/b`).
fn relative(from: &Path, target: &Path) -> PathBuf {
    let from: Vec<_> = from.components().collect();
    let to: Vec<_> = target.components().collect();
    let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..from.len() {
        out.push("..");
    }
    for c in &to[common..] {
        out.push(c);
    }
    out
}

fn large(dir: &Path, scale: f64, rng: &mut SmallRng) -> Result<Made> {
    fs::create_dir_all(dir)?;
    // 3.0 GiB in all, none a multiple of a page, a block or a MiB.
    let sizes = [GIB + 1, GIB - 4095, 768 * MIB + 12_345, 256 * MIB - 8_251];
    let mut made = Made::default();
    for (i, size) in sizes.iter().enumerate() {
        let len = scaled(*size, scale);
        let f = dir.join(format!("blob-{i}.bin"));
        random_file(&f, len, rng).with_context(|| format!("writing {}", f.display()))?;
        set_mtime(&f, mtime(rng))?;
        made.files += 1;
        made.written += len;
        made.logical += len;
    }
    Ok(made)
}

fn sparse_vm(dir: &Path, scale: f64, rng: &mut SmallRng) -> Result<Made> {
    fs::create_dir_all(dir)?;
    let mut made = Made::default();
    for i in 0..2 {
        let path = dir.join(format!("disk-{i}.img"));
        let size = scaled(4 * GIB, scale).max(16 * MIB) / MIB * MIB;
        made.written += sparse_image(&path, size, scaled(256 * MIB, scale), rng)
            .with_context(|| format!("writing {}", path.display()))?;
        set_mtime(&path, mtime(rng))?;
        made.files += 1;
        made.logical += size;
    }
    fs::hard_link(dir.join("disk-0.img"), dir.join("disk-0.hardlink.img"))?;
    symlink("disk-1.img", dir.join("current.img"))?;
    symlink("../sparse-vm/disk-0.img", dir.join("previous.img"))?;
    made.links += 3;
    let config = dir.join("vm.conf");
    fs::write(
        &config,
        "memory=4096\ncpus=2\ndisk0=disk-0.img\ndisk1=disk-1.img\n",
    )?;
    fs::set_permissions(&config, fs::Permissions::from_mode(0o600))?;
    made.files += 1;
    made.written += fs::metadata(&config)?.len();
    made.logical += fs::metadata(&config)?.len();
    Ok(made)
}

/// A disk image of `size` bytes (a multiple of 1 MiB) with about `data` bytes of incompressible
/// data in 1 MiB extents; one MiB chunk in eight of the rest written as explicit zeros (some with a
/// few non-zero bytes inside); holes elsewhere. Returns the bytes written.
fn sparse_image(path: &Path, size: u64, data: u64, rng: &mut SmallRng) -> io::Result<u64> {
    let mut f = OpenOptions::new().write(true).create_new(true).open(path)?;
    f.set_len(size)?;
    let chunks = size / MIB;
    let data_chunks = (data / MIB).min(chunks / 2).max(1);
    let mut buf = vec![0u8; MIB as usize];
    let zeros = vec![0u8; MIB as usize];
    let mut written = 0;
    for c in 0..chunks {
        // Data extents cluster (runs of a few MiB), as a file system's blocks do.
        let roll = rng.random_range(0..chunks);
        if roll < data_chunks {
            rng.fill_bytes(&mut buf);
            f.seek(SeekFrom::Start(c * MIB))?;
            f.write_all(&buf)?;
            written += MIB;
        } else if roll % 8 == 0 {
            f.seek(SeekFrom::Start(c * MIB))?;
            f.write_all(&zeros)?;
            written += MIB;
            if roll % 3 == 0 {
                // A blip: a few bytes that make the chunk not all zero.
                let at = rng.random_range(0..MIB - 16);
                f.seek(SeekFrom::Start(c * MIB + at))?;
                f.write_all(&rng.random::<[u8; 16]>())?;
            }
        }
    }
    f.sync_all()?;
    Ok(written)
}
