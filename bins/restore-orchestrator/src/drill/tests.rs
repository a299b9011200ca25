use super::*;
use api::backups::{BackupStatus, BackupVerification};
use api::meta::LocalObjectReference;

fn at(s: &str) -> Timestamp {
    s.parse().expect("a timestamp")
}

fn plan(verification: Option<PlanVerification>) -> Plan {
    let mut p = Plan::test("nightly", "0 2 * * *").namespace("t").build();
    p.metadata.creation_timestamp = Some(Time(at("2026-01-01T00:00:00Z")));
    p.spec.verification = verification;
    p
}

fn every(n: i32) -> PlanVerification {
    PlanVerification {
        every: Some(n),
        ..Default::default()
    }
}

fn cron(spec: &str) -> PlanVerification {
    PlanVerification {
        schedule: Some(spec.into()),
        ..Default::default()
    }
}

fn backup(name: &str, taken: &str, verified: Option<(&str, &str)>) -> Backup {
    let mut b = Backup::test(name).namespace("t").build();
    b.metadata.uid = Some(format!("uid-{name}"));
    b.spec.plan_ref = Some(LocalObjectReference::new("nightly"));
    b.spec.taken_at = Time(at(taken));
    b.status = Some(BackupStatus {
        phase: Some(phases::READY.into()),
        verification: verified.map(|(when, result)| BackupVerification {
            last_verified_at: Some(Time(at(when))),
            result: Some(result.into()),
            ..Default::default()
        }),
        ..Default::default()
    });
    b
}

fn due_name(p: &Plan, backups: &[Backup], now: &str) -> Option<String> {
    let rule = validate(p).expect("valid").expect("drills");
    let ours = plan_backups(p, backups);
    due(&rule, p, &ours, at(now)).and_then(|b| b.metadata.name.clone())
}

#[test]
fn no_verification_block_means_no_drills() {
    assert_eq!(validate(&plan(None)), Ok(None));
}

#[test]
fn invalid_blocks_name_the_field() {
    let field = |v: PlanVerification| validate(&plan(Some(v))).unwrap_err().field;
    assert_eq!(field(PlanVerification::default()), "spec.verification");
    assert_eq!(
        field(PlanVerification {
            every: Some(1),
            schedule: Some("@daily".into()),
            ..Default::default()
        }),
        "spec.verification"
    );
    assert_eq!(field(every(0)), "spec.verification.every");
    assert_eq!(field(every(-3)), "spec.verification.every");
    assert_eq!(field(cron("61 * * * *")), "spec.verification.schedule");
    assert_eq!(
        field(cron("CRON_TZ=Mars/Olympus 0 2 * * *")),
        "spec.verification.schedule"
    );
    assert_eq!(
        field(PlanVerification {
            sql: Some("  ".into()),
            ..every(1)
        }),
        "spec.verification.sql"
    );
    assert_eq!(
        field(PlanVerification {
            timeout_seconds: Some(0),
            ..every(1)
        }),
        "spec.verification.timeoutSeconds"
    );
    let text = validate(&plan(Some(every(0)))).unwrap_err().to_string();
    assert!(
        text.starts_with("spec.verification.every: must be at least 1, got 0"),
        "{text}"
    );
}

#[test]
fn defaults_and_settings_of_a_valid_block() {
    let r = validate(&plan(Some(every(3)))).unwrap().unwrap();
    assert_eq!(r.when, When::Every(3));
    assert_eq!(r.timeout, DEFAULT_TIMEOUT);
    assert_eq!(r.sql, None);
    let r = validate(&plan(Some(PlanVerification {
        sql: Some(" SELECT 1 FROM orders LIMIT 1 ".into()),
        timeout_seconds: Some(90),
        ..cron("@daily")
    })))
    .unwrap()
    .unwrap();
    assert_eq!(r.timeout, Duration::from_secs(90));
    assert_eq!(r.sql.as_deref(), Some("SELECT 1 FROM orders LIMIT 1"));
    assert!(matches!(r.when, When::Schedule(_)));
}

