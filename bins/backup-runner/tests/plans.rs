//! Plans end to end: the real `backup-runner` (and `lease-server`) binaries against the emulator,
//! on the real clock. A due slot makes exactly upstream's BackupJob; a slot fires once across a
//! crash between create and status write, across a leader's kill -9 and with a second replica;
//! slots missed beyond the starting deadline are reported once; an unparsable schedule is a
//! condition with a reason a real API server accepts; `concurrencyPolicy: Forbid` skips a slot
//! while a job runs.
//!
//! Slots of `@every 1m` lie one minute after the Plan's creation, so the slow tests wait about a
//! minute of wall time; they share one harness where they can.

use std::path::PathBuf;
use std::time::Duration;

use api::backups::{BackupJob, Plan};
use chrono::{DateTime, Utc};
use harness::{Admin, DaemonSpec, Harness, eventually, eventually_within};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

const NS: &str = "tenant-plans";
const READY: Duration = Duration::from_secs(60);
const RUNS: &str = "cozy_backups_backup_runner_reconcile_runs_total";
const SLOTS: &str = "cozy_backups_backup_runner_plan_slots_total";
/// Up to a minute until the first slot, plus slack.
const SLOT_WAIT: Duration = Duration::from_secs(100);
const MINUTE: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

fn runner(name: &str, args: &[&str]) -> DaemonSpec {
    DaemonSpec::new(name, PathBuf::from(env!("CARGO_BIN_EXE_backup-runner")))
        .args(["--require-credentials-projection=false"])
        .args(args.iter().copied())
}

async fn start() -> Harness {
    let h = Harness::start().await.unwrap();
    h.create_namespaces(&[NS]).await.unwrap();
    h
}

fn plans(h: &Harness) -> Api<Plan> {
    Api::namespaced(h.client(), NS)
}

fn jobs(h: &Harness) -> Api<BackupJob> {
    Api::namespaced(h.client(), NS)
}

/// A Plan on `cron` (with `concurrencyPolicy`, if given).
async fn plan(h: &Harness, name: &str, cron: &str, policy: Option<&str>) -> Plan {
    let mut plan = Plan::test(name, cron).build();
    plan.spec.concurrency_policy = policy.map(str::to_owned);
    h.create(NS, &plan).await
}

/// The first slot of an `@every <step>` Plan: one step after its creation.
fn first_slot(plan: &Plan, step: chrono::TimeDelta) -> DateTime<Utc> {
    let created = plan.metadata.creation_timestamp.as_ref().unwrap().0;
    DateTime::from_timestamp(created.as_second(), 0).unwrap() + step
}

/// Waits for the Plan's `status.lastScheduleTime` to be `slot`.
async fn recorded(h: &Harness, name: &str, slot: DateTime<Utc>) -> Plan {
    eventually_within(
        &format!("Plan {name} to record {}", rfc3339(slot)),
        SLOT_WAIT,
        || async {
            let p = plans(h).get(name).await.ok()?;
            (status_time(&p, "lastScheduleTime") == Some(rfc3339(slot))).then_some(p)
        },
    )
    .await
}

/// A BackupJob of `plan` named for `slot`, controlled by the Plan, as a runner would create it.
fn job_of(plan: &Plan, slot: DateTime<Utc>) -> BackupJob {
    let mut job = BackupJob::test(&format!("{}-{}", plan.name_any(), minutes(slot)))
        .plan(&plan.name_any())
        .build();
    job.metadata.owner_references = Some(vec![
        kube::Resource::controller_owner_ref(plan, &()).unwrap(),
    ]);
    job
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn minutes(t: DateTime<Utc>) -> i64 {
    t.timestamp().div_euclid(60)
}

fn status_time(plan: &Plan, field: &str) -> Option<String> {
    serde_json::to_value(plan.status.as_ref()?).ok()?[field]
        .as_str()
        .map(str::to_owned)
}

/// Events about `plan` with `reason`, as written (events.k8s.io/v1).
async fn events(h: &Harness, plan: &str, reason: &str) -> Vec<Event> {
    Api::<Event>::namespaced(h.client(), NS)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(plan)
        })
        .collect()
}

