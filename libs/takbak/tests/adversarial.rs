//! Hostile archives: truncations at every section boundary, bit flips, crafted manifests (with valid
//! checksums, so the structural checks are what rejects them). Each must fail `--verify` and a restore
//! must fail before writing anything to the destination.

use crate::common;

use std::io::Cursor;
use std::path::Path;

use common::*;
use sha2::{Digest, Sha256};
use takbak::format::{self, Entry, Extent, HEADER_LEN, Kind, Manifest, TRAILER_LEN, Trailer};
use takbak::limits::Limits;

/// A fresh small archive and its parsed parts.
fn reference() -> (Vec<u8>, Manifest, Vec<u8>) {
    let d = dirs();
    build(&d.src, &sample_specs());
    let archive = d.out.join("a.takbak");
    run_backup(&d.src, &archive, Limits::default()).unwrap();
    let bytes = std::fs::read(&archive).unwrap();
    let opened = takbak::reader::open(&mut Cursor::new(&bytes), &Limits::default()).unwrap();
    let payload =
        bytes[HEADER_LEN as usize..(HEADER_LEN + opened.trailer.payload_len) as usize].to_vec();
    (bytes, opened.manifest, payload)
}

/// An independent encoder following docs/takbak1.md, used to craft archives with valid checksums.
fn encode(m: &Manifest, payload: &[u8]) -> Vec<u8> {
    let json = serde_json::to_vec(m).unwrap();
    let mut out = format::encode_header().to_vec();
    out.extend_from_slice(payload);
    out.extend_from_slice(&json);
    let t = Trailer {
        payload_len: payload.len() as u64,
        manifest_len: json.len() as u64,
        manifest_sha256: Sha256::digest(&json).into(),
        entry_count: m.entries.len() as u64,
    };
    out.extend_from_slice(&t.encode());
    out
}

/// Asserts rejection by verify (in memory and via the file path) and by restore with no write.
fn assert_rejected(bytes: &[u8], what: &str) -> &'static str {
    let err = takbak::reader::open_and_verify(&mut Cursor::new(bytes), &Limits::default(), &ctx())
        .map(|_| ())
        .expect_err(what);
    let d = dirs();
    let path = d.out.join("bad.takbak");
    std::fs::write(&path, bytes).unwrap();
    assert!(verify_path(&path).is_err(), "{what}: verify_file accepted");
    let r = run_restore(&d.dst, &path, Limits::default()).expect_err(what);
    assert!(
        matches!(r.category(), "archive_invalid" | "limit_exceeded"),
        "{what}: {}",
        r.category()
    );
    assert_eq!(
        std::fs::read_dir(&d.dst).unwrap().count(),
        0,
        "{what}: restore wrote to the destination"
    );
    err.reason()
}

fn entry(path: &str, kind: Kind) -> Entry {
    let meta = kind != Kind::Hardlink;
    Entry {
        path: path.into(),
        kind,
        mode: (meta && kind != Kind::Symlink).then_some(0o644),
        uid: meta.then_some(0),
        gid: meta.then_some(0),
        atime_ns: meta.then_some(1),
        mtime_ns: meta.then_some(2),
        size: (kind == Kind::File).then_some(0),
        extents: (kind == Kind::File).then(Vec::new),
        target: matches!(kind, Kind::Symlink | Kind::Hardlink).then(|| "x".to_string()),
    }
}

#[test]
fn the_reference_is_valid_and_re_encodes_identically() {
    let (bytes, m, payload) = reference();
    assert_eq!(
        encode(&m, &payload),
        bytes,
        "the independent encoder reproduces the archive byte for byte"
    );
}

#[test]
fn truncation_at_every_section_boundary() {
    let (bytes, _, payload) = reference();
    let p_end = HEADER_LEN as usize + payload.len();
    let m_end = bytes.len() - TRAILER_LEN as usize;
    let first_extent = 4096;
    for cut in [
        0,
        7,
        8,
        15,
        16,
        16 + first_extent,
        p_end - 1,
        p_end,
        (p_end + m_end) / 2,
        m_end - 1,
        m_end,
        m_end + 64,
        bytes.len() - 1,
    ] {
        assert_rejected(&bytes[..cut], &format!("truncated at {cut}"));
    }
}

