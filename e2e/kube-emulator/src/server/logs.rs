//! `GET …/pods/{name}/log`: text from the admin hook, container validation with upstream's messages,
//! `tailLines`, `limitBytes` and `follow` streaming.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::header;
use tokio::sync::mpsc;

use super::request::{bool_q, error_response};
use super::route::Target;
use crate::error::ApiError;
use crate::shared::Inner;

pub(super) fn pod_log(inner: &Arc<Inner>, t: &Target, q: &HashMap<String, String>) -> Response {
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
