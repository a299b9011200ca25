//! Per-operation context shared by the pipeline threads: deadline, current phase, progress counters
//! and the test-only crash hook.
//!
//! Everything here is lock-free (atomics) so the watchdog and the progress display can read it while
//! the reader and writer threads update it.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};

/// Environment variable of the crash hook: when set to `N > 0`, the process kills itself with
/// SIGKILL at its N-th durability-relevant step; `0` prints the step count to stderr at exit. Used by
/// the crash tests to kill the real binaries at every interesting point without timing guesses.
pub const KILL_AT_STEP_ENV: &str = "TAKBAK_TEST_KILL_AT_STEP";

/// With this set to `1`, every phase change is printed to stderr with the time since the start
/// (phase names only: safe to share). For benchmarking.
pub const TRACE_PHASES_ENV: &str = "TAKBAK_TRACE_PHASES";

/// The bounded operation phases reported in result JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Argument, identity and record checks.
    Startup = 0,
    /// Walking the source tree's metadata.
    ScanSource,
    /// Streaming file data into the temporary archive.
    WriteArchive,
    /// Writing the manifest and trailer, syncing and publishing the archive.
    PublishArchive,
    /// Reading and checking a whole archive.
    VerifyArchive,
    /// Reading only the manifest (list mode).
    ReadManifest,
    /// Checking the restore destination.
    CheckDestination,
    /// Creating and syncing the incomplete marker.
    CreateMarker,
    /// Creating the restored tree.
    WriteTree,
    /// Flushing the restored tree (syncfs, per-inode fsync).
    SyncTree,
    /// Re-reading the restored tree against the manifest.
    VerifyTree,
    /// Removing the marker and syncing the root.
    PublishRestore,
    /// Writing the optional metrics textfile.
    WriteMetrics,
    /// Finished.
    Done,
}

impl Phase {
    const ALL: [Phase; 14] = [
        Phase::Startup,
        Phase::ScanSource,
        Phase::WriteArchive,
        Phase::PublishArchive,
        Phase::VerifyArchive,
        Phase::ReadManifest,
        Phase::CheckDestination,
        Phase::CreateMarker,
        Phase::WriteTree,
        Phase::SyncTree,
        Phase::VerifyTree,
        Phase::PublishRestore,
        Phase::WriteMetrics,
        Phase::Done,
    ];

    /// Stable snake_case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Startup => "startup",
            Phase::ScanSource => "scan_source",
            Phase::WriteArchive => "write_archive",
            Phase::PublishArchive => "publish_archive",
            Phase::VerifyArchive => "verify_archive",
            Phase::ReadManifest => "read_manifest",
            Phase::CheckDestination => "check_destination",
            Phase::CreateMarker => "create_marker",
            Phase::WriteTree => "write_tree",
            Phase::SyncTree => "sync_tree",
            Phase::VerifyTree => "verify_tree",
            Phase::PublishRestore => "publish_restore",
            Phase::WriteMetrics => "write_metrics",
            Phase::Done => "done",
        }
    }
}

/// Shared state of one tool operation.
#[derive(Debug)]
pub struct Ctx {
    started: Instant,
    deadline: Instant,
    phase: AtomicU8,
    /// Set once the restore marker has been unlinked: any later failure is "publication uncertain".
    pub marker_removed: AtomicBool,
    /// Data bytes processed so far.
    pub bytes_done: AtomicU64,
    /// Data bytes expected in total (0 while unknown).
    pub bytes_total: AtomicU64,
    /// Entries processed so far.
    pub files_done: AtomicU64,
    /// Entries expected in total (0 while unknown).
    pub files_total: AtomicU64,
    kill_at_step: Option<u64>,
    steps: AtomicU64,
    trace_phases: bool,
}

impl Ctx {
    /// Starts the clock for an operation with the given deadline.
    pub fn new(deadline: Duration) -> Self {
        let started = Instant::now();
        let kill_at_step = std::env::var(KILL_AT_STEP_ENV)
            .ok()
            .and_then(|v| v.parse().ok());
        Self {
            started,
            deadline: started + deadline,
            phase: AtomicU8::new(Phase::Startup as u8),
            marker_removed: AtomicBool::new(false),
            bytes_done: AtomicU64::new(0),
            bytes_total: AtomicU64::new(0),
            files_done: AtomicU64::new(0),
            files_total: AtomicU64::new(0),
            kill_at_step,
            steps: AtomicU64::new(0),
            trace_phases: std::env::var_os(TRACE_PHASES_ENV).is_some_and(|v| v == "1"),
        }
    }

    /// Time since the operation started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The instant the deadline passes.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Fails with [`Error::Deadline`] once the deadline has passed; called in every loop.
    pub fn check(&self) -> Result<()> {
        if Instant::now() >= self.deadline {
            return Err(Error::Deadline);
        }
        Ok(())
    }

    /// Records the current phase.
    pub fn set_phase(&self, p: Phase) {
        if self.trace_phases {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr().lock(),
                "takbak: {:>8.3} s  phase {}",
                self.elapsed().as_secs_f64(),
                p.as_str()
            );
        }
        self.phase.store(p as u8, Ordering::SeqCst);
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        let v = self.phase.load(Ordering::SeqCst);
        Phase::ALL
            .get(usize::from(v))
            .copied()
            .unwrap_or(Phase::Startup)
    }

    /// Marks a durability-relevant step (a create, write, sync, rename or unlink). With the crash
    /// hook armed, the process dies here with SIGKILL, exactly as `kill -9` would kill it.
    pub fn step(&self) {
        let n = self.steps.fetch_add(1, Ordering::SeqCst) + 1;
        if self.kill_at_step == Some(n) {
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
        }
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.steps.load(Ordering::SeqCst)
    }

    /// True when the crash hook asks for the step count to be reported.
    pub fn report_steps(&self) -> bool {
        self.kill_at_step == Some(0)
    }
}
