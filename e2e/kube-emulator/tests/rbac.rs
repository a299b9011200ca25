//! Authentication and RBAC conformance: 401s, TokenRequest/TokenReview, allow/deny tables for every rule
//! shape, kube-apiserver's exact 403 messages, impersonation, and `kubectl auth can-i` / `create token`
//! with the pinned kubectl binaries.

use crate::common;

use std::time::Duration;

use common::*;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchParams};
use serde_json::{Value, json};

const NS: &str = "team";

/// An emulator with namespace `team`, ServiceAccount `team/bot` and the admin client.
async fn setup() -> (kube_emulator::Running, kube::Client) {
    let emu = emulator().await;
    let admin = emu.client();
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    )
    .await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "bot", "namespace": NS}}),
    )
    .await;
    (emu, admin)
}

/// Creates one object as the admin (raw JSON, any kind).
async fn apply(admin: &kube::Client, obj: Value) {
    let (group_version, kind) = (
        obj["apiVersion"].as_str().unwrap().to_string(),
        obj["kind"].as_str().unwrap(),
    );
    let plural = match kind {
        "Namespace" => "namespaces",
        "ServiceAccount" => "serviceaccounts",
        "ConfigMap" => "configmaps",
        "Pod" => "pods",
        "Role" => "roles",
        "RoleBinding" => "rolebindings",
        "ClusterRole" => "clusterroles",
        "ClusterRoleBinding" => "clusterrolebindings",
        other => panic!("no plural for {other}"),
    };
    let prefix = if group_version.contains('/') {
        format!("/apis/{group_version}")
    } else {
        format!("/api/{group_version}")
    };
    let uri = match obj["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{prefix}/namespaces/{ns}/{plural}"),
        None => format!("{prefix}/{plural}"),
    };
    let (code, _, body) = raw(admin, "POST", &uri, "application/json", &obj).await;
    assert_eq!(code, 201, "creating {kind}: {body}");
}

/// A token for `team/<sa>` through the TokenRequest subresource.
async fn token_for(admin: &kube::Client, sa: &str, audiences: &[&str]) -> String {
    let api: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    let req = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audiences.iter().map(|a| a.to_string()).collect(),
            ..Default::default()
        },
        ..Default::default()
    };
    let out = api
        .create_token_request(sa, &PostParams::default(), &req)
        .await
        .expect("token request");
    out.status.expect("status").token
}

fn role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": NS}, "rules": rules})
}

fn cluster_role(name: &str, rules: Value) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name}, "rules": rules})
}

fn binding(kind: &str, name: &str, role_kind: &str, role: &str, subjects: Value) -> Value {
    let mut b = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind,
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": subjects});
    if kind == "RoleBinding" {
        b["metadata"]["namespace"] = json!(NS);
    }
    b
}

fn bot_subject() -> Value {
    json!([{"kind": "ServiceAccount", "name": "bot", "namespace": NS}])
}

/// `allowed` of a SubjectAccessReview for `user`/`groups`, asked by the admin.
async fn sar(admin: &kube::Client, user: &str, groups: &[&str], attrs: Value) -> (bool, Value) {
    let key = if attrs.get("path").is_some() {
        "nonResourceAttributes"
    } else {
        "resourceAttributes"
    };
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {key: attrs, "user": user, "groups": groups}});
    let (code, _, out) = raw(
        admin,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        "application/json",
        &body,
    )
    .await;
    assert_eq!(code, 201, "{out}");
    (out["status"]["allowed"] == true, out["status"].clone())
}