/// How many BackupJob creates succeeded, by anyone (the emulator's audit log).
fn job_creates(h: &Harness) -> usize {
    h.audit()
        .count_writes(Some("create"), "backupjobs", Some(NS), None)
}

/// The BackupJobs' names, sorted.
async fn job_names(h: &Harness) -> Vec<String> {
    let mut names: Vec<String> = jobs(h)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn due_slots_create_upstreams_job_once_or_are_forbidden() {
    let mut h = start().await;
    // `nightly`: the plain case. `crashed`: its job was created by a runner killed before it
    // recorded the slot. `strict`: Forbid while the job of an earlier slot still runs (its class
    // does not exist, so the runner leaves it waiting rather than finishing it).
    let nightly = plan(&h, "nightly", "@every 1m", None).await;
    let crashed = plan(&h, "crashed", "@every 1m", None).await;
    let strict = plan(&h, "strict", "@every 1m", Some("Forbid")).await;
    let crashed_job = job_of(&crashed, first_slot(&crashed, MINUTE));
    h.create(NS, &crashed_job).await;
    let mut running = job_of(&strict, first_slot(&strict, MINUTE) - MINUTE);
    running.spec.backup_class_name = "not-yet".into();
    h.create(NS, &running).await;
    jobs(&h)
        .patch_status(
            &running.name_any(),
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .unwrap();
    let admin = h
        .spawn_ready(runner("backup-runner", &[]), READY)
        .await
        .unwrap()
        .admin()
        .await
        .unwrap();

    // Before the first slot: nothing, and the next slot is shown.
    let p = eventually("nightly's next slot", || async {
        let p = plans(&h).get("nightly").await.ok()?;
        status_time(&p, "nextScheduleTime").is_some().then_some(p)
    })
    .await;
    let slot = first_slot(&nightly, MINUTE);
    assert_eq!(status_time(&p, "nextScheduleTime"), Some(rfc3339(slot)));
    assert_eq!(status_time(&p, "lastScheduleTime"), None);

    // nightly: upstream's job, the slot recorded, an Event.
    let p = recorded(&h, "nightly", slot).await;
    let name = format!("nightly-{}", minutes(slot));
    let job = jobs(&h).get(&name).await.unwrap();
    assert_eq!(
        json!({"spec": job.spec, "labels": job.metadata.labels, "owners": job.owner_references()}),
        json!({
            "spec": {"planRef": {"name": "nightly"},
                     "applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "Postgres", "name": "db"},
                     "backupClassName": "cozy-default"},
            "labels": null,
            "owners": [{"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Plan",
                        "name": "nightly", "uid": nightly.uid().unwrap(),
                        "controller": true, "blockOwnerDeletion": true}],
        })
    );
    assert_eq!(
        status_time(&p, "nextScheduleTime"),
        Some(rfc3339(slot + MINUTE))
    );
    let error = &p.status.as_ref().unwrap().conditions[0];
    assert_eq!(
        (
            error.type_.as_str(),
            error.is_true(),
            error.reason.as_str(),
            error.message.as_str()
        ),
        (
            "Error",
            false,
            "CronSpecValid",
            "The cron schedule has been successfully parsed"
        )
    );
    let created = eventually("a BackupJobCreated Event", || async {
        events(&h, "nightly", "BackupJobCreated").await.pop()
    })
    .await;
    assert_eq!(
        created.note.as_deref(),
        Some(format!("created BackupJob {name}").as_str())
    );
    let table = h.kubectl(&["-n", NS, "get", "plans"]);
    assert!(table.contains("@every 1m"), "{table}");

    // crashed: AlreadyExists, the slot recorded, no second job, no Event.
    recorded(&h, "crashed", first_slot(&crashed, MINUTE)).await;
    assert!(events(&h, "crashed", "BackupJobCreated").await.is_empty());

    // strict: skipped with an Event naming the running job, the slot recorded.
    let strict_slot = first_slot(&strict, MINUTE);
    recorded(&h, "strict", strict_slot).await;
    let forbidden = events(&h, "strict", "ConcurrentRunForbidden").await;
    assert_eq!(forbidden.len(), 1);
    assert_eq!(
        forbidden[0].note.as_deref(),
        Some(
            format!(
                "skipped the slot of strict-{}: concurrencyPolicy is Forbid and {} still running",
                minutes(strict_slot),
                running.name_any()
            )
            .as_str()
        )
    );

    // Exactly one create per slot, by anyone: the test's two and nightly's.
    let mut expected = vec![name, crashed_job.name_any(), running.name_any()];
    expected.sort();
    assert_eq!(job_names(&h).await, expected);
    assert_eq!(job_creates(&h), 3);
    harness::rbac::assert_allowed(&h.audit(), "backup-runner");
    let m = admin.metrics();
    assert_eq!(
        [("created", 1.0), ("exists", 1.0), ("forbidden", 1.0)]
            .map(|(r, _)| (r, m.value(SLOTS, &[("result", r)]))),
        [("created", 1.0), ("exists", 1.0), ("forbidden", 1.0)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_fires_once_across_a_leader_kill_and_a_second_replica() {
    let mut h = start().await;
    // The secured lease server, as in production: TLS, the runner's ServiceAccount token.
    let lease = h
        .spawn_component_lease_server(
            DaemonSpec::new(
                "lease-server",
                harness::locate_binary("lease-server").unwrap(),
            )
            // Its epoch in its own namespace, where its Role allows it.
            .args(["--namespace", "cozy-backup-controller", "--max-ttl", "2s"]),
            "backup-runner",
            "cozy-backup-controller",
            READY,
        )
        .await
        .unwrap();
    let lease_args = lease.args();
    let p = plan(&h, "replicated", "@every 1m", None).await;
    let mut admins = Vec::new();
    for who in ["runner-a", "runner-b"] {
        let mut args: Vec<&str> = lease_args.iter().map(String::as_str).collect();
        args.extend(["--identity", who, "--lease-ttl", "2s"]);
        let spec = runner(who, &args);
        admins.push((
            who,
            h.spawn_ready(spec, READY)
                .await
                .unwrap()
                .admin()
                .await
                .unwrap(),
        ));
    }
    let slot = first_slot(&p, MINUTE);
    recorded(&h, "replicated", slot).await;
    let evaluated = |a: &Admin| a.metrics().value(RUNS, &[("controller", "plans")]) > 0.0;
    let leaders: Vec<&str> = admins
        .iter()
        .filter(|(_, a)| evaluated(a))
        .map(|(w, _)| *w)
        .collect();
    assert_eq!(leaders.len(), 1, "only the leader evaluates Plans");
    let (leader, follower) = match leaders[0] {
        "runner-a" => (&admins[0], &admins[1]),
        _ => (&admins[1], &admins[0]),
    };

    // kill -9 the leader: the follower takes over and re-evaluates every Plan, firing nothing.
    h.kill(leader.0).await.unwrap();
    eventually_within("the follower to take over", READY, || async {
        evaluated(&follower.1).then_some(())
    })
    .await;
    h.restart(leader.0, READY).await.unwrap();
    assert_eq!(
        follower.1.metrics().value(SLOTS, &[("result", "created")]),
        0.0
    );
    assert_eq!(
        job_names(&h).await,
        vec![format!("replicated-{}", minutes(slot))]
    );
    assert_eq!(job_creates(&h), 1);
    let p = plans(&h).get("replicated").await.unwrap();
    assert_eq!(status_time(&p, "lastScheduleTime"), Some(rfc3339(slot)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slots_missed_beyond_the_deadline_are_reported_once() {
    let mut h = start().await;
    // Every 4 s with a deadline of 2 s: the runner records a slot, is killed for three slots,
    // and comes back.
    let step = chrono::TimeDelta::seconds(4);
    let p = plan(&h, "missed", "@every 4s", None).await;
    h.spawn_ready(
        runner("backup-runner", &["--plan-starting-deadline=2s"]),
        READY,
    )
    .await
    .unwrap();
    let plans_api = plans(&h);
    let last_slot = async || -> Option<DateTime<Utc>> {
        let p = plans_api.get("missed").await.ok()?;
        status_time(&p, "lastScheduleTime")?.parse().ok()
    };
    eventually("a first slot recorded", || async {
        (last_slot().await? >= first_slot(&p, step)).then_some(())
    })
    .await;
    h.kill("backup-runner").await.unwrap();
    let recorded_before = last_slot().await.unwrap();
    let first = recorded_before + step;
    harness::until("three slots to pass", || async {
        Utc::now() > first + step * 2 + chrono::TimeDelta::milliseconds(500)
    })
    .await;
    let missed_before = events(&h, "missed", "MissedSchedule").await.len();
    h.restart("backup-runner", READY).await.unwrap();

    let event = eventually("a MissedSchedule Event", || async {
        let all = events(&h, "missed", "MissedSchedule").await;
        all.into_iter().find(|e| {
            e.note
                .as_deref()
                .is_some_and(|n| n.contains(&first.to_rfc3339()))
        })
    })
    .await;
    assert_eq!(missed_before, 0, "nothing missed while the runner ran");
    let note = event.note.unwrap();
    let prefix = "missed ";
    let (count, rest) = note[prefix.len()..].split_once(' ').unwrap();
    let count: i64 = count.parse().unwrap();
    let newest = first + step * (count as i32 - 1);
    assert_eq!(
        note,
        format!(
            "missed {count} schedule slot(s) from {} to {}: later than the starting deadline of 2s",
            first.to_rfc3339(),
            newest.to_rfc3339()
        ),
        "{rest}"
    );
    assert!(count >= 2, "{note}");
    // The slots after the skipped ones run; none of the skipped ones is reported again or run.
    let next = newest + step;
    eventually("two more slots dealt with", || async {
        let p = plans(&h).get("missed").await.ok()?;
        let last: DateTime<Utc> = status_time(&p, "lastScheduleTime")?.parse().ok()?;
        (last >= next + step).then_some(())
    })
    .await;
    for e in events(&h, "missed", "MissedSchedule").await {
        assert!(e.series.is_none(), "reported once: {e:?}");
        if e.note.as_deref() != Some(note.as_str()) {
            let from = e.note.as_deref().unwrap().split(" from ").nth(1).unwrap();
            let from: DateTime<Utc> = from.split(" to ").next().unwrap().parse().unwrap();
            assert!(from > newest, "{e:?} repeats slots of {note}");
        }
    }
    let skipped = (minutes(first)..=minutes(newest))
        .filter(|m| *m < minutes(next) && *m > minutes(recorded_before));
    for minute in skipped {
        assert!(
            jobs(&h)
                .get_opt(&format!("missed-{minute}"))
                .await
                .unwrap()
                .is_none(),
            "a job for the skipped minute {minute}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unparsable_schedule_is_an_error_condition_until_fixed() {
    let mut h = start().await;
    h.spawn_ready(runner("backup-runner", &[]), READY)
        .await
        .unwrap();
    plan(&h, "broken", "61 * * * *", None).await;
    let p = eventually("Error=True", || async {
        let p = plans(&h).get("broken").await.ok()?;
        let c = p.status.as_ref()?.conditions.first()?.clone();
        c.is_true().then_some(c)
    })
    .await;
    assert_eq!(p.reason, "CronSpecInvalid");
    assert_eq!(
        p.message,
        "could not parse cron 61 * * * *: minute field \"61\": 61 is above the maximum 59"
    );
    let warned = eventually("an InvalidSchedule Event", || async {
        events(&h, "broken", "InvalidSchedule").await.pop()
    })
    .await;
    assert_eq!(warned.type_.as_deref(), Some("Warning"));
    assert_eq!(warned.note.as_deref(), Some(p.message.as_str()));

    plans(&h)
        .patch(
            "broken",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"schedule": {"cron": "CRON_TZ=Europe/Berlin 0 2 * * *"}}}),
            ),
        )
        .await
        .unwrap();
    let p = eventually("Error=False", || async {
        let p = plans(&h).get("broken").await.ok()?;
        let c = p.status.as_ref()?.conditions.first()?.clone();
        (!c.is_true()).then_some(p)
    })
    .await;
    assert_eq!(
        p.status.as_ref().unwrap().conditions[0].reason,
        "CronSpecValid"
    );
    assert!(status_time(&p, "nextScheduleTime").is_some());
    assert_eq!(job_creates(&h), 0);
}
