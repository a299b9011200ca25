//! End to end on the real data plane (PostgreSQL, barman-cloud, the S3 server, the simulated CNPG
//! and Flux): the real `restore-orchestrator`, `backup-runner`, `strategy-renderer` and
//! `credentials-projector` binaries against the emulator.
//!
//! The seed's PITR scenario: marker rows, a timestamp, more rows, a backup, then the seed's
//! RestoreJob (verbatim but for the Backup's name and the timestamp) into `orders-db-copy`, and in
//! place twice; SQL shows exactly the rows committed before the timestamp; the safety backup of an
//! in-place restore exists before the purge and restoring from it brings the pre-restore rows back.
//! Then the edges: a target before the window is rejected at once, and so is one in the future past
//! the archive catch-up's deadline; a target after the last commit ends `RecoveryTargetUnreachable`
//! from the real FATAL, the same with `pods/log` forbidden ends `RestoreFailed` with the note.
//!
//! A target seconds ago, past the archive (PostgreSQL's `archive_timeout` is 5 minutes): the
//! restore forces a WAL switch before it purges, into a copy and in place; an object store that
//! answers 503 fails it `RecoveryTargetUnreachable` with the target untouched; a kill -9 of the
//! orchestrator while it waits for the switch creates no second one.
//!
//! Just over 1,000 lines: one platform and its helpers serve every CNPG restore scenario on real
//! data, and each scenario is a test of its own.

use crate::dataplane;

use api::backups::Backup;
use dataplane::*;
use harness::dataplane::{DATAPLANE_DEADLINE, psql};
use harness::{DaemonSpec, eventually_within};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use serde_json::json;

/// The seed's RestoreJob, with the Backup's name and the recovery time to fill in.
const SEED_RESTOREJOB: &str = r#"
apiVersion: backups.cozystack.io/v1alpha1
kind: RestoreJob
metadata:
  name: orders-db-pitr
  namespace: tenant-acme
spec:
  backupRef:
    name: BACKUP
  targetApplicationRef:
    apiGroup: apps.cozystack.io
    kind: Postgres
    name: orders-db-copy
  options:
    recoveryTime: "RECOVERY_TIME"
"#;