#[test]
fn every_n_counts_successful_backups_since_the_last_drilled_one() {
    let p = plan(Some(every(2)));
    let now = "2026-01-10T00:00:00Z";
    // Nothing yet, then one Backup: not enough.
    assert_eq!(due_name(&p, &[], now), None);
    let b1 = backup("b1", "2026-01-01T02:00:00Z", None);
    assert_eq!(due_name(&p, std::slice::from_ref(&b1), now), None);
    // Two undrilled: the newest is due.
    let b2 = backup("b2", "2026-01-02T02:00:00Z", None);
    assert_eq!(
        due_name(&p, &[b1.clone(), b2.clone()], now).as_deref(),
        Some("b2")
    );
    // b2 drilled (even Failed): one since is not enough, two are.
    let b2v = backup(
        "b2",
        "2026-01-02T02:00:00Z",
        Some(("2026-01-02T03:00:00Z", "Failed")),
    );
    let b3 = backup("b3", "2026-01-03T02:00:00Z", None);
    assert_eq!(
        due_name(&p, &[b1.clone(), b2v.clone(), b3.clone()], now),
        None
    );
    let b4 = backup("b4", "2026-01-04T02:00:00Z", None);
    assert_eq!(
        due_name(&p, &[b1, b2v, b3, b4.clone()], now).as_deref(),
        Some("b4")
    );
    // every: 1 drills each new Backup.
    let p1 = plan(Some(every(1)));
    assert_eq!(
        due_name(&p1, std::slice::from_ref(&b4), now).as_deref(),
        Some("b4")
    );
}

#[test]
fn every_n_ignores_failed_other_plans_and_deleting_backups() {
    let p = plan(Some(every(1)));
    let now = "2026-01-10T00:00:00Z";
    let mut failed = backup("f", "2026-01-05T00:00:00Z", None);
    failed.status.as_mut().unwrap().phase = Some(phases::FAILED.into());
    let mut other = backup("o", "2026-01-05T00:00:00Z", None);
    other.spec.plan_ref = Some(LocalObjectReference::new("weekly"));
    let mut going = backup("g", "2026-01-05T00:00:00Z", None);
    going.metadata.deletion_timestamp = Some(Time(at("2026-01-06T00:00:00Z")));
    let mut elsewhere = backup("e", "2026-01-05T00:00:00Z", None);
    elsewhere.metadata.namespace = Some("other".into());
    assert_eq!(due_name(&p, &[failed, other, going, elsewhere], now), None);
}

#[test]
fn a_cron_drill_is_due_once_per_slot_and_verifies_the_newest_backup() {
    let p = plan(Some(cron("0 4 * * *")));
    let b1 = backup("b1", "2026-01-01T02:00:00Z", None);
    let b2 = backup("b2", "2026-01-02T02:00:00Z", None);
    let both = [b1.clone(), b2.clone()];
    // The first slot after the Plan's creation is 2026-01-01T04:00.
    assert_eq!(due_name(&p, &both, "2026-01-01T03:59:59Z"), None);
    assert_eq!(
        due_name(&p, &both, "2026-01-02T05:00:00Z").as_deref(),
        Some("b2")
    );
    // Verified at 05:00 on the 2nd: the next slot is the 3rd at 04:00.
    let b2v = backup(
        "b2",
        "2026-01-02T02:00:00Z",
        Some(("2026-01-02T05:00:00Z", "Passed")),
    );
    let after = [b1.clone(), b2v.clone()];
    assert_eq!(due_name(&p, &after, "2026-01-03T03:59:00Z"), None);
    assert_eq!(
        due_name(&p, &after, "2026-01-03T04:00:00Z").as_deref(),
        Some("b2")
    );
    // CRON_TZ is honoured: 04:00 in Berlin is 03:00 UTC in winter.
    let pz = plan(Some(cron("CRON_TZ=Europe/Berlin 0 4 * * *")));
    assert_eq!(
        due_name(&pz, &after, "2026-01-03T03:00:00Z").as_deref(),
        Some("b2")
    );
    assert_eq!(due_name(&pz, &after, "2026-01-03T02:59:59Z"), None);
}

