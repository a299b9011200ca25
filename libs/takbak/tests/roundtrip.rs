//! Round trips: a fixed sample tree and proptest-generated trees restore equal in bytes, metadata
//! and link structure, with holes preserved.

use crate::common;

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
    // Two 4 KiB-ish data regions of a 5 MiB file: two chunks stored, each as the span of its
    // non-zero 4 KiB blocks (4096 bytes of 7s; one block around "blip"), the rest not.
    let mut archive = std::fs::File::open(d.out.join("a.takbak")).unwrap();
    let opened = takbak::reader::open(&mut archive, &Limits::default()).unwrap();
    let sparse_img = opened
        .manifest
        .entries
        .into_iter()
        .find(|e| e.path == "sparse.img");
    let extents = sparse_img.and_then(|e| e.extents).unwrap();
    let spans: Vec<(u64, u64)> = extents.iter().map(|x| (x.0, x.1)).collect();
    assert_eq!(spans, vec![(0, 4096), (3 << 20, 4096)]);
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

/// Many small files across several directories, interleaved with large, sparse, empty and
/// all-zero files and hardlinks: exercises the parallel small-file readers (several batches, the
/// reorder window, hand-over to the in-order reader at every large file). The restored tree must
/// be exact and two backups of the same tree must list identical entries and extents (the
/// archive layout does not depend on thread timing).
#[test]
fn many_small_files_interleaved_with_large_ones_are_deterministic() {
    let mut specs = Vec::new();
    let spec = |path: String, node: Node| Spec {
        path,
        node,
        uid: 0,
        gid: 0,
        atime_ns: 1_600_000_000_123_456_789,
        mtime_ns: 1_600_000_001_987_654_321,
    };
    for d in 0..4 {
        specs.push(spec(format!("d{d}"), Node::Dir { mode: 0o755 }));
        for i in 0..300u64 {
            let path = format!("d{d}/f{i:04}");
            let node = match i % 97 {
                0 => Node::File {
                    mode: 0o644,
                    size: (1 << 20) + i,
                    data: vec![(0, vec![d as u8 + 1; 4096]), (1 << 20, vec![7; i as usize])],
                },
                1 => Node::File {
                    mode: 0o600,
                    size: 3 << 20,
                    data: vec![(2 << 20, vec![9; 100])],
                },
                2 => Node::File {
                    mode: 0o644,
                    size: 0,
                    data: vec![],
                },
                3 => Node::File {
                    mode: 0o644,
                    size: 5000,
                    data: vec![(0, vec![0; 5000])],
                },
                _ => {
                    let len = 1 + (i * 7919 + d * 131) % 12_000;
                    let bytes = (0..len).map(|k| (k * 31 + i + d) as u8 | 1).collect();
                    Node::File {
                        mode: 0o640,
                        size: len,
                        data: vec![(0, bytes)],
                    }
                }
            };
            specs.push(spec(path, node));
        }
        specs.push(spec(
            format!("d{d}/zz-link"),
            Node::Hardlink {
                to: format!("d{d}/f0005"),
            },
        ));
    }
    let (d, r) = round_trip(&specs);
    assert_eq!(r.totals.files, 1200);
    let list = |a: &std::path::Path| {
        let mut f = std::fs::File::open(a).unwrap();
        takbak::reader::open(&mut f, &Limits::default())
            .unwrap()
            .manifest
            .entries
    };
    let second = d.out.join("b.takbak");
    run_backup(&d.src, &second, Limits::default()).unwrap();
    assert_eq!(list(&d.out.join("a.takbak")), list(&second));
}
