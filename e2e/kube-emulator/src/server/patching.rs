//! The patch verb: JSON merge patch, JSON patch, strategic merge patch and server-side apply (with its
//! conflict errors in upstream's shape).

use std::collections::HashMap;

use bytes::Bytes;
use http::{HeaderMap, header};
use serde_json::{Value, json};

use super::request::validate_options;
use super::route::Target;
use crate::error::ApiError;
use crate::patch;
use crate::ssa::{self, Scope};
use crate::store::{State, WriteOpts};

#[allow(clippy::too_many_arguments)]
pub(super) fn patch_request(
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
    validate_options(q, "patch", Some(is_apply))?;
    let patch: Value = if is_apply {
        serde_yaml::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?
    } else {
        serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?
    };
    let existing = st.get(kind, ns, name);
    if is_apply {
        // Present: validate_options requires it for apply.
        let manager = q.get("fieldManager").cloned().unwrap_or_default();
        let manager = &manager;
        if patch["apiVersion"].as_str().unwrap_or_default().is_empty()
            || patch["kind"].as_str().unwrap_or_default().is_empty()
        {
            return Err(ApiError::bad_request(
                "apiVersion and kind must be set in an apply configuration",
            ));
        }
        let force = force == Some("true");
        let now = crate::json::now();
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
                        .map_err(conflict_error)?;
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
                    .map_err(conflict_error)?;
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

pub(super) fn conflict_error(c: ssa::Conflicts) -> ApiError {
    // upstream fieldmanager `NewConflictError`: one conflict on one line; several grouped by manager (sorted
    // by the manager's identifier) under "conflicts with <manager>:", one "- path" line each. The details
    // carry only the causes, one `FieldManagerConflict` per field.
    let n = c.0.len();
    let message = if n == 1 {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.0[0].manager, c.0[0].path
        )
    } else {
        let mut ids: Vec<&String> = c.0.iter().map(|x| &x.id).collect();
        ids.sort();
        ids.dedup();
        let mut lines = Vec::new();
        for id in ids {
            let of: Vec<&ssa::Conflict> = c.0.iter().filter(|x| &x.id == id).collect();
            lines.push(format!("conflicts with {}:", of[0].manager));
            lines.extend(of.iter().map(|x| format!("- {}", x.path)));
        }
        format!("Apply failed with {n} conflicts: {}", lines.join("\n"))
    };
    let causes: Vec<Value> =
        c.0.iter()
            .map(|x| {
                json!({"reason": "FieldManagerConflict", "message": format!("conflict with {}", x.manager),
                    "field": x.path})
            })
            .collect();
    ApiError::new(409, "Conflict", message).with_details(json!({"causes": causes}))
}
