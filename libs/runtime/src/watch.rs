//! Watch helpers: readiness that follows a watcher's initial list.
//!
//! Why not `Store::wait_until_ready`: in kube-runtime 5 it awaits a `futures` oneshot receiver
//! shared by every waiter, and such a receiver keeps only the most recent waker. The `Controller`
//! itself waits on the same store, so a second waiter (a readiness task) may never be woken. Marking
//! readiness from the event stream (`InitDone`) has no such race; build controllers with
//! `Controller::for_stream(reflector(writer, mark_ready_on_init(watcher(..), handle)), reader)`.

use futures::{Stream, StreamExt};
use kube::runtime::watcher;

use crate::ReadyHandle;

/// Passes `events` through and marks `ready` the first time the watcher reports that its initial
/// list is complete (`InitDone`). Until then `/ready` reports the check as pending.
pub fn mark_ready_on_init<K, S>(
    events: S,
    ready: ReadyHandle,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    events.inspect(move |event| {
        if let Ok(watcher::Event::InitDone) = event {
            ready.set_ready();
        }
    })
}
