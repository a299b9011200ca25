//! The leader-gated singleton loop: one evaluation at a time of "make the cluster match what the
//! watches show", for work that exists once per component (the default objects, the config-hash
//! roll, the system projection, Plan scheduling, retention sweeps).
//!
//! ```text
//!  Trigger (coalescing) ──────────────► due = Changed ─┐
//!  Trigger + trailing debounce ──(settled)─► Settled ──┤
//!  safety tick ─────────────────────────► Tick ────────┼─► pass when: no debounce pending,
//!  leadership won ──────────────────────► Leadership ──┤   the gate holds (e.g. caches synced),
//!  a pass asked to be run again at T ───► Due ─────────┤   and this replica leads (or followers
//!  transient error ─(exponential backoff)► Retry ──────┘
//!                                                          evaluate too) ─► Evaluate::evaluate(pass)
//!  elector ended ─► Err(ElectorClosed): the daemon exits non-zero and is restarted
//! ```
//!
//! Invariants: passes never overlap; fires that arrive during a pass or a debounce are never lost
//! (they make one more pass); a pass that failed transiently is retried with an exponential
//! backoff that resets on success; every pass is counted in the reconcile metrics and logged once.

use std::future::Future;
use std::time::Duration;

use lease::{LeaderElector, Leadership};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::watch::{Trigger, TriggerReceiver};
use crate::{ControllerMetrics, ErrorClass, ReconcileError, Shutdown};

/// Why a pass runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A watched input changed.
    Changed,
    /// A debounced burst of changes settled.
    Settled,
    /// The safety tick.
    Tick,
    /// A retry after a transient failure.
    Retry,
    /// This replica became the leader (or started as one).
    Leadership,
    /// The time the previous pass asked for ([`Outcome::next_pass_in`]) came.
    Due,
}

impl Cause {
    /// A static label for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Changed => "changed",
            Cause::Settled => "settled",
            Cause::Tick => "tick",
            Cause::Retry => "retry",
            Cause::Leadership => "leadership",
            Cause::Due => "due",
        }
    }
}

/// One pass of the loop.
#[derive(Debug)]
pub struct Pass {
    /// Why it runs.
    pub cause: Cause,
    leadership: watch::Receiver<Leadership>,
}

impl Pass {
    /// Whether this replica leads right now (read live: check it again before each write).
    pub fn is_leading(&self) -> bool {
        self.leadership.borrow().is_leading()
    }

    /// The leader lease's fencing token while leading.
    pub fn token(&self) -> Option<u64> {
        self.leadership.borrow().token()
    }
}

/// What a pass reports; logged once per pass (info when noteworthy, else debug).
pub trait Outcome: std::fmt::Debug + Send {
    /// True when the pass did something worth an info line (a write, a state change).
    fn noteworthy(&self) -> bool {
        true
    }

    /// When the next pass is due even if nothing changes (work that becomes due with time, such
    /// as an expiry); `None` leaves it to changes and the tick.
    fn next_pass_in(&self) -> Option<std::time::Duration> {
        None
    }
}

impl Outcome for () {
    fn noteworthy(&self) -> bool {
        false
    }
}

/// The work of a singleton loop.
pub trait Evaluate: Send {
    /// What a pass reports.
    type Outcome: Outcome;
    /// What a pass can fail with; transient errors are retried with backoff.
    type Error: ReconcileError;
    /// One pass.
    fn evaluate(
        &mut self,
        pass: &Pass,
    ) -> impl Future<Output = Result<Self::Outcome, Self::Error>> + Send;
}

/// The loop ended because its leader elector did (the lease client's tasks are gone): the replica
/// can no longer know whether it leads, so the daemon must exit and be restarted.
#[derive(Debug, thiserror::Error)]
#[error("the leader elector of the {0} loop ended; exiting so that the replica restarts")]
pub struct ElectorClosed(&'static str);

/// A trailing-edge debounce over plain instants (no clock inside, so it is tested as a value).
///
/// Every event pushes the deadline to `event + window`; it fires once the deadline passes with no
/// further event, so a burst fires exactly once, `window` after its last event. There is no
/// maximum delay: events arriving more often than `window` postpone the pass while they last.
#[derive(Debug, Clone)]
pub struct Debouncer {
    window: Duration,
    deadline: Option<Instant>,
}

impl Debouncer {
    /// An idle debouncer with this quiet window.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            deadline: None,
        }
    }

    /// Records an event at `now`. Returns true when it was coalesced into a pending window.
    pub fn event(&mut self, now: Instant) -> bool {
        let coalesced = self.deadline.is_some();
        self.deadline = Some(now + self.window);
        coalesced
    }

    /// The instant the pending window settles, if one is pending.
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// True while events wait for the window to settle.
    pub fn is_pending(&self) -> bool {
        self.deadline.is_some()
    }

    /// Fires (and returns to idle) when the pending window has settled at `now`.
    pub fn fire_if_due(&mut self, now: Instant) -> bool {
        match self.deadline {
            Some(d) if now >= d => {
                self.deadline = None;
                true
            }
            _ => false,
        }
    }
}

