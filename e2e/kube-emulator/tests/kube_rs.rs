//! kube-rs 5 conformance suite: every behaviour the project's daemons rely on, exercised through
//! unmodified kube-client and kube-runtime against a fresh emulator per test.

use crate::common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, OwnerReference};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{
    Api, DeleteParams, ListParams, LogParams, ObjectMeta, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event as KEvent, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use kube_emulator::{Config, Fault, Hold};
use serde_json::json;

fn cm(name: &str, data: &[(&str, &str)]) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        ..Default::default()
    }
}

async fn namespace(client: &Client, name: &str) {
    let ns: Api<Namespace> = Api::all(client.clone());
    let body = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    ns.create(&PostParams::default(), &body)
        .await
        .expect("namespace");
}

#[tokio::test]
async fn version_and_discovery_including_aggregated() {
    let emu = emulator().await;
    let client = emu.client();
    let v = client.apiserver_version().await.unwrap();
    assert_eq!((v.major.as_str(), v.minor.as_str()), ("1", "33"));
    install_widgets(&client).await;
    let legacy = kube::Discovery::new(client.clone()).run().await.unwrap();
    assert!(legacy.has_group("example.com"));
    let agg = kube::Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    let (ar, caps) = agg
        .groups()
        .find(|g| g.name() == "example.com")
        .expect("group")
        .recommended_kind("Widget")
        .expect("kind");
    assert_eq!(ar.plural, "widgets");
    assert!(
        caps.subresources
            .iter()
            .any(|(s, _)| s.plural == "widgets/status" || s.plural == "status")
    );
}

