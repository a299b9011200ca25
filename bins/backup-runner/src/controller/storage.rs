//! The storage breaker's gate in front of a job's driver (the breaker's state is
//! `crate::breaker`): while the system bucket's endpoint is down, a job waits `StorageUnavailable`
//! instead of running its driver; the caller the breaker picks runs the probe; a resumed job whose
//! operator backup failed during the outage gets a new one.

use std::time::{Duration, Instant};

use crate::breaker::{Admission, STORAGE_UNAVAILABLE, job_key};

/// The endpoint the breaker guards for every job: the system bucket's (`host:port`), which the
/// platform's strategies write to; `None` while the bucket is not configured (catalog mirror off,
/// or its Secret missing): then no breaker applies.
pub(super) async fn system_endpoint(
    ctx: &crate::context::Context,
) -> Option<(String, backup_storage::s3::S3Client)> {
    let bucket = ctx.mirror.bucket().await.ok().flatten()?;
    let endpoint = drivers::storage_fault::normalize_endpoint(bucket.s3.endpoint())?;
    Some((endpoint, bucket.s3.clone()))
}

/// The gate in front of a job's driver: `None` to go on, or the action of a job that waits for its
/// object store (`Ready=False StorageUnavailable`, phase `Running`, `startedAt` stamped so its
/// deadline runs), or that failed because its deadline passed while storage was down. The caller
/// that the breaker picks runs the probe (in the background, bounded by the S3 client's timeouts).
pub(super) async fn gate(
    ctx: &crate::context::Context,
    job: &api::backups::BackupJob,
    status: &mut api::backups::BackupJobStatus,
    endpoint: &str,
    s3: &backup_storage::s3::S3Client,
    deadline: Duration,
) -> Result<Option<kube::runtime::controller::Action>, crate::context::Error> {
    use kube::runtime::controller::Action;
    let now = Instant::now();
    let wall =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let key = job_key(job);
    ctx.breakers.prune(|key| {
        let (ns, name) = key.split_once('/').unwrap_or(("", key));
        let found = ctx.jobs.get(
            &kube::runtime::reflector::ObjectRef::<api::backups::BackupJob>::new(name).within(ns),
        );
        found.is_some_and(|j| {
            !api::contract::phases::is_terminal(j.status.as_ref().and_then(|s| s.phase.as_deref()))
        })
    });
    let waiting = drivers::status::ready(&status.conditions)
        .filter(|c| c.reason == STORAGE_UNAVAILABLE)
        .map(|c| c.message.clone());
    if let Some(message) = &waiting {
        ctx.breakers.seed(endpoint, message, now);
    }
    let created = job
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    match ctx.breakers.admit(endpoint, &key, &created, now) {
        Admission::Go => {
            if waiting.is_none() {
                return Ok(None);
            }
            let retried = retry_storage_failures(ctx, job).await?;
            if drivers::status::end_wait(status, &[STORAGE_UNAVAILABLE]) {
                super::write(ctx, job, status.clone()).await?;
            }
            if retried {
                // The deleted object's watch event comes next; the driver then creates a new one.
                return Ok(Some(Action::requeue(Duration::from_secs(2))));
            }
            Ok(None)
        }
        Admission::Wait {
            probe,
            recheck,
            outage,
        } => {
            if probe {
                ctx.breakers.spawn_probe(endpoint, s3.clone());
            }
            let elapsed = storage_breaker::elapsed(
                status.started_at.as_ref(),
                job.metadata.creation_timestamp.as_ref(),
                &wall,
            );
            let last = outage
                .as_ref()
                .map(|o| o.last_error.clone())
                .or(waiting.clone())
                .unwrap_or_default();
            if elapsed > deadline {
                let message = format!(
                    "object storage at {endpoint} was unavailable, so the backup could not run within {} (last storage error: {last})",
                    drivers::status::go_duration(deadline)
                );
                drivers::status::fail(
                    status,
                    api::contract::reasons::BACKUP_FAILED,
                    &message,
                    &wall,
                );
                super::write(ctx, job, status.clone()).await?;
                crate::metrics::gate_failed(job);
                ctx.breakers.release(&key);
                ctx.leases.release(job);
                return Ok(Some(Action::await_change()));
            }
            let message = match &outage {
                Some(o) => format!(
                    "object storage at {endpoint} is unavailable ({}); the backup waits and resumes once the bucket answers again (the runner probes it with backoff)",
                    o.last_error
                ),
                None => format!(
                    "object storage at {endpoint} answers again; the backup waits for a resume slot (oldest first, {} at once)",
                    ctx.args.breaker.storage_recovery_concurrency
                ),
            };
            if status.started_at.is_none() {
                drivers::status::start(status, true, &wall);
            }
            drivers::status::wait(status, STORAGE_UNAVAILABLE, &message, true, &wall);
            super::write(ctx, job, status.clone()).await?;
            let left = deadline.saturating_sub(elapsed) + Duration::from_secs(1);
            Ok(Some(Action::requeue(recheck.min(left))))
        }
    }
}

/// A resumed job whose driver object failed for storage reasons while the store was down is
/// retried: the failed object is deleted (the driver creates a new one). Only the CNPG driver's
/// cnpg Backups: the runner may delete those (the catalog finalizer does); the other operators'
/// objects it may only create, and their drivers keep their own rules. True when one was deleted.
async fn retry_storage_failures(
    ctx: &crate::context::Context,
    job: &api::backups::BackupJob,
) -> Result<bool, crate::context::Error> {
    use kube::ResourceExt;
    let label = crate::drivers::cnpg::BACKUPS;
    let ns = job.namespace().unwrap_or_default();
    let mut deleted = false;
    for backup in ctx.caches.owned_by_job(label, &ns, job) {
        let error = backup["status"]["error"].as_str().unwrap_or_default();
        if backup["status"]["phase"] != drivers::cnpg::PHASE_FAILED
            || drivers::storage_fault::classify(error).is_none()
        {
            continue;
        }
        let name = backup["metadata"]["name"].as_str().unwrap_or_default();
        let resource = ctx.caches.resource(label);
        match ctx
            .api(&resource, Some(&ns))
            .delete(name, &kube::api::DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(crate::context::api_err(
                    "delete",
                    format!("cnpg.io Backup {ns}/{name}"),
                )(e));
            }
        }
        tracing::info!(
            job = %job_key(job),
            backup = name,
            "storage recovered: the cnpg Backup that failed while storage was down is deleted; the job takes a new one"
        );
        deleted = true;
    }
    Ok(deleted)
}
