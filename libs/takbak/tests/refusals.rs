//! Every refused kind of input and every limit fails with a specific reason, never a silent omission,
//! and never leaves an archive under the final name.

use crate::common;
use crate::privileged;

use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use common::*;
use takbak::limits::Limits;

fn refused(setup: impl FnOnce(&Path), limits: Limits) -> (String, &'static str) {
    let d = dirs();
    std::fs::write(d.src.join("ordinary"), b"fine").unwrap();
    setup(&d.src);
    let archive = d.out.join("a.takbak");
    let e = run_backup(&d.src, &archive, limits).unwrap_err();
    assert!(
        !archive.exists(),
        "no archive under the final name after a refusal"
    );
    assert_eq!(
        std::fs::read_dir(&d.out).unwrap().count(),
        0,
        "no temp file left behind"
    );
    (e.category().to_string(), e.reason())
}

fn acl_blob() -> Vec<u8> {
    // POSIX ACL xattr v2: USER_OBJ rw-, USER(1000) r--, GROUP_OBJ r--, MASK r--, OTHER r--.
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (1u16, 6u16, u32::MAX),
        (2, 4, 1000),
        (4, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 4, u32::MAX),
    ] {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
fn refused_kinds() {
    use rustix::fs::{FileType, Mode, XattrFlags};
    let chmod = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(m)).unwrap()
    };
    type Setup = Box<dyn FnOnce(&Path)>;
    let cases: Vec<(&str, Setup, &str)> = vec![
        (
            "xattr",
            Box::new(|s: &Path| {
                rustix::fs::setxattr(s.join("ordinary"), "user.note", b"v", XattrFlags::empty())
                    .unwrap()
            }),
            "xattr",
        ),
        (
            "acl",
            Box::new(|s: &Path| {
                rustix::fs::setxattr(
                    s.join("ordinary"),
                    "system.posix_acl_access",
                    &acl_blob(),
                    XattrFlags::empty(),
                )
                .unwrap()
            }),
            "acl",
        ),
        (
            "setuid",
            Box::new(move |s: &Path| chmod(&s.join("ordinary"), 0o4755)),
            "setuid_bit",
        ),
        (
            "setgid dir",
            Box::new(move |s: &Path| {
                std::fs::create_dir(s.join("d")).unwrap();
                chmod(&s.join("d"), 0o2775)
            }),
            "setgid_bit",
        ),
        (
            "sticky dir",
            Box::new(move |s: &Path| {
                std::fs::create_dir(s.join("t")).unwrap();
                chmod(&s.join("t"), 0o1777)
            }),
            "sticky_bit",
        ),
        (
            "fifo",
            Box::new(|s: &Path| {
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    s.join("fifo"),
                    FileType::Fifo,
                    Mode::from_raw_mode(0o600),
                    0,
                )
                .unwrap()
            }),
            "fifo",
        ),
        (
            "socket",
            Box::new(|s: &Path| {
                let l = std::os::unix::net::UnixListener::bind(s.join("sock")).unwrap();
                std::mem::forget(l);
            }),
            "socket",
        ),
        (
            "non-utf8 name",
            Box::new(|s: &Path| {
                std::fs::write(s.join(std::ffi::OsStr::from_bytes(b"bad\xffname")), b"x").unwrap()
            }),
            "non_utf8_name",
        ),
        (
            "non-utf8 target",
            Box::new(|s: &Path| {
                std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(b"t\xfe"), s.join("l"))
                    .unwrap()
            }),
            "non_utf8_symlink_target",
        ),
        (
            "marker",
            Box::new(|s: &Path| std::fs::write(s.join(takbak::format::MARKER_NAME), b"x").unwrap()),
            "restore_incomplete_marker_present",
        ),
    ];
    for (what, setup, reason) in cases {
        assert_eq!(
            refused(setup, Limits::default()),
            ("refused_input".to_string(), reason),
            "{what}"
        );
    }
}

#[test]
fn device_nodes_are_refused() {
    use rustix::fs::{FileType, Mode};
    // Creating a device node needs CAP_MKNOD, which some containers drop; then there is nothing to refuse.
    let probe = tempfile::tempdir().unwrap();
    let dev = rustix::fs::makedev(1, 3);
    let can_mknod = rustix::fs::mknodat(
        rustix::fs::CWD,
        probe.path().join("n"),
        FileType::CharacterDevice,
        Mode::from_raw_mode(0o600),
        dev,
    )
    .is_ok();
    if !privileged::privileged(can_mknod) {
        return;
    }
    let r = refused(
        |s| {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                s.join("null"),
                FileType::CharacterDevice,
                Mode::from_raw_mode(0o600),
                dev,
            )
            .unwrap()
        },
        Limits::default(),
    );
    assert_eq!(r, ("refused_input".to_string(), "device"));
}

#[test]
fn archive_location_refusals() {
    let d = dirs();
    std::fs::create_dir(d.src.join("inner")).unwrap();
    let e = run_backup(&d.src, &d.src.join("inner/a.takbak"), Limits::default()).unwrap_err();
    assert_eq!(e.reason(), "archive_inside_source");
    // Through a symlink that points into the source.
    std::os::unix::fs::symlink(&d.src, d.out.join("via-link")).unwrap();
    let e = run_backup(&d.src, &d.out.join("via-link/a.takbak"), Limits::default()).unwrap_err();
    assert_eq!(e.reason(), "archive_inside_source");
    assert!(!d.src.join("a.takbak").exists());
    // Never overwrite: an existing file keeps its bytes.
    std::fs::write(d.out.join("exists.takbak"), b"precious").unwrap();
    let e = run_backup(&d.src, &d.out.join("exists.takbak"), Limits::default()).unwrap_err();
    assert_eq!(e.reason(), "archive_already_exists");
    assert_eq!(
        std::fs::read(d.out.join("exists.takbak")).unwrap(),
        b"precious"
    );
}