#[test]
fn bit_flips_in_header_payload_manifest_and_trailer() {
    let (bytes, _, payload) = reference();
    let p_end = HEADER_LEN as usize + payload.len();
    let m_end = bytes.len() - TRAILER_LEN as usize;
    let cases = [
        (3, "bad_magic"),
        (12, "unknown_header_flags"),
        (20, "extent_checksum_mismatch"),
        (p_end - 1, "extent_checksum_mismatch"),
        (p_end + 10, "manifest_checksum_mismatch"),
        (m_end - 2, "manifest_checksum_mismatch"),
        (m_end + 17, "trailer_checksum_mismatch"),
        (bytes.len() - 1, "trailer_checksum_mismatch"),
    ];
    for (pos, reason) in cases {
        let mut b = bytes.clone();
        b[pos] ^= 0x10;
        assert_eq!(
            assert_rejected(&b, &format!("flip at {pos}")),
            reason,
            "flip at {pos}"
        );
    }
}

#[test]
fn crafted_manifests_with_valid_checksums() {
    let (_, m, payload) = reference();
    let base = || m.clone();
    let with = |f: &dyn Fn(&mut Manifest)| {
        let mut x = base();
        f(&mut x);
        encode(&x, &payload)
    };
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "dotdot",
            with(&|x| x.entries.push(entry("../escape", Kind::Dir))),
            "path_not_normalised",
        ),
        (
            "absolute",
            with(&|x| x.entries.push(entry("/etc/passwd", Kind::File))),
            "path_absolute",
        ),
        (
            "a/../../b",
            with(&|x| x.entries.push(entry("a dir/../../b", Kind::File))),
            "path_not_normalised",
        ),
        (
            "duplicate",
            with(&|x| x.entries.push(entry("empty dir", Kind::Dir))),
            "duplicate_path",
        ),
        (
            "file beneath a symlink",
            with(&|x| x.entries.push(entry("rel-link/inside", Kind::File))),
            "parent_not_directory",
        ),
        (
            "file beneath a file",
            with(&|x| x.entries.push(entry("sparse.img/inside", Kind::File))),
            "parent_not_directory",
        ),
        (
            "orphan",
            with(&|x| x.entries.push(entry("nowhere/child", Kind::File))),
            "parent_missing_or_out_of_order",
        ),
        (
            "hardlink to missing",
            with(&|x| {
                let mut e = entry("hl", Kind::Hardlink);
                e.target = Some("missing".into());
                x.entries.push(e)
            }),
            "hardlink_target_missing",
        ),
        (
            "hardlink to symlink",
            with(&|x| {
                let mut e = entry("hl", Kind::Hardlink);
                e.target = Some("dangling".into());
                x.entries.push(e)
            }),
            "hardlink_target_not_regular",
        ),
        (
            "hardlink to dir",
            with(&|x| {
                let mut e = entry("hl", Kind::Hardlink);
                e.target = Some("empty dir".into());
                x.entries.push(e)
            }),
            "hardlink_target_not_regular",
        ),
        (
            "setuid mode",
            with(&|x| x.entries[1].mode = Some(0o4755)),
            "mode_bits_invalid",
        ),
        (
            "marker name",
            with(&|x| x.entries.push(entry(format::MARKER_NAME, Kind::File))),
            "path_reserved",
        ),
        (
            "root not first",
            with(&|x| x.entries.swap(0, 1)),
            "root_entry_missing",
        ),
        (
            "unknown field",
            {
                let mut v = serde_json::to_value(base()).unwrap();
                v["entries"][1]["xattrs"] = serde_json::json!({});
                let json = serde_json::to_vec(&v).unwrap();
                let mut out = format::encode_header().to_vec();
                out.extend_from_slice(&payload);
                out.extend_from_slice(&json);
                out.extend_from_slice(
                    &Trailer {
                        payload_len: payload.len() as u64,
                        manifest_len: json.len() as u64,
                        manifest_sha256: Sha256::digest(&json).into(),
                        entry_count: base().entries.len() as u64,
                    }
                    .encode(),
                );
                out
            },
            "manifest_json_invalid",
        ),
    ];
    for (what, bytes, reason) in cases {
        assert_eq!(assert_rejected(&bytes, what), reason, "{what}");
    }
}

