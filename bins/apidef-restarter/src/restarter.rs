//! One evaluation of the config hash, run by the runtime's singleton loop.
//!
//! ```text
//!  ApplicationDefinition cache ──(debounced)──┐
//!  Deployment cache (metadata.name) ──────────┤──► evaluate(): hash of the set ─► GET Deployment ─► decide
//!  leadership (lease) ────────────────────────┘                       Skip │ Patch (merge, RV precondition)
//! ```
//!
//! Invariants: nothing is remembered as "handled": every evaluation compares the hash of the set
//! with the annotation read fresh from the cluster, so a restart, a lost patch or someone resetting
//! the annotation is repaired by the next evaluation; no hash is computed before the first full
//! list; only the leader writes; a definition change while an evaluation or a roll is in flight
//! restarts the debounce and is evaluated after it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use runtime::{Cache, Cause, ErrorClass, Pass, ReconcileError};

use crate::Config;
use crate::decide::{
    Decision, annotation_patch, decide, hash_of, schema_problem, template_annotation,
};
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

impl ReconcileError for Error {
    fn kind(&self) -> &'static str {
        match self {
            Error::Hash(_) => "hash",
            Error::Conflict(_) => "conflict",
            Error::Api(_) => "api",
        }
    }

    fn class(&self) -> ErrorClass {
        ErrorClass::Transient
    }

    /// A concurrent writer: re-read soon rather than backing off.
    fn retry_delay(&self) -> Option<Duration> {
        matches!(self, Error::Conflict(_)).then_some(Duration::from_secs(1))
    }
}

/// What one evaluation did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The Deployment changed but already carries the current hash; nothing was read.
    Current,
    /// This replica does not lead; the hash was computed, nothing was written.
    NotLeader {
        /// The hash of the set.
        hash: String,
    },
    /// The Deployment does not exist yet.
    WaitingForDeployment {
        /// The hash of the set.
        hash: String,
    },
    /// The annotation already holds the hash.
    Skipped {
        /// The hash of the set.
        hash: String,
    },
    /// The annotation was written (the Deployment rolls).
    Patched {
        /// The previous value.
        from: Option<String>,
        /// The hash written.
        hash: String,
    },
}

impl runtime::Outcome for Outcome {
    fn noteworthy(&self) -> bool {
        !matches!(self, Outcome::Current | Outcome::NotLeader { .. })
    }
}

/// The restarter's state between evaluations.
pub struct Restarter {
    client: kube::Client,
    config: Config,
    definitions: Cache<DynamicObject>,
    deployment: Cache<Deployment>,
    /// The hash computed by the last evaluation; only used to ignore Deployment changes that
    /// already carry it (a cache of a derived value, never a record of what was handled).
    desired: Option<String>,
    /// The definitions whose schema problem was logged, with the resourceVersion it was logged
    /// for (so each problem is logged once per version of the definition, not once per pass).
    schema_warned: HashMap<String, String>,
}

impl Restarter {
    /// A restarter over these caches.
    pub fn new(
        client: kube::Client,
        config: Config,
        definitions: Cache<DynamicObject>,
        deployment: Cache<Deployment>,
    ) -> Self {
        m::register();
        Self {
            client,
            config,
            definitions,
            deployment,
            desired: None,
            schema_warned: HashMap::new(),
        }
    }

    /// Logs each definition whose `openAPISchema` cozystack-api cannot serve, naming it and the
    /// field (no object of ours can carry it, and the daemon has no Event permission).
    fn warn_about_schemas(&mut self, definitions: &[Arc<DynamicObject>]) {
        let mut seen = HashMap::new();
        for d in definitions {
            let name = d.metadata.name.clone().unwrap_or_default();
            let version = d.metadata.resource_version.clone().unwrap_or_default();
            if let Some(problem) = schema_problem(d) {
                if self.schema_warned.get(&name) != Some(&version) {
                    tracing::warn!(
                        definition = %name,
                        "ApplicationDefinition {name}: spec.application.openAPISchema {problem}; cozystack-api cannot serve this kind"
                    );
                }
                seen.insert(name, version);
            }
        }
        self.schema_warned = seen;
    }

    fn cached_annotation(&self) -> Option<String> {
        let d = self
            .deployment
            .get(Some(&self.config.namespace), &self.config.deployment)?;
        template_annotation(&d, &self.config.annotation).map(str::to_owned)
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

    async fn patch(&self, current: Option<&Deployment>, hash: &str) -> Result<bool, Error> {
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let rv = current.and_then(|d| d.metadata.resource_version.as_deref());
        let patch = annotation_patch(&self.config.annotation, hash, rv);
        match api
            .patch(
                &self.config.deployment,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(Error::Conflict(kube::Error::Api(s))),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(err) => Err(Error::Api(err)),
        }
    }
}

impl runtime::Evaluate for Restarter {
    type Outcome = Outcome;
    type Error = Error;

    async fn evaluate(&mut self, pass: &Pass) -> Result<Outcome, Error> {
        let result = self.evaluate_once(pass).await;
        if let Err(err) = &result {
            metrics::counter!(m::ERRORS, "kind" => err.kind()).increment(1);
        }
        result
    }
}

impl Restarter {
    async fn evaluate_once(&mut self, pass: &Pass) -> Result<Outcome, Error> {
        // A Deployment event that already carries the hash needs no work (our own patch coming
        // back, or a rollout progressing); any definition change arrives as a settled pass.
        if pass.cause == Cause::Changed
            && self.desired.is_some()
            && self.cached_annotation() == self.desired
        {
            return Ok(Outcome::Current);
        }
        let definitions = self.definitions.list();
        self.warn_about_schemas(&definitions);
        let hash = hash_of(&definitions)?;
        metrics::counter!(m::HASH_COMPUTATIONS).increment(1);
        self.set_desired(&hash);
        if !pass.is_leading() {
            return Ok(Outcome::NotLeader { hash });
        }
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &self.config.namespace);
        let current = api
            .get_opt(&self.config.deployment)
            .await
            .map_err(Error::Api)?;
        metrics::gauge!(m::DEPLOYMENT_MISSING).set(if current.is_none() { 1.0 } else { 0.0 });
        match decide(&hash, current.as_ref(), &self.config.annotation) {
            Decision::WaitForDeployment => Ok(Outcome::WaitingForDeployment { hash }),
            Decision::Skip => {
                metrics::counter!(m::SKIPS).increment(1);
                Ok(Outcome::Skipped { hash })
            }
            Decision::Patch { from } => {
                // Leadership may have moved while we read.
                if !pass.is_leading() {
                    return Ok(Outcome::NotLeader { hash });
                }
                match self.patch(current.as_ref(), &hash).await {
                    Ok(true) => {
                        metrics::counter!(m::PATCHES).increment(1);
                        Ok(Outcome::Patched { from, hash })
                    }
                    Ok(false) => {
                        metrics::gauge!(m::DEPLOYMENT_MISSING).set(1.0);
                        Ok(Outcome::WaitingForDeployment { hash })
                    }
                    Err(err) => Err(err),
                }
            }
        }
    }
}
