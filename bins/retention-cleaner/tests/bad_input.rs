//! Bad input, end to end: Plans with retention policies that cannot apply (durations the CRD's
//! pattern accepts but a Go duration cannot hold, a calendar rule in an unknown zone or with a
//! cron that does not parse), zero and absurd counts and conflicting fields, Backups with broken timestamps, failed jobs whose
//! Plan is gone and FoundationDBBackups in odd shapes, all in one namespace and one cleaner run.
//! Each case is a row of [`cases`]: what is wrong, the objects, and the Event it must end in. A
//! well-formed Plan in another namespace, swept by the same run, keeps exactly its newest Backup,
//! and the cleaner neither panics nor restarts.

use crate::support;

use std::collections::BTreeSet;
use std::fmt;

use api::LocalObjectReference;
use api::backups::{Backup, Plan, RetentionPolicy};
use api::contract::{event_reasons as reasons, labels};
use api::thirdparty::{fdb, permissive_crd};
use chrono::{DateTime, Duration, Utc};
use harness::Harness;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::json;
use support::*;

const GOOD: &str = "tenant-good";

/// What a case must end in.
enum Expect {
    /// An Event about the object named `about` (in [`NS`]), with `reason` and a note containing
    /// `fragment`.
    Event {
        about: String,
        reason: &'static str,
        fragment: String,
    },
    /// A line of the cleaner's log containing the fragment (no object can carry it: the object
    /// does not decode).
    Log(String),
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expect::Event {
                about,
                reason,
                fragment,
            } => write!(f, "Event {reason} about {about:.60} with {fragment:.200}"),
            Expect::Log(m) => write!(f, "a log line with {m:.200}"),
        }
    }
}

/// One row: what is wrong, how to make its objects, what it ends in.
struct Case {
    what: &'static str,
    setup: Setup,
    expect: Expect,
}