#[tokio::test]
async fn anonymous_forged_and_malformed_credentials_are_unauthorized() {
    let emu = emulator().await;
    let anonymous = kube_emulator::client_for(&emu.url(), "");
    let forged = emu.client_with_token("not-a-token");
    for client in [&anonymous, &forged] {
        let (code, _, body) = raw(
            client,
            "GET",
            "/api/v1/namespaces",
            "application/json",
            &json!(null),
        )
        .await;
        assert_eq!(code, 401);
        assert_eq!(
            body,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
        );
    }
    // The public-info paths stay open to everyone; discovery is not.
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        let req = http::Request::get(path).body(Vec::new()).unwrap();
        anonymous.request_text(req).await.expect(path);
    }
    let req = http::Request::get("/apis").body(Vec::new()).unwrap();
    assert_eq!(
        status(anonymous.request_text(req).await.unwrap_err()).code,
        401
    );
    // The admin API requires the admin token.
    let req = http::Request::get("/emulator/v1/audit")
        .body(Vec::new())
        .unwrap();
    assert_eq!(
        status(anonymous.request_text(req).await.unwrap_err()).code,
        401
    );
    let req = http::Request::get("/emulator/v1/audit")
        .body(Vec::new())
        .unwrap();
    let audit = emu.client().request_text(req).await.unwrap();
    // Every entry names its user; refused ones too.
    assert!(
        audit
            .lines()
            .any(|l| l.contains("\"code\":401") && l.contains("\"user\":null")),
        "{audit}"
    );
    assert!(
        audit
            .lines()
            .any(|l| l.contains("\"user\":\"system:anonymous\"") && l.contains("/healthz")),
        "{audit}"
    );
}

#[tokio::test]
async fn token_requests_validate_and_tokens_stop_working() {
    let (emu, admin) = setup().await;
    let sas: Api<ServiceAccount> = Api::namespaced(admin.clone(), NS);
    // Validation as kube-apiserver: expiry at least 10 minutes, the ServiceAccount must exist.
    let short = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(60),
            ..Default::default()
        },
        ..Default::default()
    };
    let e = status(
        sas.create_token_request("bot", &PostParams::default(), &short)
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        "TokenRequest.authentication.k8s.io \"bot\" is invalid: spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
    );
    let e = status(
        sas.create_token_request("ghost", &PostParams::default(), &TokenRequest::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "serviceaccounts \"ghost\" not found")
    );

    // Defaults: one hour, the API server's audience.
    let out = sas
        .create_token_request("bot", &PostParams::default(), &TokenRequest::default())
        .await
        .unwrap();
    assert_eq!(out.spec.expiration_seconds, Some(3600));
    assert_eq!(
        out.spec.audiences,
        vec!["https://kubernetes.default.svc.cluster.local".to_string()]
    );
    let st = out.status.unwrap();
    let left =
        st.expiration_timestamp.0.as_second() - k8s_openapi::jiff::Timestamp::now().as_second();
    assert!((3590..=3600).contains(&left), "{left}");
    let bot = emu.client_with_token(&st.token);
    let cms: Api<ConfigMap> = Api::namespaced(bot.clone(), NS);
    // Authenticated but not authorised yet.
    assert_eq!(
        status(cms.list(&ListParams::default()).await.unwrap_err()).code,
        403
    );
    apply(
        &admin,
        role(
            "cm-reader",
            json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
        ),
    )
    .await;
    apply(
        &admin,
        binding("RoleBinding", "bot-cm", "Role", "cm-reader", bot_subject()),
    )
    .await;
    cms.list(&ListParams::default())
        .await
        .expect("allowed by the RoleBinding");

    // Expiry: the test clock moves past the hour.
    emu.advance_token_clock(Duration::from_secs(3601));
    assert_eq!(
        status(cms.list(&ListParams::default()).await.unwrap_err()).code,
        401
    );

    // Deleting the ServiceAccount invalidates its tokens, also after a new one of the same name exists.
    let fresh = token_for(&admin, "bot", &[]).await;
    let fresh_client: Api<ConfigMap> = Api::namespaced(emu.client_with_token(&fresh), NS);
    fresh_client.list(&ListParams::default()).await.unwrap();
    sas.delete("bot", &DeleteParams::default()).await.unwrap();
    assert_eq!(
        status(fresh_client.list(&ListParams::default()).await.unwrap_err()).code,
        401
    );
    apply(&admin, json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot", "namespace": NS}})).await;
    assert_eq!(
        status(fresh_client.list(&ListParams::default()).await.unwrap_err()).code,
        401
    );
    let again = Api::<ConfigMap>::namespaced(
        emu.client_with_token(&token_for(&admin, "bot", &[]).await),
        NS,
    );
    again
        .list(&ListParams::default())
        .await
        .expect("a token of the new account works");

    // A token for another audience does not authenticate to the API.
    let vault = token_for(&admin, "bot", &["vault"]).await;
    let e = Api::<ConfigMap>::namespaced(emu.client_with_token(&vault), NS)
        .list(&ListParams::default())
        .await
        .unwrap_err();
    assert_eq!(status(e).code, 401);
}

