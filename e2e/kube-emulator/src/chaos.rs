//! A seeded API fault schedule: what a busy production API server does to its clients, reproducibly.
//!
//! ```text
//!  request ─► Chaos::plan (one seeded RNG, under the admin lock, in arrival order)
//!               ├─ Error     500 InternalError
//!               ├─ Throttle  429 TooManyRequests + `Retry-After: N`
//!               ├─ Timeout   held `timeoutMillis`, then 504 Timeout (a write may be applied first)
//!               ├─ Expire    410 Expired on a watch that resumes from a resourceVersion (forces a relist)
//!               ├─ Cut(d)    a watch that started fine is aborted after d (mid-stream, no clean end)
//!               └─ Pass
//! ```
//! Determinism: every matching request draws the same number of values from one `StdRng` seeded with
//! `seed` (the draws depend only on the request's verb and whether it resumes a watch), so one seed and
//! one request sequence give the same faults. The wall-clock order of concurrent requests from several
//! clients is not fixed, so a test asserts the end state and the counts, not a per-request trace.
//!
//! Every injected fault is counted ([`ChaosCounts`]) and the counters are served by the admin API, so a
//! test can assert that the faults really happened.

use std::time::Duration;

use http::HeaderMap;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

/// The schedule: how often requests fail, and how.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Chaos {
    /// Seed of the schedule's random number generator.
    pub seed: u64,
    /// Probability in 0..=1 that a matching API request gets a fault (production-like: 0.05–0.10).
    pub rate: f64,
    /// Relative weights of the fault kinds.
    #[serde(default)]
    pub mix: Mix,
    /// `Retry-After` seconds on a 429 (kube clients wait that long before retrying).
    #[serde(default = "default_retry_after")]
    pub retry_after_seconds: u64,
    /// How long a timed-out request is held before its 504 (at most 60 000).
    #[serde(default = "default_timeout_millis")]
    pub timeout_millis: u64,
    /// When true, a write that times out is applied before the 504, as a real API server may do
    /// ("the server was unable to return a response in the time allotted, but may still be processing
    /// the request"): the client's retry then meets its own earlier write.
    #[serde(default)]
    pub timeout_commits_writes: bool,
    /// Probability in 0..=1 that a watch which started fine is cut mid-stream.
    #[serde(default)]
    pub watch_cut_rate: f64,
    /// A cut watch is aborted after a uniformly drawn 0..=`watchCutMaxMillis` (at least 1).
    #[serde(default = "default_cut_max")]
    pub watch_cut_max_millis: u64,
    /// Only requests whose User-Agent starts with this are affected (None: every client).
    #[serde(default)]
    pub user_agent: Option<String>,
}

/// Relative weights of the fault kinds (a kind that does not apply to a request is left out of the draw).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Mix {
    /// 500 InternalError.
    #[serde(default)]
    pub error: u32,
    /// 429 with `Retry-After`.
    #[serde(default)]
    pub throttle: u32,
    /// Held, then 504.
    #[serde(default)]
    pub timeout: u32,
    /// 410 Expired on a watch resume (watches with a resourceVersion other than "" or "0").
    #[serde(default)]
    pub expire: u32,
}

impl Default for Mix {
    fn default() -> Self {
        Mix {
            error: 1,
            throttle: 1,
            timeout: 1,
            expire: 1,
        }
    }
}

fn default_retry_after() -> u64 {
    1
}

fn default_timeout_millis() -> u64 {
    500
}

fn default_cut_max() -> u64 {
    5_000
}

impl Chaos {
    /// A schedule with the default mix (equal weights), no watch cuts and no User-Agent filter.
    pub fn new(seed: u64, rate: f64) -> Self {
        Chaos {
            seed,
            rate,
            mix: Mix::default(),
            retry_after_seconds: default_retry_after(),
            timeout_millis: default_timeout_millis(),
            timeout_commits_writes: false,
            watch_cut_rate: 0.0,
            watch_cut_max_millis: default_cut_max(),
            user_agent: None,
        }
    }