#[tokio::test]
async fn crud_on_core_and_custom_resources() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let created = cms
        .create(&PostParams::default(), &cm("a", &[("k", "v")]))
        .await
        .unwrap();
    let meta = &created.metadata;
    assert!(
        meta.uid.is_some() && meta.creation_timestamp.is_some() && meta.resource_version.is_some()
    );
    assert_eq!(meta.generation, None, "ConfigMaps do not track generation");
    let got = cms.get("a").await.unwrap();
    assert_eq!(got.data, created.data);
    let mut changed = got.clone();
    changed.data = Some(BTreeMap::from([("k".to_string(), "w".to_string())]));
    let replaced = cms
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_ne!(replaced.resource_version(), got.resource_version());
    assert_eq!(
        cms.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    let err = status(
        cms.create(&PostParams::default(), &cm("a", &[]))
            .await
            .unwrap_err(),
    );
    assert!(
        err.is_already_exists() && err.reason == "AlreadyExists",
        "{err:?}"
    );
    let deleted = cms.delete("a", &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_right(), "a ConfigMap delete answers a Status");
    assert!(status(cms.get("a").await.unwrap_err()).is_not_found());
    // generateName
    let mut gname = cm("", &[]);
    gname.metadata.name = None;
    gname.metadata.generate_name = Some("gen-".into());
    let g = cms.create(&PostParams::default(), &gname).await.unwrap();
    assert!(g.name_any().starts_with("gen-") && g.name_any().len() == 9);
    // Secret defaults (stringData → data, type Opaque)
    let secrets: Api<Secret> = Api::default_namespaced(client.clone());
    let s: Secret =
        serde_json::from_value(json!({"metadata": {"name": "s"}, "stringData": {"k": "v"}}))
            .unwrap();
    let s = secrets.create(&PostParams::default(), &s).await.unwrap();
    assert_eq!(s.type_.as_deref(), Some("Opaque"));
    assert_eq!(s.data.unwrap()["k"].0, b"v".to_vec());
    assert!(s.string_data.is_none());

    install_widgets(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let w = widgets
        .create(&PostParams::default(), &widget("w1", 3))
        .await
        .unwrap();
    assert_eq!(w.metadata.generation, Some(1));
    assert_eq!(widgets.get("w1").await.unwrap().spec.size, 3);
    let all: Api<Widget> = Api::all(client.clone());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    widgets
        .delete("w1", &DeleteParams::default())
        .await
        .unwrap();
    assert!(widgets.get_opt("w1").await.unwrap().is_none());
    // PartialObjectMetadata
    widgets
        .create(&PostParams::default(), &widget("w2", 1))
        .await
        .unwrap();
    let m = widgets.get_metadata("w2").await.unwrap();
    assert_eq!(m.metadata.name.as_deref(), Some("w2"));
    assert_eq!(
        widgets
            .list_metadata(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    // dryRun=All persists nothing
    let dry = widgets
        .create(
            &PostParams {
                dry_run: true,
                ..Default::default()
            },
            &widget("dry", 1),
        )
        .await
        .unwrap();
    assert_eq!(dry.name_any(), "dry");
    assert!(widgets.get_opt("dry").await.unwrap().is_none());
}

#[tokio::test]
async fn optimistic_concurrency_conflicts() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let first = cms
        .create(&PostParams::default(), &cm("c", &[("a", "1")]))
        .await
        .unwrap();
    let mut second = first.clone();
    second.data = Some(BTreeMap::from([("a".to_string(), "2".to_string())]));
    cms.replace("c", &PostParams::default(), &second)
        .await
        .unwrap();
    let mut stale = first.clone();
    stale.data = Some(BTreeMap::from([("a".to_string(), "3".to_string())]));
    let err = status(
        cms.replace("c", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        err.message,
        "Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again"
    );
    // a merge patch carrying a stale resourceVersion is a precondition, too
    let p = json!({"metadata": {"resourceVersion": first.resource_version()}, "data": {"a": "4"}});
    let err = status(
        cms.patch("c", &PatchParams::default(), &Patch::Merge(&p))
            .await
            .unwrap_err(),
    );
    assert!(err.is_conflict());
    // custom resources refuse an unconditional PUT
    install_widgets(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let mut w = widgets
        .create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    w.metadata.resource_version = None;
    let err = status(
        widgets
            .replace("w", &PostParams::default(), &w)
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
}

#[tokio::test]
async fn noop_writes_keep_the_resource_version_and_emit_nothing() {
    let emu = emulator().await;
    let client = emu.client();
    install_widgets(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let w = widgets
        .create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    let rv = w.resource_version().unwrap();
    let same = widgets
        .replace("w", &PostParams::default(), &w)
        .await
        .unwrap();
    assert_eq!(same.resource_version().unwrap(), rv);
    let same = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(same.resource_version().unwrap(), rv);
    // SSA status no-op: second identical apply changes nothing, managedFields timestamps included
    let status_patch = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    let pp = PatchParams::apply("ctl").force();
    let a = widgets
        .patch_status("w", &pp, &Patch::Apply(&status_patch))
        .await
        .unwrap();
    let b = widgets
        .patch_status("w", &pp, &Patch::Apply(&status_patch))
        .await
        .unwrap();
    assert_eq!(a.resource_version(), b.resource_version());
    assert_eq!(a.metadata.managed_fields, b.metadata.managed_fields);
    // and no watch event was emitted after the first apply
    let rv_after = a.resource_version().unwrap();
    let mut events = widgets
        .watch(&WatchParams::default().timeout(1), &rv_after)
        .await
        .unwrap()
        .boxed();
    while let Some(ev) = events.try_next().await.unwrap() {
        assert!(
            matches!(ev, WatchEvent::Bookmark(_)),
            "no event for no-op writes, got {ev:?}"
        );
    }
}

#[tokio::test]
async fn generation_rules_and_status_subresource() {
    let emu = emulator().await;
    let client = emu.client();
    install_widgets(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let mut w = widget("w", 1);
    w.status = Some(WidgetStatus {
        observed: Some(7),
        conditions: vec![],
    });
    let w = widgets.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(
        w.status, None,
        "create drops .status with a status subresource"
    );
    assert_eq!(w.metadata.generation, Some(1));
    let w = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        w.metadata.generation,
        Some(1),
        "metadata changes keep generation"
    );
    let w = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}, "status": {"observed": 1}})),
        )
        .await
        .unwrap();
    assert_eq!(
        w.metadata.generation,
        Some(2),
        "spec changes bump generation"
    );
    assert_eq!(w.status, None, "the main endpoint ignores .status");
    let w = widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"observed": 2}, "spec": {"size": 99}})),
        )
        .await
        .unwrap();
    assert_eq!(
        w.metadata.generation,
        Some(2),
        "status writes keep generation"
    );
    assert_eq!(w.spec.size, 2, "/status only changes .status");
    assert_eq!(w.status.unwrap().observed, Some(2));
}

