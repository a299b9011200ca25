//! HTTP front end: routing of the standard API paths, content negotiation, verbs, watch streams and
//! `pods/log`, with the admin API mounted under `/emulator/v1`.
//!
//! ```text
//! request ─► audit + latency + fault injection ─► route (discovery | openapi | resource verb | admin)
//!          ─► State (one mutex, synchronous) ─► JSON / Table / PartialObjectMetadata / watch stream
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Request, State as AxState};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, watch};

use crate::admin::Admin;
use crate::discovery;
use crate::error::ApiError;
use crate::kinds::Kind;
use crate::patch;
use crate::selector::{FieldSelector, LabelSelector};
use crate::ssa::{self, Scope};
use crate::store::{DeleteOpts, Deleted, State, WriteOpts, to_view};
use crate::table::{self, Include};

/// Shared server state.
pub(crate) struct Inner {
    /// Objects, kinds, history.
    pub(crate) state: Mutex<State>,
    /// Audit log, faults, latency.
    pub(crate) admin: Mutex<Admin>,
    /// Woken after every write so the controllers run.
    pub(crate) changed: Notify,
    /// Bumped to end every open watch (fault injection).
    pub(crate) drop_watches: watch::Sender<u64>,
    /// Set to true on shutdown.
    pub(crate) shutdown: watch::Sender<bool>,
    /// How often open watches get a BOOKMARK.
    pub(crate) bookmark_interval: Duration,
    /// `host:port` the server listens on.
    pub(crate) addr: String,
}

impl Inner {
    /// Locks the object state.
    pub(crate) fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What a request asks for in its Accept header.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    Json,
    Table,
    Partial,
    PartialList,
    Aggregated,
}

fn negotiate(headers: &HeaderMap) -> Result<Want, ApiError> {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Ok(Want::Json);
    };
    if accept.trim().is_empty() {
        return Ok(Want::Json);
    }
    for item in accept.split(',') {
        let mut parts = item.split(';').map(str::trim);
        let mt = parts.next().unwrap_or_default().to_ascii_lowercase();
        let params: HashMap<String, String> = parts
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect();
        if !matches!(mt.as_str(), "application/json" | "*/*" | "application/*") {
            continue;
        }
        match params.get("as").map(String::as_str) {
            None => return Ok(Want::Json),
            Some("Table") => return Ok(Want::Table),
            Some("PartialObjectMetadata") => return Ok(Want::Partial),
            Some("PartialObjectMetadataList") => return Ok(Want::PartialList),
            Some("APIGroupDiscoveryList") if params.get("v").map(String::as_str) == Some("v2") => {
                return Ok(Want::Aggregated);
            }
            _ => continue,
        }
    }
    Err(ApiError::new(
        406,
        "NotAcceptable",
        format!(
            "only the following media types are accepted: application/json, application/yaml; requested: {accept}"
        ),
    ))
}

fn json_response(code: u16, v: &Value) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(v.to_string()))
        .expect("response")
}

/// Adds one `Warning: 299 - "…"` header per warning, as the apiserver does.
fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - \"{}\"", w.replace('\\', "\\\\").replace('"', "\\\""));
        if let Ok(v) = http::HeaderValue::from_str(&text) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    r
}

/// Renders an error as a Status response.
pub(crate) fn error_response(e: &ApiError) -> Response {
    let mut r = json_response(e.code, &e.body());
    if e.code == 429 {
        r.headers_mut()
            .insert(header::RETRY_AFTER, http::HeaderValue::from_static("1"));
    }
    r
}

fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    url::form_urlencoded::parse(q.unwrap_or_default().as_bytes())
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

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

enum Route {
    Version,
    Health,
    Api,
    Apis,
    Group(String),
    GroupVersion(String, String),
    OpenApiRoot,
    OpenApiDoc(String, String),
    Resource(Target),
    Admin,
    NotFound,
}

