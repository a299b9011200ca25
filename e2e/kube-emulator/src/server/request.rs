//! Request decoding and response encoding: query parameters, bodies (JSON, YAML, protobuf), the Accept
//! header, selectors, delete options, and the JSON/Status/Warning responses.

use std::collections::HashMap;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, header};
use serde_json::Value;

use super::route::Target;
use crate::error::{ApiError, FieldError, go_quote, invalid_for};
use crate::kinds::Kind;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{DeleteOpts, ListOpts};
use crate::table::Include;

/// What a request asks for in its Accept header.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Want {
    Json,
    Table,
    Partial,
    PartialList,
    Aggregated,
}

pub(super) fn negotiate(headers: &HeaderMap) -> Result<Want, ApiError> {
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

pub(super) fn json_response(code: u16, v: &Value) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(v.to_string()))
        .expect("response")
}

/// Adds one `Warning: 299 - "…"` header per warning, as the apiserver does.
pub(super) fn with_warnings(mut r: Response, warnings: &[String]) -> Response {
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

pub(super) fn parse_query(q: Option<&str>) -> HashMap<String, String> {
    url::form_urlencoded::parse(q.unwrap_or_default().as_bytes())
        .filter(|(k, _)| !k.is_empty())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

pub(super) fn manager(q: &HashMap<String, String>, headers: &HeaderMap) -> String {
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

/// The options object of a verb, as upstream names it in its 422s.
fn options_kind(verb: &str) -> &'static str {
    match verb {
        "create" => "CreateOptions",
        "update" => "UpdateOptions",
        "patch" => "PatchOptions",
        _ => "DeleteOptions",
    }
}

/// Validates the query options of a write as upstream's `ValidateCreateOptions`/`…UpdateOptions`/
/// `…PatchOptions` do: `force` only on apply patches, `fieldManager` required for apply and at most 128
/// characters, `dryRun` only `All`, `fieldValidation` one of `Ignore`/`Strict`/`Warn`. All errors come back
/// as one 422 about the options object (`PatchOptions.meta.k8s.io "" is invalid: …`). `apply` is None for
/// verbs other than patch.
pub(super) fn validate_options(
    q: &HashMap<String, String>,
    verb: &str,
    apply: Option<bool>,
) -> Result<(), ApiError> {
    let mut errs = Vec::new();
    let manager = q
        .get("fieldManager")
        .map(String::as_str)
        .unwrap_or_default();
    match apply {
        Some(false) if q.contains_key("force") => errs.push(FieldError::forbidden(
            "force",
            "may not be specified for non-apply patch",
        )),
        Some(true) if manager.is_empty() => errs.push(FieldError::required(
            "fieldManager",
            "is required for apply patch",
        )),
        _ => {}
    }
    if manager.len() > 128 {
        errs.push(FieldError::too_long("fieldManager", 128));
    }
    if let Some(d) = q.get("dryRun").filter(|d| *d != "All") {
        errs.push(dry_run_cause(&[d.as_str()]));
    }
    if let Some(fv) = q
        .get("fieldValidation")
        .filter(|v| !matches!(v.as_str(), "" | "Ignore" | "Strict" | "Warn"))
    {
        errs.push(FieldError::not_supported(
            "fieldValidation",
            &go_quote(fv),
            &["", "Ignore", "Strict", "Warn"],
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(invalid_for("meta.k8s.io", options_kind(verb), "", &errs))
    }
}

fn dry_run_cause(values: &[&str]) -> FieldError {
    FieldError::not_supported("dryRun", &crate::validation::go_strings(values), &["All"])
}

pub(super) fn parse_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
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

pub(super) fn include(q: &HashMap<String, String>) -> Include {
    match q.get("includeObject").map(String::as_str) {
        Some("None") => Include::None,
        Some("Object") => Include::Object,
        _ => Include::Metadata,
    }
}

pub(super) fn selectors(
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
    let fields = FieldSelector::parse(&fs, kind).map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

pub(super) fn delete_opts(
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
    let body_dry: Vec<&str> = b["dryRun"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut errs = Vec::new();
    if body_dry.iter().any(|d| *d != "All") {
        errs.push(dry_run_cause(&body_dry));
    }
    let propagation = b["propagationPolicy"]
        .as_str()
        .map(str::to_string)
        .or_else(|| q.get("propagationPolicy").cloned());
    if let Some(p) = propagation
        .as_deref()
        .filter(|p| !matches!(*p, "Foreground" | "Background" | "Orphan"))
    {
        errs.push(FieldError::not_supported(
            "propagationPolicy",
            &go_quote(p),
            &["Foreground", "Background", "Orphan", "nil"],
        ));
    }
    if propagation.is_some() && b["orphanDependents"].is_boolean() {
        errs.push(FieldError::invalid(
            "propagationPolicy",
            &go_quote(propagation.as_deref().unwrap_or_default()),
            "orphanDependents and deletionPropagation cannot be both set",
        ));
    }
    if !errs.is_empty() {
        return Err(invalid_for("meta.k8s.io", "DeleteOptions", "", &errs));
    }
    let dry = dry || !body_dry.is_empty();
    Ok(DeleteOpts {
        dry_run: dry,
        uid: b["preconditions"]["uid"].as_str().map(str::to_string),
        rv: b["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_string),
        propagation: propagation
            .or_else(|| (b["orphanDependents"] == true).then(|| "Orphan".to_string())),
    })
}

pub(super) fn bool_q(q: &HashMap<String, String>, k: &str) -> bool {
    q.get(k).is_some_and(|v| v == "true" || v == "1")
}

/// `limit`, `continue`, `resourceVersion` and `resourceVersionMatch` of a list. As upstream's watch cache,
/// `resourceVersion=0` serves the whole current list whatever the limit; `continue` excludes an explicit
/// resourceVersion.
pub(super) fn list_opts(q: &HashMap<String, String>) -> Result<ListOpts<'_>, ApiError> {
    let rv = q
        .get("resourceVersion")
        .map(String::as_str)
        .unwrap_or_default();
    let limit = match q.get("limit").filter(|l| !l.is_empty()) {
        Some(l) => l
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit: {l}")))?
            .max(0) as usize,
        None => 0,
    };
    let continue_token = q
        .get("continue")
        .map(String::as_str)
        .filter(|c| !c.is_empty());
    if continue_token.is_some() && !rv.is_empty() && rv != "0" {
        return Err(ApiError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    let exact = match q.get("resourceVersionMatch").map(String::as_str) {
        Some("Exact") => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?,
        ),
        _ => None,
    };
    Ok(ListOpts {
        limit: if rv == "0" && continue_token.is_none() {
            0
        } else {
            limit
        },
        continue_token,
        exact,
    })
}
