//! The storage breaker: one per object-store endpoint, so that an outage is one explained wait
//! instead of every job (a BackupJob of the backup-runner, a RestoreJob of the
//! restore-orchestrator) failing and retrying on its own (see `docs/storage-breaker.md`).
//!
//! ```text
//!  Closed ──(K storage failures of distinct jobs within the window)──► Open
//!  Open: every job that needs the endpoint waits Ready=False StorageUnavailable (phase Running);
//!        one probe (HEAD of the bucket) at a time, steps 5 s, 10 s, 20 s, 40 s, then every 60 s
//!  Open ──(probe answers)──► Recovering: the waiting jobs resume oldest first, at most
//!        the recovery concurrency at once (a slot is held until the job is terminal)
//!  Recovering ──(no job waiting or resumed)──► Closed
//! ```
//!
//! The memory here is a cache of what the API shows: a job's `StorageUnavailable` condition is the
//! durable record that it waits, so a restarted daemon that sees one opens the breaker again and
//! probes at once ([`Breakers::seed`]).
//!
//! This crate is the state, the probe's verdict and the system bucket's client ([`bucket`]); each
//! daemon keeps its gate in front of a job's driver and its interception of a driver's step.

mod args;
pub mod bucket;

pub use args::BreakerArgs;

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use drivers::storage_fault::FaultKind;

/// The metric names a daemon publishes its breakers under (each daemon its own prefix).
#[derive(Debug, Clone, Copy)]
pub struct Names {
    /// Gauge `{endpoint}`: 1 while the object store at the endpoint is considered available, 0
    /// while its breaker is open.
    pub available: &'static str,
    /// Counter `{endpoint, result}`: storage probes (`ok`, `error`).
    pub probes: &'static str,
    /// Counter `{endpoint}`: times a breaker opened.
    pub opened: &'static str,
}

impl Names {
    /// Describes the metrics.
    pub fn describe(&self) {
        metrics::describe_gauge!(
            self.available,
            "1 while the object store at the endpoint is considered available, 0 while its storage breaker is open."
        );
        metrics::describe_counter!(
            self.probes,
            "Storage breaker probes (HEAD of the bucket), by result."
        );
        metrics::describe_counter!(
            self.opened,
            "Times the storage breaker of an endpoint opened."
        );
    }
}

/// The probe's backoff: the first probe at once when the breaker opens, then these delays after
/// each failed probe, the last repeated.
pub const PROBE_STEPS: [Duration; 5] = [
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(20),
    Duration::from_secs(40),
    Duration::from_secs(60),
];

/// How often a job waiting for a resume slot looks again (a slot frees when a resumed job ends).
pub const SLOT_RECHECK: Duration = Duration::from_secs(5);

/// The breaker settings (from the flags).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Failures of distinct jobs within `window` that open the breaker.
    pub failures: u32,
    /// The window.
    pub window: Duration,
    /// Jobs resumed at once after a successful probe.
    pub recovery_concurrency: usize,
}

/// What a job may do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Go on to the driver.
    Go,
    /// Wait: the breaker is open (or the job waits for a resume slot).
    Wait {
        /// Whether this caller must run the probe now (exactly one caller per step gets `true`).
        probe: bool,
        /// When to look again.
        recheck: Duration,
        /// Since when the endpoint is down (`None` while resuming).
        outage: Option<Outage>,
    },
}

/// What the breaker knows of an outage (for the job's message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outage {
    /// The last storage error seen (redacted, shortened).
    pub last_error: String,
    /// Seconds since the breaker opened.
    pub for_secs: u64,
}

#[derive(Debug)]
enum Mode {
    Closed,
    Open {
        since: Instant,
        last_error: String,
        step: usize,
        next_probe: Instant,
        probing: bool,
    },
    Recovering,
}

#[derive(Debug)]
struct Endpoint {
    mode: Mode,
    /// Storage failures: when, and of which job.
    failures: VecDeque<(Instant, String)>,
    /// (job's creation time, job key): the jobs waiting, oldest first.
    waiting: BTreeSet<(String, String)>,
    /// Jobs resumed after the outage that have not reached a terminal phase yet.
    resumed: HashSet<String>,
    /// Whether this process has opened or probed this endpoint (a job condition seeds only once).
    known: bool,
}