fn route(st: &State, path: &str) -> Route {
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

fn resource(st: &State, g: &str, v: &str, rest: &[&str]) -> Route {
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
    let watch = q.get("watch").is_some_and(|w| w == "true" || w == "1");
    match (method.as_str(), t.name.is_some()) {
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

fn manager(q: &HashMap<String, String>, headers: &HeaderMap) -> String {
    if let Some(m) = q.get("fieldManager").filter(|m| !m.is_empty()) {
        return m.clone();
    }
    headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .and_then(|ua| ua.split('/').next())
        .filter(|s| !s.is_empty())
        .unwrap_or("unknown")
        .to_string()
}

fn dry_run(q: &HashMap<String, String>) -> Result<bool, ApiError> {
    match q.get("dryRun").map(String::as_str) {
        None | Some("") => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(ApiError::bad_request(format!(
            "Invalid dry run value: {other}; supported values: [All]"
        ))),
    }
}

fn parse_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .to_ascii_lowercase();
    if ct.contains("protobuf") || body.starts_with(crate::protobuf::MAGIC) {
        return crate::protobuf::decode(body);
    }
    if body.is_empty() {
        return Ok(Value::Null);
    }
    if ct.contains("yaml") {
        serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid YAML body: {e}")))
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid JSON body: {e}")))
    }
}

/// Entry point for every request.
pub(crate) async fn handle(AxState(inner): AxState<Arc<Inner>>, req: Request) -> Response {
    let started = Instant::now();
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(e) => return error_response(&ApiError::bad_request(format!("reading body: {e}"))),
    };
    let path = parts.uri.path().to_string();
    let q = parse_query(parts.uri.query());
    let (resp, verb, target) = if path.starts_with("/emulator/") {
        (
            crate::admin::handle(&inner, &parts.method, &path, &q, &body),
            "admin",
            None,
        )
    } else {
        let routed = route(&inner.st(), &path);
        match routed {
            Route::Resource(t) => {
                let verb = verb_of(&parts.method, &t, &q);
                let latency = inner
                    .admin
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .latency;
                if !latency.is_zero() {
                    tokio::time::sleep(latency).await;
                }
                let fault = inner
                    .admin
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pick_fault(verb, &t.kind.plural);
                let resp = match fault {
                    Some(code) if !(verb == "watch" && code == 410) => {
                        error_response(&crate::admin::fault_error(code, &t))
                    }
                    Some(_) => watch_expired_response(&t.kind, "forced by fault injection"),
                    None => {
                        let r = resource_request(
                            &inner,
                            &parts.method,
                            &parts.headers,
                            &q,
                            &body,
                            &t,
                            verb,
                        );
                        if !matches!(verb, "get" | "list" | "watch") {
                            inner.changed.notify_one();
                        }
                        r
                    }
                };
                (resp, verb, Some(t))
            }
            other => (meta_request(&inner, &parts.headers, other), "get", None),
        }
    };
    if verb != "admin" {
        inner.admin.lock().unwrap_or_else(|e| e.into_inner()).record(json!({
            "time": crate::store::now(), "method": parts.method.as_str(), "path": path,
            "query": parts.uri.query().unwrap_or_default(), "verb": verb,
            "resource": target.as_ref().map(|t| t.kind.plural.clone()),
            "namespace": target.as_ref().and_then(|t| t.ns.clone()),
            "name": target.as_ref().and_then(|t| t.name.clone()),
            "subresource": target.as_ref().and_then(|t| t.sub.clone()),
            "userAgent": parts.headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()),
            "contentType": parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()),
            "code": resp.status().as_u16(),
            "durationMs": started.elapsed().as_millis() as u64,
        }));
    }
    resp
}

fn meta_request(inner: &Inner, headers: &HeaderMap, r: Route) -> Response {
    let want = negotiate(headers).unwrap_or(Want::Json);
    let st = inner.st();
    let agg = |v: Value| {
        Response::builder()
            .status(200)
            .header(
                header::CONTENT_TYPE,
                "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
            )
            .body(Body::from(v.to_string()))
            .expect("response")
    };
    match r {
        Route::Version => json_response(200, &discovery::version()),
        Route::Health => Response::builder()
            .status(200)
            .header(header::CONTENT_TYPE, "text/plain; charset=utf-8")
            .body(Body::from("ok"))
            .expect("response"),
        Route::Api if want == Want::Aggregated => agg(discovery::aggregated(&st.kinds, true)),
        Route::Apis if want == Want::Aggregated => agg(discovery::aggregated(&st.kinds, false)),
        Route::Api => json_response(200, &discovery::api_versions(&inner.addr)),
        Route::Apis => json_response(200, &discovery::api_group_list(&st.kinds)),
        Route::Group(g) => match discovery::api_group(&st.kinds, &g) {
            Some(v) => json_response(200, &v),
            None => error_response(&ApiError::no_route()),
        },
        Route::GroupVersion(g, v) => match discovery::resource_list(&st.kinds, &g, &v) {
            Some(v) => json_response(200, &v),
            None => error_response(&ApiError::no_route()),
        },
        Route::OpenApiRoot => json_response(200, &discovery::openapi_root(&st.kinds)),
        Route::OpenApiDoc(g, v) => match discovery::openapi_doc(&st.kinds, &g, &v) {
            Some(v) => json_response(200, &v),
            None => error_response(&ApiError::no_route()),
        },
        Route::Resource(_) | Route::Admin | Route::NotFound => {
            error_response(&ApiError::no_route())
        }
    }
}

