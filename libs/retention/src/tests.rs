//! Whole sweeps over fixtures: what a namespace's objects become. Long because each retention
//! rule, floor and refusal has its own fixture and expected decision list; they share the
//! builders at the top.

use std::collections::BTreeMap;

use api::LocalObjectReference;
use api::backups::{
    Backup, BackupJob, BackupJobStatus, BackupStatus, Plan, RestoreJob, RestoreJobStatus,
    RetentionPolicy,
};
use api::contract::{event_reasons as r, labels, phases};
use api::meta::{Condition, ConditionStatus};
use chrono::{DateTime, Duration as Delta, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use pretty_assertions::assert_eq;
use serde_json::{Value as Json, json};

use super::*;

const NS: &str = "t";

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn time(t: DateTime<Utc>) -> Time {
    Time(t.to_rfc3339().parse().unwrap())
}

/// `now` of every sweep below.
fn now() -> DateTime<Utc> {
    at("2026-03-10T12:00:00Z")
}

fn plan(name: &str, cron: &str, policy: RetentionPolicy) -> Plan {
    let mut p = Plan::test(name, cron)
        .namespace(NS)
        .for_app("Postgres", "db")
        .build();
    p.spec.retention_policy = Some(policy);
    p
}

fn keep_last(n: i32) -> RetentionPolicy {
    RetentionPolicy {
        keep_last: Some(n),
        ..Default::default()
    }
}

/// A successful Backup of `plan` taken at `t` (named as the Plan names its slot).
fn ok(plan: &str, t: DateTime<Utc>) -> Backup {
    let name = schedule::backup_job_name(plan, t);
    let mut b = Backup::test(&name)
        .namespace(NS)
        .for_app("Postgres", "db")
        .build();
    b.spec.plan_ref = Some(LocalObjectReference::new(plan));
    b.spec.taken_at = time(t);
    b.metadata.creation_timestamp = Some(time(t + Delta::minutes(5)));
    b.status = Some(BackupStatus {
        phase: Some(phases::READY.into()),
        ..Default::default()
    });
    b
}

/// `n` daily successes of `plan` at 02:00 UTC, the newest `days_ago` days before now.
fn daily(plan: &str, n: i64) -> Vec<Backup> {
    (0..n)
        .map(|i| ok(plan, at("2026-03-10T02:00:00Z") - Delta::days(i)))
        .collect()
}

fn failed_job(
    name: &str,
    plan: Option<&str>,
    completed: DateTime<Utc>,
    message: &str,
) -> BackupJob {
    let mut b = BackupJob::test(name)
        .namespace(NS)
        .for_app("Postgres", "db");
    if let Some(p) = plan {
        b = b.plan(p);
    }
    let mut j = b.build();
    j.metadata.creation_timestamp = Some(time(completed - Delta::minutes(10)));
    j.status = Some(BackupJobStatus {
        phase: Some(phases::FAILED.into()),
        completed_at: Some(time(completed)),
        message: Some(message.into()),
        ..Default::default()
    });
    j
}

fn failed_backup(name: &str, created: DateTime<Utc>, message: &str) -> Backup {
    let mut b = Backup::test(name)
        .namespace(NS)
        .for_app("Postgres", "db")
        .build();
    b.metadata.creation_timestamp = Some(time(created));
    b.status = Some(BackupStatus {
        phase: Some(phases::FAILED.into()),
        conditions: vec![Condition::new(
            "Ready",
            ConditionStatus::False,
            "BackupFailed",
            message,
            time(created),
        )],
        ..Default::default()
    });
    b
}

fn restore(
    name: &str,
    backup: &str,
    recovery_time: Option<&str>,
    phase: Option<&str>,
) -> RestoreJob {
    let mut b = RestoreJob::test(name, backup).namespace(NS);
    if let Some(t) = recovery_time {
        b = b.options(json!({"recoveryTime": t}));
    }
    let mut j = b.build();
    j.status = phase.map(|p| RestoreJobStatus {
        phase: Some(p.into()),
        ..Default::default()
    });
    j
}

#[derive(Default)]
struct World {
    plans: Vec<Plan>,
    backups: Vec<Backup>,
    jobs: Vec<BackupJob>,
    restores: Vec<RestoreJob>,
    fdb: Vec<Json>,
}

impl World {
    fn sweep(&self, config: &Config) -> Sweep {
        decide(
            &Observed {
                namespace: NS,
                plans: &self.plans,
                backups: &self.backups,
                backup_jobs: &self.jobs,
                restore_jobs: &self.restores,
                foundationdb_backups: &self.fdb,
            },
            config,
            now(),
        )
    }
}

/// (kind, name, verdict, reason) of every decision, in the sweep's order.
fn summary(s: &Sweep) -> Vec<(ObjectKind, String, Verdict, &'static str)> {
    s.decisions
        .iter()
        .map(|d| (d.kind, d.name.clone(), d.verdict, d.reason))
        .collect()
}

fn b(
    name: &str,
    verdict: Verdict,
    reason: &'static str,
) -> (ObjectKind, String, Verdict, &'static str) {
    (ObjectKind::Backup, name.to_owned(), verdict, reason)
}

fn j(
    name: &str,
    verdict: Verdict,
    reason: &'static str,
) -> (ObjectKind, String, Verdict, &'static str) {
    (ObjectKind::BackupJob, name.to_owned(), verdict, reason)
}

fn name(x: &Backup) -> String {
    x.metadata.name.clone().unwrap()
}

use Verdict::{Defer, Delete, Keep};

#[test]
fn keep_last_3_over_10_successes_keeps_3() {
    let w = World {
        plans: vec![plan("nightly", "0 2 * * *", keep_last(3))],
        backups: daily("nightly", 10),
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    let mut want: Vec<_> = w.backups[..3]
        .iter()
        .map(|x| b(&name(x), Keep, r::KEPT_BY_POLICY))
        .collect();
    want.extend(
        w.backups[3..]
            .iter()
            .map(|x| b(&name(x), Delete, r::RETENTION_EXPIRED)),
    );
    assert_eq!(summary(&s), want);
    assert_eq!(s.to_delete().count(), 7);
    assert_eq!(
        s.decisions[3].message,
        format!(
            "Backup {} (3d10h old) is kept by no rule of the retention policy (keepLast 3)",
            name(&w.backups[3])
        )
    );
    assert_eq!(
        s.decisions[0].message,
        format!(
            "Backup {} (10h0m old) is kept by keepLast",
            name(&w.backups[0])
        )
    );
}

#[test]
fn max_age_expires_everything_but_the_newest_success() {
    let policy = RetentionPolicy {
        keep_last: Some(5),
        max_age: Some("24h".into()),
        ..Default::default()
    };
    let backups: Vec<Backup> = (0..3)
        .map(|i| ok("nightly", at("2026-03-05T02:00:00Z") - Delta::days(i)))
        .collect();
    let w = World {
        plans: vec![plan("nightly", "0 2 * * *", policy)],
        backups,
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    assert_eq!(
        summary(&s),
        vec![
            b(&name(&w.backups[0]), Keep, r::KEPT_NEWEST_SUCCESS),
            b(&name(&w.backups[1]), Delete, r::MAX_AGE_EXCEEDED),
            b(&name(&w.backups[2]), Delete, r::MAX_AGE_EXCEEDED),
        ]
    );
    assert_eq!(
        s.decisions[0].message,
        format!(
            "Backup {} is 5d10h old, older than maxAge 1d0h (which overrides keepLast), but kept: it is the newest successful Backup of the Plan",
            name(&w.backups[0])
        )
    );
}

#[test]
fn the_only_success_survives_an_expired_max_age() {
    let policy = RetentionPolicy {
        max_age: Some("1h".into()),
        ..Default::default()
    };
    let w = World {
        plans: vec![plan("nightly", "0 2 * * *", policy)],
        backups: vec![ok("nightly", at("2026-01-01T02:00:00Z"))],
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    assert_eq!(
        summary(&s),
        vec![b(&name(&w.backups[0]), Keep, r::KEPT_NEWEST_SUCCESS)]
    );
    assert_eq!(s.to_delete().count(), 0);
}

#[test]
fn a_backup_named_by_a_running_restore_survives() {
    let backups = daily("nightly", 3);
    let (newest, middle, oldest) = (name(&backups[0]), name(&backups[1]), name(&backups[2]));
    let w = World {
        plans: vec![plan(
            "nightly",
            "0 2 * * *",
            RetentionPolicy {
                keep_last: Some(1),
                ..Default::default()
            },
        )],
        restores: vec![
            restore("running", &oldest, None, Some(phases::RUNNING)),
            restore("done", &middle, None, Some(phases::SUCCEEDED)),
        ],
        backups,
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    assert_eq!(
        summary(&s),
        vec![
            b(&newest, Keep, r::KEPT_BY_POLICY),
            b(&middle, Delete, r::RETENTION_EXPIRED),
            b(&oldest, Keep, r::KEPT_REFERENCED_BY_RESTORE),
        ]
    );
    assert!(
        s.decisions[2]
            .message
            .ends_with("but kept: RestoreJob running has not finished restoring from it"),
        "{}",
        s.decisions[2].message
    );
}

#[test]
fn a_backup_a_restore_drill_is_restoring_survives_and_the_drill_is_never_governed() {
    // A restore drill's RestoreJob (labelled, into its scratch copy) floors its Backup like any
    // running restore; nothing of the scratch copy is a Backup or BackupJob, so no Plan's policy
    // reaches it.
    let backups = daily("nightly", 2);
    let (newest, oldest) = (name(&backups[0]), name(&backups[1]));
    let mut drill = restore("db-verify-1234abcd", &oldest, None, Some(phases::RUNNING));
    drill.metadata.labels = Some(BTreeMap::from([(
        api::contract::drills::LABEL.to_owned(),
        "true".to_owned(),
    )]));
    drill.spec.target_application_ref = Some(api::meta::TypedLocalObjectReference::new(
        "apps.cozystack.io",
        "Postgres",
        "db-verify-1234abcd",
    ));
    let w = World {
        plans: vec![plan(
            "nightly",
            "0 2 * * *",
            RetentionPolicy {
                keep_last: Some(1),
                ..Default::default()
            },
        )],
        restores: vec![drill],
        backups,
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    assert_eq!(
        summary(&s),
        vec![
            b(&newest, Keep, r::KEPT_BY_POLICY),
            b(&oldest, Keep, r::KEPT_REFERENCED_BY_RESTORE),
        ]
    );
}

#[test]
fn the_base_backup_a_running_point_in_time_restore_needs_survives() {
    // Four CNPG base backups of server t-db; a running restore recovers to a time between the
    // second-oldest and the second-newest stop, from the newest Backup.
    let mut backups = daily("nightly", 4);
    for x in &mut backups {
        let stopped = instant(&x.spec.taken_at) + Delta::minutes(20);
        x.spec.driver_metadata = Some(BTreeMap::from([
            ("cnpg.io/server-name".to_owned(), "t-db".to_owned()),
            ("cnpg.io/stopped-at".to_owned(), stopped.to_rfc3339()),
        ]));
    }
    let names: Vec<String> = backups.iter().map(name).collect();
    let target = "2026-03-08T12:00:00Z"; // after the 03-08 02:20 stop, before 03-09
    let w = World {
        plans: vec![plan("nightly", "0 2 * * *", keep_last(1))],
        restores: vec![restore("pitr", &names[0], Some(target), None)],
        backups,
        ..Default::default()
    };
    let s = w.sweep(&Config {
        max_delete_percent: 100,
        ..Default::default()
    });
    assert_eq!(
        summary(&s),
        vec![
            b(&names[0], Keep, r::KEPT_BY_POLICY),
            b(&names[1], Delete, r::RETENTION_EXPIRED),
            b(&names[2], Keep, r::KEPT_RECOVERY_WINDOW),
            b(&names[3], Delete, r::RETENTION_EXPIRED),
        ]
    );
    assert!(
        s.decisions[2].message.ends_with(
            "but kept: RestoreJob pitr recovers server \"t-db\" to 2026-03-08T12:00:00Z, and this is the newest base backup at or before it (stopped at 2026-03-08T02:20:00Z); without it the recoverable window would start after the target"
        ),
        "{}",
        s.decisions[2].message
    );
    // Once the restore finished, the floor is gone.
    let mut done = w;
    done.restores[0].status = Some(RestoreJobStatus {
        phase: Some(phases::SUCCEEDED.into()),
        ..Default::default()
    });
    let s = done.sweep(&Config {
        max_delete_percent: 100,
        ..Default::default()
    });
    assert_eq!(s.candidates().count(), 3);
}

#[test]
fn a_mistyped_keep_last_0_is_refused() {
    let w = World {
        plans: vec![plan("nightly", "0 2 * * *", keep_last(0))],
        backups: daily("nightly", 10),
        jobs: vec![failed_job("nightly-1", None, now() - Delta::days(3), "x")],
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    let mut want = vec![b(&name(&w.backups[0]), Keep, r::KEPT_NEWEST_SUCCESS)];
    want.extend(
        w.backups[1..]
            .iter()
            .map(|x| b(&name(x), Keep, r::RETENTION_REFUSED)),
    );
    // The ad-hoc failed job is no Plan's: the refusal does not hold it back.
    want.push(j("nightly-1", Delete, r::FAILED_BACKUP_EXPIRED));
    assert_eq!(summary(&s), want);
    let note = "the retention policy of Plan nightly (keepLast 0) would delete 9 of its 10 successful Backups (90%) at once, more than the allowed 75%; nothing of this Plan is deleted. Check spec.retentionPolicy, or raise the limit if this is intended";
    assert_eq!(
        s.plans,
        vec![PlanOutcome {
            plan: "nightly".into(),
            refusal: Some(Refusal {
                would_delete: 9,
                successful: 10,
                limit_percent: 75
            }),
            invalid: None,
            object_store_retention: Some(cnpg::ObjectStoreRetention {
                object_store: "postgres-db".into(),
                oldest_kept: name(&w.backups[9]),
                days: 11,
            }),
            events: vec![Event::warning(r::RETENTION_REFUSED, note)],
        }]
    );
    // A limit of 100% lets the same policy through.
    let s = w.sweep(&Config {
        max_delete_percent: 100,
        ..Default::default()
    });
    assert_eq!(s.candidates().count(), 10);
}

#[test]
fn the_refusal_holds_back_the_plans_failures_too() {
    let w = World {
        plans: vec![plan("nightly", "0 2 * * *", keep_last(0))],
        backups: daily("nightly", 10),
        jobs: vec![failed_job(
            &schedule::backup_job_name("nightly", at("2026-03-01T02:00:00Z")),
            Some("nightly"),
            now() - Delta::days(3),
            "x",
        )],
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    assert_eq!(s.candidates().count(), 0);
    let last = s.decisions.last().unwrap();
    assert_eq!(
        (last.kind, last.verdict, last.reason),
        (ObjectKind::BackupJob, Keep, r::RETENTION_REFUSED)
    );
    assert!(
        last.message
            .ends_with("but kept: the retention of Plan nightly is refused in this sweep"),
        "{}",
        last.message
    );
}

#[test]
fn the_per_namespace_cap_deletes_the_oldest_first() {
    let mut backups = daily("nightly", 5);
    backups.push(failed_backup(
        "manual-1",
        at("2026-02-01T00:00:00Z"),
        "boom",
    ));
    let w = World {
        plans: vec![plan("nightly", "0 2 * * *", keep_last(1))],
        backups,
        ..Default::default()
    };
    let config = Config {
        max_deletions_per_namespace: 2,
        max_delete_percent: 100,
        ..Default::default()
    };
    let s = w.sweep(&config);
    let n: Vec<String> = w.backups.iter().map(name).collect();
    assert_eq!(
        summary(&s),
        vec![
            b(&n[0], Keep, r::KEPT_BY_POLICY),
            b(&n[1], Defer, r::RETENTION_DEFERRED),
            b(&n[2], Defer, r::RETENTION_DEFERRED),
            b(&n[3], Defer, r::RETENTION_DEFERRED),
            b(&n[4], Delete, r::RETENTION_EXPIRED),
            b("manual-1", Delete, r::FAILED_BACKUP_EXPIRED),
        ]
    );
    assert!(
        s.decisions[1]
            .message
            .ends_with("; deferred: this sweep deletes at most 2 objects in the namespace (5 are due, oldest first)"),
        "{}",
        s.decisions[1].message
    );
}

#[test]
fn dry_run_reports_and_deletes_nothing() {
    let mut w = World {
        plans: vec![plan("nightly", "0 2 * * *", keep_last(2))],
        backups: daily("nightly", 3),
        ..Default::default()
    };
    w.fdb.push(fdb_backup(
        "gone-abcde",
        "foundationdb-kv",
        "gone",
        "Running",
    ));
    let s = w.sweep(&Config {
        dry_run: true,
        ..Default::default()
    });
    assert!(s.dry_run);
    assert_eq!(s.to_delete().count(), 0);
    assert_eq!(s.to_stop().count(), 0);
    assert_eq!(s.foundationdb_stops.len(), 1, "reported");
    let c: Vec<&Decision> = s.candidates().collect();
    assert_eq!(c.len(), 1);
    assert!(
        c[0].message
            .starts_with("dry run, nothing deleted: Backup "),
        "{}",
        c[0].message
    );
}

#[test]
fn ad_hoc_and_safety_backups_are_never_selected() {
    let mut ad_hoc = ok("nightly", at("2026-01-01T02:00:00Z"));
    ad_hoc.spec.plan_ref = None;
    let mut safety = ok("nightly", at("2026-01-02T02:00:00Z"));
    safety.metadata.labels = Some(BTreeMap::from([(
        labels::SAFETY_BACKUP.to_owned(),
        "true".to_owned(),
    )]));
    let mut renamed = ok("nightly", at("2026-01-03T02:00:00Z"));
    renamed.metadata.name = Some("before-upgrade".into());
    let mut other_app = ok("nightly", at("2026-01-04T02:00:00Z"));
    other_app.spec.application_ref.name = "other".into();
    let mut backups = daily("nightly", 2);
    backups.extend([ad_hoc, safety, renamed, other_app]);
    let w = World {
        plans: vec![plan(
            "nightly",
            "0 2 * * *",
            RetentionPolicy {
                keep_last: Some(1),
                max_age: Some("1h".into()),
                ..Default::default()
            },
        )],
        backups,
        ..Default::default()
    };
    let s = w.sweep(&Config {
        max_delete_percent: 100,
        ..Default::default()
    });
    assert_eq!(
        summary(&s),
        vec![
            b(&name(&w.backups[0]), Keep, r::KEPT_NEWEST_SUCCESS),
            b(&name(&w.backups[1]), Delete, r::MAX_AGE_EXCEEDED),
        ]
    );
}

#[test]
fn failed_ttl_and_keep_failed() {
    let slot = |d: &str| schedule::backup_job_name("nightly", at(d));
    let (f1, f2, f3, fresh) = (
        slot("2026-03-07T02:00:00Z"),
        slot("2026-03-06T02:00:00Z"),
        slot("2026-03-05T02:00:00Z"),
        slot("2026-03-10T02:00:00Z"),
    );
    let failed_at = |d: &str| at(d) + Delta::minutes(30);
    let mut plan_ = plan(
        "nightly",
        "0 2 * * *",
        RetentionPolicy {
            keep_failed: Some(1),
            ..Default::default()
        },
    );
    plan_.spec.retention_policy.as_mut().unwrap().keep_last = None;
    let mut backup_f2 = failed_backup(
        &f2,
        failed_at("2026-03-06T02:00:00Z"),
        "cnpg Backup failed: disk full",
    );
    backup_f2.spec.plan_ref = Some(LocalObjectReference::new("nightly"));
    let w = World {
        plans: vec![plan_],
        backups: vec![backup_f2],
        jobs: vec![
            failed_job(
                &fresh,
                Some("nightly"),
                failed_at("2026-03-10T02:00:00Z"),
                "too new",
            ),
            failed_job(
                &f1,
                Some("nightly"),
                failed_at("2026-03-07T02:00:00Z"),
                "cluster not ready",
            ),
            failed_job(
                &f2,
                Some("nightly"),
                failed_at("2026-03-06T02:00:00Z"),
                "deadline exceeded",
            ),
            failed_job(
                &f3,
                Some("nightly"),
                failed_at("2026-03-05T02:00:00Z"),
                "deadline exceeded",
            ),
            failed_job("manual-1", None, at("2026-03-01T00:00:00Z"), "oops"),
        ],
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    // Newest first: `fresh` is within the TTL and is the one failure keepFailed 1 keeps, so the
    // older ones all go.
    assert_eq!(
        summary(&s),
        vec![
            j(&f1, Delete, r::FAILED_BACKUP_EXPIRED),
            j(&f2, Delete, r::FAILED_BACKUP_EXPIRED),
            b(&f2, Delete, r::FAILED_BACKUP_EXPIRED),
            j(&f3, Delete, r::FAILED_BACKUP_EXPIRED),
            j("manual-1", Delete, r::FAILED_BACKUP_EXPIRED),
        ]
    );
    assert_eq!(
        s.decisions[0].message,
        format!(
            "failed BackupJob {f1} (3d9h old, failure: cluster not ready) is past the failed-backup TTL of 1d0h"
        )
    );
    assert_eq!(
        s.decisions[2].message,
        format!(
            "failed Backup {f2} (4d9h old, failure: deadline exceeded) is past the failed-backup TTL of 1d0h"
        )
    );
    assert_eq!(s.decisions[4].plan, None);

    // keepFailed 2: the newest expired failure is kept for diagnosis too.
    let mut w2 = w;
    w2.plans[0]
        .spec
        .retention_policy
        .as_mut()
        .unwrap()
        .keep_failed = Some(2);
    let s = w2.sweep(&Config::default());
    assert_eq!(summary(&s)[0], j(&f1, Keep, r::KEPT_FAILED));
    assert!(
        s.decisions[0].message.ends_with(
            "but kept: it is failure 2 of the newest 2 that Plan nightly keeps (keepFailed)"
        ),
        "{}",
        s.decisions[0].message
    );

    // TTL 0 (disabled): failures stay, listed with their phase.
    let s = w2.sweep(&Config {
        failed_ttl: None,
        ..Default::default()
    });
    assert_eq!(summary(&s), vec![]);
}

#[test]
fn failed_backup_named_by_a_running_restore_is_kept() {
    let w = World {
        backups: vec![failed_backup(
            "manual-1",
            at("2026-02-01T00:00:00Z"),
            "boom",
        )],
        restores: vec![restore("r", "manual-1", None, None)],
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    assert_eq!(
        summary(&s),
        vec![b("manual-1", Keep, r::KEPT_REFERENCED_BY_RESTORE)]
    );
}

#[test]
fn ties_are_broken_by_creation_then_name() {
    let t = at("2026-03-09T02:00:00Z");
    let mut a = ok("nightly", t);
    let mut c = ok("nightly", t);
    a.metadata.name = Some(schedule::backup_job_name("nightly", t));
    c.metadata.name = Some(schedule::backup_job_name("nightly", t + Delta::minutes(1)));
    // Same takenAt; `a` was created later, so it counts as the newer one.
    a.metadata.creation_timestamp = Some(time(t + Delta::minutes(9)));
    c.metadata.creation_timestamp = Some(time(t + Delta::minutes(8)));
    let w = World {
        plans: vec![plan("nightly", "0 2 * * *", keep_last(1))],
        backups: vec![c.clone(), a.clone()],
        ..Default::default()
    };
    let config = Config {
        max_delete_percent: 100,
        ..Default::default()
    };
    assert_eq!(
        summary(&w.sweep(&config)),
        vec![
            b(&name(&a), Keep, r::KEPT_BY_POLICY),
            b(&name(&c), Delete, r::RETENTION_EXPIRED)
        ]
    );
    // Same creation too: the greater name is the newer one, whatever the listing order.
    let mut w = w;
    w.backups[1].metadata.creation_timestamp = c.metadata.creation_timestamp.clone();
    for order in [vec![0, 1], vec![1, 0]] {
        let w2 = World {
            plans: w.plans.clone(),
            backups: order.iter().map(|i| w.backups[*i].clone()).collect(),
            ..Default::default()
        };
        assert_eq!(
            summary(&w2.sweep(&config)),
            vec![
                b(&name(&c), Keep, r::KEPT_BY_POLICY),
                b(&name(&a), Delete, r::RETENTION_EXPIRED)
            ]
        );
    }
}

#[test]
fn calendar_rules_count_in_the_plans_zone() {
    // 22:30Z and 23:30Z on Mar 8 are one UTC day, two Berlin days (23:30 Mar 8, 00:30 Mar 9).
    let backups = vec![
        ok("nightly", at("2026-03-09T12:00:00Z")),
        ok("nightly", at("2026-03-08T23:30:00Z")),
        ok("nightly", at("2026-03-08T22:30:00Z")),
    ];
    let n: Vec<String> = backups.iter().map(name).collect();
    let daily2 = RetentionPolicy {
        keep_daily: Some(2),
        ..Default::default()
    };
    let config = Config {
        max_delete_percent: 100,
        ..Default::default()
    };
    let berlin = World {
        plans: vec![plan(
            "nightly",
            "CRON_TZ=Europe/Berlin 30 0 * * *",
            daily2.clone(),
        )],
        backups: backups.clone(),
        ..Default::default()
    };
    assert_eq!(
        summary(&berlin.sweep(&config)),
        vec![
            b(&n[0], Keep, r::KEPT_BY_POLICY),
            b(&n[1], Delete, r::RETENTION_EXPIRED),
            b(&n[2], Keep, r::KEPT_BY_POLICY),
        ]
    );
    let utc = World {
        plans: vec![plan("nightly", "30 0 * * *", daily2)],
        backups,
        ..Default::default()
    };
    assert_eq!(
        summary(&utc.sweep(&config)),
        vec![
            b(&n[0], Keep, r::KEPT_BY_POLICY),
            b(&n[1], Keep, r::KEPT_BY_POLICY),
            b(&n[2], Delete, r::RETENTION_EXPIRED),
        ]
    );
}

#[test]
fn an_invalid_policy_deletes_nothing_of_its_plan() {
    let slot = schedule::backup_job_name("nightly", at("2026-03-01T02:00:00Z"));
    let cases: &[(&str, RetentionPolicy, &str)] = &[
        (
            "0 2 * * *",
            RetentionPolicy {
                keep_last: Some(1),
                max_age: Some("30d".into()),
                ..Default::default()
            },
            "spec.retentionPolicy.maxAge \"30d\" is not a duration such as \"720h\": time: unknown unit \"d\" in duration \"30d\"",
        ),
        (
            "CRON_TZ=Mars/Olympus 0 2 * * *",
            RetentionPolicy {
                keep_weekly: Some(4),
                ..Default::default()
            },
            "spec.retentionPolicy.keepWeekly counts calendar periods in the Plan's time zone, but spec.schedule.cron does not parse: ",
        ),
    ];
    for (cron, policy, message) in cases {
        let w = World {
            plans: vec![plan("nightly", cron, policy.clone())],
            backups: daily("nightly", 5),
            jobs: vec![failed_job(
                &slot,
                Some("nightly"),
                now() - Delta::days(5),
                "x",
            )],
            ..Default::default()
        };
        let s = w.sweep(&Config::default());
        assert_eq!(summary(&s), vec![], "{cron}");
        let event = &s.plans[0].events[0];
        assert_eq!(
            (event.type_, event.reason),
            (EventType::Warning, r::INVALID_RETENTION_POLICY)
        );
        assert!(event.note.starts_with(message), "{}", event.note);
        assert!(
            event
                .note
                .ends_with("; no Backup or BackupJob of this Plan is deleted until it is fixed"),
            "{}",
            event.note
        );
    }
    // A bad cron does not matter when no calendar rule needs the zone.
    let w = World {
        plans: vec![plan(
            "nightly",
            "CRON_TZ=Mars/Olympus 0 2 * * *",
            keep_last(4),
        )],
        backups: daily("nightly", 5),
        ..Default::default()
    };
    assert_eq!(w.sweep(&Config::default()).candidates().count(), 1);
}

#[test]
fn a_plan_without_policy_keeps_its_successes() {
    let mut p = plan("nightly", "0 2 * * *", keep_last(1));
    p.spec.retention_policy = None;
    let w = World {
        plans: vec![p],
        backups: daily("nightly", 5),
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    assert_eq!(summary(&s), vec![]);
    assert_eq!(s.plans, vec![]);
}

#[test]
fn objects_already_being_deleted_are_left_alone() {
    let mut backups = daily("nightly", 3);
    backups[2].metadata.deletion_timestamp = Some(time(now()));
    let w = World {
        plans: vec![plan("nightly", "0 2 * * *", keep_last(2))],
        backups,
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    assert_eq!(s.decisions.len(), 2);
    assert_eq!(s.candidates().count(), 0);
}

fn fdb_backup(name: &str, cluster: &str, job: &str, state: &str) -> Json {
    json!({
        "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
        "metadata": {"name": name, "namespace": NS, "labels": {
            "backups.cozystack.io/foundationdb-cluster": cluster,
            "backups.cozystack.io/owned-by.BackupJobName": job,
            "backups.cozystack.io/owned-by.BackupJobNamespace": NS,
        }},
        "spec": {"clusterName": cluster, "backupState": state},
    })
}

fn fdb_catalog(name: &str, app: &str) -> Backup {
    let mut x = Backup::test(name)
        .namespace(NS)
        .for_app("FoundationDB", app)
        .strategy(
            "strategy.backups.cozystack.io",
            "FoundationDB",
            "cozy-default-foundationdb",
        )
        .build();
    x.status = Some(BackupStatus {
        phase: Some(phases::READY.into()),
        ..Default::default()
    });
    x
}

#[test]
fn foundationdb_backup_is_stopped_when_no_backup_of_its_cluster_remains() {
    let running_job = || {
        let mut j = BackupJob::test("job-2")
            .namespace(NS)
            .for_app("FoundationDB", "kv")
            .build();
        j.status = Some(BackupJobStatus {
            phase: Some(phases::RUNNING.into()),
            ..Default::default()
        });
        j
    };
    let mut deleting = fdb_catalog("job-1", "kv");
    deleting.metadata.deletion_timestamp = Some(time(now()));
    let mut failed = fdb_catalog("job-0", "kv");
    failed.status.as_mut().unwrap().phase = Some(phases::FAILED.into());
    failed.metadata.creation_timestamp = Some(time(now()));
    let chart = json!({"metadata": {"name": "chart"}, "spec": {"clusterName": "foundationdb-kv", "backupState": "Running"}});
    struct Case {
        name: &'static str,
        backups: Vec<Backup>,
        jobs: Vec<BackupJob>,
        fdb: Vec<Json>,
        stopped: Vec<&'static str>,
    }
    let cases = vec![
        Case {
            name: "a Backup of the cluster remains",
            backups: vec![fdb_catalog("job-1", "kv")],
            jobs: vec![],
            fdb: vec![fdb_backup(
                "job-1-abcde",
                "foundationdb-kv",
                "job-1",
                "Running",
            )],
            stopped: vec![],
        },
        Case {
            name: "none remains (the last one is being deleted, a failed one does not count)",
            backups: vec![
                deleting.clone(),
                failed.clone(),
                fdb_catalog("other-1", "kv2"),
            ],
            jobs: vec![],
            fdb: vec![
                fdb_backup("job-1-abcde", "foundationdb-kv", "job-1", "Running"),
                fdb_backup("other-1-abcde", "foundationdb-kv2", "other-1", "Running"),
            ],
            stopped: vec!["job-1-abcde"],
        },
        Case {
            name: "its BackupJob is still running: it needs the backup",
            backups: vec![],
            jobs: vec![running_job()],
            fdb: vec![fdb_backup(
                "job-2-abcde",
                "foundationdb-kv",
                "job-2",
                "Running",
            )],
            stopped: vec![],
        },
        Case {
            name: "already stopped, or rendered by the chart: left alone",
            backups: vec![],
            jobs: vec![],
            fdb: vec![
                fdb_backup("job-1-abcde", "foundationdb-kv", "job-1", "Stopped"),
                chart.clone(),
            ],
            stopped: vec![],
        },
    ];
    for c in cases {
        let w = World {
            backups: c.backups,
            jobs: c.jobs,
            fdb: c.fdb,
            ..Default::default()
        };
        let s = w.sweep(&Config::default());
        let stopped: Vec<&str> = s.to_stop().map(|x| x.name.as_str()).collect();
        assert_eq!(stopped, c.stopped, "{}", c.name);
    }
    let w = World {
        backups: vec![deleting],
        fdb: vec![fdb_backup(
            "job-1-abcde",
            "foundationdb-kv",
            "job-1",
            "Running",
        )],
        ..Default::default()
    };
    assert_eq!(
        w.sweep(&Config::default()).foundationdb_stops,
        vec![foundationdb::Stop {
            name: "job-1-abcde".into(),
            cluster: "foundationdb-kv".into(),
            patch: json!({"spec": {"backupState": "Stopped"}}),
            reason: r::FOUNDATIONDB_BACKUP_STOPPED,
            message: "no Backup of FoundationDB cluster foundationdb-kv remains after this sweep: stopping FoundationDBBackup job-1-abcde (spec.backupState: Stopped) so its backup_agent stops streaming to the blob store; the next BackupJob of the cluster starts a new backup".into(),
        }]
    );
}

#[test]
fn foundationdb_backup_is_stopped_when_only_failed_backups_remain() {
    // The only Backup of the cluster failed long ago: the failed TTL deletes it, and a failed
    // Backup is nothing the stream is for.
    let mut failed = fdb_catalog("job-1", "kv");
    failed.status.as_mut().unwrap().phase = Some(phases::FAILED.into());
    failed.metadata.creation_timestamp = Some(time(now() - Delta::days(3)));
    let w = World {
        backups: vec![failed],
        fdb: vec![fdb_backup(
            "job-1-abcde",
            "foundationdb-kv",
            "job-1",
            "Running",
        )],
        ..Default::default()
    };
    let s = w.sweep(&Config::default());
    assert_eq!(
        summary(&s),
        vec![b("job-1", Delete, r::FAILED_BACKUP_EXPIRED)]
    );
    assert_eq!(s.to_stop().count(), 1);
}

#[test]
fn failed_backup_re_created_from_the_catalog_keeps_its_original_age() {
    // A failed Backup taken three days ago comes back from its catalog record today: a new
    // cluster stamps it with a new creationTimestamp, but its TTL counts from when it was taken.
    // Without the label, the same object counts from its creation (a tenant's takenAt is not
    // trusted to age its Backup).
    let restored = |label: bool| {
        let mut b = failed_backup("job-1", now(), "boom");
        b.spec.taken_at = time(now() - Delta::days(3));
        if label {
            b.metadata
                .labels
                .get_or_insert_default()
                .insert(labels::RESTORED_FROM_CATALOG.into(), "true".into());
        }
        b
    };
    let config = Config {
        failed_ttl: Some(Duration::from_secs(24 * 3600)),
        ..Default::default()
    };
    let w = World {
        backups: vec![restored(true)],
        ..Default::default()
    };
    assert_eq!(
        summary(&w.sweep(&config)),
        vec![b("job-1", Delete, r::FAILED_BACKUP_EXPIRED)]
    );
    let w = World {
        backups: vec![restored(false)],
        ..Default::default()
    };
    assert_eq!(summary(&w.sweep(&config)), vec![]);
}

#[test]
fn reasons_are_camel_case() {
    for reason in [
        r::RETENTION_EXPIRED,
        r::MAX_AGE_EXCEEDED,
        r::FAILED_BACKUP_EXPIRED,
        r::KEPT_BY_POLICY,
        r::KEPT_FAILED,
        r::KEPT_NEWEST_SUCCESS,
        r::KEPT_REFERENCED_BY_RESTORE,
        r::KEPT_RECOVERY_WINDOW,
        r::RETENTION_REFUSED,
        r::RETENTION_DEFERRED,
        r::INVALID_RETENTION_POLICY,
        r::FOUNDATIONDB_BACKUP_STOPPED,
    ] {
        assert!(
            reason.starts_with(|c: char| c.is_ascii_uppercase())
                && reason.chars().all(|c| c.is_ascii_alphanumeric()),
            "{reason}"
        );
    }
}

#[test]
fn human_durations() {
    use std::time::Duration;
    let cases = [
        (0, "0s"),
        (59, "59s"),
        (60, "1m"),
        (3599, "59m"),
        (3600, "1h0m"),
        (86_399, "23h59m"),
        (86_400, "1d0h"),
        (90_061, "1d1h"),
    ];
    for (s, want) in cases {
        assert_eq!(human(Duration::from_secs(s)), want);
    }
}

#[test]
fn instants_outside_the_nanosecond_range_keep_their_year() {
    let t = |s: &str| Time(s.parse().unwrap());
    assert_eq!(
        crate::instant(&t("0001-01-01T00:00:00Z")).to_rfc3339(),
        "0001-01-01T00:00:00+00:00"
    );
    assert_eq!(
        crate::instant(&t("9999-01-01T00:00:00.5Z")).to_rfc3339(),
        "9999-01-01T00:00:00.500+00:00"
    );
    assert_eq!(
        crate::instant(&t("1969-12-31T23:59:59.25Z")).to_rfc3339(),
        "1969-12-31T23:59:59.250+00:00"
    );
}
