//! End to end: the real `retention-cleaner` binary against the kube emulator. Each test has its
//! own emulator; the objects are created before the daemon starts, so its first sweep (which
//! waits for every cache to list once) sees all of them. What a sweep did is read through the
//! API (what is left), its Events, its metrics and the emulator's audit log; a "nothing was
//! deleted" check first waits for a positive signal of the same sweep (an Event it records, or
//! the sweep counter). Every test ends by checking the RBAC manifest allows every call made.
//!
//! Ages: creation timestamps cannot be backdated, so failed BackupJobs are aged by an old
//! `status.completedAt`, successful Backups by an old `spec.takenAt`, and failed Backups (aged
//! by their creation) by a short `--failed-backup-ttl`.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};

use api::contract::{event_reasons as reasons, labels};
use api::thirdparty::{barman, cnpg, etcd, fdb, mariadb, percona, permissive_crd, velero};
use chrono::{Duration, Utc};
use harness::{Audit, eventually, until};
use kube::api::{Api, DynamicObject};
use kube::core::ApiResource;
use serde_json::json;
use support::*;

fn dynamic<K: kube::Resource<DynamicType = ()>>(h: &harness::Harness) -> Api<DynamicObject> {
    Api::namespaced_with(h.client(), NS, &ApiResource::erase::<K>(&()))
}

async fn create_dynamic<K: kube::Resource<DynamicType = ()>>(
    h: &harness::Harness,
    body: serde_json::Value,
) {
    let obj: DynamicObject = serde_json::from_value(body).expect("object");
    dynamic::<K>(h)
        .create(&Default::default(), &obj)
        .await
        .expect("create");
}

/// A cnpg Backup labelled as left by BackupJob `job`.
fn cnpg_leftover(name: &str, job: &str) -> serde_json::Value {
    json!({
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Backup",
        "metadata": {"name": name, "namespace": NS, "labels": {
            labels::OWNED_BY_JOB_NAME: job,
            labels::OWNED_BY_JOB_NAMESPACE: NS,
        }},
        "spec": {"cluster": {"name": "postgres-db"}, "method": "plugin"},
    })
}

