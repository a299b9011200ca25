//! The `CredentialsProjected` condition, built as a pure function of the projection result.
//!
//! True (`Projected`) once the job's namespace holds an up-to-date copy; False with upstream's reason
//! and message otherwise. `observedGeneration` is the job's generation, so a consumer can tell a
//! verdict for the current spec from a stale one. The transition time follows
//! `meta.SetStatusCondition`: kept unless the status flips.

use api::contract::{condition_types, reasons};
use api::{Condition, ConditionStatus};
use backup_storage::credentials::ProjectionError;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::project::Outcome;

/// The condition for a projection result.
pub fn credentials_projected(
    result: &Result<Outcome, ProjectionError>,
    namespace: &str,
    target: &str,
    generation: Option<i64>,
    now: Time,
) -> Condition {
    let (status, reason, message) = match result {
        Ok(_) => (
            ConditionStatus::True,
            reasons::PROJECTED,
            format!("credentials Secret {namespace}/{target} is up to date"),
        ),
        Err(e) => (ConditionStatus::False, e.reason.as_str(), e.message.clone()),
    };
    Condition::new(
        condition_types::CREDENTIALS_PROJECTED,
        status,
        reason,
        message,
        now,
    )
    .observed(generation)
}

/// The condition to apply, or `None` when `existing` already says the same (no write).
pub fn to_apply(existing: &[Condition], new: Condition) -> Option<Condition> {
    let mut list: Vec<Condition> = existing
        .iter()
        .filter(|c| c.type_ == condition_types::CREDENTIALS_PROJECTED)
        .cloned()
        .collect();
    api::meta::set_condition(&mut list, new).then(|| list.remove(0))
}

/// True when the job already has `CredentialsProjected=True` for its current generation: the
/// projection is done, and the rotation path keeps the copy fresh from here on.
pub fn is_done(existing: &[Condition], generation: Option<i64>) -> bool {
    api::meta::find_condition(existing, condition_types::CREDENTIALS_PROJECTED)
        .is_some_and(|c| c.is_true() && c.observed_generation == generation)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn t(s: i64) -> Time {
        Time(Timestamp::from_second(s).unwrap())
    }

    #[test]
    fn true_and_false_conditions_carry_reason_message_and_generation() {
        let ok = credentials_projected(
            &Ok(Outcome::Created),
            "ns",
            "cozy-backups-creds",
            Some(3),
            t(1),
        );
        assert_eq!(
            ok,
            Condition {
                type_: "CredentialsProjected".into(),
                status: ConditionStatus::True,
                reason: "Projected".into(),
                message: "credentials Secret ns/cozy-backups-creds is up to date".into(),
                last_transition_time: t(1),
                observed_generation: Some(3),
            }
        );
        let missing = credentials_projected(
            &Err(ProjectionError::source_missing("tenant-root", "src")),
            "ns",
            "cozy-backups-creds",
            Some(3),
            t(1),
        );
        assert_eq!(
            (
                missing.status,
                missing.reason.as_str(),
                missing.message.as_str()
            ),
            (
                ConditionStatus::False,
                "SourceSecretMissing",
                "source credentials Secret tenant-root/src not found"
            )
        );
    }

    #[test]
    fn identical_conditions_are_not_reapplied_and_transition_time_is_kept() {
        let c = |s: i64, gen_: i64| {
            credentials_projected(&Ok(Outcome::Unchanged), "ns", "x", Some(gen_), t(s))
        };
        let existing = vec![c(10, 1)];
        assert_eq!(to_apply(&existing, c(20, 1)), None);
        let bumped = to_apply(&existing, c(20, 2)).unwrap();
        assert_eq!(bumped.last_transition_time, t(10), "status did not flip");
        assert_eq!(bumped.observed_generation, Some(2));
        assert!(is_done(&existing, Some(1)));
        assert!(!is_done(&existing, Some(2)));
        assert!(!is_done(&[], Some(1)));
        let failed = credentials_projected(
            &Err(ProjectionError::source_missing("a", "b")),
            "ns",
            "x",
            Some(1),
            t(30),
        );
        assert_eq!(
            to_apply(&existing, failed).unwrap().last_transition_time,
            t(30)
        );
    }
}
