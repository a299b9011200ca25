//! The create-only, never-stored API objects of authentication and authorisation: TokenRequest (the
//! `serviceaccounts/token` subresource), TokenReview, SelfSubjectReview, SubjectAccessReview,
//! LocalSubjectAccessReview, SelfSubjectAccessReview and SelfSubjectRulesReview.

use serde_json::{Value, json};

use super::rbac::{self, Attributes};
use super::{API_AUDIENCE, Authenticator, Identity, IssuedToken, uid_of};
use crate::error::{ApiError, FieldError, invalid_for};
use crate::kinds::Kind;
use crate::store::State;
use std::sync::{Mutex, MutexGuard};

/// kube-apiserver's lower bound of `spec.expirationSeconds`.
const MIN_EXPIRATION_SECONDS: i64 = 600;
/// kube-apiserver's upper bound of `spec.expirationSeconds` (2^32).
const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// The default of `spec.expirationSeconds`.
const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;

/// Answers a request for a review kind or the `serviceaccounts/token` subresource; None for every other
/// request.
#[allow(clippy::too_many_arguments)]
pub(crate) fn handle(
    auth: &Authenticator,
    state: &Mutex<State>,
    user: &Identity,
    kind: &Kind,
    ns: Option<&str>,
    name: Option<&str>,
    sub: Option<&str>,
    verb: &str,
    body: impl FnOnce() -> Result<Value, ApiError>,
) -> Option<Result<(u16, Value), ApiError>> {
    let token_request =
        kind.group.is_empty() && kind.plural == "serviceaccounts" && sub == Some("token");
    if !token_request && !kind.create_only {
        return None;
    }
    if verb != "create" || (kind.create_only && (name.is_some() || sub.is_some())) {
        return Some(Err(ApiError::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )));
    }
    let body = match body() {
        Ok(b) => b,
        Err(e) => return Some(Err(e)),
    };
    Some(match kind.kind.as_str() {
        "ServiceAccount" => token_request_create(
            auth,
            state,
            kind,
            ns.unwrap_or_default(),
            name.unwrap_or_default(),
            &body,
        ),
        "TokenReview" => token_review(auth, state, &body),
        "SelfSubjectReview" => Ok((
            201,
            json!({"kind": "SelfSubjectReview", "apiVersion": "authentication.k8s.io/v1",
                "metadata": {"creationTimestamp": null}, "status": {"userInfo": user.to_json()}}),
        )),
        "SelfSubjectRulesReview" => rules_review(state, user, &body),
        k => access_review(state, user, k, ns.unwrap_or_default(), body),
    })
}