/// The objects of a case.
enum Setup {
    /// A Plan (`name`, cron, policy) with successful Backups taken at these times (newest first).
    Plan(String, &'static str, RetentionPolicy, Vec<DateTime<Utc>>),
    /// As [`Setup::Plan`], then the `spec.takenAt` of its oldest Backup is set to this text.
    TakenAt(String, RetentionPolicy, Vec<DateTime<Utc>>, &'static str),
    /// A failed BackupJob of Plan `plan` (which does not exist), failed at this time.
    OrphanJob(String, &'static str, DateTime<Utc>),
    /// A FoundationDBBackup with these labels and spec.
    FoundationDB(String, serde_json::Value, serde_json::Value),
}

fn policy(f: impl FnOnce(&mut RetentionPolicy)) -> RetentionPolicy {
    let mut p = RetentionPolicy::default();
    f(&mut p);
    p
}

fn max_age(v: &str) -> RetentionPolicy {
    policy(|p| p.max_age = Some(v.into()))
}

fn event(about: &str, reason: &'static str, fragment: impl Into<String>) -> Expect {
    Expect::Event {
        about: about.into(),
        reason,
        fragment: fragment.into(),
    }
}

fn invalid(about: &str, fragment: impl Into<String>) -> Expect {
    event(about, reasons::INVALID_RETENTION_POLICY, fragment)
}

fn cases(now: DateTime<Utc>) -> Vec<Case> {
    let hours = |hs: &[i64]| hs.iter().map(|h| now - Duration::hours(*h)).collect();
    let days = |ds: &[i64]| ds.iter().map(|d| now - Duration::days(*d)).collect();
    let plan_253 = format!("p{}", "q".repeat(252));
    let simple = |what, name: &str, p: RetentionPolicy, expect| Case {
        what,
        setup: Setup::Plan(name.into(), "0 2 * * *", p, hours(&[1, 2])),
        expect,
    };
    vec![
        simple(
            "maxAge of 9,999,999,999 hours (beyond a Go duration's range)",
            "age-overflow",
            max_age("9999999999h"),
            invalid(
                "age-overflow",
                r#"spec.retentionPolicy.maxAge "9999999999h""#,
            ),
        ),
        simple(
            "maxAge one hour past a Go duration's maximum (2562047h47m16s)",
            "age-just-over",
            max_age("2562048h"),
            invalid("age-just-over", r#"spec.retentionPolicy.maxAge "2562048h""#),
        ),
        simple(
            "maxAge of 20 digits of nanoseconds",
            "age-nanos",
            max_age("99999999999999999999ns"),
            invalid(
                "age-nanos",
                r#"spec.retentionPolicy.maxAge "99999999999999999999ns""#,
            ),
        ),
        simple(
            "maxAge zero (every Backup but the newest is past it)",
            "age-zero",
            max_age("0s"),
            event(
                "age-zero",
                reasons::MAX_AGE_EXCEEDED,
                "older than maxAge 0s",
            ),
        ),
        Case {
            what: "keepDaily in an unknown time zone",
            setup: Setup::Plan(
                "mars".into(),
                "CRON_TZ=Mars/Base 0 2 * * *",
                policy(|p| p.keep_daily = Some(3)),
                days(&[1, 2, 3, 4]),
            ),
            expect: invalid("mars", "Mars/Base"),
        },
        Case {
            what: "keepWeekly with a cron that does not parse",
            setup: Setup::Plan(
                "bad-cron".into(),
                "61 * * * *",
                policy(|p| p.keep_weekly = Some(1)),
                days(&[1, 9]),
            ),
            expect: invalid("bad-cron", "keepWeekly"),
        },
        simple(
            "keepLast zero (every Backup but the newest goes)",
            "keep-zero",
            policy(|p| p.keep_last = Some(0)),
            event(
                "keep-zero",
                reasons::KEPT_NEWEST_SUCCESS,
                "(keepLast 0), but kept: it is the newest successful Backup",
            ),
        ),
        Case {
            what: "conflicting fields: keepDaily at the int32 maximum and maxAge 1h",
            setup: Setup::Plan(
                "conflict".into(),
                "0 2 * * *",
                policy(|p| {
                    p.keep_daily = Some(i32::MAX);
                    p.max_age = Some("1h".into());
                }),
                days(&[1, 2, 3, 4]),
            ),
            expect: event(
                "conflict",
                reasons::MAX_AGE_EXCEEDED,
                "older than maxAge 1h0m",
            ),
        },
        Case {
            what: "keepLast at the int32 maximum (keeps everything; the newest floor still named)",
            setup: Setup::Plan(
                "keep-max".into(),
                "0 2 * * *",
                policy(|p| {
                    p.keep_last = Some(i32::MAX);
                    p.keep_failed = Some(i32::MAX);
                    p.max_age = Some("1h".into());
                }),
                days(&[1]),
            ),
            expect: event("keep-max", reasons::KEPT_NEWEST_SUCCESS, ""),
        },
        Case {
            what: "a Backup taken in year 1",
            setup: Setup::TakenAt(
                "ancient".into(),
                policy(|p| p.max_age = Some("720h".into())),
                hours(&[1, 2]),
                "0001-01-01T00:00:00Z",
            ),
            expect: event(
                "ancient",
                reasons::MAX_AGE_EXCEEDED,
                format!(
                    "is {}d",
                    (now - "0001-01-01T00:00:00Z".parse::<DateTime<Utc>>().unwrap()).num_days()
                ),
            ),
        },
        Case {
            what: "a Backup taken in year 9999 (counts as the newest; the others go)",
            setup: Setup::TakenAt(
                "future".into(),
                policy(|p| p.keep_last = Some(1)),
                hours(&[1, 2]),
                "9999-01-01T00:00:00Z",
            ),
            expect: event("future", reasons::RETENTION_EXPIRED, "keepLast"),
        },
        Case {
            what: "a Backup taken after 9999-12-30T22:00Z (past the range of a Kubernetes time in the client)",
            setup: Setup::TakenAt(
                "far-future".into(),
                policy(|p| p.keep_last = Some(1)),
                hours(&[1, 2]),
                "9999-12-31T23:59:59Z",
            ),
            expect: Expect::Log("skipping an object that does not match its schema".into()),
        },
        Case {
            what: "Plan name at the 253-character limit",
            setup: Setup::Plan(
                plan_253.clone(),
                "0 2 * * *",
                policy(|p| p.keep_last = Some(1)),
                hours(&[1, 2, 3]),
            ),
            expect: event(&plan_253, reasons::RETENTION_EXPIRED, ""),
        },
        Case {
            what: "a failed BackupJob whose Plan does not exist",
            setup: Setup::OrphanJob(
                "gone-plan-29000000".into(),
                "gone-plan",
                now - Duration::days(3),
            ),
            expect: event(
                "gone-plan-29000000",
                reasons::FAILED_BACKUP_EXPIRED,
                "disk full 💾",
            ),
        },
        Case {
            what: "a FoundationDBBackup of a cluster with no Backup, without a spec",
            setup: Setup::FoundationDB(
                "fdb-no-spec".into(),
                json!({labels::FOUNDATIONDB_CLUSTER: "foundationdb-ghost"}),
                json!(null),
            ),
            expect: event(
                "fdb-no-spec",
                reasons::FOUNDATIONDB_BACKUP_STOPPED,
                "foundationdb-ghost",
            ),
        },
        Case {
            what: "a FoundationDBBackup labelled with an empty cluster and an unknown state",
            setup: Setup::FoundationDB(
                "fdb-empty-cluster".into(),
                json!({labels::FOUNDATIONDB_CLUSTER: ""}),
                json!({"backupState": "Frobnicating", "clusterName": 42}),
            ),
            expect: event(
                "fdb-empty-cluster",
                reasons::FOUNDATIONDB_BACKUP_STOPPED,
                "",
            ),
        },
    ]
}

/// The name of the object a Log case is about: the Backup whose takenAt was changed is the
/// Plan's oldest, named after the Plan.
fn case_name(setup: &Setup) -> &str {
    match setup {
        Setup::Plan(n, ..) | Setup::TakenAt(n, ..) | Setup::OrphanJob(n, ..) => n,
        Setup::FoundationDB(n, ..) => n,
    }
}

/// A successful Backup of Plan `plan` of `Postgres/db` in `ns` taken at `taken` (a minute).
async fn backup_in(h: &Harness, ns: &str, plan: &str, taken: DateTime<Utc>) -> String {
    let taken = minute(taken);
    // The Plan's own name for the slot (shortened with a hash for long Plan names).
    let name = schedule::backup_job_name(plan, taken);
    let mut b = Backup::test(&name).build();
    b.spec.plan_ref = Some(LocalObjectReference::new(plan));
    b.spec.taken_at = time(taken);
    h.create(ns, &b).await;
    Api::<Backup>::namespaced(h.client(), ns)
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        )
        .await
        .unwrap();
    name
}

async fn plan_in(h: &Harness, ns: &str, name: &str, cron: &str, policy: RetentionPolicy) {
    let mut p = Plan::test(name, cron).build();
    p.spec.retention_policy = Some(policy);
    h.create(ns, &p).await;
}

async fn set_up(h: &Harness, setup: &Setup) {
    match setup {
        Setup::Plan(name, cron, policy, taken) => {
            plan_in(h, NS, name, cron, policy.clone()).await;
            for t in taken {
                backup_in(h, NS, name, *t).await;
            }
        }
        Setup::TakenAt(name, policy, taken, at) => {
            plan_in(h, NS, name, "0 2 * * *", policy.clone()).await;
            let mut last = String::new();
            for t in taken {
                last = backup_in(h, NS, name, *t).await;
            }
            // Untyped: a time past jiff's range (9999-12-30T22:00Z) does not decode as a Time.
            Api::<DynamicObject>::namespaced_with(
                h.client(),
                NS,
                &ApiResource::erase::<Backup>(&()),
            )
            .patch(
                &last,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"takenAt": at}})),
            )
            .await
            .unwrap_or_else(|e| panic!("the API server must accept takenAt {at}: {e}"));
        }
        Setup::OrphanJob(name, plan, failed) => {
            failed_job(h, name, Some(plan), *failed, "disk full 💾").await;
        }
        Setup::FoundationDB(name, labels, spec) => {
            let mut body = json!({
                "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
                "metadata": {"name": name, "namespace": NS, "labels": labels},
            });
            if !spec.is_null() {
                body["spec"] = spec.clone();
            }
            let obj: DynamicObject = serde_json::from_value(body).unwrap();
            Api::<DynamicObject>::namespaced_with(
                h.client(),
                NS,
                &ApiResource::erase::<fdb::FoundationDBBackup>(&()),
            )
            .create(&Default::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("the API server must accept {name}: {e}"));
        }
    }
}

