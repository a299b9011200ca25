//! The top of every RestoreJob pass, in upstream's order, as one pure decision.
//!
//! ```text
//!  being deleted ─► finalizer held? ─► Finalize(best-effort cleanup by the Backup's kind)
//!  finalizer missing ─► AddFinalizer (then decide again, even for a terminal job)
//!  Succeeded / Failed ─► nothing
//!  Backup unreadable (NotFound included) ─► Failed "failed to get Backup: …"
//!  strategyRef.apiGroup nil / foreign, kind not ours ─► Failed, before any projection
//!  CredentialsProjected for this generation? ─► none yet: wait (the condition is an event)
//!      transient (SourceSecretMissing, APIError) ─► Ready=False/CredentialsProjectionPending
//!      any other failure ─► Failed "failed to project backup credentials: …"
//!  ─► Dispatch(driver of the Backup's strategy kind)
//! ```
//!
//! The credentials projector owns the projection and reports it as `CredentialsProjected`; this
//! decision maps that verdict onto `Ready` and the phase with upstream's reasons and messages.
//! Beyond upstream, deleting a CNPG or Etcd restore mid-flight resumes the HelmRelease the driver
//! may have suspended (upstream leaves it suspended forever).

use api::ConditionStatus;
use api::backups::{Backup, RestoreJob};
use api::contract::{self, condition_types, event_reasons, finalizers, labels, names, reasons};
use api::meta::find_condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::skeleton::{fail, helm_release, owned_by, status_of, target_app_name};
use super::{Action, Cleanup, Driver, Selection, Step};

/// The longest label value the API server accepts.
pub const LABEL_VALUE_MAX: usize = 63;

/// The outcome of reading the Backup named by `spec.backupRef`.
#[derive(Debug, Clone, PartialEq)]
pub enum BackupLookup<'a> {
    /// It exists.
    Found(&'a Backup),
    /// It could not be read; the error text (see [`not_found`] for the NotFound wording).
    Error(String),
}

/// The API server's NotFound text for a Backup, as upstream's message embeds it.
pub fn not_found(name: &str) -> String {
    format!("backups.backups.cozystack.io {name:?} not found")
}

/// What the top level looks at.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The RestoreJob.
    pub job: &'a RestoreJob,
    /// The Backup it names.
    pub backup: BackupLookup<'a>,
    /// Whether a `CredentialsProjected` verdict is required before dispatch (projection is
    /// configured on the platform).
    pub require_projection: bool,
    /// Now.
    pub now: Time,
}

/// Velero cleanup: the job's Velero Restores and resource-modifier ConfigMaps in `cozy-velero`.
/// `announce` records `CleanupFailed` when the Restores cannot be deleted (a readable Velero
/// Backup); the speculative cleanup of an unreadable Backup is silent.
fn velero_cleanup(job: &RestoreJob, announce: bool) -> Vec<Cleanup> {
    let select = |api_version, kind| Selection {
        api_version,
        kind,
        namespace: names::VELERO_NAMESPACE.to_owned(),
        labels: owned_by(job),
    };
    vec![
        Cleanup {
            action: Action::DeleteAll(select("velero.io/v1", "Restore")),
            on_error: announce.then_some((
                event_reasons::CLEANUP_FAILED,
                "Failed to delete Velero Restore",
            )),
        },
        Cleanup {
            action: Action::DeleteAll(select("v1", "ConfigMap")),
            on_error: None,
        },
    ]
}