fn render_one(want: Want, kind: &Kind, obj: &Value, q: &HashMap<String, String>) -> Value {
    match want {
        Want::Partial | Want::PartialList => table::partial(obj),
        Want::Table => {
            let rv = obj["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default();
            table::table(kind, std::slice::from_ref(obj), rv, include(q), true)
        }
        _ => obj.clone(),
    }
}

fn include(q: &HashMap<String, String>) -> Include {
    match q.get("includeObject").map(String::as_str) {
        Some("None") => Include::None,
        Some("Object") => Include::Object,
        _ => Include::Metadata,
    }
}

fn selectors(
    kind: &Kind,
    t: &Target,
    q: &HashMap<String, String>,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(
        q.get("labelSelector")
            .map(String::as_str)
            .unwrap_or_default(),
    )
    .map_err(ApiError::bad_request)?;
    let mut fs = q.get("fieldSelector").cloned().unwrap_or_default();
    if let Some(name) = &t.name {
        // `GET …/{name}?watch=true` watches just that object.
        if !fs.is_empty() {
            fs.push(',');
        }
        fs.push_str(&format!("metadata.name={name}"));
    }
    let fields = FieldSelector::parse(&fs, &kind.kind).map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

fn resource_request(
    inner: &Arc<Inner>,
    method: &Method,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    body: &Bytes,
    t: &Target,
    verb: &str,
) -> Response {
    let want = match negotiate(headers) {
        Ok(w) => w,
        Err(e) => return error_response(&e),
    };
    if verb == "watch" {
        return match start_watch(inner, t, q, want) {
            Ok(r) => r,
            Err(e) => error_response(&e),
        };
    }
    if t.sub.as_deref() == Some("log") && t.kind.kind == "Pod" && method == Method::GET {
        return pod_log(inner, t, q);
    }
    match verb_request(inner, headers, q, body, t, verb, want) {
        Ok((code, v, warnings)) => with_warnings(json_response(code, &v), &warnings),
        Err(e) => error_response(&e),
    }
}

#[allow(clippy::too_many_arguments)]
fn verb_request(
    inner: &Arc<Inner>,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    body: &Bytes,
    t: &Target,
    verb: &str,
    want: Want,
) -> Result<(u16, Value, Vec<String>), ApiError> {
    let kind = &t.kind;
    let ns = t.ns.as_deref();
    if kind.namespaced && ns.is_none() && !matches!(verb, "list" | "watch") {
        return Err(ApiError::no_route());
    }
    let scope = match t.sub.as_deref() {
        None => {
            if kind.status_subresource {
                Scope::NoStatus
            } else {
                Scope::All
            }
        }
        Some("status") if kind.status_subresource => Scope::StatusOnly,
        Some("finalize") if kind.kind == "Namespace" && verb == "update" => Scope::All,
        Some(_) => return Err(ApiError::no_route()),
    };
    let opts = WriteOpts {
        dry_run: dry_run(q)?,
        manager: manager(q, headers),
        field_validation: crate::schema::FieldValidation::parse(
            q.get("fieldValidation").map(String::as_str),
        )?,
    };
    let mut st = inner.st();
    st.warnings.clear();
    let result = (|| match verb {
        "get" => {
            let obj = st.get(kind, ns, t.name.as_deref().unwrap_or_default())?;
            Ok((200, render_one(want, kind, &obj, q)))
        }
        "list" => {
            let (labels, fields) = selectors(kind, t, q)?;
            let items = st.list(kind, ns, &labels, &fields);
            let rv = st.rv.to_string();
            let v = match want {
                Want::Table => table::table(kind, &items, &rv, include(q), true),
                Want::Partial | Want::PartialList => json!({"kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": rv},
                    "items": items.iter().map(table::partial).collect::<Vec<_>>()}),
                _ => json!({"kind": kind.list_kind, "apiVersion": kind.api_version(),
                    "metadata": {"resourceVersion": rv}, "items": items}),
            };
            Ok((200, v))
        }
        "create" => {
            if t.sub.is_some() {
                return Err(ApiError::no_route());
            }
            let body = parse_body(headers, body)?;
            let obj = st.create(kind, ns, body, &opts)?;
            Ok((201, render_one(want, kind, &obj, q)))
        }
        "update" => {
            let name = t.name.as_deref().unwrap_or_default();
            let body = parse_body(headers, body)?;
            let old = st.get(kind, ns, name)?;
            let obj = st.write(kind, ns, name, old, body, scope, &opts, true, false)?;
            Ok((200, render_one(want, kind, &obj, q)))
        }
        "patch" => {
            let name = t.name.as_deref().unwrap_or_default();
            let (code, obj) = patch_request(&mut st, headers, q, body, t, scope, &opts, name)?;
            Ok((code, render_one(want, kind, &obj, q)))
        }
        "delete" => {
            let name = t.name.as_deref().unwrap_or_default();
            let dopts = delete_opts(q, body, opts.dry_run)?;
            match st.delete(kind, ns, name, &dopts)? {
                Deleted::Pending(v) => Ok((200, v)),
                Deleted::Gone(v) if kind.return_deleted_object => Ok((200, v)),
                Deleted::Gone(v) => Ok((200, State::delete_status(kind, &v))),
            }
        }
        "deletecollection" => {
            let dopts = delete_opts(q, body, opts.dry_run)?;
            let (labels, fields) = selectors(kind, t, q)?;
            let items = st.list(kind, ns, &labels, &fields);
            let mut out = Vec::new();
            for it in items {
                let name = it["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let ons = it["metadata"]["namespace"].as_str().map(str::to_string);
                match st.delete(kind, ons.as_deref(), &name, &dopts)? {
                    Deleted::Pending(v) | Deleted::Gone(v) => out.push(v),
                }
            }
            Ok((
                200,
                json!({"kind": kind.list_kind, "apiVersion": kind.api_version(),
                "metadata": {"resourceVersion": st.rv.to_string()}, "items": out}),
            ))
        }
        _ => Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )),
    })();
    let warnings = std::mem::take(&mut st.warnings);
    result.map(|(code, v)| (code, v, warnings))
}

