//! The drill executor: on the leading replica, every `--drill-interval`, lists the Plans and
//! Backups, advances each running drill one step, cleans up what no running drill owns, starts
//! the drills that are due and refreshes the last-verified gauge. Every write is idempotent or
//! guarded by the Backup's resourceVersion, so a restart at any instant continues from the
//! Backup's state annotation and the objects found under the drill's deterministic names.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use api::backups::{Backup, Plan, PlanVerification, RestoreJob};
use api::contract::{drills, groups, labels};
use api::meta::{Condition, ConditionStatus, set_condition};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::{Client, Resource, ResourceExt};
use lease::{LeaderElector, Leadership};
use runtime::events::Recorder;
use serde_json::{Value as Json, json};

use super::check::{self, Outcome, Target};
use super::{CLEANUP_TIMEOUT, Phase, Rule, State, seconds_between};
use crate::context::resource;
use crate::metrics;

/// A drill step that could not be taken this pass (retried on the next).
type Result<T> = std::result::Result<T, String>;

/// The drill executor.
pub struct Drills {
    client: Client,
    recorder: Recorder,
    leader: LeaderElector,
    /// The Plans (uid, generation) whose invalid verification was already reported.
    warned: Mutex<BTreeSet<(String, i64)>>,
    /// The applications (namespace, name) whose expected-since gauge this replica set to a time.
    expected: Mutex<BTreeSet<(String, String)>>,
}