/// Whether the case's Event is there; `Err` lists the Events about the object instead.
async fn check(h: &mut Harness, case: &Case) -> Result<(), String> {
    let (about, reason, fragment) = match &case.expect {
        Expect::Event {
            about,
            reason,
            fragment,
        } => (about, *reason, fragment),
        Expect::Log(fragment) => {
            let log = h.daemon(COMPONENT).map_err(|e| e.to_string())?.log();
            let name = case_name(&case.setup);
            return log
                .lines()
                .any(|l| l.contains(fragment.as_str()) && l.contains(name))
                .then_some(())
                .ok_or_else(|| format!("no such line about {name}"));
        }
    };
    let all: Vec<Event> = Api::<Event>::namespaced(h.client(), NS)
        .list(&ListParams::default())
        .await
        .map_err(|e| e.to_string())?
        .items
        .into_iter()
        .filter(|ev| ev.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(about))
        .collect();
    if all
        .iter()
        .any(|ev| ev.reason.as_deref() == Some(reason) && note(ev).contains(fragment.as_str()))
    {
        return Ok(());
    }
    Err(format!(
        "Events: {:?}",
        all.iter()
            .map(|ev| (ev.reason.clone().unwrap_or_default(), note(ev).to_owned()))
            .collect::<Vec<_>>()
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_policies_and_objects_end_in_named_events_and_spare_other_tenants() {
    let mut crds = leftover_crds();
    crds.push(permissive_crd::<fdb::FoundationDBBackup>(true));
    let mut h = start(crds).await;
    h.create_namespaces(&[GOOD]).await.unwrap();
    let now = Utc::now();
    let cases = cases(now);

    // Everything before the cleaner starts, the other tenant's Plan in the middle of it.
    let (first, rest) = cases.split_at(cases.len() / 2);
    for case in first {
        set_up(&h, &case.setup).await;
    }
    plan_in(
        &h,
        GOOD,
        "nightly",
        "0 2 * * *",
        policy(|p| p.keep_last = Some(1)),
    )
    .await;
    let mut good = Vec::new();
    for hours in [1, 2, 3] {
        good.push(backup_in(&h, GOOD, "nightly", now - Duration::hours(hours)).await);
    }
    for case in rest {
        set_up(&h, &case.setup).await;
    }
    spawn_cleaner(&mut h, &[]).await;

    for case in &cases {
        let what = case.expect.to_string();
        let deadline = tokio::time::Instant::now() + harness::DEADLINE;
        loop {
            match check(&mut h, case).await {
                Ok(()) => break,
                Err(found) if tokio::time::Instant::now() > deadline => {
                    panic!("case {:?}: expected {what}; found {found}", case.what)
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    }

    // The other tenant: exactly its newest Backup is left.
    let good_api = Api::<Backup>::namespaced(h.client(), GOOD);
    harness::until(
        "the other tenant's Plan to keep exactly its newest Backup",
        || async {
            let left: BTreeSet<String> = good_api
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|b| b.metadata.name)
                .collect();
            left == BTreeSet::from([good[0].clone()])
        },
    )
    .await;
    // A policy that cannot apply deletes nothing of its Plan. (Listed untyped: the far-future
    // Backup does not decode as a typed Backup.)
    let listed =
        Api::<DynamicObject>::namespaced_with(h.client(), NS, &ApiResource::erase::<Backup>(&()))
            .list(&ListParams::default())
            .await
            .unwrap()
            .items;
    let left: BTreeSet<String> = listed
        .iter()
        .filter_map(|b| b.metadata.name.clone())
        .collect();
    // The year-9999 Backup counts as the newest of its Plan: the other one went (it used to be
    // read as taken at the Unix epoch, and went itself).
    let future: Vec<&str> = listed
        .iter()
        .filter(|b| {
            b.metadata
                .name
                .as_deref()
                .is_some_and(|n| n.starts_with("future-"))
        })
        .filter_map(|b| b.data["spec"]["takenAt"].as_str())
        .collect();
    assert_eq!(future, ["9999-01-01T00:00:00Z"]);
    for plan in [
        "age-overflow",
        "age-just-over",
        "age-nanos",
        "mars",
        "bad-cron",
    ] {
        assert_eq!(
            left.iter()
                .filter(|b| b.starts_with(&format!("{plan}-")))
                .count(),
            if plan == "mars" { 4 } else { 2 },
            "{plan}: {left:?}"
        );
    }

    h.daemon(COMPONENT).unwrap().assert_unharmed();
    assert_rbac(&h);
    h.cleanup().await.unwrap();
}