fn delete_opts(
    q: &HashMap<String, String>,
    body: &Bytes,
    dry: bool,
) -> Result<DeleteOpts, ApiError> {
    let b: Value = if body.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("invalid DeleteOptions: {e}")))?
    };
    let dry = dry
        || b["dryRun"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "All"));
    Ok(DeleteOpts {
        dry_run: dry,
        uid: b["preconditions"]["uid"].as_str().map(str::to_string),
        rv: b["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
        propagation: b["propagationPolicy"]
            .as_str()
            .map(str::to_string)
            .or_else(|| q.get("propagationPolicy").cloned())
            .or_else(|| (b["orphanDependents"] == true).then(|| "Orphan".to_string())),
    })
}

#[allow(clippy::too_many_arguments)]
fn patch_request(
    st: &mut State,
    headers: &HeaderMap,
    q: &HashMap<String, String>,
    body: &Bytes,
    t: &Target,
    scope: Scope,
    opts: &WriteOpts,
    name: &str,
) -> Result<(u16, Value), ApiError> {
    let kind = &t.kind;
    let ns = t.ns.as_deref();
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase();
    let force = q.get("force").map(String::as_str);
    let is_apply = ct == "application/apply-patch+yaml";
    if !is_apply && force.is_some() {
        return Err(ApiError::invalid(
            kind,
            name,
            "force",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    let unsupported = || {
        ApiError::new(
            415,
            "UnsupportedMediaType",
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        )
    };
    match ct.as_str() {
        "application/merge-patch+json"
        | "application/json-patch+json"
        | "application/apply-patch+yaml" => {}
        "application/strategic-merge-patch+json" if !kind.custom => {}
        "application/strategic-merge-patch+json" => return Err(unsupported()),
        _ => {
            let mut e = unsupported();
            if !kind.custom {
                e.message = e.message.replace(
                    "include: ",
                    "include: application/strategic-merge-patch+json, ",
                );
            }
            return Err(e);
        }
    }
    let patch: Value = if is_apply {
        serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?
    };
    let existing = st.get(kind, ns, name);
    if is_apply {
        let manager = q
            .get("fieldManager")
            .filter(|m| !m.is_empty())
            .ok_or_else(|| {
                ApiError::invalid(
                    kind,
                    name,
                    "fieldManager",
                    "Required value: is required for apply patch",
                )
            })?;
        if patch["apiVersion"].as_str().unwrap_or_default().is_empty()
            || patch["kind"].as_str().unwrap_or_default().is_empty()
        {
            return Err(ApiError::bad_request(
                "apiVersion and kind must be set in an apply configuration",
            ));
        }
        let force = force == Some("true");
        let now = crate::store::now();
        let opts = WriteOpts {
            manager: manager.clone(),
            ..opts.clone()
        };
        return match existing {
            Err(e) if e.code == 404 => {
                if scope == Scope::StatusOnly {
                    return Err(e);
                }
                let mut created =
                    ssa::apply(kind, &json!({}), &patch, manager, force, Scope::All, &now)
                        .map_err(|c| conflict_error(kind, name, c))?;
                if let Some(rv) = patch["metadata"]["resourceVersion"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                {
                    let _ = rv;
                    return Err(ApiError::conflict(kind, name));
                }
                created["metadata"]["name"] = json!(name);
                let obj = st.create_applied(kind, ns, created, &opts)?;
                Ok((201, obj))
            }
            Err(e) => Err(e),
            Ok(old) => {
                if let Some(rv) = patch["metadata"]["resourceVersion"]
                    .as_str()
                    .filter(|s| !s.is_empty())
                    && rv
                        != old["metadata"]["resourceVersion"]
                            .as_str()
                            .unwrap_or_default()
                {
                    return Err(ApiError::conflict(kind, name));
                }
                let pname = patch["metadata"]["name"].as_str().unwrap_or_default();
                if !pname.is_empty() && pname != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({pname}) does not match the name on the URL ({name})"
                    )));
                }
                let new = ssa::apply(kind, &old, &patch, manager, force, scope, &now)
                    .map_err(|c| conflict_error(kind, name, c))?;
                let obj = st.write(kind, ns, name, old, new, scope, &opts, false, true)?;
                Ok((200, obj))
            }
        };
    }
    let old = existing?;
    let new = match ct.as_str() {
        "application/merge-patch+json" => {
            let mut n = old.clone();
            patch::merge_patch(&mut n, &patch);
            n
        }
        "application/json-patch+json" => {
            let mut n = old.clone();
            patch::json_patch(&mut n, &patch).map_err(|m| ApiError::new(422, "Invalid", m))?;
            n
        }
        _ => patch::strategic_merge(kind, &old, &patch).map_err(ApiError::bad_request)?,
    };
    let obj = st.write(kind, ns, name, old, new, scope, opts, false, false)?;
    Ok((200, obj))
}

