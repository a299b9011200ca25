//! A driver's step seen by the storage breaker (the breaker's state is `crate::breaker`): a
//! storage failure is counted for the endpoint, and once the breaker is open the step becomes the
//! `StorageUnavailable` wait instead of the driver's failure or retry.

use std::time::{Duration, Instant};

use crate::breaker::{STORAGE_UNAVAILABLE, job_key, redact};

/// Looks at a driver's step: a status whose `Ready=False` message is a storage outage counts as a
/// failure of `endpoint`, the system bucket's, whatever address the text names (a strategy may
/// reach the same store through its in-cluster address while the runner uses the bucket Secret's;
/// the text, with its address, is kept as the last error), and once the breaker is open
/// the step becomes the `StorageUnavailable` wait instead of the driver's failure or retry (a job
/// past its deadline keeps the driver's failure).
pub(super) fn intercept(
    ctx: &crate::context::Context,
    run: &crate::drivers::Run<'_>,
    step: crate::drivers::Step,
    endpoint: &str,
) -> crate::drivers::Step {
    use crate::drivers::Step;
    let status = match &step {
        Step::Complete { .. } => {
            ctx.breakers.succeeded(endpoint);
            return step;
        }
        Step::Status { status, .. } => status,
        _ => return step,
    };
    let Some(ready) = drivers::status::ready(&status.conditions)
        .filter(|c| c.status == api::ConditionStatus::False && c.reason != STORAGE_UNAVAILABLE)
    else {
        return step;
    };
    let Some(fault) = drivers::storage_fault::classify(&ready.message) else {
        return step;
    };
    let error = redact(&ready.message);
    let open = ctx.breakers.record_failure(
        endpoint,
        &job_key(run.job),
        fault.kind,
        &error,
        Instant::now(),
    );
    if !open || run.elapsed() > run.deadline {
        return step;
    }
    let mut status = run.status.clone();
    let message = format!(
        "object storage at {endpoint} is unavailable ({}: {error}); the backup waits and resumes once the bucket answers again (the runner probes it with backoff)",
        fault.kind.as_str()
    );
    drivers::status::wait(&mut status, STORAGE_UNAVAILABLE, &message, true, &run.now);
    Step::Status {
        status,
        recheck: Some(Duration::from_secs(1)),
    }
}
