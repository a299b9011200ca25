//! Authorisation with kube-apiserver's RBAC semantics over the stored Roles, ClusterRoles, RoleBindings
//! and ClusterRoleBindings, plus the bootstrap policy kube-apiserver creates (evaluated implicitly).
//!
//! ```text
//! method + path + query ─► Attributes (RequestInfo: verb, group, resource, subresource, ns, name)
//!   ─► system:masters? allow
//!   ─► ClusterRoleBindings (stored, then bootstrap) whose subjects match ─► their ClusterRole's rules
//!   ─► RoleBindings of the request's namespace ─► Role (same namespace) or ClusterRole rules
//!   ─► first rule that matches allows ("RBAC: allowed by …"); none: denied (403 / SAR allowed=false)
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

use serde_json::{Value, json};

use super::Identity;
use crate::error::ApiError;
use crate::selector::LabelSelector;
use crate::store::State;

/// What a request does, as kube-apiserver's `authorizer.Attributes`.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Attributes {
    pub(crate) resource_request: bool,
    pub(crate) verb: String,
    /// Non-resource requests: the URL path.
    pub(crate) path: String,
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) resource: String,
    pub(crate) subresource: String,
    pub(crate) namespace: String,
    pub(crate) name: String,
}

impl Attributes {
    /// A resource request.
    pub(crate) fn resource(verb: &str, group: &str, resource: &str) -> Self {
        Attributes {
            resource_request: true,
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            ..Default::default()
        }
    }

    /// A non-resource request.
    pub(crate) fn non_resource(verb: &str, path: &str) -> Self {
        Attributes {
            verb: verb.into(),
            path: path.into(),
            ..Default::default()
        }
    }

    /// Parses a request as kube-apiserver's RequestInfoFactory does: `/api/v1/…` and
    /// `/apis/{group}/{version}/…` with at least a resource are resource requests, everything else
    /// (discovery, OpenAPI, health, version, the emulator's admin API) is a non-resource request with the
    /// lowercased HTTP method as its verb. A GET without a name is a list, or a watch with `watch=true`,
    /// and then a `metadata.name=X` field selector gives the name X; a DELETE without a name is a
    /// deletecollection.
    pub(crate) fn from_request(method: &str, path: &str, q: &HashMap<String, String>) -> Self {
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, version, mut parts) = match segs.as_slice() {
            ["api", v, rest @ ..] if !rest.is_empty() && !rest[0].is_empty() => ("", *v, rest),
            ["apis", g, v, rest @ ..] if !rest.is_empty() && !rest[0].is_empty() => (*g, *v, rest),
            _ => return Self::non_resource(&method.to_ascii_lowercase(), path),
        };
        let mut verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_string();
        if parts[0] == "watch" {
            // The deprecated `/watch/` path prefix.
            verb = "watch".into();
            parts = &parts[1..];
            if parts.is_empty() {
                return Self::non_resource(&method.to_ascii_lowercase(), path);
            }
        }
        let mut a = Attributes {
            resource_request: true,
            group: group.into(),
            version: version.into(),
            ..Default::default()
        };
        if parts[0] == "namespaces" && parts.len() > 1 {
            a.namespace = parts[1].into();
            if parts.len() > 2 && !matches!(parts[2], "status" | "finalize") {
                parts = &parts[2..];
            }
        }
        a.resource = parts[0].into();
        if parts.len() >= 2 {
            a.name = parts[1].into();
        }
        if parts.len() >= 3 {
            a.subresource = parts[2].into();
        }
        if a.name.is_empty() && verb == "get" {
            let watch = q
                .get("watch")
                .is_some_and(|w| matches!(w.as_str(), "true" | "1" | "True"));
            verb = if watch { "watch" } else { "list" }.into();
            if let Some(name) = q.get("fieldSelector").and_then(|f| exact_name(f)) {
                a.name = name;
            }
        }
        if a.name.is_empty() && verb == "delete" {
            verb = "deletecollection".into();
        }
        a.verb = verb;
        a
    }
}

