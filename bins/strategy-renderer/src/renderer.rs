//! One evaluation, run by the runtime's singleton loop: configuration → render → plan → act →
//! status. The decisions are the pure functions of [`crate::plan`]; this module only performs them.
//!
//! Invariants: only the leader writes (checked again right before the writes); one failing object
//! (e.g. a kind whose CRD is missing) never holds back the others or the status that reports it —
//! the first error is returned afterwards so the loop retries with backoff; an invalid
//! configuration changes nothing in the cluster.

use std::collections::BTreeMap;

use api::Condition;
use api::contract::{condition_types, event_reasons, metrics::DEFAULT_OBJECTS_MISSING, names};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::events::{Event, EventType};
use runtime::events::Recorder;
use runtime::{ErrorClass, Pass, ReadyHandle, ReconcileError};
use serde_json::Value;
use strategy_render::RenderConfig;

use crate::inputs::{Inputs, Snapshot};
use crate::metrics as m;
use crate::plan::{self, ApplyReason, ConfigMemory, ConfigReadiness, Key, ReadyStatus};
use crate::{COMPONENT, FIELD_MANAGER};

/// Errors of one evaluation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{action} {object}: {source}")]
    Api {
        /// What was attempted (`apply`, `delete`, `apply status`).
        action: &'static str,
        /// The object.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl ReconcileError for Error {
    fn kind(&self) -> &'static str {
        "api"
    }
    fn class(&self) -> ErrorClass {
        ErrorClass::Transient
    }
}

/// What one evaluation did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Objects applied.
    pub applied: usize,
    /// Objects deleted.
    pub pruned: usize,
    /// Whether the Ready condition was written.
    pub status_written: bool,
    /// Why nothing was evaluated, if so.
    pub skipped: Option<&'static str>,
}

impl runtime::Outcome for Outcome {
    fn noteworthy(&self) -> bool {
        self.applied + self.pruned > 0 || self.status_written
    }
}

/// The renderer's state between evaluations (never the source of truth: everything is rebuilt
/// from the watches on start).
pub struct Renderer {
    /// Kubernetes client.
    pub client: kube::Client,
    /// The watched inputs.
    pub inputs: Inputs,
    /// Flag/env defaults the ConfigMap is laid over.
    pub defaults: RenderConfig,
    /// The ConfigMap's namespace and name.
    pub config_ref: (String, String),
    /// Publishes Warning Events about a rejected configuration.
    pub recorder: Recorder,
    /// The `configuration` readiness check.
    pub config_ready: ReadyHandle,
    /// Configurations seen.
    pub memory: ConfigMemory,
    /// What this process applied last per object, to tell drift from a new render.
    pub last_applied: BTreeMap<Key, Value>,
}

impl runtime::Evaluate for Renderer {
    type Outcome = Outcome;
    type Error = Error;

