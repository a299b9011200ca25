//! The API client's retry policy: kube's server-aware retry of throttled and unavailable answers,
//! except that a write answered `504 Gateway Timeout` is never sent again.
//!
//! A 504 from the API server means "the server was unable to return a response in the time
//! allotted, but may still be processing the request": the write may well be stored. kube's
//! default client stack retries every request on 429, 503 and 504 alike, so a `create` with
//! `generateName` that timed out after it was stored is created a second time, under a new name,
//! and an operator then runs two backups or restores for one job. Here such a write returns the
//! 504 to its caller, whose reconcile reads the API afresh before it writes again (the daemons'
//! create-once steps list by their owned-by labels first). Reads are still retried on 504; 429 and
//! 503 are answered before the request is processed, so they are retried for every verb.
//! See `docs/runtime.md`.

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use kube::client::retry::RetryPolicy;
use tower::BoxError;
use tower::retry::Policy;

/// The retry policy of every daemon's client (see the module documentation).
#[derive(Clone)]
pub struct WriteSafeRetry {
    inner: RetryPolicy,
}

impl WriteSafeRetry {
    /// kube's server-aware policy (`Retry-After` honoured, exponential backoff from 5 ms, at most
    /// 15 retries) with the 504 exception for writes.
    pub fn new() -> Self {
        WriteSafeRetry {
            inner: RetryPolicy::server_retry(),
        }
    }
}

impl Default for WriteSafeRetry {
    fn default() -> Self {
        Self::new()
    }
}

/// True for a request that changes nothing, so repeating it is always safe.
fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// True when `status` to a request of `method` must reach the caller instead of being retried.
pub fn must_not_repeat(method: &Method, status: StatusCode) -> bool {
    status == StatusCode::GATEWAY_TIMEOUT && !is_read(method)
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for WriteSafeRetry {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        req: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Self::Future> {
        if let Ok(response) = result
            && must_not_repeat(req.method(), response.status())
        {
            return None;
        }
        Policy::<Request<Body>, Response<Res>, BoxError>::retry(&mut self.inner, req, result)
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        Policy::<Request<Body>, Response<Res>, BoxError>::clone_request(&mut self.inner, req)
    }
}

/// A kube client for `config` whose stack retries with [`WriteSafeRetry`] instead of kube's default
/// retry layer.
pub fn client(mut config: kube::Config) -> Result<kube::Client, kube::Error> {
    config.default_retry = false;
    let builder = kube::client::ClientBuilder::try_from(config)?;
    Ok(builder
        .with_layer(&tower::buffer::BufferLayer::new(1024))
        .with_layer(&tower::retry::RetryLayer::new(WriteSafeRetry::new()))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_write_timed_out_is_not_repeated() {
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(
                must_not_repeat(&method, StatusCode::GATEWAY_TIMEOUT),
                "{method}"
            );
            for status in [
                StatusCode::TOO_MANY_REQUESTS,
                StatusCode::SERVICE_UNAVAILABLE,
            ] {
                assert!(!must_not_repeat(&method, status), "{method} {status}");
            }
        }
        for status in [
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::SERVICE_UNAVAILABLE,
            StatusCode::GATEWAY_TIMEOUT,
        ] {
            assert!(!must_not_repeat(&Method::GET, status), "{status}");
        }
    }
}
