//! The storage breaker in the orchestrator (the state machine is the `storage-breaker` crate,
//! shared with the backup-runner; `docs/storage-breaker.md`): a restore step that needs the object
//! store waits `StorageUnavailable` while the store is down, instead of failing, or of purging a
//! target it could not then restore.
//!
//! ```text
//!  the driver's decision ─► Act that starts work on the store's behalf
//!                           (create, delete, merge-patch, suspend a HelmRelease)
//!                         ─► Status whose Ready=False message is a storage fault: counted; a
//!                            failure waited out where its operator object can be replaced
//!                            (not CNPG, not Etcd)
//!                         ─► anything, while the job carries Ready=False StorageUnavailable
//!     breaker Closed (or a resume slot free) ─► a waiting job: its operator objects that failed
//!                                               for storage are deleted (the driver creates them
//!                                               anew) and the wait ends; the others go on
//!     breaker Open (or no slot)  ─► phase Running, Ready=False StorageUnavailable naming the
//!                                   endpoint and the last error; the caller the breaker picks
//!                                   probes (HEAD of the system bucket)
//!     past restoreTimeoutSeconds ─► Failed: "object storage at … was unavailable, so the restore
//!                                   could not run within …" (a HelmRelease the step would resume
//!                                   on failure is resumed first)
//! ```
//!
//! Resuming a HelmRelease and reading logs are never held: they undo or observe, they do not use
//! the store. A job past its deadline whose step only observes goes on to its driver's own
//! deadline handling.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use api::backups::{RestoreJob, RestoreJobStatus};
use backup_storage::s3::S3Client;
use drivers::restore::{Action, Driver, OnError, Step, skeleton};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Client, ResourceExt};
use storage_breaker::{Admission, Breakers, Names, STORAGE_UNAVAILABLE};

use crate::args::OrchestratorArgs;

/// Gauge `{endpoint}`: 1 while the object store at the endpoint is considered available, 0 while
/// its breaker is open.
pub const AVAILABLE: &str = "cozy_backups_restore_orchestrator_storage_available";
/// Counter `{endpoint, result}`: storage probes (`ok`, `error`).
pub const PROBES: &str = "cozy_backups_restore_orchestrator_storage_probes_total";
/// Counter `{endpoint}`: times a breaker opened.
pub const OPENED: &str = "cozy_backups_restore_orchestrator_storage_breaker_opened_total";

/// The orchestrator's metric names.
pub const NAMES: Names = Names {
    available: AVAILABLE,
    probes: PROBES,
    opened: OPENED,
};

/// How long the system bucket's client (or the reason there is none) is reused.
const RESOLVE_TTL: Duration = Duration::from_secs(60);

/// The system bucket's endpoint (`host:port`) and client.
type System = (String, S3Client);

/// The system bucket and the breakers of the orchestrator.
pub struct Storage {
    /// Every endpoint's breaker.
    pub breakers: Arc<Breakers>,
    /// The bucket credentials Secret (`None`: no breaker).
    secret: Option<(String, String)>,
    endpoint: String,
    ca_file: Option<PathBuf>,
    /// Jobs resumed at once (for the waiting message).
    recovery_concurrency: u32,
    /// When the bucket was last resolved, and what was found.
    cached: tokio::sync::Mutex<Option<(Instant, Option<System>)>>,
}

impl Storage {
    /// The breakers configured by the flags; `wake` reconciles a job by key (`namespace/name`).
    pub fn new(args: &OrchestratorArgs, wake: tokio::sync::mpsc::UnboundedSender<String>) -> Self {
        let breakers = Breakers::new(args.breaker.settings(), NAMES).with_wake(wake);
        Storage {
            breakers: Arc::new(breakers),
            secret: args
                .storage_bucket_secret
                .split_once('/')
                .map(|(ns, name)| (ns.to_owned(), name.to_owned())),
            endpoint: args.storage_endpoint.clone(),
            ca_file: args.storage_ca_file.clone(),
            recovery_concurrency: args.breaker.storage_recovery_concurrency,
            cached: Default::default(),
        }
    }

    /// The system bucket's endpoint (`host:port`) and client; `None` without one (the Secret is
    /// missing or unusable, or the breaker is switched off): then no breaker applies.
    pub async fn system(&self, client: &Client) -> Option<System> {
        let (ns, name) = self.secret.as_ref()?;
        let mut cached = self.cached.lock().await;
        if let Some((at, found)) = cached.as_ref()
            && at.elapsed() < RESOLVE_TTL
        {
            return found.clone();
        }
        let bucket = storage_breaker::bucket::SystemBucket {
            namespace: ns,
            name,
            endpoint: &self.endpoint,
            endpoint_flag: "--storage-endpoint",
            ca_file: self.ca_file.as_deref(),
        };
        let found = match bucket.client(client).await {
            Ok(Some(s3)) => drivers::storage_fault::normalize_endpoint(s3.endpoint())
                .map(|endpoint| (endpoint, s3)),
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(error = %e, "no storage breaker: the system bucket's client could not be made");
                None
            }
        };
        *cached = Some((Instant::now(), found.clone()));
        found
    }
}