#[tokio::test]
async fn token_reviews_report_identity_and_audiences() {
    let (_emu, admin) = setup().await;
    let review = |token: &str, audiences: Value| {
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token, "audiences": audiences}})
    };
    let token = token_for(&admin, "bot", &[]).await;
    let path = "/apis/authentication.k8s.io/v1/tokenreviews";
    let (code, _, out) = raw(
        &admin,
        "POST",
        path,
        "application/json",
        &review(&token, json!([])),
    )
    .await;
    assert_eq!(code, 201, "{out}");
    let sa: ServiceAccount = Api::namespaced(admin.clone(), NS).get("bot").await.unwrap();
    assert_eq!(out["status"]["authenticated"], true);
    assert_eq!(
        out["status"]["user"]["username"],
        "system:serviceaccount:team:bot"
    );
    assert_eq!(
        out["status"]["user"]["uid"],
        json!(sa.metadata.uid.unwrap())
    );
    assert_eq!(
        out["status"]["user"]["groups"],
        json!([
            "system:serviceaccounts",
            "system:serviceaccounts:team",
            "system:authenticated"
        ])
    );
    assert_eq!(
        out["status"]["audiences"],
        json!(["https://kubernetes.default.svc.cluster.local"])
    );
    // Audiences that do not intersect the token's: not authenticated.
    let (_, _, out) = raw(
        &admin,
        "POST",
        path,
        "application/json",
        &review(&token, json!(["vault"])),
    )
    .await;
    assert_eq!(out["status"]["authenticated"], Value::Null);
    assert!(
        out["status"]["error"]
            .as_str()
            .unwrap()
            .contains("token audiences"),
        "{out}"
    );
    let vault = token_for(&admin, "bot", &["vault", "other"]).await;
    let (_, _, out) = raw(
        &admin,
        "POST",
        path,
        "application/json",
        &review(&vault, json!(["vault"])),
    )
    .await;
    assert_eq!(out["status"]["authenticated"], true);
    assert_eq!(out["status"]["audiences"], json!(["vault"]));
    let (_, _, out) = raw(
        &admin,
        "POST",
        path,
        "application/json",
        &review("forged", json!([])),
    )
    .await;
    assert_eq!(out["status"]["authenticated"], Value::Null);
    assert_eq!(out["status"]["error"], "[invalid bearer token]");
    // Reviewing tokens needs `create tokenreviews`.
    let bot = _emu.client_with_token(&token);
    let (code, _, out) = raw(
        &bot,
        "POST",
        path,
        "application/json",
        &review(&token, json!([])),
    )
    .await;
    assert_eq!(code, 403);
    assert_eq!(
        out["message"],
        "tokenreviews.authentication.k8s.io is forbidden: User \"system:serviceaccount:team:bot\" cannot create resource \"tokenreviews\" in API group \"authentication.k8s.io\" at the cluster scope"
    );
}

