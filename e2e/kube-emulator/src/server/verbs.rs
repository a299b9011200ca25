//! The per-verb handlers of resource requests: get, list, create, update, delete and deletecollection
//! (patch lives in [`super::patching`], watch in [`super::watch`], `pods/log` in [`super::logs`]).

use std::collections::HashMap;
use std::sync::Arc;

use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method};
use serde_json::{Value, json};

use super::request::{
    Want, delete_opts, error_response, include, json_response, list_opts, manager, negotiate,
    parse_body, selectors, validate_options, with_warnings,
};
use super::route::Target;
use super::{logs, patching, watch};
use crate::error::ApiError;
use crate::kinds::Kind;
use crate::schema::FieldValidation;
use crate::shared::Inner;
use crate::ssa::Scope;
use crate::store::{Deleted, State, WriteOpts};
use crate::table;

pub(super) fn render_one(
    want: Want,
    kind: &Kind,
    obj: &Value,
    q: &HashMap<String, String>,
) -> Value {
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

pub(super) fn resource_request(
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
        return match watch::start_watch(inner, t, q, want) {
            Ok(r) => r,
            Err(e) => error_response(&e),
        };
    }
    if t.sub.as_deref() == Some("log") && t.kind.kind == "Pod" && method == Method::GET {
        return logs::pod_log(inner, t, q);
    }
    match verb_request(inner, headers, q, body, t, verb, want) {
        Ok((code, v, warnings)) => with_warnings(json_response(code, &v), &warnings),
        Err(e) => error_response(&e),
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) fn verb_request(
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
    if matches!(verb, "create" | "update" | "delete" | "deletecollection") {
        validate_options(q, verb, None)?;
    }
    let opts = WriteOpts {
        dry_run: q.get("dryRun").is_some_and(|d| d == "All"),
        manager: manager(q, headers),
        field_validation: FieldValidation::parse(q.get("fieldValidation").map(String::as_str)),
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
            let page = st.list_page(kind, ns, &labels, &fields, &list_opts(q)?)?;
            let rv = page.resource_version.to_string();
            let mut meta = json!({"resourceVersion": rv});
            if let Some(c) = &page.continue_token {
                meta["continue"] = json!(c);
            }
            if let Some(n) = page.remaining {
                meta["remainingItemCount"] = json!(n);
            }
            let items = page.items;
            let mut v = match want {
                Want::Table => table::table(kind, &items, &rv, include(q), true),
                Want::Partial | Want::PartialList => json!({"kind": "PartialObjectMetadataList",
                    "apiVersion": "meta.k8s.io/v1",
                    "items": items.iter().map(table::partial).collect::<Vec<_>>()}),
                _ => {
                    json!({"kind": kind.list_kind, "apiVersion": kind.api_version(), "items": items})
                }
            };
            v["metadata"] = meta;
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
            let (code, obj) =
                patching::patch_request(&mut st, headers, q, body, t, scope, &opts, name)?;
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
