//! HTTP front end: routing of the standard API paths, content negotiation, verbs, watch streams and
//! `pods/log`, with the admin API mounted under `/emulator/v1`.
//!
//! ```text
//! request ─► audit + latency + fault injection + chaos schedule ─► route (discovery | openapi | resource verb | admin)
//!          ─► State (one mutex, synchronous) ─► JSON / Table / PartialObjectMetadata / watch stream
//! ```
//! Stages, one submodule each: [`route`] (path → target and verb), [`request`] (query, body and Accept
//! decoding; Status and JSON responses), [`verbs`] (get/list/create/update/delete/deletecollection),
//! [`patching`] (the patch verb and server-side apply), [`watch`] (watch streams), [`logs`] (`pods/log`)
//! and [`admin_api`] (the emulator-only admin endpoints).

mod admin_api;
mod chaos;
mod logs;
mod patching;
mod request;
mod route;
mod verbs;
mod watch;

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State as AxState};
use axum::response::Response;
use http::{HeaderMap, header};
use serde_json::{Value, json};

use crate::auth::Identity;
use crate::auth::rbac::{self, Attributes};
use crate::discovery;
use crate::error::ApiError;
use crate::shared::Inner;
use request::{Want, error_response, json_response, negotiate, parse_query};
use route::{Route, route, verb_of};

/// Entry point for every request.
pub(crate) async fn handle(AxState(inner): AxState<Arc<Inner>>, req: Request) -> Response {
    let started = Instant::now();
    if *inner.shutdown.borrow() {
        // A request that reached a server going down (a kept-alive connection) is not served: its
        // state is being snapshotted for a restart.
        return error_response(&ApiError::new(
            503,
            "ServiceUnavailable",
            "the API server is shutting down",
        ));
    }
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, 64 << 20).await {
        Ok(b) => b,
        Err(e) => return error_response(&ApiError::bad_request(format!("reading body: {e}"))),
    };
    let path = parts.uri.path().to_string();
    let q = parse_query(parts.uri.query());
    let attrs = Attributes::from_request(parts.method.as_str(), &path, &q);
    let identity = identify(
        &inner,
        &parts.headers,
        &attrs,
        path.starts_with("/emulator/"),
    );
    let user_name = match &identity {
        Ok(u) => Some(u.name.clone()),
        Err(refused) => refused.1.as_ref().map(|u| u.name.clone()),
    };
    let (resp, verb, target) = match identity {
        Err(refused) => {
            let e = &refused.0;
            let verb = if path.starts_with("/emulator/") {
                "admin".to_string()
            } else {
                attrs.verb.clone()
            };
            (error_response(e), verb, None)
        }
        Ok(_) if path.starts_with("/emulator/") => (
            admin_api::handle(&inner, &parts.method, &path, &q, &body),
            "admin".to_string(),
            None,
        ),
        Ok(user) => {
            let routed = route(&inner.st(), &path);
            match routed {
                Route::Resource(t) => {
                    let verb = verb_of(&parts.method, &t, &q);
                    let latency = inner.admin().latency;
                    if !latency.is_zero() {
                        tokio::time::sleep(latency).await;
                    }
                    let fault = inner
                        .admin()
                        .pick_fault(verb, &t.kind.plural, t.sub.as_deref());
                    let plan = fault.map_or_else(
                        || chaos::plan(&inner, verb, &q, &parts.headers),
                        |_| crate::chaos::Plan::Pass,
                    );
                    let review = || {
                        crate::auth::reviews::handle(
                            &inner.auth,
                            &inner.state,
                            &user,
                            &t.kind,
                            t.ns.as_deref(),
                            t.name.as_deref(),
                            t.sub.as_deref(),
                            verb,
                            || request::parse_body(&parts.headers, &body),
                        )
                    };
                    let fault_answer = |code| {
                        error_response(&crate::admin::fault_error(
                            code,
                            &t.kind,
                            t.name.as_deref().unwrap_or_default(),
                        ))
                    };
                    let serve = || async {
                        let r = verbs::resource_request(
                            &inner,
                            &parts.method,
                            &parts.headers,
                            &q,
                            &body,
                            &t,
                            verb,
                        );
                        if crate::chaos::is_write(verb) {
                            inner.changed.notify_one();
                        }
                        r
                    };
                    let resp = match fault {
                        Some((code, true)) => {
                            serve().await;
                            fault_answer(code)
                        }
                        Some((code, false)) if !(verb == "watch" && code == 410) => {
                            fault_answer(code)
                        }
                        Some(_) => {
                            watch::watch_expired_response(&t.kind, "forced by fault injection")
                        }
                        None if plan.rejects() => chaos::reject(plan, &t.kind.plural).await,
                        None => match review() {
                            Some(Ok((code, v))) => json_response(code, &v),
                            Some(Err(e)) => error_response(&e),
                            None => chaos::finish(plan, serve().await).await,
                        },
                    };
                    (resp, verb.to_string(), Some(t))
                }
                other => {
                    let verb = match other {
                        Route::NotFound => route::unserved_verb(&parts.method, &path, &q),
                        _ => None,
                    };
                    (
                        meta_request(&inner, &parts.headers, other),
                        verb.unwrap_or("get").to_string(),
                        None,
                    )
                }
            }
        }
    };
    let verb = verb.as_str();
    let held = verb != "admin"
        && crate::chaos::is_write(verb)
        && resp.status().is_success()
        && target.as_ref().is_some_and(|t| {
            inner.admin().pick_hold(&crate::admin::WriteRequest {
                verb,
                group: &t.kind.group,
                resource: &t.kind.plural,
                subresource: t.sub.as_deref().unwrap_or_default(),
                user_agent: parts
                    .headers
                    .get(header::USER_AGENT)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default(),
            })
        });
    // Subscribed before the audit entry is visible, so a release right after cannot be missed.
    let mut release = inner.release_holds.subscribe();
    if verb != "admin" {
        // A request refused before routing is described by its request attributes.
        let refused = target.is_none() && matches!(resp.status().as_u16(), 401 | 403);
        let from_attrs =
            |v: &str| (refused && attrs.resource_request && !v.is_empty()).then(|| v.to_string());
        inner.admin().record(json!({
            "time": crate::json::now(), "method": parts.method.as_str(), "path": path,
            "query": parts.uri.query().unwrap_or_default(), "verb": verb,
            "resource": target.as_ref().map(|t| t.kind.plural.clone()).or_else(|| from_attrs(&attrs.resource)),
            "namespace": target.as_ref().and_then(|t| t.ns.clone()).or_else(|| from_attrs(&attrs.namespace)),
            "name": target.as_ref().and_then(|t| t.name.clone()).or_else(|| from_attrs(&attrs.name)),
            "subresource": target.as_ref().and_then(|t| t.sub.clone()).or_else(|| from_attrs(&attrs.subresource)),
            "userAgent": parts.headers.get(header::USER_AGENT).and_then(|v| v.to_str().ok()),
            "contentType": parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()),
            "code": resp.status().as_u16(),
            "durationMs": started.elapsed().as_millis() as u64,
            "held": held,
            "user": user_name,
        }));
    }
    if held {
        let mut shutdown = inner.shutdown.subscribe();
        tokio::select! {
            _ = release.changed() => {}
            _ = shutdown.wait_for(|down| *down) => {}
        }
    }
    resp
}