#[tokio::test]
async fn rule_shapes_allow_and_deny_as_rbac_does() {
    let (_emu, admin) = setup().await;
    let sa = "system:serviceaccount:team:bot";
    apply(&admin, role("shapes", json!([
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"], "resourceNames": ["settings"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
        {"apiGroups": ["example.com"], "resources": ["*/status"], "verbs": ["update", "patch"]},
        {"apiGroups": ["apps"], "resources": ["*"], "verbs": ["list"]},
        {"apiGroups": ["*"], "resources": ["leases"], "verbs": ["*"]},
        {"apiGroups": [""], "resources": ["secrets/*"], "verbs": ["get"]}
    ]))).await;
    apply(
        &admin,
        binding("RoleBinding", "shapes", "Role", "shapes", bot_subject()),
    )
    .await;
    // A ClusterRole through a RoleBinding applies in that namespace only.
    apply(
        &admin,
        cluster_role(
            "job-reader",
            json!([{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}]),
        ),
    )
    .await;
    apply(
        &admin,
        binding(
            "RoleBinding",
            "jobs",
            "ClusterRole",
            "job-reader",
            json!([{"kind": "ServiceAccount", "name": "bot"}]),
        ),
    )
    .await;
    // A ClusterRoleBinding applies everywhere, cluster-scoped resources included.
    apply(
        &admin,
        cluster_role(
            "ns-viewer",
            json!([{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list"]},
        {"nonResourceURLs": ["/metrics", "/debug/*"], "verbs": ["get"]}]),
        ),
    )
    .await;
    apply(
        &admin,
        binding(
            "ClusterRoleBinding",
            "ns-viewers",
            "ClusterRole",
            "ns-viewer",
            json!([{"kind": "Group", "name": "viewers", "apiGroup": "rbac.authorization.k8s.io"},
               {"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}]),
        ),
    )
    .await;
    // Aggregation: the union of the rules of the ClusterRoles the selectors match.
    apply(&admin, json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "aggregate"},
        "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"rbac.example.com/aggregate": "true"}}]},
        "rules": []})).await;
    apply(
        &admin,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "part", "labels": {"rbac.example.com/aggregate": "true"}},
        "rules": [{"apiGroups": [""], "resources": ["services"], "verbs": ["delete"]}]}),
    )
    .await;
    apply(
        &admin,
        binding(
            "ClusterRoleBinding",
            "agg",
            "ClusterRole",
            "aggregate",
            json!([{"kind": "User", "name": "carol", "apiGroup": "rbac.authorization.k8s.io"}]),
        ),
    )
    .await;

    let ra = |verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str| {
        json!({"verb": verb, "group": group, "resource": resource, "subresource": sub,
            "namespace": ns, "name": name})
    };
    let cases: Vec<(&str, Value, bool)> = vec![
        // resourceNames: a named get/list/watch only; a list without the name (no metadata.name selector) is not.
        (sa, ra("get", "", "configmaps", "", NS, "settings"), true),
        (sa, ra("get", "", "configmaps", "", NS, "other"), false),
        (sa, ra("list", "", "configmaps", "", NS, ""), false),
        (sa, ra("list", "", "configmaps", "", NS, "settings"), true),
        (sa, ra("watch", "", "configmaps", "", NS, "settings"), true),
        (sa, ra("create", "", "configmaps", "", NS, ""), false),
        // Subresources.
        (sa, ra("get", "", "pods", "log", NS, "p"), true),
        (sa, ra("get", "", "pods", "", NS, "p"), false),
        (
            sa,
            ra("patch", "example.com", "widgets", "status", NS, "w"),
            true,
        ),
        (
            sa,
            ra("patch", "example.com", "widgets", "", NS, "w"),
            false,
        ),
        (
            sa,
            ra("patch", "other.com", "widgets", "status", NS, "w"),
            false,
        ),
        // `secrets/*` is not a wildcard in RBAC.
        (sa, ra("get", "", "secrets", "", NS, "s"), false),
        // Resource and group wildcards.
        (sa, ra("list", "apps", "deployments", "", NS, ""), true),
        (sa, ra("list", "apps", "deployments", "scale", NS, ""), true),
        (sa, ra("get", "apps", "deployments", "", NS, "d"), false),
        (
            sa,
            ra("delete", "coordination.k8s.io", "leases", "", NS, "l"),
            true,
        ),
        (
            sa,
            ra(
                "delete",
                "coordination.k8s.io",
                "leases",
                "",
                "elsewhere",
                "l",
            ),
            false,
        ),
        // ClusterRole through a RoleBinding: that namespace only.
        (sa, ra("get", "batch", "jobs", "", NS, "j"), true),
        (sa, ra("get", "batch", "jobs", "", "elsewhere", "j"), false),
        // ClusterRoleBinding with Group and User subjects; cluster-scoped resources.
        ("bob", ra("get", "", "namespaces", "", "", "team"), false),
        ("alice", ra("get", "", "namespaces", "", "", "team"), true),
        ("alice", ra("list", "", "namespaces", "", "", ""), true),
        (
            "alice",
            ra("delete", "", "namespaces", "", "", "team"),
            false,
        ),
        ("carol", ra("delete", "", "services", "", NS, "s"), true),
        ("carol", ra("get", "", "services", "", NS, "s"), false),
    ];
    for (user, attrs, want) in &cases {
        let (got, st) = sar(&admin, user, &[], attrs.clone()).await;
        assert_eq!(got, *want, "{user} {attrs}: {st}");
    }
    let (got, _) = sar(
        &admin,
        "bob",
        &["viewers"],
        ra("list", "", "namespaces", "", "", ""),
    )
    .await;
    assert!(got, "group subject");
    for (path, want) in [
        ("/metrics", true),
        ("/debug/pprof", true),
        ("/debug", false),
        ("/metricsx", false),
    ] {
        let (got, _) = sar(&admin, "alice", &[], json!({"path": path, "verb": "get"})).await;
        assert_eq!(got, want, "{path}");
    }
    // Everyone authenticated may read discovery and the version, nobody else's paths.
    let (got, st) = sar(
        &admin,
        "nobody",
        &["system:authenticated"],
        json!({"path": "/apis/apps/v1", "verb": "get"}),
    )
    .await;
    assert!(got);
    assert_eq!(
        st["reason"],
        "RBAC: allowed by ClusterRoleBinding \"system:discovery\" of ClusterRole \"system:discovery\" to Group \"system:authenticated\""
    );
    let (_, st) = sar(&admin, sa, &[], ra("get", "batch", "jobs", "", NS, "j")).await;
    assert_eq!(
        st["reason"],
        "RBAC: allowed by RoleBinding \"jobs/team\" of ClusterRole \"job-reader\" to ServiceAccount \"bot/team\""
    );
    // A binding to a missing role is reported in the denial.
    apply(
        &admin,
        binding("RoleBinding", "dangling", "Role", "missing", bot_subject()),
    )
    .await;
    let (got, st) = sar(&admin, sa, &[], ra("delete", "", "pods", "", NS, "p")).await;
    assert!(!got);
    assert_eq!(
        st["reason"],
        "RBAC: role.rbac.authorization.k8s.io \"missing\" not found"
    );
}

