//! The system and rotation paths, gated on leadership (the runtime's singleton loop).
//!
//! ```text
//!  cache of the source Secret (fieldSelector metadata.name=<source>, values stripped) ──► Trigger ──┬─► tenant controllers
//!                                                                                                 │   (re-evaluate jobs)
//!  Singleton "system": leadership won │ source changed │ safety tick (--system-tick, 60 s) ─► round
//!  round: read source once ─► every system namespace (Get target, write on change)
//!                          └► list copies by the ownership label ─► re-project each (write on change)
//! ```
//!
//! Invariants: only the leader writes here; a round does one source read, one list and writes only
//! copies whose content differs; errors in one namespace never stop the round (logged at info, as
//! upstream, and counted); the source cache keeps no credential value (its data is stripped: a
//! round reads the source fresh).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client, ResourceExt};
use runtime::{Cache, Pass, ReadyHandle, Trigger, Watch, WatchContext};

use crate::config::Config;
use crate::metrics::{self as m, Path};
use crate::project::{self, Outcome};

/// Watches the source Secret (metadata only: its values are stripped on arrival); every change,
/// and every completed re-list (which may hide changes), fires `changed`.
pub fn watch_source(
    client: Client,
    config: &Config,
    changed: &Trigger,
    ctx: &WatchContext,
) -> Cache<Secret> {
    let p = &config.projection;
    Watch::<Secret>::new(client)
        .in_namespace(&p.source_namespace)
        .named(&p.source_name)
        .describe("source Secret")
        .strip(|secret| {
            secret.data = None;
            secret.string_data = None;
            secret.metadata.annotations = None;
            secret.metadata.managed_fields = None;
        })
        .cache(ctx, changed)
}

/// The system/rotation work of one pass: a round while leading; a follower only reports.
pub struct SystemRounds {
    /// API client.
    pub client: Client,
    /// What to project.
    pub config: Arc<Config>,
    /// The `system projection` readiness check: ready after the first round (or while following).
    pub ready: ReadyHandle,
}

/// What a pass did.
#[derive(Debug)]
pub enum RoundOutcome {
    /// Another replica leads.
    Following,
    /// A round ran.
    Round,
}

impl runtime::Outcome for RoundOutcome {
    fn noteworthy(&self) -> bool {
        // The round logs its own summary line.
        false
    }
}

/// A round in which API calls failed. Per-namespace errors never stop a round (each is logged and
/// counted inside); the pass then fails as a whole so that the loop runs another round after its
/// backoff instead of waiting for the next source change or the safety tick. Terminal reasons (a
/// malformed source, a target we do not own) and a missing source (its watch fires when it
/// appears) are not retried.
#[derive(Debug, thiserror::Error)]
#[error("{0} API call(s) of the projection round failed; retrying with backoff")]
pub struct RoundFailed(usize);

impl runtime::ReconcileError for RoundFailed {
    fn kind(&self) -> &'static str {
        "api"
    }
    fn class(&self) -> runtime::ErrorClass {
        runtime::ErrorClass::Transient
    }
}

impl runtime::Evaluate for SystemRounds {
    type Outcome = RoundOutcome;
    type Error = RoundFailed;

    async fn evaluate(&mut self, pass: &Pass) -> Result<RoundOutcome, RoundFailed> {
        if !pass.is_leading() {
            self.ready
                .set_ready_with("following: another replica runs the system projection");
            return Ok(RoundOutcome::Following);
        }
        let api_failures = round(&self.client, &self.config, pass.cause.as_str()).await;
        self.ready.set_ready();
        match api_failures {
            0 => Ok(RoundOutcome::Round),
            n => Err(RoundFailed(n)),
        }
    }
}

/// How many copies a round refreshes concurrently.
const ROTATION_CONCURRENCY: usize = 32;

/// One round: every system namespace, then every projected copy elsewhere. Returns how many of its
/// failures were API errors (worth another round soon).
pub async fn round(client: &Client, config: &Config, trigger: &'static str) -> usize {
    let started = Instant::now();
    let p = &config.projection;
    let source_started = Instant::now();
    let source = project::read_source(client, p).await;
    let source_elapsed = source_started.elapsed();
    let (mut written, mut failed, mut api_failures) = (0usize, 0usize, 0usize);
    let mut count = |e: &backup_storage::credentials::ProjectionError| {
        if e.reason == backup_storage::credentials::Reason::ApiError {
            api_failures += 1;
        }
    };
    for ns in &config.system_namespaces {
        let t = Instant::now();
        let result = match &source {
            Ok(desired) => project::write_target(client, p, ns, desired).await,
            Err(e) => Err(e.clone()),
        };
        m::record(ns, Path::System, source_elapsed + t.elapsed(), &result);
        match &result {
            Ok(Outcome::Unchanged) => {}
            Ok(outcome) => {
                written += 1;
                tracing::info!(namespace = %ns, ?outcome, "system credentials projected");
            }
            Err(e) => {
                failed += 1;
                count(e);
                tracing::info!(namespace = %ns, reason = e.reason.as_str(), error = %e, "system credentials projection failed");
            }
        }
    }
    let mut copies_seen = 0usize;
    if let Ok(desired) = &source {
        match project::list_copies(client, p).await {
            Err(err) => {
                failed += 1;
                api_failures += 1;
                tracing::info!(error = %err, "listing projected copies failed; rotation skipped this round");
            }
            Ok(copies) => {
                let system: HashSet<&str> = config
                    .system_namespaces
                    .iter()
                    .map(String::as_str)
                    .collect();
                let copies: Vec<Secret> = copies
                    .into_iter()
                    .filter(|s| !system.contains(s.namespace().unwrap_or_default().as_str()))
                    .collect();
                copies_seen = copies.len();
                let results: Vec<_> = futures::stream::iter(copies)
                    .map(|copy| async move {
                        let t = Instant::now();
                        let ns = copy.namespace().unwrap_or_default();
                        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
                        let result =
                            project::apply_plan(&api, &ns, &p.target_name, Some(&copy), desired)
                                .await;
                        m::record(&ns, Path::Rotation, t.elapsed(), &result);
                        (ns, result)
                    })
                    .buffer_unordered(ROTATION_CONCURRENCY)
                    .collect()
                    .await;
                for (ns, result) in results {
                    match result {
                        Ok(Outcome::Unchanged) => {}
                        Ok(_) => written += 1,
                        Err(e) => {
                            failed += 1;
                            count(&e);
                            tracing::info!(namespace = %ns, reason = e.reason.as_str(), error = %e, "credentials rotation failed");
                        }
                    }
                }
            }
        }
    }
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if written > 0 || failed > 0 || trigger != runtime::Cause::Tick.as_str() {
        tracing::info!(
            trigger,
            system = config.system_namespaces.len(),
            copies = copies_seen,
            written,
            failed,
            elapsed_ms,
            "projection round done"
        );
    } else {
        tracing::debug!(
            trigger,
            copies = copies_seen,
            elapsed_ms,
            "projection round: nothing changed"
        );
    }
    api_failures
}

/// A stream that yields every `period` (the tenant controllers' safety re-evaluation).
pub fn ticks(period: Duration) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(period).await;
        Some(((), ()))
    })
}
