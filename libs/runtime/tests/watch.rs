//! The runtime's watch and cache against the kube emulator (and a stub API for the 403 case):
//! readiness flips at the initial list, a relist drops an object deleted while the watch was down,
//! an absent kind reads as empty and ready, a forbidden list names the missing RBAC rule, and an
//! object that does not match its Rust type is skipped.

use std::sync::Arc;
use std::time::Duration;

use harness::{eventually, until};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, ObjectMeta, PostParams};
use kube::core::ApiResource;
use kube_emulator::{Config, Emulator, Fault, Running};
use runtime::{Cache, Readiness, Shutdown, Trigger, Watch, WatchContext};

async fn emulator(history: usize) -> Running {
    Emulator::start(Config::default().with_history_size(history))
        .await
        .expect("emulator starts")
}

fn ctx() -> (WatchContext, Readiness, Shutdown) {
    let readiness = Readiness::default();
    let shutdown = Shutdown::new();
    (
        WatchContext {
            readiness: readiness.clone(),
            shutdown: shutdown.clone(),
        },
        readiness,
        shutdown,
    )
}

async fn namespace(client: &kube::Client, name: &str) {
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

async fn config_map(client: &kube::Client, ns: &str, name: &str) {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .unwrap();
}

fn names(cache: &Cache<ConfigMap>) -> Vec<String> {
    cache
        .list()
        .iter()
        .map(|c| c.metadata.name.clone().unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_flips_when_the_initial_list_completes() {
    let emu = emulator(10_000).await;
    let client = emu.client();
    namespace(&client, "t").await;
    config_map(&client, "t", "a").await;
    // Every request now takes 500 ms: the first list is observably in flight.
    emu.set_latency(Duration::from_millis(500));
    let (ctx, readiness, shutdown) = ctx();
    let cache = Watch::<ConfigMap>::new(client.clone())
        .in_namespace("t")
        .cache(&ctx, &Trigger::new());
    assert_eq!(
        readiness.report(),
        "not ready watch ConfigMap in t: pending\n"
    );
    assert!(!cache.is_synced() && cache.list().is_empty());
    until("the initial list", || async { readiness.is_ready() }).await;
    assert_eq!(readiness.report(), "ok watch ConfigMap in t\n");
    assert!(cache.is_synced());
    assert_eq!(names(&cache), ["a"]);
    shutdown.trigger();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_drops_an_object_deleted_while_disconnected() {
    // A short watch history: after the outage the resume point is gone (410) and the watch
    // must list again, which is the only way it can learn of the deletion.
    let emu = emulator(5).await;
    let client = emu.client();
    namespace(&client, "t").await;
    namespace(&client, "other").await;
    config_map(&client, "t", "a").await;
    config_map(&client, "t", "b").await;
    let (ctx, _readiness, shutdown) = ctx();
    let trigger = Trigger::new();
    let mut fired = trigger.subscribe();
    let cache = Watch::<ConfigMap>::new(client.clone())
        .in_namespace("t")
        .cache(&ctx, &trigger);
    until("a and b listed", || async { names(&cache) == ["a", "b"] }).await;

    // Disconnect: every watch request fails, then drop the open watch.
    emu.inject_fault(Fault {
        verb: Some("watch".into()),
        resource: Some("configmaps".into()),
        code: 500,
        rate: 1.0,
        count: None,
        after_commit: false,
    });
    emu.drop_watches();
    Api::<ConfigMap>::namespaced(client.clone(), "t")
        .delete("b", &Default::default())
        .await
        .unwrap();
    for i in 0..10 {
        config_map(&client, "other", &format!("filler-{i}")).await;
    }
    let lists_before = list_requests(&emu);
    fired.mark_seen();
    emu.clear_faults();
    until("b gone after the relist", || async {
        names(&cache) == ["a"]
    })
    .await;
    assert!(cache.is_synced());
    // The deletion was learned from a new list (the emulator may record the request just after
    // answering it).
    until("the relist in the audit log", || async {
        list_requests(&emu) > lists_before
    })
    .await;
    assert!(
        tokio::time::timeout(Duration::from_secs(5), fired.fired())
            .await
            .is_ok(),
        "the relist fired the trigger"
    );
    shutdown.trigger();
}

fn list_requests(emu: &Running) -> usize {
    harness::Audit::parse(&emu.audit_log())
        .requests
        .iter()
        .filter(|r| r.verb == "list" && r.resource == "configmaps" && r.succeeded())
        .count()
}

/// Installs a CRD `<kind>s.example.com/v1` that keeps every field.
async fn permissive_crd(client: &kube::Client, kind: &str, scope: &str) {
    let plural = format!("{}s", kind.to_lowercase());
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.example.com")},
            "spec": {"group": "example.com", "scope": scope,
                     "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                              "x-kubernetes-preserve-unknown-fields": true}}}]}
        }))
        .unwrap();
    Api::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .unwrap();
}

fn widget() -> ApiResource {
    ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_kind_is_empty_and_ready_until_it_appears() {
    let emu = emulator(10_000).await;
    let client = emu.client();
    let (ctx, readiness, shutdown) = ctx();
    let trigger = Trigger::new();
    let widgets = Watch::<DynamicObject>::new_with(client.clone(), widget())
        .absent_is_empty()
        .cache(&ctx, &trigger);
    // Without the opt-in, the same absent kind keeps its check pending.
    let strict = Watch::<DynamicObject>::new_with(client.clone(), widget())
        .describe("Widget (strict)")
        .cache(&ctx, &trigger);
    until("the absent kind read as empty", || async {
        widgets.is_synced()
    })
    .await;
    assert!(widgets.list().is_empty());
    assert!(!strict.is_synced());
    assert_eq!(
        readiness.report(),
        "ok watch Widget: kind not served; treated as empty\n\
         not ready watch Widget (strict): pending\n"
    );

    // The CRD appears: the kind's real list replaces the empty view.
    permissive_crd(&client, "Widget", "Cluster").await;
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &widget());
    let w: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1"}
    }))
    .unwrap();
    eventually("the CRD served", || async {
        api.create(&PostParams::default(), &w).await.ok()
    })
    .await;
    harness::eventually_within("the widget listed", Duration::from_secs(60), || async {
        (widgets.list().len() == 1 && strict.is_synced()).then_some(())
    })
    .await;
    until("both checks ready", || async { readiness.is_ready() }).await;
    shutdown.trigger();
}

