//! Routing: the standard API paths resolved against the current kinds table, and the Kubernetes verb of
//! a request.

use std::collections::HashMap;
use std::sync::Arc;

use http::Method;

use crate::kinds::Kind;
use crate::store::State;

/// A resolved resource request.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The served kind.
    pub(crate) kind: Arc<Kind>,
    /// Namespace from the path.
    pub(crate) ns: Option<String>,
    /// Object name.
    pub(crate) name: Option<String>,
    /// Subresource (`status`, `log`, `finalize`).
    pub(crate) sub: Option<String>,
}

pub(super) enum Route {
    Version,
    Health,
    Api,
    Apis,
    Group(String),
    GroupVersion(String, String),
    OpenApiRoot,
    OpenApiDoc(String, String),
    OpenApiV2,
    Resource(Target),
    Admin,
    NotFound,
}

pub(super) fn route(st: &State, path: &str) -> Route {
    let segs: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segs.as_slice() {
        ["version"] => Route::Version,
        ["healthz"] | ["livez"] | ["readyz"] => Route::Health,
        ["healthz" | "livez" | "readyz", ..] => Route::Health,
        ["api"] => Route::Api,
        ["apis"] => Route::Apis,
        ["apis", g] => Route::Group(g.to_string()),
        ["openapi", "v3"] => Route::OpenApiRoot,
        ["openapi", "v2"] => Route::OpenApiV2,
        ["openapi", "v3", "api", v] => Route::OpenApiDoc(String::new(), v.to_string()),
        ["openapi", "v3", "apis", g, v] => Route::OpenApiDoc(g.to_string(), v.to_string()),
        ["emulator", ..] => Route::Admin,
        ["api", v] => Route::GroupVersion(String::new(), v.to_string()),
        ["apis", g, v] => Route::GroupVersion(g.to_string(), v.to_string()),
        ["api", v, rest @ ..] => resource(st, "", v, rest),
        ["apis", g, v, rest @ ..] => resource(st, g, v, rest),
        _ => Route::NotFound,
    }
}

pub(super) fn resource(st: &State, g: &str, v: &str, rest: &[&str]) -> Route {
    let s = |x: &&str| x.to_string();
    if rest.len() >= 3
        && rest[0] == "namespaces"
        && let Some(kind) = st.kind(g, v, rest[2]).filter(|k| k.namespaced)
    {
        if rest.len() > 5 {
            return Route::NotFound;
        }
        return Route::Resource(Target {
            kind,
            ns: Some(rest[1].to_string()),
            name: rest.get(3).map(s),
            sub: rest.get(4).map(s),
        });
    }
    match st.kind(g, v, rest[0]) {
        Some(kind) if rest.len() <= 3 => Route::Resource(Target {
            kind,
            ns: None,
            name: rest.get(1).map(s),
            sub: rest.get(2).map(s),
        }),
        _ => Route::NotFound,
    }
}

/// The Kubernetes verb of a request.
pub(crate) fn verb_of(method: &Method, t: &Target, q: &HashMap<String, String>) -> &'static str {
    verb(method, t.name.is_some(), q)
}

/// The verb of a request for a resource this emulator does not serve, from the method and the
/// path's shape as the API server derives it (`…/namespaces/<ns>/<plural>` is a collection), so
/// that the audit log tells a `list` from a `get` even for kinds that are not installed. `None`
/// for paths that are not resource paths.
pub(super) fn unserved_verb(
    method: &Method,
    path: &str,
    q: &HashMap<String, String>,
) -> Option<&'static str> {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segs.as_slice() {
        ["api", _, rest @ ..] | ["apis", _, _, rest @ ..] if !rest.is_empty() => rest,
        _ => return None,
    };
    let named = if rest[0] == "namespaces" && rest.len() >= 3 {
        rest.len() >= 4
    } else {
        rest.len() >= 2
    };
    Some(verb(method, named, q))
}

fn verb(method: &Method, named: bool, q: &HashMap<String, String>) -> &'static str {
    let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    match (method.as_str(), named) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_for_unserved_kinds_get_their_verb_from_the_path() {
        let q = HashMap::new();
        let get = Method::GET;
        let cases = [
            (
                "/apis/k8s.mariadb.com/v1alpha1/namespaces/t/backups",
                Some("list"),
            ),
            (
                "/apis/k8s.mariadb.com/v1alpha1/namespaces/t/backups/b",
                Some("get"),
            ),
            ("/apis/example.com/v1/widgets", Some("list")),
            ("/apis/example.com/v1/widgets/w", Some("get")),
            ("/api/v1/namespaces/t/things", Some("list")),
            ("/apis/example.com/v1", None),
            ("/version", None),
        ];
        for (path, want) in cases {
            assert_eq!(unserved_verb(&get, path, &q), want, "{path}");
        }
        assert_eq!(
            unserved_verb(
                &Method::DELETE,
                "/apis/example.com/v1/namespaces/t/widgets/w",
                &q
            ),
            Some("delete")
        );
    }
}
