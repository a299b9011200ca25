//! Controller plumbing shared by every reconciler: error classification, a per-object backoff
//! error policy, reconcile metrics with static labels, and logging of every controller stream item.

use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How an error should be handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorClass {
    /// Retry with backoff (API errors, conflicts, missing dependencies that will appear).
    Transient,
    /// Retrying cannot help until the object changes (invalid spec); wait for a change.
    Permanent,
}

/// Errors a reconciler returns.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// A static label for metrics and logs, e.g. `api` or `invalid_spec`.
    fn kind(&self) -> &'static str;
    /// How to handle the error.
    fn class(&self) -> ErrorClass;
    /// A fixed retry delay that overrides the backoff for this error (e.g. a write conflict:
    /// re-read soon). `None` (the default) uses the backoff.
    fn retry_delay(&self) -> Option<Duration> {
        None
    }
}

/// Reconcile metrics of one controller:
/// `cozy_backups_<component>_reconcile_runs_total{controller}`,
/// `…_reconcile_failures_total{controller,kind}` and `…_reconcile_duration_seconds{controller}`.
#[derive(Debug)]
pub struct ControllerMetrics {
    controller: &'static str,
    runs: String,
    failures: String,
    duration: String,
}

impl ControllerMetrics {
    /// Metrics for `controller` of daemon `component` (dashes become underscores).
    pub fn new(component: &str, controller: &'static str) -> Self {
        let prefix = format!("cozy_backups_{}_reconcile", component.replace('-', "_"));
        let this = Self {
            controller,
            runs: format!("{prefix}_runs_total"),
            failures: format!("{prefix}_failures_total"),
            duration: format!("{prefix}_duration_seconds"),
        };
        metrics::describe_counter!(this.runs.clone(), "Reconcile runs, by controller.");
        metrics::describe_counter!(
            this.failures.clone(),
            "Failed reconcile runs, by controller and error kind."
        );
        metrics::describe_histogram!(
            this.duration.clone(),
            metrics::Unit::Seconds,
            "Duration of reconcile runs, by controller."
        );
        // Register the counters at zero so dashboards see them before the first run.
        metrics::counter!(this.runs.clone(), "controller" => controller).absolute(0);
        this
    }

    /// Starts timing one run; call [`RunTimer::finish`] with the outcome.
    pub fn start(&self) -> RunTimer<'_> {
        RunTimer {
            metrics: self,
            started: Instant::now(),
        }
    }
}

/// Times one reconcile run.
#[derive(Debug)]
pub struct RunTimer<'a> {
    metrics: &'a ControllerMetrics,
    started: Instant,
}

impl RunTimer<'_> {
    /// Records the run; `error_kind` is the static kind of the error, if the run failed.
    pub fn finish(self, error_kind: Option<&'static str>) {
        let m = self.metrics;
        metrics::counter!(m.runs.clone(), "controller" => m.controller).increment(1);
        metrics::histogram!(m.duration.clone(), "controller" => m.controller)
            .record(self.started.elapsed().as_secs_f64());
        if let Some(kind) = error_kind {
            metrics::counter!(m.failures.clone(), "controller" => m.controller, "kind" => kind)
                .increment(1);
        }
    }
}

/// Exponential per-object backoff for transient errors: 1 s doubling to at most 5 minutes, reset
/// when the object reconciles successfully.
pub struct Backoff<K: kube::Resource> {
    attempts: Mutex<HashMap<ObjectRef<K>, u32>>,
    base: Duration,
    max: Duration,
}

impl<K: kube::Resource> std::fmt::Debug for Backoff<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backoff")
            .field("base", &self.base)
            .field("max", &self.max)
            .finish()
    }
}

impl<K> Default for Backoff<K>
where
    K: kube::Resource,
    K::DynamicType: Eq + Hash + Clone,
{
    fn default() -> Self {
        Self::new(Duration::from_secs(1), Duration::from_secs(300))
    }
}

