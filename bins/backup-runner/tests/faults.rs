//! The runner's main scenario on the simulated platform (MongoDB through the simulated Percona
//! operator: three BackupJobs run to `Succeeded`, each with one operator backup and its catalog
//! Backup) under the seeded API fault schedule with an API server restart while they run: the same
//! end state as without faults (phases, Ready conditions, exactly one operator backup per job, the
//! catalog entries), no spin, no crash, and the outage reported on `/ready`. And the one fault that
//! used to make two operator backups for a job: a create the API server stored but answered with
//! a 504.

use crate::sim_platform;
use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::thirdparty::apps;
use api::thirdparty::percona::{PerconaServerMongoDB, PerconaServerMongoDBBackup};
use harness::eventually_within;
use harness::faults::{self, RunStats};
use kube::core::ApiResource;
use serde_json::{Value, json};
use sim_platform::{Platform, TENANT};

const RUNNER: &str = "backup-runner";
const JOBS: [&str; 3] = ["nightly-1", "nightly-2", "nightly-3"];
const SETTLE: Duration = Duration::from_secs(120);
/// How long the settled state is watched for requests that should not happen.
const QUIET: Duration = Duration::from_secs(2);

async fn platform() -> Platform {
    let p = Platform::start("psmdb", &[]).await;
    p.strategy(
        &ApiResource::erase::<api::strategy::MongoDB>(&()),
        "mongo",
        json!({"storageName": "s3-storage", "type": "logical", "compressionType": "gzip"}),
    )
    .await;
    p.classes("mongo", "MongoDB", "mongo").await;
    p.apply(
        &ApiResource::erase::<apps::MongoDB>(&()),
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "MongoDB",
               "metadata": {"name": "orders", "namespace": TENANT},
               "spec": {"replicas": 3, "backup": {"enabled": true}}}),
    )
    .await;
    p.apply(
        &ApiResource::erase::<PerconaServerMongoDB>(&()),
        json!({"apiVersion": "psmdb.percona.com/v1", "kind": "PerconaServerMongoDB",
               "metadata": {"name": "mongodb-orders", "namespace": TENANT},
               "spec": {"crVersion": "1.20.1", "backup": {"enabled": true,
                        "storages": {"s3-storage": {"type": "s3", "s3": {
                            "bucket": "bucket-cozy-backups", "prefix": "tenant-acme/orders",
                            "region": "us-east-1", "endpointUrl": "http://seaweedfs-s3.tenant-root.svc:8333",
                            "credentialsSecret": "mongodb-orders-s3-creds", "insecureSkipTLSVerify": false}}}}}}),
    )
    .await;
    p
}

/// Per job: phase, Ready `(reason, message)`, how many operator backups carry its label, and its
/// catalog Backup's spec (the operator backup's generated name replaced by `<backup>`, times by
/// `<time>`).
async fn end_state(p: &Platform, jobs: &[&str]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for &name in jobs {
        let job = p.jobs().get(name).await.unwrap();
        let status = job.status.clone().unwrap_or_default();
        let ready = support::ready(&job).map(|c| (c.reason, c.message));
        let ours = p
            .owned(
                &ApiResource::erase::<PerconaServerMongoDBBackup>(&()),
                TENANT,
                name,
            )
            .await;
        let catalog = if status.phase.as_deref() == Some("Succeeded") {
            let mut spec = p.catalog(name).await["spec"].to_string();
            for b in &ours {
                spec = spec.replace(b["metadata"]["name"].as_str().unwrap_or("-"), "<backup>");
            }
            serde_json::from_str(&without_times(&spec)).unwrap()
        } else {
            Value::Null
        };
        out.insert(
            name.to_owned(),
            json!({"phase": status.phase, "ready": ready, "operatorBackups": ours.len(),
                   "catalog": catalog}),
        );
    }
    out
}

/// `text` with every RFC 3339 time (`2025-01-02T03:04:05Z`) replaced by `<time>`.
fn without_times(text: &str) -> String {
    let b = text.as_bytes();
    let is_time = |w: &[u8]| {
        w.len() == 20
            && w.iter().enumerate().all(|(i, c)| match i {
                4 | 7 => *c == b'-',
                10 => *c == b'T',
                13 | 16 => *c == b':',
                19 => *c == b'Z',
                _ => c.is_ascii_digit(),
            })
    };
    let mut out = String::new();
    let mut i = 0;
    while i < b.len() {
        if i + 20 <= b.len() && is_time(&b[i..i + 20]) {
            out.push_str("<time>");
            i += 20;
        } else {
            let c = text[i..].chars().next().unwrap_or_default();
            out.push(c);
            i += c.len_utf8().max(1);
        }
    }
    out
}

type Outcome = faults::Run<BTreeMap<String, Value>>;

async fn run(chaos: bool) -> Outcome {
    let started = Instant::now();
    let mut p = platform().await;
    if chaos {
        p.h.set_chaos(Some(faults::schedule(&format!("{RUNNER}/"))))
            .unwrap();
    }
    p.job(JOBS[0], "MongoDB", "orders", "mongo").await;
    p.job(JOBS[1], "MongoDB", "orders", "mongo").await;
    let outage = if chaos {
        p.h.api_server_outage(&[RUNNER], SETTLE).await.unwrap()
    } else {
        Vec::new()
    };
    p.job(JOBS[2], "MongoDB", "orders", "mongo").await;
    let state = eventually_within("every job terminal", SETTLE, || async {
        let state = end_state(&p, &JOBS).await;
        state
            .values()
            .all(|j| j["phase"] == "Succeeded" || j["phase"] == "Failed")
            .then_some(state)
    })
    .await;
    // Watched for a while longer: a spinning runner shows up in the request count.
    tokio::time::sleep(QUIET).await;
    let stats = RunStats::since(&p.h, RUNNER, started);
    assert_eq!(end_state(&p, &JOBS).await, state, "the terminal state held");
    Outcome::finish(&mut p.h, RUNNER, state, stats, outage).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_succeed_under_api_faults_and_a_restart() {
    let calm = run(false).await;
    let faulty = run(true).await;
    for job in calm.state.values() {
        assert_eq!(
            (&job["phase"], &job["operatorBackups"]),
            (&json!("Succeeded"), &json!(1)),
            "{job}"
        );
    }
    pretty_assertions::assert_eq!(faulty.state, calm.state);
    faults::assert_survived(RUNNER, &calm, &faulty, 3);
}

/// A create of the job's PerconaServerMongoDBBackup that the API server stored but answered with a
/// 504 ("may still be processing the request"): the runner does not send it again, finds the
/// stored backup on its next pass, and the job succeeds with exactly one operator backup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_stored_but_answered_504_makes_one_operator_backup() {
    let mut p = platform().await;
    faults::store_then_time_out_next_create(&p.h, "perconaservermongodbbackups");
    p.job(JOBS[0], "MongoDB", "orders", "mongo").await;
    let state = eventually_within("the job terminal", SETTLE, || async {
        let state = end_state(&p, &JOBS[..1]).await;
        (state[JOBS[0]]["phase"] == "Succeeded" || state[JOBS[0]]["phase"] == "Failed")
            .then_some(state)
    })
    .await;
    let job = &state[JOBS[0]];
    assert_eq!(
        (&job["phase"], &job["operatorBackups"]),
        (&json!("Succeeded"), &json!(1)),
        "{job}"
    );
    assert_eq!(
        faults::create_answers(&p.h, RUNNER, "perconaservermongodbbackups"),
        [504],
        "one create, answered 504 after it was stored"
    );
    p.h.cleanup().await.unwrap();
}