impl Endpoint {
    fn new() -> Self {
        Endpoint {
            mode: Mode::Closed,
            failures: VecDeque::new(),
            waiting: BTreeSet::new(),
            resumed: HashSet::new(),
            known: false,
        }
    }
}

/// Every endpoint's breaker.
#[derive(Debug)]
pub struct Breakers {
    settings: Settings,
    names: Names,
    endpoints: Mutex<HashMap<String, Endpoint>>,
    /// (job, message) pairs already counted: a job whose driver keeps showing one failure counts
    /// once.
    counted: Mutex<HashSet<(String, String)>>,
    /// Wakes jobs (`namespace/name`) at once: those whose failure opened the breaker, the waiting
    /// ones when the probe succeeds, the next in line when a resumed job ends.
    wake: Option<tokio::sync::mpsc::UnboundedSender<String>>,
}

impl Breakers {
    /// No breaker open; metrics under `names`.
    pub fn new(settings: Settings, names: Names) -> Self {
        Breakers {
            settings,
            names,
            endpoints: Mutex::new(HashMap::new()),
            counted: Mutex::new(HashSet::new()),
            wake: None,
        }
    }

    /// Wakes jobs through `wake` (the job controller reconciles each key sent).
    pub fn with_wake(mut self, wake: tokio::sync::mpsc::UnboundedSender<String>) -> Self {
        self.wake = Some(wake);
        self
    }

