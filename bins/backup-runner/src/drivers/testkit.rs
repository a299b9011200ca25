//! Fixtures for the drivers' table tests: a BackupJob at a chosen point of its life, and a [`Run`]
//! over it at a fixed clock.

use std::collections::BTreeMap;
use std::time::Duration;

use api::TypedLocalObjectReference;
use api::backups::{BackupJob, BackupJobStatus, ResolvedStrategy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{Run, Step};

/// The clock of every test: 2026-01-01T01:00:00Z.
pub(crate) fn now() -> Time {
    Time("2026-01-01T01:00:00Z".parse().unwrap())
}

/// Midnight before `now()`: where the tests that count minutes from the start start their job.
pub(crate) fn midnight() -> Time {
    Time("2026-01-01T00:00:00Z".parse().unwrap())
}

/// `now()` minus `ago`.
pub(crate) fn ago(ago: Duration) -> Time {
    Time(now().0 - k8s_openapi::jiff::SignedDuration::try_from(ago).unwrap())
}

/// A job `nightly` in `tenant-a` for `kind`/`app`, with its uid set.
pub(crate) fn job(kind: &str, app: &str) -> BackupJob {
    let mut job = BackupJob::test("nightly")
        .namespace("tenant-a")
        .for_app(kind, app)
        .build();
    job.metadata.uid = Some("uid-1".into());
    job
}

/// What a job carries into a [`Run`].
pub(crate) struct Fixture {
    /// The job.
    pub(crate) job: BackupJob,
    /// The resolved route.
    pub(crate) resolved: ResolvedStrategy,
    /// The normalised application reference.
    pub(crate) app: TypedLocalObjectReference,
}

impl Fixture {
    /// A job of `kind`/`app` routed to strategy `strategy_kind`/`default` with `parameters`.
    pub(crate) fn new(
        kind: &str,
        app: &str,
        strategy_kind: &str,
        parameters: &[(&str, &str)],
    ) -> Self {
        let job = job(kind, app);
        let app = job.spec.application_ref.normalized();
        Fixture {
            job,
            resolved: ResolvedStrategy {
                strategy_ref: TypedLocalObjectReference::new(
                    api::contract::groups::STRATEGY,
                    strategy_kind,
                    "default",
                ),
                parameters: parameters
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect::<BTreeMap<_, _>>(),
            },
            app,
        }
    }

    /// The job renamed `name` in `namespace`, its route naming strategy `strategy`.
    pub(crate) fn named(mut self, name: &str, namespace: &str, strategy: &str) -> Self {
        self.job.metadata.name = Some(name.into());
        self.job.metadata.namespace = Some(namespace.into());
        self.resolved.strategy_ref.name = strategy.into();
        self
    }

    /// With this status.
    pub(crate) fn status(mut self, status: BackupJobStatus) -> Self {
        self.job.status = Some(status);
        self
    }

    /// Started `ago` before now, in `phase`.
    pub(crate) fn started(self, ago_: Duration, phase: Option<&str>) -> Self {
        self.status(BackupJobStatus {
            started_at: Some(ago(ago_)),
            phase: phase.map(str::to_owned),
            ..Default::default()
        })
    }

    /// The run at `now()` with the default backup deadline (6 h) or the given one.
    pub(crate) fn run(&self, deadline: Option<Duration>) -> Run<'_> {
        Run {
            job: &self.job,
            status: self.job.status.clone().unwrap_or_default(),
            resolved: &self.resolved,
            app: &self.app,
            now: now(),
            deadline: deadline.unwrap_or(Duration::from_secs(6 * 3600)),
            fresh_app: None,
        }
    }

    /// The run `elapsed_min` minutes after a start at [`midnight`], in `phase`, with `deadline`.
    pub(crate) fn run_after(
        &self,
        phase: Option<&str>,
        elapsed_min: u64,
        deadline: Duration,
    ) -> Run<'_> {
        let elapsed = Duration::from_secs(elapsed_min * 60);
        Run {
            job: &self.job,
            status: BackupJobStatus {
                started_at: Some(midnight()),
                phase: phase.map(str::to_owned),
                ..Default::default()
            },
            resolved: &self.resolved,
            app: &self.app,
            now: Time(midnight().0 + k8s_openapi::jiff::SignedDuration::try_from(elapsed).unwrap()),
            deadline,
            fresh_app: None,
        }
    }
}

/// The status a step writes (panics on another step).
pub(crate) fn status_of(step: &Step) -> &BackupJobStatus {
    match step {
        Step::Status { status, .. }
        | Step::Complete { status, .. }
        | Step::Unseen { status, .. } => status,
        other => panic!("not a status step: {other:?}"),
    }
}

/// `(phase, Ready reason, Ready message)` of a status step.
pub(crate) type Summary = (Option<String>, String, String);

/// The [`Summary`] of a status step.
pub(crate) fn summary(step: &Step) -> Summary {
    let s = status_of(step);
    let ready = drivers::status::ready(&s.conditions);
    (
        s.phase.clone(),
        ready.map(|c| c.reason.clone()).unwrap_or_default(),
        ready.map(|c| c.message.clone()).unwrap_or_default(),
    )
}
