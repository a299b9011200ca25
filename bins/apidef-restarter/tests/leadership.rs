//! Only the leader writes: the restarter's loop runs in-process against the emulator with a
//! leadership channel the test drives (the shape the networked lease client delivers), and patches
//! are counted from the emulator's audit log.

use apidef_restarter::{Args, restarter_loop};
use clap::Parser;
use harness::Harness;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use lease::{LeaderElector, Leadership};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

const HASHES: &str = "cozy_backups_apidef_restarter_hash_computations_total";

fn metric(metrics: &runtime::metrics::Metrics, name: &str) -> f64 {
    metrics
        .render()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0.0)
}

async fn until(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn patches(h: &Harness, ns: &str) -> usize {
    h.audit_log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["verb"] == "patch"
                && e["resource"] == "deployments"
                && e["namespace"] == ns
                && e["code"] == 200
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_patches() {
    let metrics = runtime::metrics::Metrics::install();
    let mut h = Harness::start().await.unwrap();
    // The namespace deploy/apidef-restarter/rbac.yaml grants the daemon its Deployment in.
    let ns = "cozy-system".to_owned();
    h.create_namespaces(&[&ns]).await.unwrap();
    let client = h.client();
    // The loop runs as the daemon's ServiceAccount, the test's own setup as the admin.
    let daemon_client = h.component_client("apidef-restarter").unwrap();
    let defs: Api<DynamicObject> = Api::all_with(client.clone(), &appdef::api_resource());
    let def = |schema: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
            "metadata": {"name": "http-cache"},
            "spec": {"application": {"kind": "HTTPCache", "openAPISchema": schema,
                                     "plural": "httpcaches", "singular": "httpcache"},
                     "release": {"prefix": "", "chartRef": {"kind": "ExternalArtifact", "name": "http-cache"}}}
        }))
        .unwrap()
    };
    defs.create(&PostParams::default(), &def("{}"))
        .await
        .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "cozystack-api"},
        "spec": {"selector": {"matchLabels": {"app": "api"}},
                 "template": {"metadata": {"labels": {"app": "api"}},
                              "spec": {"containers": [{"name": "api", "image": "api"}]}}}
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let annotation = async || {
        deployments
            .get("cozystack-api")
            .await
            .unwrap()
            .spec
            .and_then(|s| {
                s.template
                    .metadata?
                    .annotations?
                    .get("cozystack.io/config-hash")
                    .cloned()
            })
    };

    let (leadership, rx) = tokio::sync::watch::channel(Leadership::Following);
    let config = Args::parse_from([
        "apidef-restarter",
        "--namespace",
        &ns,
        "--debounce",
        "200ms",
    ])
    .config();
    let shutdown = runtime::Shutdown::new();
    let ctx = runtime::WatchContext {
        readiness: runtime::Readiness::default(),
        shutdown: shutdown.clone(),
    };
    let task = tokio::spawn(restarter_loop(
        &daemon_client,
        config,
        LeaderElector::from_receiver(rx),
        &ctx,
    ));

    // A follower evaluates (it hashes) but never writes.
    until("the follower's first evaluation", async || {
        metric(&metrics, HASHES) >= 1.0
    })
    .await;
    assert_eq!(patches(&h, &ns), 0);
    assert_eq!(annotation().await, None);

    // Gaining leadership writes at once.
    leadership.send_replace(Leadership::Leading { token: 1 });
    let first = appdef::config_hash_of(&appdef::list_all(&client).await.unwrap()).unwrap();
    until("the leader's patch", async || {
        annotation().await.as_deref() == Some(first.as_str())
    })
    .await;
    // The audit log records a request just after the object is stored: wait for the record.
    until("the audit record of the leader's patch", async || {
        patches(&h, &ns) >= 1
    })
    .await;
    assert_eq!(patches(&h, &ns), 1);

    // Losing it again: a change is hashed but not written …
    leadership.send_replace(Leadership::Following);
    let hashes = metric(&metrics, HASHES);
    let patch = json!({"spec": {"application": {"openAPISchema": "{\"type\":\"object\"}"}}});
    defs.patch("http-cache", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    until("the follower hashing the change", async || {
        metric(&metrics, HASHES) > hashes
    })
    .await;
    assert_eq!(patches(&h, &ns), 1);
    assert_eq!(annotation().await.as_deref(), Some(first.as_str()));

    // … until this replica leads again, which derives the change from the cluster.
    leadership.send_replace(Leadership::Leading { token: 2 });
    let second = appdef::config_hash_of(&appdef::list_all(&client).await.unwrap()).unwrap();
    until("the new leader's patch", async || {
        annotation().await.as_deref() == Some(second.as_str())
    })
    .await;
    until("the audit record of the new leader's patch", async || {
        patches(&h, &ns) >= 2
    })
    .await;
    assert_eq!(patches(&h, &ns), 2);

    shutdown.trigger();
    task.await.unwrap().unwrap();
    h.cleanup().await.unwrap();
}