fn sparse_entry(m: &Manifest) -> usize {
    m.entries
        .iter()
        .position(|e| e.path == "sparse.img")
        .unwrap()
}

#[test]
fn crafted_extents() {
    let (_, m, payload) = reference();
    let i = sparse_entry(&m);
    let first = m.entries[i].extents.as_ref().unwrap()[0].clone();
    let with = |f: &dyn Fn(&mut Vec<Extent>, &mut Option<u64>)| {
        let mut x = m.clone();
        let e = &mut x.entries[i];
        f(e.extents.as_mut().unwrap(), &mut e.size);
        x
    };
    let cases: Vec<(&str, Manifest, &str)> = vec![
        (
            "overlap",
            with(&|x, _| x.insert(1, first.clone())),
            "extent_overlap_or_unordered",
        ),
        (
            "beyond size",
            with(&|x, _| x.push(Extent(6 << 20, 1 << 20, first.2.clone()))),
            "extent_beyond_size_or_bad_length",
        ),
        (
            "size shrunk under extents",
            with(&|_, s| *s = Some(1 << 20)),
            "extent_beyond_size_or_bad_length",
        ),
        ("unaligned", with(&|x, _| x[0].0 = 17), "extent_unaligned"),
        (
            "two extents in one chunk",
            with(&|x, _| {
                let e = x[0].clone();
                x.insert(1, Extent(e.0 + 8192, 1, e.2));
            }),
            "extent_overlap_or_unordered",
        ),
        (
            "across a chunk boundary",
            with(&|x, _| x[0].1 = (1 << 20) + 4096),
            "extent_beyond_size_or_bad_length",
        ),
        (
            "empty",
            with(&|x, _| x[0].1 = 0),
            "extent_beyond_size_or_bad_length",
        ),
        (
            "bad checksum syntax",
            with(&|x, _| x[0].2 = "zz".into()),
            "extent_checksum_syntax",
        ),
        (
            "dropped extent",
            with(&|x, _| {
                x.pop();
            }),
            "payload_length_mismatch",
        ),
        (
            "wrong checksum",
            with(&|x, _| x[0].2 = "0".repeat(64)),
            "extent_checksum_mismatch",
        ),
    ];
    for (what, man, reason) in cases {
        assert_eq!(
            assert_rejected(&encode(&man, &payload), what),
            reason,
            "{what}"
        );
    }
}

#[test]
fn manifest_over_the_limit_is_rejected_before_it_is_read() {
    // A sparse file claiming a 64 MiB + 1 manifest: rejected from the trailer alone.
    let d = dirs();
    let path = d.out.join("big.takbak");
    let manifest_len = takbak::limits::MAX_MANIFEST_BYTES + 1;
    let f = std::fs::File::create(&path).unwrap();
    let len = HEADER_LEN + manifest_len + TRAILER_LEN;
    f.set_len(len).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&format::encode_header(), 0).unwrap();
    let t = Trailer {
        payload_len: 0,
        manifest_len,
        manifest_sha256: [0; 32],
        entry_count: 1,
    };
    f.write_all_at(&t.encode(), len - TRAILER_LEN).unwrap();
    let e = verify_path(&path).unwrap_err();
    assert_eq!(
        (e.category(), e.reason()),
        ("limit_exceeded", "manifest_bytes")
    );
    let e = run_restore(&d.dst, &path, Limits::default()).unwrap_err();
    assert_eq!(e.reason(), "manifest_bytes");
    assert_eq!(std::fs::read_dir(&d.dst).unwrap().count(), 0);
}

#[test]
fn entry_limit_applies_to_archives() {
    let (bytes, _, _) = reference();
    let e = takbak::reader::open(
        &mut Cursor::new(&bytes),
        &Limits::from_flags(Some(5), None, None).unwrap(),
    )
    .unwrap_err();
    assert_eq!((e.category(), e.reason()), ("limit_exceeded", "entries"));
    let _ = Path::new("");
}
