//! The scale benchmark's pieces that are not I/O: the command line, the objects each daemon is
//! measured against, and reading a process's CPU time and memory from `/proc`.
//!
//! ```text
//!  Options (--only, --objects, --idle-seconds)
//!  seed(daemon, n) ──► Seed { manifests, statuses, measured kinds }
//!        │                 └─ loaded into an in-process emulator, its snapshot (with the statuses
//!        │                    put back, since a create drops them) seeds the emulator process
//!        ▼
//!  src/bin/scale-bench.rs: emulator process ─► baseline LIST+WATCH ─► daemon: ready, caught up,
//!                         60 s idle (CPU, requests), RSS ─► one row per daemon
//! ```
//! What is measured and the figures: `docs/reliability.md` ("Scale").

pub mod fixtures;
pub mod procfs;

use std::fmt;
use std::str::FromStr;

/// A daemon the benchmark measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Daemon {
    /// `bins/strategy-renderer`.
    StrategyRenderer,
    /// `bins/credentials-projector`.
    CredentialsProjector,
    /// `bins/apidef-restarter`.
    ApidefRestarter,
    /// `bins/backup-runner`.
    BackupRunner,
    /// `bins/restore-orchestrator`.
    RestoreOrchestrator,
    /// `bins/retention-cleaner`.
    RetentionCleaner,
}

impl Daemon {
    /// Every daemon, in the order they are measured.
    pub const ALL: [Daemon; 6] = [
        Daemon::StrategyRenderer,
        Daemon::CredentialsProjector,
        Daemon::ApidefRestarter,
        Daemon::BackupRunner,
        Daemon::RestoreOrchestrator,
        Daemon::RetentionCleaner,
    ];

    /// The binary's (and the component's) name.
    pub fn name(self) -> &'static str {
        match self {
            Daemon::StrategyRenderer => "strategy-renderer",
            Daemon::CredentialsProjector => "credentials-projector",
            Daemon::ApidefRestarter => "apidef-restarter",
            Daemon::BackupRunner => "backup-runner",
            Daemon::RestoreOrchestrator => "restore-orchestrator",
            Daemon::RetentionCleaner => "retention-cleaner",
        }
    }

    /// The prefix of the daemon's own metrics.
    pub fn metric_prefix(self) -> String {
        format!("cozy_backups_{}_", self.name().replace('-', "_"))
    }
}

impl fmt::Display for Daemon {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Daemon {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Daemon::ALL
            .into_iter()
            .find(|d| d.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Daemon::ALL.iter().map(|d| d.name()).collect();
                format!(
                    "--only: unknown daemon {s:?} (one of {}, comma-separated)",
                    names.join(", ")
                )
            })
    }
}

/// The command line.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// The daemons to measure.
    pub only: Vec<Daemon>,
    /// How many relevant objects (10,000).
    pub objects: usize,
    /// The idle window in seconds (60).
    pub idle_seconds: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            only: Daemon::ALL.to_vec(),
            objects: 10_000,
            idle_seconds: 60,
        }
    }
}

/// The usage text.
pub const USAGE: &str =
    "usage: scale-bench [--only DAEMON[,DAEMON…]] [--objects N] [--idle-seconds S]";

