//! The event loop: one task owns the definition set, the debounce and the retry timer, so there is
//! no shared state and no lock.
//!
//! ```text
//!  ApplicationDefinition watch ──► Definitions (name → spec) ──► Debouncer (trailing edge)
//!                                                                    │ settled
//!  Deployment watch (fieldSelector metadata.name) ──┐                ▼
//!  leadership (lease) ──────────────────────────────┴──► evaluate(): hash ─► GET Deployment ─► decide
//!                                                                    Skip │ Patch (merge, RV precondition)
//! ```
//!
//! Invariants: nothing is remembered as "handled": every evaluation compares the hash of the set
//! with the annotation read fresh from the cluster, so a restart, a lost patch or someone resetting
//! the annotation is repaired by the next evaluation; no hash is computed before the first full
//! list; only the leader writes; a definition change while an evaluation or a roll is in flight
//! restarts the debounce and is evaluated after it.

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::watcher;
use lease::{LeaderElector, Leadership};
use runtime::{ControllerMetrics, Shutdown};
use std::pin::pin;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::Config;
use crate::debounce::Debouncer;
use crate::decide::{Change, Decision, Definitions, annotation_patch, decide, template_annotation};
use crate::metrics as m;

/// Errors of one evaluation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A definition's spec cannot be put into canonical form.
    #[error("computing the config hash")]
    Hash(#[from] appdef::HashError),
    /// Someone else wrote the Deployment between our read and our patch.
    #[error("the Deployment changed between read and patch")]
    Conflict(#[source] kube::Error),
    /// Reading or patching the Deployment failed.
    #[error("Kubernetes API")]
    Api(#[source] kube::Error),
}

impl Error {
    /// Static metric label.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Hash(_) => "hash",
            Error::Conflict(_) => "conflict",
            Error::Api(_) => "api",
        }
    }
}

/// What one evaluation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// This replica does not lead; nothing was read or written.
    NotLeader,
    /// The Deployment does not exist yet.
    WaitingForDeployment,
    /// The annotation already holds the hash.
    Skipped,
    /// The annotation was written.
    Patched {
        /// The previous value.
        from: Option<String>,
    },
}

const RETRY_BASE: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

/// The restarter's state, owned by its single task.
pub struct Restarter {
    client: kube::Client,
    config: Config,
    defs: Definitions,
    debounce: Debouncer,
    /// The hash computed by the last evaluation; only used to ignore Deployment events that
    /// already carry it (a cache of a derived value, never a record of what was handled).
    desired: Option<String>,
    elector: LeaderElector,
    leadership: watch::Receiver<Leadership>,
    retry_at: Option<Instant>,
    retry_delay: Duration,
    reconcile: std::sync::Arc<ControllerMetrics>,
}

impl Restarter {
    /// A restarter that writes only while `elector` reports leadership.
    pub fn new(client: kube::Client, config: Config, elector: LeaderElector) -> Self {
        m::register();
        Self {
            client,
            debounce: Debouncer::new(config.debounce),
            config,
            defs: Definitions::default(),
            desired: None,
            leadership: elector.subscribe(),
            elector,
            retry_at: None,
            retry_delay: RETRY_BASE,
            reconcile: std::sync::Arc::new(ControllerMetrics::new(crate::COMPONENT, "config-hash")),
        }
    }

    /// Runs until `shutdown` fires or a watch stream ends.
    pub async fn run<D, P>(
        mut self,
        definitions: D,
        deployment: P,
        shutdown: Shutdown,
    ) -> anyhow::Result<()>
    where
        D: Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>,
        P: Stream<Item = Result<watcher::Event<Deployment>, watcher::Error>>,
    {
        let mut definitions = pin!(definitions);
        let mut deployment = pin!(deployment);
        let mut leadership_open = true;
        loop {
            let wake = match (self.debounce.deadline(), self.retry_at) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            tokio::select! {
                _ = shutdown.wait() => return Ok(()),
                event = definitions.next() => match event {
                    Some(Ok(event)) => self.on_definition(event),
                    Some(Err(err)) => tracing::warn!(error = %err, "ApplicationDefinition watch error; retrying"),
                    None => anyhow::bail!("the ApplicationDefinition watch ended"),
                },
                event = deployment.next() => match event {
                    Some(Ok(event)) => self.on_deployment(event).await,
                    Some(Err(err)) => tracing::warn!(error = %err, "Deployment watch error; retrying"),
                    None => anyhow::bail!("the Deployment watch ended"),
                },
                changed = self.leadership.changed(), if leadership_open => {
                    if changed.is_err() {
                        // The elector is gone; keep the last known leadership.
                        leadership_open = false;
                        continue;
                    }
                    let now_leading = self.leadership.borrow_and_update().is_leading();
                    tracing::info!(leading = now_leading, "leadership changed");
                    if now_leading && !self.debounce.is_pending() {
                        self.evaluate("acquired leadership").await;
                    }
                }
                _ = sleep_until(wake), if wake.is_some() => {
                    let now = Instant::now();
                    if self.debounce.fire_if_due(now) {
                        self.retry_at = None;
                        self.evaluate("definitions settled").await;
                    } else if self.retry_at.is_some_and(|r| now >= r) {
                        self.retry_at = None;
                        if !self.debounce.is_pending() {
                            self.evaluate("retry").await;
                        }
                    }
                }
            }
        }
    }