fn conflict_error(kind: &Kind, name: &str, c: ssa::Conflicts) -> ApiError {
    // upstream fieldmanager/internal/conflict.go `getConflictMessage`: one conflict on one line, several
    // grouped by manager (managers sorted), one "- path" line each.
    let n = c.0.len();
    let message = if n == 1 {
        format!("Apply failed with 1 conflict: {}: {}", c.0[0].0, c.0[0].1)
    } else {
        let mut managers: Vec<&String> = c.0.iter().map(|(m, _)| m).collect();
        managers.sort();
        managers.dedup();
        let mut lines = Vec::new();
        for m in managers {
            lines.push(m.clone());
            lines.extend(
                c.0.iter()
                    .filter(|(o, _)| o == m)
                    .map(|(_, f)| format!("- {f}")),
            );
        }
        format!("Apply failed with {n} conflicts: {}", lines.join("\n"))
    };
    let causes: Vec<Value> =
        c.0.iter()
            .map(|(m, f)| json!({"type": "FieldManagerConflict", "message": m, "field": f}))
            .collect();
    let mut d = crate::error::details(kind, name);
    d["causes"] = json!(causes);
    ApiError::new(409, "Conflict", message).with_details(d)
}

fn line(v: &Value) -> Result<Bytes, Infallible> {
    let mut s = v.to_string();
    s.push('\n');
    Ok(Bytes::from(s))
}

fn watch_expired_response(_kind: &Kind, why: &str) -> Response {
    let ev = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": format!("too old resource version: {why}"), "reason": "Expired", "code": 410}});
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(format!("{ev}\n")))
        .expect("response")
}

