//! What the bad-input tests share: waiting for each row of a table of malformed objects to reach
//! its named end (a panic names the row, what was expected and what is there instead). The
//! closing check that the daemon survived all of it is `Daemon::assert_unharmed`.

use std::fmt::Display;
use std::time::Duration;

/// How often a row is checked again.
const INTERVAL: Duration = Duration::from_millis(100);

/// Polls `check` until it answers `Ok`, or panics after `deadline` with the row's description
/// `what`, the expectation `expected` and the last answer (`Err` says what is there instead).
pub async fn settle<F, Fut>(what: &str, expected: &dyn Display, deadline: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        match check().await {
            Ok(()) => return,
            Err(found) if tokio::time::Instant::now() > until => {
                panic!("case {what:?}: expected {expected}; found {found}")
            }
            Err(_) => tokio::time::sleep(INTERVAL).await,
        }
    }
}