    /// Checks the ranges; the error names the field.
    pub fn validate(&self) -> Result<(), String> {
        let unit = |name: &str, v: f64| {
            if (0.0..=1.0).contains(&v) {
                Ok(())
            } else {
                Err(format!("{name}: must be between 0 and 1, got {v}"))
            }
        };
        unit("rate", self.rate)?;
        unit("watchCutRate", self.watch_cut_rate)?;
        let m = &self.mix;
        if self.rate > 0.0 && m.error + m.throttle + m.timeout + m.expire == 0 {
            return Err("mix: at least one weight must be positive when rate > 0".into());
        }
        if self.timeout_millis > 60_000 {
            return Err(format!(
                "timeoutMillis: at most 60000, got {}",
                self.timeout_millis
            ));
        }
        if self.retry_after_seconds > 600 {
            return Err(format!(
                "retryAfterSeconds: at most 600, got {}",
                self.retry_after_seconds
            ));
        }
        Ok(())
    }
}

/// How many requests the schedule looked at and how many of each fault it injected.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ChaosCounts {
    /// API requests that matched the schedule's filter.
    pub requests: u64,
    /// 500 answers.
    pub error: u64,
    /// 429 answers.
    pub throttle: u64,
    /// 504 answers after holding the request.
    pub timeout: u64,
    /// Of those, writes applied before the 504.
    pub timeout_committed: u64,
    /// 410 Expired on watch resumes.
    pub expire: u64,
    /// Watches planned to be cut.
    pub watch_cut: u64,
}

impl ChaosCounts {
    /// Every injected fault (planned cuts included).
    pub fn injected(&self) -> u64 {
        self.error + self.throttle + self.timeout + self.expire + self.watch_cut
    }
}

/// The active schedule with its generator and counters.
pub(crate) struct ChaosState {
    schedule: Chaos,
    rng: StdRng,
    counts: ChaosCounts,
}

/// What happens to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Served normally.
    Pass,
    /// 500.
    Error,
    /// 429 with `Retry-After` seconds.
    Throttle(u64),
    /// Held, then 504; `commit`: the write is applied first.
    Timeout { hold: Duration, commit: bool },
    /// 410 Expired as the watch's only event.
    Expire,
    /// Served, but the watch stream is aborted after this long.
    Cut(Duration),
}

impl Plan {
    /// True when the request is answered without being served.
    pub(crate) fn rejects(&self) -> bool {
        match self {
            Plan::Pass | Plan::Cut(_) => false,
            Plan::Timeout { commit, .. } => !commit,
            Plan::Error | Plan::Throttle(_) | Plan::Expire => true,
        }
    }
}

impl ChaosState {
    pub(crate) fn new(schedule: Chaos) -> Self {
        ChaosState {
            rng: StdRng::seed_from_u64(schedule.seed),
            schedule,
            counts: ChaosCounts::default(),
        }
    }

    pub(crate) fn schedule(&self) -> &Chaos {
        &self.schedule
    }

    pub(crate) fn counts(&self) -> &ChaosCounts {
        &self.counts
    }

    /// Draws the plan of one request (see the module documentation for the determinism contract).
    pub(crate) fn plan(&mut self, verb: &str, watch_resume: bool, user_agent: &str) -> Plan {
        let s = &self.schedule;
        if s.user_agent
            .as_deref()
            .is_some_and(|p| !user_agent.starts_with(p))
        {
            return Plan::Pass;
        }
        self.counts.requests += 1;
        let is_watch = verb == "watch";
        let is_write = is_write(verb);
        if self.rng.random::<f64>() < s.rate {
            let m = &s.mix;
            let expire = if is_watch && watch_resume {
                m.expire
            } else {
                0
            };
            let weights = [m.error, m.throttle, m.timeout, expire];
            let total: u32 = weights.iter().sum();
            if total > 0 {
                let mut pick = self.rng.random_range(0..total);
                let mut which = 0;
                for (i, w) in weights.iter().enumerate() {
                    if pick < *w {
                        which = i;
                        break;
                    }
                    pick -= w;
                }
                return match which {
                    0 => {
                        self.counts.error += 1;
                        Plan::Error
                    }
                    1 => {
                        self.counts.throttle += 1;
                        Plan::Throttle(s.retry_after_seconds)
                    }
                    2 => {
                        let commit = is_write && s.timeout_commits_writes;
                        self.counts.timeout += 1;
                        self.counts.timeout_committed += u64::from(commit);
                        Plan::Timeout {
                            hold: Duration::from_millis(s.timeout_millis),
                            commit,
                        }
                    }
                    _ => {
                        self.counts.expire += 1;
                        Plan::Expire
                    }
                };
            }
        }
        if is_watch && self.rng.random::<f64>() < s.watch_cut_rate {
            let after = self.rng.random_range(0..=s.watch_cut_max_millis.max(1));
            self.counts.watch_cut += 1;
            return Plan::Cut(Duration::from_millis(after));
        }
        Plan::Pass
    }
}

