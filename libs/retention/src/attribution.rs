//! Which Backups and BackupJobs a Plan governs.
//!
//! A Plan's BackupJob is named `<plan>-<unix minutes of its slot>` (shortened with a hash for long
//! Plan names, see `schedule::backup_job_name`), carries `spec.planRef` and the Plan's normalised
//! `applicationRef`; the catalog Backup it produces copies the job's name, `planRef` and
//! `applicationRef`. An object is the Plan's only when all three agree: the `planRef` names the
//! Plan, the name is exactly the one the Plan would give some slot, and the application is the
//! Plan's. Catalog Backups carry no labels and no ownerReferences, so these persisted fields are
//! the only evidence that survives the BackupJob; the BackupJob's ownerReference is not needed.
//!
//! Invariant: an ad-hoc Backup (no `planRef`), a safety backup taken by a restore (labelled
//! `backups.cozystack.io/safety-backup`), a Backup of another application that happens to carry
//! the Plan's name pattern, and a Backup whose `planRef` names the Plan but whose name the Plan
//! could not have produced are never attributed, so Plan retention never deletes them.

use api::backups::{Backup, BackupJob, Plan};
use api::contract::labels;
use api::{LocalObjectReference, TypedLocalObjectReference};
use chrono::DateTime;

/// True when `name` is the name `plan` gives the BackupJob of some schedule slot.
pub fn is_slot_name(plan: &str, name: &str) -> bool {
    let Some((_, digits)) = name.rsplit_once('-') else {
        return false;
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let Some(slot) = digits
        .parse::<i64>()
        .ok()
        .and_then(|minutes| minutes.checked_mul(60))
        .and_then(|seconds| DateTime::from_timestamp(seconds, 0))
    else {
        return false;
    };
    schedule::backup_job_name(plan, slot) == name
}

fn same_app(a: &TypedLocalObjectReference, b: &TypedLocalObjectReference) -> bool {
    a.kind == b.kind && a.name == b.name && a.normalized_group() == b.normalized_group()
}

fn governed(
    plan: &Plan,
    name: Option<&str>,
    plan_ref: Option<&LocalObjectReference>,
    app: &TypedLocalObjectReference,
) -> bool {
    let plan_name = plan.metadata.name.as_deref().unwrap_or_default();
    !plan_name.is_empty()
        && plan_ref.is_some_and(|r| r.name == plan_name)
        && name.is_some_and(|n| is_slot_name(plan_name, n))
        && same_app(app, &plan.spec.application_ref)
}

/// True when `backup` is a safety backup taken by a restore.
pub fn is_safety_backup(backup: &Backup) -> bool {
    backup
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::SAFETY_BACKUP))
        .is_some_and(|v| v == "true")
}

/// True when `plan` governs the catalog Backup `backup`.
pub fn backup_of(plan: &Plan, backup: &Backup) -> bool {
    !is_safety_backup(backup)
        && governed(
            plan,
            backup.metadata.name.as_deref(),
            backup.spec.plan_ref.as_ref(),
            &backup.spec.application_ref,
        )
}

/// True when `plan` governs `job`.
pub fn job_of(plan: &Plan, job: &BackupJob) -> bool {
    governed(
        plan,
        job.metadata.name.as_deref(),
        job.spec.plan_ref.as_ref(),
        &job.spec.application_ref,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn slot_names() {
        let long = "a".repeat(60);
        let slot = DateTime::from_timestamp(28_401_240 * 60, 0).unwrap();
        let cases: &[(&str, &str, bool)] = &[
            ("nightly", "nightly-28401240", true),
            ("nightly", "nightly-0", true),
            ("nightly", "nightly-", false),
            ("nightly", "nightly-12a", false),
            ("nightly", "nightly-x-28401240", false),
            ("nightly", "nightly2-28401240", false),
            ("nightly", "other-28401240", false),
            ("nightly", "nightly-028401240", false), // not how the Plan spells it
            ("nightly", "nightly-99999999999999999999", false),
            ("nightly", "manual", false),
            (&long, &schedule::backup_job_name(&long, slot), true),
            (&long, &format!("{long}-28401240"), false),
        ];
        for (plan, name, want) in cases {
            assert_eq!(is_slot_name(plan, name), *want, "{plan} / {name}");
        }
    }

    #[test]
    fn attribution() {
        let plan = Plan::test("nightly", "@daily")
            .for_app("Postgres", "db")
            .build();
        let ours = || {
            let mut b = Backup::test("nightly-28401240")
                .for_app("Postgres", "db")
                .build();
            b.spec.plan_ref = Some(LocalObjectReference::new("nightly"));
            b
        };
        assert!(backup_of(&plan, &ours()));

        let mut explicit_group = ours();
        explicit_group.spec.application_ref.api_group = Some("apps.cozystack.io".into());
        assert!(
            backup_of(&plan, &explicit_group),
            "an empty group is apps.cozystack.io"
        );

        let mut ad_hoc = ours();
        ad_hoc.spec.plan_ref = None;
        assert!(!backup_of(&plan, &ad_hoc), "no planRef: ad hoc");

        let mut other_plan = ours();
        other_plan.spec.plan_ref = Some(LocalObjectReference::new("weekly"));
        assert!(!backup_of(&plan, &other_plan));

        let mut other_app = ours();
        other_app.spec.application_ref.name = "db2".into();
        assert!(!backup_of(&plan, &other_app));

        let mut renamed = ours();
        renamed.metadata.name = Some("before-upgrade".into());
        assert!(
            !backup_of(&plan, &renamed),
            "a name the Plan cannot produce"
        );

        let mut safety = ours();
        safety.metadata.labels = Some(BTreeMap::from([(
            labels::SAFETY_BACKUP.to_owned(),
            "true".to_owned(),
        )]));
        assert!(!backup_of(&plan, &safety));

        let job = BackupJob::test("nightly-28401240")
            .for_app("Postgres", "db")
            .plan("nightly")
            .build();
        assert!(job_of(&plan, &job));
        let ad_hoc_job = BackupJob::test("nightly-28401240")
            .for_app("Postgres", "db")
            .build();
        assert!(!job_of(&plan, &ad_hoc_job));
    }
}