#[tokio::test]
async fn finalizers_and_deletion_timestamp() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut c = cm("f", &[]);
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &c).await.unwrap();
    let pending = cms.delete("f", &DeleteParams::default()).await.unwrap();
    let pending = pending.left().expect("pending deletion answers the object");
    assert!(pending.metadata.deletion_timestamp.is_some());
    let again = cms
        .delete("f", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(again.resource_version(), pending.resource_version());
    let err = status(
        cms.patch(
            "f",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/hold", "new"]}})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 422);
    cms.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(cms.get_opt("f").await.unwrap().is_none());
}

#[tokio::test]
async fn namespace_lifecycle() {
    let emu = emulator().await;
    let client = emu.client();
    let nss: Api<Namespace> = Api::all(client.clone());
    for n in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let ns = nss.get(n).await.unwrap();
        assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Active"));
    }
    assert_eq!(
        status(
            nss.delete("default", &DeleteParams::default())
                .await
                .unwrap_err()
        )
        .code,
        403
    );
    let missing: Api<ConfigMap> = Api::namespaced(client.clone(), "nope");
    assert!(
        status(
            missing
                .create(&PostParams::default(), &cm("x", &[]))
                .await
                .unwrap_err()
        )
        .is_not_found()
    );

    namespace(&client, "team").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    cms.create(&PostParams::default(), &cm("plain", &[]))
        .await
        .unwrap();
    let mut held = cm("held", &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    cms.create(&PostParams::default(), &held).await.unwrap();
    let ns = nss
        .delete("team", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(ns.status.unwrap().phase.as_deref(), Some("Terminating"));
    let err = status(
        cms.create(&PostParams::default(), &cm("late", &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (403, "Forbidden"));
    assert_eq!(
        err.message,
        "configmaps \"late\" is forbidden: unable to create new content in namespace team because it is being terminated"
    );
    eventually("plain content deleted", || async {
        cms.get_opt("plain").await.unwrap().is_none().then_some(())
    })
    .await;
    let h = cms.get("held").await.unwrap();
    assert!(h.metadata.deletion_timestamp.is_some());
    assert!(
        nss.get_opt("team").await.unwrap().is_some(),
        "a held finalizer keeps the namespace"
    );
    cms.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    eventually("namespace gone", || async {
        nss.get_opt("team").await.unwrap().is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn owner_reference_garbage_collection() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let owner = cms
        .create(&PostParams::default(), &cm("owner", &[]))
        .await
        .unwrap();
    let mut child = cm("child", &[]);
    child.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.uid().unwrap(),
        controller: Some(true),
        ..Default::default()
    }]);
    cms.create(&PostParams::default(), &child).await.unwrap();
    cms.create(&PostParams::default(), &cm("bystander", &[]))
        .await
        .unwrap();
    cms.delete("owner", &DeleteParams::default()).await.unwrap();
    eventually("child collected", || async {
        cms.get_opt("child").await.unwrap().is_none().then_some(())
    })
    .await;
    assert!(cms.get_opt("bystander").await.unwrap().is_some());
}

#[tokio::test]
async fn label_and_field_selectors() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    for (name, tier) in [("a", "web"), ("b", "db"), ("c", "cache")] {
        let mut c = cm(name, &[]);
        c.metadata.labels = Some(BTreeMap::from([("tier".to_string(), tier.to_string())]));
        cms.create(&PostParams::default(), &c).await.unwrap();
    }
    let names = |l: kube::core::ObjectList<ConfigMap>| {
        l.items.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    };
    let cases = [
        ("tier=web", vec!["a"]),
        ("tier!=web", vec!["b", "c"]),
        ("tier in (db,cache)", vec!["b", "c"]),
        ("tier notin (db)", vec!["a", "c"]),
        ("tier", vec!["a", "b", "c"]),
        ("!tier", vec![]),
    ];
    for (sel, want) in cases {
        assert_eq!(
            names(cms.list(&ListParams::default().labels(sel)).await.unwrap()),
            want,
            "{sel}"
        );
    }
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name=b"))
                .await
                .unwrap()
        ),
        vec!["b"]
    );
    assert_eq!(
        names(
            cms.list(&ListParams::default().fields("metadata.name!=b"))
                .await
                .unwrap()
        ),
        vec!["a", "c"]
    );
    let err = status(
        cms.list(&ListParams::default().fields("spec.bogus=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"));
}

#[tokio::test]
async fn watch_from_resource_version_with_selector_semantics_and_bookmarks() {
    let emu =
        emulator_with(Config::default().with_bookmark_interval(Duration::from_millis(200))).await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let mut a = cm("a", &[]);
    a.metadata.labels = Some(BTreeMap::from([("app".to_string(), "x".to_string())]));
    let a = cms.create(&PostParams::default(), &a).await.unwrap();
    let start = a.resource_version().unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "1"}})),
    )
    .await
    .unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"app": "y"}}})),
    )
    .await
    .unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let wp = WatchParams::default().labels("app=x").timeout(5);
    let mut stream = cms.watch(&wp, &start).await.unwrap().boxed();
    let mut seen = Vec::new();
    while let Some(ev) = stream.try_next().await.unwrap() {
        match ev {
            WatchEvent::Added(o) => seen.push(format!("ADDED {}", o.name_any())),
            WatchEvent::Modified(o) => {
                seen.push(format!("MODIFIED {}", o.data.unwrap_or_default().len()))
            }
            WatchEvent::Deleted(o) => {
                // leaving the selector yields DELETED with the previous content
                assert_eq!(o.labels()["app"], "x");
                seen.push("DELETED".into());
            }
            WatchEvent::Bookmark(b) => {
                assert!(!b.metadata.resource_version.is_empty());
                seen.push("BOOKMARK".into());
                break;
            }
            WatchEvent::Error(e) => panic!("{e:?}"),
        }
    }
    assert_eq!(seen, vec!["MODIFIED 1", "DELETED", "BOOKMARK"]);
}