/// What deleting the job cleans up.
fn cleanup(job: &RestoreJob, backup: &BackupLookup<'_>) -> Vec<Cleanup> {
    let backup = match backup {
        BackupLookup::Found(b) => b,
        BackupLookup::Error(_) => return velero_cleanup(job, false),
    };
    let status = status_of(job);
    let running = !job.is_terminal();
    let namespace = backup.metadata.namespace.clone().unwrap_or_default();
    let resume = |release: String| {
        vec![Cleanup {
            action: Action::SetSuspend {
                release: helm_release(&namespace, &release),
                suspend: false,
            },
            on_error: None,
        }]
    };
    match Driver::from_kind(&backup.spec.strategy_ref.kind) {
        Some(Driver::Velero) => velero_cleanup(job, true),
        // Ours: the CNPG driver records WALArchiveReady=True before it suspends the release.
        Some(Driver::Cnpg)
            if running
                && find_condition(&status.conditions, condition_types::WAL_ARCHIVE_READY)
                    .is_some_and(|c| c.is_true()) =>
        {
            resume(crate::cnpg::release_name(&target_app_name(job, backup)))
        }
        // Ours: the Etcd driver captures the spec before it suspends the release (named after
        // the application; Etcd restores in place only).
        Some(Driver::Etcd)
            if running
                && find_condition(
                    &status.conditions,
                    condition_types::ETCD_CLUSTER_SPEC_CAPTURED,
                )
                .is_some() =>
        {
            resume(backup.spec.application_ref.name.clone())
        }
        Some(_) => Vec::new(),
        None => velero_cleanup(job, false),
    }
}

/// Upstream's transient projection reasons; every other failure reason is terminal.
pub fn projection_is_transient(reason: &str) -> bool {
    reason == reasons::SOURCE_SECRET_MISSING || reason == reasons::API_ERROR
}

