//! Restore drills end to end on the real data plane (PostgreSQL, barman-cloud, the S3 server, the
//! simulated CNPG and Flux) with the real daemons: a Plan with `verification.every: 1` has its
//! Backup restored into a scratch copy, checked with its SQL and recorded `Passed`, every scratch
//! object gone and the live database unchanged; a Backup whose base backup was deleted from the
//! bucket by hand records `Failed` with barman's words; kill -9 of the orchestrator at each write
//! of a drill leaves no scratch object and exactly one result.

use crate::dataplane;

use std::time::Duration;

use api::backups::{Backup, BackupJob, Plan, RestoreJob};
use api::contract::drills;
use dataplane::*;
use harness::dataplane::{DATAPLANE_DEADLINE, psql};
use harness::{DaemonSpec, Harness, eventually_within};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use serde_json::json;

/// The drilled application, named as the dev control plane's seeded one: its scratch copy's
/// socket path in the harness's work directory passes the 107 bytes a unix socket path may hold,
/// which the simulated CloudNativePG must handle.
const APP: &str = "orders-db";

/// A whole drill: the copy restore (WAL gate, purge, recovery) and the check.
const DRILL: Duration = Duration::from_secs(300);

async fn platform() -> Platform {
    Platform::start_with(async |_: &mut Harness| {
        vec![
            DaemonSpec::new("restore-orchestrator", bin("restore-orchestrator"))
                .args(["--drill-interval=1s"]),
        ]
    })
    .await
}

/// Plan `name` of [`APP`] whose cron fires on New Year only, with `verification`.
async fn plan(p: &Platform, name: &str, verification: serde_json::Value) {
    plan_on(p, name, "0 0 1 1 *", verification).await;
}

/// Plan `name` of [`APP`] on `cron`, with `verification`.
async fn plan_on(p: &Platform, name: &str, cron: &str, verification: serde_json::Value) {
    let plan: Plan = serde_json::from_value(json!({
    "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Plan",
    "metadata": {"name": name, "namespace": TENANT},
    "spec": {
        "applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "Postgres", "name": APP},
        "backupClassName": "cozy-default",
        "schedule": {"type": "cron", "cron": cron},
        "verification": verification,
    }}))
    .unwrap();
    p.h.create(TENANT, &plan).await;
}

/// Runs BackupJob `name` of [`APP`] for Plan `plan` (as the Plan's slot would) to Succeeded.
async fn planned_backup(p: &Platform, name: &str, plan: &str) -> Backup {
    let job = BackupJob::test(name)
        .for_app("Postgres", APP)
        .class("cozy-default")
        .plan(plan)
        .build();
    p.h.create(TENANT, &job).await;
    let backups: Api<Backup> = Api::namespaced(p.h.client(), TENANT);
    eventually_within(&format!("Backup {name} Ready"), DATAPLANE_DEADLINE, || {
        let backups = backups.clone();
        async move {
            let b = backups.get_opt(name).await.ok()??;
            (b.status.as_ref()?.phase.as_deref() == Some("Ready")).then_some(b)
        }
    })
    .await
}

/// Waits for the Backup's recorded drill result.
async fn verified(p: &Platform, name: &str, within: Duration) -> Backup {
    let backups: Api<Backup> = Api::namespaced(p.h.client(), TENANT);
    eventually_within(&format!("Backup {name} verified"), within, || {
        let backups = backups.clone();
        async move {
            let b = backups.get_opt(name).await.ok()??;
            b.status.as_ref()?.verification.as_ref()?;
            Some(b)
        }
    })
    .await
}

fn verification(b: &Backup) -> (String, String) {
    let v = b.status.as_ref().unwrap().verification.as_ref().unwrap();
    (
        v.result.clone().unwrap_or_default(),
        v.message.clone().unwrap_or_default(),
    )
}

/// The live table's rows, by id.
fn rows(uri: &str) -> String {
    psql(uri, "SELECT string_agg(item, ',' ORDER BY id) FROM orders")
}