/// A RestoreJob's key in the breakers (`namespace/name`).
pub fn job_key(job: &RestoreJob) -> String {
    format!("{}/{}", job.namespace().unwrap_or_default(), job.name_any())
}

/// Whether performing `action` starts work that needs the object store (or destroys what only the
/// store could bring back). Resuming a HelmRelease and reading logs do not.
pub fn needs_store(action: &Action) -> bool {
    match action {
        Action::SetSuspend { suspend, .. } => *suspend,
        Action::ReadLogs { .. } => false,
        Action::MergePatch { .. }
        | Action::Delete(_)
        | Action::DeleteAll(_)
        | Action::Create(_) => true,
    }
}

/// Whether a restore of `driver` that failed for storage can be resumed by replacing its operator
/// object (one restore object, or Job, per job). A CNPG or Etcd recovery cannot: its failure
/// (a WAL switch that did not get through, a recovery that did not converge) stands, and its
/// deadline is its own; it still counts as evidence of the outage.
pub fn replaceable(driver: Driver) -> bool {
    !matches!(driver, Driver::Cnpg | Driver::Etcd)
}

/// The storage fault a decision reports: the `Ready=False` message of its status, when it
/// classifies as one.
fn fault(step: &Step) -> Option<(drivers::storage_fault::FaultKind, String)> {
    let Step::Status { status, .. } = step else {
        return None;
    };
    let ready = drivers::status::ready(&status.conditions)
        .filter(|c| c.status == api::ConditionStatus::False && c.reason != STORAGE_UNAVAILABLE)?;
    let fault = drivers::storage_fault::classify(&ready.message)?;
    Some((fault.kind, storage_breaker::redact(&ready.message)))
}

/// What the executor does with a decision.
#[derive(Debug)]
pub enum Verdict {
    /// Carry it out.
    Go(Step),
    /// The store answers again for a job that waited: delete its operator objects that failed
    /// for storage, end the wait, and decide again.
    Resume(RestoreJobStatus),
    /// Wait for the store: write this status and look again after the duration.
    Wait(RestoreJobStatus, Duration),
    /// The deadline passed while the store was down: resume the HelmRelease (when named) and fail
    /// with the message.
    Fail {
        /// The job fails with this message.
        message: String,
        /// A HelmRelease to resume first.
        on_error: Option<OnError>,
    },
}

/// Looks at `step`, the driver's decision for `job`, against the breaker of the system bucket's
/// endpoint (see the module doc).
pub async fn judge(
    storage: &Storage,
    client: &Client,
    job: &RestoreJob,
    driver: Driver,
    step: Step,
) -> Verdict {
    let status = skeleton::status_of(job);
    let waiting = drivers::status::ready(&status.conditions)
        .filter(|c| c.reason == STORAGE_UNAVAILABLE)
        .map(|c| c.message.clone());
    let fault = fault(&step);
    // A failure is waited out only where resuming can replace what failed.
    let replaceable = fault.is_some() && replaceable(driver);
    let acting = matches!(&step, Step::Act { action, .. } if needs_store(action));
    if waiting.is_none() && fault.is_none() && !acting {
        return Verdict::Go(step);
    }
    let Some((endpoint, s3)) = storage.system(client).await else {
        return match waiting {
            Some(_) => Verdict::Resume(status),
            None => Verdict::Go(step),
        };
    };
    let breakers = &storage.breakers;
    let key = job_key(job);
    let now = Instant::now();
    if let Some(message) = &waiting {
        breakers.seed(&endpoint, message, now);
    }
    if let Some((kind, error)) = &fault {
        breakers.record_failure(&endpoint, &key, *kind, error, now);
    }
    let created = job
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    let (probe, recheck, outage) = match breakers.admit(&endpoint, &key, &created, now) {
        Admission::Go if waiting.is_some() => return Verdict::Resume(status),
        Admission::Go => return Verdict::Go(step),
        Admission::Wait {
            probe,
            recheck,
            outage,
        } => (probe, recheck, outage),
    };
    if probe {
        breakers.spawn_probe(&endpoint, s3);
    }
    let wall = Time(k8s_openapi::jiff::Timestamp::now());
    let deadline = drivers::restore::options::restore_deadline(job.spec.options.as_ref());
    let elapsed = storage_breaker::elapsed(
        status.started_at.as_ref(),
        job.metadata.creation_timestamp.as_ref(),
        &wall,
    );
    let last = outage
        .as_ref()
        .map(|o| o.last_error.clone())
        .or_else(|| fault.as_ref().map(|(_, e)| e.clone()))
        .or(waiting.clone())
        .unwrap_or_default();
    if elapsed > deadline {
        let message = format!(
            "object storage at {endpoint} was unavailable, so the restore could not run within {} (last storage error: {last})",
            drivers::status::go_duration(deadline)
        );
        return match step {
            Step::Act { on_error, .. } if acting => Verdict::Fail {
                message,
                on_error: Some(on_error),
            },
            _ if replaceable => Verdict::Fail {
                message,
                on_error: None,
            },
            // Observing (a running operator, a HelmRelease to resume): the driver's own deadline.
            other => Verdict::Go(other),
        };
    }
    if !acting && !replaceable {
        // A job that waits but whose step only observes or undoes (a running operator, a
        // HelmRelease to resume, a status it reached): the step goes on; a later step that needs
        // the store waits again.
        return Verdict::Go(step);
    }
    let left = deadline.saturating_sub(elapsed) + Duration::from_secs(1);
    Verdict::Wait(
        waiting_status(
            &status,
            &endpoint,
            &outage,
            storage.recovery_concurrency,
            &wall,
        ),
        recheck.min(left),
    )
}

