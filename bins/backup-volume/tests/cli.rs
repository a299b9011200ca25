//! The real `backup-volume` binary: one JSON result line, exit codes, exclusive metrics textfile,
//! --verify (with and without --expect-sha256) and --list, the progress display on a terminal and
//! never without one, failure categories end to end (`disk_full` on a small tmpfs,
//! `permission_denied` when run as "nobody", `deadline_exceeded` from the watchdog while stuck in a
//! system call), and crash safety of the archive's final name
//! (SIGKILL at every durability step through the `TAKBAK_TEST_KILL_AT_STEP` hook).

use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

#[path = "../../../libs/takbak/tests/common/privileged.rs"]
mod privileged;
use privileged::{SmallFs, as_nobody, is_root, open_to_nobody, privileged};

const ID: &str = r#"{"volume":"rv-a","generation":"g1","claimUID":"c1"}"#;
const REC: &str = r#"{"version":1,"purpose":"backup-quiesced","source":{"volume":"rv-a","generation":"g1","claimUID":"c1"},"recordID":"r","operator":"o","method":"m","evidenceReference":"e","operatorAcknowledged":true}"#;

fn setup(dir: &Path) {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/a"), vec![3u8; (2 << 20) + 7]).unwrap();
    std::fs::write(src.join("b"), b"bee").unwrap();
    std::fs::write(dir.join("id.json"), ID).unwrap();
    std::fs::write(dir.join("rec.json"), REC).unwrap();
    std::fs::create_dir(dir.join("out")).unwrap();
}

fn tool(args: &[&str], dir: &Path, kill_at: Option<u64>) -> (Output, serde_json::Value) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_backup-volume"));
    c.current_dir(dir).args(args);
    if let Some(k) = kill_at {
        c.env("TAKBAK_TEST_KILL_AT_STEP", k.to_string());
    }
    let out = c.output().unwrap();
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("null")
        .to_string();
    (
        out,
        serde_json::from_str(&last).unwrap_or(serde_json::Value::Null),
    )
}

const BACKUP: &[&str] = &[
    "--root",
    "src",
    "--archive",
    "out/a.takbak",
    "--identity",
    "id.json",
    "--record",
    "rec.json",
];

#[test]
fn backup_verify_list_and_metrics() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let mut args = BACKUP.to_vec();
    args.extend(["--metrics-textfile", "out/backup.prom"]);
    let (out, v) = tool(&args, d, None);
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    assert!(
        out.stderr.is_empty(),
        "no progress display without a terminal"
    );
    assert_eq!(
        (v["result"].as_str(), out.status.code(), v["files"].as_u64()),
        (Some("PASS"), Some(0), Some(2))
    );
    let prom = std::fs::read_to_string(d.join("out/backup.prom")).unwrap();
    assert!(prom.contains(
        "cozy_backups_takbak_operation_success{tool=\"backup-volume\",operation=\"backup\"} 1"
    ));

    let (out, verify) = tool(&["--verify", "--archive", "out/a.takbak"], d, None);
    assert_eq!(
        (verify["result"].as_str(), out.status.code()),
        (Some("PASS"), Some(0))
    );
    assert_eq!(verify["archiveSha256"], v["archiveSha256"]);

    // --expect-sha256: the recorded digest must match (either case); another one fails as an
    // invalid archive, and a malformed one is a usage error naming the flag.
    let digest = v["archiveSha256"].as_str().unwrap().to_string();
    let verify_expecting = |hex: &str| {
        tool(
            &[
                "--verify",
                "--archive",
                "out/a.takbak",
                "--expect-sha256",
                hex,
            ],
            d,
            None,
        )
    };
    let (out, ok) = verify_expecting(&digest.to_uppercase());
    assert_eq!(
        (ok["result"].as_str(), out.status.code()),
        (Some("PASS"), Some(0))
    );
    let wrong = format!("{}{}", &digest[1..], &digest[..1]);
    let (out, bad) = verify_expecting(&wrong);
    assert_eq!(
        (
            bad["failure"]["reason"].as_str(),
            bad["failure"]["category"].as_str(),
            out.status.code()
        ),
        (
            Some("archive_sha256_mismatch"),
            Some("archive_invalid"),
            Some(5)
        )
    );
    assert_eq!(bad["archiveSha256"], serde_json::Value::Null);
    let (out, _) = verify_expecting("not-a-digest");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--expect-sha256"));

    let (out, list) = tool(&["--list", "--archive", "out/a.takbak"], d, None);
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 5, "root, b, sub, sub/a + result");
    assert!(lines[3].contains("\"path\":\"sub/a\""));
    assert_eq!(list["operation"].as_str(), Some("list"));

    // Metrics textfile is exclusive: a second run into the same path fails (and says so).
    let mut args2 = vec!["--verify", "--archive", "out/a.takbak"];
    args2.extend(["--metrics-textfile", "out/backup.prom"]);
    let (out, v) = tool(&args2, d, None);
    assert_eq!(
        (v["result"].as_str(), v["failure"]["reason"].as_str()),
        (Some("FAIL"), Some("create_metrics_textfile"))
    );
    assert_ne!(out.status.code(), Some(0));

    // Never overwrite: a second backup to the same name fails with exit code 4.
    let (out, v) = tool(BACKUP, d, None);
    assert_eq!(
        (v["failure"]["reason"].as_str(), out.status.code()),
        (Some("archive_already_exists"), Some(4))
    );
}