/// True for a verb that changes stored state (anything but `get`, `list` and `watch`).
pub(crate) fn is_write(verb: &str) -> bool {
    !matches!(verb, "get" | "list" | "watch")
}

/// True for a watch that resumes from a resourceVersion (not a fresh "" / "0" start).
pub(crate) fn is_watch_resume(verb: &str, rv: Option<&String>) -> bool {
    verb == "watch" && rv.is_some_and(|rv| !rv.is_empty() && rv != "0")
}

/// The User-Agent of a request ("" when absent).
pub(crate) fn user_agent(headers: &HeaderMap) -> &str {
    headers
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(seed: u64) -> Vec<Plan> {
        let mut s = Chaos::new(seed, 0.3);
        s.watch_cut_rate = 0.5;
        let mut st = ChaosState::new(s);
        let verbs = ["get", "list", "watch", "create", "patch", "watch"];
        (0..300)
            .map(|i| {
                let verb = verbs[i % verbs.len()];
                st.plan(verb, i % 12 == 5, "daemon/0.1")
            })
            .collect()
    }

    #[test]
    fn same_seed_same_faults_other_seed_other_faults() {
        let a = trace(7);
        assert_eq!(a, trace(7));
        assert_ne!(a, trace(8));
        for kind in [
            |p: &Plan| matches!(p, Plan::Error),
            |p: &Plan| matches!(p, Plan::Throttle(1)),
            |p: &Plan| matches!(p, Plan::Timeout { commit: false, .. }),
            |p: &Plan| matches!(p, Plan::Expire),
            |p: &Plan| matches!(p, Plan::Cut(_)),
        ] {
            assert!(a.iter().any(kind), "every kind occurs in 300 requests");
        }
    }

    #[test]
    fn expire_only_on_watch_resumes_and_counts_add_up() {
        let mut s = Chaos::new(1, 1.0);
        s.mix = Mix {
            error: 0,
            throttle: 0,
            timeout: 0,
            expire: 1,
        };
        let mut st = ChaosState::new(s);
        assert_eq!(st.plan("list", false, ""), Plan::Pass);
        assert_eq!(st.plan("watch", false, ""), Plan::Pass);
        assert_eq!(st.plan("watch", true, ""), Plan::Expire);
        assert_eq!(st.counts().requests, 3);
        assert_eq!(st.counts().expire, 1);
        assert_eq!(st.counts().injected(), 1);
    }

    #[test]
    fn user_agent_filter_leaves_other_clients_alone() {
        let mut s = Chaos::new(1, 1.0);
        s.user_agent = Some("backup-runner/".into());
        let mut st = ChaosState::new(s);
        assert_eq!(st.plan("get", false, "kubectl/v1.33"), Plan::Pass);
        assert_ne!(st.plan("get", false, "backup-runner/0.1.0"), Plan::Pass);
        assert_eq!(st.counts().requests, 1);
    }

    #[test]
    fn committed_timeouts_only_for_writes() {
        let mut s = Chaos::new(3, 1.0);
        s.mix = Mix {
            error: 0,
            throttle: 0,
            timeout: 1,
            expire: 0,
        };
        s.timeout_commits_writes = true;
        let mut st = ChaosState::new(s);
        assert!(st.plan("get", false, "").rejects());
        let write = st.plan("create", false, "");
        assert!(matches!(write, Plan::Timeout { commit: true, .. }) && !write.rejects());
        assert_eq!(st.counts().timeout_committed, 1);
    }

    #[test]
    fn validation_names_the_field() {
        let mut s = Chaos::new(1, 1.5);
        assert!(s.validate().unwrap_err().starts_with("rate:"));
        s.rate = 0.1;
        s.watch_cut_rate = -1.0;
        assert!(s.validate().unwrap_err().starts_with("watchCutRate:"));
        s.watch_cut_rate = 0.0;
        s.timeout_millis = 120_000;
        assert!(s.validate().unwrap_err().starts_with("timeoutMillis:"));
        s.timeout_millis = 10;
        s.mix = Mix {
            error: 0,
            throttle: 0,
            timeout: 0,
            expire: 0,
        };
        assert!(s.validate().unwrap_err().starts_with("mix:"));
    }
}