/// The X of a field selector that requires `metadata.name=X` (`=` or `==`).
fn exact_name(selector: &str) -> Option<String> {
    selector.split(',').find_map(|term| {
        let term = term.trim();
        let v = term
            .strip_prefix("metadata.name==")
            .or_else(|| term.strip_prefix("metadata.name="))?;
        (!v.is_empty() && !v.contains('/') && v != "." && v != "..").then(|| v.to_string())
    })
}

/// An authorisation decision and kube's reason text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    pub(crate) allowed: bool,
    pub(crate) reason: String,
}

/// One PolicyRule.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Rule {
    pub(crate) verbs: Vec<String>,
    pub(crate) groups: Vec<String>,
    pub(crate) resources: Vec<String>,
    pub(crate) names: Vec<String>,
    pub(crate) urls: Vec<String>,
}

impl Rule {
    fn from_json(v: &Value) -> Self {
        let strs = |k: &str| -> Vec<String> {
            v[k].as_array()
                .into_iter()
                .flatten()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        };
        Rule {
            verbs: strs("verbs"),
            groups: strs("apiGroups"),
            resources: strs("resources"),
            names: strs("resourceNames"),
            urls: strs("nonResourceURLs"),
        }
    }

    /// kube's `RuleAllows`.
    pub(crate) fn allows(&self, a: &Attributes) -> bool {
        let verb = self.verbs.iter().any(|v| v == "*" || *v == a.verb);
        if !a.resource_request {
            return verb
                && self.urls.iter().any(|u| {
                    u == "*"
                        || *u == a.path
                        || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
                });
        }
        let combined = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        let resource = self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!a.subresource.is_empty()
                    && r.strip_prefix("*/") == Some(a.subresource.as_str()))
        });
        let group = self.groups.iter().any(|g| g == "*" || *g == a.group);
        let name = self.names.is_empty() || (!a.name.is_empty() && self.names.contains(&a.name));
        verb && group && resource && name
    }

    fn to_resource_rule(&self) -> Value {
        let mut v = json!({"verbs": self.verbs});
        if !self.groups.is_empty() {
            v["apiGroups"] = json!(self.groups);
        }
        if !self.resources.is_empty() {
            v["resources"] = json!(self.resources);
        }
        if !self.names.is_empty() {
            v["resourceNames"] = json!(self.names);
        }
        v
    }
}

const RBAC: &str = "rbac.authorization.k8s.io";

/// The bootstrap ClusterRoles and ClusterRoleBindings kube-apiserver creates that matter here. They are
/// not stored: the authoriser consults them after the stored objects of the same name are looked up.
static BOOTSTRAP: LazyLock<(BTreeMap<String, Value>, Vec<Value>)> = LazyLock::new(|| {
    let get = json!(["get"]);
    let roles = [
        (
            "cluster-admin",
            json!([
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]}
            ]),
        ),
        (
            "system:discovery",
            json!([{"nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez",
                "/openapi", "/openapi/*", "/readyz", "/version", "/version/"], "verbs": get}]),
        ),
        (
            "system:basic-user",
            json!([
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"], "verbs": ["create"]},
                {"apiGroups": ["authorization.k8s.io"],
                 "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"], "verbs": ["create"]}
            ]),
        ),
        (
            "system:public-info-viewer",
            json!([{"nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"],
                "verbs": get}]),
        ),
    ];
    let roles = roles
        .into_iter()
        .map(|(name, rules)| {
            (
                name.to_string(),
                json!({"apiVersion": format!("{RBAC}/v1"), "kind": "ClusterRole",
                    "metadata": {"name": name}, "rules": rules}),
            )
        })
        .collect();
    let binding = |name: &str, role: &str, groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"apiGroup": RBAC, "kind": "Group", "name": g}))
            .collect();
        json!({"apiVersion": format!("{RBAC}/v1"), "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": role},
            "subjects": subjects})
    };
    let bindings = vec![
        binding("cluster-admin", "cluster-admin", &["system:masters"]),
        binding(
            "system:discovery",
            "system:discovery",
            &["system:authenticated"],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            &["system:authenticated"],
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ];
    (roles, bindings)
});

fn objects<'a>(st: &'a State, resource: &str) -> impl Iterator<Item = &'a Value> {
    st.objects
        .get(&format!("{RBAC}/{resource}"))
        .into_iter()
        .flat_map(|m| m.values())
}

