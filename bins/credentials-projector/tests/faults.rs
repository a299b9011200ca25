//! The projector's main scenario (a source Secret; BackupJobs in three application namespaces get
//! their credentials Secret and `CredentialsProjected=Projected`; the system namespace gets its
//! copy) under the seeded API fault schedule with an API server restart in the middle: the same end
//! state as without faults, no spin, no crash, the outage reported on `/ready`, no leak.

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use harness::faults::{self, RunStats};
use harness::{Harness, eventually_within};

const AK: &str = "AKIA-E2E-FAULTS-3c7d10";
const SK: &str = "e2e-faults-secret-9be41f";
const APPS: [&str; 3] = ["app-1", "app-2", "app-3"];
const SETTLE: Duration = Duration::from_secs(90);
/// How long the settled state is watched for requests that should not happen.
const QUIET: Duration = Duration::from_secs(2);

/// Per namespace: the job's condition (reason, message) and the target Secret's data.
type EndState = BTreeMap<String, (Option<(String, String)>, Option<BTreeMap<String, String>>)>;

async fn end_state(h: &Harness) -> EndState {
    let mut out = BTreeMap::new();
    for ns in APPS {
        let c = bj_condition(h, ns, "job")
            .await
            .map(|c| (c.reason, c.message));
        out.insert(ns.to_owned(), (c, target(h, ns).await.map(|s| data_of(&s))));
    }
    out.insert(
        "velero".into(),
        (None, target(h, "velero").await.map(|s| data_of(&s))),
    );
    out
}

fn settled(state: &EndState) -> bool {
    state.iter().all(|(ns, (c, data))| {
        data.is_some()
            && (ns == "velero" || c.as_ref().is_some_and(|(reason, _)| reason == "Projected"))
    })
}

type Outcome = faults::Run<EndState>;

async fn run(chaos: bool) -> Outcome {
    let mut h = Harness::start().await.unwrap();
    let mut names = vec!["src", "velero"];
    names.extend(APPS);
    h.create_namespaces(&names).await.unwrap();
    backup_class(&h, "cozy-default", &[]).await;
    if chaos {
        h.set_chaos(Some(faults::schedule(&format!("{NAME}/"))))
            .unwrap();
    }
    let started = Instant::now();
    spawn(
        &mut h,
        &Setup {
            source_ns: "src".into(),
            endpoint: "http://seaweedfs-s3.tenant-root.svc:8333".into(),
            region: "us-east-1".into(),
            force_path_style: "true".into(),
            system_namespaces: "velero".into(),
        },
    )
    .await;
    backup_job(&h, APPS[0], "job", "cozy-default", "Postgres").await;
    set_source(
        &h,
        "src",
        &[
            ("accessKey", AK),
            ("secretKey", SK),
            ("endpoint", "s3.example.com"),
        ],
    )
    .await;
    backup_job(&h, APPS[1], "job", "cozy-default", "Postgres").await;
    let outage = if chaos {
        h.api_server_outage(&[NAME], SETTLE).await.unwrap()
    } else {
        Vec::new()
    };
    backup_job(&h, APPS[2], "job", "cozy-default", "Postgres").await;
    let state = eventually_within("every job projected", SETTLE, || async {
        let state = end_state(&h).await;
        settled(&state).then_some(state)
    })
    .await;
    // Watched for a while longer: a spinning projector shows up in the request count.
    tokio::time::sleep(QUIET).await;
    let stats = RunStats::since(&h, NAME, started);
    assert_eq!(end_state(&h).await, state, "the settled state held");
    assert_no_leak(&mut h, &[AK, SK]).await;
    Outcome::finish(&mut h, NAME, state, stats, outage).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn projection_converges_under_api_faults_and_a_restart() {
    let calm = run(false).await;
    let faulty = run(true).await;
    assert_eq!(faulty.state, calm.state);
    assert_eq!(
        calm.state["app-1"].1,
        Some(ten_keys(
            AK,
            SK,
            "s3.example.com",
            None,
            Some("us-east-1"),
            Some("true")
        ))
    );
    faults::assert_survived(NAME, &calm, &faulty, 3);
}
