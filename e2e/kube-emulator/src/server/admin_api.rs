//! The emulator-only admin endpoints under `/emulator/v1` (see [`crate::admin`] for the table).

use std::collections::HashMap;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{Method, header};
use serde_json::{Value, json};

use super::request::error_response;
use crate::admin::{Fault, Hold};
use crate::error::ApiError;
use crate::shared::Inner;

fn text(code: u16, body: String) -> Response {
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(body))
        .expect("response")
}

fn ok_json(v: Value) -> Response {
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(v.to_string()))
        .expect("response")
}

/// Serves one admin request.
pub(super) fn handle(
    inner: &Inner,
    method: &Method,
    path: &str,
    q: &HashMap<String, String>,
    body: &Bytes,
) -> Response {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let mut admin = inner.admin();
    match (method.as_str(), &segs[..]) {
        ("GET", ["emulator", "v1", "audit"]) => text(200, admin.audit_jsonl()),
        ("DELETE", ["emulator", "v1", "audit"]) => {
            admin.clear_audit();
            ok_json(json!({}))
        }
        ("GET", ["emulator", "v1", "tokens"]) => ok_json(json!(inner.auth.issued())),
        ("POST", ["emulator", "v1", "clock"]) => {
            let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            match v["advanceSeconds"].as_i64().filter(|s| *s >= 0) {
                Some(secs) => {
                    inner.auth.advance_clock(secs);
                    ok_json(json!({"advancedSeconds": secs}))
                }
                None => error_response(&ApiError::bad_request(
                    "advanceSeconds: a non-negative integer is required",
                )),
            }
        }
        ("GET", ["emulator", "v1", "faults"]) => ok_json(json!(admin.faults())),
        ("POST", ["emulator", "v1", "faults"]) => match serde_json::from_slice::<Fault>(body) {
            Ok(f) => {
                admin.add_fault(f.clone());
                ok_json(json!(f))
            }
            Err(e) => error_response(&ApiError::bad_request(format!("invalid fault: {e}"))),
        },
        ("DELETE", ["emulator", "v1", "faults"]) => {
            admin.clear_faults();
            ok_json(json!({}))
        }
        ("GET", ["emulator", "v1", "holds"]) => {
            ok_json(json!({"rules": admin.holds(), "held": admin.held}))
        }
        ("POST", ["emulator", "v1", "holds"]) => match serde_json::from_slice::<Hold>(body) {
            Ok(h) => {
                admin.add_hold(h.clone());
                ok_json(json!(h))
            }
            Err(e) => error_response(&ApiError::bad_request(format!("invalid hold: {e}"))),
        },
        ("DELETE", ["emulator", "v1", "holds"]) => {
            admin.clear_holds();
            inner.release_holds.send_modify(|n| *n += 1);
            ok_json(json!({}))
        }
        ("GET", ["emulator", "v1", "chaos"]) => ok_json(admin.chaos_report()),
        ("PUT", ["emulator", "v1", "chaos"]) => {
            match serde_json::from_slice::<crate::chaos::Chaos>(body) {
                Ok(c) => match c.validate() {
                    Ok(()) => {
                        admin.set_chaos(Some(c));
                        ok_json(admin.chaos_report())
                    }
                    Err(e) => error_response(&ApiError::bad_request(format!(
                        "invalid chaos schedule: {e}"
                    ))),
                },
                Err(e) => error_response(&ApiError::bad_request(format!(
                    "invalid chaos schedule: {e}"
                ))),
            }
        }
        ("DELETE", ["emulator", "v1", "chaos"]) => {
            admin.set_chaos(None);
            ok_json(admin.chaos_report())
        }
        ("PUT", ["emulator", "v1", "latency"]) => {
            let v: Value = serde_json::from_slice(body).unwrap_or_default();
            admin.latency = Duration::from_millis(v["millis"].as_u64().unwrap_or(0));
            ok_json(json!({"millis": admin.latency.as_millis() as u64}))
        }
        ("POST", ["emulator", "v1", "watches", "drop"]) => {
            inner.drop_watches.send_modify(|n| *n += 1);
            ok_json(json!({}))
        }
        ("PUT", ["emulator", "v1", "namespaces", ns, "pods", pod, "log"]) => {
            drop(admin);
            let text = String::from_utf8_lossy(body).to_string();
            let append = q.get("append").is_some_and(|a| a == "true");
            match inner.st().set_pod_log(
                ns,
                pod,
                q.get("container").map(String::as_str),
                &text,
                append,
            ) {
                Ok(()) => {
                    inner.changed.notify_one();
                    ok_json(json!({}))
                }
                Err(e) => error_response(&e),
            }
        }
        ("GET", ["emulator", "v1", "snapshot"]) => {
            drop(admin);
            ok_json(inner.st().snapshot())
        }
        _ => error_response(&ApiError::no_route()),
    }
}
