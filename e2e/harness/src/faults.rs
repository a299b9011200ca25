//! What every daemon's fault test shares: the fixed chaos schedule, the request-rate measurement and
//! its bound, and the "it did not crash" checks.
//!
//! ```text
//!  calm run  ──► RunStats { requests, peak/s, elapsed }  ─┐
//!  chaos run ──► RunStats (schedule(SEED, daemon), outage) ┴─► assert_no_spin: rate ≤ 3 × calm + 2/s,
//!                                                              peak ≤ 3 × calm peak + 10
//! ```

use std::time::{Duration, Instant};

use crate::{Audit, Chaos, ChaosCounts, Harness, Mix};

/// The seed every daemon's fault test uses.
pub const SEED: u64 = 20_251_202;

/// The schedule of the fault tests, for the requests of clients whose User-Agent starts with
/// `user_agent` (the daemon under test): 8 % of requests fail (500 and 429 twice as often as a
/// 300 ms timeout or a 410 on a watch resume), a 429 asks for a 1 s wait, timed-out writes are
/// applied before their 504, and a third of the watches are cut within 3 s of their start.
pub fn schedule(user_agent: &str) -> Chaos {
    let mut c = Chaos::new(SEED, 0.08);
    c.mix = Mix {
        error: 2,
        throttle: 2,
        timeout: 1,
        expire: 1,
    };
    c.retry_after_seconds = 1;
    c.timeout_millis = 300;
    c.timeout_commits_writes = true;
    c.watch_cut_rate = 0.3;
    c.watch_cut_max_millis = 3_000;
    c.user_agent = Some(user_agent.to_owned());
    c
}

/// One daemon's requests over one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunStats {
    /// Requests it made (any verb, any answer).
    pub requests: usize,
    /// The most it made within one second.
    pub peak: usize,
    /// How long the run took.
    pub elapsed: Duration,
}

impl RunStats {
    /// The requests of clients whose User-Agent starts with `user_agent` in `audit`.
    pub fn measure(audit: &Audit, user_agent: &str, elapsed: Duration) -> Self {
        let (requests, peak) = audit.rate(user_agent);
        RunStats {
            requests,
            peak,
            elapsed,
        }
    }

    /// The requests `daemon` (a User-Agent prefix) made since `started`, from `h`'s audit log.
    pub fn since(h: &Harness, daemon: &str, started: Instant) -> Self {
        Self::measure(&Audit::parse(&h.audit_log()), daemon, started.elapsed())
    }

    /// Requests per second over the run.
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64().max(1.0)
    }
}

impl std::fmt::Display for RunStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests in {:.1} s ({:.1}/s, peak {}/s)",
            self.requests,
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.peak
        )
    }
}

/// Asserts that the run under faults did not spin: its mean rate is at most 3 × the calm run's
/// plus 2 requests/s, and its busiest second at most 3 × the calm run's plus 10.
pub fn assert_no_spin(daemon: &str, calm: RunStats, chaos: RunStats) {
    assert!(
        calm.requests > 0,
        "{daemon} made no requests in the calm run"
    );
    let rate_bound = 3.0 * calm.rate() + 2.0;
    let peak_bound = 3 * calm.peak + 10;
    println!("{daemon}: calm {calm}; under faults {chaos}");
    assert!(
        chaos.rate() <= rate_bound && chaos.peak <= peak_bound,
        "{daemon} spins under faults: {chaos}, bound {rate_bound:.1}/s and peak {peak_bound}/s (calm run: {calm})"
    );
}

/// Asserts that each `/ready` report taken during an API server outage names it.
pub fn assert_outage_reported(reports: &[(String, String)]) {
    assert!(!reports.is_empty(), "no outage was observed");
    for (name, report) in reports {
        println!("{name} /ready during the outage:\n{report}");
        assert!(
            report.contains("API server unreachable"),
            "{name} did not name the outage on /ready:\n{report}"
        );
    }
}

/// One run of a daemon's main scenario, calm or under the schedule: the end state the test
/// compares, the daemon's requests, what the schedule injected and the `/ready` reports taken
/// during the API server outage (none in a calm run).
#[derive(Debug)]
pub struct Run<S> {
    /// The end state, compared between the two runs by the test.
    pub state: S,
    /// The daemon's requests.
    pub stats: RunStats,
    /// The faults injected (zero in a calm run).
    pub counts: ChaosCounts,
    /// `(daemon, /ready body)` during the outage.
    pub outage: Vec<(String, String)>,
}

impl<S> Run<S> {
    /// Ends a run of `daemon`'s scenario: the daemon must be unharmed (still running, started
    /// once, no panic), what the schedule injected is recorded, and the harness is cleaned up.
    pub async fn finish(
        h: &mut Harness,
        daemon: &str,
        state: S,
        stats: RunStats,
        outage: Vec<(String, String)>,
    ) -> Self {
        h.daemon(daemon)
            .expect("the daemon under test")
            .assert_unharmed();
        let counts = h.chaos_counts().expect("the chaos counters");
        h.cleanup().await.expect("cleanup");
        Run {
            state,
            stats,
            counts,
            outage,
        }
    }
}

/// What every fault test asserts of its run under faults besides the end state: the schedule
/// injected at least `min_injected` faults, every daemon named the outage on `/ready`, and
/// `daemon` did not spin compared with the calm run.
pub fn assert_survived<S>(daemon: &str, calm: &Run<S>, faulty: &Run<S>, min_injected: u64) {
    println!("injected: {:?}", faulty.counts);
    assert!(
        faulty.counts.injected() >= min_injected,
        "the schedule injected faults: {:?}",
        faulty.counts
    );
    assert_outage_reported(&faulty.outage);
    assert_no_spin(daemon, calm.stats, faulty.stats);
}

/// Makes the next create of `resource` (plural) be stored and then answered 504, as a real API
/// server's "may still be processing the request" can be.
pub fn store_then_time_out_next_create(h: &Harness, resource: &str) {
    h.emulator()
        .expect("an emulator with fault injection")
        .inject_fault(crate::Fault {
            verb: Some("create".into()),
            resource: Some(resource.into()),
            code: 504,
            rate: 1.0,
            count: Some(1),
            after_commit: true,
        });
}

/// The answers (HTTP codes), in order, to `daemon`'s creates of `resource` (plural), from the
/// audit log.
pub fn create_answers(h: &Harness, daemon: &str, resource: &str) -> Vec<u16> {
    h.audit()
        .requests
        .iter()
        .filter(|r| r.user_agent.starts_with(daemon))
        .filter(|r| r.verb == "create" && r.resource == resource)
        .map(|r| r.code)
        .collect()
}