#[test]
fn failures_are_bounded_and_classified() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    std::fs::write(d.join("out/a.takbak"), b"not an archive at all, just text").unwrap();
    let (out, v) = tool(&["--verify", "--archive", "out/a.takbak"], d, None);
    assert_eq!(
        (
            v["failure"]["category"].as_str(),
            v["failure"]["reason"].as_str(),
            out.status.code()
        ),
        (Some("archive_invalid"), Some("truncated"), Some(5))
    );
    let (out, v) = tool(&["--verify", "--archive", "out/missing.takbak"], d, None);
    assert_eq!(
        (
            v["failure"]["errnoName"].as_str(),
            v["failure"]["source"].as_str(),
            out.status.code()
        ),
        (Some("ENOENT"), Some("archive"), Some(1))
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("missing.takbak"),
        "no paths in results"
    );
    let mut args = BACKUP.to_vec();
    args.extend(["--deadline-seconds", "3601"]);
    let (out, v) = tool(&args, d, None);
    assert_eq!(
        (v["failure"]["reason"].as_str(), out.status.code()),
        (Some("deadline_out_of_range"), Some(2))
    );
}

#[test]
fn killed_backup_never_leaves_a_partial_archive_under_its_final_name() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let (out, _) = tool(BACKUP, d, Some(0));
    let steps: u64 = String::from_utf8_lossy(&out.stderr)
        .lines()
        .find_map(|l| l.strip_prefix("takbak-steps ").map(|n| n.parse().unwrap()))
        .unwrap();
    std::fs::remove_file(d.join("out/a.takbak")).unwrap();
    for k in 1..=steps {
        let (out, _) = tool(BACKUP, d, Some(k));
        assert_eq!(out.status.signal(), Some(9), "step {k}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("PASS"));
        let fin = d.join("out/a.takbak");
        if fin.exists() {
            // Published means complete: it verifies.
            let (_, v) = tool(&["--verify", "--archive", "out/a.takbak"], d, None);
            assert_eq!(
                v["result"].as_str(),
                Some("PASS"),
                "step {k}: published archive is incomplete"
            );
            std::fs::remove_file(&fin).unwrap();
        }
        for e in std::fs::read_dir(d.join("out")).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            assert!(name.ends_with(".takbak.tmp"), "step {k}: unexpected {name}");
            std::fs::remove_file(d.join("out").join(name)).unwrap();
        }
    }
}

/// Runs a backup whose stderr is a pseudo-terminal (stdout stays a pipe) and returns what the
/// terminal received and the process's stdout.
fn backup_on_a_terminal(d: &Path, extra: &[&str]) -> (String, String) {
    use rustix::pty::{OpenptFlags, grantpt, openpt, ptsname, unlockpt};
    use std::io::Read;
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY).unwrap();
    grantpt(&master).unwrap();
    unlockpt(&master).unwrap();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(std::ffi::OsStr::from_bytes(
            ptsname(&master, Vec::new()).unwrap().as_bytes(),
        ))
        .unwrap();
    let mut args = BACKUP.to_vec();
    args.extend_from_slice(extra);
    let child = Command::new(env!("CARGO_BIN_EXE_backup-volume"))
        .current_dir(d)
        .args(&args)
        .stdout(std::process::Stdio::piped())
        .stderr(slave)
        .spawn()
        .unwrap();
    // The child holds the only slave descriptor now: once it exits, reading the master ends (EIO).
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut term = Vec::new();
    let mut master = std::fs::File::from(master);
    let mut buf = [0u8; 4096];
    loop {
        match master.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => term.extend_from_slice(&buf[..n]),
        }
    }
    (
        String::from_utf8_lossy(&term).into_owned(),
        String::from_utf8(out.stdout).unwrap(),
    )
}

