//! Command glue shared by the two binaries: builds the context, runs one operation with the
//! watchdog and optional progress display, prints the single result object and writes metrics.
//!
//! ```text
//!  bins/*/main.rs (clap Args) ──▶ backup_volume()/restore_volume() ──▶ run()
//!        run(): Ctx ─┬─ watchdog thread (deadline + grace ⇒ failure JSON, exit 7/10)
//!                    ├─ progress thread (stderr TTY only)
//!                    └─ operation ⇒ OpResult ⇒ stdout (one line) + optional textfile ⇒ exit code
//! ```

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backup::{BackupOptions, backup};
use crate::ctx::{Ctx, Phase};
use crate::error::{Error, FailureSource, Result, exit};
use crate::limits::Limits;
use crate::reader;
use crate::records::{Identity, Purpose, Record, read_bounded};
use crate::restore::{RestoreOptions, restore};
use crate::result::{OpResult, Report, write_metrics_textfile};

/// Grace period after the deadline before the watchdog ends a stuck process (a blocked system call
/// cannot observe the cooperative deadline checks).
pub const WATCHDOG_GRACE: Duration = Duration::from_secs(5);

/// One operation to run under the watchdog.
type Operation<'a> = Box<dyn FnOnce(&Ctx) -> Result<Report> + 'a>;

/// Options every mode shares.
#[derive(Debug, Clone, Default)]
pub struct Common {
    /// The archive path.
    pub archive: PathBuf,
    /// Lower the entry limit.
    pub max_entries: Option<u64>,
    /// Lower the payload limit.
    pub max_payload_bytes: Option<u64>,
    /// Deadline in seconds (1..=3600).
    pub deadline_seconds: Option<u64>,
    /// Exclusive Prometheus textfile to create.
    pub metrics_textfile: Option<PathBuf>,
    /// Disable the progress display even on a terminal.
    pub no_progress: bool,
}

/// The flags both tools share (limits, deadline, metrics, progress); each tool's clap `Args`
/// flattens this group, so the two binaries cannot drift apart.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonFlags {
    /// Lower the entry limit (default and maximum 100000).
    #[arg(long, env = "TAKBAK_MAX_ENTRIES")]
    pub max_entries: Option<u64>,
    /// Lower the stored payload limit in bytes (default and maximum 8 GiB).
    #[arg(long, env = "TAKBAK_MAX_PAYLOAD_BYTES")]
    pub max_payload_bytes: Option<u64>,
    /// Operation deadline in seconds, 1 to 3600 (default 600).
    #[arg(long, env = "TAKBAK_DEADLINE_SECONDS")]
    pub deadline_seconds: Option<u64>,
    /// Also write the result as a new Prometheus textfile (created exclusively, never replaced).
    #[arg(long, env = "TAKBAK_METRICS_TEXTFILE")]
    pub metrics_textfile: Option<PathBuf>,
    /// Never show the progress display (it is shown only when stderr is a terminal).
    #[arg(long, env = "TAKBAK_NO_PROGRESS")]
    pub no_progress: bool,
}

impl CommonFlags {
    /// The library's common options for `archive`.
    pub fn into_common(self, archive: PathBuf) -> Common {
        Common {
            archive,
            max_entries: self.max_entries,
            max_payload_bytes: self.max_payload_bytes,
            deadline_seconds: self.deadline_seconds,
            metrics_textfile: self.metrics_textfile,
            no_progress: self.no_progress,
        }
    }
}

/// Parses `--expect-sha256`: exactly 64 hexadecimal digits (either case), the archive's whole-file
/// SHA-256 as the operator recorded it independently at backup time.
pub fn parse_sha256_hex(s: &str) -> std::result::Result<[u8; 32], String> {
    let mut out = [0u8; 32];
    if s.len() != 64 {
        return Err(format!(
            "expected 64 hexadecimal digits, got {} characters",
            s.chars().count()
        ));
    }
    hex::decode_to_slice(s, &mut out)
        .map_err(|_| "expected 64 hexadecimal digits (0-9, a-f)".to_string())?;
    Ok(out)
}

