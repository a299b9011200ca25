//! The chaos schedule's effect on answers (see [`crate::chaos`]): rejections, held timeouts and cut
//! watch streams.

use axum::body::Body;
use axum::response::Response;
use futures::StreamExt;

use super::request::error_response;
use crate::chaos::Plan;
use crate::error::ApiError;

/// The answer to a request the plan rejects (see [`Plan::rejects`]).
pub(super) async fn reject(plan: Plan, plural: &str) -> Response {
    let err = match plan {
        Plan::Throttle(secs) => {
            let mut resp = error_response(
                &ApiError::new(
                    429,
                    "TooManyRequests",
                    "the server has received too many requests and has asked us to try again later (chaos schedule)",
                )
                .with_details(serde_json::json!({"retryAfterSeconds": secs})),
            );
            if let Ok(v) = http::HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(http::header::RETRY_AFTER, v);
            }
            return resp;
        }
        Plan::Timeout { hold, .. } => {
            tokio::time::sleep(hold).await;
            timeout_error()
        }
        Plan::Expire => return expired_watch(),
        _ => ApiError::new(
            500,
            "InternalError",
            format!("Internal error occurred: {plural} (injected by the chaos schedule)"),
        ),
    };
    error_response(&err)
}

/// Applies the plan to a served answer: a committed timeout still answers 504 after the hold, and a
/// cut watch stream is aborted after its delay (the client sees a broken body, not a clean end).
pub(super) async fn finish(plan: Plan, served: Response) -> Response {
    match plan {
        Plan::Timeout { hold, .. } => {
            tokio::time::sleep(hold).await;
            error_response(&timeout_error())
        }
        Plan::Cut(after) => {
            let (parts, body) = served.into_parts();
            let deadline = Box::pin(tokio::time::sleep(after));
            let stream = futures::stream::unfold(
                Some((body.into_data_stream(), deadline)),
                |state| async move {
                    let (mut body, mut deadline) = state?;
                    tokio::select! {
                        item = body.next() => {
                            let item = item?.map_err(std::io::Error::other);
                            Some((item, Some((body, deadline))))
                        }
                        _ = &mut deadline => Some((
                            Err(std::io::Error::other("watch cut by the chaos schedule")),
                            None,
                        )),
                    }
                },
            );
            Response::from_parts(parts, Body::from_stream(stream))
        }
        _ => served,
    }
}

fn timeout_error() -> ApiError {
    ApiError::new(
        504,
        "Timeout",
        "the server was unable to return a response in the time allotted, but may still be processing the request (chaos schedule)",
    )
}

/// A watch answered with one ERROR event `410 Expired`, as the API server does for a resourceVersion
/// older than its history.
fn expired_watch() -> Response {
    let ev = serde_json::json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1",
        "metadata": {}, "status": "Failure", "reason": "Expired", "code": 410,
        "message": "too old resource version: expired by the chaos schedule"}});
    Response::builder()
        .status(200)
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Body::from(format!("{ev}\n")))
        .expect("response")
}

/// The plan of one resource request (drawn under the admin lock).
pub(super) fn plan(
    inner: &crate::shared::Inner,
    verb: &str,
    q: &std::collections::HashMap<String, String>,
    headers: &http::HeaderMap,
) -> Plan {
    let resume = crate::chaos::is_watch_resume(verb, q.get("resourceVersion"));
    inner
        .admin()
        .chaos_plan(verb, resume, crate::chaos::user_agent(headers))
}