#[test]
fn progress_is_shown_on_a_terminal_and_never_on_stdout() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let (term, stdout) = backup_on_a_terminal(d, &[]);
    // The final redraw shows the whole payload (2 MiB + 7 bytes and 3 bytes) and both files.
    assert!(term.contains('\r'), "{term:?}");
    for needle in ["2.0/2.0 MiB", "files", "MiB/s", "ETA"] {
        assert!(term.contains(needle), "{needle} missing from {term:?}");
    }
    assert!(
        !term.contains(d.to_str().unwrap()),
        "no paths on the terminal"
    );
    assert_eq!(stdout.lines().count(), 1, "stdout holds only the result");
    assert!(stdout.contains("\"result\":\"PASS\""));

    std::fs::remove_file(d.join("out/a.takbak")).unwrap();
    let (term, stdout) = backup_on_a_terminal(d, &["--no-progress"]);
    assert_eq!(term, "", "--no-progress keeps the terminal quiet");
    assert!(stdout.contains("\"result\":\"PASS\""));
}

#[test]
fn a_full_archive_file_system_is_disk_full_and_publishes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    let fs = SmallFs::mount(&d.join("full"), "512k");
    if !privileged(fs.is_some()) {
        return;
    }
    let mut args = BACKUP.to_vec();
    args[3] = "full/a.takbak";
    let (out, v) = tool(&args, d, None);
    assert_eq!(
        (
            v["failure"]["category"].as_str(),
            v["failure"]["source"].as_str(),
            v["failure"]["errnoName"].as_str(),
            v["failure"]["errno"].as_i64(),
            out.status.code()
        ),
        (
            Some("disk_full"),
            Some("archive"),
            Some("ENOSPC"),
            Some(28),
            Some(9)
        ),
        "{v}"
    );
    let left: Vec<_> = std::fs::read_dir(d.join("full")).unwrap().collect();
    assert!(left.is_empty(), "no archive and no temporary file left");
}

#[test]
fn an_unreadable_source_directory_is_permission_denied() {
    use std::os::unix::fs::PermissionsExt;
    if !privileged(is_root()) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    setup(d);
    // Everything readable by "nobody" except one source directory; the output directory is theirs.
    open_to_nobody(d, &["out"]);
    std::fs::set_permissions(d.join("src/sub"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = as_nobody(env!("CARGO_BIN_EXE_backup-volume"), d)
        .current_dir(d)
        .args(BACKUP)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            v["failure"]["category"].as_str(),
            v["failure"]["source"].as_str(),
            v["failure"]["errnoName"].as_str(),
            v["phase"].as_str(),
            out.status.code()
        ),
        (
            Some("permission_denied"),
            Some("source_tree"),
            Some("EACCES"),
            Some("scan_source"),
            Some(8)
        ),
        "{v}"
    );
    assert!(!d.join("out/a.takbak").exists());
}

#[test]
fn the_watchdog_ends_a_process_stuck_in_a_system_call_at_its_deadline() {
    // Opening a FIFO nobody writes to blocks in open(2), where the cooperative deadline checks
    // cannot run: the watchdog must report deadline_exceeded and end the process 5 s after the
    // 1 s deadline.
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let fifo = d.join("stuck.takbak");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_backup-volume"))
        .args(["--verify", "--deadline-seconds", "1", "--archive"])
        .arg(&fifo)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let give_up = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if std::time::Instant::now() > give_up {
            child.kill().unwrap();
            panic!("the watchdog did not end the process within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(
        (
            v["result"].as_str(),
            v["failure"]["category"].as_str(),
            v["phase"].as_str(),
            status.code()
        ),
        (
            Some("FAIL"),
            Some("deadline_exceeded"),
            Some("verify_archive"),
            Some(7)
        ),
        "{v}"
    );
}