fn api_text(action: &str, what: &str, e: kube::Error) -> String {
    format!("{action} {what}: {e}")
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn already_exists(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl Drills {
    /// An executor writing with `client`, recording Events with `recorder`, acting while `leader`
    /// leads.
    pub fn new(client: Client, recorder: Recorder, leader: LeaderElector) -> Self {
        Self {
            client,
            recorder,
            leader,
            warned: Mutex::new(BTreeSet::new()),
            expected: Mutex::new(BTreeSet::new()),
        }
    }

    /// Runs passes every `interval` until `shutdown` resolves.
    pub async fn run(self, interval: Duration, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            if !matches!(self.leader.current(), Leadership::Leading { .. }) {
                self.forget_expected();
            } else if let Err(e) = self.pass().await {
                tracing::warn!(error = %e, "restore drill pass failed; retried next pass");
            }
            tokio::select! {
                () = &mut shutdown => return,
                () = tokio::time::sleep(interval) => {}
            }
        }
    }

    /// One pass over every namespace.
    pub async fn pass(&self) -> Result<()> {
        let plans = Api::<Plan>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| api_text("list", "Plans", e))?
            .items;
        let backups = Api::<Backup>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .map_err(|e| api_text("list", "Backups", e))?
            .items;

        // Running drills, and the Plans they belong to (one drill per Plan at a time).
        let mut busy: BTreeSet<(String, String)> = BTreeSet::new();
        let mut running: BTreeSet<(String, String)> = BTreeSet::new();
        for b in &backups {
            let Some(state) = State::of(b) else { continue };
            let ns = b.namespace().unwrap_or_default();
            if let Some(p) = &b.spec.plan_ref {
                busy.insert((ns.clone(), p.name.clone()));
            }
            let state = match state {
                Ok(s) => s,
                Err(why) => {
                    let now = Timestamp::now();
                    let rule = default_rule();
                    State::start(b, &rule, now).conclude(
                        drills::FAILED,
                        format!("the drill's state annotation could not be read ({why}); the drill was abandoned"),
                        now,
                    )
                }
            };
            running.insert((ns, state.scratch.clone()));
            if let Err(e) = self.advance(b, state).await {
                tracing::info!(backup = %b.name_any(), error = %e, "restore drill step deferred");
            }
        }

        self.sweep_orphans(&running).await;

        for plan in &plans {
            let ns = plan.namespace().unwrap_or_default();
            let rule = match super::validate(plan) {
                Ok(Some(rule)) => rule,
                Ok(None) => continue,
                Err(invalid) => {
                    self.warn_invalid(plan, &invalid.to_string()).await;
                    continue;
                }
            };
            if busy.contains(&(ns.clone(), plan.name_any())) {
                continue;
            }
            let ours = super::plan_backups(plan, &backups);
            if let Some(b) = super::due(&rule, plan, &ours, Timestamp::now()) {
                busy.insert((ns, plan.name_any()));
                self.start(b, &rule).await;
            }
        }

        // Drills asked for by hand (the Backup's request annotation).
        for b in &backups {
            let requested = b.annotations().contains_key(drills::REQUEST_ANNOTATION);
            if !requested || State::of(b).is_some() || !super::usable(b) {
                continue;
            }
            let ns = b.namespace().unwrap_or_default();
            let plan = b.spec.plan_ref.as_ref().and_then(|r| {
                plans
                    .iter()
                    .find(|p| p.namespace().as_deref() == Some(&ns) && p.name_any() == r.name)
            });
            let rule = plan
                .and_then(|p| super::validate(p).ok().flatten())
                .unwrap_or_else(default_rule);
            if let Some(p) = &b.spec.plan_ref
                && !busy.insert((ns, p.name.clone()))
            {
                continue;
            }
            self.start(b, &rule).await;
        }

        self.gauges(&plans, &backups);
        Ok(())
    }

    async fn warn_invalid(&self, plan: &Plan, message: &str) {
        let key = (
            plan.uid().unwrap_or_default(),
            plan.metadata.generation.unwrap_or_default(),
        );
        if !lock(&self.warned).insert(key) {
            return;
        }
        tracing::warn!(plan = %plan.name_any(), "{message}");
        self.event(
            &plan.object_ref(&()),
            EventType::Warning,
            "InvalidVerification",
            message,
        )
        .await;
    }

    async fn event(
        &self,
        object: &k8s_openapi::api::core::v1::ObjectReference,
        type_: EventType,
        reason: &str,
        note: &str,
    ) {
        let event = Event {
            type_,
            reason: reason.into(),
            note: Some(runtime::events::note(note)),
            action: "Verify".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, object).await {
            tracing::debug!(error = %e, "could not publish an Event");
        }
    }

    /// Write 1: the state annotation (resourceVersion precondition: a concurrent writer or a
    /// second replica's start makes this one a no-op).
    async fn start(&self, backup: &Backup, rule: &Rule) {
        let state = State::start(backup, rule, Timestamp::now());
        if backup
            .spec
            .application_ref
            .api_group
            .as_deref()
            .is_some_and(|g| !g.is_empty() && g != groups::APPS)
        {
            // Only applications of apps.cozystack.io are copied; anything else fails at once.
            let now = Timestamp::now();
            let failed = state.conclude(
                drills::FAILED,
                format!(
                    "drills copy applications of {}; {} is not one",
                    groups::APPS,
                    backup
                        .spec
                        .application_ref
                        .api_group
                        .as_deref()
                        .unwrap_or_default()
                ),
                now,
            );
            let _ = self.save(backup, &failed).await;
            return;
        }
        match self.save(backup, &state).await {
            Ok(()) => {
                tracing::info!(backup = %backup.name_any(), scratch = %state.scratch, "restore drill started");
                self.event(
                    &backup.object_ref(&()),
                    EventType::Normal,
                    "VerificationStarted",
                    &format!(
                        "restore drill started: restoring into the scratch application {}",
                        state.scratch
                    ),
                )
                .await;
            }
            Err(e) => {
                tracing::info!(backup = %backup.name_any(), error = %e, "restore drill not started")
            }
        }
    }

    /// Persists `state` on the Backup under its resourceVersion.
    async fn save(&self, backup: &Backup, state: &State) -> Result<()> {
        let text = serde_json::to_string(state).map_err(|e| e.to_string())?;
        self.patch_backup(
            backup,
            json!({"metadata": {"annotations": {drills::STATE_ANNOTATION: text}}}),
        )
        .await
    }

    async fn patch_backup(&self, backup: &Backup, mut patch: Json) -> Result<()> {
        patch["metadata"]["resourceVersion"] = json!(backup.resource_version());
        Api::<Backup>::namespaced(self.client.clone(), &backup.namespace().unwrap_or_default())
            .patch(
                &backup.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
            .map_err(|e| api_text("patch", &format!("Backup {}", backup.name_any()), e))
    }

    /// One step of a running drill.
    async fn advance(&self, backup: &Backup, state: State) -> Result<()> {
        let now = Timestamp::now();
        match state.phase {
            Phase::Restoring => self.restoring(backup, state, now).await,
            Phase::Checking => self.checking(backup, state, now).await,
            Phase::CleaningUp => self.cleaning_up(backup, state, now).await,
        }
    }

    async fn restoring(&self, backup: &Backup, mut state: State, now: Timestamp) -> Result<()> {
        let ns = backup.namespace().unwrap_or_default();
        let jobs: Api<RestoreJob> = Api::namespaced(self.client.clone(), &ns);
        let job = jobs
            .get_opt(&state.scratch)
            .await
            .map_err(|e| api_text("get", "the drill's RestoreJob", e))?;
        if let Some(job) = job.as_ref().filter(|j| j.is_terminal()) {
            let status = job.status.clone().unwrap_or_default();
            // Up to the job's own completion (not this pass, which may come an interval later).
            let ended = status.completed_at.as_ref().map_or(now, |t| t.0);
            state.restore_seconds = Some(seconds_between(state.started_at, ended));
            let next = if status.phase.as_deref() == Some(api::contract::phases::SUCCEEDED) {
                if is_cnpg(backup) {
                    state.phase = Phase::Checking;
                    state.check_started_at = Some(now);
                    state
                } else {
                    let kind = &backup.spec.strategy_ref.kind;
                    state.clone().conclude(
                        drills::PASSED,
                        format!(
                            "restored into the scratch application {} (RestoreJob Succeeded); the {kind} drill is the restore itself: no engine check runs for this driver",
                            state.scratch
                        ),
                        now,
                    )
                }
            } else {
                let log = self.recovery_log(backup, &state.scratch).await;
                state.conclude(
                    drills::FAILED,
                    format!(
                        "the restore into the scratch application failed: {}{log}",
                        status.message.unwrap_or_else(|| "no message".into())
                    ),
                    now,
                )
            };
            return self.save(backup, &next).await;
        }
        if state.overdue(now) {
            let phase = job
                .as_ref()
                .and_then(|j| j.status.as_ref()?.phase.clone())
                .unwrap_or_else(|| "not started".into());
            let log = self.recovery_log(backup, &state.scratch).await;
            let failed = state.clone().conclude(
                drills::FAILED,
                format!(
                    "the restore into the scratch application did not finish within {}s (RestoreJob {ns}/{} is {phase}); override via spec.verification.timeoutSeconds{log}",
                    state.timeout_seconds, state.scratch
                ),
                now,
            );
            return self.save(backup, &failed).await;
        }
        if let Err(why) = self.ensure_scratch_app(backup, &state).await {
            let failed = state.conclude(drills::FAILED, why, now);
            return self.save(backup, &failed).await;
        }
        if job.is_none() {
            self.create_restore_job(backup, &state).await?;
        }
        Ok(())
    }

    /// PostgreSQL: the last lines of the scratch Cluster's newest recovery pod (barman's and
    /// PostgreSQL's own words on why the recovery failed), as `; the recovery log ends: …`, or
    /// nothing when there is no such pod or its log cannot be read.
    async fn recovery_log(&self, backup: &Backup, scratch: &str) -> String {
        if !is_cnpg(backup) {
            return String::new();
        }
        let ns = backup.namespace().unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &ns);
        let selector = format!(
            "{}=postgres-{scratch},cnpg.io/jobRole=full-recovery",
            labels::CNPG_CLUSTER
        );
        let Ok(list) = pods.list(&ListParams::default().labels(&selector)).await else {
            return String::new();
        };
        // The newest attempt that ended (a running one has said little yet), else the newest.
        let ended = |p: &&Pod| {
            p.status
                .as_ref()
                .and_then(|s| s.phase.as_deref())
                .is_some_and(|ph| ph == "Failed" || ph == "Succeeded")
        };
        let key = |p: &&Pod| {
            (
                p.metadata.creation_timestamp.as_ref().map(|t| t.0),
                p.name_any(),
            )
        };
        let newest = list.items.iter().filter(ended).max_by_key(key);
        let Some(newest) = newest.or_else(|| list.items.iter().max_by_key(key)) else {
            return String::new();
        };
        let params = LogParams {
            container: Some(RECOVERY_CONTAINER.into()),
            tail_lines: Some(RECOVERY_LOG_LINES),
            ..Default::default()
        };
        let Ok(text) = pods.logs(&newest.name_any(), &params).await else {
            return String::new();
        };
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if lines.is_empty() {
            return String::new();
        }
        let tail = lines.join(" | ");
        let cut: String = tail
            .chars()
            .rev()
            .take(RECOVERY_LOG_CHARS)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("; the recovery pod {}'s log ends: {cut}", newest.name_any())
    }

    /// Write 2: the scratch application, a copy of the source's spec (AlreadyExists is done).
    /// `Err` is a refusal that fails the drill.
    async fn ensure_scratch_app(
        &self,
        backup: &Backup,
        state: &State,
    ) -> std::result::Result<(), String> {
        let ns = backup.namespace().unwrap_or_default();
        let app = &backup.spec.application_ref;
        let res = resource(&format!("{}/{}", groups::APPS, groups::V1ALPHA1), &app.kind);
        let api: Api<kube::api::DynamicObject> =
            Api::namespaced_with(self.client.clone(), &ns, &res);
        match api.get_opt(&state.scratch).await {
            Ok(Some(_)) => return Ok(()),
            Ok(None) => {}
            Err(e) => return Err(format!("could not read the scratch application: {e}")),
        }
        let source = api
            .get_opt(&app.name)
            .await
            .map_err(|e| format!("could not read the application {}: {e}", app.name))?;
        let spec = super::scratch_spec(source.as_ref().and_then(|s| s.data.get("spec")));
        let body = json!({
            "apiVersion": format!("{}/{}", groups::APPS, groups::V1ALPHA1),
            "kind": app.kind,
            "metadata": {
                "name": state.scratch,
                "namespace": ns,
                "labels": drill_labels(backup),
            },
            "spec": spec,
        });
        let obj: kube::api::DynamicObject =
            serde_json::from_value(body).map_err(|e| e.to_string())?;
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => Ok(()),
            Err(e) if already_exists(&e) => Ok(()),
            Err(e) => Err(format!(
                "could not create the scratch application {}: {e}",
                state.scratch
            )),
        }
    }

    /// Write 3: the RestoreJob into the scratch copy (AlreadyExists is done).
    async fn create_restore_job(&self, backup: &Backup, state: &State) -> Result<()> {
        let ns = backup.namespace().unwrap_or_default();
        let app = &backup.spec.application_ref;
        let job: RestoreJob = serde_json::from_value(json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
            "metadata": {"name": state.scratch, "namespace": ns, "labels": drill_labels(backup)},
            "spec": {
                "backupRef": {"name": backup.name_any()},
                "targetApplicationRef": {"apiGroup": groups::APPS, "kind": app.kind, "name": state.scratch},
                // The restore gives up (with its driver's diagnosis) before the drill's deadline.
                "options": {"restoreTimeoutSeconds": super::restore_timeout_seconds(state.timeout_seconds)},
            },
        }))
        .map_err(|e| e.to_string())?;
        match Api::<RestoreJob>::namespaced(self.client.clone(), &ns)
            .create(&PostParams::default(), &job)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if already_exists(&e) => Ok(()),
            Err(e) => Err(api_text("create", "the drill's RestoreJob", e)),
        }
    }

    async fn checking(&self, backup: &Backup, mut state: State, now: Timestamp) -> Result<()> {
        let ns = backup.namespace().unwrap_or_default();
        let overdue = state.overdue(now);
        let secret_name = format!("postgres-{}-app", state.scratch);
        let secret = Api::<Secret>::namespaced(self.client.clone(), &ns)
            .get_opt(&secret_name)
            .await
            .map_err(|e| api_text("get", &format!("Secret {secret_name}"), e))?;
        let outcome = match secret {
            None => Outcome::Unreachable(format!(
                "the operator has not published the Secret {ns}/{secret_name}"
            )),
            Some(s) => {
                let data: BTreeMap<String, String> = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                    .collect();
                match Target::from_secret(&data) {
                    Err(why) => Outcome::Failed(format!("Secret {ns}/{secret_name}: {why}")),
                    Ok(target) => {
                        let left =
                            state.timeout_seconds as i64 - seconds_between(state.started_at, now);
                        let within = Duration::from_secs(left.clamp(5, 60).unsigned_abs());
                        check::run(&target, state.sql.as_deref(), within).await
                    }
                }
            }
        };
        let now = Timestamp::now();
        state.check_seconds = state.check_started_at.map(|t| seconds_between(t, now));
        let next = match outcome {
            Outcome::Passed(what) => {
                let scratch = state.scratch.clone();
                state.conclude(
                    drills::PASSED,
                    format!("restored into the scratch application {scratch} and checked: {what}"),
                    now,
                )
            }
            Outcome::Failed(why) => state.conclude(drills::FAILED, format!("the check failed: {why}"), now),
            Outcome::Unreachable(why) if overdue => state.clone().conclude(
                drills::FAILED,
                format!(
                    "the check did not pass within {}s: {why}; override via spec.verification.timeoutSeconds",
                    state.timeout_seconds
                ),
                now,
            ),
            Outcome::Unreachable(why) => {
                tracing::info!(backup = %backup.name_any(), "restore drill check waits: {why}");
                return Ok(());
            }
        };
        self.save(backup, &next).await
    }

    /// Writes 6 and 7: deletes the drill's objects; once none is left (or the cleanup deadline
    /// passed) records the result and removes the state in one write.
    async fn cleaning_up(&self, backup: &Backup, state: State, now: Timestamp) -> Result<()> {
        let ns = backup.namespace().unwrap_or_default();
        let left = self
            .delete_scratch(&ns, &backup.spec.application_ref.kind, &state.scratch)
            .await?;
        let started = state.cleanup_started_at.unwrap_or(state.started_at);
        let stuck = seconds_between(started, now) >= CLEANUP_TIMEOUT.as_secs() as i64;
        if !left.is_empty() && !stuck {
            return Ok(());
        }
        let mut record = state.clone();
        if !left.is_empty() {
            let note = format!(
                "the drill's objects were still present {}s after their deletion: {} (check their finalizers; they are deleted again on every pass)",
                CLEANUP_TIMEOUT.as_secs(),
                left.join(", ")
            );
            self.event(
                &backup.object_ref(&()),
                EventType::Warning,
                "VerificationCleanupStuck",
                &note,
            )
            .await;
            record.message = Some(format!("{}; {note}", record.message.unwrap_or_default()));
        }
        self.record(backup, &record, now).await
    }

    /// Write 7: `status.verification`, the `Verified` condition, the state annotation removed.
    async fn record(&self, backup: &Backup, state: &State, now: Timestamp) -> Result<()> {
        let passed = state.result.as_deref() == Some(drills::PASSED);
        let verification = state.verification(now);
        let mut conditions = backup
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        set_condition(
            &mut conditions,
            Condition::new(
                drills::VERIFIED,
                if passed {
                    ConditionStatus::True
                } else {
                    ConditionStatus::False
                },
                if passed { "DrillPassed" } else { "DrillFailed" },
                state.message.clone().unwrap_or_default(),
                Time(now),
            ),
        );
        self.patch_backup(
            backup,
            json!({
                "metadata": {"annotations": {drills::STATE_ANNOTATION: null, drills::REQUEST_ANNOTATION: null}},
                "status": {"verification": verification, "conditions": conditions},
            }),
        )
        .await?;
        let (type_, reason, result) = if passed {
            (EventType::Normal, "VerificationPassed", "passed")
        } else {
            (EventType::Warning, "VerificationFailed", "failed")
        };
        tracing::info!(backup = %backup.name_any(), result, "restore drill recorded");
        ::metrics::counter!(metrics::VERIFICATIONS, "result" => result).increment(1);
        self.event(
            &backup.object_ref(&()),
            type_,
            reason,
            state.message.as_deref().unwrap_or_default(),
        )
        .await;
        Ok(())
    }

    /// Deletes a scratch application and what it made (its RestoreJob, its HelmReleases, the
    /// CloudNativePG Cluster and PVCs); returns what is still present (the Secrets and
    /// ObjectStores the garbage collector removes with their owners included).
    async fn delete_scratch(&self, ns: &str, kind: &str, scratch: &str) -> Result<Vec<String>> {
        let mut left = Vec::new();
        let cluster = format!("postgres-{scratch}");
        let dp = DeleteParams::background();
        let apps = format!("{}/{}", groups::APPS, groups::V1ALPHA1);
        let named = [
            (
                resource("backups.cozystack.io/v1alpha1", "RestoreJob"),
                scratch.to_owned(),
                true,
            ),
            (resource(&apps, kind), scratch.to_owned(), true),
            (
                resource("postgresql.cnpg.io/v1", "Cluster"),
                cluster.clone(),
                true,
            ),
            (
                resource("barmancloud.cnpg.io/v1", "ObjectStore"),
                cluster.clone(),
                false,
            ),
            (
                resource("barmancloud.cnpg.io/v1", "ObjectStore"),
                format!("{cluster}-recovery"),
                false,
            ),
            (resource("v1", "Secret"), format!("{cluster}-app"), false),
            (
                resource("v1", "Secret"),
                format!("{cluster}-superuser"),
                false,
            ),
        ];
        for (res, name, delete) in &named {
            let api: Api<kube::api::DynamicObject> =
                Api::namespaced_with(self.client.clone(), ns, res);
            let present = match api.get_opt(name).await {
                Ok(o) => o,
                Err(e) if not_found(&e) => None,
                Err(e) => return Err(api_text("get", &format!("{} {name}", res.kind), e)),
            };
            let Some(o) = present else { continue };
            left.push(format!("{} {ns}/{name}", res.kind));
            if *delete && o.metadata.deletion_timestamp.is_none() {
                match api.delete(name, &dp).await {
                    Ok(_) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => return Err(api_text("delete", &format!("{} {name}", res.kind), e)),
                }
            }
        }
        let hr = resource("helm.toolkit.fluxcd.io/v2", "HelmRelease");
        let releases: Api<kube::api::DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &hr);
        let by_app =
            ListParams::default().labels(&format!("{}={scratch}", labels::APPLICATION_NAME));
        match releases.list(&by_app).await {
            Ok(list) => {
                for r in list.items {
                    let name = r.name_any();
                    left.push(format!("HelmRelease {ns}/{name}"));
                    if r.metadata.deletion_timestamp.is_none() {
                        match releases.delete(&name, &dp).await {
                            Ok(_) => {}
                            Err(e) if not_found(&e) => {}
                            Err(e) => {
                                return Err(api_text("delete", &format!("HelmRelease {name}"), e));
                            }
                        }
                    }
                }
            }
            Err(e) if not_found(&e) => {}
            Err(e) => return Err(api_text("list", "HelmReleases", e)),
        }
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), ns);
        let by_cluster =
            ListParams::default().labels(&format!("{}={cluster}", labels::CNPG_CLUSTER));
        let list = pvcs
            .list(&by_cluster)
            .await
            .map_err(|e| api_text("list", "PVCs", e))?;
        for p in list.items {
            let name = p.name_any();
            left.push(format!("PersistentVolumeClaim {ns}/{name}"));
            if p.metadata.deletion_timestamp.is_none() {
                match pvcs.delete(&name, &dp).await {
                    Ok(_) => {}
                    Err(e) if not_found(&e) => {}
                    Err(e) => return Err(api_text("delete", &format!("PVC {name}"), e)),
                }
            }
        }
        Ok(left)
    }

    /// Deletes the objects of drills no Backup records as running (a Backup deleted mid-drill, a
    /// state removed by hand): the drill RestoreJobs and scratch Postgres applications by label.
    async fn sweep_orphans(&self, running: &BTreeSet<(String, String)>) {
        let selector = ListParams::default().labels(&format!("{}=true", drills::LABEL));
        let jobs = Api::<RestoreJob>::all(self.client.clone())
            .list(&selector)
            .await;
        let apps = Api::<kube::api::DynamicObject>::all_with(
            self.client.clone(),
            &resource(
                &format!("{}/{}", groups::APPS, groups::V1ALPHA1),
                "Postgres",
            ),
        )
        .list(&selector)
        .await;
        let mut orphans: BTreeSet<(String, String, String)> = BTreeSet::new();
        if let Ok(list) = jobs {
            for j in list.items {
                let kind = j
                    .spec
                    .target_application_ref
                    .as_ref()
                    .map(|r| r.kind.clone())
                    .unwrap_or_else(|| "Postgres".into());
                orphans.insert((j.namespace().unwrap_or_default(), j.name_any(), kind));
            }
        }
        if let Ok(list) = apps {
            for a in list.items {
                orphans.insert((
                    a.namespace().unwrap_or_default(),
                    a.name_any(),
                    "Postgres".into(),
                ));
            }
        }
        for (ns, name, kind) in orphans {
            if running.contains(&(ns.clone(), name.clone())) {
                continue;
            }
            tracing::info!(namespace = %ns, scratch = %name, "deleting the objects of a drill no Backup records");
            if let Err(e) = self.delete_scratch(&ns, &kind, &name).await {
                tracing::info!(error = %e, "orphaned drill objects remain; retried next pass");
            }
        }
    }

    /// The last-verified gauge of each application a Plan drills, and the expected-since gauge of
    /// each one none of whose drills has passed (the oldest such Plan's creation).
    fn gauges(&self, plans: &[Plan], backups: &[Backup]) {
        let mut expected: BTreeMap<(String, String), f64> = BTreeMap::new();
        for plan in plans {
            if !matches!(super::validate(plan), Ok(Some(_))) {
                continue;
            }
            let ns = plan.namespace().unwrap_or_default();
            let app = &plan.spec.application_ref.name;
            let of_app: Vec<&Backup> = backups
                .iter()
                .filter(|b| {
                    b.namespace().as_deref() == Some(&ns) && &b.spec.application_ref.name == app
                })
                .collect();
            if let Some(t) = super::last_passed(&of_app) {
                ::metrics::gauge!(metrics::LAST_VERIFIED, "namespace" => ns, "application" => app.clone())
                    .set(t.as_second() as f64);
            } else if let Some(created) = &plan.metadata.creation_timestamp {
                let since = created.0.as_second() as f64;
                expected
                    .entry((ns, app.clone()))
                    .and_modify(|t| *t = t.min(since))
                    .or_insert(since);
            }
        }
        let mut set = lock(&self.expected);
        for (ns, app) in set.iter().filter(|key| !expected.contains_key(*key)) {
            expected_since(ns, app).set(f64::NAN);
        }
        for ((ns, app), since) in &expected {
            expected_since(ns, app).set(*since);
        }
        *set = expected.into_keys().collect();
    }

    /// Sets every expected-since gauge this replica set back to NaN (it stopped leading: the
    /// leader's are the ones that count).
    fn forget_expected(&self) {
        for (ns, app) in std::mem::take(&mut *lock(&self.expected)) {
            expected_since(&ns, &app).set(f64::NAN);
        }
    }
}

fn expected_since(ns: &str, app: &str) -> ::metrics::Gauge {
    ::metrics::gauge!(metrics::VERIFICATION_EXPECTED_SINCE, "namespace" => ns.to_owned(), "application" => app.to_owned())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The container of a CloudNativePG recovery job.
const RECOVERY_CONTAINER: &str = "full-recovery";
/// Lines of the recovery log a failed drill quotes.
const RECOVERY_LOG_LINES: i64 = 6;
/// At most this many characters of them (the end).
const RECOVERY_LOG_CHARS: usize = 1500;

/// The rule of a drill asked for on a Backup whose Plan has no valid verification block.
fn default_rule() -> Rule {
    super::rule(&PlanVerification {
        every: Some(1),
        ..Default::default()
    })
    .expect("the default verification block is valid")
}

fn is_cnpg(backup: &Backup) -> bool {
    backup.spec.strategy_ref.kind == "CNPG"
}

fn drill_labels(backup: &Backup) -> Json {
    let mut l = json!({drills::LABEL: "true"});
    let name = backup.name_any();
    // A label value holds at most 63 characters; a longer Backup name is left out.
    if name.len() <= 63 {
        l[drills::BACKUP_LABEL] = json!(name);
    }
    l
}
