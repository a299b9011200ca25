//! A trailing-edge debounce over plain instants (no clock inside, so it is tested as a value).
//!
//! Every event pushes the deadline to `event + window`; the debounce fires once the deadline
//! passes with no further event. A burst therefore fires exactly once, `window` after its last
//! event. Like upstream there is no maximum delay: events arriving more often than `window`
//! postpone the evaluation for as long as they keep coming.

use std::time::Duration;
use tokio::time::Instant;

/// The debounce state: idle, or pending with a deadline.
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

    /// Records an event at `now`. Returns true when it was coalesced into an already pending window.
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
}