/// Every object a drill of `b` may have made, still present (none after a drill).
async fn scratch_objects(p: &Platform, b: &Backup) -> Vec<String> {
    let scratch = restore_orchestrator::drill::scratch_name(APP, b.uid().as_deref().unwrap());
    let cluster = format!("postgres-{scratch}");
    let mut left = Vec::new();
    let by_label = ListParams::default().labels(&format!("{}=true", drills::LABEL));
    for j in Api::<RestoreJob>::namespaced(p.h.client(), TENANT)
        .list(&by_label)
        .await
        .unwrap()
        .items
    {
        left.push(format!("RestoreJob {}", j.name_any()));
    }
    let dynamic = |kind| -> Api<kube::api::DynamicObject> {
        match kind {
            "Postgres" => p.h.dynamic::<api::thirdparty::apps::Postgres>(TENANT),
            "HelmRelease" => p.h.dynamic::<api::thirdparty::flux::HelmRelease>(TENANT),
            "Cluster" => p.h.dynamic::<api::thirdparty::cnpg::Cluster>(TENANT),
            _ => p.h.dynamic::<api::thirdparty::barman::ObjectStore>(TENANT),
        }
    };
    for (kind, name) in [
        ("Postgres", scratch.clone()),
        ("HelmRelease", cluster.clone()),
        ("Cluster", cluster.clone()),
        ("ObjectStore", cluster.clone()),
        ("ObjectStore", format!("{cluster}-recovery")),
    ] {
        if dynamic(kind).get_opt(&name).await.unwrap().is_some() {
            left.push(format!("{kind} {name}"));
        }
    }
    for a in dynamic("Postgres").list(&by_label).await.unwrap().items {
        left.push(format!("Postgres {}", a.name_any()));
    }
    let by_cluster = ListParams::default().labels(&format!("cnpg.io/cluster={cluster}"));
    for pvc in
        Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(p.h.client(), TENANT)
            .list(&by_cluster)
            .await
            .unwrap()
            .items
    {
        left.push(format!("PVC {}", pvc.name_any()));
    }
    for pod in Api::<k8s_openapi::api::core::v1::Pod>::namespaced(p.h.client(), TENANT)
        .list(&by_cluster)
        .await
        .unwrap()
        .items
    {
        left.push(format!("Pod {}", pod.name_any()));
    }
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(p.h.client(), TENANT);
    for s in secrets.list(&Default::default()).await.unwrap().items {
        if s.name_any().starts_with(&cluster) {
            left.push(format!("Secret {}", s.name_any()));
        }
    }
    left
}

/// Waits until no object of a drill of `b` is left.
async fn no_scratch_left(p: &Platform, b: &Backup) {
    eventually_within("no scratch object left", DATAPLANE_DEADLINE, || async {
        let left = scratch_objects(p, b).await;
        left.is_empty().then_some(())
    })
    .await;
}

/// The writes by the orchestrator to the live application's objects (none in a drill).
fn live_writes(p: &Platform) -> Vec<String> {
    let audit = p.h.audit();
    let mut out = Vec::new();
    let cluster = format!("postgres-{APP}");
    for (resource, name) in [
        ("postgreses", APP),
        ("helmreleases", &cluster),
        ("clusters", &cluster),
        ("objectstores", &cluster),
    ] {
        for r in audit.writes(None, resource, Some(TENANT), Some(name)) {
            if r.user_agent.starts_with("restore-orchestrator/") {
                out.push(format!("{} {resource} {name}", r.verb));
            }
        }
    }
    out
}