#[tokio::test]
async fn too_old_resource_version_is_an_in_stream_410_and_the_watcher_relists() {
    let emu = emulator_with(Config::default().with_history_size(3)).await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let first = cms
        .create(&PostParams::default(), &cm("c0", &[]))
        .await
        .unwrap();
    for i in 1..8 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
            .await
            .unwrap();
    }
    let mut raw = cms
        .watch(&WatchParams::default(), &first.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    match raw.try_next().await.unwrap() {
        Some(WatchEvent::Error(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
        other => panic!("expected an in-stream 410, got {other:?}"),
    }

    // A watcher whose selector matches nothing keeps its list RV; once history moves past it and its
    // watch is dropped, it receives the in-stream 410 and must re-list to recover.
    let cfg = watcher::Config::default().labels("app=late");
    let mut w = watcher(cms.clone(), cfg).boxed();
    loop {
        if let watcher::Event::InitDone = w.try_next().await.unwrap().unwrap() {
            break;
        }
    }
    for i in 8..16 {
        cms.create(&PostParams::default(), &cm(&format!("c{i}"), &[]))
            .await
            .unwrap();
    }
    emu.drop_watches();
    let mut late = cm("late", &[]);
    late.metadata.labels = Some(BTreeMap::from([("app".to_string(), "late".to_string())]));
    let mut relisted = false;
    let mut created = false;
    loop {
        match w.next().await.unwrap() {
            Ok(watcher::Event::Init) => relisted = true,
            Ok(watcher::Event::InitDone) => {
                if !created {
                    cms.create(&PostParams::default(), &late).await.unwrap();
                    created = true;
                }
            }
            Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o))
                if o.name_any() == "late" =>
            {
                break;
            }
            Ok(_) => {}
            Err(e) => {
                // the watcher surfaces the 410 once, then re-lists
                assert!(
                    format!("{e:?}").contains("410") || format!("{e:?}").contains("Expired"),
                    "{e:?}"
                );
            }
        }
    }
    assert!(relisted, "the watcher re-listed after the in-stream 410");
    let audit = emu.audit_log();
    let lists = audit
        .lines()
        .filter(|l| l.contains("\"verb\":\"list\"") && l.contains("labelSelector=app"))
        .count();
    assert!(
        lists >= 2,
        "two lists (initial + re-list) in the audit log:\n{audit}"
    );
}

#[tokio::test]
async fn streaming_list_watcher_gets_init_done() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    cms.create(&PostParams::default(), &cm("s", &[]))
        .await
        .unwrap();
    let mut w = watcher(cms.clone(), watcher::Config::default().streaming_lists()).boxed();
    let mut names = Vec::new();
    loop {
        match w.try_next().await.unwrap().unwrap() {
            watcher::Event::InitApply(o) => names.push(o.name_any()),
            watcher::Event::InitDone => break,
            _ => {}
        }
    }
    assert_eq!(names, vec!["s"]);
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct TestError(String);

struct Ctx {
    client: Client,
    reconciles: AtomicUsize,
}

async fn reconcile_child(w: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, TestError> {
    ctx.reconciles.fetch_add(1, Ordering::SeqCst);
    let ns = w.namespace().unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let owner = w.controller_owner_ref(&()).unwrap();
    let child = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("{}-child", w.name_any()), "ownerReferences": [owner]},
        "data": {"size": w.spec.size.to_string()}});
    cms.patch(
        &format!("{}-child", w.name_any()),
        &PatchParams::apply("widget-ctl").force(),
        &Patch::Apply(&child),
    )
    .await
    .map_err(|e| TestError(e.to_string()))?;
    Ok(Action::await_change())
}

