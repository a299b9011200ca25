//! The singleton loop's behaviour with a recording evaluation: leadership gating, coalesced
//! triggers, a trailing debounce, the gate, retries with backoff after a transient failure.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::until;
use lease::{LeaderElector, Leadership};
use runtime::{Cause, ErrorClass, Evaluate, Pass, ReconcileError, Shutdown, Singleton, Trigger};

#[derive(Debug, thiserror::Error)]
#[error("transient test failure")]
struct Flaky;

impl ReconcileError for Flaky {
    fn kind(&self) -> &'static str {
        "flaky"
    }
    fn class(&self) -> ErrorClass {
        ErrorClass::Transient
    }
}

/// Records the cause of every pass; fails the next `fail` passes.
#[derive(Clone, Default)]
struct Recorder {
    causes: Arc<Mutex<Vec<Cause>>>,
    fail: Arc<Mutex<u32>>,
}

impl Recorder {
    fn causes(&self) -> Vec<Cause> {
        self.causes.lock().unwrap().clone()
    }
}

impl Evaluate for Recorder {
    type Outcome = ();
    type Error = Flaky;
    async fn evaluate(&mut self, pass: &Pass) -> Result<(), Flaky> {
        self.causes.lock().unwrap().push(pass.cause);
        let mut fail = self.fail.lock().unwrap();
        if *fail > 0 {
            *fail -= 1;
            return Err(Flaky);
        }
        Ok(())
    }
}

#[tokio::test]
async fn only_the_leader_evaluates_and_winning_leadership_makes_a_pass() {
    let (leadership, rx) = tokio::sync::watch::channel(Leadership::Following);
    let trigger = Trigger::new();
    let recorder = Recorder::default();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(
        Singleton::new("singleton-test", "leader", LeaderElector::from_receiver(rx))
            .on_change(&trigger)
            .run(recorder.clone(), shutdown.clone()),
    );
    trigger.fire();
    leadership.send_replace(Leadership::Leading { token: 1 });
    until("the pass on winning leadership", || async {
        recorder.causes() == [Cause::Leadership]
    })
    .await;
    trigger.fire();
    until("the pass on a change", || async {
        recorder.causes() == [Cause::Leadership, Cause::Changed]
    })
    .await;
    shutdown.trigger();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_burst_settles_into_one_pass_and_the_gate_holds_passes_back() {
    let trigger = Trigger::new();
    let recorder = Recorder::default();
    let open = Arc::new(Mutex::new(false));
    let fires = Arc::new(Mutex::new((0u64, 0u64)));
    let shutdown = Shutdown::new();
    let task = tokio::spawn({
        let open = open.clone();
        let fires = fires.clone();
        Singleton::new(
            "singleton-test",
            "debounced",
            LeaderElector::single_replica(),
        )
        .on_change_debounced(&trigger, Duration::from_millis(300))
        .on_debounced_fires(move |n, coalesced| {
            let mut f = fires.lock().unwrap();
            f.0 += n;
            f.1 += coalesced;
        })
        .when(move || *open.lock().unwrap())
        .run(recorder.clone(), shutdown.clone())
    });
    // The gate is closed: the leadership pass waits.
    for _ in 0..20 {
        trigger.fire();
    }
    until("the burst counted", || async {
        fires.lock().unwrap().0 >= 1
    })
    .await;
    assert!(recorder.causes().is_empty());
    *open.lock().unwrap() = true;
    trigger.fire();
    until("one settled pass", || async {
        recorder.causes() == [Cause::Settled]
    })
    .await;
    let (n, coalesced) = *fires.lock().unwrap();
    assert_eq!(n, 21, "every fire is counted");
    assert!(
        coalesced >= 20 - 1,
        "fires joined the pending window ({coalesced})"
    );
    shutdown.trigger();
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn a_transient_failure_is_retried() {
    let recorder = Recorder::default();
    *recorder.fail.lock().unwrap() = 2;
    let shutdown = Shutdown::new();
    let task = tokio::spawn(
        Singleton::new("singleton-test", "retry", LeaderElector::single_replica())
            .backoff(Duration::from_millis(10), Duration::from_millis(40))
            .run(recorder.clone(), shutdown.clone()),
    );
    until("two retries after the failed first pass", || async {
        recorder.causes() == [Cause::Leadership, Cause::Retry, Cause::Retry]
    })
    .await;
    shutdown.trigger();
    task.await.unwrap().unwrap();
    assert_eq!(recorder.causes().len(), 3, "no retry after the success");
}

/// Asks for the next pass 20 ms after each of its first two passes, then for none.
#[derive(Clone, Default)]
struct Expiring {
    causes: Arc<Mutex<Vec<Cause>>>,
}

#[derive(Debug)]
struct Next(Option<Duration>);

impl runtime::Outcome for Next {
    fn next_pass_in(&self) -> Option<Duration> {
        self.0
    }
}

impl Evaluate for Expiring {
    type Outcome = Next;
    type Error = Flaky;
    async fn evaluate(&mut self, pass: &Pass) -> Result<Next, Flaky> {
        let mut causes = self.causes.lock().unwrap();
        causes.push(pass.cause);
        Ok(Next(
            (causes.len() < 3).then_some(Duration::from_millis(20)),
        ))
    }
}

#[tokio::test]
async fn a_pass_can_ask_for_the_next_one() {
    let work = Expiring::default();
    let shutdown = Shutdown::new();
    let task = tokio::spawn(
        Singleton::new("singleton-test", "due", LeaderElector::single_replica())
            .run(work.clone(), shutdown.clone()),
    );
    until(
        "two passes at the times the previous ones asked for",
        || async { work.causes.lock().unwrap().len() == 3 },
    )
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    shutdown.trigger();
    task.await.unwrap().unwrap();
    assert_eq!(
        *work.causes.lock().unwrap(),
        [Cause::Leadership, Cause::Due, Cause::Due],
        "no pass once none is asked for"
    );
}