/// An unkeyed exponential backoff: `base` doubling up to `max`, reset on success.
#[derive(Debug, Clone)]
pub struct ExponentialBackoff {
    base: Duration,
    max: Duration,
    next: Duration,
}

impl ExponentialBackoff {
    /// A backoff from `base` doubling to at most `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            base,
            max,
            next: base,
        }
    }

    /// The delay before the next attempt, counting this failure.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.max);
        delay
    }

    /// Forgets the failures.
    pub fn reset(&mut self) {
        self.next = self.base;
    }
}

type DebounceHook = Box<dyn FnMut(u64, u64) + Send>;
type Gate = Box<dyn Fn() -> bool + Send>;

/// A singleton loop to run; see the module documentation.
pub struct Singleton {
    name: &'static str,
    elector: LeaderElector,
    metrics: ControllerMetrics,
    changes: Vec<TriggerReceiver>,
    debounced: Option<(TriggerReceiver, Debouncer)>,
    tick: Option<Duration>,
    backoff: ExponentialBackoff,
    followers_evaluate: bool,
    gate: Option<Gate>,
    on_debounced: Option<DebounceHook>,
}

impl Singleton {
    /// The loop `name` (metrics label `controller`, log field `loop`) of daemon `component`,
    /// gated on `elector`. Backoff defaults to 1 s doubling to 60 s.
    pub fn new(component: &'static str, name: &'static str, elector: LeaderElector) -> Self {
        Self {
            name,
            elector,
            metrics: ControllerMetrics::new(component, name),
            changes: Vec::new(),
            debounced: None,
            tick: None,
            backoff: ExponentialBackoff::new(Duration::from_secs(1), Duration::from_secs(60)),
            followers_evaluate: false,
            gate: None,
            on_debounced: None,
        }
    }

    /// A pass runs as soon as possible after `trigger` fires (fires coalesce).
    pub fn on_change(mut self, trigger: &Trigger) -> Self {
        self.changes.push(trigger.subscribe());
        self
    }

    /// A pass runs `window` after the last of a burst of fires of `trigger` (trailing edge).
    pub fn on_change_debounced(mut self, trigger: &Trigger, window: Duration) -> Self {
        self.debounced = Some((trigger.subscribe(), Debouncer::new(window)));
        self
    }

    /// Called for every debounced wake-up with `(fires, fires that joined a pending window)`.
    pub fn on_debounced_fires(mut self, hook: impl FnMut(u64, u64) + Send + 'static) -> Self {
        self.on_debounced = Some(Box::new(hook));
        self
    }

    /// A safety pass every `every`, whatever the triggers say.
    pub fn tick(mut self, every: Duration) -> Self {
        self.tick = Some(every);
        self
    }

    /// The retry backoff of transient failures.
    pub fn backoff(mut self, base: Duration, max: Duration) -> Self {
        self.backoff = ExponentialBackoff::new(base, max);
        self
    }

    /// Followers evaluate too (to keep derived state such as readiness current); the evaluation
    /// checks [`Pass::is_leading`] before writing.
    pub fn followers_evaluate(mut self) -> Self {
        self.followers_evaluate = true;
        self
    }

    /// Passes wait until `gate` holds (e.g. every cache synced); a trigger re-checks it.
    pub fn when(mut self, gate: impl Fn() -> bool + Send + 'static) -> Self {
        self.gate = Some(Box::new(gate));
        self
    }