/// One scratch application and one RestoreJob were ever created, the live rows are the seed's
/// `tea`, nothing of the live application was written, and every request was allowed.
fn one_drill_and_the_live_application_untouched(p: &Platform, uri: &str) {
    let audit = p.h.audit();
    assert_eq!(
        audit.creates_by("restore-orchestrator/", "apps.cozystack.io", "postgreses"),
        1
    );
    assert_eq!(
        audit.creates_by(
            "restore-orchestrator/",
            "backups.cozystack.io",
            "restorejobs"
        ),
        1
    );
    assert_eq!(rows(uri), "tea");
    assert_eq!(live_writes(p), Vec::<String>::new());
    harness::rbac::assert_allowed(&audit, "restore-orchestrator");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_drill_restores_into_a_scratch_copy_checks_it_records_passed_and_cleans_up() {
    let p = platform().await;
    p.app(APP).await;
    let uri = p.uri(APP).await;
    psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    psql(&uri, "INSERT INTO orders VALUES (1, 'tea'), (2, 'cups')");
    // The Plan backs up at its first slot (within a minute); its cron then moves to New Year, so
    // that no second slot fires during the test.
    plan_on(
        &p,
        "orders-drilled",
        "* * * * *",
        json!({"every": 1, "sql": "SELECT 1 FROM orders WHERE item = 'cups'", "timeoutSeconds": 240}),
    )
    .await;
    let jobs: Api<BackupJob> = Api::namespaced(p.h.client(), TENANT);
    eventually_within(
        "the Plan's first BackupJob",
        Duration::from_secs(60) + DATAPLANE_DEADLINE,
        || async {
            let list = jobs.list(&Default::default()).await.ok()?.items;
            list.iter()
                .any(|j| {
                    j.spec
                        .plan_ref
                        .as_ref()
                        .is_some_and(|r| r.name == "orders-drilled")
                })
                .then_some(())
        },
    )
    .await;
    Api::<Plan>::namespaced(p.h.client(), TENANT)
        .patch(
            "orders-drilled",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"spec": {"schedule": {"cron": "0 0 1 1 *"}}})),
        )
        .await
        .unwrap();
    let backups: Api<Backup> = Api::namespaced(p.h.client(), TENANT);
    let backup = eventually_within("the Plan's Backup Ready", DATAPLANE_DEADLINE, || async {
        backups
            .list(&Default::default())
            .await
            .ok()?
            .items
            .into_iter()
            .find(|b| {
                b.spec
                    .plan_ref
                    .as_ref()
                    .is_some_and(|r| r.name == "orders-drilled")
                    && b.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Ready")
            })
    })
    .await;
    assert_eq!(
        jobs.list(&Default::default()).await.unwrap().items.len(),
        1,
        "one slot fired"
    );
    let name = backup.name_any();
    let before = rows(&uri);
    // Every password the scratch copy's `-app` Secret held while the drill ran (the check
    // connects with it): none may reach the orchestrator's log, Events, the Backup or metrics.
    let scratch = restore_orchestrator::drill::scratch_name(APP, backup.uid().as_deref().unwrap());
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(p.h.client(), TENANT);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = tokio::spawn({
        let done = done.clone();
        let name = format!("postgres-{scratch}-app");
        async move {
            let mut seen = std::collections::BTreeSet::new();
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                if let Ok(Some(s)) = secrets.get_opt(&name).await
                    && let Some(pw) = s.data.as_ref().and_then(|d| d.get("password"))
                {
                    seen.insert(String::from_utf8_lossy(&pw.0).into_owned());
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            seen
        }
    });

    let b = verified(&p, &name, DRILL).await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let passwords = watcher.await.unwrap();
    assert!(
        !passwords.is_empty(),
        "the scratch copy's -app Secret was seen"
    );
    let (result, message) = verification(&b);
    assert_eq!(result, "Passed", "{message}");
    assert!(
        message.contains(
            "the check query \"SELECT 1 FROM orders WHERE item = 'cups'\" returned 1 row(s)"
        ),
        "{message}"
    );
    let v = b.status.as_ref().unwrap().verification.clone().unwrap();
    assert!(
        v.restore_seconds.is_some() && v.check_seconds.is_some(),
        "{v:?}"
    );
    let c = b
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == drills::VERIFIED)
        .expect("a Verified condition");
    assert!(c.is_true(), "{c:?}");
    assert_eq!(c.reason, "DrillPassed");
    assert!(
        !b.annotations().contains_key(drills::STATE_ANNOTATION),
        "the state is gone with the result"
    );
    assert!(
        p.h.events_about(TENANT, &name)
            .await
            .iter()
            .any(|(_, r, _)| r == "VerificationPassed")
    );

    // Everything the drill made is gone, and it was made at all (the copy restore ran).
    assert_eq!(scratch_objects(&p, &backup).await, Vec::<String>::new());
    let audit = p.h.audit();
    assert_eq!(
        audit.creates_by(
            "restore-orchestrator/",
            "backups.cozystack.io",
            "restorejobs"
        ),
        1
    );
    assert_eq!(
        audit.creates_by("restore-orchestrator/", "apps.cozystack.io", "postgreses"),
        1
    );
    // The live database and its objects are untouched.
    assert_eq!(rows(&uri), before);
    assert_eq!(before, "tea,cups");
    assert_eq!(live_writes(&p), Vec::<String>::new());
    // Nothing else is due: the one Backup was drilled once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        p.h.audit().creates_by(
            "restore-orchestrator/",
            "backups.cozystack.io",
            "restorejobs"
        ),
        1
    );
    let mut p = p;
    let m = p.h.metrics_of("restore-orchestrator").await.unwrap();
    assert_eq!(
        m.get(
            "cozy_backups_restore_orchestrator_verifications_total",
            &[("result", "passed")]
        ),
        Some(1.0)
    );
    let last = m
        .get(
            "cozy_backups_restore_orchestrator_last_verified_timestamp_seconds",
            &[("namespace", TENANT), ("application", APP)],
        )
        .expect("the last-verified gauge");
    assert_eq!(
        last as i64,
        v.last_verified_at.as_ref().unwrap().0.as_second()
    );
    // The expected-since gauge, set while no drill had passed, is NaN after the next pass.
    let admin =
        p.h.daemon("restore-orchestrator")
            .unwrap()
            .admin()
            .await
            .unwrap();
    eventually_within("the expected-since gauge cleared", DRILL, || {
        let admin = admin.clone();
        async move {
            let m = tokio::task::spawn_blocking(move || admin.metrics())
                .await
                .ok()?;
            m.get(
                "cozy_backups_restore_orchestrator_verification_expected_since_timestamp_seconds",
                &[("namespace", TENANT), ("application", APP)],
            )
            .is_none_or(f64::is_nan)
            .then_some(())
        }
    })
    .await;
    let daemon = p.h.daemon("restore-orchestrator").unwrap();
    let log = daemon.log();
    let events = format!("{:?}", p.h.events_about(TENANT, &name).await);
    let recorded = serde_json::to_string(&b).unwrap();
    let secrets: Vec<&str> = passwords.iter().map(String::as_str).collect();
    harness::leak::assert_no_leaks(
        &[
            ("orchestrator log", &log),
            ("events", &events),
            ("the Backup", &recorded),
            ("metrics", m.text()),
        ],
        &secrets,
    );
    harness::rbac::assert_allowed(&p.h.audit(), "restore-orchestrator");
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drill_of_a_backup_whose_base_backup_was_deleted_records_failed_with_barmans_words() {
    let p = platform().await;
    p.app(APP).await;
    let uri = p.uri(APP).await;
    psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    psql(&uri, "INSERT INTO orders VALUES (1, 'tea')");
    // Drills of this Plan are due on New Year only: this one is asked for by hand.
    plan(
        &p,
        "orders-lost",
        json!({"schedule": "0 0 1 1 *", "timeoutSeconds": 100}),
    )
    .await;
    let b = planned_backup(&p, "db-lost", "orders-lost").await;
    let meta = b.spec.driver_metadata.clone().unwrap();
    let destination = meta["cnpg.io/destination-path"]
        .strip_prefix("s3://")
        .unwrap()
        .to_owned();
    let server = &meta["cnpg.io/server-name"];
    let base =
        p.dp.data_dir
            .join("s3/buckets")
            .join(destination.trim_end_matches('/'))
            .join(server)
            .join("base");
    assert!(base.is_dir(), "{} holds the base backups", base.display());
    std::fs::remove_dir_all(&base).unwrap();

    // Asked for with the plugin, which waits for the result.
    let out = tokio::process::Command::new(bin("cozy-backups-ctl"))
        .args([
            "verify",
            "-n",
            TENANT,
            "db-lost",
            "--wait",
            "--timeout",
            "5m",
        ])
        .env("KUBECONFIG", p.h.kubeconfig_path())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stdout}\n{stderr}");
    assert!(
        stdout.starts_with("backup.backups.cozystack.io/db-lost: restore drill requested\nbackup.backups.cozystack.io/db-lost: Failed: "),
        "{stdout}"
    );
    let b = verified(&p, "db-lost", DRILL).await;
    let (result, message) = verification(&b);
    assert_eq!(result, "Failed", "{message}");
    println!("the drill's message: {message}");
    assert!(message.contains("the recovery pod"), "{message}");
    assert!(
        message.contains("no target backup found for server"),
        "{message}"
    );
    assert!(
        !b.annotations().contains_key(drills::REQUEST_ANNOTATION),
        "the request is answered"
    );
    no_scratch_left(&p, &b).await;
    assert_eq!(scratch_objects(&p, &b).await, Vec::<String>::new());
    assert_eq!(rows(&uri), "tea");
    assert_eq!(live_writes(&p), Vec::<String>::new());
    assert!(
        p.h.events_about(TENANT, "db-lost")
            .await
            .iter()
            .any(|(t, r, _)| r == "VerificationFailed" && t == "Warning")
    );
    harness::rbac::assert_allowed(&p.h.audit(), "restore-orchestrator");
    let mut p = p;
    p.h.cleanup().await.unwrap();
}