    fn wake_all<'a>(&self, jobs: impl IntoIterator<Item = &'a String>) {
        if let Some(tx) = &self.wake {
            for job in jobs {
                let _ = tx.send(job.clone());
            }
        }
    }

    fn with<T>(&self, endpoint: &str, f: impl FnOnce(&mut Endpoint) -> T) -> T {
        let mut all = self.endpoints.lock().expect("breaker lock");
        let e = all.entry(endpoint.to_owned()).or_insert_with(Endpoint::new);
        let out = f(e);
        let available = !matches!(e.mode, Mode::Open { .. });
        metrics::gauge!(self.names.available, "endpoint" => endpoint.to_owned())
            .set(if available { 1.0 } else { 0.0 });
        out
    }

    /// Records a storage failure of `job` (its text `error`, already redacted); true when the
    /// breaker of `endpoint` is open afterwards. A job's same failure counts once.
    pub fn record_failure(
        &self,
        endpoint: &str,
        job: &str,
        kind: FaultKind,
        error: &str,
        now: Instant,
    ) -> bool {
        let first = self
            .counted
            .lock()
            .expect("breaker lock")
            .insert((job.to_owned(), error.to_owned()));
        let settings = self.settings;
        self.with(endpoint, |e| {
            if let Mode::Open { last_error, .. } = &mut e.mode {
                *last_error = format!("{}: {error}", kind.as_str());
                return true;
            }
            if !first {
                return false;
            }
            e.failures.push_back((now, job.to_owned()));
            while e
                .failures
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > settings.window)
            {
                e.failures.pop_front();
            }
            let distinct: HashSet<&str> = e.failures.iter().map(|(_, j)| j.as_str()).collect();
            // Closed, or Recovering (the store went away again while the backlog resumed).
            if distinct.len() as u32 >= settings.failures {
                tracing::warn!(
                    endpoint,
                    failures = distinct.len(),
                    last_error = error,
                    "storage breaker opened: the object store is unavailable"
                );
                metrics::counter!(self.names.opened, "endpoint" => endpoint.to_owned())
                    .increment(1);
                e.known = true;
                // The jobs whose failures opened it wait too (their driver's own retry may be
                // far away).
                self.wake_all(e.failures.iter().map(|(_, j)| j));
                e.failures.clear();
                e.mode = Mode::Open {
                    since: now,
                    last_error: format!("{}: {error}", kind.as_str()),
                    step: 0,
                    next_probe: now,
                    probing: false,
                };
                return true;
            }
            false
        })
    }

    /// A job that carries `Ready=False StorageUnavailable` (the durable record of a wait) opens a
    /// breaker this process has not opened or probed yet, to be probed at once (after a restart).
    pub fn seed(&self, endpoint: &str, message: &str, now: Instant) {
        self.with(endpoint, |e| {
            if e.known {
                return;
            }
            e.known = true;
            if matches!(e.mode, Mode::Closed) {
                tracing::info!(
                    endpoint,
                    "storage breaker opened from a waiting job's condition (the daemon restarted)"
                );
                e.mode = Mode::Open {
                    since: now,
                    last_error: message.to_owned(),
                    step: 0,
                    next_probe: now,
                    probing: false,
                };
            }
        });
    }

    /// Whether `job` (created at `created`, RFC 3339, which orders oldest first) may go on to its
    /// driver on `endpoint`.
    pub fn admit(&self, endpoint: &str, job: &str, created: &str, now: Instant) -> Admission {
        let concurrency = self.settings.recovery_concurrency;
        self.with(endpoint, |e| match &mut e.mode {
            Mode::Closed => Admission::Go,
            Mode::Open {
                since,
                last_error,
                next_probe,
                probing,
                ..
            } => {
                e.waiting.insert((created.to_owned(), job.to_owned()));
                let outage = Some(Outage {
                    last_error: last_error.clone(),
                    for_secs: now.duration_since(*since).as_secs(),
                });
                if !*probing && now >= *next_probe {
                    *probing = true;
                    return Admission::Wait {
                        probe: true,
                        recheck: PROBE_STEPS[0],
                        outage,
                    };
                }
                let recheck = next_probe.saturating_duration_since(now) + Duration::from_secs(1);
                Admission::Wait {
                    probe: false,
                    recheck,
                    outage,
                }
            }
            Mode::Recovering => {
                if e.resumed.contains(job) {
                    return Admission::Go;
                }
                let key = (created.to_owned(), job.to_owned());
                e.waiting.insert(key.clone());
                let free = concurrency.saturating_sub(e.resumed.len());
                if e.waiting.iter().take(free).any(|k| *k == key) {
                    e.waiting.remove(&key);
                    e.resumed.insert(job.to_owned());
                    tracing::info!(
                        endpoint,
                        job,
                        resumed = e.resumed.len(),
                        waiting = e.waiting.len(),
                        "storage recovered: job resumes"
                    );
                    return Admission::Go;
                }
                Admission::Wait {
                    probe: false,
                    recheck: SLOT_RECHECK,
                    outage: None,
                }
            }
        })
    }

    /// The outcome of the probe an [`Admission::Wait`] with `probe: true` asked for.
    pub fn probed(&self, endpoint: &str, result: Result<(), String>, now: Instant) {
        let label = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!(self.names.probes, "endpoint" => endpoint.to_owned(), "result" => label)
            .increment(1);
        self.with(endpoint, |e| {
            let Mode::Open {
                since,
                last_error,
                step,
                next_probe,
                probing,
            } = &mut e.mode
            else {
                return;
            };
            match result {
                Ok(()) => {
                    tracing::info!(
                        endpoint,
                        step = *step,
                        down_secs = now.duration_since(*since).as_secs(),
                        waiting = e.waiting.len(),
                        "storage probe succeeded: the object store answers; waiting jobs resume"
                    );
                    e.mode = Mode::Recovering;
                    e.failures.clear();
                    // The oldest take the slots as they come; every waiting job looks now.
                    self.wake_all(e.waiting.iter().map(|(_, j)| j));
                    if e.waiting.is_empty() && e.resumed.is_empty() {
                        e.mode = Mode::Closed;
                    }
                }
                Err(error) => {
                    let delay = PROBE_STEPS[(*step).min(PROBE_STEPS.len() - 1)];
                    tracing::info!(
                        endpoint,
                        step = *step,
                        next_in_secs = delay.as_secs(),
                        error,
                        "storage probe failed"
                    );
                    *last_error = error;
                    *step += 1;
                    *next_probe = now + delay;
                    *probing = false;
                }
            }
        });
    }

    /// `job` reached a terminal phase (or left): it frees its resume slot and its place in line.
    pub fn release(&self, job: &str) {
        self.counted
            .lock()
            .expect("breaker lock")
            .retain(|(j, _)| j != job);
        let mut all = self.endpoints.lock().expect("breaker lock");
        for (endpoint, e) in all.iter_mut() {
            if e.resumed.remove(job) {
                // A slot is free: the oldest waiting job takes it.
                let free = self
                    .settings
                    .recovery_concurrency
                    .saturating_sub(e.resumed.len());
                self.wake_all(e.waiting.iter().take(free).map(|(_, j)| j));
            }
            e.waiting.retain(|(_, j)| j != job);
            if matches!(e.mode, Mode::Recovering) && e.waiting.is_empty() && e.resumed.is_empty() {
                tracing::info!(
                    endpoint,
                    "storage breaker closed: every waiting job resumed"
                );
                e.mode = Mode::Closed;
            }
        }
    }

    /// Forgets the jobs that are gone or terminal by `alive` (a deleted job is never reconciled
    /// again, so it would hold its resume slot or place in line for ever).
    pub fn prune(&self, alive: impl Fn(&str) -> bool) {
        let gone: Vec<String> = {
            let all = self.endpoints.lock().expect("breaker lock");
            all.values()
                .flat_map(|e| e.resumed.iter().chain(e.waiting.iter().map(|(_, j)| j)))
                .filter(|j| !alive(j))
                .cloned()
                .collect()
        };
        for job in gone {
            self.release(&job);
        }
    }

    /// Runs the probe an [`Admission::Wait`] with `probe: true` asked for: HEAD of the bucket
    /// with `s3`, in the background (bounded by the S3 client's timeouts); its outcome goes to
    /// [`Breakers::probed`].
    pub fn spawn_probe(
        self: &std::sync::Arc<Self>,
        endpoint: &str,
        s3: backup_storage::s3::S3Client,
    ) {
        let breakers = self.clone();
        let endpoint = endpoint.to_owned();
        tracing::info!(endpoint, "storage probe: HEAD of the system bucket");
        tokio::spawn(async move {
            let result = probe_outcome(s3.head_bucket().await);
            breakers.probed(&endpoint, result, Instant::now());
        });
    }

    /// A job on `endpoint` succeeded: its storage works, earlier failures no longer count.
    pub fn succeeded(&self, endpoint: &str) {
        self.with(endpoint, |e| e.failures.clear());
    }
}