fn token_request_create(
    auth: &Authenticator,
    state: &Mutex<State>,
    sa_kind: &Kind,
    ns: &str,
    sa_name: &str,
    body: &Value,
) -> Result<(u16, Value), ApiError> {
    let invalid =
        |errs: &[FieldError]| invalid_for("authentication.k8s.io", "TokenRequest", sa_name, errs);
    let meta = &body["metadata"];
    if let Some(n) = meta["name"]
        .as_str()
        .filter(|n| !n.is_empty() && *n != sa_name)
    {
        return Err(invalid(&[FieldError::invalid(
            "metadata.name",
            &crate::error::go_quote(n),
            "must match the service account name if specified",
        )]));
    }
    if let Some(n) = meta["namespace"]
        .as_str()
        .filter(|n| !n.is_empty() && *n != ns)
    {
        return Err(invalid(&[FieldError::invalid(
            "metadata.namespace",
            &crate::error::go_quote(n),
            "must match the service account namespace if specified",
        )]));
    }
    let st = lock(state);
    let sa = st.get(sa_kind, Some(ns), sa_name)?;
    let spec = &body["spec"];
    let expiration = match &spec["expirationSeconds"] {
        Value::Null => DEFAULT_EXPIRATION_SECONDS,
        v => v.as_i64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: json: cannot unmarshal {v} into Go struct field TokenRequestSpec.spec.expirationSeconds of type int64"
            ))
        })?,
    };
    if expiration < MIN_EXPIRATION_SECONDS {
        return Err(invalid(&[FieldError::invalid(
            "spec.expirationSeconds",
            &expiration.to_string(),
            "may not specify a duration less than 10 minutes",
        )]));
    }
    if expiration > MAX_EXPIRATION_SECONDS {
        return Err(invalid(&[FieldError::invalid(
            "spec.expirationSeconds",
            &expiration.to_string(),
            "may not specify a duration larger than 2^32 seconds",
        )]));
    }
    let mut audiences: Vec<String> = spec["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    if audiences.is_empty() {
        audiences.push(API_AUDIENCE.into());
    }
    let bound = match spec["boundObjectRef"].as_object() {
        None => None,
        Some(r) => {
            let kind = r.get("kind").and_then(Value::as_str).unwrap_or_default();
            let api_version = r
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let name = r.get("name").and_then(Value::as_str).unwrap_or_default();
            let plural = match (api_version, kind) {
                ("v1", "Pod") => "pods",
                ("v1", "Secret") => "secrets",
                ("v1", "Node") => "nodes",
                _ => {
                    return Err(ApiError::bad_request(format!(
                        "cannot bind token for serviceaccount {sa_name:?} to object of type {}, Kind={kind}",
                        if api_version.contains('/') {
                            api_version.to_string()
                        } else {
                            format!("/{api_version}")
                        }
                    )));
                }
            };
            let Some(obj) = st
                .objects
                .get(&format!("core/{plural}"))
                .and_then(|m| m.get(&(ns.to_string(), name.to_string())))
            else {
                return Err(
                    ApiError::new(404, "NotFound", format!("{plural} {name:?} not found"))
                        .with_details(json!({"name": name, "kind": plural})),
                );
            };
            let uid = uid_of(obj).to_string();
            if let Some(want) = r
                .get("uid")
                .and_then(Value::as_str)
                .filter(|u| !u.is_empty() && *u != uid)
            {
                return Err(ApiError::new(
                    409,
                    "Conflict",
                    format!(
                        "Operation cannot be fulfilled on {kind} {name:?}: the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
                    ),
                )
                .with_details(json!({"name": name, "kind": kind})));
            }
            Some((kind.to_string(), name.to_string(), uid))
        }
    };
    let sa_uid = uid_of(&sa).to_string();
    drop(st);
    let now = auth.now();
    let expires = now + chrono::Duration::seconds(expiration);
    let token = auth.issue(IssuedToken {
        namespace: ns.into(),
        service_account: sa_name.into(),
        service_account_uid: sa_uid,
        issued_at: now,
        expires_at: expires,
        audiences: audiences.clone(),
        bound,
        id: crate::json::uuid(),
    });
    let mut out_spec = json!({"audiences": audiences, "expirationSeconds": expiration});
    if !spec["boundObjectRef"].is_null() {
        out_spec["boundObjectRef"] = spec["boundObjectRef"].clone();
    }
    let ts = |t: chrono::DateTime<chrono::Utc>| t.format("%Y-%m-%dT%H:%M:%SZ").to_string();
    Ok((
        201,
        json!({"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"name": sa_name, "namespace": ns, "creationTimestamp": ts(now)},
            "spec": out_spec,
            "status": {"token": token, "expirationTimestamp": ts(expires)}}),
    ))
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_strings(v: &[String]) -> String {
    let q: Vec<String> = v.iter().map(|s| format!("{s:?}")).collect();
    format!("[{}]", q.join(" "))
}