fn retry_soon(_: Arc<Widget>, _: &TestError, _: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_millis(50))
}

/// Runs a Controller over Widgets that owns their child ConfigMaps (`reconcile_child`).
fn spawn_child_controller(
    client: &kube::Client,
    widgets: &Api<Widget>,
    cms: &Api<ConfigMap>,
) -> (Arc<Ctx>, tokio::task::JoinHandle<()>) {
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        reconciles: AtomicUsize::new(0),
    });
    let ctl = Controller::new(widgets.clone(), watcher::Config::default())
        .owns(cms.clone(), watcher::Config::default())
        .run(reconcile_child, retry_soon, ctx.clone())
        .for_each(|_| async {});
    (ctx, tokio::spawn(ctl))
}

#[tokio::test]
async fn controller_with_owns_reacts_to_child_changes() {
    let emu = emulator().await;
    let client = emu.client();
    install_widgets(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let (_, handle) = spawn_child_controller(&client, &widgets, &cms);
    widgets
        .create(&PostParams::default(), &widget("w", 4))
        .await
        .unwrap();
    let child = eventually("child created", || async {
        cms.get_opt("w-child").await.unwrap()
    })
    .await;
    assert_eq!(child.data.unwrap()["size"], "4");
    // deleting the child is a change of an owned object: the controller recreates it
    cms.delete("w-child", &DeleteParams::default())
        .await
        .unwrap();
    eventually("child recreated", || async {
        cms.get_opt("w-child")
            .await
            .unwrap()
            .filter(|c| c.uid() != child.metadata.uid.clone())
    })
    .await;
    // and deleting the owner garbage-collects the child
    widgets.delete("w", &DeleteParams::default()).await.unwrap();
    eventually("child collected", || async {
        cms.get_opt("w-child")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    handle.abort();
}

#[tokio::test]
async fn finalizer_helper_full_flow() {
    let emu = emulator().await;
    let client = emu.client();
    install_widgets(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let api = widgets.clone();
    let reconcile = move |w: Arc<Widget>, tx: Arc<tokio::sync::mpsc::UnboundedSender<String>>| {
        let api = api.clone();
        async move {
            finalizer(&api, "example.com/cleanup", w, |ev| async move {
                match ev {
                    FinalizerEvent::Apply(w) => tx.send(format!("apply {}", w.name_any())).ok(),
                    FinalizerEvent::Cleanup(w) => tx.send(format!("cleanup {}", w.name_any())).ok(),
                };
                Ok::<_, TestError>(Action::await_change())
            })
            .await
            .map_err(|e| TestError(e.to_string()))
        }
    };
    let ctl = Controller::new(widgets.clone(), watcher::Config::default())
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_millis(50)),
            Arc::new(tx),
        )
        .for_each(|_| async {});
    let handle = tokio::spawn(ctl);
    widgets
        .create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    assert_eq!(rx.recv().await.unwrap(), "apply w");
    let w = widgets.get("w").await.unwrap();
    assert_eq!(w.finalizers(), &["example.com/cleanup".to_string()]);
    widgets.delete("w", &DeleteParams::default()).await.unwrap();
    loop {
        if rx.recv().await.unwrap() == "cleanup w" {
            break;
        }
    }
    eventually("widget gone", || async {
        widgets.get_opt("w").await.unwrap().is_none().then_some(())
    })
    .await;
    handle.abort();
}

#[tokio::test]
async fn server_side_apply_by_two_managers_on_different_conditions() {
    let emu = emulator().await;
    let client = emu.client();
    install_widgets(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    widgets
        .create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    let apply = |ty: &str, st: &str| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "status": {"conditions": [{"type": ty, "status": st, "reason": "Because"}]}})
    };
    let pa = PatchParams::apply("projector");
    let pb = PatchParams::apply("runner");
    widgets
        .patch_status(
            "w",
            &pa,
            &Patch::Apply(apply("CredentialsProjected", "True")),
        )
        .await
        .unwrap();
    widgets
        .patch_status("w", &pb, &Patch::Apply(apply("Ready", "False")))
        .await
        .unwrap();
    widgets
        .patch_status(
            "w",
            &pa,
            &Patch::Apply(apply("CredentialsProjected", "False")),
        )
        .await
        .unwrap();
    let w = widgets.get_status("w").await.unwrap();
    let conds: Vec<(String, String)> = w
        .status
        .unwrap()
        .conditions
        .into_iter()
        .map(|c| (c.type_, c.status))
        .collect();
    assert_eq!(
        conds,
        vec![
            ("CredentialsProjected".into(), "False".into()),
            ("Ready".into(), "False".into())
        ]
    );
    let managers: Vec<String> = w
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.contains(&"projector".into()) && managers.contains(&"runner".into()),
        "{managers:?}"
    );
    // taking over another manager's condition conflicts without force …
    let err = status(
        widgets
            .patch_status("w", &pa, &Patch::Apply(apply("Ready", "True")))
            .await
            .unwrap_err(),
    );
    assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
    assert!(
        err.message
            .starts_with("Apply failed with 1 conflict: conflict with \"runner\""),
        "{}",
        err.message
    );
    // … and succeeds with force
    let w = widgets
        .patch_status(
            "w",
            &pa.clone().force(),
            &Patch::Apply(apply("Ready", "True")),
        )
        .await
        .unwrap();
    assert_eq!(
        w.status.unwrap().conditions.len(),
        1,
        "projector dropped its own condition and took Ready"
    );
}