/// Decides the top of a pass.
pub fn decide(o: &Observed<'_>) -> Step {
    let job = o.job;
    let status = status_of(job);
    let holds_finalizer = job
        .metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|f| f == finalizers::CLEANUP));
    if job.metadata.deletion_timestamp.is_some() {
        return if holds_finalizer {
            Step::Finalize(cleanup(job, &o.backup))
        } else {
            Step::idle()
        };
    }
    if !holds_finalizer {
        return Step::AddFinalizer;
    }
    if job.is_terminal() {
        return Step::idle();
    }
    // Ours: the objects a restore creates are found again by a label carrying the job's name,
    // and a label value is at most 63 characters. A longer name could never be selected (every
    // list is refused), so the job fails here, naming the field.
    let name = job.metadata.name.as_deref().unwrap_or_default();
    if name.len() > LABEL_VALUE_MAX {
        return fail(
            &status,
            &format!(
                "metadata.name is {} characters long; the objects a restore creates carry it in the label {}, whose value is limited to {LABEL_VALUE_MAX} characters (use a shorter RestoreJob name)",
                name.len(),
                labels::OWNED_BY_JOB_NAME
            ),
            Vec::new(),
            &o.now,
        );
    }
    let backup = match &o.backup {
        BackupLookup::Found(b) => b,
        BackupLookup::Error(e) => {
            return fail(
                &status,
                &format!("failed to get Backup: {e}"),
                Vec::new(),
                &o.now,
            );
        }
    };
    let strategy = &backup.spec.strategy_ref;
    match strategy.api_group.as_deref() {
        None => {
            return fail(
                &status,
                "Backup has nil StrategyRef.APIGroup",
                Vec::new(),
                &o.now,
            );
        }
        Some(contract::groups::STRATEGY) => {}
        Some(other) => {
            return fail(
                &status,
                &format!("StrategyRef.APIGroup doesn't match: {other}"),
                Vec::new(),
                &o.now,
            );
        }
    }
    let Some(driver) = Driver::from_kind(&strategy.kind) else {
        return fail(
            &status,
            &format!("StrategyRef.Kind not supported: {}", strategy.kind),
            Vec::new(),
            &o.now,
        );
    };
    // Ours: a Backup whose phase says it is not usable (upstream writes `Failed` Backups into
    // the catalog) is refused before any projection. A Backup with no phase at all is restored,
    // as upstream does.
    if let Some(phase) = backup.status.as_ref().and_then(|s| s.phase.as_deref())
        && phase != contract::phases::READY
    {
        return fail(
            &status,
            &format!(
                "Backup {}/{} is not Ready (status.phase {phase:?}); only a Ready Backup can be restored",
                backup.metadata.namespace.as_deref().unwrap_or_default(),
                backup.metadata.name.as_deref().unwrap_or_default()
            ),
            Vec::new(),
            &o.now,
        );
    }
    if o.require_projection {
        let verdict = find_condition(&status.conditions, condition_types::CREDENTIALS_PROJECTED)
            .filter(|c| c.observed_generation == job.metadata.generation);
        match verdict {
            None => return Step::idle(),
            Some(c) if c.status == ConditionStatus::True => {
                // The projection is done: a pending wait it reported is over (Velero writes no
                // Ready condition of its own that would replace it).
                let mut next = status.clone();
                if crate::status::end_wait(&mut next, &[reasons::CREDENTIALS_PROJECTION_PENDING]) {
                    return Step::Status {
                        status: next,
                        events: Vec::new(),
                        requeue: None,
                    };
                }
            }
            Some(c) if projection_is_transient(&c.reason) => {
                let mut next = status.clone();
                crate::status::wait(
                    &mut next,
                    reasons::CREDENTIALS_PROJECTION_PENDING,
                    &c.message,
                    false,
                    &o.now,
                );
                // Nothing to write when Ready already says so; the projector's next verdict is
                // an event.
                return if next == status {
                    Step::idle()
                } else {
                    Step::Status {
                        status: next,
                        events: Vec::new(),
                        requeue: None,
                    }
                };
            }
            Some(c) => {
                return fail(
                    &status,
                    &format!("failed to project backup credentials: {}", c.message),
                    Vec::new(),
                    &o.now,
                );
            }
        }
    }
    Step::Dispatch(driver)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restore::skeleton::strategy_not_ready;
    use api::Condition;
    use api::backups::RestoreJobStatus;
    use pretty_assertions::assert_eq;
    use std::time::Duration;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    fn now() -> Time {
        t("2026-03-01T10:00:00Z")
    }

    fn job() -> RestoreJob {
        let mut j = RestoreJob::test("rj", "bk").namespace("t").build();
        j.metadata.generation = Some(1);
        j.metadata.finalizers = Some(vec![finalizers::CLEANUP.to_owned()]);
        j
    }

    fn with_conditions(mut j: RestoreJob, conditions: Vec<Condition>) -> RestoreJob {
        j.status.get_or_insert_with(Default::default).conditions = conditions;
        j
    }

    fn projected(status: ConditionStatus, reason: &str, generation: i64) -> Condition {
        Condition::new(
            condition_types::CREDENTIALS_PROJECTED,
            status,
            reason,
            format!("{reason} message"),
            t("2026-03-01T09:59:00Z"),
        )
        .observed(Some(generation))
    }

    fn backup(group: Option<&str>, kind: &str) -> Backup {
        let mut b = Backup::test("bk").namespace("t").build();
        b.spec.strategy_ref.api_group = group.map(str::to_owned);
        b.spec.strategy_ref.kind = kind.to_owned();
        b
    }

    fn decide_with(j: &RestoreJob, b: BackupLookup<'_>, require_projection: bool) -> Step {
        decide(&Observed {
            job: j,
            backup: b,
            require_projection,
            now: now(),
        })
    }

    /// The `(phase, Ready reason, message)` a status step writes.
    fn outcome(step: &Step) -> (Option<String>, String, Option<String>) {
        match step {
            Step::Status { status, .. } => (
                status.phase.clone(),
                crate::status::ready(&status.conditions)
                    .map(|c| c.reason.clone())
                    .unwrap_or_default(),
                status.message.clone(),
            ),
            other => panic!("not a status step: {other:?}"),
        }
    }

    fn failed_with(message: &str) -> (Option<String>, String, Option<String>) {
        (
            Some("Failed".into()),
            "RestoreFailed".into(),
            Some(message.into()),
        )
    }

    #[test]
    fn the_gates_in_upstreams_order() {
        let cnpg = backup(Some("strategy.backups.cozystack.io"), "CNPG");
        let j = job();
        let projected_ok = with_conditions(
            job(),
            vec![projected(ConditionStatus::True, "Projected", 1)],
        );
        let cases: Vec<(&str, RestoreJob, BackupLookup<'_>, bool, Step)> = vec![
            (
                "a missing Backup is terminal at once",
                j.clone(),
                BackupLookup::Error(not_found("bk")),
                true,
                fail(
                    &Default::default(),
                    "failed to get Backup: backups.backups.cozystack.io \"bk\" not found",
                    vec![],
                    &now(),
                ),
            ),
            (
                "dispatch once projected for this generation",
                projected_ok.clone(),
                BackupLookup::Found(&cnpg),
                true,
                Step::Dispatch(Driver::Cnpg),
            ),
            (
                "without projection configured the condition is not consulted",
                j.clone(),
                BackupLookup::Found(&cnpg),
                false,
                Step::Dispatch(Driver::Cnpg),
            ),
            (
                "no verdict yet: wait for the projector",
                j.clone(),
                BackupLookup::Found(&cnpg),
                true,
                Step::idle(),
            ),
            (
                "a verdict for an older generation is no verdict",
                with_conditions(
                    job(),
                    vec![projected(ConditionStatus::True, "Projected", 0)],
                ),
                BackupLookup::Found(&cnpg),
                true,
                Step::idle(),
            ),
        ];
        for (name, j, b, require, want) in cases {
            assert_eq!(decide_with(&j, b, require), want, "{name}");
        }
    }

    #[test]
    fn strategy_group_and_kind_fail_before_projection() {
        let j = job();
        for (group, kind, message) in [
            (None, "CNPG", "Backup has nil StrategyRef.APIGroup"),
            (
                Some("example.org"),
                "CNPG",
                "StrategyRef.APIGroup doesn't match: example.org",
            ),
            (
                Some("strategy.backups.cozystack.io"),
                "Custom",
                "StrategyRef.Kind not supported: Custom",
            ),
        ] {
            let b = backup(group, kind);
            assert_eq!(
                outcome(&decide_with(&j, BackupLookup::Found(&b), true)),
                failed_with(message)
            );
        }
    }

    #[test]
    fn a_backup_that_is_not_ready_and_a_name_too_long_for_a_label_fail_before_projection() {
        let mut b = backup(Some("strategy.backups.cozystack.io"), "MariaDB");
        b.status = Some(api::backups::BackupStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        assert_eq!(
            outcome(&decide_with(&job(), BackupLookup::Found(&b), true)),
            failed_with(
                r#"Backup t/bk is not Ready (status.phase "Failed"); only a Ready Backup can be restored"#
            )
        );
        // A Backup without a phase (written by an older controller) is restored.
        b.status = None;
        let projected_ok = with_conditions(
            job(),
            vec![projected(ConditionStatus::True, "Projected", 1)],
        );
        assert!(matches!(
            decide_with(&projected_ok, BackupLookup::Found(&b), true),
            Step::Dispatch(_)
        ));
        let mut long = job();
        long.metadata.name = Some("r".repeat(64));
        let (phase, reason, message) = outcome(&decide_with(&long, BackupLookup::Found(&b), true));
        assert_eq!(
            (phase.as_deref(), reason.as_str()),
            (Some("Failed"), "RestoreFailed")
        );
        assert!(
            message
                .unwrap()
                .starts_with("metadata.name is 64 characters long;"),
            "the message names the field"
        );
        long.metadata.name = Some("r".repeat(63));
        assert!(matches!(
            decide_with(&long, BackupLookup::Found(&b), false),
            Step::Dispatch(_)
        ));
    }

    #[test]
    fn projection_verdicts() {
        let b = backup(Some("strategy.backups.cozystack.io"), "MariaDB");
        for transient in ["SourceSecretMissing", "APIError"] {
            let j = with_conditions(job(), vec![projected(ConditionStatus::False, transient, 1)]);
            let step = decide_with(&j, BackupLookup::Found(&b), true);
            assert_eq!(
                outcome(&step),
                (None, "CredentialsProjectionPending".into(), None),
                "{transient} keeps the phase and waits"
            );
            // Written once: the same verdict again writes nothing.
            let Step::Status { status, .. } = step else {
                unreachable!()
            };
            let mut again = j.clone();
            again.status = Some(status.clone());
            assert_eq!(
                decide_with(&again, BackupLookup::Found(&b), true),
                Step::idle()
            );
            // The projection then succeeds: the wait is over, its Ready condition goes (one
            // write), and the next pass dispatches.
            let mut done = again.clone();
            let mut conditions = status.conditions.clone();
            conditions.retain(|c| c.type_ != condition_types::CREDENTIALS_PROJECTED);
            conditions.push(projected(ConditionStatus::True, "Projected", 1));
            done.status.as_mut().unwrap().conditions = conditions;
            let Step::Status { status: over, .. } =
                decide_with(&done, BackupLookup::Found(&b), true)
            else {
                panic!("the end of the wait is written");
            };
            assert_eq!(crate::status::ready(&over.conditions), None);
            assert_eq!(over.phase, None);
            done.status = Some(over);
            assert_eq!(
                decide_with(&done, BackupLookup::Found(&b), true),
                Step::Dispatch(Driver::MariaDb)
            );
        }
        for terminal in ["SourceSecretMalformed", "TargetSecretNotOwned", "Unknown"] {
            let j = with_conditions(job(), vec![projected(ConditionStatus::False, terminal, 1)]);
            assert_eq!(
                outcome(&decide_with(&j, BackupLookup::Found(&b), true)),
                failed_with(&format!(
                    "failed to project backup credentials: {terminal} message"
                ))
            );
        }
    }

    #[test]
    fn finalizer_first_even_for_terminal_jobs_then_nothing() {
        let b = backup(Some("strategy.backups.cozystack.io"), "CNPG");
        let mut j = job();
        j.metadata.finalizers = None;
        j.status = Some(RestoreJobStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        assert_eq!(
            decide_with(&j, BackupLookup::Found(&b), true),
            Step::AddFinalizer
        );
        // The orchestrator does not read the Backup of a finished job that is not being deleted:
        // the decision must be the same without it.
        for phase in ["Succeeded", "Failed"] {
            let mut finished = j.clone();
            finished.status.as_mut().unwrap().phase = Some(phase.into());
            let unread = BackupLookup::Error("not read".into());
            assert_eq!(
                decide_with(&finished, unread.clone(), true),
                decide_with(&finished, BackupLookup::Found(&b), true),
                "{phase}"
            );
        }
        j.metadata.finalizers = Some(vec![finalizers::CLEANUP.into()]);
        assert_eq!(
            decide_with(&j, BackupLookup::Error(not_found("bk")), true),
            Step::idle(),
            "terminal: no Backup lookup, no failure rewrite"
        );
    }

    fn deleting(mut j: RestoreJob) -> RestoreJob {
        j.metadata.deletion_timestamp = Some(now());
        j
    }

    #[test]
    fn cleanup_by_the_backups_kind() {
        let velero = backup(Some("strategy.backups.cozystack.io"), "Velero");
        let cnpg = backup(Some("strategy.backups.cozystack.io"), "CNPG");
        let etcd = backup(Some("strategy.backups.cozystack.io"), "Etcd");
        let mariadb = backup(Some("strategy.backups.cozystack.io"), "MariaDB");
        let foreign = backup(Some("strategy.backups.cozystack.io"), "Custom");
        let j = deleting(job());
        let labels = owned_by(&j);
        let sel = |api_version, kind| Selection {
            api_version,
            kind,
            namespace: "cozy-velero".into(),
            labels: labels.clone(),
        };
        let velero_steps = |announce: bool| {
            Step::Finalize(vec![
                Cleanup {
                    action: Action::DeleteAll(sel("velero.io/v1", "Restore")),
                    on_error: announce
                        .then_some(("CleanupFailed", "Failed to delete Velero Restore")),
                },
                Cleanup {
                    action: Action::DeleteAll(sel("v1", "ConfigMap")),
                    on_error: None,
                },
            ])
        };
        assert_eq!(
            decide_with(&j, BackupLookup::Found(&velero), true),
            velero_steps(true)
        );
        assert_eq!(
            decide_with(&j, BackupLookup::Error(not_found("bk")), true),
            velero_steps(false),
            "unreadable Backup: the speculative, silent Velero cleanup"
        );
        assert_eq!(
            decide_with(&j, BackupLookup::Found(&foreign), true),
            velero_steps(false)
        );
        for b in [&cnpg, &etcd, &mariadb] {
            assert_eq!(
                decide_with(&j, BackupLookup::Found(b), true),
                Step::Finalize(vec![]),
                "nothing was suspended yet"
            );
        }
        // Mid-flight CNPG past the gate, into a copy: resume postgres-<target>.
        let mut mid = with_conditions(
            job(),
            vec![Condition::new(
                "WALArchiveReady",
                ConditionStatus::True,
                "ArchiveCaughtUp",
                "",
                now(),
            )],
        );
        mid.spec.target_application_ref =
            Some(api::TypedLocalObjectReference::new("", "Postgres", "copy"));
        let mid = deleting(mid);
        assert_eq!(
            decide_with(&mid, BackupLookup::Found(&cnpg), true),
            Step::Finalize(vec![Cleanup {
                action: Action::SetSuspend {
                    release: helm_release("t", "postgres-copy"),
                    suspend: false,
                },
                on_error: None,
            }])
        );
        // Mid-flight Etcd after the spec capture: resume the release named after the app.
        let mid = deleting(with_conditions(
            job(),
            vec![Condition::new(
                "EtcdClusterSpecCaptured",
                ConditionStatus::True,
                "SpecCaptured",
                "{}",
                now(),
            )],
        ));
        let mut etcd_db = etcd.clone();
        etcd_db.spec.application_ref.name = "etcd".into();
        assert_eq!(
            decide_with(&mid, BackupLookup::Found(&etcd_db), true),
            Step::Finalize(vec![Cleanup {
                action: Action::SetSuspend {
                    release: helm_release("t", "etcd"),
                    suspend: false,
                },
                on_error: None,
            }])
        );
        // Without the finalizer a deleting job is left alone.
        let mut gone = deleting(job());
        gone.metadata.finalizers = None;
        assert_eq!(
            decide_with(&gone, BackupLookup::Found(&velero), true),
            Step::idle()
        );
    }

    #[test]
    fn strategy_not_ready_waits_thirty_minutes_from_started_at() {
        let mut s = RestoreJobStatus {
            started_at: Some(t("2026-03-01T09:40:00Z")),
            ..Default::default()
        };
        let step = strategy_not_ready(&s, "cozy-default-cnpg", &now());
        let Step::Status {
            status, requeue, ..
        } = &step
        else {
            panic!("{step:?}")
        };
        let ready = crate::status::ready(&status.conditions).unwrap();
        assert_eq!(
            (ready.reason.as_str(), ready.message.as_str(), *requeue),
            (
                "StrategyNotReady",
                "Strategy \"cozy-default-cnpg\" referenced by Backup is not yet provisioned; the platform may still be initialising backup storage",
                Some(Duration::from_secs(10 * 60))
            )
        );
        s.started_at = Some(t("2026-03-01T09:29:59Z"));
        assert_eq!(
            outcome(&strategy_not_ready(&s, "cozy-default-cnpg", &now())),
            failed_with(
                "Strategy \"cozy-default-cnpg\" referenced by Backup was not provisioned within 30m0s; check the strategyRef name or the platform backup-storage bootstrap"
            )
        );
    }
}