/// The jobs a breaker wakes ([`Breakers::with_wake`]), as the object references a controller's
/// `reconcile_on` takes.
pub fn woken<K>(
    rx: tokio::sync::mpsc::UnboundedReceiver<String>,
) -> impl futures::Stream<Item = kube::runtime::reflector::ObjectRef<K>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + 'static,
{
    futures::stream::unfold(rx, |mut rx| async move {
        let key = rx.recv().await?;
        let (ns, name) = key.split_once('/').unwrap_or(("", key.as_str()));
        Some((
            kube::runtime::reflector::ObjectRef::<K>::new(name).within(ns),
            rx,
        ))
    })
}

/// How long a job has been going at `now`: since its `startedAt`, else its creation (zero when
/// neither is known); what its deadline is measured against.
pub fn elapsed(
    started: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    created: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    now: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Duration {
    started
        .or(created)
        .and_then(|since| (now.0 - since.0).try_into().ok())
        .unwrap_or_default()
}

/// A failure text fit for a job's status and the log: URLs lose their query (a presigned URL's
/// signature and key id live there), and the text is cut at 300 characters.
pub fn redact(text: &str) -> String {
    static QUERY: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r#"(https?://[^\s"'?]+)\?[^\s"']*"#).expect("valid regex")
    });
    let text = QUERY.replace_all(text.trim(), "$1");
    let mut out: String = text.chars().take(300).collect();
    if text.chars().count() > 300 {
        out.push('…');
    }
    out
}

/// Whether a probe's answer means the store is back: any answer but a 5xx or 429 (a 403 or 404 is
/// the store answering, about the system credentials or bucket, which the jobs' own credentials
/// do not share; waiting would not change it). The error is redacted.
pub fn probe_outcome(result: Result<(), backup_storage::s3::S3Error>) -> Result<(), String> {
    match result {
        Ok(()) => Ok(()),
        Err(backup_storage::s3::S3Error::Status { status, .. })
            if status < 500 && status != 429 =>
        {
            Ok(())
        }
        Err(e) => Err(redact(&e.to_string())),
    }
}

