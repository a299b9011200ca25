//! `find_by_kind` and `KindCache` against the in-process kube emulator: the seed's acronym cases,
//! the three error kinds, skipped malformed items, and the two cache policies (counted from the
//! emulator's audit log).

use appdef::{FindError, KindCache, api_resource, find_by_kind};
use kube::api::{Api, DynamicObject, PostParams};
use kube_emulator::{Config, Emulator, Fault, Running};
use serde_json::{Value, json};
use std::path::PathBuf;
use std::time::Duration;

fn crds() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds")
}

async fn emulator() -> Running {
    Emulator::start(Config::default().with_crds(crds()))
        .await
        .expect("emulator starts")
}

async fn create(client: &kube::Client, name: &str, spec: Value) {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    api.create(&PostParams::default(), &obj).await.unwrap();
}

fn app(kind: &str, singular: &str) -> Value {
    json!({
        "application": {"kind": kind, "openAPISchema": "{}", "plural": format!("{singular}s"), "singular": singular},
        "release": {"prefix": format!("{singular}-"), "chartRef": {"kind": "ExternalArtifact", "name": singular}}
    })
}

/// The seed's naming table: hyphenated `metadata.name`, acronym kinds, hyphen-free singulars.
async fn seed_catalog(client: &kube::Client) {
    create(client, "tcp-balancer", app("TCPBalancer", "tcpbalancer")).await;
    create(client, "http-cache", app("HTTPCache", "httpcache")).await;
    create(client, "vm-disk", app("VMDisk", "vmdisk")).await;
    // Malformed items are skipped, never matched and never fail the list.
    create_malformed(
        client,
        "a-kind-is-a-number",
        json!({"application": {"kind": 42}}),
    )
    .await;
    create_malformed(client, "b-no-kind", json!({"application": {"plural": "x"}})).await;
    create_malformed(client, "c-no-spec-application", json!({"release": {}})).await;
}

/// Stores an item that violates the CRD schema, where the server lets it (a server that validates
/// custom resources answers 422, and then such an item cannot be listed either).
async fn create_malformed(client: &kube::Client, name: &str, spec: Value) {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap();
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 422 => {}
        Err(e) => panic!("creating {name}: {e}"),
    }
}

fn list_requests(emu: &Running) -> usize {
    emu.audit_log()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["verb"] == "list" && e["resource"] == "applicationdefinitions")
        .count()
}

#[tokio::test]
async fn acronym_kinds_resolve_to_their_hyphenated_definitions() {
    let emu = emulator().await;
    let client = emu.client();
    seed_catalog(&client).await;
    for (kind, name) in [
        ("TCPBalancer", "tcp-balancer"),
        ("HTTPCache", "http-cache"),
        ("VMDisk", "vm-disk"),
    ] {
        let found = find_by_kind(&client, kind).await.unwrap();
        assert_eq!(found.metadata.name.as_deref(), Some(name), "{kind}");
        // The whole object comes back: schema and release are readable without a second call.
        assert_eq!(found.data["spec"]["application"]["openAPISchema"], "{}");
        assert_eq!(
            found.data["spec"]["release"]["chartRef"]["kind"],
            "ExternalArtifact"
        );
        // The naive lookup the seed warns about finds nothing.
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
        assert!(api.get_opt(&kind.to_lowercase()).await.unwrap().is_none());
    }
    // Matching is exact: case variants and singulars are not kinds.
    for wrong in ["httpcache", "HttpCache", "tcp-balancer", "VMDISK"] {
        let err = find_by_kind(&client, wrong).await.unwrap_err();
        assert!(
            matches!(&err, FindError::NoSuchKind { kind } if kind == wrong),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            format!(
                "no ApplicationDefinition with spec.application.kind {wrong:?} found under cozystack.io/v1alpha1/applicationdefinitions"
            )
        );
    }
}

#[tokio::test]
async fn empty_kind_is_rejected_without_a_request() {
    let emu = emulator().await;
    let err = find_by_kind(&emu.client(), "").await.unwrap_err();
    assert!(matches!(err, FindError::EmptyKind), "{err:?}");
    assert_eq!(err.to_string(), "kind must not be empty");
    let err = KindCache::for_process(emu.client())
        .find("")
        .await
        .unwrap_err();
    assert!(matches!(err, FindError::EmptyKind), "{err:?}");
    assert_eq!(list_requests(&emu), 0);
}

#[tokio::test]
async fn list_failures_name_the_group_version_resource() {
    // No CRDs loaded: the resource does not exist (as after a group rename).
    let bare = Emulator::start(Config::default()).await.unwrap();
    let err = find_by_kind(&bare.client(), "Postgres").await.unwrap_err();
    assert!(
        matches!(&err, FindError::List(kube::Error::Api(s)) if s.code == 404),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "list cozystack.io/v1alpha1/applicationdefinitions"
    );

    // A server error on the list.
    let emu = emulator().await;
    emu.inject_fault(Fault {
        verb: Some("list".into()),
        resource: Some("applicationdefinitions".into()),
        code: 500,
        rate: 1.0,
        count: Some(1),
        after_commit: false,
    });
    let err = find_by_kind(&emu.client(), "Postgres").await.unwrap_err();
    assert!(
        matches!(&err, FindError::List(kube::Error::Api(s)) if s.code == 500),
        "{err:?}"
    );
    // The fault was used up: the same call now reports the missing kind instead.
    let err = find_by_kind(&emu.client(), "Postgres").await.unwrap_err();
    assert!(matches!(err, FindError::NoSuchKind { .. }), "{err:?}");
}

#[tokio::test]
async fn process_lifetime_cache_lists_once() {
    let emu = emulator().await;
    let client = emu.client();
    seed_catalog(&client).await;
    let cache = KindCache::for_process(client.clone());
    for kind in ["HTTPCache", "VMDisk", "TCPBalancer", "HTTPCache"] {
        cache.find(kind).await.unwrap();
    }
    assert_eq!(list_requests(&emu), 1);
    // A definition created later is not seen until the cache is dropped or invalidated.
    create(&client, "postgres", app("Postgres", "postgres")).await;
    let err = cache.find("Postgres").await.unwrap_err();
    assert!(matches!(err, FindError::NoSuchKind { .. }), "{err:?}");
    cache.invalidate().await;
    let found = cache.find("Postgres").await.unwrap();
    assert_eq!(found.metadata.name.as_deref(), Some("postgres"));
    assert_eq!(list_requests(&emu), 2);
}

#[tokio::test]
async fn refreshing_cache_lists_again_once_stale() {
    let emu = emulator().await;
    let client = emu.client();
    seed_catalog(&client).await;
    // A zero period makes every lookup stale, so each one lists.
    let cache = KindCache::refreshing(client.clone(), Duration::ZERO);
    cache.find("HTTPCache").await.unwrap();
    create(&client, "postgres", app("Postgres", "postgres")).await;
    cache.find("Postgres").await.unwrap();
    assert_eq!(list_requests(&emu), 2);
    // A long period behaves like the process cache until it expires.
    let cache = KindCache::refreshing(client, KindCache::DEFAULT_REFRESH);
    cache.find("HTTPCache").await.unwrap();
    cache.find("Postgres").await.unwrap();
    assert_eq!(list_requests(&emu), 3);
}