fn token_review(
    auth: &Authenticator,
    state: &Mutex<State>,
    body: &Value,
) -> Result<(u16, Value), ApiError> {
    let spec = &body["spec"];
    let token = spec["token"].as_str().unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let wanted: Vec<String> = spec["audiences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect();
    let targets = if wanted.is_empty() {
        vec![API_AUDIENCE.to_string()]
    } else {
        wanted
    };
    let result = {
        let st = lock(state);
        auth.authenticate_token(&st, token)
    };
    let status = match result {
        Ok((id, token_auds)) => {
            let both: Vec<String> = targets
                .iter()
                .filter(|a| token_auds.contains(a))
                .cloned()
                .collect();
            if both.is_empty() {
                json!({"user": {}, "error": format!(
                    "[invalid bearer token, token audiences {} is invalid for the target audiences {}]",
                    go_strings(&token_auds), go_strings(&targets))})
            } else {
                json!({"authenticated": true, "user": id.to_json(), "audiences": both})
            }
        }
        Err(e) => json!({"user": {}, "error": format!("[{}]", e.0)}),
    };
    Ok((
        201,
        json!({"kind": "TokenReview", "apiVersion": "authentication.k8s.io/v1",
            "metadata": {"creationTimestamp": null}, "spec": spec, "status": status}),
    ))
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

fn access_review(
    state: &Mutex<State>,
    requester: &Identity,
    kind: &str,
    url_ns: &str,
    mut body: Value,
) -> Result<(u16, Value), ApiError> {
    let spec = body["spec"].clone();
    let ra = &spec["resourceAttributes"];
    let nra = &spec["nonResourceAttributes"];
    let mut errs = Vec::new();
    match (ra.is_object(), nra.is_object()) {
        (true, true) => errs.push(FieldError::invalid(
            "spec.nonResourceAttributes",
            &nra.to_string(),
            "cannot be specified in combination with resourceAttributes",
        )),
        (false, false) => errs.push(FieldError::required(
            "spec.resourceAttributes",
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )),
        _ => {}
    }
    let user = match kind {
        "SelfSubjectAccessReview" => requester.clone(),
        _ => {
            let u = Identity {
                name: spec["user"].as_str().unwrap_or_default().to_string(),
                uid: spec["uid"].as_str().unwrap_or_default().to_string(),
                groups: strs(&spec["groups"]),
                extra: Default::default(),
            };
            if u.name.is_empty() && u.groups.is_empty() {
                errs.push(FieldError::invalid(
                    "spec.user",
                    "\"\"",
                    "at least one of user or group must be specified",
                ));
            }
            u
        }
    };
    if kind == "LocalSubjectAccessReview" {
        let meta_ns = body["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if meta_ns.is_empty() {
            body["metadata"]["namespace"] = json!(url_ns);
        } else if meta_ns != url_ns {
            return Err(ApiError::bad_request(format!(
                "spec.resourceAttributes.namespace must match namespace: {url_ns}"
            )));
        }
        if nra.is_object() {
            errs.push(FieldError::invalid(
                "spec.nonResourceAttributes",
                &nra.to_string(),
                "disallowed on this kind of request",
            ));
        }
        let ra_ns = ra["namespace"].as_str().unwrap_or_default();
        if ra.is_object() && ra_ns != url_ns {
            errs.push(FieldError::invalid(
                "spec.resourceAttributes.namespace",
                &crate::error::go_quote(ra_ns),
                "must match metadata.namespace",
            ));
        }
    }
    if !errs.is_empty() {
        return Err(invalid_for("authorization.k8s.io", kind, "", &errs));
    }
    let s = |v: &Value, k: &str| v[k].as_str().unwrap_or_default().to_string();
    let attrs = if ra.is_object() {
        Attributes {
            resource_request: true,
            verb: s(ra, "verb"),
            path: String::new(),
            group: s(ra, "group"),
            version: s(ra, "version"),
            resource: s(ra, "resource"),
            subresource: s(ra, "subresource"),
            namespace: s(ra, "namespace"),
            name: s(ra, "name"),
        }
    } else {
        Attributes::non_resource(&s(nra, "verb"), &s(nra, "path"))
    };
    let decision = rbac::authorize(&lock(state), &user, &attrs);
    let mut status = json!({"allowed": decision.allowed});
    if !decision.reason.is_empty() {
        status["reason"] = json!(decision.reason);
    }
    if body["metadata"].is_null() {
        body["metadata"] = json!({});
    }
    body["metadata"]["creationTimestamp"] = Value::Null;
    body["kind"] = json!(kind);
    body["apiVersion"] = json!("authorization.k8s.io/v1");
    body["status"] = status;
    Ok((201, body))
}

fn rules_review(
    state: &Mutex<State>,
    user: &Identity,
    body: &Value,
) -> Result<(u16, Value), ApiError> {
    let ns = body["spec"]["namespace"].as_str().unwrap_or_default();
    let (resource, non_resource, err) = rbac::rules_for(&lock(state), user, ns);
    let mut status =
        json!({"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": false});
    if !err.is_empty() {
        status["evaluationError"] = json!(err);
    }
    Ok((
        201,
        json!({"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": null}, "spec": body["spec"], "status": status}),
    ))
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}
