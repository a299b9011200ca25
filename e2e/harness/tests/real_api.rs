//! The real-API backend itself (docs/real-api.md), whatever `COZY_E2E_API` says; skipped with a
//! note when the control plane is not built and `COZY_E2E_API` is not `real`: what it runs and
//! costs, and the differences from the emulator that kube-apiserver showed (the table in
//! docs/kube-emulator.md), each proven here on the real side.

use harness::Harness;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_control_plane_runs_the_pinned_release_and_reports_its_cost() {
    let Some(h) = Harness::start_real_or_skip("cost").await else {
        return;
    };
    let cp = h.control_plane().unwrap();
    let go_mod =
        std::fs::read_to_string(harness::workspace_root().join("hack/kube/go.mod")).unwrap();
    assert!(
        go_mod.contains(&format!("k8s.io/kubernetes {}", cp.version)),
        "kube-apiserver {} is not the release hack/kube/go.mod pins",
        cp.version
    );
    // The figures docs/real-api.md quotes; `--nocapture` shows them.
    use std::io::Write as _;
    let mut err = std::io::stderr();
    let _ = writeln!(
        err,
        "real control plane {}: started in {:.1} s (etcd, kube-apiserver, kube-controller-manager, CRDs established)",
        cp.version,
        cp.start_time.as_secs_f64()
    );
    for (name, rss) in cp.rss() {
        let _ = writeln!(err, "  {name}: {rss}");
    }
    // The ServiceAccount controller runs: a new namespace gets its `default` account.
    let mut h = h;
    let ns = h.temp_namespace("cost").await.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(h.client(), &ns);
    harness::eventually("the default ServiceAccount", || {
        let accounts = accounts.clone();
        async move { accounts.get_opt("default").await.unwrap() }
    })
    .await;
    h.cleanup().await.unwrap();
}

/// A CRD of a group under `k8s.io` needs the `api-approved.kubernetes.io` annotation (the
/// emulator accepts one without).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_in_a_protected_group_needs_the_approval_annotation() {
    let Some(h) = Harness::start_real_or_skip("protected group").await else {
        return;
    };
    let api: Api<CustomResourceDefinition> = Api::all(h.client());
    let crd = |annotations: serde_json::Value| -> CustomResourceDefinition {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.k8s.io", "annotations": annotations},
            "spec": {"group": "example.k8s.io", "scope": "Namespaced",
                "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}
        }))
        .unwrap()
    };
    match api.create(&PostParams::default(), &crd(json!({}))).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert!(
                s.message.contains(
                    "protected groups must have approval annotation \"api-approved.kubernetes.io\""
                ),
                "{}",
                s.message
            );
        }
        other => panic!("expected 422, got {other:?}"),
    }
    api.create(
        &PostParams::default(),
        &crd(json!({"api-approved.kubernetes.io": "unapproved, a test"})),
    )
    .await
    .unwrap();
    let _ = api
        .delete("widgets.example.k8s.io", &Default::default())
        .await;
}

/// A server-side apply that creates its object is authorized as `create` too (the emulator checks
/// `patch` only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_that_creates_needs_create() {
    let Some(mut h) = Harness::start_real_or_skip("apply-create").await else {
        return;
    };
    let ns = h.temp_namespace("apply-create").await.unwrap();
    let rbac = format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: patcher\n  namespace: {ns}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: patch-configmaps\n  namespace: {ns}\n\
         rules:\n- apiGroups: [\"\"]\n  resources: [\"configmaps\"]\n  verbs: [\"get\", \"patch\"]\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: patcher\n  namespace: {ns}\n\
         roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: patch-configmaps\n\
         subjects:\n- kind: ServiceAccount\n  name: patcher\n  namespace: {ns}\n"
    );
    h.apply_yaml(None, &rbac);
    let accounts: Api<ServiceAccount> = Api::namespaced(h.client(), &ns);
    let token = accounts
        .create_token_request(
            "patcher",
            &PostParams::default(),
            &TokenRequest {
                spec: TokenRequestSpec {
                    audiences: vec![],
                    expiration_seconds: Some(600),
                    bound_object_ref: None,
                },
                ..Default::default()
            },
        )
        .await
        .unwrap()
        .status
        .unwrap()
        .token;
    let patcher: Api<ConfigMap> = Api::namespaced(h.client_with_token(&token), &ns);
    let admin: Api<ConfigMap> = Api::namespaced(h.client(), &ns);
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "1"}});
    let pp = PatchParams::apply("patcher");
    match patcher.patch("c", &pp, &Patch::Apply(&cm)).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(
                s.message.contains("cannot create resource \"configmaps\""),
                "{}",
                s.message
            );
        }
        other => panic!("expected 403, got {other:?}"),
    }
    // The same apply of an existing object needs patch only.
    admin
        .patch("c", &PatchParams::apply("admin"), &Patch::Apply(&cm))
        .await
        .unwrap();
    let cm2 = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"b": "2"}});
    patcher.patch("c", &pp, &Patch::Apply(&cm2)).await.unwrap();
    h.cleanup().await.unwrap();
}