async fn cnpg_backups(h: &harness::Harness) -> BTreeSet<String> {
    dynamic::<cnpg::Backup>(h)
        .list(&Default::default())
        .await
        .expect("list cnpg Backups")
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_backup_jobs_past_the_ttl_go_with_their_leftovers() {
    let mut h = start(leftover_crds()).await;
    let now = Utc::now();
    let two_days_ago = minute(now - Duration::days(2));
    let hour_ago = minute(now - Duration::hours(1));
    plan(&h, "nightly", None).await;
    // Of the Plan, 2 days old: deleted, its Event on the Plan.
    let expired = slot_name("nightly", two_days_ago);
    failed_job(
        &h,
        &expired,
        Some("nightly"),
        two_days_ago,
        "pg_basebackup: connection refused",
    )
    .await;
    // Of no Plan, 2 days old: deleted, its Event on itself.
    failed_job(
        &h,
        "adhoc-manual",
        None,
        two_days_ago,
        "disk quota exceeded",
    )
    .await;
    // Of the Plan, an hour old: inside the 1440-minute TTL, stays.
    let fresh = slot_name("nightly", hour_ago);
    failed_job(&h, &fresh, Some("nightly"), hour_ago, "timeout").await;
    create_dynamic::<cnpg::Backup>(&h, cnpg_leftover("expired-leftover", &expired)).await;
    create_dynamic::<cnpg::Backup>(&h, cnpg_leftover("fresh-leftover", &fresh)).await;
    // A leftover of every other driver's kind, and a Velero Backup (in Velero's namespace).
    let owned = json!({labels::OWNED_BY_JOB_NAME: expired, labels::OWNED_BY_JOB_NAMESPACE: NS});
    let others = [
        (
            ApiResource::erase::<mariadb::Backup>(&()),
            json!({"mariaDbRef": {"name": "db"}}),
        ),
        (
            ApiResource::erase::<etcd::EtcdSnapshot>(&()),
            json!({"cluster": "etcd"}),
        ),
        (
            ApiResource::erase::<percona::PerconaServerMongoDBBackup>(&()),
            json!({"clusterName": "mongo"}),
        ),
        (
            ApiResource::erase::<k8s_openapi::api::batch::v1::Job>(&()),
            json!({"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "backup", "image": "backup"}]}}}),
        ),
    ];
    for (ar, spec) in &others {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": ar.api_version, "kind": ar.kind,
            "metadata": {"name": "expired-leftover", "labels": owned}, "spec": spec,
        }))
        .unwrap();
        Api::<DynamicObject>::namespaced_with(h.client(), NS, ar)
            .create(&Default::default(), &obj)
            .await
            .expect("create a leftover");
    }
    h.create_namespaces(&[api::contract::names::VELERO_NAMESPACE])
        .await
        .unwrap();
    let velero_backups = Api::<DynamicObject>::namespaced_with(
        h.client(),
        api::contract::names::VELERO_NAMESPACE,
        &ApiResource::erase::<velero::Backup>(&()),
    );
    let vb: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "velero.io/v1", "kind": "Backup",
        "metadata": {"name": "expired-vm", "labels": owned}, "spec": {},
    }))
    .unwrap();
    velero_backups
        .create(&Default::default(), &vb)
        .await
        .unwrap();

    spawn_cleaner(&mut h, &[]).await;

    until("the expired failed BackupJobs to be deleted", || async {
        jobs(&h).await == BTreeSet::from([fresh.clone()])
    })
    .await;
    assert_eq!(
        cnpg_backups(&h).await,
        BTreeSet::from(["fresh-leftover".to_owned()])
    );
    for (ar, _) in &others {
        let api = Api::<DynamicObject>::namespaced_with(h.client(), NS, ar);
        assert!(
            api.get_opt("expired-leftover").await.unwrap().is_none(),
            "the {} leftover is deleted",
            ar.kind
        );
    }
    let requests = Api::<DynamicObject>::namespaced_with(
        h.client(),
        api::contract::names::VELERO_NAMESPACE,
        &ApiResource::erase::<velero::DeleteBackupRequest>(&()),
    );
    let request = requests.get("expired-vm-cleanup").await.unwrap();
    assert_eq!(request.data["spec"]["backupName"], "expired-vm");

    let on_plan = wait_event(&h, "nightly", reasons::FAILED_BACKUP_EXPIRED, |_| true).await;
    assert_eq!(on_plan.type_.as_deref(), Some("Normal"));
    assert_eq!(related(&on_plan), Some(expired.as_str()));
    let n = note(&on_plan);
    assert!(
        n.contains(&expired)
            && n.contains("2d0h old")
            && n.contains("pg_basebackup: connection refused"),
        "{n}"
    );
    // The job without a Plan carries its own Event (it is gone, the Event stays).
    let on_job = wait_event(&h, "adhoc-manual", reasons::FAILED_BACKUP_EXPIRED, |_| true).await;
    assert_eq!(on_job.type_.as_deref(), Some("Normal"));
    let n = note(&on_job);
    assert!(
        n.contains("2d0h old") && n.contains("disk quota exceeded"),
        "{n}"
    );
    // Only one FailedBackupExpired on the Plan: the fresh job is not reported as expired.
    assert_eq!(
        events(&h, "nightly", reasons::FAILED_BACKUP_EXPIRED)
            .await
            .len(),
        1
    );

    // The leftover went before its job; nothing was deleted twice, nothing else at all.
    let audit = h.audit();
    let leftover_at = audit
        .requests
        .iter()
        .position(|r| r.verb == "delete" && r.name.as_deref() == Some("expired-leftover"))
        .expect("leftover deleted");
    let job_at = audit
        .requests
        .iter()
        .position(|r| {
            r.verb == "delete" && r.resource == "backupjobs" && r.name.as_deref() == Some(&*expired)
        })
        .expect("job deleted");
    assert!(leftover_at < job_at);
    let mut expected = vec!["adhoc-manual".to_owned(), expired.clone()];
    expected.sort();
    assert_eq!(catalog_deletes(&audit), expected);
    assert_rbac(&h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_backup_goes_after_a_short_ttl() {
    let mut h = start(vec![]).await;
    failed_backup(&h, "adhoc-broken", "upload to the bucket failed: 403").await;
    spawn_cleaner(&mut h, &["--failed-backup-ttl=3s"]).await;

    until("the failed Backup to be deleted", || async {
        backups(&h).await.is_empty()
    })
    .await;
    // No Plan and no BackupJob of that name: the Event is on the Backup itself.
    let e = wait_event(&h, "adhoc-broken", reasons::FAILED_BACKUP_EXPIRED, |_| true).await;
    let n = note(&e);
    assert!(
        n.contains("upload to the bucket failed: 403")
            && n.contains("past the failed-backup TTL of 3s"),
        "{n}"
    );
    // Not before its age passed the TTL.
    let age = n
        .split_once(" (")
        .and_then(|(_, rest)| rest.split_once("s old"))
        .and_then(|(secs, _)| secs.parse::<u64>().ok());
    assert!(age.is_some_and(|a| a >= 3), "{n}");
    assert_eq!(related(&e), Some("adhoc-broken"));
    assert_eq!(catalog_deletes(&h.audit()), vec!["adhoc-broken".to_owned()]);
    assert_rbac(&h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zero_ttl_keeps_failed_ones_listed() {
    let mut h = start(vec![]).await;
    let two_days_ago = minute(Utc::now() - Duration::days(2));
    failed_job(&h, "adhoc-old", None, two_days_ago, "disk quota exceeded").await;
    failed_backup(&h, "adhoc-broken", "upload failed").await;
    // The positive signal of the first sweep: a Plan whose older Backup expires.
    plan(&h, "nightly", Some(keep_last(1))).await;
    let oks = ok_backups(&h, "nightly", 2).await;
    spawn_cleaner(&mut h, &["--failed-backup-ttl=0"]).await;

    wait_event(&h, "nightly", reasons::RETENTION_EXPIRED, |n| {
        n.contains(&oks[1])
    })
    .await;
    wait_sweeps(&mut h, 1.0).await;

    assert_eq!(jobs(&h).await, BTreeSet::from(["adhoc-old".to_owned()]));
    assert_eq!(
        backups(&h).await,
        BTreeSet::from(["adhoc-broken".to_owned(), oks[0].clone()])
    );
    assert_eq!(catalog_deletes(&h.audit()), vec![oks[1].clone()]);
    let listed = h.kubectl(&["get", "backupjobs,backups", "-n", NS]);
    let header = listed.lines().next().unwrap_or_default();
    assert!(header.contains("PHASE"), "{listed}");
    for name in ["adhoc-old", "adhoc-broken"] {
        let line = listed
            .lines()
            .find(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|n| n.ends_with(name))
            })
            .unwrap_or_else(|| panic!("{name} is not listed:\n{listed}"));
        assert!(line.contains("Failed"), "{line}");
    }
    // The oldest failure is still reported.
    let age = metrics(&mut h).await.value(
        "cozy_backups_retention_cleaner_oldest_failed_backup_age_seconds",
        &[],
    );
    assert!(age >= 2.0 * 86_400.0, "{age}");
    assert_rbac(&h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_last_keeps_exactly_the_newest() {
    let mut h = start(vec![permissive_crd::<barman::ObjectStore>(true)]).await;
    plan(&h, "nightly", Some(keep_last(3))).await;
    // The ObjectStore of the Plan's CNPG Cluster, barman's retention shorter than the kept
    // Backups need.
    create_dynamic::<barman::ObjectStore>(
        &h,
        json!({"apiVersion": "barmancloud.cnpg.io/v1", "kind": "ObjectStore",
               "metadata": {"name": "postgres-db", "namespace": NS},
               "spec": {"retentionPolicy": "1d"}}),
    )
    .await;
    let names = ok_backups(&h, "nightly", 10).await;
    spawn_cleaner(&mut h, &[]).await;

    let newest: BTreeSet<String> = names[..3].iter().cloned().collect();
    until("the 3 newest Backups to remain", || async {
        backups(&h).await == newest
    })
    .await;
    let deleted: BTreeSet<String> = names[3..].iter().cloned().collect();
    let expired = eventually("7 RetentionExpired Events on the Plan", || async {
        let e = events(&h, "nightly", reasons::RETENTION_EXPIRED).await;
        (e.len() >= 7).then_some(e)
    })
    .await;
    assert_eq!(expired.len(), 7);
    let about: BTreeSet<String> = expired
        .iter()
        .map(|e| {
            let name = related(e).expect("related").to_owned();
            assert!(note(e).contains(&name), "{}", note(e));
            assert_eq!(e.type_.as_deref(), Some("Normal"));
            name
        })
        .collect();
    assert_eq!(about, deleted);
    assert_eq!(
        catalog_deletes(&h.audit()),
        deleted.into_iter().collect::<Vec<_>>()
    );
    // barman's retention reaches back to the oldest kept Backup (3 h old: one day, and one of
    // margin), the floor recorded beside it.
    until("the ObjectStore's retention raised to 2d", || async {
        let store = dynamic::<barman::ObjectStore>(&h)
            .get("postgres-db")
            .await
            .unwrap();
        store.data["spec"]["retentionPolicy"] == "2d"
            && store.metadata.annotations.unwrap_or_default()
                [api::contract::annotations::RETENTION_FLOOR]
                == "2d"
    })
    .await;
    assert_rbac(&h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_newest_success_outlives_max_age() {
    let mut h = start(vec![]).await;
    let policy = api::backups::RetentionPolicy {
        max_age: Some("1h".into()),
        ..Default::default()
    };
    plan(&h, "nightly", Some(policy)).await;
    let only = ok_backup(&h, "nightly", Utc::now() - Duration::days(2)).await;
    spawn_cleaner(&mut h, &[]).await;

    let e = wait_event(&h, "nightly", reasons::KEPT_NEWEST_SUCCESS, |_| true).await;
    assert!(note(&e).contains(&only), "{}", note(&e));
    assert_eq!(related(&e), Some(only.as_str()));
    wait_sweeps(&mut h, 1.0).await;
    assert_eq!(backups(&h).await, BTreeSet::from([only]));
    assert!(catalog_deletes(&h.audit()).is_empty());
    assert_rbac(&h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_a_running_restore_reads_stays_until_it_ends() {
    let mut h = start(vec![]).await;
    plan(&h, "nightly", Some(keep_last(1))).await;
    let names = ok_backups(&h, "nightly", 2).await;
    let (newest, read) = (names[0].clone(), names[1].clone());
    restore(&h, "restore-yesterday", &read).await;
    spawn_cleaner(&mut h, &[]).await;

    let e = wait_event(&h, "nightly", reasons::KEPT_REFERENCED_BY_RESTORE, |_| true).await;
    assert!(note(&e).contains(&read), "{}", note(&e));
    wait_sweeps(&mut h, 1.0).await;
    assert_eq!(
        backups(&h).await,
        BTreeSet::from([newest.clone(), read.clone()])
    );
    assert!(catalog_deletes(&h.audit()).is_empty());

    restore_phase(&h, "restore-yesterday", "Succeeded").await;
    until("the Backup to go once its restore ended", || async {
        backups(&h).await == BTreeSet::from([newest.clone()])
    })
    .await;
    wait_event(&h, "nightly", reasons::RETENTION_EXPIRED, |n| {
        n.contains(&read)
    })
    .await;
    assert_eq!(catalog_deletes(&h.audit()), vec![read]);
    assert_rbac(&h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mass_deletion_is_refused() {
    let mut h = start(vec![]).await;
    plan(&h, "nightly", Some(keep_last(0))).await;
    let names = ok_backups(&h, "nightly", 5).await;
    spawn_cleaner(&mut h, &[]).await;

    let e = wait_event(&h, "nightly", reasons::RETENTION_REFUSED, |_| true).await;
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    wait_sweeps(&mut h, 1.0).await;
    assert_eq!(backups(&h).await, names.into_iter().collect());
    assert!(catalog_deletes(&h.audit()).is_empty());
    let refusals = metrics(&mut h)
        .await
        .sum("cozy_backups_retention_cleaner_refusals_total", &[]);
    assert!(refusals >= 1.0, "{refusals}");
    assert_rbac(&h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_deletes_nothing_and_says_what_it_would() {
    let mut h = start(vec![]).await;
    let two_days_ago = minute(Utc::now() - Duration::days(2));
    plan(&h, "nightly", Some(keep_last(1))).await;
    let names = ok_backups(&h, "nightly", 3).await;
    failed_job(&h, "adhoc-old", None, two_days_ago, "disk quota exceeded").await;
    spawn_cleaner(&mut h, &["--dry-run"]).await;

    const DRY: &str = "dry run, nothing deleted: ";
    let expired = eventually("2 dry-run RetentionExpired Events", || async {
        let e: Vec<_> = events(&h, "nightly", reasons::RETENTION_EXPIRED)
            .await
            .into_iter()
            .filter(|e| note(e).starts_with(DRY))
            .collect();
        (e.len() >= 2).then_some(e)
    })
    .await;
    let about: BTreeSet<&str> = expired.iter().filter_map(related).collect();
    assert_eq!(
        about,
        BTreeSet::from([names[1].as_str(), names[2].as_str()])
    );
    wait_event(&h, "adhoc-old", reasons::FAILED_BACKUP_EXPIRED, |n| {
        n.starts_with(DRY)
    })
    .await;
    wait_sweeps(&mut h, 1.0).await;
    let candidates = metrics(&mut h)
        .await
        .value("cozy_backups_retention_cleaner_dry_run_candidates", &[]);
    assert!(candidates > 0.0, "{candidates}");

    let audit = h.audit();
    let deletes: Vec<_> = audit
        .requests
        .iter()
        .filter(|r| r.verb == "delete" && r.user_agent.starts_with(&format!("{COMPONENT}/")))
        .collect();
    assert!(deletes.is_empty(), "{deletes:?}");
    assert_eq!(backups(&h).await, names.into_iter().collect());
    assert_eq!(jobs(&h).await, BTreeSet::from(["adhoc-old".to_owned()]));
    assert_rbac(&h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_foundationdb_backup_stops_with_its_last_backup() {
    let mut h = start(vec![permissive_crd::<fdb::FoundationDBBackup>(true)]).await;
    // The Plan of the application, where the stop is reported (no policy: it deletes nothing).
    let p = api::backups::Plan::test("fdb-nightly", "0 2 * * *")
        .for_app("FoundationDB", "db")
        .build();
    h.create(NS, &p).await;
    let b = api::backups::Backup::test("db-manual")
        .for_app("FoundationDB", "db")
        .strategy(
            api::contract::groups::STRATEGY,
            "FoundationDB",
            "cozy-default-foundationdb",
        )
        .build();
    h.create(NS, &b).await;
    backup_status(&h, "db-manual", json!({"phase": "Ready"})).await;
    create_dynamic::<fdb::FoundationDBBackup>(
        &h,
        json!({
            "apiVersion": "apps.foundationdb.org/v1beta2", "kind": "FoundationDBBackup",
            "metadata": {"name": "db-backup", "namespace": NS, "labels": {
                labels::FOUNDATIONDB_CLUSTER: "foundationdb-db",
            }},
            "spec": {"backupState": "Running", "clusterName": "foundationdb-db"},
        }),
    )
    .await;
    spawn_cleaner(&mut h, &[]).await;

    let state = |o: DynamicObject| o.data["spec"]["backupState"].as_str().map(str::to_owned);
    let fdb_api = dynamic::<fdb::FoundationDBBackup>(&h);
    // While the Backup exists, the stream runs.
    wait_sweeps(&mut h, 1.0).await;
    assert_eq!(
        state(fdb_api.get("db-backup").await.unwrap()).as_deref(),
        Some("Running")
    );

    delete_backup(&h, "db-manual").await;
    until("the FoundationDBBackup to be stopped", || async {
        state(fdb_api.get("db-backup").await.unwrap()).as_deref() == Some("Stopped")
    })
    .await;
    let e = wait_event(
        &h,
        "fdb-nightly",
        reasons::FOUNDATIONDB_BACKUP_STOPPED,
        |_| true,
    )
    .await;
    assert_eq!(related(&e), Some("db-backup"));
    assert!(note(&e).contains("foundationdb-db"), "{}", note(&e));
    let audit = h.audit();
    let patches = audit
        .writes(
            Some("patch"),
            "foundationdbbackups",
            Some(NS),
            Some("db-backup"),
        )
        .count();
    assert_eq!(patches, 1);
    assert_rbac(&h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_mid_sweep_deletes_nothing_extra_after_restart() {
    let mut h = start(leftover_crds()).await;
    let now = Utc::now();
    let two_days_ago = minute(now - Duration::days(2));
    let hour_ago = minute(now - Duration::hours(1));
    let mut expired: BTreeSet<(String, String)> = BTreeSet::new();
    let mut kept: BTreeSet<String> = BTreeSet::new();
    for i in 0..120 {
        let name = format!("old-failed-{i:03}");
        failed_job(&h, &name, None, two_days_ago, "disk quota exceeded").await;
        expired.insert(("backupjobs".into(), name));
    }
    for i in 0..5 {
        let name = format!("fresh-failed-{i}");
        failed_job(&h, &name, None, hour_ago, "timeout").await;
        kept.insert(name);
    }
    plan(&h, "nightly", Some(keep_last(2))).await;
    let names = ok_backups(&h, "nightly", 6).await;
    kept.extend(names[..2].iter().cloned());
    expired.extend(names[2..].iter().map(|n| ("backups".to_owned(), n.clone())));
    let expected = expired.len();
    assert_eq!(expected, 124);

    spawn_cleaner(
        &mut h,
        &["--max-deletions-per-sweep=1000", "--max-delete-percent=100"],
    )
    .await;
    let successful = |audit: &Audit| -> Vec<(String, String)> {
        let group = "backups.cozystack.io";
        let mut out = Vec::new();
        for resource in ["backupjobs", "backups"] {
            for (name, ok) in cleaner_deletes(audit, group, resource) {
                if ok {
                    out.push((resource.to_owned(), name));
                }
            }
        }
        out
    };
    let before_kill = eventually("about 20 deletes", || async {
        let n = successful(&h.audit()).len();
        (n >= 20).then_some(n)
    })
    .await;
    h.kill(COMPONENT).await.expect("kill");
    let at_kill = successful(&h.audit()).len();
    assert!(
        at_kill < expected,
        "the sweep was over before the kill ({before_kill} seen, {at_kill} at the kill)"
    );
    h.restart(COMPONENT, READY).await.expect("restart");

    let left_jobs: BTreeSet<String> = kept
        .iter()
        .filter(|n| n.starts_with("fresh-failed-"))
        .cloned()
        .collect();
    let left_backups: BTreeSet<String> = names[..2].iter().cloned().collect();
    harness::eventually_within(
        "every expired object to be gone",
        std::time::Duration::from_secs(120),
        || async {
            (jobs(&h).await == left_jobs && backups(&h).await == left_backups).then_some(())
        },
    )
    .await;

    let audit = h.audit();
    let deletes = successful(&audit);
    let mut times: BTreeMap<&(String, String), usize> = BTreeMap::new();
    for d in &deletes {
        *times.entry(d).or_default() += 1;
    }
    let twice: Vec<_> = times.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "deleted more than once: {twice:?}");
    let attempted: BTreeSet<String> = ["backupjobs", "backups"]
        .iter()
        .flat_map(|r| cleaner_deletes(&audit, "backups.cozystack.io", r))
        .map(|(n, _)| n)
        .collect();
    let wrongly: Vec<_> = kept.intersection(&attempted).collect();
    assert!(wrongly.is_empty(), "kept ones deleted: {wrongly:?}");
    assert_eq!(deletes.len(), expected);
    assert_eq!(deletes.iter().cloned().collect::<BTreeSet<_>>(), expired);
    assert_eq!(h.daemon(COMPONENT).unwrap().starts, 2);
    assert_rbac(&h);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_deletion_is_retried_and_blocks_nothing_else() {
    let mut h = start(leftover_crds()).await;
    let two_days_ago = minute(Utc::now() - Duration::days(2));
    failed_job(&h, "old-failed", None, two_days_ago, "disk quota exceeded").await;
    plan(&h, "nightly", Some(keep_last(2))).await;
    let names = ok_backups(&h, "nightly", 4).await;
    // The API server refuses the next three BackupJob deletions.
    h.emulator().unwrap().inject_fault(harness::Fault {
        verb: Some("delete".into()),
        resource: Some("backupjobs".into()),
        code: 500,
        rate: 1.0,
        count: Some(3),
        after_commit: false,
    });
    spawn_cleaner(&mut h, &[]).await;

    // The Backups go in the first sweep although the job's deletion failed in it …
    let kept: BTreeSet<String> = names[..2].iter().cloned().collect();
    eventually("the Plan's expired Backups gone", || async {
        (backups(&h).await == kept).then_some(())
    })
    .await;
    // … and the job goes once the API server accepts its deletion again (retried with backoff).
    eventually("the failed job deleted after the refusals", || async {
        jobs(&h).await.is_empty().then_some(())
    })
    .await;
    let audit = h.audit();
    let attempts = cleaner_deletes(&audit, "backups.cozystack.io", "backupjobs");
    assert_eq!(
        attempts.iter().filter(|(_, ok)| !ok).count(),
        3,
        "{attempts:?}"
    );
    assert_eq!(
        attempts.iter().filter(|(_, ok)| *ok).count(),
        1,
        "{attempts:?}"
    );
    let m = metrics(&mut h).await;
    assert!(
        m.sum("cozy_backups_retention_cleaner_deletion_errors_total", &[]) >= 3.0,
        "{}",
        m.text()
    );
    eventually("one RetentionExpired Event per deleted Backup", || async {
        (events(&h, "nightly", reasons::RETENTION_EXPIRED)
            .await
            .len()
            == 2)
            .then_some(())
    })
    .await;
    assert_rbac(&h);
}

/// Who recorded the `FailedBackupExpired` Event about each of `jobs` (its reporting instance).
async fn reporters(h: &harness::Harness, jobs: &[&str]) -> Option<BTreeSet<String>> {
    let mut out = BTreeSet::new();
    for job in jobs {
        let e = events(h, job, reasons::FAILED_BACKUP_EXPIRED)
            .await
            .into_iter()
            .next()?;
        out.insert(e.reporting_instance.unwrap_or_default());
    }
    Some(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_sweeps_and_the_other_replica_takes_over() {
    let mut h = start(leftover_crds()).await;
    let two_days_ago = minute(Utc::now() - Duration::days(2));
    let first = ["failed-a", "failed-b", "failed-c"];
    for job in first {
        failed_job(&h, job, None, two_days_ago, "disk quota exceeded").await;
    }
    // The secured lease server, as in production: TLS, the cleaner's ServiceAccount token.
    let lease = h
        .spawn_component_lease_server(
            harness::DaemonSpec::new(
                "lease-server",
                harness::locate_binary("lease-server").unwrap(),
            )
            // Its own namespace, where its Role lets it keep the epoch ConfigMap.
            .args(["--namespace", "cozy-backup-controller", "--max-ttl", "3s"]),
            COMPONENT,
            "cozy-backup-controller",
            READY,
        )
        .await
        .unwrap();
    for who in ["cleaner-0", "cleaner-1"] {
        let spec = harness::DaemonSpec::new(who, harness::locate_binary(COMPONENT).unwrap())
            .args(["--debounce=200ms", "--lease-ttl=3s", "--identity", who])
            .args(lease.args());
        h.spawn_ready(spec, READY).await.unwrap();
    }
    let leader = eventually("every first failure deleted and told", || async {
        if !jobs(&h).await.is_empty() {
            return None;
        }
        reporters(&h, &first).await
    })
    .await;
    assert_eq!(leader.len(), 1, "one replica deleted them all: {leader:?}");
    let leader = leader.into_iter().next().unwrap();
    let follower = if leader == "cleaner-0" {
        "cleaner-1"
    } else {
        "cleaner-0"
    };

    h.kill(&leader).await.unwrap();
    let second = ["failed-d", "failed-e"];
    for job in second {
        failed_job(&h, job, None, two_days_ago, "disk quota exceeded").await;
    }
    let taken_over = harness::eventually_within(
        "the other replica deletes the new failures",
        std::time::Duration::from_secs(60),
        || async {
            if !jobs(&h).await.is_empty() {
                return None;
            }
            reporters(&h, &second).await
        },
    )
    .await;
    assert_eq!(taken_over, BTreeSet::from([follower.to_owned()]));
    // Each failure was deleted exactly once, whoever led.
    let deletes = cleaner_deletes(&h.audit(), "backups.cozystack.io", "backupjobs");
    assert_eq!(
        deletes.iter().filter(|(_, ok)| *ok).count(),
        5,
        "{deletes:?}"
    );
    assert_rbac(&h);
}
