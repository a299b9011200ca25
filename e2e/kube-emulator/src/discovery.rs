//! Discovery (legacy and aggregated v2) and `/version`. Everything is derived from the current kinds
//! table, so a CRD appears and disappears at once.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::kinds::Kind;

/// The `/version` body (all nine fields k8s-openapi requires).
pub(crate) fn version() -> Value {
    json!({"major": "1", "minor": "33", "gitVersion": "v1.33.0",
        "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.24.0", "compiler": "gc",
        "platform": "linux/amd64"})
}

/// Group name → versions in preference order.
fn groups(kinds: &[std::sync::Arc<Kind>]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<(bool, String)>> = BTreeMap::new();
    for k in kinds {
        let vs = out.entry(k.group.clone()).or_default();
        if let Some(e) = vs.iter_mut().find(|(_, v)| *v == k.version) {
            e.0 |= k.preferred;
        } else {
            vs.push((k.preferred, k.version.clone()));
        }
    }
    out.into_iter()
        .map(|(g, mut vs)| {
            vs.sort_by_key(|(p, _)| !*p);
            (g, vs.into_iter().map(|(_, v)| v).collect())
        })
        .collect()
}

/// `GET /api`.
pub(crate) fn api_versions(addr: &str) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}]})
}

fn group_entry(g: &str, vs: &[String]) -> Value {
    let versions: Vec<Value> = vs
        .iter()
        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    json!({"name": g, "versions": versions, "preferredVersion": versions[0]})
}

/// `GET /apis`.
pub(crate) fn api_group_list(kinds: &[std::sync::Arc<Kind>]) -> Value {
    let groups: Vec<Value> = groups(kinds)
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/{g}`.
pub(crate) fn api_group(kinds: &[std::sync::Arc<Kind>], group: &str) -> Option<Value> {
    let gs = groups(kinds);
    let vs = gs.get(group).filter(|_| !group.is_empty())?;
    let mut v = group_entry(group, vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

/// `GET /api/v1` or `/apis/{g}/{v}`; None when the group-version is not served.
pub(crate) fn resource_list(
    kinds: &[std::sync::Arc<Kind>],
    group: &str,
    version: &str,
) -> Option<Value> {
    let ks: Vec<&std::sync::Arc<Kind>> = kinds
        .iter()
        .filter(|k| k.group == group && k.version == version)
        .collect();
    if ks.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for k in &ks {
        let mut r = json!({"name": k.plural, "singularName": k.singular, "namespaced": k.namespaced,
            "kind": k.kind, "verbs": k.verbs()});
        if !k.short_names.is_empty() {
            r["shortNames"] = json!(k.short_names);
        }
        if !k.categories.is_empty() {
            r["categories"] = json!(k.categories);
        }
        resources.push(r);
        if k.status_subresource {
            resources.push(
                json!({"name": format!("{}/status", k.plural), "singularName": "",
                "namespaced": k.namespaced, "kind": k.kind, "verbs": ["get", "patch", "update"]}),
            );
        }
        if k.kind == "Pod" {
            resources.push(
                json!({"name": "pods/log", "singularName": "", "namespaced": true,
                "kind": "Pod", "verbs": ["get"]}),
            );
        }
        if k.kind == "ServiceAccount" && k.group.is_empty() {
            resources.push(
                json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
                "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest",
                "verbs": ["create"]}),
            );
        }
        if k.kind == "Namespace" {
            resources.push(
                json!({"name": "namespaces/finalize", "singularName": "", "namespaced": false,
                "kind": "Namespace", "verbs": ["update"]}),
            );
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// Aggregated discovery (`apidiscovery.k8s.io/v2`) for the core group (`core == true`) or all others.
pub(crate) fn aggregated(kinds: &[std::sync::Arc<Kind>], core: bool) -> Value {
    let items: Vec<Value> = groups(kinds)
        .iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = kinds
                        .iter()
                        .filter(|k| k.group == *g && k.version == *v)
                        .map(|k| {
                            let rk = json!({"group": k.group, "version": k.version, "kind": k.kind});
                            let mut subs = Vec::new();
                            if k.status_subresource {
                                subs.push(json!({"subresource": "status", "responseKind": rk, "verbs": ["get", "patch", "update"]}));
                            }
                            if k.kind == "Pod" {
                                subs.push(json!({"subresource": "log", "responseKind": {"group": "", "version": "", "kind": ""}, "verbs": ["get"]}));
                            }
                            if k.kind == "ServiceAccount" && k.group.is_empty() {
                                subs.push(json!({"subresource": "token", "responseKind": {"group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest"}, "verbs": ["create"]}));
                            }
                            let mut r = json!({"resource": k.plural, "responseKind": rk,
                                "scope": if k.namespaced { "Namespaced" } else { "Cluster" },
                                "singularResource": k.singular, "verbs": k.verbs()});
                            if !k.short_names.is_empty() {
                                r["shortNames"] = json!(k.short_names);
                            }
                            if !k.categories.is_empty() {
                                r["categories"] = json!(k.categories);
                            }
                            if !subs.is_empty() {
                                r["subresources"] = json!(subs);
                            }
                            r
                        })
                        .collect();
                    json!({"version": v, "freshness": "Current", "resources": resources})
                })
                .collect();
            json!({"metadata": {"name": g}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {}, "items": items})
}
