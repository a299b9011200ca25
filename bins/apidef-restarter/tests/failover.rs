//! Replicas and failover: two `apidef-restarter` replicas on the real `lease-server` binary with a
//! 3 s lease TTL. Only the leader patches the API Deployment; after a `kill -9` of the leader the
//! standby leads within one TTL, after a SIGTERM within a second (the leader releases its lease on
//! the way out), and a `kill -9` plus restart of the lease server never shows two leaders. Each
//! definition change rolls the Deployment exactly once (patches counted from the audit log).

use std::time::Duration;

use harness::failover::{Failover, GRACEFUL_TAKEOVER, MARGIN};
use harness::{DaemonSpec, Harness, until};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const COMPONENT: &str = "apidef-restarter";
const TTL: Duration = Duration::from_secs(3);
const DEPLOYMENT: &str = "cozystack-api";
const KEY: &str = "cozystack.io/config-hash";

fn definitions(h: &Harness) -> Api<DynamicObject> {
    Api::all_with(h.client(), &appdef::api_resource())
}

fn definition(schema: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
        "metadata": {"name": "http-cache"},
        "spec": {"application": {"kind": "HTTPCache", "openAPISchema": schema,
                                 "plural": "httpcaches", "singular": "httpcache"},
                 "release": {"prefix": "", "chartRef": {"kind": "ExternalArtifact", "name": "http-cache"}}}
    }))
    .unwrap()
}

/// The patches of the Deployment in the audit log once it shows `want` of them (or after 5 s): the
/// emulator stores a write a moment before it logs it, so a count taken right after the change was
/// seen may still miss it.
async fn patches_settled(h: &Harness, ns: &str, want: usize) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let n = patches(h, ns);
        if n >= want || std::time::Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Successful patches of the API Deployment.
fn patches(h: &Harness, ns: &str) -> usize {
    h.audit()
        .writes(Some("patch"), "deployments", Some(ns), Some(DEPLOYMENT))
        .count()
}

async fn hash(h: &Harness, ns: &str) -> Option<String> {
    Api::<Deployment>::namespaced(h.client(), ns)
        .get(DEPLOYMENT)
        .await
        .unwrap()
        .spec
        .and_then(|s| s.template.metadata?.annotations?.get(KEY).cloned())
}

/// Changes the definition's schema and waits until the Deployment carries a new hash.
async fn rolled(h: &Harness, ns: &str, schema: &str) {
    let before = hash(h, ns).await;
    definitions(h)
        .patch(
            "http-cache",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"application": {"openAPISchema": schema}}})),
        )
        .await
        .unwrap();
    until("the Deployment rolled to the new hash", || {
        let before = before.clone();
        async move { hash(h, ns).await.is_some_and(|x| Some(x) != before) }
    })
    .await;
}

/// The lease server's namespace (deploy/lease-server/rbac.yaml), created with its ServiceAccount.
const LEASE_NAMESPACE: &str = "cozy-backup-controller";

async fn plane() -> (Harness, Failover, String) {
    let mut h = Harness::start().await.unwrap();
    // The namespace deploy/apidef-restarter/rbac.yaml grants the daemon its Deployment in.
    let ns = "cozy-system".to_owned();
    h.create_namespaces(&[&ns]).await.unwrap();
    definitions(&h)
        .create(&PostParams::default(), &definition("{}"))
        .await
        .unwrap();
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": DEPLOYMENT},
        "spec": {"selector": {"matchLabels": {"app": "api"}},
                 "template": {"metadata": {"labels": {"app": "api"}},
                              "spec": {"containers": [{"name": "api", "image": "api"}]}}}
    }))
    .unwrap();
    Api::<Deployment>::namespaced(h.client(), &ns)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let bin = harness::locate_binary(COMPONENT).unwrap();
    // The lease server keeps its epoch where its own Role lets it: its namespace.
    let f = Failover::start(&mut h, COMPONENT, LEASE_NAMESPACE, 2, TTL, |name| {
        DaemonSpec::new(name, bin.clone()).args(["--namespace", &ns, "--debounce", "200ms"])
    })
    .await
    .unwrap();
    until("the first roll", || async { hash(&h, &ns).await.is_some() }).await;
    assert_eq!(
        patches_settled(&h, &ns, 1).await,
        1,
        "one replica rolled, once"
    );
    (h, f, ns)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_leader_hands_over_within_one_ttl() {
    let (mut h, f, ns) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let (next, took) = f.kill_leader(&mut h, &leader).await.unwrap();
    assert!(took <= TTL + MARGIN, "{took:?}");
    rolled(&h, &ns, r#"{"type":"object"}"#).await;
    assert_eq!(
        patches_settled(&h, &ns, 2).await,
        2,
        "the takeover itself rolled nothing"
    );
    assert_eq!(f.leaders(&mut h).unwrap(), [next]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_of_the_leader_hands_over_at_once() {
    let (mut h, f, ns) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let (next, took) = f.terminate_leader(&mut h, &leader).await.unwrap();
    assert!(took < GRACEFUL_TAKEOVER + MARGIN, "{took:?}");
    rolled(&h, &ns, r#"{"type":"object"}"#).await;
    assert_eq!(patches_settled(&h, &ns, 2).await, 2);
    assert_eq!(f.leaders(&mut h).unwrap(), [next]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_server_restart_never_makes_two_leaders() {
    let (mut h, f, ns) = plane().await;
    let leader = f.leader(&mut h).await.unwrap();
    let monitor = f.monitor(&mut h).unwrap();
    // Work in flight across the restart: a definition change just before the server dies.
    definitions(&h)
        .patch(
            "http-cache",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"application": {"openAPISchema": "{\"type\":\"object\"}"}}}),
            ),
        )
        .await
        .unwrap();
    let killed = f.restart_lease_server(&mut h).await.unwrap();
    until("the roll of the change", || async { patches(&h, &ns) == 2 }).await;
    tokio::time::sleep_until((killed + TTL + MARGIN).into()).await;
    let seen = monitor.finish();
    seen.check_restart(&leader, killed, TTL).unwrap();
    assert_eq!(patches(&h, &ns), 2, "rolled exactly once");
    assert_eq!(f.leaders(&mut h).unwrap().len(), 1);
}