fn bool_q(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

fn start_watch(
    inner: &Arc<Inner>,
    t: &Target,
    q: &HashMap<String, String>,
    want: Want,
) -> Result<Response, ApiError> {
    let kind = t.kind.clone();
    let (labels, fields) = selectors(&kind, t, q)?;
    let bookmarks = bool_q(q, "allowWatchBookmarks");
    let initial_events = bool_q(q, "sendInitialEvents");
    if initial_events
        && (!bookmarks || q.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan"))
    {
        return Err(ApiError::new(
            422,
            "Invalid",
            "sendInitialEvents is forbidden for watch unless resourceVersionMatch is NotOlderThan and allowWatchBookmarks is true",
        ));
    }
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800 + rand::random_range(0..1800)));
    let ns = t.ns.clone();
    let rv_param = q.get("resourceVersion").cloned().unwrap_or_default();
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    let mut first_table = true;
    let render = move |etype: &str, obj: &Value, first: &mut bool| -> Value {
        let o = match want {
            Want::Table => {
                let rv = obj["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or_default();
                let t = table::table(
                    &kind,
                    std::slice::from_ref(obj),
                    rv,
                    Include::Metadata,
                    *first,
                );
                *first = false;
                t
            }
            Want::Partial | Want::PartialList => table::partial(obj),
            _ => obj.clone(),
        };
        json!({"type": etype, "object": o})
    };
    let kind = t.kind.clone();
    let matches = {
        let ns = ns.clone();
        move |v: &Value| -> bool {
            ns.as_deref()
                .is_none_or(|n| v["metadata"]["namespace"].as_str() == Some(n))
                && labels.matches(v)
                && fields.matches(v)
        }
    };
    let mut initial: Vec<Value> = Vec::new();
    let (mut live, mut last_rv, expired) = {
        let st = inner.st();
        let live = st.tx.subscribe();
        let cur = st.rv;
        let mut expired = None;
        if initial_events || rv_param.is_empty() || rv_param == "0" {
            if let Some(objs) = st.objects.get(&kind.storage) {
                for o in objs.values() {
                    let v = to_view(&kind, o);
                    if matches(&v) {
                        initial.push(render("ADDED", &v, &mut first_table));
                    }
                }
            }
        } else {
            let n: u64 = rv_param.parse().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {rv_param}"))
            })?;
            if n < st.compacted {
                expired = Some(format!("{n} ({})", st.compacted + 1));
            } else {
                for ev in st.history.iter().filter(|e| e.rv > n) {
                    if let Some(v) = convert_event(&kind, ev, &matches) {
                        initial.push(render(v.0, &v.1, &mut first_table));
                    }
                }
            }
        }
        (live, cur, expired)
    };
    let mut drop_rx = inner.drop_watches.subscribe();
    let mut shutdown_rx = inner.shutdown.subscribe();
    let interval = inner.bookmark_interval;
    let bookmark = {
        let kind = kind.clone();
        move |rv: u64, end: bool| {
            let mut meta = json!({"resourceVersion": rv.to_string()});
            if end {
                meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
            }
            json!({"type": "BOOKMARK", "object": {"kind": kind.kind, "apiVersion": kind.api_version(), "metadata": meta}})
        }
    };
    tokio::spawn(async move {
        if let Some(why) = expired {
            let ev = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Failure", "message": format!("too old resource version: {why}"), "reason": "Expired", "code": 410}});
            let _ = tx.send(line(&ev)).await;
            return;
        }
        for ev in initial {
            if tx.send(line(&ev)).await.is_err() {
                return;
            }
        }
        if initial_events && tx.send(line(&bookmark(last_rv, true))).await.is_err() {
            return;
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        loop {
            tokio::select! {
                _ = &mut deadline => {
                    if bookmarks {
                        let _ = tx.send(line(&bookmark(last_rv, false))).await;
                    }
                    return;
                }
                _ = tick.tick() => {
                    if bookmarks && tx.send(line(&bookmark(last_rv, false))).await.is_err() {
                        return;
                    }
                }
                _ = drop_rx.changed() => return,
                _ = shutdown_rx.changed() => return,
                _ = tx.closed() => return,
                ev = live.recv() => {
                    let ev = match ev {
                        Ok(ev) => ev,
                        // Lagged or closed: end the stream; the client resumes from its last RV.
                        Err(_) => return,
                    };
                    if ev.storage == kind.storage && ev.etype == "GONE" {
                        return;
                    }
                    last_rv = last_rv.max(ev.rv);
                    if let Some((etype, obj)) = convert_event(&kind, &ev, &matches)
                        && tx.send(line(&render(etype, &obj, &mut first_table))).await.is_err() {
                            return;
                        }
                }
            }
        }
    });
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx);
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(stream))
        .expect("response"))
}