/// Client-go style acquisition: create, or take over an expired lease with a resourceVersion precondition.
async fn try_acquire(leases: &Api<Lease>, me: &str, now: Timestamp) -> Result<bool, kube::Error> {
    let spec = json!({"holderIdentity": me, "leaseDurationSeconds": 15,
        "acquireTime": MicroTime(now), "renewTime": MicroTime(now)});
    match leases.get_opt("leader").await? {
        None => {
            let l: Lease =
                serde_json::from_value(json!({"metadata": {"name": "leader"}, "spec": spec}))
                    .unwrap();
            match leases.create(&PostParams::default(), &l).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut l) => {
            let s = l.spec.clone().unwrap_or_default();
            let expired = s
                .renew_time
                .is_none_or(|r| r.0 + SignedDuration::from_secs(15) < now);
            if s.holder_identity.as_deref() != Some(me) && !expired {
                return Ok(false);
            }
            l.spec = Some(serde_json::from_value(spec).unwrap());
            match leases.replace("leader", &PostParams::default(), &l).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

#[tokio::test]
async fn lease_based_leader_election() {
    let emu = emulator().await;
    let client = emu.client();
    let leases: Api<Lease> = Api::default_namespaced(client.clone());
    let now = Timestamp::now();
    let (a, b) = tokio::join!(
        try_acquire(&leases, "a", now),
        try_acquire(&leases, "b", now)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert!(a ^ b, "exactly one contender wins ({a}, {b})");
    let leader = if a { "a" } else { "b" };
    let other = if a { "b" } else { "a" };
    let l = leases.get("leader").await.unwrap();
    assert_eq!(
        l.spec.as_ref().unwrap().holder_identity.as_deref(),
        Some(leader)
    );
    // MicroTime is stored verbatim (six fractional digits)
    let raw: serde_json::Value = serde_json::to_value(&l).unwrap();
    assert_eq!(
        raw["spec"]["renewTime"].as_str().unwrap().len(),
        "2026-11-30T09:25:45.908848Z".len()
    );
    assert!(
        !try_acquire(&leases, other, now).await.unwrap(),
        "a live lease is not taken over"
    );
    // once expired, the other contender takes over; a stale RV from before loses with 409
    let stale = leases.get("leader").await.unwrap();
    let later = now + SignedDuration::from_secs(60);
    assert!(try_acquire(&leases, other, later).await.unwrap());
    let err = status(
        leases
            .replace("leader", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert!(err.is_conflict());
    // kubert-style apply with a resourceVersion precondition
    let cur = leases.get("leader").await.unwrap();
    let body = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "leader", "resourceVersion": stale.resource_version()},
        "spec": {"holderIdentity": leader}});
    let err = status(
        leases
            .patch(
                "leader",
                &PatchParams::apply(leader).force(),
                &Patch::Apply(&body),
            )
            .await
            .unwrap_err(),
    );
    assert!(err.is_conflict());
    assert_eq!(
        leases.get("leader").await.unwrap().resource_version(),
        cur.resource_version()
    );
}

#[tokio::test]
async fn event_recorder_creates_then_patches_a_series() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let c = cms
        .create(&PostParams::default(), &cm("subject", &[]))
        .await
        .unwrap();
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "test-ctl".into(),
            instance: Some("pod-0".into()),
        },
    );
    let ev = KEvent {
        type_: EventType::Normal,
        reason: "Synced".into(),
        note: Some("all good".into()),
        action: "Sync".into(),
        secondary: None,
    };
    let reference = c.object_ref(&());
    recorder.publish(&ev, &reference).await.unwrap();
    recorder.publish(&ev, &reference).await.unwrap();
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::default_namespaced(client.clone());
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(
        list.items.len(),
        1,
        "the repeat is a series patch, not a second event"
    );
    let e = &list.items[0];
    assert_eq!(e.series.as_ref().unwrap().count, 2);
    assert_eq!(e.reason.as_deref(), Some("Synced"));
    // the same store through core/v1, with the involvedObject field selector kubectl describe uses
    let core: Api<k8s_openapi::api::core::v1::Event> = Api::default_namespaced(client.clone());
    let sel = format!(
        "involvedObject.kind=ConfigMap,involvedObject.name=subject,involvedObject.uid={}",
        c.uid().unwrap()
    );
    let list = core
        .list(&ListParams::default().fields(&sel))
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].message.as_deref(), Some("all good"));
    assert_eq!(
        list.items[0].involved_object.name.as_deref(),
        Some("subject")
    );
}