impl Options {
    /// Parses the arguments after the program name; an error names the flag.
    pub fn parse<I: IntoIterator<Item = String>>(args: I) -> Result<Self, String> {
        let mut o = Options::default();
        let mut args = args.into_iter();
        while let Some(flag) = args.next() {
            let (flag, inline) = match flag.split_once('=') {
                Some((f, v)) => (f.to_owned(), Some(v.to_owned())),
                None => (flag, None),
            };
            let mut value = || {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| format!("{flag}: a value is required"))
            };
            match flag.as_str() {
                "--only" => {
                    o.only = value()?
                        .split(',')
                        .filter(|s| !s.is_empty())
                        .map(str::parse)
                        .collect::<Result<_, _>>()?;
                    if o.only.is_empty() {
                        return Err("--only: name at least one daemon".into());
                    }
                }
                "--objects" => {
                    let v = value()?;
                    o.objects = v
                        .parse()
                        .map_err(|_| format!("--objects: {v:?} is not a whole number"))?;
                    if o.objects < 100 {
                        return Err(format!(
                            "--objects: {} is too few; at least 100 (one namespace per 10 objects)",
                            o.objects
                        ));
                    }
                }
                "--idle-seconds" => {
                    let v = value()?;
                    o.idle_seconds = v
                        .parse()
                        .map_err(|_| format!("--idle-seconds: {v:?} is not a whole number"))?;
                    if o.idle_seconds == 0 {
                        return Err("--idle-seconds: must be at least 1".into());
                    }
                }
                other => return Err(format!("unknown argument {other:?}; {USAGE}")),
            }
        }
        Ok(o)
    }

    /// The arguments that reproduce these options for one daemon (the per-daemon child process).
    pub fn child_args(&self, daemon: Daemon) -> Vec<String> {
        vec![
            "--only".into(),
            daemon.name().into(),
            "--objects".into(),
            self.objects.to_string(),
            "--idle-seconds".into(),
            self.idle_seconds.to_string(),
        ]
    }
}

/// One daemon's figures, printed as a tab-separated line (`ROW\t…`) by the per-daemon process and
/// gathered into the summary table by the parent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    /// The daemon.
    pub daemon: String,
    /// What was seeded, in words.
    pub objects: String,
    /// Emulator: a plain LIST of the measured objects, seconds.
    pub list_s: f64,
    /// Emulator: opening a watch (response headers), seconds.
    pub watch_open_s: f64,
    /// Emulator RSS with the objects loaded, MiB.
    pub emulator_rss_mib: f64,
    /// Baseline: a minimal client's paged LIST + WATCH until the initial list is done, seconds.
    pub baseline_s: f64,
    /// Daemon: process start → `/ready` 200, seconds.
    pub ready_s: f64,
    /// Daemon: process start → initial pass over the objects done, seconds.
    pub caught_up_s: f64,
    /// Daemon CPU seconds from start to caught up.
    pub catch_up_cpu_s: f64,
    /// Daemon CPU seconds over the idle window.
    pub idle_cpu_s: f64,
    /// The idle window, seconds.
    pub idle_window_s: f64,
    /// API requests seen by the emulator during the idle window.
    pub idle_requests: u64,
    /// Daemon VmRSS after catching up, MiB.
    pub rss_mib: f64,
    /// Daemon VmHWM at the end, MiB.
    pub hwm_mib: f64,
}

impl Row {
    /// Caught-up time over the baseline.
    pub fn ratio(&self) -> f64 {
        if self.baseline_s > 0.0 {
            self.caught_up_s / self.baseline_s
        } else {
            f64::NAN
        }
    }

    /// The tab-separated line.
    pub fn to_line(&self) -> String {
        format!(
            "ROW\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
            self.daemon,
            self.objects,
            self.list_s,
            self.watch_open_s,
            self.emulator_rss_mib,
            self.baseline_s,
            self.ready_s,
            self.caught_up_s,
            self.catch_up_cpu_s,
            self.idle_cpu_s,
            self.idle_window_s,
            self.idle_requests,
            self.rss_mib,
            self.hwm_mib
        )
    }

    /// Parses a line written by [`Row::to_line`]; None for any other line.
    pub fn from_line(line: &str) -> Option<Row> {
        let f: Vec<&str> = line.strip_prefix("ROW\t")?.split('\t').collect();
        if f.len() != 14 {
            return None;
        }
        let n = |i: usize| f[i].parse::<f64>().ok();
        Some(Row {
            daemon: f[0].into(),
            objects: f[1].into(),
            list_s: n(2)?,
            watch_open_s: n(3)?,
            emulator_rss_mib: n(4)?,
            baseline_s: n(5)?,
            ready_s: n(6)?,
            caught_up_s: n(7)?,
            catch_up_cpu_s: n(8)?,
            idle_cpu_s: n(9)?,
            idle_window_s: n(10)?,
            idle_requests: f[11].parse().ok()?,
            rss_mib: n(12)?,
            hwm_mib: n(13)?,
        })
    }
}

