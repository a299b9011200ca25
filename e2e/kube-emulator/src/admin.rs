//! The emulator-only admin API under `/emulator/v1`: a JSONL request audit log, fault injection
//! (forced error codes on chosen verbs/resources at a rate, added latency, dropping every watch), the
//! `pods/log` text hook and snapshots.
//!
//! | method | path | body / effect |
//! |---|---|---|
//! | GET, DELETE | `/emulator/v1/audit` | JSONL of every API request / clear it |
//! | GET, POST, DELETE | `/emulator/v1/faults` | list / add `{"verb","resource","code","rate","count","after_commit"}` / clear |
//! | GET, PUT, DELETE | `/emulator/v1/chaos` | `{"schedule", "counts"}` / set a seeded fault schedule ([`crate::chaos::Chaos`]) / clear it (the counts stay) |
//! | PUT | `/emulator/v1/latency` | `{"millis": N}` added before every API request |
//! | GET, POST, DELETE | `/emulator/v1/holds` | `{"rules", "held"}` / add a one-shot `{"verb","group","resource","subresource","userAgent"}` rule / clear the rules and release every held answer |
//! | POST | `/emulator/v1/watches/drop` | ends every open watch stream |
//! | PUT | `/emulator/v1/namespaces/{ns}/pods/{name}/log?container=c&append=true` | text/plain log text |
//! | GET | `/emulator/v1/snapshot` | every stored object as JSON |
//! | GET | `/emulator/v1/tokens` | issued ServiceAccount tokens (metadata only, never the token) |
//! | POST | `/emulator/v1/clock` | `{"advanceSeconds": N}` moves the token-expiry clock forward |
//!
//! With authentication on, every admin endpoint requires the admin token.

use std::io::Write;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::error::ApiError;
use crate::kinds::Kind;

/// One fault-injection rule.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Fault {
    /// Verb to match (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, …); None = any.
    #[serde(default)]
    pub verb: Option<String>,
    /// Resource (plural) to match, with its subresources; `plural/subresource` (e.g. `pods/log`)
    /// matches that subresource only; None = any.
    #[serde(default)]
    pub resource: Option<String>,
    /// HTTP code to answer: 403, 409, 410, 429, 500, 503 or 504.
    pub code: u16,
    /// Probability in 0..=1 that a matching request fails.
    #[serde(default = "one")]
    pub rate: f64,
    /// Stop after this many injected failures; None = forever.
    #[serde(default)]
    pub count: Option<u64>,
    /// For a write: store it first, then answer `code` (a 500 or 504 after the change was made,
    /// as a real API server can); reads are failed as usual.
    #[serde(default)]
    pub after_commit: bool,
}

fn one() -> f64 {
    1.0
}

/// A one-shot rule that holds back the answer to the first matching write after it was applied:
/// the change is stored (and watchers see it) but the client gets no answer until the holds are
/// released. A test kills the client meanwhile to crash it exactly after a write committed.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// Verb to match (`create`, `update`, `patch`, `delete`); None = any write.
    #[serde(default)]
    pub verb: Option<String>,
    /// API group to match ("" = core); None = any.
    #[serde(default)]
    pub group: Option<String>,
    /// Resource (plural) to match; None = any.
    #[serde(default)]
    pub resource: Option<String>,
    /// Subresource to match ("" = the main resource); None = any.
    #[serde(default)]
    pub subresource: Option<String>,
    /// Prefix of the client's User-Agent; None = any client.
    #[serde(default)]
    pub user_agent: Option<String>,
}

impl Hold {
    fn matches(&self, w: &WriteRequest<'_>) -> bool {
        let eq = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|x| x == have);
        eq(&self.verb, w.verb)
            && eq(&self.group, w.group)
            && eq(&self.resource, w.resource)
            && eq(&self.subresource, w.subresource)
            && self
                .user_agent
                .as_deref()
                .is_none_or(|p| w.user_agent.starts_with(p))
    }
}

/// What a [`Hold`] is matched against.
pub(crate) struct WriteRequest<'a> {
    pub(crate) verb: &'a str,
    pub(crate) group: &'a str,
    pub(crate) resource: &'a str,
    pub(crate) subresource: &'a str,
    pub(crate) user_agent: &'a str,
}

/// Audit log, fault rules and latency.
#[derive(Default)]
pub(crate) struct Admin {
    audit: Vec<Value>,
    audit_file: Option<std::fs::File>,
    faults: Vec<Fault>,
    holds: Vec<Hold>,
    /// Answers held back so far (they stay held until the holds are cleared).
    pub(crate) held: u64,
    /// Added before each API request.
    pub(crate) latency: Duration,
    /// The seeded fault schedule, if one is set.
    pub(crate) chaos: Option<crate::chaos::ChaosState>,
    /// Counters of the last schedule, kept after it is cleared.
    pub(crate) chaos_counts: crate::chaos::ChaosCounts,
}

