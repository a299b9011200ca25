//! Resource versions and the watch history: every persisted change takes the next value of the global
//! counter and is appended to a bounded history (for watches from a resourceVersion) and broadcast to
//! the open watch streams.

use std::sync::Arc;

use serde_json::Value;

use super::State;

/// One stored change, as kept in the watch history.
#[derive(Debug)]
pub(crate) struct Event {
    /// The resourceVersion of this change.
    pub(crate) rv: u64,
    /// Storage key of the resource.
    pub(crate) storage: String,
    /// ADDED, MODIFIED, DELETED, or GONE (the resource stopped being served).
    pub(crate) etype: &'static str,
    /// The object after the change (storage form).
    pub(crate) obj: Value,
    /// The object before the change.
    pub(crate) old: Option<Value>,
}

impl State {
    /// Records one persisted change (the counter is already bumped) and fans it out.
    pub(super) fn push_event(
        &mut self,
        etype: &'static str,
        storage: &str,
        obj: Value,
        old: Option<Value>,
    ) {
        let ev = Arc::new(Event {
            rv: self.rv,
            storage: storage.into(),
            etype,
            obj,
            old,
        });
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_size {
            if let Some(e) = self.history.pop_front() {
                self.compacted = e.rv;
            }
        }
        let _ = self.tx.send(ev);
    }
}