/// The summary as a Markdown table (pasted into the docs).
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| daemon | objects | ready | caught up | baseline LIST+WATCH | ratio | CPU to catch up | idle CPU (requests) | RSS / peak | emulator: LIST, watch open, RSS |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let goal = if r.hwm_mib <= 64.0 {
            ""
        } else {
            " **over 64**"
        };
        out.push_str(&format!(
            "| {} | {} | {:.2} s | {:.2} s | {:.2} s | {:.1}× | {:.2} s | {:.2} s in {:.0} s ({}) | {:.1} / {:.1} MiB{goal} | {:.0} ms, {:.1} ms, {:.0} MiB |\n",
            r.daemon,
            r.objects,
            r.ready_s,
            r.caught_up_s,
            r.baseline_s,
            r.ratio(),
            r.catch_up_cpu_s,
            r.idle_cpu_s,
            r.idle_window_s,
            r.idle_requests,
            r.rss_mib,
            r.hwm_mib,
            r.list_s * 1e3,
            r.watch_open_s * 1e3,
            r.emulator_rss_mib
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn options_default_to_every_daemon_at_ten_thousand_objects() {
        let o = Options::parse(Vec::new()).unwrap();
        assert_eq!(o, Options::default());
        assert_eq!(o.only.len(), 6);
        assert_eq!(o.objects, 10_000);
        assert_eq!(o.idle_seconds, 60);
    }

    #[test]
    fn options_parse_and_reproduce_for_a_child() {
        let o = Options::parse(args(
            "--only backup-runner,retention-cleaner --objects=2000",
        ))
        .unwrap();
        assert_eq!(o.only, vec![Daemon::BackupRunner, Daemon::RetentionCleaner]);
        assert_eq!(o.objects, 2000);
        let child = Options::parse(o.child_args(Daemon::BackupRunner)).unwrap();
        assert_eq!(child.only, vec![Daemon::BackupRunner]);
        assert_eq!(child.objects, 2000);
        assert_eq!(child.idle_seconds, 60);
    }

    #[test]
    fn bad_options_name_the_flag() {
        let e = Options::parse(args("--only lease")).unwrap_err();
        assert!(e.starts_with("--only: unknown daemon \"lease\""), "{e}");
        let e = Options::parse(args("--objects ten")).unwrap_err();
        assert_eq!(e, "--objects: \"ten\" is not a whole number");
        let e = Options::parse(args("--objects 50")).unwrap_err();
        assert!(e.starts_with("--objects: 50 is too few"), "{e}");
        let e = Options::parse(args("--idle-seconds")).unwrap_err();
        assert_eq!(e, "--idle-seconds: a value is required");
        let e = Options::parse(args("--fast")).unwrap_err();
        assert!(e.starts_with("unknown argument \"--fast\""), "{e}");
    }

    #[test]
    fn rows_survive_the_line_format_and_render_the_goal() {
        let r = Row {
            daemon: "backup-runner".into(),
            objects: "10000 BackupJobs".into(),
            list_s: 0.12,
            watch_open_s: 0.001,
            emulator_rss_mib: 210.0,
            baseline_s: 1.5,
            ready_s: 1.2,
            caught_up_s: 3.0,
            catch_up_cpu_s: 2.1,
            idle_cpu_s: 0.0,
            idle_window_s: 60.0,
            idle_requests: 0,
            rss_mib: 40.0,
            hwm_mib: 70.0,
        };
        let back = Row::from_line(&r.to_line()).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.ratio(), 2.0);
        assert!(Row::from_line("caught up after 3 s").is_none());
        let t = table(&[r]);
        assert!(
            t.contains("| backup-runner | 10000 BackupJobs | 1.20 s | 3.00 s | 1.50 s | 2.0× |")
        );
        assert!(t.contains("40.0 / 70.0 MiB **over 64**"));
    }
}