/// Applies the old/new selector table to one stored change.
fn convert_event(
    kind: &Kind,
    ev: &crate::store::Event,
    matches: &impl Fn(&Value) -> bool,
) -> Option<(&'static str, Value)> {
    if ev.storage != kind.storage || ev.etype == "GONE" {
        return None;
    }
    let new = to_view(kind, &ev.obj);
    match ev.etype {
        "ADDED" => matches(&new).then_some(("ADDED", new)),
        "DELETED" => matches(&new).then_some(("DELETED", new)),
        _ => {
            let old = ev.old.as_ref().map(|o| to_view(kind, o));
            let was = old.as_ref().is_some_and(matches);
            match (was, matches(&new)) {
                (true, true) => Some(("MODIFIED", new)),
                (false, true) => Some(("ADDED", new)),
                (true, false) => {
                    let mut prev = old.expect("old");
                    prev["metadata"]["resourceVersion"] = json!(ev.rv.to_string());
                    Some(("DELETED", prev))
                }
                (false, false) => None,
            }
        }
    }
}

fn pod_log(inner: &Arc<Inner>, t: &Target, q: &HashMap<String, String>) -> Response {
    let ns = t.ns.clone().unwrap_or_default();
    let name = t.name.clone().unwrap_or_default();
    let (text, container) = {
        let st = inner.st();
        let pod = match st.get(&t.kind, Some(&ns), &name) {
            Ok(p) => p,
            Err(e) => return error_response(&e),
        };
        let containers: Vec<String> = pod["spec"]["containers"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let container = match q.get("container").filter(|c| !c.is_empty()) {
            Some(c) if containers.contains(c) => c.clone(),
            Some(c) => {
                return error_response(&ApiError::bad_request(format!(
                    "container {c} is not valid for pod {name}"
                )));
            }
            None if containers.len() == 1 => containers[0].clone(),
            None => {
                return error_response(&ApiError::bad_request(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    containers.join(" ")
                )));
            }
        };
        let text = st
            .logs
            .get(&(ns.clone(), name.clone(), container.clone()))
            .cloned();
        match text {
            Some(t) => (t, container),
            None if pod["status"]["phase"] == "Running" => (String::new(), container),
            None => {
                return error_response(&ApiError::bad_request(format!(
                    "container \"{container}\" in pod \"{name}\" is waiting to start: ContainerCreating"
                )));
            }
        }
    };
    let mut out = text.clone();
    if let Some(n) = q.get("tailLines").and_then(|s| s.parse::<usize>().ok()) {
        let lines: Vec<&str> = out.lines().collect();
        let start = lines.len().saturating_sub(n);
        out = lines[start..].iter().map(|l| format!("{l}\n")).collect();
    }
    if let Some(n) = q.get("limitBytes").and_then(|s| s.parse::<usize>().ok()) {
        out.truncate(n);
    }
    if !bool_q(q, "follow") {
        return Response::builder()
            .status(200)
            .header(header::CONTENT_TYPE, "text/plain")
            .body(Body::from(out))
            .expect("response");
    }
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(16);
    let inner2 = inner.clone();
    let mut shutdown_rx = inner.shutdown.subscribe();
    tokio::spawn(async move {
        if tx.send(Ok(Bytes::from(out))).await.is_err() {
            return;
        }
        let mut sent = text.len();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                _ = shutdown_rx.changed() => return,
                _ = tx.closed() => return,
            }
            let now = {
                let st = inner2.st();
                if st
                    .stored(&st.kind("", "v1", "pods").expect("pods"), Some(&ns), &name)
                    .is_none()
                {
                    return;
                }
                st.logs
                    .get(&(ns.clone(), name.clone(), container.clone()))
                    .cloned()
                    .unwrap_or_default()
            };
            if now.len() > sent {
                if tx
                    .send(Ok(Bytes::from(now[sent..].to_string())))
                    .await
                    .is_err()
                {
                    return;
                }
                sent = now.len();
            }
        }
    });
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from_stream(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        ))
        .expect("response")
}
