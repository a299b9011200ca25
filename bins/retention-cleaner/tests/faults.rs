//! The cleaner's main scenario (a Plan keeping the last 3 Backups: of 10 the 7 oldest go; after an
//! API server restart 3 newer Backups arrive and the 3 that were kept go too) under the seeded API
//! fault schedule: the same end state as without faults (which Backups remain, each expired one
//! deleted; announced with an Event unless that Event's create met a fault: Events are
//! best-effort), no spin, no crash, and the outage reported on `/ready`.

use crate::support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use api::contract::event_reasons as reasons;
use chrono::Utc;
use harness::faults::{self, RunStats};
use harness::{Harness, eventually_within, until};
use support::*;

const SETTLE: Duration = Duration::from_secs(90);
/// How long the settled state is watched for requests that should not happen.
const QUIET: Duration = Duration::from_secs(2);

/// The Backups that remain, the ones the cleaner sent a delete for (whatever the answer: a delete
/// applied before an injected 504 is retried by the client and then answered 404), and the ones
/// announced with a RetentionExpired Event, as indices in creation order (the names carry times).
#[derive(Debug, PartialEq)]
struct EndState {
    remaining: BTreeSet<usize>,
    deleted: BTreeSet<usize>,
    announced: BTreeSet<usize>,
}

async fn end_state(h: &Harness, names: &[String]) -> EndState {
    let index = |n: &str| names.iter().position(|x| x == n).unwrap_or(usize::MAX);
    let expired = events(h, "nightly", reasons::RETENTION_EXPIRED).await;
    EndState {
        remaining: backups(h).await.iter().map(|n| index(n)).collect(),
        deleted: cleaner_deletes(&h.audit(), "backups.cozystack.io", "backups")
            .iter()
            .map(|(n, _)| index(n))
            .collect(),
        announced: expired
            .iter()
            .filter_map(|e| related(e).map(index))
            .collect(),
    }
}

type Outcome = faults::Run<EndState>;

async fn settle(h: &Harness, names: &[String], keep: &[usize]) -> EndState {
    let keep: BTreeSet<usize> = keep.iter().copied().collect();
    eventually_within("the newest 3 kept, the rest gone", SETTLE, || async {
        let state = end_state(h, names).await;
        let gone: BTreeSet<usize> = (0..names.len()).filter(|i| !keep.contains(i)).collect();
        (state.remaining == keep && state.deleted == gone).then_some(state)
    })
    .await
}

async fn run(chaos: bool) -> Outcome {
    let mut h = start(vec![]).await;
    plan(&h, "nightly", Some(keep_last(3))).await;
    let mut names = ok_backups(&h, "nightly", 10).await;
    if chaos {
        h.set_chaos(Some(faults::schedule(&format!("{COMPONENT}/"))))
            .unwrap();
    }
    let started = Instant::now();
    spawn_cleaner(&mut h, &[]).await;
    settle(&h, &names, &[0, 1, 2]).await;
    let outage = if chaos {
        h.api_server_outage(&[COMPONENT], SETTLE).await.unwrap()
    } else {
        Vec::new()
    };
    let now = Utc::now();
    for minutes in [30, 20, 10] {
        names.push(ok_backup(&h, "nightly", now - chrono::Duration::minutes(minutes)).await);
    }
    let state = settle(&h, &names, &[10, 11, 12]).await;
    // Watched for a while longer: a spinning cleaner shows up in the request count.
    tokio::time::sleep(QUIET).await;
    let stats = RunStats::since(&h, COMPONENT, started);
    let after = end_state(&h, &names).await;
    assert_eq!(
        (after.remaining, after.deleted),
        (state.remaining.clone(), state.deleted.clone()),
        "the settled state held"
    );
    if !chaos {
        // Without faults every deletion is announced (the Events may trail the deletes).
        until("a RetentionExpired Event per deletion", || async {
            let now = end_state(&h, &names).await;
            now.announced == now.deleted
        })
        .await;
    }
    let state = end_state(&h, &names).await;
    assert_rbac(&h);
    Outcome::finish(&mut h, COMPONENT, state, stats, outage).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_converges_under_api_faults_and_a_restart() {
    let calm = run(false).await;
    let faulty = run(true).await;
    assert_eq!(calm.state.deleted, (0..10).collect::<BTreeSet<_>>());
    assert_eq!(calm.state.announced, calm.state.deleted);
    // An Event is retried for about a second; one whose every attempt fell into the API server's
    // restart is lost (Events are not state), so the faulty run may announce fewer.
    assert_eq!(
        (&faulty.state.remaining, &faulty.state.deleted),
        (&calm.state.remaining, &calm.state.deleted)
    );
    assert!(faulty.state.announced.is_subset(&faulty.state.deleted));
    faults::assert_survived(COMPONENT, &calm, &faulty, 3);
}