    async fn evaluate(&mut self, pass: &Pass) -> Result<Outcome, Error> {
        let Some(config) = self.current_config(pass).await else {
            return Ok(Outcome {
                skipped: Some("no valid configuration yet"),
                ..Outcome::default()
            });
        };
        if self.inputs.retarget(&config) {
            return Ok(Outcome {
                skipped: Some("inputs moved; waiting for their lists"),
                ..Outcome::default()
            });
        }
        let snapshot = self.inputs.snapshot();
        let desired = strategy_render::render(
            &config,
            snapshot.claim_bucket_name.as_deref(),
            snapshot.secret_endpoint.as_deref(),
        );
        if !pass.is_leading() {
            return Ok(Outcome {
                skipped: Some("not the leader"),
                ..Outcome::default()
            });
        }
        let plan = plan::plan(&desired, &snapshot.observed, &self.last_applied);
        for key in &plan.left_in_place {
            tracing::debug!(object = %key, "no longer desired; left in place (it holds the backups)");
        }
        let mut outcome = Outcome::default();
        let mut first_error = None;
        for apply in &plan.apply {
            match self.apply(apply).await {
                Ok(()) => outcome.applied += 1,
                Err(e) => {
                    tracing::warn!(error = %e, "apply failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        for prune in &plan.prune {
            match self.prune(prune).await {
                Ok(()) => outcome.pruned += 1,
                Err(e) => {
                    tracing::warn!(error = %e, "delete failed");
                    first_error.get_or_insert(e);
                }
            }
        }
        // The status reflects what exists now, including this evaluation's writes.
        let now = self.inputs.snapshot();
        let secret = if now.secret_present {
            plan::SystemSecret::Present {
                bucket_name: now.secret_bucket_name.as_deref(),
            }
        } else {
            plan::SystemSecret::Absent
        };
        let status = plan::ready_status(&desired, &config, &now.observed, secret);
        match self.report_status(&status, &now).await {
            Ok(written) => outcome.status_written = written,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        metrics::counter!(m::RENDERS).increment(1);
        Ok(outcome)
    }
}

impl Renderer {
    /// The configuration in force, taking a new ConfigMap into account (reporting a rejection once).
    async fn current_config(&mut self, pass: &Pass) -> Option<RenderConfig> {
        let (values, config_uid) = self.inputs.config_values();
        let parsed = strategy_render::parse_config(&self.defaults, values.as_deref())
            .map_err(|e| e.to_string());
        let step = plan::next_config(&self.memory, parsed);
        self.memory = step.memory;
        let (ns, name) = &self.config_ref;
        metrics::gauge!(m::CONFIG_VALID).set(if step.readiness == ConfigReadiness::Valid {
            1.0
        } else {
            0.0
        });
        match &step.readiness {
            ConfigReadiness::Valid => self.config_ready.set_ready(),
            ConfigReadiness::RejectedKeepingLastGood(e) => {
                self.config_ready.set_ready_with(&format!(
                    "ConfigMap {ns}/{name} rejected, keeping the last good configuration: {e}"
                ))
            }
            ConfigReadiness::RejectedNoneGood(e) => self.config_ready.set_not_ready(&format!(
                "ConfigMap {ns}/{name} rejected and no good configuration seen yet: {e}"
            )),
        }
        if step.recovered {
            tracing::info!("configuration is valid again");
        }
        if step.changed
            && let Some(c) = &step.in_force
        {
            tracing::info!(config = %serde_json::to_value(c).unwrap_or_default(), "configuration in force");
        }
        if let Some(message) = step.report {
            metrics::counter!(m::CONFIG_ERRORS).increment(1);
            tracing::warn!(configmap = %format!("{ns}/{name}"), error = %message, "invalid configuration; keeping the last good render");
            if pass.is_leading()
                && let Some(uid) = config_uid
            {
                self.publish_config_event(uid, &message).await;
            }
        }
        step.in_force
    }

    async fn publish_config_event(&self, uid: String, message: &str) {
        let (ns, name) = &self.config_ref;
        let reference = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            namespace: Some(ns.clone()),
            name: Some(name.clone()),
            uid: Some(uid),
            ..Default::default()
        };
        let event = Event {
            type_: EventType::Warning,
            reason: event_reasons::INVALID_CONFIGURATION.into(),
            note: Some(runtime::events::note(message)),
            action: "Render".into(),
            secondary: None,
        };
        // Each distinct refusal is an Event of its own: in a series only the first note shows.
        if let Err(e) = self.recorder.publish_single(&event, &reference).await {
            tracing::warn!(error = %e, "could not publish the configuration Event");
        }
    }

    fn api_for(&self, key: &Key) -> Api<DynamicObject> {
        let (kind, _) = self
            .inputs
            .owned(&key.kind)
            .expect("render() produces only owned kinds");
        match (kind.namespaced, key.namespace.as_deref()) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &kind.resource),
            _ => Api::all_with(self.client.clone(), &kind.resource),
        }
    }

    async fn apply(&mut self, apply: &plan::Apply) -> Result<(), Error> {
        let (kind, cache) = self
            .inputs
            .owned(&apply.key.kind)
            .expect("render() produces only owned kinds");
        let label = kind.label;
        let applied = self
            .api_for(&apply.key)
            .patch(
                &apply.key.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&apply.object),
            )
            .await
            .map_err(|source| Error::Api {
                action: "apply",
                object: apply.key.to_string(),
                source,
            })?;
        cache.upsert(applied);
        metrics::counter!(m::APPLIES, "kind" => label).increment(1);
        match apply.why {
            ApplyReason::Drift => {
                metrics::counter!(m::DRIFT_REVERTS, "kind" => label).increment(1);
                tracing::info!(object = %apply.key, "reverted an outside change");
            }
            ApplyReason::Create => tracing::info!(object = %apply.key, created = true, "applied"),
            ApplyReason::Render => tracing::info!(object = %apply.key, created = false, "applied"),
        }
        self.last_applied
            .insert(apply.key.clone(), apply.object.clone());
        Ok(())
    }