#[tokio::test]
async fn pod_logs_with_the_admin_hook() {
    let emu = emulator().await;
    let client = emu.client();
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"},
        "spec": {"containers": [{"name": "main", "image": "busybox:1"}, {"name": "side", "image": "busybox:1"}]}}))
    .unwrap();
    let p = pods.create(&PostParams::default(), &p).await.unwrap();
    assert_eq!(p.status.unwrap().phase.as_deref(), Some("Pending"));
    let err = status(
        pods.logs(
            "p",
            &LogParams {
                container: Some("main".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap_err(),
    );
    assert_eq!(err.code, 400);
    assert!(
        err.message.contains("is waiting to start"),
        "{}",
        err.message
    );
    emu.set_pod_log("default", "p", Some("main"), "line 1\nline 2\n", false)
        .unwrap();
    let err = status(pods.logs("p", &LogParams::default()).await.unwrap_err());
    assert_eq!(
        err.message,
        "a container name must be specified for pod p, choose one of: [main side]"
    );
    let lp = LogParams {
        container: Some("main".into()),
        ..Default::default()
    };
    assert_eq!(pods.logs("p", &lp).await.unwrap(), "line 1\nline 2\n");
    let tail = LogParams {
        container: Some("main".into()),
        tail_lines: Some(1),
        ..Default::default()
    };
    assert_eq!(pods.logs("p", &tail).await.unwrap(), "line 2\n");
    let follow = LogParams {
        container: Some("main".into()),
        follow: true,
        ..Default::default()
    };
    let mut lines = pods.log_stream("p", &follow).await.unwrap().lines();
    assert_eq!(lines.try_next().await.unwrap().unwrap(), "line 1");
    assert_eq!(lines.try_next().await.unwrap().unwrap(), "line 2");
    emu.set_pod_log("default", "p", Some("main"), "line 3\n", true)
        .unwrap();
    assert_eq!(lines.try_next().await.unwrap().unwrap(), "line 3");
    let deleted = pods.delete("p", &DeleteParams::default()).await.unwrap();
    assert!(deleted.is_left(), "pods answer delete with the object");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_write_is_applied_but_unanswered_until_released() {
    let emu = emulator().await;
    let client = emu.client();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    emu.hold(Hold {
        verb: Some("create".into()),
        group: Some(String::new()),
        resource: Some("configmaps".into()),
        ..Default::default()
    });
    let pending = tokio::spawn({
        let cms = cms.clone();
        async move { cms.create(&PostParams::default(), &cm("held", &[])).await }
    });
    eventually("the write applied while its answer is held", || async {
        (emu.held() == 1).then_some(())?;
        cms.get_opt("held").await.unwrap()
    })
    .await;
    assert!(!pending.is_finished(), "the client got no answer yet");
    // The rule is one-shot: the next create is answered at once.
    cms.create(&PostParams::default(), &cm("free", &[]))
        .await
        .unwrap();
    emu.release_holds();
    let created = pending.await.unwrap().unwrap();
    assert_eq!(created.name_any(), "held");
    assert_eq!(emu.held(), 1);
    let held_lines = emu
        .audit_log()
        .lines()
        .filter(|l| l.contains("\"held\":true"))
        .count();
    assert_eq!(held_lines, 1);
}

#[tokio::test]
async fn fault_injection_makes_a_controller_retry_and_recover() {
    let emu = emulator().await;
    let client = emu.client();
    install_widgets(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());
    emu.inject_fault(Fault {
        verb: Some("patch".into()),
        resource: Some("configmaps".into()),
        code: 500,
        rate: 1.0,
        count: Some(3),
        after_commit: false,
    });
    let (ctx, handle) = spawn_child_controller(&client, &widgets, &cms);
    widgets
        .create(&PostParams::default(), &widget("w", 2))
        .await
        .unwrap();
    eventually("child created despite injected 500s", || async {
        cms.get_opt("w-child").await.unwrap()
    })
    .await;
    assert!(
        ctx.reconciles.load(Ordering::SeqCst) >= 4,
        "three failed attempts, then success"
    );
    let audit = emu.audit_log();
    let failures = audit
        .lines()
        .filter(|l| l.contains("\"verb\":\"patch\"") && l.contains("\"code\":500"))
        .count();
    assert_eq!(failures, 3);
    // dropped watches and forced 429 on lists: the controller re-establishes and still reacts
    emu.inject_fault(Fault {
        verb: Some("list".into()),
        resource: Some("widgets".into()),
        code: 429,
        rate: 1.0,
        count: Some(2),
        after_commit: false,
    });
    emu.drop_watches();
    widgets
        .create(&PostParams::default(), &widget("v", 5))
        .await
        .unwrap();
    eventually("second child after dropped watches", || async {
        cms.get_opt("v-child").await.unwrap()
    })
    .await;
    handle.abort();
}

#[tokio::test]
async fn patch_engines_through_kube_rs() {
    let emu = emulator().await;
    let client = emu.client();
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::default_namespaced(client.clone());
    let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({"metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}},
        "spec": {"containers": [{"name": "a", "image": "a:1"}, {"name": "b", "image": "b:1"}]}}}})).unwrap();
    let d = deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.revision_history_limit, Some(10));
    let smp =
        json!({"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a:2"}]}}}});
    let d = deployments
        .patch("d", &PatchParams::default(), &Patch::Strategic(&smp))
        .await
        .unwrap();
    let images: Vec<String> = d
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .filter_map(|c| c.image)
        .collect();
    assert_eq!(images, vec!["a:2", "b:1"]);
    install_widgets(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    widgets
        .create(&PostParams::default(), &widget("w", 1))
        .await
        .unwrap();
    let err = status(
        widgets
            .patch(
                "w",
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"size": 2}})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (err.code, err.reason.as_str()),
        (415, "UnsupportedMediaType")
    );
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_instances_then_leaves_discovery() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let emu = emulator().await;
    let client = emu.client();
    install_widgets(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client.clone());
    let mut held = widget("held", 1);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    widgets.create(&PostParams::default(), &held).await.unwrap();
    widgets
        .create(&PostParams::default(), &widget("plain", 1))
        .await
        .unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    eventually("plain instance deleted", || async {
        widgets
            .get_opt("plain")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        widgets
            .get("held")
            .await
            .unwrap()
            .metadata
            .deletion_timestamp
            .is_some()
    );
    let err = status(
        widgets
            .create(&PostParams::default(), &widget("late", 1))
            .await
            .unwrap_err(),
    );
    assert_eq!(err.code, 405, "{err:?}");
    widgets
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
        )
        .await
        .unwrap();
    eventually("crd gone", || async {
        crds.get_opt("widgets.example.com")
            .await
            .unwrap()
            .is_none()
            .then_some(())
    })
    .await;
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    assert!(!discovery.has_group("example.com"));
}

