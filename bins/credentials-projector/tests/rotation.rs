//! End to end: rotation and crash recovery.
//!
//! * Changing the source re-projects every copy — tenant and system namespaces — without any new
//!   job, and leaves the jobs' conditions alone.
//! * `kill -9` in the middle of a burst of jobs, a rotation while the daemon is down, and a restart:
//!   every job converges to True, every copy carries the newest keys, nothing is duplicated, and the
//!   metrics start again from zero.

use crate::common;

use api::backups::BackupJob;
use common::*;
use harness::Harness;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::ListParams;

const AK1: &str = "AKIA-E2E-ROT-ONE-aa11";
const SK1: &str = "e2e-rot-secret-one-bb22";
const AK2: &str = "AKIA-E2E-ROT-TWO-cc33";
const SK2: &str = "e2e-rot-secret-two-dd44";
const AK3: &str = "AKIA-E2E-ROT-THREE-ee55";
const SK3: &str = "e2e-rot-secret-three-ff66";

fn keys(ak: &str, sk: &str) -> std::collections::BTreeMap<String, String> {
    ten_keys(
        ak,
        sk,
        "s3.example.com",
        Some("bucket-1"),
        Some("us-east-1"),
        Some("true"),
    )
}

async fn rotate(h: &Harness, src: &str, ak: &str, sk: &str) {
    set_source(
        h,
        src,
        &[
            ("accessKey", ak),
            ("secretKey", sk),
            ("endpoint", "https://s3.example.com"),
            ("bucketName", "bucket-1"),
        ],
    )
    .await;
}

async fn wait_copies(h: &Harness, namespaces: &[String], ak: &str, sk: &str) {
    let want = keys(ak, sk);
    for ns in namespaces {
        eventually(&format!("{ns} to carry the rotated keys"), || async {
            target(h, ns).await.filter(|s| data_of(s) == want)
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_reaches_every_copy_and_a_killed_projector_converges() {
    let mut h = Harness::start().await.unwrap();
    let src = h.temp_namespace("src").await.unwrap();
    let sys1 = h.temp_namespace("velero").await.unwrap();
    let sys2 = h.temp_namespace("sys").await.unwrap();
    backup_class(&h, "cozy-default", &[]).await;
    rotate(&h, &src, AK1, SK1).await;
    spawn(
        &mut h,
        &Setup {
            source_ns: src.clone(),
            endpoint: String::new(),
            region: "us-east-1".into(),
            force_path_style: "true".into(),
            system_namespaces: format!(" {sys1} , ,{sys2},"),
        },
    )
    .await;

    let mut tenants = Vec::new();
    for i in 0..3 {
        let ns = h.temp_namespace(&format!("tenant{i}")).await.unwrap();
        backup_job(&h, &ns, "job", "cozy-default", "Postgres").await;
        tenants.push(ns);
    }
    let mut conditions = Vec::new();
    for ns in &tenants {
        conditions.push(wait_bj(&h, ns, "job", "Projected").await);
    }
    let all: Vec<String> = tenants.iter().chain([&sys1, &sys2]).cloned().collect();
    wait_copies(&h, &all, AK1, SK1).await;

    // Rotation: every copy follows the source, no job is created, no condition changes.
    rotate(&h, &src, AK2, SK2).await;
    wait_copies(&h, &all, AK2, SK2).await;
    let jobs = Api::<BackupJob>::all(h.client())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(jobs.items.len(), 3, "no new job");
    for (ns, before) in tenants.iter().zip(&conditions) {
        assert_eq!(bj_condition(&h, ns, "job").await.as_ref(), Some(before));
    }
    // Counted: the start round and the rotation round (system), the job and the rotation (tenant).
    eventually("the rotation round counted", || {
        let text = metrics_text(&mut h);
        let counted = successes(&text, &sys1) >= 2.0 && successes(&text, &tenants[0]) >= 2.0;
        async move { counted.then_some(()) }
    })
    .await;

    // A burst of jobs, kill -9 once the first is projected, rotate while down, restart.
    let mut burst = Vec::new();
    for i in 0..8 {
        let ns = h.temp_namespace(&format!("burst{i}")).await.unwrap();
        backup_job(&h, &ns, "a", "cozy-default", "Postgres").await;
        backup_job(&h, &ns, "b", "cozy-default", "Postgres").await;
        burst.push(ns);
    }
    eventually("a first burst job projected", || async {
        for ns in &burst {
            if bj_condition(&h, ns, "a").await.is_some_and(|c| c.is_true()) {
                return Some(());
            }
        }
        None
    })
    .await;
    h.kill(NAME).await.unwrap();
    rotate(&h, &src, AK3, SK3).await;
    h.restart(NAME, DEADLINE).await.unwrap();

    for ns in &burst {
        for job in ["a", "b"] {
            wait_bj(&h, ns, job, "Projected").await;
        }
    }
    let everyone: Vec<String> = all.iter().chain(&burst).cloned().collect();
    wait_copies(&h, &everyone, AK3, SK3).await;
    // Nothing duplicated: one labelled copy per namespace, one condition of our type per job.
    let copies = Api::<Secret>::all(h.client())
        .list(&ListParams::default().labels("apps.cozystack.io/managed-by=cozystack-backups"))
        .await
        .unwrap();
    let mut namespaces: Vec<String> = copies
        .items
        .iter()
        .map(|s| s.metadata.namespace.clone().unwrap())
        .collect();
    namespaces.sort();
    let mut expected = everyone.clone();
    expected.sort();
    assert_eq!(namespaces, expected);
    for job in Api::<BackupJob>::all(h.client())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
    {
        let of_type = job
            .status
            .unwrap()
            .conditions
            .iter()
            .filter(|c| c.type_ == "CredentialsProjected")
            .count();
        assert_eq!(of_type, 1);
    }
    // Metrics restarted from zero: exactly the leadership round has counted the system namespace
    // (the tick is an hour and the source has not changed since the restart).
    let after = metrics_text(&mut h);
    assert_eq!(successes(&after, &sys1), 1.0, "{}", after.text());

    // A copy deleted under a job that is already done is re-projected at once (the job's
    // condition is unchanged: it was and stays True for its generation).
    let condition = bj_condition(&h, &tenants[0], "job").await;
    Api::<Secret>::namespaced(h.client(), &tenants[0])
        .delete(TARGET, &Default::default())
        .await
        .unwrap();
    wait_copies(&h, &tenants[..1], AK3, SK3).await;
    assert_eq!(bj_condition(&h, &tenants[0], "job").await, condition);

    assert_no_leak(&mut h, &[AK1, SK1, AK2, SK2, AK3, SK3]).await;
    h.cleanup().await.unwrap();
}