/// A platform where `orders-db` holds the table `orders` with the row `tea` and one Backup
/// (`orders-db-adhoc`), and an empty `orders-db-copy` runs: the opening of the restores below.
/// Answers the platform and the URIs of the source and the copy.
async fn orders_backed_up_with_a_copy() -> (Platform, String, String) {
    let p = Platform::start().await;
    let uri = p.uri("orders-db").await;
    psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    psql(&uri, "INSERT INTO orders VALUES (1, 'tea')");
    p.backup("orders-db-adhoc").await;
    p.app("orders-db-copy").await;
    let copy = p.uri("orders-db-copy").await;
    (p, uri, copy)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_pitr_restores_into_a_copy_and_in_place_twice_with_a_safety_backup() {
    let mut p = Platform::start().await;
    let t = p.pitr_scenario(&["tea", "cups"], "marker", "after").await;
    assert_eq!(p.rows("orders-db").await, "tea,cups,marker,after");

    // Into the copy: the seed's YAML.
    p.app("orders-db-copy").await;
    p.uri("orders-db-copy").await;
    let yaml = SEED_RESTOREJOB
        .replace("BACKUP", "orders-db-adhoc")
        .replace("RECOVERY_TIME", &t);
    p.h.apply_yaml(None, &yaml);
    let job = p.terminal("orders-db-pitr", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(
        condition(&job, "RecoveryWindowChecked").1,
        "RecoveryTargetInWindow"
    );
    assert_eq!(p.rows("orders-db-copy").await, "tea,cups,marker");
    assert_eq!(
        p.rows("orders-db").await,
        "tea,cups,marker,after",
        "the source is untouched"
    );
    // A copy restore purges the copy, never the source, and takes no safety backup.
    let audit = p.h.audit();
    assert_eq!(
        deletes(
            &audit,
            "postgresql.cnpg.io",
            "clusters",
            "postgres-orders-db"
        ),
        0
    );
    assert_eq!(
        deletes(
            &audit,
            "postgresql.cnpg.io",
            "clusters",
            "postgres-orders-db-copy"
        ),
        1
    );

    // In place: a safety backup of the live database first, then the purge, exactly once.
    p.restore(
        "in-place-1",
        "orders-db-adhoc",
        None,
        json!({"recoveryTime": t}),
    )
    .await;
    let job = p.terminal("in-place-1", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(condition(&job, "SafetyBackupReady").0, "True");
    assert_eq!(p.rows("orders-db").await, "tea,cups,marker");
    let audit = p.h.audit();
    assert_eq!(
        deletes(
            &audit,
            "postgresql.cnpg.io",
            "clusters",
            "postgres-orders-db"
        ),
        1
    );
    let order = |verb: &str, group: &str, resource: &str, name: Option<&str>| {
        audit
            .requests
            .iter()
            .position(|r| {
                r.verb == verb
                    && r.group == group
                    && r.resource == resource
                    && r.succeeded()
                    && name.is_none_or(|n| r.name.as_deref() == Some(n))
                    && r.user_agent.starts_with("restore-orchestrator/")
            })
            .unwrap_or_else(|| panic!("no {verb} {resource}"))
    };
    assert!(
        order("create", "backups.cozystack.io", "backups", None)
            < order(
                "delete",
                "postgresql.cnpg.io",
                "clusters",
                Some("postgres-orders-db")
            ),
        "the safety backup is recorded before the purge"
    );
    let safety: Backup = Api::namespaced(p.h.client(), TENANT)
        .get("in-place-1-safety")
        .await
        .unwrap();
    assert_eq!(
        safety
            .labels()
            .get("backups.cozystack.io/safety-backup")
            .map(String::as_str),
        Some("true")
    );

    // In place again (the second restore of a restored Cluster), after a write that it undoes.
    psql(
        &p.uri("orders-db").await,
        "INSERT INTO orders VALUES (5, 'between')",
    );
    p.restore(
        "in-place-2",
        "orders-db-adhoc",
        None,
        json!({"recoveryTime": t}),
    )
    .await;
    let job = p.terminal("in-place-2", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(p.rows("orders-db").await, "tea,cups,marker");
    let hr =
        p.h.dynamic::<api::thirdparty::flux::HelmRelease>(TENANT)
            .get("postgres-orders-db")
            .await
            .unwrap();
    assert_ne!(
        hr.data["spec"]["suspend"],
        json!(true),
        "the HelmRelease ends resumed"
    );

    // The safety backup of the second restore holds the row it undid: restoring from it (to the
    // end of its archive) brings that row back.
    p.restore("undo", "in-place-2-safety", None, json!({}))
        .await;
    let job = p.terminal("undo", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(p.rows("orders-db").await, "tea,cups,marker,between");

    // The restored Cluster is backed up again and restored to a point after that backup: its new
    // timeline archives under a server name of its own (whose window opens with that backup), so
    // the restore finds it.
    p.backup("after-undo-base").await;
    let uri = p.uri("orders-db").await;
    psql(&uri, "INSERT INTO orders VALUES (6, 'again')");
    let t2 = mark(&uri).await;
    psql(&uri, "INSERT INTO orders VALUES (7, 'gone')");
    p.backup("after-undo").await;
    p.restore(
        "in-place-3",
        "after-undo",
        None,
        json!({"recoveryTime": t2}),
    )
    .await;
    let job = p.terminal("in-place-3", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(p.rows("orders-db").await, "tea,cups,marker,between,again");

    // A target after the last commit never converges (the WAL switch archives it, but PostgreSQL
    // finds no commit past it): at the deadline the orchestrator reads the recovery pods' log to
    // name the cause (PostgreSQL's FATAL on the emulator, whose simulated pods have logs; no
    // kubelet runs them on kube-apiserver, whose answer is empty, so there the job ends
    // RestoreFailed).
    // The live Cluster now archives under a server name of its own, so the target is taken on a
    // backup of it (a switch can only grow the archive the live Cluster writes to).
    p.backup("before-too-late").await;
    let uri = p.uri("orders-db").await;
    let quiet = mark(&uri).await;
    p.restore(
        "too-late",
        "before-too-late",
        Some("orders-db-copy"),
        json!({"recoveryTime": quiet, "restoreTimeoutSeconds": 15}),
    )
    .await;
    let job = p.terminal("too-late", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Failed", "{:?}", job.status);
    let logs_read =
        p.h.audit()
            .requests
            .iter()
            .filter(|r| r.user_agent.starts_with("restore-orchestrator/"))
            .filter(|r| r.resource == "pods" && r.subresource.as_deref() == Some("log"))
            .count();
    assert!(logs_read > 0, "the recovery pods' log was read");

    // A safety backup is kept for the retention, then its catalog entry is deleted (an
    // orchestrator with a 1 s retention: the one of the first in-place restore goes).
    p.h.kill("restore-orchestrator").await.unwrap();
    p.h.spawn_ready(
        DaemonSpec::new("restore-orchestrator-short", bin("restore-orchestrator"))
            .args(["--safety-backup-retention=1s"]),
        READY,
    )
    .await
    .unwrap();
    let catalog: Api<Backup> = Api::namespaced(p.h.client(), TENANT);
    eventually_within("the expired safety backup deleted", READY, || {
        let catalog = catalog.clone();
        async move {
            catalog
                .get_opt("in-place-1-safety")
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;
    harness::rbac::assert_allowed(&p.h.audit(), "restore-orchestrator");
    let _ = &p.dp;
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targets_before_the_window_and_past_the_archive_fail_and_a_failed_restore_is_undone() {
    let (mut p, uri, _copy) = orders_backed_up_with_a_copy().await;
    let before = p.h.audit().requests.len();

    // Before the window: rejected at once, nothing touched.
    p.restore(
        "too-early",
        "orders-db-adhoc",
        Some("orders-db-copy"),
        json!({"recoveryTime": "2001-01-01T00:00:00Z"}),
    )
    .await;
    let job = p.terminal("too-early", READY).await;
    assert_eq!(phase(&job), "Failed");
    assert_eq!(condition(&job, "Ready").1, "RecoveryTargetBeforeWindow");
    let audit = p.h.audit();
    let touched = audit.requests[before..]
        .iter()
        .filter(|r| r.is_write() && r.user_agent.starts_with("restore-orchestrator/"))
        .filter(|r| r.resource != "restorejobs" && r.resource != "events")
        .count();
    assert_eq!(touched, 0, "a rejected target changes nothing");

    // In the future, past the deadline for the archive to reach it: refused before anything is
    // touched (no WAL switch can archive a point that has not happened yet).
    let future = (k8s_openapi::jiff::Timestamp::now()
        + k8s_openapi::jiff::SignedDuration::from_hours(1))
    .strftime("%Y-%m-%dT%H:%M:%SZ")
    .to_string();
    let before = p.h.audit().requests.len();
    p.restore(
        "in-the-future",
        "orders-db-adhoc",
        Some("orders-db-copy"),
        json!({"recoveryTime": future, "restoreTimeoutSeconds": 25}),
    )
    .await;
    let job = p.terminal("in-the-future", READY).await;
    assert_eq!(phase(&job), "Failed", "{:?}", job.status);
    let (_, reason, message) = condition(&job, "Ready");
    assert_eq!(reason, "RecoveryTargetUnreachable", "{message}");
    assert!(message.contains("it lies in the future"), "{message}");
    let (status, reason, _) = condition(&job, "RecoveryTargetArchived");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RecoveryTargetUnreachable")
    );
    let audit = p.h.audit();
    let touched = audit.requests[before..]
        .iter()
        .filter(|r| r.is_write() && r.user_agent.starts_with("restore-orchestrator/"))
        .filter(|r| r.resource != "restorejobs" && r.resource != "events")
        .count();
    assert_eq!(touched, 0, "an unreachable target changes nothing");

    // Past every commit: the WAL switch archives the target, but PostgreSQL finds no commit after
    // it, reaches the end of the archive and gives up with its FATAL, which classifies the
    // deadline. No commit follows `quiet` on orders-db until the in-place case below. The
    // deadline counts from the job's start and must leave PostgreSQL time to log its FATAL after
    // the WAL switch was archived: on busy machines the switch alone took 22 s of a 25 s one, and
    // 34 s of a 45 s one (a fresh CI run with the Go builds beside the tests).
    let quiet = mark(&uri).await;
    p.restore(
        "too-late",
        "orders-db-adhoc",
        Some("orders-db-copy"),
        json!({"recoveryTime": quiet, "restoreTimeoutSeconds": 90}),
    )
    .await;
    let job = p.terminal("too-late", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Failed", "{:?}", job.status);
    assert_eq!(
        condition(&job, "RecoveryTargetArchived").1,
        "ArchiveCoversTarget"
    );
    let (status, reason, message) = condition(&job, "RecoveryConverged");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RecoveryTargetUnreachable"),
        "{message}"
    );
    assert_eq!(condition(&job, "Ready").1, "RecoveryTargetUnreachable");

    // The same with pods/log forbidden: RestoreFailed, with the note and the Event.
    p.h.emulator().unwrap().inject_fault(harness::Fault {
        verb: Some("get".into()),
        resource: Some("pods/log".into()),
        code: 403,
        rate: 1.0,
        count: None,
        after_commit: false,
    });
    p.restore(
        "blind",
        "orders-db-adhoc",
        Some("orders-db-copy"),
        json!({"recoveryTime": quiet, "restoreTimeoutSeconds": 25}),
    )
    .await;
    let job = p.terminal("blind", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Failed", "{:?}", job.status);
    let (_, reason, message) = condition(&job, "Ready");
    assert_eq!(reason, "RestoreFailed");
    assert!(
        message.contains("pods/log RBAC grant appears to be missing"),
        "{message}"
    );
    let events: Api<DynamicObject> = Api::namespaced_with(
        p.h.client(),
        TENANT,
        &kube::core::ApiResource::erase::<k8s_openapi::api::events::v1::Event>(&()),
    );
    let seen = eventually_within("the RecoveryClassificationForbidden Event", READY, || {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            list.items.into_iter().find(|e| {
                e.data["reason"] == "RecoveryClassificationForbidden"
                    && e.data["regarding"]["name"] == "blind"
            })
        }
    })
    .await;
    assert_eq!(seen.data["type"], "Warning");
    p.h.emulator().unwrap().clear_faults();

    // A failed in-place restore (the live Cluster purged, the recovery never converging) is undone
    // from its safety backup. The broken Cluster cannot be backed up, so the rescue skips that.
    // The recovery is made to fail by stopping the object store once the purge is recorded.
    // Left alone it may converge: with a 45 s deadline it reached `quiet` 12 s after the purge
    // (some commit follows `quiet` in the archive by then), and with 25 s it ran out of time
    // first, so the outcome hung on the deadline's race with the replay. The deadline covers the safety backup and the WAL switch before the purge (13 s of
    // it on an idle machine).
    let uri = p.uri("orders-db").await;
    psql(&uri, "INSERT INTO orders VALUES (2, 'precious')");
    let quiet = mark(&uri).await;
    p.restore(
        "doomed",
        "orders-db-adhoc",
        None,
        json!({"recoveryTime": quiet, "restoreTimeoutSeconds": 45}),
    )
    .await;
    let restores = p.restores();
    eventually_within("doomed's purge of orders-db", DATAPLANE_DEADLINE, || {
        let restores = restores.clone();
        async move {
            let job = restores.get("doomed").await.ok()?;
            let purged = job.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "TargetPurged" && c.status == api::ConditionStatus::True)
            });
            (purged || job.is_terminal()).then_some(())
        }
    })
    .await;
    p.dp.s3_mode("stop").await;
    let job = p.terminal("doomed", DATAPLANE_DEADLINE).await;
    p.dp.s3_mode("none").await;
    assert_eq!(phase(&job), "Failed", "{:?}", job.status);
    assert_eq!(
        condition(&job, "SafetyBackupReady").0,
        "True",
        "{:?}",
        job.status
    );
    assert_eq!(
        condition(&job, "TargetPurged").0,
        "True",
        "{:?}",
        job.status
    );
    p.restore(
        "rescue",
        "doomed-safety",
        None,
        json!({"skipSafetyBackup": true}),
    )
    .await;
    let job = p.terminal("rescue", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(p.rows("orders-db").await, "tea,precious");
    harness::rbac::assert_allowed(&p.h.audit(), "restore-orchestrator");
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_near_now_target_converges_behind_a_slow_archiver() {
    let (mut p, uri, _copy) = orders_backed_up_with_a_copy().await;
    // Every WAL segment now reaches the bucket seconds late.
    let clusters = p.h.dynamic::<api::thirdparty::cnpg::Cluster>(TENANT);
    clusters
        .patch(
            "postgres-orders-db",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                "operator-sims.cozy-backups.io/archive-delay": "4s"}}})),
        )
        .await
        .unwrap();
    psql(&uri, "INSERT INTO orders VALUES (2, 'cups')");
    let t = mark(&uri).await;
    psql(&uri, "INSERT INTO orders VALUES (3, 'later')");
    // The segment holding the commit after the target is handed to the (slow) archiver, as
    // archive_timeout would.
    let admin =
        p.h.secret_data(TENANT, "postgres-orders-db-superuser")
            .await
            .unwrap()["uri"]
            .replace("/*", "/postgres");
    psql(&admin, "SELECT pg_switch_wal()");
    p.restore(
        "near-now",
        "orders-db-adhoc",
        Some("orders-db-copy"),
        json!({"recoveryTime": t}),
    )
    .await;
    let job = p.terminal("near-now", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(p.rows("orders-db-copy").await, "tea,cups");
    p.h.cleanup().await.unwrap();
}

/// Every write of an in-place CNPG restore, in order: the orchestrator is killed -9 right after
/// each one is stored and before it hears back — `(verb, group, resource, subresource)`.
const CRASH_POINTS: [(&str, &str, &str, &str); 10] = [
    ("patch", "backups.cozystack.io", "restorejobs", ""), // the finalizer
    ("patch", "backups.cozystack.io", "restorejobs", "status"), // startedAt
    ("create", "postgresql.cnpg.io", "backups", ""),      // the safety backup
    ("create", "backups.cozystack.io", "backups", ""),    // its catalog entry
    ("patch", "helm.toolkit.fluxcd.io", "helmreleases", ""), // suspend
    ("patch", "apps.cozystack.io", "postgreses", ""),     // the restore patch
    ("delete", "postgresql.cnpg.io", "clusters", ""),     // the purge (the PVCs go with it)
    ("patch", "backups.cozystack.io", "restorejobs", "status"), // TargetPurged
    ("patch", "helm.toolkit.fluxcd.io", "helmreleases", ""), // resume
    ("patch", "backups.cozystack.io", "restorejobs", "status"), // Succeeded
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_every_write_of_an_in_place_restore_repeats_nothing() {
    let mut p = Platform::start().await;
    let t = p.pitr_scenario(&["tea"], "cups", "later").await;

    let hold = |(verb, group, resource, sub): (&str, &str, &str, &str)| harness::Hold {
        verb: Some(verb.into()),
        group: Some(group.into()),
        resource: Some(resource.into()),
        subresource: Some(sub.into()),
        user_agent: Some("restore-orchestrator/".into()),
    };
    // Each rule is installed before the orchestrator (re)starts, so the write it names cannot slip by.
    p.h.emulator().unwrap().hold(hold(CRASH_POINTS[0]));
    p.restore(
        "crashy",
        "orders-db-adhoc",
        None,
        json!({"recoveryTime": t}),
    )
    .await;
    for (i, point) in CRASH_POINTS.into_iter().enumerate() {
        eventually_within(
            &format!("the orchestrator's {point:?} held"),
            DATAPLANE_DEADLINE,
            || async { (p.h.emulator().unwrap().held() > i as u64).then_some(()) },
        )
        .await;
        p.h.kill("restore-orchestrator").await.unwrap();
        let emu = p.h.emulator().unwrap();
        emu.release_holds();
        if let Some(next) = CRASH_POINTS.get(i + 1) {
            emu.hold(hold(*next));
        }
        p.h.restart("restore-orchestrator", READY).await.unwrap();
    }

    let job = p.terminal("crashy", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(p.rows("orders-db").await, "tea,cups");
    let audit = p.h.audit();
    assert_eq!(
        deletes(
            &audit,
            "postgresql.cnpg.io",
            "clusters",
            "postgres-orders-db"
        ),
        1,
        "the Cluster is deleted exactly once"
    );
    assert_eq!(
        audit.creates_by("restore-orchestrator/", "postgresql.cnpg.io", "backups"),
        1
    );
    assert_eq!(
        audit.creates_by("restore-orchestrator/", "backups.cozystack.io", "backups"),
        1
    );
    let hr =
        p.h.dynamic::<api::thirdparty::flux::HelmRelease>(TENANT)
            .get("postgres-orders-db")
            .await
            .unwrap();
    assert_ne!(
        hr.data["spec"]["suspend"],
        json!(true),
        "the HelmRelease ends resumed"
    );

    // The safety backup of a successful restore is kept for the retention, then deleted.
    let catalog: Api<Backup> = Api::namespaced(p.h.client(), TENANT);
    assert!(catalog.get_opt("crashy-safety").await.unwrap().is_some());
    p.h.kill("restore-orchestrator").await.unwrap();
    p.h.spawn_ready(
        DaemonSpec::new("restore-orchestrator-short", bin("restore-orchestrator"))
            .args(["--safety-backup-retention=1s"]),
        READY,
    )
    .await
    .unwrap();
    eventually_within("the expired safety backup deleted", READY, || {
        let catalog = catalog.clone();
        async move {
            catalog
                .get_opt("crashy-safety")
                .await
                .ok()?
                .is_none()
                .then_some(())
        }
    })
    .await;
    harness::rbac::assert_allowed(&p.h.audit(), "restore-orchestrator");
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_restore_once_when_the_one_driving_is_killed() {
    let mut p = Platform::start_with(async |h: &mut harness::Harness| {
        two_leased_orchestrators(h, &[]).await
    })
    .await;
    let t = p.pitr_scenario(&["tea"], "cups", "later").await;

    // The replica driving the restore is stopped right after it suspended the HelmRelease.
    p.h.emulator().unwrap().hold(harness::Hold {
        verb: Some("patch".into()),
        group: Some("helm.toolkit.fluxcd.io".into()),
        resource: Some("helmreleases".into()),
        subresource: Some(String::new()),
        user_agent: Some("restore-orchestrator/".into()),
    });
    p.restore(
        "failover",
        "orders-db-adhoc",
        None,
        json!({"recoveryTime": t}),
    )
    .await;
    eventually_within("the suspend held", DATAPLANE_DEADLINE, || async {
        (p.h.emulator().unwrap().held() > 0).then_some(())
    })
    .await;
    let events: Api<DynamicObject> = Api::namespaced_with(
        p.h.client(),
        TENANT,
        &kube::core::ApiResource::erase::<k8s_openapi::api::events::v1::Event>(&()),
    );
    let by = |reason: &'static str| {
        let events = events.clone();
        async move {
            let list = events.list(&Default::default()).await.ok()?;
            list.items.into_iter().find_map(|e| {
                (e.data["reason"] == reason && e.data["regarding"]["name"] == "failover")
                    .then(|| e.data["reportingInstance"].as_str().map(str::to_owned))
                    .flatten()
            })
        }
    };
    let driver = eventually_within("RestoreStarted", READY, || by("RestoreStarted")).await;
    p.h.kill(&driver).await.unwrap();
    p.h.emulator().unwrap().release_holds();

    let job = p.terminal("failover", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(p.rows("orders-db").await, "tea,cups");
    let audit = p.h.audit();
    assert_eq!(
        deletes(
            &audit,
            "postgresql.cnpg.io",
            "clusters",
            "postgres-orders-db"
        ),
        1
    );
    let finisher = eventually_within("RestoreSucceeded", READY, || by("RestoreSucceeded")).await;
    assert_ne!(finisher, driver, "the other replica took over");
    let token: u64 = job.annotations()["backups.cozystack.io/restore-orchestrator-lease-token"]
        .parse()
        .unwrap();
    assert!(token > 0);
    harness::rbac::assert_allowed(&audit, "restore-orchestrator");
    p.h.cleanup().await.unwrap();
}

/// `now() - 2 s` on PostgreSQL's clock, to the second (RFC 3339), taken right after a write: with
/// the write before it 3.2 s older, the target lies strictly between the two.
async fn two_seconds_ago(uri: &str, before: &str, after: &str, id: &mut i32) -> String {
    *id += 1;
    psql(
        uri,
        &format!("INSERT INTO orders VALUES ({id}, '{before}')"),
    );
    // Wall-clock time must pass between the two writes for a target between them.
    tokio::time::sleep(std::time::Duration::from_millis(3200)).await;
    *id += 1;
    psql(uri, &format!("INSERT INTO orders VALUES ({id}, '{after}')"));
    psql(
        uri,
        "SELECT to_char((now() - interval '2 seconds') AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
    )
}

/// The switch cnpg Backups the orchestrator created (`<job>-wal-switch-<uid>`).
async fn switch_backups(p: &Platform) -> Vec<String> {
    p.h.dynamic::<api::thirdparty::cnpg::Backup>(TENANT)
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|b| {
            b.labels()
                .contains_key("backups.cozystack.io/wal-switch.RestoreJobName")
        })
        .map(|b| b.name_any())
        .collect()
}

/// The S3 server's fault switches, through its admin endpoint.
async fn s3_faults(p: &Platform, faults: operator_sims::s3::Faults) {
    let endpoints = operator_sims::s3::Endpoints::read(&p.dp.data_dir.join("s3")).unwrap();
    operator_sims::s3::put_faults(&endpoints.admin, faults)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_two_seconds_ago_restores_into_a_copy_and_in_place_without_archive_timeout() {
    let (mut p, uri, _copy) = orders_backed_up_with_a_copy().await;
    let mut id = 1;

    // Into the copy: the target's WAL segment is still open (archive_timeout is 5 minutes).
    let t = two_seconds_ago(&uri, "cups", "later", &mut id).await;
    let start = std::time::Instant::now();
    p.restore(
        "recent-copy",
        "orders-db-adhoc",
        Some("orders-db-copy"),
        json!({"recoveryTime": t}),
    )
    .await;
    let job = p.terminal("recent-copy", DATAPLANE_DEADLINE).await;
    let copy_took = start.elapsed();
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(
        condition(&job, "RecoveryWindowChecked").1,
        "RecoveryTargetAfterWindow"
    );
    let (status, reason, message) = condition(&job, "RecoveryTargetArchived");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("True", "ArchiveCoversTarget"),
        "{message}"
    );
    assert_eq!(p.rows("orders-db-copy").await, "tea,cups");
    let uid = job.uid().unwrap();
    assert_eq!(
        switch_backups(&p).await,
        vec![format!("recent-copy-wal-switch-{}", &uid[..8])]
    );

    // In place: the safety backup of the live database is the WAL switch.
    let t = two_seconds_ago(&uri, "spoons", "forks", &mut id).await;
    let start = std::time::Instant::now();
    p.restore(
        "recent-in-place",
        "orders-db-adhoc",
        None,
        json!({"recoveryTime": t}),
    )
    .await;
    let job = p.terminal("recent-in-place", DATAPLANE_DEADLINE).await;
    let in_place_took = start.elapsed();
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(condition(&job, "SafetyBackupReady").0, "True");
    assert_eq!(
        condition(&job, "RecoveryTargetArchived").1,
        "ArchiveCoversTarget"
    );
    assert_eq!(p.rows("orders-db").await, "tea,cups,later,spoons");
    assert_eq!(
        switch_backups(&p).await.len(),
        1,
        "no switch Backup of its own"
    );
    println!(
        "restore to now-2s with archive_timeout=5min: into a copy {copy_took:?}, in place {in_place_took:?}"
    );
    harness::rbac::assert_allowed(&p.h.audit(), "restore-orchestrator");
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_that_cannot_catch_up_fails_unreachable_and_leaves_the_target_untouched() {
    use operator_sims::s3::{FaultMode, Faults};
    let (mut p, uri, copy) = orders_backed_up_with_a_copy().await;
    psql(&copy, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    psql(&copy, "INSERT INTO orders VALUES (1, 'the copy as it was')");
    let clusters = p.h.dynamic::<api::thirdparty::cnpg::Cluster>(TENANT);
    let copy_uid = clusters.get("postgres-orders-db-copy").await.unwrap().uid();
    let mut id = 1;
    let t = two_seconds_ago(&uri, "cups", "later", &mut id).await;

    // The object store answers 503 to everything: neither the switch nor the archiver gets
    // through.
    s3_faults(
        &p,
        Faults {
            mode: FaultMode::Unavailable,
            delay_ms: 0,
        },
    )
    .await;
    let before = p.h.audit().requests.len();
    p.restore(
        "stuck",
        "orders-db-adhoc",
        Some("orders-db-copy"),
        json!({"recoveryTime": t, "walSwitchTimeoutSeconds": 15}),
    )
    .await;
    let job = p.terminal("stuck", DATAPLANE_DEADLINE).await;
    s3_faults(&p, Faults::default()).await;
    assert_eq!(phase(&job), "Failed", "{:?}", job.status);
    let (_, reason, message) = condition(&job, "Ready");
    assert_eq!(reason, "RecoveryTargetUnreachable", "{message}");
    for part in [
        format!("point-in-time recovery target {t} is not covered by the WAL archive"),
        "the newest archived point is ".to_owned(),
        "within the 15s deadline after a WAL switch was forced".to_owned(),
        "Nothing was changed: tenant-acme/orders-db-copy is untouched".to_owned(),
    ] {
        assert!(message.contains(&part), "{part:?} not in {message}");
    }
    println!("{message}");
    let (status, reason, _) = condition(&job, "RecoveryTargetArchived");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "RecoveryTargetUnreachable")
    );
    // The target is as it was: same Cluster, same rows; the orchestrator wrote nothing but the
    // job, its Events and the switch Backup.
    assert_eq!(
        clusters.get("postgres-orders-db-copy").await.unwrap().uid(),
        copy_uid
    );
    assert_eq!(p.rows("orders-db-copy").await, "the copy as it was");
    let audit = p.h.audit();
    let writes: Vec<String> = audit.requests[before..]
        .iter()
        .filter(|r| r.is_write() && r.user_agent.starts_with("restore-orchestrator/"))
        .filter(|r| r.resource != "restorejobs" && r.resource != "events")
        .map(|r| format!("{} {}/{}", r.verb, r.group, r.resource))
        .collect();
    assert_eq!(writes, vec!["create postgresql.cnpg.io/backups"]);

    // In place, the same object store: the safety backup fails first (SafetyBackupFailed); without
    // one, the catch-up fails RecoveryTargetUnreachable. The live database is untouched either way.
    let source_uid = clusters.get("postgres-orders-db").await.unwrap().uid();
    let rows = p.rows("orders-db").await;
    let t = two_seconds_ago(&uri, "mugs", "plates", &mut id).await;
    s3_faults(
        &p,
        Faults {
            mode: FaultMode::Unavailable,
            delay_ms: 0,
        },
    )
    .await;
    for (name, options, reason) in [
        (
            "stuck-in-place",
            json!({"recoveryTime": t, "walSwitchTimeoutSeconds": 15}),
            "RestoreFailed",
        ),
        (
            "stuck-in-place-unsafe",
            json!({"recoveryTime": t, "walSwitchTimeoutSeconds": 15, "skipSafetyBackup": true}),
            "RecoveryTargetUnreachable",
        ),
    ] {
        p.restore(name, "orders-db-adhoc", None, options).await;
        let job = p.terminal(name, DATAPLANE_DEADLINE).await;
        assert_eq!(phase(&job), "Failed", "{:?}", job.status);
        let (_, got, message) = condition(&job, "Ready");
        assert_eq!(got, reason, "{name}: {message}");
        println!("{name}: {message}");
    }
    s3_faults(&p, Faults::default()).await;
    assert_eq!(
        clusters.get("postgres-orders-db").await.unwrap().uid(),
        source_uid
    );
    assert_eq!(
        p.rows("orders-db").await,
        format!("{rows},mugs,plates"),
        "the live database keeps every row"
    );
    let audit = p.h.audit();
    for (resource, name) in [
        ("clusters", "postgres-orders-db"),
        ("clusters", "postgres-orders-db-copy"),
    ] {
        assert_eq!(deletes(&audit, "postgresql.cnpg.io", resource, name), 0);
    }
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_waiting_for_the_wal_switch_creates_no_second_switch() {
    let (mut p, uri, _copy) = orders_backed_up_with_a_copy().await;
    // The source's Backups stay `started` until the annotation goes: the restore waits.
    let clusters = p.h.dynamic::<api::thirdparty::cnpg::Cluster>(TENANT);
    let annotate = |value: serde_json::Value| {
        let clusters = clusters.clone();
        async move {
            clusters
                .patch(
                    "postgres-orders-db",
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(json!({"metadata": {"annotations": {
                        "operator-sims.cozy-backups.io/hang": value}}})),
                )
                .await
                .unwrap();
        }
    };
    annotate(json!("true")).await;
    let mut id = 1;
    let t = two_seconds_ago(&uri, "cups", "later", &mut id).await;

    // Killed right after the switch Backup is stored, before the orchestrator hears back.
    let emu = p.h.emulator().unwrap();
    emu.hold(harness::Hold {
        verb: Some("create".into()),
        group: Some("postgresql.cnpg.io".into()),
        resource: Some("backups".into()),
        subresource: Some(String::new()),
        user_agent: Some("restore-orchestrator/".into()),
    });
    p.restore(
        "switchy",
        "orders-db-adhoc",
        Some("orders-db-copy"),
        json!({"recoveryTime": t}),
    )
    .await;
    eventually_within(
        "the switch Backup's create held",
        DATAPLANE_DEADLINE,
        || async { (p.h.emulator().unwrap().held() > 0).then_some(()) },
    )
    .await;
    p.h.kill("restore-orchestrator").await.unwrap();
    p.h.emulator().unwrap().release_holds();
    p.h.restart("restore-orchestrator", READY).await.unwrap();

    // Killed again while it waits for the hung switch; nothing is purged meanwhile.
    let api = p.restores();
    eventually_within("the restore waiting for the switch", READY, || {
        let api = api.clone();
        async move {
            let job = api.get("switchy").await.ok()?;
            let c = job
                .status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "RecoveryTargetArchived")?;
            (c.reason == "WaitingForWALSwitch").then_some(())
        }
    })
    .await;
    p.h.kill("restore-orchestrator").await.unwrap();
    p.h.restart("restore-orchestrator", READY).await.unwrap();
    assert_eq!(switch_backups(&p).await.len(), 1);
    let job = api.get("switchy").await.unwrap();
    assert!(!job.is_terminal(), "{:?}", job.status);
    assert!(
        clusters
            .get_opt("postgres-orders-db-copy")
            .await
            .unwrap()
            .is_some(),
        "nothing purged before the window covers the target"
    );

    annotate(serde_json::Value::Null).await;
    let job = p.terminal("switchy", DATAPLANE_DEADLINE).await;
    assert_eq!(phase(&job), "Succeeded", "{:?}", job.status);
    assert_eq!(p.rows("orders-db-copy").await, "tea,cups");
    let audit = p.h.audit();
    assert_eq!(
        audit.creates_by("restore-orchestrator/", "postgresql.cnpg.io", "backups"),
        1,
        "exactly one switch Backup"
    );
    assert_eq!(switch_backups(&p).await.len(), 1);
    assert_eq!(
        deletes(
            &audit,
            "postgresql.cnpg.io",
            "clusters",
            "postgres-orders-db-copy"
        ),
        1
    );
    harness::rbac::assert_allowed(&audit, "restore-orchestrator");
    p.h.cleanup().await.unwrap();
}