    /// Runs until `shutdown` fires (`Ok`) or the elector ends (`Err`).
    pub async fn run<E: Evaluate>(
        mut self,
        mut work: E,
        shutdown: Shutdown,
    ) -> Result<(), ElectorClosed> {
        let mut leadership = self.elector.subscribe();
        let mut leading = leadership.borrow_and_update().is_leading();
        let mut due = leading.then_some(Cause::Leadership);
        let mut retry_at: Option<Instant> = None;
        let mut due_at: Option<Instant> = None;
        let mut tick = self.tick.map(|every| {
            let mut t = tokio::time::interval_at(Instant::now() + every, every);
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        loop {
            let debouncing = self.debounced.as_ref().is_some_and(|(_, d)| d.is_pending());
            if let Some(cause) = due
                && !debouncing
                && (leading || self.followers_evaluate)
                && self.gate.as_ref().is_none_or(|g| g())
            {
                due = None;
                // The pass looks at the current state, which includes every change fired so far.
                for rx in &mut self.changes {
                    rx.mark_seen();
                }
                let pass = Pass {
                    cause,
                    leadership: leadership.clone(),
                };
                (retry_at, due_at) = self.pass(&mut work, &pass).await;
                continue;
            }
            if !(leading || self.followers_evaluate) {
                // A follower forgets what was due: winning leadership makes a pass anyway.
                due = None;
            }
            let debounce_at = self.debounced.as_ref().and_then(|(_, d)| d.deadline());
            tokio::select! {
                _ = shutdown.wait() => return Ok(()),
                changed = leadership.changed() => {
                    if changed.is_err() {
                        tracing::error!(r#loop = self.name, "leader elector ended");
                        return Err(ElectorClosed(self.name));
                    }
                    let now = leadership.borrow_and_update().is_leading();
                    if now != leading {
                        tracing::info!(r#loop = self.name, leading = now, "leadership changed");
                    }
                    if now && !leading {
                        due = Some(Cause::Leadership);
                    }
                    leading = now;
                }
                _ = fired_any(&mut self.changes) => {
                    due.get_or_insert(Cause::Changed);
                }
                fires = fired_debounced(&mut self.debounced) => {
                    if let Some((_, debouncer)) = self.debounced.as_mut() {
                        let pending = debouncer.is_pending();
                        debouncer.event(Instant::now());
                        let coalesced = if pending { fires } else { fires.saturating_sub(1) };
                        if let Some(hook) = self.on_debounced.as_mut() {
                            hook(fires, coalesced);
                        }
                    }
                }
                _ = sleep_until(debounce_at) => {
                    if let Some((_, debouncer)) = self.debounced.as_mut()
                        && debouncer.fire_if_due(Instant::now())
                    {
                        due = Some(Cause::Settled);
                    }
                }
                _ = sleep_until(retry_at) => {
                    retry_at = None;
                    due.get_or_insert(Cause::Retry);
                }
                _ = sleep_until(due_at) => {
                    due_at = None;
                    due.get_or_insert(Cause::Due);
                }
                _ = async { match tick.as_mut() { Some(t) => { t.tick().await; } None => std::future::pending().await } } => {
                    due.get_or_insert(Cause::Tick);
                }
            }
        }
    }

    /// Runs one pass; returns when to retry, if it failed transiently, and when the pass asked to
    /// run again, if it succeeded and asked.
    async fn pass<E: Evaluate>(
        &mut self,
        work: &mut E,
        pass: &Pass,
    ) -> (Option<Instant>, Option<Instant>) {
        let timer = self.metrics.start();
        match work.evaluate(pass).await {
            Ok(outcome) => {
                timer.finish(None);
                self.backoff.reset();
                if outcome.noteworthy() {
                    tracing::info!(
                        r#loop = self.name,
                        cause = pass.cause.as_str(),
                        ?outcome,
                        "pass done"
                    );
                } else {
                    tracing::debug!(
                        r#loop = self.name,
                        cause = pass.cause.as_str(),
                        ?outcome,
                        "pass done"
                    );
                }
                (None, outcome.next_pass_in().map(|d| Instant::now() + d))
            }
            Err(err) => {
                timer.finish(Some(err.kind()));
                let source = std::error::Error::source(&err).map(ToString::to_string);
                match err.class() {
                    ErrorClass::Transient => {
                        let delay = err
                            .retry_delay()
                            .unwrap_or_else(|| self.backoff.next_delay());
                        tracing::warn!(r#loop = self.name, cause = pass.cause.as_str(), error = %err, ?source, retry_in = ?delay, "pass failed");
                        (Some(Instant::now() + delay), None)
                    }
                    ErrorClass::Permanent => {
                        tracing::warn!(r#loop = self.name, cause = pass.cause.as_str(), error = %err, ?source, "pass failed; waiting for a change");
                        (None, None)
                    }
                }
            }
        }
    }
}

async fn fired_any(receivers: &mut [TriggerReceiver]) -> u64 {
    if receivers.is_empty() {
        return std::future::pending().await;
    }
    let fires = receivers.iter_mut().map(|r| Box::pin(r.fired()));
    futures::future::select_all(fires).await.0
}

async fn fired_debounced(debounced: &mut Option<(TriggerReceiver, Debouncer)>) -> u64 {
    match debounced {
        Some((rx, _)) => rx.fired().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_fires_once_after_its_last_event() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut d = Debouncer::new(5 * s);
        assert!(!d.is_pending());
        assert!(!d.event(t0), "the first event opens the window");
        let coalesced = (1..100).filter(|i| d.event(t0 + s * *i / 50)).count();
        assert_eq!(coalesced, 99);
        let last = t0 + s * 99 / 50;
        assert_eq!(d.deadline(), Some(last + 5 * s));
        assert!(!d.fire_if_due(last + 4 * s), "not before the quiet window");
        assert!(d.fire_if_due(last + 5 * s));
        assert!(!d.is_pending());
        assert!(!d.fire_if_due(last + 6 * s), "fires once");
        assert!(!d.event(last + 7 * s), "a later event opens a new window");
    }

    #[test]
    fn backoff_doubles_caps_and_resets() {
        let mut b = ExponentialBackoff::new(Duration::from_millis(250), Duration::from_secs(1));
        let delays: Vec<u128> = (0..4).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(delays, [250, 500, 1000, 1000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(250));
    }
}