/// Paths for a backup or restore.
#[derive(Debug, Clone)]
pub struct TreeArgs {
    /// Source or destination root.
    pub root: PathBuf,
    /// Identity JSON path.
    pub identity: PathBuf,
    /// Record JSON path.
    pub record: PathBuf,
}

/// What backup-volume was asked to do.
#[derive(Debug, Clone)]
pub enum BackupMode {
    /// Create an archive.
    Backup(TreeArgs),
    /// Re-read and check an archive, print its SHA-256 (and compare it with the expected one).
    Verify {
        /// The independently recorded archive SHA-256, if given.
        expect_sha256: Option<[u8; 32]>,
    },
    /// Print the manifest's entries.
    List,
}

fn load(tree: &TreeArgs, purpose: Purpose) -> Result<(Identity, Record)> {
    let id = Identity::parse(&read_bounded(&tree.identity, FailureSource::IdentityFile)?)?;
    let rec = Record::parse(
        &read_bounded(&tree.record, FailureSource::RecordFile)?,
        purpose,
    )?;
    Ok((id, rec))
}

fn limits(c: &Common) -> Result<Limits> {
    Limits::from_flags(c.max_entries, c.max_payload_bytes, c.deadline_seconds)
}

/// Entry point of `backup-volume`; returns the process exit code.
pub fn backup_volume(mode: BackupMode, common: Common) -> i32 {
    let lim = limits(&common);
    let deadline = lim.as_ref().map(|l| l.deadline).unwrap_or_default();
    let archive = common.archive.clone();
    let (op, f): (&'static str, Operation<'static>) = match mode {
        BackupMode::Backup(tree) => (
            "backup",
            Box::new(move |ctx: &Ctx| {
                let limits = lim?;
                let (identity, record) = load(&tree, Purpose::BackupQuiesced)?;
                let opts = BackupOptions {
                    root: tree.root,
                    archive,
                    identity,
                    record,
                    limits,
                };
                backup(&opts, ctx)
            }),
        ),
        BackupMode::Verify { expect_sha256 } => (
            "verify",
            Box::new(move |ctx: &Ctx| verify_file(&archive, &lim?, expect_sha256.as_ref(), ctx)),
        ),
        BackupMode::List => (
            "list",
            Box::new(move |ctx: &Ctx| list_file(&archive, &lim?, ctx)),
        ),
    };
    run("backup-volume", op, deadline, &common, f)
}

/// What restore-volume was asked to do.
#[derive(Debug, Clone)]
pub enum RestoreMode {
    /// Restore into an empty destination.
    Restore {
        /// Destination, identity and record.
        tree: TreeArgs,
        /// The independently recorded archive SHA-256, if given: checked before the destination
        /// is touched.
        expect_sha256: Option<[u8; 32]>,
    },
    /// Print the manifest's entries.
    List,
}

/// Entry point of `restore-volume`; returns the process exit code.
pub fn restore_volume(mode: RestoreMode, common: Common) -> i32 {
    let lim = limits(&common);
    let deadline = lim.as_ref().map(|l| l.deadline).unwrap_or_default();
    let archive = common.archive.clone();
    let (op, f): (&'static str, Operation<'static>) = match mode {
        RestoreMode::Restore {
            tree,
            expect_sha256,
        } => (
            "restore",
            Box::new(move |ctx: &Ctx| {
                let limits = lim?;
                let (identity, record) = load(&tree, Purpose::RestoreIsolated)?;
                let opts = RestoreOptions {
                    root: tree.root,
                    archive,
                    identity,
                    record,
                    limits,
                    expect_sha256,
                };
                restore(&opts, ctx)
            }),
        ),
        RestoreMode::List => (
            "list",
            Box::new(move |ctx: &Ctx| list_file(&archive, &lim?, ctx)),
        ),
    };
    run("restore-volume", op, deadline, &common, f)
}