#[test]
fn every_backup_limit() {
    let lim = |e: Option<u64>, p: Option<u64>| Limits::from_flags(e, p, None).unwrap();
    let many =
        |s: &Path| (0..5).for_each(|i| std::fs::write(s.join(format!("f{i}")), b"x").unwrap());
    assert_eq!(
        refused(many, lim(Some(3), None)),
        ("limit_exceeded".into(), "entries")
    );
    let big = |s: &Path| std::fs::write(s.join("big"), vec![1u8; 10_000]).unwrap();
    assert_eq!(
        refused(big, lim(None, Some(4096))),
        ("limit_exceeded".into(), "payload_bytes")
    );
    let huge = |s: &Path| {
        std::fs::File::create(s.join("huge"))
            .unwrap()
            .set_len((1 << 40) + 1)
            .unwrap()
    };
    assert_eq!(
        refused(huge, Limits::default()),
        ("limit_exceeded".into(), "file_size")
    );
    let l = Limits {
        max_extents_per_file: 2,
        ..Limits::default()
    };
    let three = |s: &Path| std::fs::write(s.join("three"), vec![1u8; 3 << 20]).unwrap();
    assert_eq!(
        refused(three, l),
        ("limit_exceeded".into(), "extents_per_file")
    );
    let l = Limits {
        max_manifest_bytes: 200,
        ..Limits::default()
    };
    assert_eq!(
        refused(|_| {}, l),
        ("limit_exceeded".into(), "manifest_bytes")
    );
    let l = Limits {
        deadline: Duration::ZERO,
        ..Limits::default()
    };
    let d = dirs();
    let e = takbak::backup::backup(
        &takbak::backup::BackupOptions {
            root: d.src.clone(),
            archive: d.out.join("a.takbak"),
            identity: source_identity(),
            record: record(takbak::records::Purpose::BackupQuiesced),
            limits: l,
        },
        &takbak::ctx::Ctx::new(Duration::ZERO),
    )
    .unwrap_err();
    assert_eq!(
        (e.category(), e.exit_code()),
        ("deadline_exceeded", takbak::error::exit::TIMEOUT)
    );
}

#[test]
fn backup_record_must_name_the_identity() {
    let d = dirs();
    let mut r = record(takbak::records::Purpose::BackupQuiesced);
    r.source.generation = "other".into();
    let opts = takbak::backup::BackupOptions {
        root: d.src.clone(),
        archive: d.out.join("a.takbak"),
        identity: source_identity(),
        record: r,
        limits: Limits::default(),
    };
    let e = takbak::backup::backup(&opts, &ctx()).unwrap_err();
    assert_eq!(
        (e.category(), e.reason()),
        ("invalid_record", "record_source_differs_from_identity")
    );
}

#[test]
fn restore_refuses_unsuitable_destinations_and_identities() {
    let d = dirs();
    build(&d.src, &sample_specs());
    let archive = d.out.join("a.takbak");
    run_backup(&d.src, &archive, Limits::default()).unwrap();
    // Not empty: nothing is written, the stray file is untouched.
    std::fs::write(d.dst.join("stray"), b"keep").unwrap();
    let e = run_restore(&d.dst, &archive, Limits::default()).unwrap_err();
    assert_eq!(
        (e.category(), e.reason()),
        ("destination_unsuitable", "not_empty")
    );
    assert_eq!(std::fs::read_dir(&d.dst).unwrap().count(), 1);
    let e = run_restore(&d.tmp.path().join("missing"), &archive, Limits::default()).unwrap_err();
    assert_eq!(e.reason(), "missing");
    // Identity not new in all three fields, or a record for another source.
    let empty = d.tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let mut opts = takbak::restore::RestoreOptions {
        root: empty.clone(),
        archive: archive.clone(),
        identity: takbak::records::Identity {
            claim_uid: "new".into(),
            ..source_identity()
        },
        record: record(takbak::records::Purpose::RestoreIsolated),
        limits: Limits::default(),
        expect_sha256: None,
    };
    assert_eq!(
        takbak::restore::restore(&opts, &ctx())
            .unwrap_err()
            .reason(),
        "destination_identity_not_new"
    );
    opts.identity = destination_identity();
    opts.record.source.volume = "rv-elsewhere".into();
    assert_eq!(
        takbak::restore::restore(&opts, &ctx())
            .unwrap_err()
            .reason(),
        "record_source_differs_from_archive"
    );
    assert_eq!(
        std::fs::read_dir(&empty).unwrap().count(),
        0,
        "refusals write nothing"
    );
    // Restore-side limits.
    let e = run_restore(
        &empty,
        &archive,
        Limits::from_flags(Some(3), None, None).unwrap(),
    )
    .unwrap_err();
    assert_eq!((e.category(), e.reason()), ("limit_exceeded", "entries"));
    let e = run_restore(
        &empty,
        &archive,
        Limits::from_flags(None, Some(10), None).unwrap(),
    )
    .unwrap_err();
    assert_eq!(
        (e.category(), e.reason()),
        ("limit_exceeded", "payload_bytes")
    );
    assert_eq!(std::fs::read_dir(&empty).unwrap().count(), 0);
}