fn namespaced<'a>(st: &'a State, resource: &str, ns: &'a str) -> impl Iterator<Item = &'a Value> {
    st.objects
        .get(&format!("{RBAC}/{resource}"))
        .into_iter()
        .flat_map(move |m| {
            m.range((ns.to_string(), String::new())..)
                .take_while(move |((n, _), _)| n == ns)
                .map(|(_, v)| v)
        })
}

fn cluster_role<'a>(st: &'a State, name: &str) -> Option<&'a Value> {
    st.objects
        .get(&format!("{RBAC}/clusterroles"))
        .and_then(|m| m.get(&(String::new(), name.to_string())))
        .or_else(|| BOOTSTRAP.0.get(name))
}

/// The rules of a ClusterRole; an aggregated one (`aggregationRule.clusterRoleSelectors`) has the union of
/// the rules of every ClusterRole its selectors match, as the aggregation controller would write them.
fn cluster_role_rules(st: &State, role: &Value) -> Vec<Rule> {
    let mut rules: Vec<Rule> = role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(Rule::from_json)
        .collect();
    let selectors: Vec<LabelSelector> = role["aggregationRule"]["clusterRoleSelectors"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| LabelSelector::parse(&label_selector_string(s)).ok())
        .collect();
    if selectors.is_empty() {
        return rules;
    }
    let own = role["metadata"]["name"].as_str().unwrap_or_default();
    for other in objects(st, "clusterroles") {
        if other["metadata"]["name"].as_str() == Some(own) {
            continue;
        }
        if selectors.iter().any(|s| s.matches(other)) {
            for r in other["rules"].as_array().into_iter().flatten() {
                let r = Rule::from_json(r);
                if !rules.contains(&r) {
                    rules.push(r);
                }
            }
        }
    }
    rules
}

/// A metav1.LabelSelector as selector text (matchLabels and matchExpressions).
fn label_selector_string(s: &Value) -> String {
    let mut terms = Vec::new();
    for (k, v) in s["matchLabels"].as_object().into_iter().flatten() {
        terms.push(format!("{k}={}", v.as_str().unwrap_or_default()));
    }
    for e in s["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or_default();
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        terms.push(match e["operator"].as_str().unwrap_or_default() {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_string(),
            _ => format!("!{key}"),
        });
    }
    terms.join(",")
}

fn subject_applies(user: &Identity, s: &Value, ns: &str) -> bool {
    let name = s["name"].as_str().unwrap_or_default();
    match s["kind"].as_str().unwrap_or_default() {
        "User" => user.name == name,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let sa_ns = s["namespace"]
                .as_str()
                .filter(|n| !n.is_empty())
                .unwrap_or(ns);
            !sa_ns.is_empty() && user.name == format!("system:serviceaccount:{sa_ns}:{name}")
        }
        _ => false,
    }
}