#[tokio::test]
async fn denied_requests_get_kube_apiservers_403s() {
    let (emu, admin) = setup().await;
    apply(
        &admin,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS},
        "spec": {"containers": [{"name": "c", "image": "x"}]}}),
    )
    .await;
    let bot = emu.client_with_token(&token_for(&admin, "bot", &[]).await);
    let user = "system:serviceaccount:team:bot";
    let expect = |e: kube::Error, msg: String, details: Value| {
        let s = status(e);
        assert_eq!((s.code, s.reason.as_str()), (403, "Forbidden"));
        assert_eq!(s.message, msg);
        assert_eq!(serde_json::to_value(s.details.unwrap()).unwrap(), details);
    };
    let pods: Api<Pod> = Api::namespaced(bot.clone(), NS);
    expect(
        pods.get("p").await.unwrap_err(),
        format!(
            "pods \"p\" is forbidden: User \"{user}\" cannot get resource \"pods\" in API group \"\" in the namespace \"team\""
        ),
        json!({"name": "p", "kind": "pods"}),
    );
    expect(
        pods.list(&ListParams::default()).await.unwrap_err(),
        format!(
            "pods is forbidden: User \"{user}\" cannot list resource \"pods\" in API group \"\" in the namespace \"team\""
        ),
        json!({"kind": "pods"}),
    );
    expect(
        pods.logs("p", &Default::default()).await.unwrap_err(),
        format!(
            "pods \"p\" is forbidden: User \"{user}\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"team\""
        ),
        json!({"name": "p", "kind": "pods"}),
    );
    let crs: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(bot.clone());
    expect(
        crs.get("cluster-admin").await.unwrap_err(),
        format!(
            "clusterroles.rbac.authorization.k8s.io \"cluster-admin\" is forbidden: User \"{user}\" cannot get resource \"clusterroles\" in API group \"rbac.authorization.k8s.io\" at the cluster scope"
        ),
        json!({"name": "cluster-admin", "group": "rbac.authorization.k8s.io", "kind": "clusterroles"}),
    );
    // A watch is refused before it starts; the metadata.name selector names the object.
    let cms: Api<ConfigMap> = Api::namespaced(bot.clone(), NS);
    let e = cms
        .watch(
            &WatchParams::default().fields("metadata.name=settings"),
            "0",
        )
        .await
        .err()
        .expect("watch refused");
    expect(
        e,
        format!(
            "configmaps \"settings\" is forbidden: User \"{user}\" cannot watch resource \"configmaps\" in API group \"\" in the namespace \"team\""
        ),
        json!({"name": "settings", "kind": "configmaps"}),
    );
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let s = status(bot.request_text(req).await.unwrap_err());
    assert_eq!(
        s.message,
        format!("forbidden: User \"{user}\" cannot get path \"/metrics\"")
    );
    // Discovery is open to every authenticated user.
    let req = http::Request::get("/apis").body(Vec::new()).unwrap();
    bot.request_text(req).await.expect("discovery");
    // The audit log names the user and keeps the 403s.
    let audit = emu.audit_log();
    assert!(
        audit.lines().any(|l| l.contains("\"code\":403")
            && l.contains(user)
            && l.contains("\"verb\":\"watch\"")),
        "{audit}"
    );
}