/// Authenticates and authorises a request. The error carries the answer (401 or 403) and, for a 403,
/// who was refused.
fn identify(
    inner: &Inner,
    headers: &HeaderMap,
    attrs: &Attributes,
    admin_api: bool,
) -> Result<Identity, Box<(ApiError, Option<Identity>)>> {
    if !inner.auth.enabled {
        return Ok(Identity::admin());
    }
    let st = inner.st();
    let caller = match crate::auth::bearer(headers) {
        None => Identity::anonymous(),
        Some(Err(())) => return Err(Box::new((rbac::unauthorized(), None))),
        Some(Ok(token)) => match inner.auth.authenticate_token(&st, token) {
            Ok((id, audiences)) if audiences.iter().any(|a| a == crate::auth::API_AUDIENCE) => id,
            _ => return Err(Box::new((rbac::unauthorized(), None))),
        },
    };
    let user = if caller.is_anonymous() {
        caller
    } else {
        rbac::impersonate(&st, &caller, headers).map_err(|e| Box::new((e, Some(caller.clone()))))?
    };
    if admin_api {
        // The emulator's own admin API is for the admin only.
        if user.is_master() {
            return Ok(user);
        }
        if user.is_anonymous() {
            return Err(Box::new((rbac::unauthorized(), Some(user))));
        }
        let e = rbac::forbidden(&user, attrs, "");
        return Err(Box::new((e, Some(user))));
    }
    let d = rbac::authorize(&st, &user, attrs);
    if d.allowed {
        Ok(user)
    } else if user.is_anonymous() {
        // Anonymous requests are accepted for the public-info paths only.
        Err(Box::new((rbac::unauthorized(), Some(user))))
    } else {
        Err(Box::new((
            rbac::forbidden(&user, attrs, &d.reason),
            Some(user),
        )))
    }
}

fn raw_response(content_type: &str, body: Body) -> Response {
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, content_type)
        .body(body)
        .expect("response")
}

fn meta_request(inner: &Inner, headers: &HeaderMap, r: Route) -> Response {
    let want = negotiate(headers).unwrap_or(Want::Json);
    // A copy of the kinds table, so that building documents does not hold the store's lock.
    let kinds = inner.st().kinds.clone();
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
        Route::Api if want == Want::Aggregated => agg(discovery::aggregated(&kinds, true)),
        Route::Apis if want == Want::Aggregated => agg(discovery::aggregated(&kinds, false)),
        Route::Api => json_response(200, &discovery::api_versions(&inner.addr)),
        Route::Apis => json_response(200, &discovery::api_group_list(&kinds)),
        Route::Group(g) => match discovery::api_group(&kinds, &g) {
            Some(v) => json_response(200, &v),
            None => error_response(&ApiError::no_route()),
        },
        Route::GroupVersion(g, v) => match discovery::resource_list(&kinds, &g, &v) {
            Some(v) => json_response(200, &v),
            None => error_response(&ApiError::no_route()),
        },
        Route::OpenApiRoot => json_response(200, &inner.openapi().root(&kinds)),
        Route::OpenApiDoc(g, v) => match inner.openapi().v3(&kinds, &g, &v) {
            Some(doc) => raw_response("application/json", doc.json.clone().into()),
            None => error_response(&ApiError::no_route()),
        },
        Route::OpenApiV2 => {
            let doc = inner.openapi().v2(&kinds);
            let protobuf = headers
                .get(header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|a| a.contains("protobuf"));
            if protobuf {
                raw_response(
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                    doc.proto.clone().into(),
                )
            } else {
                raw_response("application/json", doc.json.clone().into())
            }
        }
        Route::Resource(_) | Route::Admin | Route::NotFound => {
            error_response(&ApiError::no_route())
        }
    }
}