#[test]
fn scratch_names_are_deterministic_short_and_distinct() {
    let a = scratch_name("orders-db", "uid-1");
    assert_eq!(a, scratch_name("orders-db", "uid-1"));
    assert!(a.starts_with("orders-db-verify-"), "{a}");
    assert_eq!(a.len(), "orders-db-verify-".len() + 8);
    assert!(
        a["orders-db-verify-".len()..]
            .chars()
            .all(|c| c.is_ascii_hexdigit())
    );
    assert_ne!(a, scratch_name("orders-db", "uid-2"));
    let long = scratch_name(&"a-".repeat(60), "uid-1");
    assert!(long.len() <= MAX_SCRATCH_NAME_LEN, "{long}");
    assert!(!long.contains("--verify"), "{long}");
    // A fixed value: the hash is the same on every release (names found after an upgrade).
    assert_eq!(scratch_name("db", ""), "db-verify-cbf29ce4");
}

#[test]
fn the_state_round_trips_and_concludes() {
    let b = backup("b1", "2026-01-01T02:00:00Z", None);
    let rule = validate(&plan(Some(PlanVerification {
        sql: Some("SELECT 1".into()),
        timeout_seconds: Some(60),
        ..every(1)
    })))
    .unwrap()
    .unwrap();
    let s = State::start(&b, &rule, at("2026-01-01T03:00:00Z"));
    assert_eq!(s.phase, Phase::Restoring);
    assert_eq!(s.scratch, scratch_name("db", "uid-b1"));
    let text = serde_json::to_string(&s).unwrap();
    assert!(text.contains("\"phase\":\"Restoring\""), "{text}");
    assert_eq!(serde_json::from_str::<State>(&text).unwrap(), s);
    assert!(!s.overdue(at("2026-01-01T03:00:59Z")));
    assert!(s.overdue(at("2026-01-01T03:01:00Z")));
    let done = s.conclude(drills::FAILED, "why".into(), at("2026-01-01T03:02:00Z"));
    assert_eq!(done.phase, Phase::CleaningUp);
    let v = done.verification(at("2026-01-01T03:03:00Z"));
    assert_eq!(v.result.as_deref(), Some("Failed"));
    assert_eq!(v.message.as_deref(), Some("why"));
    let mut with = b.clone();
    with.metadata.annotations =
        Some([(drills::STATE_ANNOTATION.to_owned(), "{".to_owned())].into());
    assert!(matches!(State::of(&with), Some(Err(_))));
    assert!(State::of(&b).is_none());
}

#[test]
fn last_passed_ignores_failed_drills() {
    let a = backup(
        "a",
        "2026-01-01T02:00:00Z",
        Some(("2026-01-01T03:00:00Z", "Passed")),
    );
    let b = backup(
        "b",
        "2026-01-02T02:00:00Z",
        Some(("2026-01-02T03:00:00Z", "Failed")),
    );
    assert_eq!(last_passed(&[&a, &b]), Some(at("2026-01-01T03:00:00Z")));
    assert_eq!(last_passed(&[&b]), None);
}

#[test]
fn scratch_applications_are_recognised_by_label() {
    let labelled = [(drills::LABEL.to_owned(), "true".to_owned())].into();
    assert!(is_scratch(Some(&labelled)));
    assert!(!is_scratch(Some(&Default::default())));
    assert!(!is_scratch(None));
}

#[test]
fn the_scratch_copy_keeps_the_source_spec_without_chart_wired_backups() {
    use serde_json::json;
    let source = json!({"size": "1Gi", "replicas": 2,
        "backup": {"enabled": true, "destinationPath": "s3://b/p/", "schedule": "0 2 * * *"}});
    assert_eq!(
        scratch_spec(Some(&source)),
        json!({"size": "1Gi", "replicas": 2,
            "backup": {"enabled": false, "destinationPath": "s3://b/p/", "schedule": "0 2 * * *"}})
    );
    let plain = json!({"size": "1Gi", "replicas": 1});
    assert_eq!(scratch_spec(Some(&plain)), plain);
    assert_eq!(scratch_spec(None), json!({}));
    assert_eq!(scratch_spec(Some(&json!("odd"))), json!({}));
}
