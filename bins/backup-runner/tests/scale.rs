//! Scaled out: three runner replicas with the real lease-server drive 300 BackupJobs (MariaDB,
//! simulated operator) while one replica is killed -9 midway. Every job ends Succeeded, none is
//! driven twice (the operator-side Backups, which have generated names, are counted from the
//! emulator's audit log), and every replica did part of the work.

use crate::operators;

use std::collections::BTreeMap;
use std::time::Duration;

use api::backups::BackupJob;
use api::contract::labels;
use api::thirdparty::mariadb::Backup as MariaDBBackup;
use harness::eventually_within;
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use operators::Platform;
use serde_json::json;

const NAMESPACES: usize = 30;
const JOBS_PER_NAMESPACE: usize = 10;
const JOBS: usize = NAMESPACES * JOBS_PER_NAMESPACE;
const RUNS: &str = "cozy_backups_backup_runner_backups_total";
const IN_FLIGHT: &str = "cozy_backups_backup_runner_jobs_in_flight";

fn namespace(i: usize) -> String {
    format!("tenant-{i:02}")
}

async fn jobs(p: &Platform) -> Vec<BackupJob> {
    Api::<BackupJob>::all(p.h.client())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
}

async fn terminal(p: &Platform) -> usize {
    jobs(p).await.iter().filter(|j| j.is_terminal()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_drive_300_jobs_once_each_through_a_kill() {
    let names: Vec<String> = (0..NAMESPACES).map(namespace).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut p = Platform::start_with(
        &refs,
        "mariadb",
        async |h: &mut harness::Harness| {
            let grpc = operators::lease_server(h, "3s").await;
            ["runner-0", "runner-1", "runner-2"]
                .map(|who| operators::replica(who, &grpc, &["--lease-ttl", "3s"]))
                .to_vec()
        },
        true,
    )
    .await;
    for ns in &names {
        p.mariadb(ns, "db", json!({})).await;
    }
    for i in 0..JOBS_PER_NAMESPACE {
        for ns in &names {
            p.backup(ns, &format!("job-{i}"), "MariaDB", "db", "cozy-default")
                .await;
        }
    }

    // Midway, kill -9 the replica with the most jobs in hand.
    eventually_within(
        "a third of the jobs done",
        Duration::from_secs(180),
        || async { (terminal(&p).await >= JOBS / 3).then_some(()) },
    )
    .await;
    let (victim, done_by_victim) = eventually_within(
        "a replica holding work leases",
        Duration::from_secs(60),
        || async {
            p.runners
                .iter()
                .find(|(_, a)| a.metrics().value(IN_FLIGHT, &[]) > 0.0)
                .map(|(name, a)| (name.clone(), a.metrics().sum(RUNS, &[])))
        },
    )
    .await;
    p.h.kill(&victim).await.unwrap();

    eventually_within("every job terminal", Duration::from_secs(240), || async {
        (terminal(&p).await == JOBS).then_some(())
    })
    .await;
    let all = jobs(&p).await;
    let failed: Vec<String> = all
        .iter()
        .filter(|j| j.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Succeeded"))
        .map(|j| format!("{}/{}", j.namespace().unwrap(), j.name_any()))
        .collect();
    assert!(failed.is_empty(), "not Succeeded: {failed:?}");

    // Driven once: one operator Backup per job, and exactly that many creates ever made.
    let backups = Api::<kube::api::DynamicObject>::all_with(
        p.h.client(),
        &kube::core::ApiResource::erase::<MariaDBBackup>(&()),
    )
    .list(&ListParams::default())
    .await
    .unwrap()
    .items;
    let mut per_job: BTreeMap<String, usize> = BTreeMap::new();
    for b in &backups {
        let job = b.labels().get(labels::OWNED_BY_JOB_NAME).cloned().unwrap();
        *per_job
            .entry(format!("{}/{job}", b.namespace().unwrap()))
            .or_default() += 1;
    }
    assert_eq!(per_job.len(), JOBS);
    assert!(per_job.values().all(|n| *n == 1), "{per_job:?}");
    let audit = p.h.audit();
    let attempts = audit
        .requests
        .iter()
        .filter(|r| r.verb == "create" && r.group == "k8s.mariadb.com" && r.resource == "backups")
        .count();
    assert_eq!(attempts, JOBS, "no create was attempted twice");
    harness::rbac::assert_allowed(&audit, "backup-runner");

    // Spread: the victim had finished some before it died, each survivor the rest.
    assert!(done_by_victim > 0.0, "{victim} did nothing before the kill");
    let mut survivors_total = 0.0;
    for (name, admin) in p.runners.iter().filter(|(n, _)| *n != victim) {
        let done = admin.metrics().sum(RUNS, &[]);
        assert!(done > 0.0, "{name} did nothing");
        survivors_total += done;
    }
    // No job was finished twice (the victim's last moments before the kill are not in its count).
    assert!(survivors_total + done_by_victim <= JOBS as f64);
    // Every job carries the fencing token of the lease it was last driven under.
    assert!(
        all.iter().all(|j| j
            .annotations()
            .contains_key("backups.cozystack.io/runner-lease-token")),
        "a job without its lease token"
    );
}
