//! Round trips: a fixed sample tree and proptest-generated trees restore equal in bytes, metadata
//! and link structure, with holes preserved.

mod common;

use common::*;
use proptest::prelude::*;
use takbak::limits::Limits;

fn round_trip(specs: &[Spec]) -> (Dirs, takbak::result::Report) {
    let d = dirs();
    build(&d.src, specs);
    let before = describe(&d.src);
    let archive = d.out.join("a.takbak");
    let b = run_backup(&d.src, &archive, Limits::default()).unwrap();
    let v = verify_path(&archive).unwrap();
    assert_eq!(
        b.archive_sha256, v.archive_sha256,
        "verify recomputes the backup's digest"
    );
    let r = run_restore(&d.dst, &archive, Limits::default()).unwrap();
    assert_eq!(r.archive_sha256, b.archive_sha256);
    assert_eq!(describe(&d.dst), before, "restored tree equals the source");
    (d, r)
}

#[test]
fn sample_tree_round_trips_with_holes_and_mode_0600_archive() {
    let (d, r) = round_trip(&sample_specs());
    assert_eq!(
        (
            r.totals.entries,
            r.totals.files,
            r.totals.directories,
            r.totals.symlinks,
            r.totals.hardlinks
        ),
        (11, 4, 3, 3, 1)
    );
    // Two 4 KiB-ish data regions of a 5 MiB file: two chunks stored, the rest not.
    use std::os::unix::fs::MetadataExt;
    let sparse = std::fs::symlink_metadata(d.dst.join("sparse.img")).unwrap();
    assert!(
        sparse.blocks() * 512 < 64 * 1024,
        "restored sparse file allocates {} bytes",
        sparse.blocks() * 512
    );
    let archive = std::fs::metadata(d.out.join("a.takbak")).unwrap();
    assert_eq!(archive.mode() & 0o7777, 0o600);
    assert!(!d.dst.join(takbak::format::MARKER_NAME).exists());
    let leftovers: Vec<_> = std::fs::read_dir(&d.out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        leftovers,
        vec![std::ffi::OsString::from("a.takbak")],
        "no temp file left behind"
    );
}

#[test]
fn all_zero_chunks_store_no_payload() {
    let d = dirs();
    build(
        &d.src,
        &[Spec {
            path: "zeros".into(),
            node: Node::File {
                mode: 0o644,
                size: 3 << 20,
                data: vec![(0, vec![0u8; 3 << 20])],
            },
            uid: 0,
            gid: 0,
            atime_ns: 1,
            mtime_ns: 2,
        }],
    );
    let r = run_backup(&d.src, &d.out.join("z.takbak"), Limits::default()).unwrap();
    assert_eq!(
        (
            r.totals.logical_bytes,
            r.totals.payload_bytes,
            r.totals.extents
        ),
        (3 << 20, 0, 0)
    );
}

fn name() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "a",
        "b c",
        "ünï",
        "日本語",
        "x.txt",
        "with\ttab",
        "-dash",
        "..dots",
        ".hidden",
        "long-name-0123456789",
    ])
    .prop_map(String::from)
}

#[derive(Debug, Clone)]
enum Gen {
    Dir,
    File {
        size: u64,
        pieces: Vec<(u64, Vec<u8>)>,
    },
    Sparse {
        size: u64,
        pieces: Vec<(u64, Vec<u8>)>,
    },
    Symlink(String),
    Hardlink(usize),
}

fn gen_node() -> impl Strategy<Value = Gen> {
    prop_oneof![
        3 => Just(Gen::Dir),
        4 => (0u64..5000, prop::collection::vec((0u64..5000, prop::collection::vec(any::<u8>(), 1..200)), 0..3))
            .prop_map(|(size, pieces)| Gen::File { size, pieces }),
        1 => ((1u64 << 20)..(3u64 << 20), prop::collection::vec((0u64..(3 << 20), prop::collection::vec(1u8..255, 1..64)), 0..3))
            .prop_map(|(size, pieces)| Gen::Sparse { size, pieces }),
        2 => prop::sample::select(vec!["/abs/target", "../up", "dangling", "ünï/x", "a b"]).prop_map(|t| Gen::Symlink(t.into())),
        2 => any::<usize>().prop_map(Gen::Hardlink),
    ]
}

/// Turns random (parent choice, name, node, meta) picks into a valid spec list.
fn specs_from(raw: Vec<(usize, String, Gen, u32, u32, i64, i64)>) -> Vec<Spec> {
    let mut dirs_: Vec<String> = vec![String::new()];
    let mut files: Vec<String> = Vec::new();
    let mut used = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for (i, (parent, name, g, mode, owner, atime, mtime)) in raw.into_iter().enumerate() {
        let p = &dirs_[parent % dirs_.len()];
        let path = if p.is_empty() {
            format!("{name}{i}")
        } else {
            format!("{p}/{name}{i}")
        };
        if !used.insert(path.clone()) {
            continue;
        }
        let clip = |size: u64, pieces: Vec<(u64, Vec<u8>)>| -> Vec<(u64, Vec<u8>)> {
            pieces
                .into_iter()
                .filter(|(o, b)| o + b.len() as u64 <= size)
                .collect()
        };
        let node = match g {
            Gen::Dir => {
                dirs_.push(path.clone());
                Node::Dir { mode: mode & 0o777 }
            }
            Gen::File { size, pieces } | Gen::Sparse { size, pieces } => {
                files.push(path.clone());
                Node::File {
                    mode: mode & 0o777,
                    size,
                    data: clip(size, pieces),
                }
            }
            Gen::Symlink(t) => Node::Symlink { target: t },
            Gen::Hardlink(k) if !files.is_empty() => Node::Hardlink {
                to: files[k % files.len()].clone(),
            },
            Gen::Hardlink(_) => Node::Dir { mode: 0o755 },
        };
        if let Node::Dir { .. } = node
            && !dirs_.contains(&path)
        {
            dirs_.push(path.clone());
        }
        out.push(Spec {
            path,
            node,
            uid: owner % 3000,
            gid: (owner / 7) % 3000,
            atime_ns: atime,
            mtime_ns: mtime,
        });
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, max_shrink_iters: 20, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn generated_trees_round_trip(raw in prop::collection::vec(
        (any::<usize>(), name(), gen_node(), any::<u32>(), any::<u32>(),
         -1_000_000_000_000_000_000i64..4_000_000_000_000_000_000, 0i64..4_000_000_000_000_000_000),
        0..24,
    )) {
        let specs = specs_from(raw);
        let (d, _) = round_trip(&specs);
        // Holes: every generated file's restored allocation is at most its source allocation
        // rounded up to whole 4 KiB blocks per data piece (no zero-filling of holes).
        use std::os::unix::fs::MetadataExt;
        for s in &specs {
            if let Node::File { size, data, .. } = &s.node
                && *size >= 1 << 20
            {
                    let dst = std::fs::symlink_metadata(d.dst.join(&s.path)).unwrap();
                    let bound = (data.len() as u64 + 1) * 2 * 4096 + 4096;
                    prop_assert!(dst.blocks() * 512 <= bound, "{} allocates {}", s.path, dst.blocks() * 512);
            }
        }
    }
}
