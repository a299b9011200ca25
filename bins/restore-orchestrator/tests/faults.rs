//! The orchestrator's main scenario on the simulated platform (a MongoDB Backup taken by the real
//! runner; three RestoreJobs, in place and into two copies, each through one
//! `PerconaServerMongoDBRestore`, run to `Succeeded`) under the seeded API fault schedule with an API
//! server restart while they run: the same end state as without faults (phases, Ready conditions,
//! exactly one operator restore per job), no spin, no crash, and the outage reported on `/ready`.
//! And a create of the operator restore that the API server stored but answered with a 504.

use crate::support;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use api::thirdparty::{apps, percona};
use harness::eventually_within;
use harness::faults::{self, RunStats};
use kube::core::ApiResource;
use serde_json::{Value, json};
use support::{Platform, TENANT, ready};

const ORCHESTRATOR: &str = "restore-orchestrator";
/// `(RestoreJob, target application)`; None restores in place.
const RESTORES: [(&str, Option<&str>); 3] = [
    ("in-place", None),
    ("copy-1", Some("orders-copy-1")),
    ("copy-2", Some("orders-copy-2")),
];
const SETTLE: Duration = Duration::from_secs(120);
/// How long the settled state is watched for requests that should not happen.
const QUIET: Duration = Duration::from_secs(2);

async fn mongodb(p: &Platform, name: &str) {
    p.app::<apps::MongoDB>(name, json!({"replicas": 3, "backup": {"enabled": true}}))
        .await;
    let s3 = json!({"bucket": "bucket-cozy-backups", "prefix": format!("{TENANT}/{name}"),
                    "region": "us-east-1", "endpointUrl": "http://seaweedfs-s3.tenant-root.svc:8333",
                    "credentialsSecret": format!("mongodb-{name}-s3-creds")});
    p.apply(
        &ApiResource::erase::<percona::PerconaServerMongoDB>(&()),
        json!({"apiVersion": "psmdb.percona.com/v1", "kind": "PerconaServerMongoDB",
               "metadata": {"name": format!("mongodb-{name}"), "namespace": TENANT},
               "spec": {"crVersion": "1.20.1", "backup": {"enabled": true,
                        "storages": {"s3-storage": {"type": "s3", "s3": s3}}}}}),
    )
    .await;
}

/// Per RestoreJob: phase, Ready `(reason, message)` and how many operator restores carry its label
/// (their generated names replaced by `<restore>`).
async fn end_state(p: &Platform, jobs: &[(&str, Option<&str>)]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for &(name, _) in jobs {
        let job = p.restores(TENANT).get(name).await.unwrap();
        let phase = job.status.as_ref().and_then(|s| s.phase.clone());
        let ours = p
            .restored_by(
                &ApiResource::erase::<percona::PerconaServerMongoDBRestore>(&()),
                TENANT,
                name,
            )
            .await;
        let mut summary =
            json!({"phase": phase, "ready": ready(&job), "operatorRestores": ours.len()})
                .to_string();
        for r in &ours {
            summary = summary.replace(r["metadata"]["name"].as_str().unwrap_or("-"), "<restore>");
        }
        out.insert(name.to_owned(), serde_json::from_str(&summary).unwrap());
    }
    out
}

type Outcome = faults::Run<BTreeMap<String, Value>>;

/// The simulated platform with the MongoDB strategy and class, the three applications and the
/// Backup `nightly` of `orders` taken by the real runner.
async fn platform() -> Platform {
    let p = Platform::start("psmdb", &[], vec![]).await;
    p.strategy(
        &ApiResource::erase::<api::strategy::MongoDB>(&()),
        "mongo",
        json!({"storageName": "s3-storage", "type": "logical", "compressionType": "gzip"}),
    )
    .await;
    p.class("mongo", "MongoDB", "MongoDB", "mongo", &[]).await;
    for app in ["orders", "orders-copy-1", "orders-copy-2"] {
        mongodb(&p, app).await;
    }
    p.backup(TENANT, "nightly", "MongoDB", "orders", "mongo")
        .await;
    p
}

async fn run(chaos: bool) -> Outcome {
    let started = Instant::now();
    let mut p = platform().await;
    if chaos {
        p.h.set_chaos(Some(faults::schedule(&format!("{ORCHESTRATOR}/"))))
            .unwrap();
    }
    let target = |app: Option<&'static str>| app.map(|a| ("MongoDB", a));
    for (name, app) in &RESTORES[..2] {
        p.restore(TENANT, name, "nightly", target(*app), json!(null))
            .await;
    }
    let outage = if chaos {
        p.h.api_server_outage(&[ORCHESTRATOR], SETTLE)
            .await
            .unwrap()
    } else {
        Vec::new()
    };
    let (name, app) = RESTORES[2];
    p.restore(TENANT, name, "nightly", target(app), json!(null))
        .await;
    let state = eventually_within("every restore terminal", SETTLE, || async {
        let state = end_state(&p, &RESTORES).await;
        state
            .values()
            .all(|j| j["phase"] == "Succeeded" || j["phase"] == "Failed")
            .then_some(state)
    })
    .await;
    // Watched for a while longer: a spinning orchestrator shows up in the request count.
    tokio::time::sleep(QUIET).await;
    let stats = RunStats::since(&p.h, ORCHESTRATOR, started);
    assert_eq!(
        end_state(&p, &RESTORES).await,
        state,
        "the terminal state held"
    );
    Outcome::finish(&mut p.h, ORCHESTRATOR, state, stats, outage).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restores_succeed_under_api_faults_and_a_restart() {
    let calm = run(false).await;
    let faulty = run(true).await;
    for job in calm.state.values() {
        assert_eq!(
            (&job["phase"], &job["operatorRestores"]),
            (&json!("Succeeded"), &json!(1)),
            "{job}"
        );
    }
    assert_eq!(faulty.state, calm.state);
    faults::assert_survived(ORCHESTRATOR, &calm, &faulty, 3);
}

/// The in-place restore's PerconaServerMongoDBRestore is stored but its create answered 504 ("may
/// still be processing the request"): the orchestrator does not send it again, its next pass reads
/// the stored restore, and the job succeeds with exactly one operator restore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_stored_but_answered_504_makes_one_operator_restore() {
    let mut p = platform().await;
    faults::store_then_time_out_next_create(&p.h, "perconaservermongodbrestores");
    let (name, _) = RESTORES[0];
    p.restore(TENANT, name, "nightly", None, json!(null)).await;
    let state = eventually_within("the restore terminal", SETTLE, || async {
        let state = end_state(&p, &RESTORES[..1]).await;
        (state[name]["phase"] == "Succeeded" || state[name]["phase"] == "Failed").then_some(state)
    })
    .await;
    assert_eq!(
        (&state[name]["phase"], &state[name]["operatorRestores"]),
        (&json!("Succeeded"), &json!(1)),
        "{state:?}"
    );
    assert_eq!(
        faults::create_answers(&p.h, ORCHESTRATOR, "perconaservermongodbrestores"),
        [504],
        "one create, answered 504 after it was stored"
    );
    p.h.cleanup().await.unwrap();
}