#[tokio::test]
async fn impersonation_needs_the_impersonate_verb() {
    let (emu, admin) = setup().await;
    let token = token_for(&admin, "bot", &[]).await;
    let ssar = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
        "spec": {"resourceAttributes": {"verb": "create", "resource": "tokenreviews", "group": "authentication.k8s.io"}}});
    let path = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews";
    let as_user = |client: &kube::Client, who: &str| {
        let req = http::Request::post(path)
            .header("content-type", "application/json")
            .header("Impersonate-User", who)
            .body(serde_json::to_vec(&ssar).unwrap())
            .unwrap();
        let client = client.clone();
        async move { client.request::<Value>(req).await }
    };
    // The admin may impersonate; the impersonated account is what the review evaluates.
    let out = as_user(&admin, "system:serviceaccount:team:bot")
        .await
        .unwrap();
    assert_eq!(out["status"]["allowed"], false);
    let out = as_user(&admin, "kube-emulator-admin").await.unwrap();
    assert_eq!(
        out["status"]["allowed"], false,
        "impersonation drops system:masters"
    );
    // A ServiceAccount without the verb gets kube's 403.
    let bot = emu.client_with_token(&token);
    let s = status(as_user(&bot, "alice").await.unwrap_err());
    assert_eq!(
        s.message,
        "users \"alice\" is forbidden: User \"system:serviceaccount:team:bot\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    apply(&admin, cluster_role("impersonator", json!([{"apiGroups": [""], "resources": ["users"], "verbs": ["impersonate"], "resourceNames": ["alice"]}]))).await;
    apply(
        &admin,
        binding(
            "ClusterRoleBinding",
            "impersonator",
            "ClusterRole",
            "impersonator",
            bot_subject(),
        ),
    )
    .await;
    let out = as_user(&bot, "alice").await.unwrap();
    assert_eq!(out["status"]["allowed"], false);
    // Who am I: SelfSubjectReview.
    let body = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"});
    let (code, _, out) = raw(
        &bot,
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        "application/json",
        &body,
    )
    .await;
    assert_eq!(code, 201);
    assert_eq!(
        out["status"]["userInfo"]["username"],
        "system:serviceaccount:team:bot"
    );
}