/// Every write of a drill that passes, in order (the orchestrator is killed right after each is
/// applied, before it sees the answer).
const DRILL_WRITES: [(&str, &str, &str); 8] = [
    ("patch", "backups.cozystack.io", "backups"), // the state: Restoring
    ("create", "apps.cozystack.io", "postgreses"), // the scratch application
    ("create", "backups.cozystack.io", "restorejobs"), // its RestoreJob
    ("patch", "backups.cozystack.io", "backups"), // Checking
    ("patch", "backups.cozystack.io", "backups"), // Passed, CleaningUp
    ("delete", "backups.cozystack.io", "restorejobs"), // the cleanup
    ("delete", "apps.cozystack.io", "postgreses"),
    ("patch", "backups.cozystack.io", "backups"), // the result, the state removed
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_after_each_write_of_a_drill_leaves_nothing_and_records_one_result() {
    let mut p = platform().await;
    p.app(APP).await;
    let uri = p.uri(APP).await;
    psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    psql(&uri, "INSERT INTO orders VALUES (1, 'tea')");
    let hold = |(verb, group, resource): (&str, &str, &str)| harness::Hold {
        verb: Some(verb.into()),
        group: Some(group.into()),
        resource: Some(resource.into()),
        subresource: Some(String::new()),
        user_agent: Some("restore-orchestrator/".into()),
    };
    p.h.emulator().unwrap().hold(hold(DRILL_WRITES[0]));
    plan(
        &p,
        "crashy",
        json!({"every": 1, "sql": "SELECT 1 FROM orders", "timeoutSeconds": 240}),
    )
    .await;
    let backup = planned_backup(&p, "db-crashy", "crashy").await;
    for (i, point) in DRILL_WRITES.into_iter().enumerate() {
        eventually_within(
            &format!("the orchestrator's {point:?} held"),
            DRILL,
            || async { (p.h.emulator().unwrap().held() > i as u64).then_some(()) },
        )
        .await;
        p.h.kill("restore-orchestrator").await.unwrap();
        let emu = p.h.emulator().unwrap();
        emu.release_holds();
        if let Some(next) = DRILL_WRITES.get(i + 1) {
            emu.hold(hold(*next));
        }
        p.h.restart("restore-orchestrator", READY).await.unwrap();
    }

    let b = verified(&p, "db-crashy", DRILL).await;
    let (result, message) = verification(&b);
    assert_eq!(result, "Passed", "{message}");
    assert!(!b.annotations().contains_key(drills::STATE_ANNOTATION));
    no_scratch_left(&p, &backup).await;
    // Exactly one drill: one scratch application, one RestoreJob, one result that later passes
    // leave as it is.
    let recorded = b.status.as_ref().unwrap().verification.clone();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let again = Api::<Backup>::namespaced(p.h.client(), TENANT)
        .get("db-crashy")
        .await
        .unwrap();
    assert_eq!(again.status.unwrap().verification, recorded);
    one_drill_and_the_live_application_untouched(&p, &uri);
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_verification_is_refused_by_the_api_or_reported_on_the_plan_naming_the_field() {
    let mut h = Harness::start().await.unwrap();
    h.create_namespaces(&[TENANT]).await.unwrap();
    h.spawn_ready(
        DaemonSpec::new("restore-orchestrator", bin("restore-orchestrator"))
            .args(["--drill-interval=1s"]),
        READY,
    )
    .await
    .unwrap();
    let plans: Api<Plan> = Api::namespaced(h.client(), TENANT);
    let plan = |name: &str, verification: serde_json::Value| -> Plan {
        serde_json::from_value(json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Plan",
        "metadata": {"name": name, "namespace": TENANT},
        "spec": {
            "applicationRef": {"apiGroup": "apps.cozystack.io", "kind": "Postgres", "name": APP},
            "backupClassName": "cozy-default",
            "schedule": {"type": "cron", "cron": "0 0 1 1 *"},
            "verification": verification,
        }}))
        .unwrap()
    };
    let pp = kube::api::PostParams::default();
    // What the schema can tell, the API server refuses.
    for (v, says) in [
        (
            json!({"every": 1, "schedule": "@daily"}),
            "exactly one of verification.every and verification.schedule must be set",
        ),
        (
            json!({"sql": "SELECT 1"}),
            "exactly one of verification.every and verification.schedule must be set",
        ),
        (json!({"every": 0}), "spec.verification.every"),
        (
            json!({"every": 1, "timeoutSeconds": 0}),
            "spec.verification.timeoutSeconds",
        ),
    ] {
        let e = plans
            .create(&pp, &plan("refused", v.clone()))
            .await
            .unwrap_err();
        assert!(e.to_string().contains(says), "{v}: {e}");
    }
    // A cron that does not parse passes the schema; the orchestrator names the field once.
    plans
        .create(&pp, &plan("bad-cron", json!({"schedule": "61 * * * *"})))
        .await
        .unwrap();
    let note = eventually_within("InvalidVerification on the Plan", READY, || async {
        h.events_about(TENANT, "bad-cron")
            .await
            .into_iter()
            .find(|(t, r, _)| r == "InvalidVerification" && t == "Warning")
            .map(|(_, _, note)| note)
    })
    .await;
    assert!(
        note.starts_with("spec.verification.schedule: \"61 * * * *\" is not a valid schedule"),
        "{note}"
    );
    assert!(
        note.ends_with("no restore drill of this Plan runs until it is fixed"),
        "{note}"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let series: Vec<_> = h
        .events_about(TENANT, "bad-cron")
        .await
        .into_iter()
        .filter(|(_, r, _)| r == "InvalidVerification")
        .collect();
    assert_eq!(series.len(), 1, "{series:?}");
    harness::rbac::assert_allowed(&h.audit(), "restore-orchestrator");
    h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_that_finds_no_row_records_failed_and_still_cleans_up() {
    let mut p = platform().await;
    p.app(APP).await;
    let uri = p.uri(APP).await;
    psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    psql(&uri, "INSERT INTO orders VALUES (1, 'tea')");
    plan(
        &p,
        "orders-strict",
        json!({"every": 1, "sql": "SELECT 1 FROM orders WHERE item = 'cups'", "timeoutSeconds": 240}),
    )
    .await;
    let backup = planned_backup(&p, "db-strict", "orders-strict").await;
    let b = verified(&p, "db-strict", DRILL).await;
    let (result, message) = verification(&b);
    assert_eq!(result, "Failed", "{message}");
    assert_eq!(
        message,
        "the check failed: the check query \"SELECT 1 FROM orders WHERE item = 'cups'\" returned no row"
    );
    let c = b
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == drills::VERIFIED)
        .expect("a Verified condition");
    assert!(!c.is_true() && c.reason == "DrillFailed", "{c:?}");
    no_scratch_left(&p, &backup).await;
    assert_eq!(rows(&uri), "tea");
    assert_eq!(live_writes(&p), Vec::<String>::new());
    let m = p.h.metrics_of("restore-orchestrator").await.unwrap();
    assert_eq!(
        m.get(
            "cozy_backups_restore_orchestrator_verifications_total",
            &[("result", "failed")]
        ),
        Some(1.0)
    );
    assert_eq!(
        m.get(
            "cozy_backups_restore_orchestrator_last_verified_timestamp_seconds",
            &[("namespace", TENANT), ("application", APP)],
        ),
        None,
        "no drill of the application passed"
    );
    // …so a passed drill is expected since the Plan was created (the alert's other input).
    let plan = Api::<Plan>::namespaced(p.h.client(), TENANT)
        .get("orders-strict")
        .await
        .unwrap();
    assert_eq!(
        m.get(
            "cozy_backups_restore_orchestrator_verification_expected_since_timestamp_seconds",
            &[("namespace", TENANT), ("application", APP)],
        ),
        Some(plan.creation_timestamp().unwrap().0.as_second() as f64)
    );
    harness::rbac::assert_allowed(&p.h.audit(), "restore-orchestrator");
    p.h.cleanup().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_drill_once_when_the_leader_is_killed_mid_drill() {
    let mut p = Platform::start_with(async |h: &mut Harness| {
        two_leased_orchestrators(h, &["--drill-interval=1s"]).await
    })
    .await;
    p.app(APP).await;
    let uri = p.uri(APP).await;
    psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    psql(&uri, "INSERT INTO orders VALUES (1, 'tea')");
    // The leader is stopped right after it created the scratch application (write 2).
    p.h.emulator().unwrap().hold(harness::Hold {
        verb: Some("create".into()),
        group: Some("apps.cozystack.io".into()),
        resource: Some("postgreses".into()),
        subresource: Some(String::new()),
        user_agent: Some("restore-orchestrator/".into()),
    });
    plan(
        &p,
        "failover",
        json!({"every": 1, "sql": "SELECT 1 FROM orders", "timeoutSeconds": 240}),
    )
    .await;
    let backup = planned_backup(&p, "db-failover", "failover").await;
    eventually_within("the scratch application's create held", DRILL, || async {
        (p.h.emulator().unwrap().held() > 0).then_some(())
    })
    .await;
    let leader = eventually_within("VerificationStarted", READY, || async {
        let events: Api<kube::api::DynamicObject> = Api::namespaced_with(
            p.h.client(),
            TENANT,
            &kube::core::ApiResource::erase::<k8s_openapi::api::events::v1::Event>(&()),
        );
        let list = events.list(&Default::default()).await.ok()?;
        list.items.into_iter().find_map(|e| {
            (e.data["reason"] == "VerificationStarted"
                && e.data["regarding"]["name"] == "db-failover")
                .then(|| e.data["reportingInstance"].as_str().map(str::to_owned))
                .flatten()
        })
    })
    .await;
    p.h.kill(&leader).await.unwrap();
    p.h.emulator().unwrap().release_holds();

    let b = verified(&p, "db-failover", DRILL).await;
    let (result, message) = verification(&b);
    assert_eq!(result, "Passed", "{message}");
    no_scratch_left(&p, &backup).await;
    one_drill_and_the_live_application_untouched(&p, &uri);
    p.h.cleanup().await.unwrap();
}