    fn on_definition(&mut self, event: watcher::Event<DynamicObject>) {
        if self.defs.apply(event) == Change::Changed {
            metrics::counter!(m::DEFINITION_EVENTS).increment(1);
            if self.debounce.event(Instant::now()) {
                metrics::counter!(m::COALESCED).increment(1);
            }
            tracing::debug!(
                definitions = self.defs.len(),
                "definitions changed; debouncing"
            );
        }
    }

    async fn on_deployment(&mut self, event: watcher::Event<Deployment>) {
        let deployment = match event {
            watcher::Event::Apply(d) | watcher::Event::InitApply(d) => d,
            watcher::Event::Delete(_) => {
                metrics::gauge!(m::DEPLOYMENT_MISSING).set(1.0);
                tracing::info!("the Deployment was deleted; waiting for it to reappear");
                return;
            }
            watcher::Event::Init | watcher::Event::InitDone => return,
        };
        // A pending debounce will evaluate anyway; before the first full list nothing can be.
        if !self.defs.is_synced() || self.debounce.is_pending() {
            return;
        }
        let observed = template_annotation(&deployment, &self.config.annotation);
        if observed.is_some() && observed == self.desired.as_deref() {
            return;
        }
        self.evaluate("Deployment appeared or its annotation differs")
            .await;
    }

    /// Evaluates now and records the outcome (metrics, log, retry timer).
    async fn evaluate(&mut self, reason: &'static str) {
        if !self.defs.is_synced() {
            return;
        }
        let reconcile = self.reconcile.clone();
        let timer = reconcile.start();
        match self.evaluate_once().await {
            Ok(outcome) => {
                timer.finish(None);
                self.retry_at = None;
                self.retry_delay = RETRY_BASE;
                let hash = self.desired.as_deref().unwrap_or_default();
                let target = format!("{}/{}", self.config.namespace, self.config.deployment);
                match &outcome {
                    Outcome::Patched { from } => tracing::info!(
                        reason, %target, old = from.as_deref().unwrap_or(""), new = hash,
                        definitions = self.defs.len(), "patched the config hash; the Deployment rolls"
                    ),
                    Outcome::Skipped => tracing::info!(
                        reason, %target, hash, definitions = self.defs.len(), "config hash unchanged; skipping"
                    ),
                    Outcome::WaitingForDeployment => tracing::info!(
                        reason, %target, hash, "the Deployment does not exist; waiting for it"
                    ),
                    Outcome::NotLeader => {
                        tracing::debug!(reason, hash, "not the leader; not writing")
                    }
                }
            }
            Err(err) => {
                timer.finish(Some(err.kind()));
                metrics::counter!(m::ERRORS, "kind" => err.kind()).increment(1);
                let delay = match err {
                    // A concurrent writer: re-read soon.
                    Error::Conflict(_) => RETRY_BASE,
                    _ => self.retry_delay,
                };
                self.retry_delay = (self.retry_delay * 2).min(RETRY_MAX);
                self.retry_at = Some(Instant::now() + delay);
                tracing::warn!(reason, error = %err, source = ?std::error::Error::source(&err).map(ToString::to_string), retry_in = ?delay, "evaluation failed");
            }
        }
    }

    async fn evaluate_once(&mut self) -> Result<Outcome, Error> {
        let hash = self.defs.hash()?;
        metrics::counter!(m::HASH_COMPUTATIONS).increment(1);
        self.set_desired(&hash);
        if !self.elector.current().is_leading() {
            return Ok(Outcome::NotLeader);
        }
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let current = api
            .get_opt(&self.config.deployment)
            .await
            .map_err(Error::Api)?;
        let missing = current.is_none();
        metrics::gauge!(m::DEPLOYMENT_MISSING).set(if missing { 1.0 } else { 0.0 });
        match decide(&hash, current.as_ref(), &self.config.annotation) {
            Decision::WaitForDeployment => Ok(Outcome::WaitingForDeployment),
            Decision::Skip => {
                metrics::counter!(m::SKIPS).increment(1);
                Ok(Outcome::Skipped)
            }
            Decision::Patch { from } => {
                // Leadership may have moved while we read.
                if !self.elector.current().is_leading() {
                    return Ok(Outcome::NotLeader);
                }
                let rv = current
                    .as_ref()
                    .and_then(|d| d.metadata.resource_version.as_deref());
                let patch = annotation_patch(&self.config.annotation, &hash, rv);
                match api
                    .patch(
                        &self.config.deployment,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                {
                    Ok(_) => {
                        metrics::counter!(m::PATCHES).increment(1);
                        Ok(Outcome::Patched { from })
                    }
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        Err(Error::Conflict(kube::Error::Api(s)))
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        metrics::gauge!(m::DEPLOYMENT_MISSING).set(1.0);
                        Ok(Outcome::WaitingForDeployment)
                    }
                    Err(err) => Err(Error::Api(err)),
                }
            }
        }
    }

    fn set_desired(&mut self, hash: &str) {
        if self.desired.as_deref() == Some(hash) {
            return;
        }
        if let Some(old) = self.desired.take() {
            metrics::gauge!(m::CONFIG_HASH_INFO, "hash" => old).set(0.0);
        }
        metrics::gauge!(m::CONFIG_HASH_INFO, "hash" => hash.to_owned()).set(1.0);
        self.desired = Some(hash.to_owned());
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
