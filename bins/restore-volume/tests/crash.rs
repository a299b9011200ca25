//! Crash tests: the real `restore-volume` binary is killed with SIGKILL at every durability step
//! (through its `TAKBAK_TEST_KILL_AT_STEP` hook, so the points are exact, not timing guesses).
//! A killed restore never prints PASS, and the destination either still carries the incomplete
//! marker or the kill came after the marker's unlink (the last steps), where the operator sees no
//! PASS line and a signal exit, which the docs define as "publication uncertain". A second restore
//! into the same destination refuses to resume.
//!
//! Also end to end with the binary: an expected archive digest is checked before the destination is
//! touched, and a full destination (a small tmpfs) and missing ownership privileges (the tool run
//! as "nobody") fail as `disk_full` and `permission_denied` with the marker still present.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

#[path = "../../../libs/takbak/tests/common/privileged.rs"]
mod privileged;
use privileged::{SmallFs, as_nobody, is_root, open_to_nobody, privileged};

use takbak::limits::Limits;
use takbak::records::{Identity, Purpose, Record};

const MARKER: &str = takbak::format::MARKER_NAME;

fn source() -> Identity {
    Identity {
        volume: "rv-a".into(),
        generation: "g1".into(),
        claim_uid: "c1".into(),
    }
}

fn setup(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d/e")).unwrap();
    std::fs::write(src.join("d/one"), vec![1u8; 3000]).unwrap();
    std::fs::write(src.join("d/e/two"), vec![2u8; (1 << 20) + 5]).unwrap();
    std::fs::hard_link(src.join("d/one"), src.join("one-again")).unwrap();
    std::os::unix::fs::symlink("d/one", src.join("link")).unwrap();
    let archive = dir.join("a.takbak");
    let rec = |purpose| Record {
        version: 1,
        purpose,
        source: source(),
        record_id: "r".into(),
        operator: "o".into(),
        method: "m".into(),
        evidence_reference: "e".into(),
        operator_acknowledged: true,
    };
    takbak::backup::backup(
        &takbak::backup::BackupOptions {
            root: src,
            archive: archive.clone(),
            identity: source(),
            record: rec(Purpose::BackupQuiesced),
            limits: Limits::default(),
        },
        &takbak::ctx::Ctx::new(std::time::Duration::from_secs(60)),
    )
    .unwrap();
    let dest = Identity {
        volume: "rv-b".into(),
        generation: "g2".into(),
        claim_uid: "c2".into(),
    };
    std::fs::write(dir.join("id.json"), serde_json::to_vec(&dest).unwrap()).unwrap();
    std::fs::write(
        dir.join("rec.json"),
        serde_json::to_vec(&rec(Purpose::RestoreIsolated)).unwrap(),
    )
    .unwrap();
    archive
}

fn restore(dir: &Path, dst: &Path, kill_at: Option<u64>) -> Output {
    restore_env(dir, dst, kill_at, &[])
}

fn restore_env(dir: &Path, dst: &Path, kill_at: Option<u64>, env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_restore-volume"));
    c.envs(env.iter().copied());
    c.arg("--root")
        .arg(dst)
        .arg("--archive")
        .arg(dir.join("a.takbak"));
    c.arg("--identity")
        .arg(dir.join("id.json"))
        .arg("--record")
        .arg(dir.join("rec.json"));
    if let Some(k) = kill_at {
        c.env(takbak::ctx::KILL_AT_STEP_ENV, k.to_string());
    }
    c.output().unwrap()
}

#[test]
fn killed_restore_never_passes_and_leaves_the_marker() {
    killed_restore_never_passes(&[]);
}

/// The same with the per-inode fsync durability path (the fallback where syncfs is not trusted)
/// and without direct I/O (the fallback where O_DIRECT is refused).
#[test]
fn killed_restore_never_passes_with_per_inode_fsync_and_buffered_io() {
    killed_restore_never_passes(&[
        (takbak::durable::FSYNC_EACH_ENV, "1"),
        (takbak::dio::NO_DIRECT_ENV, "1"),
    ]);
}

fn killed_restore_never_passes(env: &[(&str, &str)]) {
    let tmp = tempfile::tempdir().unwrap();
    setup(tmp.path());
    let count = tmp.path().join("count");
    std::fs::create_dir(&count).unwrap();
    let out = restore_env(tmp.path(), &count, Some(0), env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let steps: u64 = String::from_utf8_lossy(&out.stderr)
        .lines()
        .find_map(|l| l.strip_prefix("takbak-steps ").map(|n| n.parse().unwrap()))
        .unwrap();
    // The marker is unlinked at step steps-1 (then root times + fsync, step `steps`).
    let unlink_step = steps - 1;
    for k in 1..=steps {
        let dst = tmp.path().join(format!("dst{k}"));
        std::fs::create_dir(&dst).unwrap();
        let out = restore_env(tmp.path(), &dst, Some(k), env);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.signal(), Some(9), "step {k}: killed by SIGKILL");
        assert!(
            !stdout.contains("PASS"),
            "step {k}: a killed restore printed PASS"
        );
        let marker = dst.join(MARKER).exists();
        assert!(
            marker || k >= unlink_step,
            "step {k}/{steps}: marker missing before its unlink step"
        );
        // Never resumed: the partial tree is refused as a destination.
        let again = restore(tmp.path(), &dst, None);
        let v: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
        assert_eq!(
            (
                v["result"].as_str(),
                v["failure"]["reason"].as_str(),
                again.status.code()
            ),
            (
                Some("FAIL"),
                Some("not_empty"),
                Some(takbak::error::exit::DESTINATION)
            ),
            "step {k}"
        );
    }
}

