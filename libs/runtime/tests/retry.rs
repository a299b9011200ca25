//! The daemons' API client (`runtime::client_as`) against the emulator's fault injection: a write
//! the server stored but answered with a 504 reaches the caller once and is not sent again (a
//! `generateName` create is not made twice); a read answered 504 and a write throttled (429) or
//! refused as unavailable (503) before it was processed are retried and succeed.

use std::path::Path;

use harness::{Chaos, Fault, Harness, Mix};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams};
use runtime::ClientArgs;
use serde_json::json;

const AGENT: &str = "retry-test";

async fn daemon_client(kubeconfig: &Path) -> kube::Client {
    let args = ClientArgs {
        kubeconfig: Some(kubeconfig.to_path_buf()),
        kube_context: None,
    };
    runtime::client_as(&args, AGENT).await.unwrap()
}

fn generated(ns: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "metadata": {"generateName": "job-", "namespace": ns},
        "data": {"k": "v"},
    }))
    .unwrap()
}

/// `(verb, code)` of the requests the test's client made on ConfigMaps in `ns`.
fn requests(h: &Harness, ns: &str) -> Vec<(String, u16)> {
    h.audit()
        .requests
        .into_iter()
        .filter(|r| r.user_agent.starts_with(AGENT) && r.resource == "configmaps")
        .filter(|r| r.namespace.as_deref() == Some(ns))
        .map(|r| (r.verb, r.code))
        .collect()
}

async fn stored(h: &Harness, ns: &str) -> usize {
    Api::<ConfigMap>::namespaced(h.client(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .len()
}

#[tokio::test]
async fn a_write_timed_out_after_it_was_stored_is_not_sent_again() {
    let mut h = Harness::start().await.unwrap();
    let ns = h.temp_namespace("retry").await.unwrap();
    let client = daemon_client(h.kubeconfig_path()).await;
    // Every request of this client is held and answered 504; a write is stored first.
    let mut chaos = Chaos::new(7, 1.0);
    chaos.mix = Mix {
        error: 0,
        throttle: 0,
        timeout: 1,
        expire: 0,
    };
    chaos.timeout_millis = 50;
    chaos.timeout_commits_writes = true;
    chaos.user_agent = Some(format!("{AGENT}/"));
    h.set_chaos(Some(chaos)).unwrap();

    let err = Api::<ConfigMap>::namespaced(client, &ns)
        .create(&PostParams::default(), &generated(&ns))
        .await
        .expect_err("the create is answered 504");
    h.set_chaos(None).unwrap();

    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 504),
        "{err}"
    );
    assert_eq!(requests(&h, &ns), [("create".to_owned(), 504)]);
    assert_eq!(stored(&h, &ns).await, 1, "exactly the one stored object");
    h.cleanup().await.unwrap();
}

#[tokio::test]
async fn reads_timed_out_and_writes_refused_before_processing_are_retried() {
    let mut h = Harness::start().await.unwrap();
    let ns = h.temp_namespace("retry").await.unwrap();
    let client = daemon_client(h.kubeconfig_path()).await;
    let api = Api::<ConfigMap>::namespaced(client, &ns);
    let fail = |verb: &str, code: u16| {
        h.emulator().unwrap().inject_fault(Fault {
            verb: Some(verb.into()),
            resource: Some("configmaps".into()),
            code,
            rate: 1.0,
            count: Some(1),
            after_commit: false,
        });
    };

    fail("create", 429);
    api.create(&PostParams::default(), &generated(&ns))
        .await
        .expect("a throttled create is retried");
    fail("create", 503);
    api.create(&PostParams::default(), &generated(&ns))
        .await
        .expect("an unavailable create is retried");
    fail("list", 504);
    let listed = api
        .list(&ListParams::default())
        .await
        .expect("a timed-out list is retried");

    assert_eq!(listed.items.len(), 2);
    let expected = [
        ("create", 429),
        ("create", 201),
        ("create", 503),
        ("create", 201),
        ("list", 504),
        ("list", 200),
    ]
    .map(|(verb, code)| (verb.to_owned(), code));
    assert_eq!(requests(&h, &ns), expected);
    h.cleanup().await.unwrap();
}
