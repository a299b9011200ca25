//! The top of every BackupJob reconcile, in upstream's order, as one pure decision:
//!
//! ```text
//!  terminal phase ─► stop
//!  BackupClass missing ─► Ready=False/BackupClassNotFound (transient, no deadline)
//!  no route for the application ─► Failed ("… does not bind a strategy for Kind …")
//!  strategy group nil or foreign ─► left alone (a third-party driver owns it)
//!  strategy kind not ours ─► Failed ("strategy Kind … is not supported …") before any projection
//!  CredentialsProjected for this generation? ─► not yet: wait │ transient: Ready=False/Pending
//!                                               terminal: Failed ("failed to project …")
//!  ─► dispatch to the driver of the strategy kind
//! ```

use ::drivers::Driver;
use api::backups::{BackupClassSpec, BackupJob, ResolvedStrategy};
use api::contract::{self, condition_types, phases, reasons};
use api::{ConditionStatus, TypedLocalObjectReference};

/// What to do with a BackupJob before any driver runs.
#[derive(Clone, Debug, PartialEq)]
pub enum Gate {
    /// Succeeded or Failed: nothing.
    Terminal,
    /// The BackupClass does not exist (yet): `Ready=False/BackupClassNotFound`, wait for it.
    ClassNotFound(String),
    /// Terminal failure with this message.
    Fail(String),
    /// Not ours (a nil or foreign strategy group): write nothing, ever.
    NotOurs,
    /// The projector has not reported for this generation yet: wait (its condition is an event).
    AwaitProjection,
    /// The projection failed transiently: `Ready=False/CredentialsProjectionPending`.
    ProjectionPending(String),
    /// Run the driver of the strategy kind.
    Dispatch {
        /// The driver of the strategy kind.
        driver: Driver,
        /// The resolved route.
        resolved: ResolvedStrategy,
        /// The normalised application reference.
        app: TypedLocalObjectReference,
    },
}

/// Decides the gate. `class` is the named BackupClass's spec when it exists.
pub fn gate(job: &BackupJob, class: Option<&BackupClassSpec>, require_projection: bool) -> Gate {
    let status = job.status.clone().unwrap_or_default();
    if phases::is_terminal(status.phase.as_deref()) {
        return Gate::Terminal;
    }
    let app = job.spec.application_ref.normalized();
    let class_name = &job.spec.backup_class_name;
    let Some(class) = class else {
        return Gate::ClassNotFound(format!(
            "BackupClass {class_name:?} not found; the platform may still be bootstrapping"
        ));
    };
    let Some(resolved) = class.resolve(&app) else {
        return Gate::Fail(format!(
            "BackupClass {class_name:?} does not bind a strategy for Kind {:?}; see docs/operations/backup-classes.md",
            app.kind
        ));
    };
    match resolved.strategy_ref.api_group.as_deref() {
        Some(contract::groups::STRATEGY) => {}
        _ => return Gate::NotOurs,
    }
    let Some(driver) = Driver::from_kind(&resolved.strategy_ref.kind) else {
        return Gate::Fail(format!(
            "strategy Kind {:?} is not supported by this controller (supported: {})",
            resolved.strategy_ref.kind,
            contract::SUPPORTED_STRATEGY_KINDS.join(", ")
        ));
    };
    if require_projection {
        let projected = status
            .conditions
            .iter()
            .find(|c| c.type_ == condition_types::CREDENTIALS_PROJECTED)
            .filter(|c| c.observed_generation == job.metadata.generation);
        match projected {
            None => return Gate::AwaitProjection,
            Some(c) if c.status == ConditionStatus::True => {}
            Some(c) if is_transient(&c.reason) => {
                return Gate::ProjectionPending(c.message.clone());
            }
            Some(c) => {
                return Gate::Fail(format!(
                    "failed to project backup credentials: {}",
                    c.message
                ));
            }
        }
    }
    Gate::Dispatch {
        driver,
        resolved,
        app,
    }
}