/// kubectl `auth can-i` (with `--as`, `-n`, `--subresource`) and `create token` against the emulator.
async fn kubectl_can_i(bin: &str) {
    if !std::path::Path::new(bin).exists() {
        println!("skipping: {bin} is not installed");
        return;
    }
    let (emu, admin) = setup().await;
    apply(
        &admin,
        role(
            "logs",
            json!([
                {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}
            ]),
        ),
    )
    .await;
    apply(
        &admin,
        binding("RoleBinding", "logs", "Role", "logs", bot_subject()),
    )
    .await;
    let dir = emu.kubeconfig_path().parent().unwrap().join("kubectl-rbac");
    std::fs::create_dir_all(&dir).unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(bin)
            .args(args)
            .env("KUBECONFIG", emu.kubeconfig_path())
            .env("KUBECACHEDIR", dir.join("cache"))
            .env("HOME", &dir)
            .output()
            .expect("kubectl runs");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let bot = "--as=system:serviceaccount:team:bot";
    let cases: &[(&[&str], &str)] = &[
        (
            &["auth", "can-i", "list", "configmaps", "-n", NS, bot],
            "yes",
        ),
        (
            &["auth", "can-i", "list", "configmaps", "-n", "default", bot],
            "no",
        ),
        (
            &[
                "auth",
                "can-i",
                "get",
                "pods",
                "--subresource=log",
                "-n",
                NS,
                bot,
            ],
            "yes",
        ),
        (&["auth", "can-i", "get", "pods", "-n", NS, bot], "no"),
        (&["auth", "can-i", "delete", "namespaces"], "yes"),
    ];
    for (args, want) in cases {
        let (code, out, err) = run(args);
        assert_eq!(out, *want, "kubectl {}: {err}", args.join(" "));
        assert_eq!(code, Some(if *want == "yes" { 0 } else { 1 }), "{err}");
    }
    let (code, token, err) = run(&["create", "token", "bot", "-n", NS, "--duration=20m"]);
    assert_eq!(code, Some(0), "{err}");
    let cms: Api<ConfigMap> = Api::namespaced(emu.client_with_token(&token), NS);
    cms.list(&ListParams::default())
        .await
        .expect("the kubectl-made token works");
    assert_eq!(
        status(
            Api::<Pod>::namespaced(emu.client_with_token(&token), NS)
                .list(&ListParams::default())
                .await
                .unwrap_err()
        )
        .code,
        403
    );
    // A kubeconfig for the ServiceAccount's token: kubectl acts as the account.
    let sa_kubeconfig = dir.join("bot-kubeconfig");
    emu.write_kubeconfig_for_token(&sa_kubeconfig, &token, NS)
        .unwrap();
    let kc = format!("--kubeconfig={}", sa_kubeconfig.display());
    let (code, _, err) = run(&[&kc, "get", "configmaps"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, _, err) = run(&[&kc, "get", "pods"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("pods is forbidden: User \"system:serviceaccount:team:bot\" cannot list resource \"pods\" in API group \"\" in the namespace \"team\""),
        "{err}"
    );
    let (code, _, err) = run(&["create", "token", "bot", "-n", NS, "--duration=1m"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("may not specify a duration less than 10 minutes"),
        "{err}"
    );
    let (code, out, err) = run(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
        bot,
    ]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "system:serviceaccount:team:bot"),
        "{err}"
    );
}

// kubectl runs as a blocking child process: the emulator needs a worker of its own meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_31_can_i_and_create_token() {
    kubectl_can_i("/usr/lib/google-cloud-sdk/bin/kubectl.1.31").await;
}

// kubectl runs as a blocking child process: the emulator needs a worker of its own meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_33_can_i_and_create_token() {
    kubectl_can_i("/usr/lib/google-cloud-sdk/bin/kubectl.1.33").await;
}

#[tokio::test]
async fn authentication_off_makes_everyone_the_admin() {
    let emu =
        emulator_with(kube_emulator::Config::default().with_auth(kube_emulator::Auth::Off)).await;
    assert_eq!(emu.admin_token(), "");
    let anonymous = kube_emulator::client_for(&emu.url(), "");
    Api::<ConfigMap>::namespaced(anonymous, "default")
        .list(&ListParams::default())
        .await
        .expect("no authentication");
    let text = std::fs::read_to_string(emu.kubeconfig_path()).unwrap();
    assert!(
        text.contains("server: http://") && !text.contains("token:"),
        "{text}"
    );
}