fn describe_subject(s: &Value, binding_ns: &str) -> String {
    let kind = s["kind"].as_str().unwrap_or_default();
    let name = s["name"].as_str().unwrap_or_default();
    if kind == "ServiceAccount" {
        let ns = s["namespace"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or(binding_ns);
        format!("{kind} {:?}", format!("{name}/{ns}"))
    } else {
        format!("{kind} {name:?}")
    }
}

/// Visits every rule that applies to `user` in `ns` (cluster-wide ones first) with the text kube uses to
/// describe its source; `visit` returns false to stop. Resolution errors (a binding to a missing role)
/// are collected and returned.
fn visit_rules(
    st: &State,
    user: &Identity,
    ns: &str,
    visit: &mut dyn FnMut(&str, &Rule) -> bool,
) -> Vec<String> {
    let mut errors = Vec::new();
    let stored: Vec<&Value> = objects(st, "clusterrolebindings").collect();
    let stored_names: Vec<&str> = stored
        .iter()
        .filter_map(|b| b["metadata"]["name"].as_str())
        .collect();
    let bootstrap = BOOTSTRAP
        .1
        .iter()
        .filter(|b| !stored_names.contains(&b["metadata"]["name"].as_str().unwrap_or_default()));
    for b in stored.iter().copied().chain(bootstrap) {
        if let Some((source, rules)) = binding_rules(st, user, b, "", &mut errors)
            && !rules.iter().all(|r| visit(&source, r))
        {
            return errors;
        }
    }
    if ns.is_empty() {
        return errors;
    }
    for b in namespaced(st, "rolebindings", ns) {
        if let Some((source, rules)) = binding_rules(st, user, b, ns, &mut errors)
            && !rules.iter().all(|r| visit(&source, r))
        {
            return errors;
        }
    }
    errors
}

/// The rules binding `b` grants `user`, with kube's description of their source, when one of its
/// subjects is the user. `ns` is the RoleBinding's namespace, empty for a ClusterRoleBinding (which
/// can only reference a ClusterRole). A reference that does not resolve is added to `errors`.
fn binding_rules(
    st: &State,
    user: &Identity,
    b: &Value,
    ns: &str,
    errors: &mut Vec<String>,
) -> Option<(String, Vec<Rule>)> {
    let subject = b["subjects"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|s| subject_applies(user, s, ns))?;
    let role_name = b["roleRef"]["name"].as_str().unwrap_or_default();
    let role_kind = b["roleRef"]["kind"].as_str().unwrap_or_default();
    let rules = match role_kind {
        "ClusterRole" => match cluster_role(st, role_name) {
            Some(r) => cluster_role_rules(st, r),
            None => {
                errors.push(format!("clusterrole.{RBAC} {role_name:?} not found"));
                return None;
            }
        },
        "Role" if !ns.is_empty() => match st
            .objects
            .get(&format!("{RBAC}/roles"))
            .and_then(|m| m.get(&(ns.to_string(), role_name.to_string())))
        {
            Some(r) => r["rules"]
                .as_array()
                .into_iter()
                .flatten()
                .map(Rule::from_json)
                .collect(),
            None => {
                errors.push(format!("role.{RBAC} {role_name:?} not found"));
                return None;
            }
        },
        other => {
            errors.push(format!("unsupported role reference kind: {other:?}"));
            return None;
        }
    };
    let name = b["metadata"]["name"].as_str().unwrap_or_default();
    let source = if ns.is_empty() {
        format!(
            "ClusterRoleBinding {name:?} of {role_kind} {role_name:?} to {}",
            describe_subject(subject, "")
        )
    } else {
        format!(
            "RoleBinding {:?} of {role_kind} {role_name:?} to {}",
            format!("{name}/{ns}"),
            describe_subject(subject, ns)
        )
    };
    Some((source, rules))
}

/// Decides a request: `system:masters` is always allowed (kube's privileged-group authoriser, no
/// reason); otherwise RBAC.
pub(crate) fn authorize(st: &State, user: &Identity, a: &Attributes) -> Decision {
    if user.is_master() {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    let mut allowed_by = None;
    let errors = visit_rules(st, user, &a.namespace, &mut |source, rule| {
        if rule.allows(a) {
            allowed_by = Some(format!("RBAC: allowed by {source}"));
            false
        } else {
            true
        }
    });
    match allowed_by {
        Some(reason) => Decision {
            allowed: true,
            reason,
        },
        None => Decision {
            allowed: false,
            reason: match errors.len() {
                0 => String::new(),
                1 => format!("RBAC: {}", errors[0]),
                _ => format!("RBAC: [{}]", errors.join(", ")),
            },
        },
    }
}

/// Every rule that applies to `user` in `ns`: `(resource rules, non-resource rules)` as
/// SelfSubjectRulesReview reports them, plus resolution errors.
pub(crate) fn rules_for(st: &State, user: &Identity, ns: &str) -> (Vec<Value>, Vec<Value>, String) {
    let mut resource = Vec::new();
    let mut non_resource = Vec::new();
    let mut all: Vec<Rule> = Vec::new();
    if user.is_master() {
        all.extend(cluster_role_rules(st, &BOOTSTRAP.0["cluster-admin"]));
    }
    let errors = visit_rules(st, user, ns, &mut |_, r| {
        all.push(r.clone());
        true
    });
    for r in all {
        if !r.resources.is_empty() {
            resource.push(r.to_resource_rule());
        }
        if !r.urls.is_empty() {
            non_resource.push(json!({"verbs": r.verbs, "nonResourceURLs": r.urls}));
        }
    }
    let err = match errors.len() {
        0 => String::new(),
        1 => errors[0].clone(),
        _ => format!("[{}]", errors.join(", ")),
    };
    (resource, non_resource, err)
}

/// The 403 kube-apiserver answers for a denied request (`responsewriters.Forbidden`).
pub(crate) fn forbidden(user: &Identity, a: &Attributes, reason: &str) -> ApiError {
    let mut msg = if !a.resource_request {
        format!("User {:?} cannot {} path {:?}", user.name, a.verb, a.path)
    } else {
        let resource = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        if a.namespace.is_empty() {
            format!(
                "User {:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
                user.name, a.verb, a.group
            )
        } else {
            format!(
                "User {:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
                user.name, a.verb, a.group, a.namespace
            )
        }
    };
    if !reason.is_empty() {
        msg = format!("{msg}: {reason}");
    }
    let qualified = if a.group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    let message = if !a.resource_request || a.resource.is_empty() {
        format!("forbidden: {msg}")
    } else if a.name.is_empty() {
        format!("{qualified} is forbidden: {msg}")
    } else {
        format!("{qualified} {:?} is forbidden: {msg}", a.name)
    };
    let mut details = serde_json::Map::new();
    for (k, v) in [
        ("name", &a.name),
        ("group", &a.group),
        ("kind", &a.resource),
    ] {
        if !v.is_empty() {
            details.insert(k.into(), json!(v));
        }
    }
    ApiError::new(403, "Forbidden", message).with_details(Value::Object(details))
}

/// The 401 kube-apiserver answers for a request it could not authenticate.
pub(crate) fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// Applies `Impersonate-*` headers: each impersonated user, group and uid must be allowed
/// (`impersonate` on `users`, `serviceaccounts` in the account's namespace, `groups`, `uids`), and the
/// result is the impersonated identity. No header: the caller unchanged.
pub(crate) fn impersonate(
    st: &State,
    caller: &Identity,
    headers: &http::HeaderMap,
) -> Result<Identity, ApiError> {
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_string)
            .collect()
    };
    let users = values("impersonate-user");
    let groups = values("impersonate-group");
    let uids = values("impersonate-uid");
    if users.is_empty() {
        if !groups.is_empty() || !uids.is_empty() {
            return Err(ApiError::new(
                500,
                "InternalError",
                "Internal error occurred: requested impersonation of groups or a uid without impersonating a user",
            ));
        }
        return Ok(caller.clone());
    }
    let user = users[0].clone();
    let mut checks = Vec::new();
    let mut a = match Identity::service_account_of(&user) {
        Some((ns, name)) => {
            let mut a = Attributes::resource("impersonate", "", "serviceaccounts");
            a.namespace = ns.into();
            a.name = name.into();
            a
        }
        None => {
            let mut a = Attributes::resource("impersonate", "", "users");
            a.name = user.clone();
            a
        }
    };
    checks.push(a.clone());
    for g in &groups {
        a = Attributes::resource("impersonate", "", "groups");
        a.name = g.clone();
        checks.push(a.clone());
    }
    for u in &uids {
        a = Attributes::resource("impersonate", "authentication.k8s.io", "uids");
        a.name = u.clone();
        checks.push(a.clone());
    }
    for c in &checks {
        let d = authorize(st, caller, c);
        if !d.allowed {
            return Err(forbidden(caller, c, &d.reason));
        }
    }
    let mut id = Identity {
        name: user.clone(),
        uid: uids.first().cloned().unwrap_or_default(),
        groups: groups.clone(),
        extra: BTreeMap::new(),
    };
    if let Some((ns, _)) = Identity::service_account_of(&user) {
        for g in [
            "system:serviceaccounts".to_string(),
            format!("system:serviceaccounts:{ns}"),
        ] {
            if !id.groups.contains(&g) {
                id.groups.push(g);
            }
        }
    }
    let implicit = if user == "system:anonymous" {
        "system:unauthenticated"
    } else {
        "system:authenticated"
    };
    if !id.groups.iter().any(|g| g == implicit) {
        id.groups.push(implicit.into());
    }
    Ok(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn request_info_matches_kube() {
        let none = q(&[]);
        let a = Attributes::from_request("GET", "/api/v1/namespaces/t/pods/p/log", &none);
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.subresource.as_str()),
            ("get", "pods", "log")
        );
        assert_eq!((a.namespace.as_str(), a.name.as_str()), ("t", "p"));
        let a = Attributes::from_request(
            "GET",
            "/apis/apps/v1/namespaces/t/deployments",
            &q(&[("watch", "true"), ("fieldSelector", "metadata.name=d")]),
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", "d"));
        assert_eq!(a.group, "apps");
        let a = Attributes::from_request("DELETE", "/api/v1/namespaces/t/configmaps", &none);
        assert_eq!(a.verb, "deletecollection");
        let a = Attributes::from_request("GET", "/api/v1/namespaces/t", &none);
        assert_eq!(
            (a.resource.as_str(), a.name.as_str(), a.namespace.as_str()),
            ("namespaces", "t", "t")
        );
        let a = Attributes::from_request("PUT", "/api/v1/namespaces/t/finalize", &none);
        assert_eq!(
            (a.resource.as_str(), a.subresource.as_str()),
            ("namespaces", "finalize")
        );
        let a = Attributes::from_request("GET", "/apis/apps/v1", &none);
        assert!(!a.resource_request);
        assert_eq!((a.verb.as_str(), a.path.as_str()), ("get", "/apis/apps/v1"));
        let a = Attributes::from_request(
            "POST",
            "/api/v1/namespaces/t/serviceaccounts/s/token",
            &none,
        );
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.subresource.as_str()),
            ("create", "serviceaccounts", "token")
        );
    }

    #[test]
    fn rule_shapes_match_as_kube() {
        let rule = |verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]| Rule {
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            groups: groups.iter().map(|s| s.to_string()).collect(),
            resources: resources.iter().map(|s| s.to_string()).collect(),
            names: names.iter().map(|s| s.to_string()).collect(),
            urls: Vec::new(),
        };
        let mut get_log = Attributes::resource("get", "", "pods");
        get_log.subresource = "log".into();
        get_log.name = "p".into();
        assert!(rule(&["get"], &[""], &["pods/log"], &[]).allows(&get_log));
        assert!(rule(&["get"], &[""], &["*/log"], &[]).allows(&get_log));
        assert!(rule(&["*"], &["*"], &["*"], &[]).allows(&get_log));
        assert!(!rule(&["get"], &[""], &["pods"], &[]).allows(&get_log));
        // kube has no `resource/*` wildcard: it matches only a subresource literally named `*`.
        assert!(!rule(&["get"], &[""], &["pods/*"], &[]).allows(&get_log));
        let list = Attributes::resource("list", "", "configmaps");
        assert!(!rule(&["list"], &[""], &["configmaps"], &["x"]).allows(&list));
        let mut named = list.clone();
        named.name = "x".into();
        assert!(rule(&["list"], &[""], &["configmaps"], &["x"]).allows(&named));
        let url = Attributes::non_resource("get", "/healthz/etcd");
        let mut r = rule(&["get"], &[], &[], &[]);
        r.urls = vec!["/healthz/*".into()];
        assert!(r.allows(&url));
        r.urls = vec!["/healthz".into()];
        assert!(!r.allows(&url));
    }

    #[test]
    fn forbidden_messages_have_kubes_shapes() {
        let u = Identity::service_account("ns", "sa", "1");
        let mut a = Attributes::resource("get", "", "pods");
        a.namespace = "t".into();
        a.name = "p".into();
        a.subresource = "log".into();
        assert_eq!(
            forbidden(&u, &a, "").message,
            "pods \"p\" is forbidden: User \"system:serviceaccount:ns:sa\" cannot get resource \"pods/log\" in API group \"\" in the namespace \"t\""
        );
        let a = Attributes::resource("list", "backups.cozystack.io", "backupclasses");
        assert_eq!(
            forbidden(&u, &a, "").message,
            "backupclasses.backups.cozystack.io is forbidden: User \"system:serviceaccount:ns:sa\" cannot list resource \"backupclasses\" in API group \"backups.cozystack.io\" at the cluster scope"
        );
        let a = Attributes::non_resource("get", "/foo");
        assert_eq!(
            forbidden(&u, &a, "").message,
            "forbidden: User \"system:serviceaccount:ns:sa\" cannot get path \"/foo\""
        );
    }
}