#[tokio::test]
async fn snapshot_on_shutdown_and_reload_on_start() {
    let path = std::env::temp_dir().join(format!(
        "kube-emulator-snapshot-{}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let config = Config {
        snapshot: Some(path.clone()),
        ..Config::default()
    };
    let emu = emulator_with(config.clone()).await;
    install_widgets(&emu.client()).await;
    let widgets: Api<Widget> = Api::default_namespaced(emu.client());
    let before = widgets
        .create(&PostParams::default(), &widget("kept", 4))
        .await
        .unwrap();
    emu.shutdown().await;

    let emu = emulator_with(config).await;
    let widgets: Api<Widget> = Api::default_namespaced(emu.client());
    let after = widgets.get("kept").await.unwrap();
    assert_eq!(
        (after.uid(), after.resource_version(), after.spec.clone()),
        (before.uid(), before.resource_version(), before.spec.clone())
    );
    let next = widgets
        .create(&PostParams::default(), &widget("new", 1))
        .await
        .unwrap();
    let rv = |w: &Widget| w.resource_version().unwrap().parse::<u64>().unwrap();
    assert!(
        rv(&next) > rv(&after),
        "the counter continues after a reload"
    );
    emu.shutdown().await;
    let _ = std::fs::remove_file(&path);
}