/// A claim gets the `kubernetes.io/pvc-protection` finalizer when it is created, and a deleted
/// claim stays Terminating until kube-controller-manager's PVC protection controller sees no pod
/// using it (the emulator deletes a claim at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_claim_goes_once_the_protection_controller_releases_it() {
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    let Some(mut h) = Harness::start_real_or_skip("pvc protection").await else {
        return;
    };
    let ns = h.temp_namespace("pvc").await.unwrap();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(h.client(), &ns);
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))
    .unwrap();
    let created = claims.create(&PostParams::default(), &claim).await.unwrap();
    assert_eq!(
        created.metadata.finalizers,
        Some(vec!["kubernetes.io/pvc-protection".to_owned()])
    );
    claims.delete("data", &Default::default()).await.unwrap();
    harness::eventually("the deleted claim to go", || {
        let claims = claims.clone();
        async move {
            claims
                .get_opt("data")
                .await
                .unwrap()
                .is_none()
                .then_some(())
        }
    })
    .await;
    h.cleanup().await.unwrap();
}

/// A request for a kind of a group no CRD serves, or for an unknown resource of a CRD's group,
/// gets a plain-text `404 page not found`, which kube-rs cannot parse as a Status; an unknown
/// resource of a built-in group gets a `NotFound` Status that names no object. The emulator
/// answers a `NotFound` Status in every case (docs/kube-emulator.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unserved_kind_gets_a_plain_text_404() {
    let Some(h) = Harness::start_real_or_skip("unserved kind").await else {
        return;
    };
    let get = |path: &str| {
        let client = h.client();
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        async move { client.request_text(req).await }
    };
    for path in [
        "/apis/postgresql.cnpg.io/v1/namespaces/default/clusters/postgres-orders-db",
        "/apis/postgresql.cnpg.io/v1/namespaces/default/clusters",
        "/apis/backups.cozystack.io/v1alpha1/namespaces/default/widgets",
    ] {
        match get(path).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(
                    (s.code, s.message.as_str(), s.reason.as_str()),
                    (404, "404 page not found", "Failed to parse error data"),
                    "{path}"
                );
                assert!(
                    !s.is_not_found(),
                    "{path}: kube-rs's get_opt would not see None"
                );
            }
            other => panic!("{path}: expected a 404, got {other:?}"),
        }
    }
    match get("/api/v1/namespaces/default/widgets/w").await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(
                (s.code, s.message.as_str(), s.reason.as_str()),
                (
                    404,
                    "the server could not find the requested resource",
                    "NotFound"
                )
            );
            assert!(s.details.is_none_or(|d| d.name.is_empty()));
        }
        other => panic!("expected a 404, got {other:?}"),
    }
}

/// The reset between two harnesses of one process (e2e/harness/src/reset.rs) leaves
/// kube-controller-manager's namespace controller nothing to empty: objects the next harness makes
/// in a namespace of the same name stay, also after the controller has done a whole deletion
/// since (a namespace of its own, emptied and removed by it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_made_again_after_a_reset_keeps_its_objects() {
    use k8s_openapi::api::core::v1::Namespace;
    let Some(mut h) = Harness::start_real_or_skip("reset, first harness").await else {
        return;
    };
    let namespaces: Api<Namespace> = Api::all(h.client());
    let namespace = |name: &str| -> Namespace {
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
    };
    let config_map = |name: String| -> ConfigMap {
        serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": "v"}})).unwrap()
    };
    namespaces
        .create(&PostParams::default(), &namespace("reused"))
        .await
        .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(h.client(), "reused");
    for i in 0..50 {
        maps.create(&PostParams::default(), &config_map(format!("old-{i}")))
            .await
            .unwrap();
    }
    h.cleanup().await.unwrap();
    drop(h);

    let mut h = Harness::start_real_or_skip("reset, second harness")
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(h.client());
    namespaces
        .create(&PostParams::default(), &namespace("reused"))
        .await
        .unwrap();
    let maps: Api<ConfigMap> = Api::namespaced(h.client(), "reused");
    maps.create(&PostParams::default(), &config_map("mine".into()))
        .await
        .unwrap();
    // A whole pass of the namespace controller: a namespace it empties and removes itself.
    let witness = h.temp_namespace("witness").await.unwrap();
    Api::<ConfigMap>::namespaced(h.client(), &witness)
        .create(&PostParams::default(), &config_map("w".into()))
        .await
        .unwrap();
    namespaces
        .delete(&witness, &Default::default())
        .await
        .unwrap();
    harness::eventually(
        "the namespace controller to remove the witness namespace",
        || {
            let namespaces = namespaces.clone();
            let witness = witness.clone();
            async move {
                namespaces
                    .get_opt(&witness)
                    .await
                    .unwrap()
                    .is_none()
                    .then_some(())
            }
        },
    )
    .await;
    let left: Vec<String> = maps
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    assert_eq!(
        left,
        ["mine"],
        "the reset left old objects or lost new ones"
    );
    h.cleanup().await.unwrap();
}