    async fn prune(&mut self, prune: &plan::Prune) -> Result<(), Error> {
        let params = DeleteParams {
            preconditions: prune.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..Default::default()
        };
        match self
            .api_for(&prune.key)
            .delete(&prune.key.name, &params)
            .await
        {
            Ok(_) => {}
            // Gone already, or re-created since (uid precondition): nothing of ours to delete.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(source) => {
                return Err(Error::Api {
                    action: "delete",
                    object: prune.key.to_string(),
                    source,
                });
            }
        }
        let (kind, cache) = self
            .inputs
            .owned(&prune.key.kind)
            .expect("pruned objects are of owned kinds");
        metrics::counter!(m::PRUNES, "kind" => kind.label).increment(1);
        tracing::info!(object = %prune.key, "deleted: no longer desired");
        cache.remove(prune.key.namespace.as_deref(), &prune.key.name);
        self.last_applied.remove(&prune.key);
        Ok(())
    }

    /// Writes the Ready condition when it differs from the observed one, then sets the gauge: a
    /// scrape that sees a new count finds the condition that explains it already written.
    async fn report_status(&self, status: &ReadyStatus, now: &Snapshot) -> Result<bool, Error> {
        let written = self.write_ready(status, now).await;
        metrics::gauge!(DEFAULT_OBJECTS_MISSING, "backupclass" => names::DEFAULT_BACKUP_CLASS)
            .set(status.missing as f64);
        written
    }

    /// The Ready condition of the default BackupClass, applied when it differs from the observed
    /// one; whether it was written.
    async fn write_ready(&self, status: &ReadyStatus, now: &Snapshot) -> Result<bool, Error> {
        let class = names::DEFAULT_BACKUP_CLASS;
        let mut conditions: Vec<Condition> = now
            .observed
            .get(&Key {
                kind: "BackupClass".into(),
                namespace: None,
                name: class.into(),
            })
            .and_then(|o| serde_json::from_value(o["status"]["conditions"].clone()).ok())
            .unwrap_or_default();
        let wanted = Condition::new(
            condition_types::READY,
            status.status,
            status.reason,
            status.message.clone(),
            Time(k8s_openapi::jiff::Timestamp::now()),
        );
        if !api::meta::set_condition(&mut conditions, wanted) {
            return Ok(false);
        }
        let ready = conditions
            .into_iter()
            .find(|c| c.type_ == condition_types::READY)
            .expect("just set");
        let api: Api<api::backups::BackupClass> = Api::all(self.client.clone());
        let updated = runtime::conditions::apply_conditions(&api, class, FIELD_MANAGER, &[ready])
            .await
            .map_err(|source| Error::Api {
                action: "apply status",
                object: format!("BackupClass/{class}"),
                source,
            })?;
        if let Some((_, cache)) = self.inputs.owned("BackupClass")
            && let Ok(v) = serde_json::to_value(updated).and_then(serde_json::from_value)
        {
            cache.upsert(v);
        }
        tracing::debug!(component = COMPONENT, "Ready condition written");
        Ok(true)
    }
}
