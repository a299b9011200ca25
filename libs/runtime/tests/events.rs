//! The Event recorder against the API emulator's fault injection: a passing failure (500, 429) of
//! the Event write is tried again and the Event lands; a refusal (403) is not repeated; a failure
//! that outlasts the retries is reported to the caller.

use harness::{Fault, Harness};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use kube::api::{Api, ListParams};
use kube::runtime::events::{Event, EventType, Reporter};
use runtime::events::Recorder;

fn event(reason: &str) -> Event {
    Event {
        type_: EventType::Normal,
        reason: reason.into(),
        note: Some(format!("{reason} happened")),
        action: "Test".into(),
        secondary: None,
    }
}

fn regarding(ns: &str, name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some(name.into()),
        namespace: Some(ns.into()),
        ..Default::default()
    }
}

/// Event creates the emulator saw in `ns`: `(answered with an error, succeeded)`.
fn attempts(h: &Harness, ns: &str) -> (usize, usize) {
    let audit = h.audit();
    let creates = audit
        .requests
        .iter()
        .filter(|r| r.verb == "create" && r.resource == "events")
        .filter(|r| r.namespace.as_deref() == Some(ns));
    creates.fold((0, 0), |(failed, ok), r| {
        if r.code < 300 {
            (failed, ok + 1)
        } else {
            (failed + 1, ok)
        }
    })
}

async fn reasons(h: &Harness, ns: &str) -> Vec<String> {
    let mut out: Vec<String> = Api::<K8sEvent>::namespaced(h.client(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|e| e.reason)
        .collect();
    out.sort();
    out
}

fn fail_event_creates(h: &Harness, code: u16, count: u64) {
    h.emulator().unwrap().inject_fault(Fault {
        verb: Some("create".into()),
        resource: Some("events".into()),
        code,
        rate: 1.0,
        count: Some(count),
        after_commit: false,
    });
}

#[tokio::test]
async fn passing_failures_are_retried_and_refusals_are_not() {
    let mut h = Harness::start().await.unwrap();
    let ns = h.temp_namespace("events").await.unwrap();
    let recorder = Recorder::new(
        &h.client(),
        Reporter {
            controller: "events-test".into(),
            instance: Some("events-test-0".into()),
        },
    );

    // Two 500s, then success: the Event lands after two retries.
    fail_event_creates(&h, 500, 2);
    recorder
        .publish(&event("AfterTwo500s"), &regarding(&ns, "a"))
        .await
        .expect("retried past two 500s");
    assert_eq!(attempts(&h, &ns), (2, 1));

    // A 429 is throttling: retried too (kube's client already retries 429, 503 and 504 itself,
    // honouring Retry-After), also for an Event of its own (publish_single).
    fail_event_creates(&h, 429, 1);
    recorder
        .publish_single(&event("After429"), &regarding(&ns, "b"))
        .await
        .expect("retried past a 429");
    assert_eq!(attempts(&h, &ns), (3, 2));

    // A refusal does not change when repeated: one attempt, the error to the caller.
    fail_event_creates(&h, 403, 1);
    let err = recorder
        .publish(&event("Refused"), &regarding(&ns, "c"))
        .await
        .expect_err("a 403 is final");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 403),
        "{err:?}"
    );
    assert_eq!(attempts(&h, &ns), (4, 2));

    // Failures that outlast the retries: four attempts, then the error.
    fail_event_creates(&h, 500, 10);
    let err = recorder
        .publish(&event("Outage"), &regarding(&ns, "d"))
        .await
        .expect_err("the outage outlasts the retries");
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 500),
        "{err:?}"
    );
    assert_eq!(attempts(&h, &ns), (8, 2));

    assert_eq!(reasons(&h, &ns).await, ["After429", "AfterTwo500s"]);
}
