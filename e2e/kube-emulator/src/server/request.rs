//! Request decoding and response encoding: query parameters, bodies (JSON, YAML, protobuf), the Accept
//! header, selectors, delete options, and the JSON/Status/Warning responses.

use std::collections::HashMap;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, header};
use serde_json::Value;

use super::route::Target;
use crate::error::{ApiError, FieldError, invalid_for};
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

/// `dryRun`: only `All` is supported; anything else is a 422 about the verb's options object
/// (`CreateOptions`, `UpdateOptions`, `PatchOptions`, `DeleteOptions`), as upstream's `ValidateDryRun`.
pub(super) fn dry_run(q: &HashMap<String, String>, verb: &str) -> Result<bool, ApiError> {
    match q.get("dryRun").map(String::as_str) {
        None => Ok(false),
        Some("All") => Ok(true),
        Some(other) => Err(dry_run_error(&[other], verb)),
    }
}

/// The 422 for unsupported `dryRun` values.
pub(super) fn dry_run_error(values: &[&str], verb: &str) -> ApiError {
    let options = match verb {
        "create" => "CreateOptions",
        "update" => "UpdateOptions",
        "patch" => "PatchOptions",
        _ => "DeleteOptions",
    };
    invalid_for(
        "meta.k8s.io",
        options,
        "",
        &[FieldError::not_supported(
            "dryRun",
            &crate::validation::go_strings(values),
            &["All"],
        )],
    )
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
    if body_dry.iter().any(|d| *d != "All") {
        return Err(dry_run_error(&body_dry, "delete"));
    }
    let dry = dry || !body_dry.is_empty();
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
