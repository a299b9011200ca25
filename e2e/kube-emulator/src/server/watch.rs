//! Watch streams: one compact JSON event per line, from a resourceVersion out of the history or with
//! synthetic ADDED events, bookmarks, the in-stream 410, old/new selector semantics, and Tables or
//! PartialObjectMetadata inside events.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{StatusCode, header};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::request::{Want, bool_q, selectors};
use super::route::Target;
use crate::error::ApiError;
use crate::kinds::Kind;
use crate::shared::Inner;
use crate::store::{Event, to_view};
use crate::table::{self, Include};

pub(super) fn line(v: &Value) -> Result<Bytes, Infallible> {
    let mut s = v.to_string();
    s.push('\n');
    Ok(Bytes::from(s))
}

pub(super) fn watch_expired_response(_kind: &Kind, why: &str) -> Response {
    let ev = json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": format!("too old resource version: {why}"), "reason": "Expired", "code": 410}});
    Response::builder()
        .status(200)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(format!("{ev}\n")))
        .expect("response")
}

pub(super) fn start_watch(
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
                // Also when the server was already going down as this watch started.
                _ = async { shutdown_rx.wait_for(|down| *down).await.map(|_| ()) } => return,
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
pub(super) fn convert_event(
    kind: &Kind,
    ev: &Event,
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