/// Upstream's transient projection reasons; every other failure reason is terminal.
pub fn is_transient(reason: &str) -> bool {
    reason == reasons::SOURCE_SECRET_MISSING || reason == reasons::API_ERROR
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::backups::BackupClass;
    use api::contract::groups;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use pretty_assertions::assert_eq;

    fn class() -> BackupClassSpec {
        BackupClass::test("cozy-default")
            .route("Postgres", "CNPG", "cozy-default-cnpg")
            .route_to("NATS", "example.org", "Custom", "x", &[])
            .route("Widget", "MadeUpKind", "x")
            .build()
            .spec
    }

    fn job(kind: &str) -> BackupJob {
        let mut j = BackupJob::test("j")
            .namespace("t")
            .for_app(kind, "db")
            .build();
        j.metadata.generation = Some(1);
        j
    }

    fn projected(
        mut j: BackupJob,
        status: ConditionStatus,
        reason: &str,
        generation: i64,
    ) -> BackupJob {
        let mut s = j.status.take().unwrap_or_default();
        s.conditions.push(api::Condition {
            observed_generation: Some(generation),
            ..api::Condition::new(
                condition_types::CREDENTIALS_PROJECTED,
                status,
                reason,
                format!("message of {reason}"),
                Time("2026-01-01T00:00:00Z".parse().unwrap()),
            )
        });
        j.status = Some(s);
        j
    }

    #[test]
    fn gates_in_upstream_order() {
        let c = class();
        let ok = |j: &BackupJob| gate(j, Some(&c), true);
        let mut done = job("Postgres");
        done.status = Some(api::backups::BackupJobStatus {
            phase: Some("Failed".into()),
            ..Default::default()
        });
        assert_eq!(ok(&done), Gate::Terminal);
        assert_eq!(
            gate(&job("Postgres"), None, true),
            Gate::ClassNotFound(
                "BackupClass \"cozy-default\" not found; the platform may still be bootstrapping"
                    .into()
            )
        );
        assert_eq!(
            ok(&job("FoundationDB")),
            Gate::Fail(
                "BackupClass \"cozy-default\" does not bind a strategy for Kind \"FoundationDB\"; see docs/operations/backup-classes.md".into()
            )
        );
        assert_eq!(ok(&job("NATS")), Gate::NotOurs);
        // Unsupported kinds fail before the projection is even looked at.
        assert_eq!(
            ok(&job("Widget")),
            Gate::Fail(
                "strategy Kind \"MadeUpKind\" is not supported by this controller (supported: Job, Velero, CNPG, Altinity, MariaDB, MongoDB, FoundationDB, Etcd)".into()
            )
        );
        assert_eq!(ok(&job("Postgres")), Gate::AwaitProjection);
    }

    #[test]
    fn the_projectors_condition_for_this_generation_decides() {
        let c = class();
        let ok = |j: &BackupJob| gate(j, Some(&c), true);
        let stale = projected(job("Postgres"), ConditionStatus::True, "Projected", 0);
        assert_eq!(
            ok(&stale),
            Gate::AwaitProjection,
            "an older generation's condition"
        );
        let pending = projected(
            job("Postgres"),
            ConditionStatus::False,
            "SourceSecretMissing",
            1,
        );
        assert_eq!(
            ok(&pending),
            Gate::ProjectionPending("message of SourceSecretMissing".into())
        );
        let api_error = projected(job("Postgres"), ConditionStatus::False, "APIError", 1);
        assert!(matches!(ok(&api_error), Gate::ProjectionPending(_)));
        for terminal in ["SourceSecretMalformed", "TargetSecretNotOwned"] {
            let j = projected(job("Postgres"), ConditionStatus::False, terminal, 1);
            assert_eq!(
                ok(&j),
                Gate::Fail(format!(
                    "failed to project backup credentials: message of {terminal}"
                ))
            );
        }
        let done = projected(job("Postgres"), ConditionStatus::True, "Projected", 1);
        let Gate::Dispatch {
            driver,
            resolved,
            app,
        } = ok(&done)
        else {
            panic!("dispatch expected");
        };
        assert_eq!(driver, Driver::Cnpg);
        assert_eq!(resolved.strategy_ref.name, "cozy-default-cnpg");
        assert_eq!(app.api_group.as_deref(), Some(groups::APPS));
        // Without the projection requirement the condition is not consulted.
        assert!(matches!(
            gate(&job("Postgres"), Some(&c), false),
            Gate::Dispatch { .. }
        ));
    }
}