impl Admin {
    /// With an optional JSONL file that mirrors the in-memory audit log.
    pub(crate) fn new(audit_file: Option<std::fs::File>) -> Self {
        Admin {
            audit_file,
            ..Default::default()
        }
    }

    /// Appends one audit entry.
    pub(crate) fn record(&mut self, entry: Value) {
        if let Some(f) = &mut self.audit_file {
            let _ = writeln!(f, "{entry}");
        }
        self.audit.push(entry);
        if self.audit.len() > 100_000 {
            self.audit.drain(..50_000);
        }
    }

    /// The audit log as JSONL.
    pub(crate) fn audit_jsonl(&self) -> String {
        self.audit.iter().map(|e| format!("{e}\n")).collect()
    }

    /// Clears the audit log.
    pub(crate) fn clear_audit(&mut self) {
        self.audit.clear();
    }

    /// Adds a fault rule.
    pub(crate) fn add_fault(&mut self, f: Fault) {
        self.faults.push(f);
    }

    /// The current fault rules.
    pub(crate) fn faults(&self) -> &[Fault] {
        &self.faults
    }

    /// Removes every fault rule.
    pub(crate) fn clear_faults(&mut self) {
        self.faults.clear();
    }

    /// Adds a hold rule.
    pub(crate) fn add_hold(&mut self, h: Hold) {
        self.holds.push(h);
    }

    /// The hold rules not yet used.
    pub(crate) fn holds(&self) -> &[Hold] {
        &self.holds
    }

    /// Removes every hold rule (the caller releases the held answers).
    pub(crate) fn clear_holds(&mut self) {
        self.holds.clear();
    }

    /// True when an applied write is to be held; its rule is used up.
    pub(crate) fn pick_hold(&mut self, w: &WriteRequest<'_>) -> bool {
        match self.holds.iter().position(|h| h.matches(w)) {
            Some(i) => {
                self.holds.remove(i);
                self.held += 1;
                true
            }
            None => false,
        }
    }

    /// Sets (Some) or clears (None) the chaos schedule; a new schedule starts from its seed with zeroed
    /// counters.
    pub(crate) fn set_chaos(&mut self, schedule: Option<crate::chaos::Chaos>) {
        if let Some(old) = self.chaos.take() {
            self.chaos_counts = old.counts().clone();
        }
        if let Some(s) = schedule {
            self.chaos_counts = crate::chaos::ChaosCounts::default();
            self.chaos = Some(crate::chaos::ChaosState::new(s));
        }
    }

    /// The schedule (if any) and the counters of the current (or last) one.
    pub(crate) fn chaos_report(&self) -> Value {
        match &self.chaos {
            Some(c) => json!({"schedule": c.schedule(), "counts": c.counts()}),
            None => json!({"schedule": null, "counts": self.chaos_counts}),
        }
    }

    /// The chaos plan of one API request ([`crate::chaos::Plan::Pass`] without a schedule).
    pub(crate) fn chaos_plan(
        &mut self,
        verb: &str,
        watch_resume: bool,
        user_agent: &str,
    ) -> crate::chaos::Plan {
        match self.chaos.as_mut() {
            Some(c) => c.plan(verb, watch_resume, user_agent),
            None => crate::chaos::Plan::Pass,
        }
    }

    /// Decides whether this request fails: with which code, and whether a write is stored first.
    pub(crate) fn pick_fault(
        &mut self,
        verb: &str,
        resource: &str,
        subresource: Option<&str>,
    ) -> Option<(u16, bool)> {
        let matches_resource = |r: &str| match r.split_once('/') {
            Some((plural, sub)) => plural == resource && subresource == Some(sub),
            None => r == resource,
        };
        for f in self.faults.iter_mut() {
            if f.verb.as_deref().is_some_and(|v| v != verb)
                || f.resource.as_deref().is_some_and(|r| !matches_resource(r))
                || f.count == Some(0)
            {
                continue;
            }
            if rand::random::<f64>() < f.rate {
                if let Some(c) = f.count.as_mut() {
                    *c -= 1;
                }
                return Some((f.code, f.after_commit && crate::chaos::is_write(verb)));
            }
        }
        None
    }
}

/// The Status a forced fault answers with.
pub(crate) fn fault_error(code: u16, kind: &Kind, name: &str) -> ApiError {
    match code {
        403 => ApiError::new(
            403,
            "Forbidden",
            format!("{} {name:?} is forbidden: injected by the kube-emulator fault API", kind.plural),
        ),
        409 => ApiError::conflict(kind, name),
        410 => ApiError::new(410, "Expired", "too old resource version: forced by fault injection"),
        429 => ApiError::new(429, "TooManyRequests", "the server has received too many requests and has asked us to try again later (injected)")
            .with_details(json!({"retryAfterSeconds": 1})),
        503 => ApiError::new(503, "ServiceUnavailable", "the server is currently unable to handle the request (injected)"),
        504 => ApiError::new(504, "Timeout", "the server was unable to return a response in the time allotted (injected)"),
        _ => ApiError::new(code, "InternalError", "Internal error occurred: injected by the kube-emulator fault API"),
    }
}
