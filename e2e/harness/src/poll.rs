//! Polling with a deadline: the one way tests wait for an observable condition (never a bare sleep).

use std::future::Future;
use std::time::Duration;

/// How long [`eventually`] waits by default.
pub const DEADLINE: Duration = Duration::from_secs(30);
/// How often it polls.
const INTERVAL: Duration = Duration::from_millis(25);

/// Polls `check` until it returns `Some`, panicking with `what` after [`DEADLINE`].
pub async fn eventually<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    eventually_within(what, DEADLINE, check).await
}

/// Polls `check` until it returns `Some`, panicking with `what` after `deadline`.
pub async fn eventually_within<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let until = tokio::time::Instant::now() + deadline;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "timed out after {deadline:?} waiting for {what}"
        );
        tokio::time::sleep(INTERVAL).await;
    }
}

/// Polls a boolean `check` until it holds, panicking with `what` after [`DEADLINE`].
pub async fn until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    eventually(what, || {
        let fut = check();
        async move { fut.await.then_some(()) }
    })
    .await
}