impl<K> Backoff<K>
where
    K: kube::Resource,
    K::DynamicType: Eq + Hash + Clone,
{
    /// A backoff from `base` doubling up to `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            attempts: Mutex::new(HashMap::new()),
            base,
            max,
        }
    }

    /// The delay before the next attempt for `obj`, counting this failure.
    pub fn next_delay(&self, obj: ObjectRef<K>) -> Duration {
        let mut attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
        let n = attempts.entry(obj).or_insert(0);
        let delay = self
            .base
            .saturating_mul(2u32.saturating_pow(*n))
            .min(self.max);
        *n = n.saturating_add(1);
        delay
    }

    /// Forgets the failures of `obj` after a successful reconcile.
    pub fn reset(&self, obj: &ObjectRef<K>) {
        self.attempts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(obj);
    }

    /// The error-policy decision for `err` on `obj`: the error's own retry delay when it has one;
    /// else transient → requeue after the backoff, permanent → wait for the object to change.
    pub fn action_for<E: ReconcileError>(&self, obj: ObjectRef<K>, err: &E) -> Action {
        if let Some(delay) = err.retry_delay() {
            return Action::requeue(delay);
        }
        match err.class() {
            ErrorClass::Transient => Action::requeue(self.next_delay(obj)),
            ErrorClass::Permanent => Action::await_change(),
        }
    }
}

/// How soon an object is looked at again when the watches were still listing.
pub const CACHE_SYNC_RETRY: Duration = Duration::from_millis(500);

/// One reconcile of `obj` as the work-leased controllers run it: nothing is decided before every
/// watch of the daemon has listed once (right after a start the object's watch may deliver it
/// before the objects it depends on were listed, and a decision then would act on a half-filled
/// view), so the object is looked at again after [`CACHE_SYNC_RETRY`]; the run is timed into
/// `metrics`; a success resets the object's backoff.
pub async fn run_synced<K, E>(
    obj: &K,
    readiness: &crate::Readiness,
    metrics: &ControllerMetrics,
    backoff: &Backoff<K>,
    run: impl std::future::Future<Output = Result<Action, E>>,
) -> Result<Action, E>
where
    K: kube::Resource,
    K::DynamicType: Eq + Hash + Clone + Default,
    E: ReconcileError,
{
    if !readiness.watches_synced() {
        return Ok(Action::requeue(CACHE_SYNC_RETRY));
    }
    let timer = metrics.start();
    let result = run.await;
    timer.finish(result.as_ref().err().map(ReconcileError::kind));
    if result.is_ok() {
        backoff.reset(&ObjectRef::from_obj(obj));
    }
    result
}

/// Logs one item of `Controller::run`'s output stream.
pub fn log_item<K, E, Q>(
    controller: &str,
    item: &Result<(ObjectRef<K>, Action), kube::runtime::controller::Error<E, Q>>,
) where
    K: kube::Resource,
    K::DynamicType: std::fmt::Debug,
    E: std::error::Error + 'static,
    Q: std::error::Error + 'static,
{
    match item {
        Ok((obj, action)) => {
            tracing::debug!(controller, object = %obj, ?action, "reconciled");
        }
        Err(kube::runtime::controller::Error::ReconcilerFailed(err, obj)) => {
            tracing::warn!(controller, object = %obj, error = %err, "reconcile failed");
        }
        Err(kube::runtime::controller::Error::ObjectNotFound(obj)) => {
            tracing::debug!(controller, object = %obj, "object gone before reconcile");
        }
        Err(err) => {
            tracing::warn!(controller, error = %err, "controller stream error");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    #[derive(Debug, thiserror::Error)]
    #[error("boom")]
    struct Boom(ErrorClass);

    impl ReconcileError for Boom {
        fn kind(&self) -> &'static str {
            "boom"
        }
        fn class(&self) -> ErrorClass {
            self.0
        }
    }

    #[test]
    fn backoff_doubles_per_object_caps_and_resets() {
        let b: Backoff<ConfigMap> = Backoff::new(Duration::from_secs(1), Duration::from_secs(5));
        let a = ObjectRef::<ConfigMap>::new("a").within("ns");
        let other = ObjectRef::<ConfigMap>::new("b").within("ns");
        let delays: Vec<u64> = (0..5).map(|_| b.next_delay(a.clone()).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 5, 5]);
        assert_eq!(
            b.next_delay(other).as_secs(),
            1,
            "objects back off independently"
        );
        b.reset(&a);
        assert_eq!(b.next_delay(a.clone()).as_secs(), 1);
        assert_eq!(
            b.action_for(a.clone(), &Boom(ErrorClass::Permanent)),
            Action::await_change()
        );
        assert_eq!(
            b.action_for(a, &Boom(ErrorClass::Transient)),
            Action::requeue(Duration::from_secs(2))
        );
    }
}