/// The `Ready=False` reason of a job waiting for its object store.
pub const STORAGE_UNAVAILABLE: &str = "StorageUnavailable";

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn breakers() -> Breakers {
        Breakers::new(
            Settings {
                failures: 3,
                window: Duration::from_secs(300),
                recovery_concurrency: 2,
            },
            Names {
                available: "test_storage_available",
                probes: "test_storage_probes_total",
                opened: "test_storage_breaker_opened_total",
            },
        )
    }

    const E: &str = "s3.example.org:443";
    const K: FaultKind = FaultKind::ConnectionFailed;

    fn waits(a: &Admission) -> bool {
        matches!(a, Admission::Wait { .. })
    }

    #[test]
    fn breaker_opens_after_k_failures_of_distinct_jobs_within_the_window() {
        let b = breakers();
        let t = Instant::now();
        assert!(!b.record_failure(E, "ns/a", K, "refused", t));
        // The same job's same failure counts once.
        assert!(!b.record_failure(E, "ns/a", K, "refused", t + Duration::from_secs(1)));
        assert!(!b.record_failure(E, "ns/b", K, "refused", t + Duration::from_secs(200)));
        // Outside the window the first failure is forgotten.
        assert!(!b.record_failure(E, "ns/c", K, "refused", t + Duration::from_secs(400)));
        assert_eq!(b.admit(E, "ns/x", "1", t), Admission::Go);
        assert!(b.record_failure(E, "ns/d", K, "refused", t + Duration::from_secs(401)));
        // Another endpoint is unaffected.
        assert_eq!(b.admit("other:443", "ns/x", "1", t), Admission::Go);
    }

    #[test]
    fn breaker_probes_once_per_step_with_capped_backoff() {
        let b = breakers();
        let t = Instant::now();
        for j in ["a", "b", "c"] {
            b.record_failure(E, j, K, "refused", t);
        }
        // Exactly one caller probes; the others wait.
        let first = b.admit(E, "ns/1", "2026-01-01T00:00:01Z", t);
        assert!(matches!(first, Admission::Wait { probe: true, .. }));
        for j in 2..10 {
            let a = b.admit(E, &format!("ns/{j}"), "2026-01-01T00:00:02Z", t);
            assert!(matches!(a, Admission::Wait { probe: false, .. }), "{a:?}");
        }
        let mut now = t;
        let mut delays = Vec::new();
        for _ in 0..7 {
            b.probed(E, Err("S3 head : HTTP 503 ServiceUnavailable".into()), now);
            // No probe before the step's delay passed.
            let Admission::Wait {
                probe: false,
                recheck,
                outage: Some(outage),
            } = b.admit(E, "ns/1", "2026-01-01T00:00:01Z", now)
            else {
                panic!("a probe before its step")
            };
            assert_eq!(outage.last_error, "S3 head : HTTP 503 ServiceUnavailable");
            let delay = recheck - Duration::from_secs(1);
            delays.push(delay.as_secs());
            now += delay;
            assert!(matches!(
                b.admit(E, "ns/2", "2026-01-01T00:00:02Z", now),
                Admission::Wait { probe: true, .. }
            ));
        }
        assert_eq!(delays, [5, 10, 20, 40, 60, 60, 60]);
    }

    #[test]
    fn breaker_resumes_oldest_first_with_bounded_concurrency_then_closes() {
        let b = breakers();
        let t = Instant::now();
        for j in ["a", "b", "c"] {
            b.record_failure(E, j, K, "refused", t);
        }
        let jobs = [
            ("ns/new", "2026-01-01T00:04:00Z"),
            ("ns/old", "2026-01-01T00:01:00Z"),
            ("ns/mid", "2026-01-01T00:02:00Z"),
            ("ns/late", "2026-01-01T00:03:00Z"),
        ];
        for (j, c) in jobs {
            assert!(waits(&b.admit(E, j, c, t)));
        }
        b.probed(E, Ok(()), t);
        // The newest asks first, but the two oldest get the two slots.
        assert!(waits(&b.admit(E, "ns/new", jobs[0].1, t)));
        assert_eq!(b.admit(E, "ns/old", jobs[1].1, t), Admission::Go);
        assert!(waits(&b.admit(E, "ns/late", jobs[3].1, t)));
        assert_eq!(b.admit(E, "ns/mid", jobs[2].1, t), Admission::Go);
        assert!(waits(&b.admit(E, "ns/late", jobs[3].1, t)));
        // A resumed job keeps its slot until it ends.
        assert_eq!(b.admit(E, "ns/old", jobs[1].1, t), Admission::Go);
        b.release("ns/old");
        assert!(waits(&b.admit(E, "ns/new", jobs[0].1, t)));
        assert_eq!(b.admit(E, "ns/late", jobs[3].1, t), Admission::Go);
        b.release("ns/mid");
        assert_eq!(b.admit(E, "ns/new", jobs[0].1, t), Admission::Go);
        b.release("ns/late");
        b.release("ns/new");
        // Closed: anyone goes.
        assert_eq!(b.admit(E, "ns/z", "2026-01-01T00:09:00Z", t), Admission::Go);
    }

    #[test]
    fn breaker_forgets_deleted_jobs_so_their_slots_free() {
        let b = breakers();
        let t = Instant::now();
        for j in ["a", "b", "c"] {
            b.record_failure(E, j, K, "refused", t);
        }
        for (j, c) in [("ns/1", "1"), ("ns/2", "2"), ("ns/3", "3")] {
            assert!(waits(&b.admit(E, j, c, t)));
        }
        b.probed(E, Ok(()), t);
        assert_eq!(b.admit(E, "ns/1", "1", t), Admission::Go);
        assert_eq!(b.admit(E, "ns/2", "2", t), Admission::Go);
        assert!(waits(&b.admit(E, "ns/3", "3", t)));
        // ns/1 was deleted (never reconciled again): pruning frees its slot.
        b.prune(|j| j != "ns/1");
        assert_eq!(b.admit(E, "ns/3", "3", t), Admission::Go);
        b.prune(|_| false);
        assert_eq!(b.admit(E, "ns/9", "9", t), Admission::Go);
    }

    #[test]
    fn breaker_reopens_when_storage_fails_again_while_jobs_resume() {
        let b = breakers();
        let t = Instant::now();
        for j in ["a", "b", "c"] {
            b.record_failure(E, j, K, "refused", t);
        }
        assert!(waits(&b.admit(E, "ns/1", "1", t)));
        assert!(waits(&b.admit(E, "ns/2", "2", t)));
        b.probed(E, Ok(()), t);
        assert_eq!(b.admit(E, "ns/1", "1", t), Admission::Go);
        assert!(!b.record_failure(E, "ns/1", K, "reset", t));
        assert!(!b.record_failure(E, "ns/x", K, "reset", t));
        assert!(b.record_failure(E, "ns/y", K, "reset", t));
        assert!(matches!(
            b.admit(E, "ns/2", "2", t),
            Admission::Wait { probe: true, .. }
        ));
    }

    #[test]
    fn breaker_is_seeded_from_a_waiting_jobs_condition_once() {
        let b = breakers();
        let t = Instant::now();
        b.seed(E, "connection: refused", t);
        assert!(matches!(
            b.admit(E, "ns/a", "1", t),
            Admission::Wait { probe: true, .. }
        ));
        b.probed(E, Ok(()), t);
        assert_eq!(b.admit(E, "ns/a", "1", t), Admission::Go);
        b.release("ns/a");
        // A stale condition seen later does not reopen a breaker this process already probed.
        b.seed(E, "connection: refused", t);
        assert_eq!(b.admit(E, "ns/b", "2", t), Admission::Go);
    }

    #[test]
    fn breaker_probe_counts_any_answer_but_5xx_and_throttling_as_back() {
        use backup_storage::s3::S3Error;
        let status = |status: u16, code: &str| S3Error::Status {
            op: "head",
            key: String::new(),
            status,
            code: code.into(),
        };
        assert_eq!(probe_outcome(Ok(())), Ok(()));
        assert_eq!(probe_outcome(Err(status(403, ""))), Ok(()));
        assert_eq!(probe_outcome(Err(status(404, ""))), Ok(()));
        assert_eq!(
            probe_outcome(Err(status(503, "ServiceUnavailable"))),
            Err("S3 head : HTTP 503 ServiceUnavailable".into())
        );
        assert!(probe_outcome(Err(status(429, "SlowDown"))).is_err());
        let refused = S3Error::Transport {
            op: "head",
            key: String::new(),
            message: "error sending request: Connection refused (os error 111)".into(),
        };
        assert!(probe_outcome(Err(refused)).is_err());
    }

    #[test]
    fn redaction_drops_url_queries_and_caps_length() {
        assert_eq!(
            redact(
                r#"Could not connect to the endpoint URL: "https://h:1/b/k?X-Amz-Credential=AKIA123&X-Amz-Signature=abc""#
            ),
            r#"Could not connect to the endpoint URL: "https://h:1/b/k""#
        );
        assert_eq!(redact(&"x".repeat(400)).chars().count(), 301);
    }
}