/// A stub API server that forbids listing ConfigMaps, as an RBAC-enforcing API server does for a
/// ServiceAccount without the rule.
async fn forbidding_api() -> kube::Client {
    let app = axum::Router::new().fallback(|| async {
        let status = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "configmaps is forbidden: User \"system:serviceaccount:x:y\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"t\"",
            "reason": "Forbidden", "details": {"kind": "configmaps"}, "code": 403
        });
        (axum::http::StatusCode::FORBIDDEN, axum::Json(status))
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    kube::Client::try_from(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forbidden_list_is_not_ready_and_names_the_rule() {
    let client = forbidding_api().await;
    let (ctx, readiness, shutdown) = ctx();
    let cache = Watch::<ConfigMap>::new(client)
        .in_namespace("t")
        .named("settings")
        .cache(&ctx, &Trigger::new());
    let report = eventually("the forbidden list reported", || async {
        let r = readiness.report();
        r.contains("forbidden").then_some(r)
    })
    .await;
    assert_eq!(
        report,
        "not ready watch ConfigMap t/settings: forbidden: needs verbs [list, watch] on resource \
         \"configmaps\" in API group \"\" in namespace \"t\" (resourceNames [settings])\n"
    );
    assert!(!cache.is_synced());
    shutdown.trigger();
}

/// A typed view whose `status.count` must be a number.
#[derive(kube::CustomResource, serde::Serialize, serde::Deserialize, Clone, Debug, Default)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Gadget",
    namespaced,
    status = "GadgetStatus",
    schema = "disabled"
)]
struct GadgetSpec {
    size: Option<String>,
}

#[derive(serde::Serialize, serde::Deserialize, Clone, Debug, Default)]
struct GadgetStatus {
    count: Option<u32>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_that_does_not_deserialize_is_skipped() {
    let emu = emulator(10_000).await;
    let client = emu.client();
    namespace(&client, "t").await;
    permissive_crd(&client, "Gadget", "Namespaced").await;
    let raw: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), "t", &ApiResource::erase::<Gadget>(&()));
    for (name, count) in [
        ("good", serde_json::json!(3)),
        ("bad", serde_json::json!("three")),
    ] {
        let o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": name},
            "spec": {"size": "s"}, "status": {"count": count}
        }))
        .unwrap();
        eventually("the CRD served", || async {
            raw.create(&PostParams::default(), &o).await.ok()
        })
        .await;
    }
    let (ctx, readiness, shutdown) = ctx();
    let cache: Cache<Gadget> = Watch::<Gadget>::new(client)
        .in_namespace("t")
        .cache(&ctx, &Trigger::new());
    until("listed", || async { cache.is_synced() }).await;
    let seen: Vec<Arc<Gadget>> = cache.list();
    assert_eq!(seen.len(), 1, "only the object that deserializes");
    assert_eq!(seen[0].metadata.name.as_deref(), Some("good"));
    assert!(readiness.is_ready(), "{}", readiness.report());
    shutdown.trigger();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_server_outage_is_reported_and_the_cache_recovers() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("runtime=trace,kube_runtime=debug,kube_client=debug")
        .try_init();
    let mut emu = emulator(10_000).await;
    let client = emu.client();
    namespace(&client, "t").await;
    config_map(&client, "t", "a").await;
    let (ctx, readiness, shutdown) = ctx();
    let trigger = Trigger::new();
    let cache = Watch::<ConfigMap>::new(client.clone())
        .in_namespace("t")
        .cache(&ctx, &trigger);
    until("ready", || async { readiness.is_ready() }).await;
    emu.stop_serving().await;
    let report = eventually("the outage reported", || async {
        (!readiness.is_ready()).then(|| readiness.report())
    })
    .await;
    assert!(
        report.contains("not ready watch ConfigMap in t: API server unreachable"),
        "{report}"
    );
    assert_eq!(names(&cache), ["a"], "the last view is kept meanwhile");
    emu.serve_again().await.unwrap();
    until("ready again", || async { readiness.is_ready() }).await;
    // The watch is live again: a change after the restart reaches the cache.
    config_map(&client, "t", "b").await;
    until("b seen", || async { names(&cache) == ["a", "b"] }).await;
    shutdown.trigger();
}