/// The job's status while it waits for its object store.
fn waiting_status(
    status: &RestoreJobStatus,
    endpoint: &str,
    outage: &Option<storage_breaker::Outage>,
    recovery_concurrency: u32,
    now: &Time,
) -> RestoreJobStatus {
    let message = match outage {
        Some(o) => format!(
            "object storage at {endpoint} is unavailable ({}); the restore waits and resumes once the bucket answers again (the orchestrator probes it with backoff)",
            o.last_error
        ),
        None => format!(
            "object storage at {endpoint} answers again; the restore waits for a resume slot (oldest first, {} at once)",
            recovery_concurrency
        ),
    };
    let mut next = status.clone();
    if next.started_at.is_none() {
        drivers::status::start(&mut next, true, now);
    }
    drivers::status::wait(&mut next, STORAGE_UNAVAILABLE, &message, true, now);
    next
}

#[cfg(test)]
mod tests {
    use super::*;
    use drivers::restore::{Event, ObjectRef};
    use serde_json::json;

    fn release() -> ObjectRef {
        ObjectRef {
            api_version: "helm.toolkit.fluxcd.io/v2",
            kind: "HelmRelease",
            namespace: "t".into(),
            name: "postgres-db".into(),
        }
    }

    #[test]
    fn steps_that_use_or_destroy_what_the_store_holds_are_held_the_others_not() {
        let held = [
            Action::SetSuspend {
                release: release(),
                suspend: true,
            },
            Action::Create(json!({"kind": "Restore"})),
            Action::Delete(release()),
            Action::MergePatch {
                target: release(),
                patch: json!({}),
                field_manager: "x",
            },
        ];
        assert!(held.iter().all(needs_store));
        let free = [
            Action::SetSuspend {
                release: release(),
                suspend: false,
            },
            Action::ReadLogs {
                namespace: "t".into(),
                pods: vec!["p".into()],
                container: "c",
                tail_lines: 10,
            },
        ];
        assert!(!free.iter().any(needs_store));
    }

    fn status_step(reason: &str, message: &str) -> Step {
        let mut status = RestoreJobStatus::default();
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        drivers::status::fail(&mut status, reason, message, &now);
        Step::Status {
            status,
            events: Vec::<Event>::new(),
            requeue: None,
        }
    }

    #[test]
    fn a_failure_that_reads_as_a_storage_fault_is_one_and_is_redacted() {
        let (kind, error) = fault(&status_step(
            "RestoreFailed",
            "S3 list tenant-acme/shop/: HTTP 503 ServiceUnavailable",
        ))
        .unwrap();
        assert_eq!(kind.as_str(), "server-error");
        assert_eq!(
            error,
            "S3 list tenant-acme/shop/: HTTP 503 ServiceUnavailable"
        );
        let (_, error) = fault(&status_step(
            "RestoreFailed",
            "Could not connect to the endpoint URL: \"https://s3.example.org/b/k?X-Amz-Signature=abc\"",
        ))
        .unwrap();
        assert!(!error.contains("Signature"), "{error}");
        // Not storage: the store answered, about the request.
        assert!(
            fault(&status_step(
                "RestoreFailed",
                "S3 get k: HTTP 403 AccessDenied"
            ))
            .is_none()
        );
        assert!(
            fault(&status_step(
                "RestoreFailed",
                "no valid backup files were found under \"t/\""
            ))
            .is_none()
        );
        // The wait itself is not counted again.
        assert!(fault(&status_step(STORAGE_UNAVAILABLE, "HTTP 503")).is_none());
        assert!(
            fault(&Step::Wait {
                events: Vec::new(),
                requeue: None
            })
            .is_none()
        );
    }
}