#[test]
fn uninterrupted_restore_passes_with_one_json_line() {
    let tmp = tempfile::tempdir().unwrap();
    setup(tmp.path());
    let dst = tmp.path().join("dst");
    std::fs::create_dir(&dst).unwrap();
    let out = restore(tmp.path(), &dst, None);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1);
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        (v["result"].as_str(), v["phase"].as_str(), out.status.code()),
        (Some("PASS"), Some("done"), Some(0))
    );
    assert!(
        out.stderr.is_empty(),
        "no progress display when stderr is not a terminal"
    );
    assert!(!dst.join(MARKER).exists());
    assert!(
        !stdout.contains(tmp.path().to_str().unwrap()),
        "no paths in the result"
    );
}

#[test]
fn per_inode_fsync_takes_more_durability_steps_and_passes() {
    // The fallback really runs its own path: one fsync per file, per directory and the root
    // (more crash-hook steps than the single syncfs), and the result is still a PASS.
    let tmp = tempfile::tempdir().unwrap();
    setup(tmp.path());
    let steps = |env: &[(&str, &str)], name: &str| -> u64 {
        let dst = tmp.path().join(name);
        std::fs::create_dir(&dst).unwrap();
        let out = restore_env(tmp.path(), &dst, Some(0), env);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(!dst.join(MARKER).exists());
        assert_eq!(
            std::fs::read(dst.join("d/e/two")).unwrap(),
            vec![2u8; (1 << 20) + 5]
        );
        String::from_utf8_lossy(&out.stderr)
            .lines()
            .find_map(|l| l.strip_prefix("takbak-steps ").map(|n| n.parse().unwrap()))
            .unwrap()
    };
    let syncfs = steps(&[], "a");
    let each = steps(&[(takbak::durable::FSYNC_EACH_ENV, "1")], "b");
    let buffered = steps(&[(takbak::dio::NO_DIRECT_ENV, "1")], "c");
    // 2 regular files + 3 directories (d, d/e, root) fsynced, plus the leading syncfs, instead of
    // the one trailing syncfs.
    assert_eq!(each, syncfs + 2 + 3);
    assert_eq!(buffered, syncfs);
}

#[test]
fn expected_archive_sha256_is_checked_before_the_destination_is_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let archive = setup(tmp.path());
    let digest = {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(std::fs::read(&archive).unwrap()))
    };
    let mut other = digest.clone().into_bytes();
    other[0] = if other[0] == b'0' { b'1' } else { b'0' };
    let other = String::from_utf8(other).unwrap();

    let dst = tmp.path().join("refused");
    std::fs::create_dir(&dst).unwrap();
    let out = restore_env(tmp.path(), &dst, None, &[("TAKBAK_EXPECT_SHA256", &other)]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["result"].as_str(),
            v["failure"]["category"].as_str(),
            v["failure"]["reason"].as_str(),
            out.status.code()
        ),
        (
            Some("FAIL"),
            Some("archive_invalid"),
            Some("archive_sha256_mismatch"),
            Some(5)
        )
    );
    assert_eq!(
        std::fs::read_dir(&dst).unwrap().count(),
        0,
        "nothing written, not even the marker"
    );

    let dst = tmp.path().join("accepted");
    std::fs::create_dir(&dst).unwrap();
    let upper = digest.to_uppercase();
    let out = restore_env(tmp.path(), &dst, None, &[("TAKBAK_EXPECT_SHA256", &upper)]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["result"].as_str(), v["archiveSha256"].as_str()),
        (Some("PASS"), Some(digest.as_str()))
    );
}

/// The failure's (category, source, errno name) and the exit code.
fn failure(out: &Output) -> (Option<String>, Option<String>, Option<String>, Option<i32>) {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = |k: &str| v["failure"][k].as_str().map(String::from);
    (
        s("category"),
        s("source"),
        s("errnoName"),
        out.status.code(),
    )
}

fn expected(
    category: &str,
    source: &str,
    errno: &str,
    code: i32,
) -> (Option<String>, Option<String>, Option<String>, Option<i32>) {
    (
        Some(category.into()),
        Some(source.into()),
        Some(errno.into()),
        Some(code),
    )
}

#[test]
fn a_full_destination_is_disk_full_and_keeps_the_marker() {
    let tmp = tempfile::tempdir().unwrap();
    setup(tmp.path());
    let dst = tmp.path().join("small");
    let fs = SmallFs::mount(&dst, "512k");
    if !privileged(fs.is_some()) {
        return;
    }
    let out = restore(tmp.path(), &dst, None);
    let marker = dst.join(MARKER).exists();
    drop(fs);
    assert_eq!(
        failure(&out),
        expected("disk_full", "destination", "ENOSPC", 9)
    );
    assert!(
        marker,
        "the unusable destination keeps its incomplete marker"
    );
}

#[test]
fn restoring_owners_without_the_privilege_is_permission_denied() {
    if !privileged(is_root()) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    // "nobody" may read the archive and records and owns the destination, but the archived
    // entries belong to root: restoring their owners needs CAP_CHOWN, which nobody lacks.
    let dst = d.join("dst");
    std::fs::create_dir(&dst).unwrap();
    open_to_nobody(d, &["a.takbak", "id.json", "rec.json", "dst"]);
    let out = as_nobody(env!("CARGO_BIN_EXE_restore-volume"), d)
        .arg("--root")
        .arg(&dst)
        .arg("--archive")
        .arg(d.join("a.takbak"))
        .arg("--identity")
        .arg(d.join("id.json"))
        .arg("--record")
        .arg(d.join("rec.json"))
        .output()
        .unwrap();
    assert_eq!(
        failure(&out),
        expected("permission_denied", "destination", "EPERM", 8)
    );
    assert!(dst.join(MARKER).exists());
}
