//! The committed reference archive (`tests/vectors/reference.takbak`): it verifies with its recorded
//! digest, lists the expected entries, restores to the tree it was made from, and every one of a
//! deterministic set of mutations of it is rejected by the reader (so CI always exercises the reader,
//! with or without cargo-fuzz).
//!
//! Regenerate (only when the format changes): `cargo test -p takbak --test integration vector:: -- --ignored`.

use crate::common;

use std::io::Cursor;
use std::path::PathBuf;

use common::*;
use takbak::limits::Limits;

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

fn vector_specs() -> Vec<Spec> {
    let s = |path: &str, node: Node, uid: u32, t: i64| Spec {
        path: path.into(),
        node,
        uid,
        gid: 100 + uid,
        atime_ns: t - 1_000_000_007,
        mtime_ns: t,
    };
    let t = 1_600_000_000_000_000_001i64;
    vec![
        s("docs", Node::Dir { mode: 0o755 }, 1, t),
        s(
            "docs/read me.txt",
            Node::File {
                mode: 0o644,
                size: 12,
                data: vec![(0, b"TAKBAK1 ok!\n".to_vec())],
            },
            2,
            t + 1,
        ),
        s(
            "docs/naïve 名前",
            Node::Hardlink {
                to: "docs/read me.txt".into(),
            },
            0,
            0,
        ),
        s(
            "docs/empty",
            Node::File {
                mode: 0o600,
                size: 0,
                data: vec![],
            },
            3,
            t + 2,
        ),
        s(
            "holes.bin",
            Node::File {
                mode: 0o640,
                size: (1 << 20) + 100,
                data: vec![((1 << 20) + 90, b"0123456789".to_vec())],
            },
            4,
            t + 3,
        ),
        s("empty dir", Node::Dir { mode: 0o700 }, 5, t + 4),
        s(
            "to-readme",
            Node::Symlink {
                target: "docs/read me.txt".into(),
            },
            6,
            t + 5,
        ),
        s(
            "absolute",
            Node::Symlink {
                target: "/var/lib/data".into(),
            },
            7,
            t + 6,
        ),
        s(
            "dangling",
            Node::Symlink {
                target: "../gone".into(),
            },
            8,
            t + 7,
        ),
    ]
}

#[test]
#[ignore = "regenerates the committed vector"]
fn regenerate_reference_vector() {
    let d = dirs();
    build(&d.src, &vector_specs());
    rustix::fs::utimensat(
        rustix::fs::CWD,
        &d.src,
        &takbak::fsutil::timestamps(1, 2),
        rustix::fs::AtFlags::empty(),
    )
    .unwrap();
    std::fs::set_permissions(&d.src, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = d.out.join("reference.takbak");
    let r = run_backup(&d.src, &out, Limits::default()).unwrap();
    std::fs::create_dir_all(vectors()).unwrap();
    std::fs::copy(&out, vectors().join("reference.takbak")).unwrap();
    std::fs::write(
        vectors().join("reference.sha256"),
        format!("{}  reference.takbak\n", r.archive_sha256.unwrap()),
    )
    .unwrap();
}

fn vector_bytes() -> Vec<u8> {
    std::fs::read(vectors().join("reference.takbak")).unwrap()
}

#[test]
fn reference_vector_verifies_with_its_recorded_digest() {
    let recorded = std::fs::read_to_string(vectors().join("reference.sha256")).unwrap();
    let r = verify_path(&vectors().join("reference.takbak")).unwrap();
    assert_eq!(
        recorded.split_whitespace().next(),
        r.archive_sha256.as_deref()
    );
    assert_eq!(
        (
            r.totals.entries,
            r.totals.files,
            r.totals.directories,
            r.totals.symlinks,
            r.totals.hardlinks,
            r.totals.payload_bytes
        ),
        (10, 3, 3, 3, 1, 12 + 100)
    );
}

#[test]
fn reference_vector_lists_and_restores_to_its_tree() {
    let bytes = vector_bytes();
    let opened = takbak::reader::open(&mut Cursor::new(&bytes), &Limits::default()).unwrap();
    let mut listing = Vec::new();
    takbak::reader::list(&opened, &mut listing).unwrap();
    let paths: Vec<String> = String::from_utf8(listing)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["path"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        paths,
        [
            ".",
            "absolute",
            "dangling",
            "docs",
            "docs/empty",
            "docs/naïve 名前",
            "docs/read me.txt",
            "empty dir",
            "holes.bin",
            "to-readme"
        ]
    );

    let d = dirs();
    build(&d.src, &vector_specs());
    rustix::fs::utimensat(
        rustix::fs::CWD,
        &d.src,
        &takbak::fsutil::timestamps(1, 2),
        rustix::fs::AtFlags::empty(),
    )
    .unwrap();
    std::fs::set_permissions(&d.src, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    run_restore(
        &d.dst,
        &vectors().join("reference.takbak"),
        Limits::default(),
    )
    .unwrap();
    assert_eq!(describe(&d.dst), describe(&d.src));
}

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn every_mutation_of_the_reference_is_rejected() {
    let original = vector_bytes();
    let mut rng = Rng(0x7a6b_6261_6b31_0001);
    let mut reasons = std::collections::BTreeMap::<&'static str, usize>::new();
    for i in 0..3000 {
        let mut b = original.clone();
        let pos = rng.below(b.len());
        match i % 6 {
            0 => b[pos] ^= 1 << rng.below(8),
            1 => b[pos] = b[pos].wrapping_add(1 + rng.below(255) as u8),
            2 => b.truncate(pos),
            3 => b.insert(pos, rng.next() as u8),
            4 => {
                b.remove(pos);
            }
            _ => {
                // Several flips at once, in one region.
                for _ in 0..1 + rng.below(8) {
                    let p = (pos + rng.below(64)).min(b.len() - 1);
                    b[p] ^= 1 << rng.below(8);
                }
            }
        }
        if b == original {
            continue;
        }
        let e = takbak::reader::open_and_verify(&mut Cursor::new(&b), &Limits::default(), &ctx())
            .map(|_| ())
            .expect_err("a mutated archive was accepted");
        *reasons.entry(e.reason()).or_default() += 1;
    }
    // The mutations reach every layer of checks, not just the first.
    for r in [
        "bad_magic",
        "trailer_checksum_mismatch",
        "manifest_checksum_mismatch",
        "extent_checksum_mismatch",
        "archive_length_mismatch",
    ] {
        assert!(reasons.contains_key(r), "no mutation hit {r}: {reasons:?}");
    }
}