/// Opens and fully verifies an archive file; with `expect_sha256`, its whole-file SHA-256 must
/// also equal that digest.
pub fn verify_file(
    archive: &Path,
    limits: &Limits,
    expect_sha256: Option<&[u8; 32]>,
    ctx: &Ctx,
) -> Result<Report> {
    ctx.set_phase(Phase::VerifyArchive);
    let mut f = std::fs::File::open(archive)
        .map_err(crate::error::io_err("open_archive", FailureSource::Archive))?;
    let opened = reader::open(&mut f, limits)?;
    let mut f = crate::dio::PrefetchReader::new(f)
        .map_err(crate::error::io_err("open_archive", FailureSource::Archive))?;
    let whole = reader::verify(&mut f, &opened, ctx)?.archive_sha256;
    reader::check_expected(&whole, expect_sha256)?;
    Ok(Report {
        totals: opened.totals,
        archive_bytes: Some(opened.file_len),
        manifest_bytes: Some(opened.trailer.manifest_len),
        archive_sha256: Some(hex::encode(whole)),
        manifest_sha256: Some(hex::encode(opened.trailer.manifest_sha256)),
    })
}

fn list_file(archive: &Path, limits: &Limits, ctx: &Ctx) -> Result<Report> {
    ctx.set_phase(Phase::ReadManifest);
    let mut f = std::fs::File::open(archive)
        .map_err(crate::error::io_err("open_archive", FailureSource::Archive))?;
    let opened = reader::open(&mut f, limits)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    reader::list(&opened, &mut out)
        .and_then(|()| out.flush())
        .map_err(crate::error::io_err("write_listing", FailureSource::Tool))?;
    Ok(Report {
        totals: opened.totals,
        archive_bytes: Some(opened.file_len),
        manifest_bytes: Some(opened.trailer.manifest_len),
        archive_sha256: None,
        manifest_sha256: Some(hex::encode(opened.trailer.manifest_sha256)),
    })
}

fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(line.as_bytes());
    let _ = out.flush();
}

fn run(
    tool: &'static str,
    operation: &'static str,
    deadline: Duration,
    common: &Common,
    f: Operation<'_>,
) -> i32 {
    let ctx = Ctx::new(if deadline.is_zero() {
        Duration::from_secs(crate::limits::DEFAULT_DEADLINE_SECS)
    } else {
        deadline
    });
    let progress = !common.no_progress && std::io::stderr().is_terminal();
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(0);
    let outcome = std::thread::scope(|s| {
        let ctx = &ctx;
        let watchdog_rx = done_rx.clone();
        s.spawn(move || {
            if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                watchdog_rx.recv_deadline(ctx.deadline() + WATCHDOG_GRACE)
            {
                // The operation is stuck in a system call past its deadline: report and end the
                // process. A restore past its marker unlink is still "publication uncertain".
                let err = if ctx.marker_removed.load(std::sync::atomic::Ordering::SeqCst) {
                    Error::PublicationUncertain(Box::new(Error::Deadline))
                } else {
                    Error::Deadline
                };
                let out: Result<Report> = Err(err);
                emit(&OpResult::new(tool, operation, ctx, &out).to_json_line());
                std::process::exit(out.err().map_or(exit::IO, |e| e.exit_code()));
            }
        });
        if progress {
            let rx = done_rx.clone();
            s.spawn(move || crate::progress::run(ctx, &rx));
        }
        let outcome = f(ctx);
        drop(done_tx);
        outcome
    });
    if outcome.is_ok() {
        ctx.set_phase(Phase::Done);
    }
    let mut result = OpResult::new(tool, operation, &ctx, &outcome);
    let mut code = outcome.as_ref().err().map_or(exit::PASS, Error::exit_code);
    if let Some(path) = &common.metrics_textfile {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        if let Err(e) = write_metrics_textfile(path, &result.to_prometheus(now)) {
            // The operation's own result stands; a metrics failure turns a PASS into a FAIL so
            // automation never believes in metrics that were not written.
            if code == exit::PASS {
                ctx.set_phase(Phase::WriteMetrics);
                let failed: Result<Report> = Err(e);
                let report = outcome.as_ref().ok().cloned();
                result = OpResult::new(tool, operation, &ctx, &failed);
                if let Some(r) = report {
                    result.totals = r.totals;
                    result.archive_sha256 = r.archive_sha256;
                    result.archive_bytes = r.archive_bytes;
                }
                code = failed.err().map_or(exit::IO, |e| e.exit_code());
            }
        }
    }
    emit(&result.to_json_line());
    if ctx.report_steps() {
        let _ = std::io::stderr().write_all(format!("takbak-steps {}\n", ctx.steps()).as_bytes());
    }
    code
}
