//! Storage-outage classification: whether a driver's failure text says the object store is
//! unreachable or failing (as opposed to a refusal that retrying cannot fix), and which endpoint.
//!
//! The texts come from three sources, each pattern documented in `docs/storage-breaker.md`:
//! barman-cloud (botocore's exception messages, which CNPG's plugin copies into the cnpg Backup's
//! `status.error` and the Cluster's `ContinuousArchiving` condition), the operators' status
//! messages (the simulated mariadb- and etcd-operators upload with this workspace's S3 client and
//! report its words), and this workspace's S3 client (`backup_storage::s3::S3Error`'s display).
//!
//! ```text
//!  text ─► refused / reset / closed ─► ConnectionFailed
//!       ─► timed out / timeout       ─► Timeout
//!       ─► 5xx, ServiceUnavailable, SlowDown, InternalError ─► ServerError
//!       ─► SSL / TLS / certificate   ─► Tls
//!       ─► anything else (403, NoSuchBucket, a tool's own error) ─► not a storage fault
//! ```
//!
//! Only outages classify: an authentication or authorisation refusal (`403`, `AccessDenied`,
//! `SignatureDoesNotMatch`, `InvalidAccessKeyId`), a missing bucket or key, or a client error is a
//! configuration problem that no amount of waiting fixes, and keeps failing the job as before.

use std::sync::LazyLock;

use regex::Regex;

/// What kind of storage outage a text reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// Connection refused, reset or closed before a response (the store is down or restarting).
    ConnectionFailed,
    /// A connect or read timeout.
    Timeout,
    /// The store answered 5xx (`ServiceUnavailable`, `SlowDown`, `InternalError`, …).
    ServerError,
    /// The TLS handshake with the store's endpoint failed (certificate, protocol).
    Tls,
}

impl FaultKind {
    /// A short stable name (`connection`, `timeout`, `server-error`, `tls`).
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::ConnectionFailed => "connection",
            FaultKind::Timeout => "timeout",
            FaultKind::ServerError => "server-error",
            FaultKind::Tls => "tls",
        }
    }
}

/// A classified storage failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageFault {
    /// What went wrong.
    pub kind: FaultKind,
    /// The endpoint the text names, normalised by [`normalize_endpoint`] (`None`: the text names
    /// none, as this workspace's S3 client's messages, which leave the URL out).
    pub endpoint: Option<String>,
}

/// A refusal that retrying does not fix: never a storage outage, even when other words match
/// (e.g. `403 … connection` in an operator's sentence).
static REFUSAL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\b(AccessDenied|SignatureDoesNotMatch|InvalidAccessKeyId|NoSuchBucket|NoSuchKey|InvalidBucketName|HTTP 40[0-9]|An error occurred \(40[0-9]\))",
    )
    .expect("valid regex")
});

/// The patterns, in order of precedence (TLS before connection: a handshake failure is also
/// "could not connect" in some tools).
static PATTERNS: LazyLock<Vec<(FaultKind, Regex)>> = LazyLock::new(|| {
    let re = |s: &str| Regex::new(s).expect("valid regex");
    vec![
        (
            FaultKind::Tls,
            // botocore SSLError: `SSL validation failed for <url> [SSL: CERTIFICATE_VERIFY_FAILED] …`;
            // rustls via reqwest: `invalid peer certificate: UnknownIssuer`, `received fatal alert`;
            // OpenSSL: `certificate verify failed`, `wrong version number`.
            re(
                r"(?i)(SSL validation failed|CERTIFICATE_VERIFY_FAILED|certificate verify failed|invalid peer certificate|tls handshake|received fatal alert|\[SSL: [A-Z_]+\]|wrong version number)",
            ),
        ),
        (
            FaultKind::Timeout,
            // botocore: `Connect timeout on endpoint URL: "<url>"`, `Read timeout on endpoint URL:
            // "<url>"`; reqwest/hyper: `operation timed out`, `connection timed out`, `deadline
            // has elapsed`; S3's own `RequestTimeout` code.
            re(
                r"(?i)(connect timeout on endpoint|read timeout on endpoint|timed out|deadline has elapsed|RequestTimeout\b)",
            ),
        ),
        (
            FaultKind::ConnectionFailed,
            // botocore: `Could not connect to the endpoint URL: "<url>"` (EndpointConnectionError,
            // also for a refused connection), `Connection was closed before we received a valid
            // response from endpoint URL: "<url>"` (ConnectionClosedError); reqwest/hyper and the
            // OS: `Connection refused (os error 111)`, `Connection reset by peer (os error 104)`,
            // `connection closed before message completed`, `broken pipe`.
            re(
                r"(?i)(could not connect to the endpoint url|connection was closed before we received|connection refused|connection reset|reset by peer|connection closed before message completed|broken pipe|error sending request)",
            ),
        ),
        (
            FaultKind::ServerError,
            // botocore ClientError: `An error occurred (503) when calling the PutObject
            // operation …`, `An error occurred (SlowDown) …`, `An error occurred
            // (ServiceUnavailable) …`, `(InternalError)`; this workspace's S3 client: `S3 put <key>:
            // HTTP 503 ServiceUnavailable`; a plain `503 Service Unavailable` status line.
            re(
                r"(?i)(An error occurred \(5[0-9][0-9]\)|HTTP 5[0-9][0-9]\b|\b5[0-9][0-9] Service Unavailable|\bServiceUnavailable\b|\bSlowDown\b|\bInternalError\b|\bBad Gateway\b|\bGateway Timeout\b)",
            ),
        ),
    ]
});

/// A URL in a text: botocore quotes it (`endpoint URL: "https://host:port/bucket?…"`), SSLError
/// does not (`SSL validation failed for https://host:port/bucket …`).
static URL: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(?i)\bhttps?://[^\s"'<>]+"#).expect("valid regex"));

/// Classifies a driver's failure text; `None` when it is not a storage outage.
pub fn classify(text: &str) -> Option<StorageFault> {
    if REFUSAL.is_match(text) {
        return None;
    }
    let kind = PATTERNS
        .iter()
        .find(|(_, re)| re.is_match(text))
        .map(|(kind, _)| *kind)?;
    Some(StorageFault {
        kind,
        endpoint: extract_endpoint(text),
    })
}

/// The first endpoint a text names, normalised.
pub fn extract_endpoint(text: &str) -> Option<String> {
    URL.find_iter(text)
        .find_map(|m| normalize_endpoint(m.as_str().trim_end_matches(['.', ',', ')', ';', ':'])))
}

/// An endpoint as the breaker keys it: `host:port` (lower-case host, the scheme's default port
/// when none is written), no scheme, path, query or user info. Accepts `https://h:p/…`,
/// `http://h`, and a bare `h:p` (the bucket Secret's form, taken as HTTPS).
pub fn normalize_endpoint(endpoint: &str) -> Option<String> {
    let endpoint = endpoint.trim();
    if endpoint.is_empty() {
        return None;
    }
    let with_scheme = if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("https://{endpoint}")
    };
    let url = url::Url::parse(&with_scheme).ok()?;
    let host = url.host_str()?.to_ascii_lowercase();
    let port = url.port_or_known_default()?;
    Some(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn kind(text: &str) -> Option<FaultKind> {
        classify(text).map(|f| f.kind)
    }

    #[test]
    fn barman_cloud_messages_classify_with_their_endpoint() {
        // Both printed by barman-cloud-wal-archive against the simulators' S3 server with its
        // `stop` and `unavailable` switches (the operator-sims s3 fault test prints them).
        let refused = r#"2026-12-07 03:33:09,024 [3447] ERROR: Can't connect to cloud provider: Could not connect to the endpoint URL: "https://127.0.0.1:34173/bucket-9919a4bc-5420-4b0c-993e-0d45b4c4801d""#;
        assert_eq!(
            classify(refused),
            Some(StorageFault {
                kind: FaultKind::ConnectionFailed,
                endpoint: Some("127.0.0.1:34173".into()),
            })
        );
        let unavailable = "2026-12-07 03:33:00,237 [2076] ERROR: Barman cloud WAL archiver exception: An error occurred (503) when calling the HeadBucket operation (reached max retries: 4): Service Unavailable";
        assert_eq!(kind(unavailable), Some(FaultKind::ServerError));
        assert_eq!(classify(unavailable).unwrap().endpoint, None);
        let slow = "An error occurred (SlowDown) when calling the PutObject operation (reached max retries: 4): Please reduce your request rate.";
        assert_eq!(kind(slow), Some(FaultKind::ServerError));
        let closed = r#"Connection was closed before we received a valid response from endpoint URL: "https://S3.Example.org/bucket/x"."#;
        assert_eq!(
            classify(closed),
            Some(StorageFault {
                kind: FaultKind::ConnectionFailed,
                endpoint: Some("s3.example.org:443".into()),
            })
        );
        let read = r#"Read timeout on endpoint URL: "http://minio.cozy-system:9000/bucket/key""#;
        assert_eq!(
            classify(read),
            Some(StorageFault {
                kind: FaultKind::Timeout,
                endpoint: Some("minio.cozy-system:9000".into()),
            })
        );
        let tls = "SSL validation failed for https://127.0.0.1:41023/cozy-backups [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate chain (_ssl.c:1006)";
        assert_eq!(
            classify(tls),
            Some(StorageFault {
                kind: FaultKind::Tls,
                endpoint: Some("127.0.0.1:41023".into()),
            })
        );
    }

    #[test]
    fn our_s3_client_and_operator_messages_classify_without_an_endpoint() {
        for (text, want) in [
            (
                "snapshot job failed: uploading the snapshot: S3 put etcd/s-1.db: HTTP 503 ServiceUnavailable",
                FaultKind::ServerError,
            ),
            (
                "S3 put tenant-acme/shop/backup.2026-12-07T00:02:21Z.gzip.sql: HTTP 500 InternalError",
                FaultKind::ServerError,
            ),
            (
                "S3 list records/: error sending request: client error (Connect): tcp connect error: Connection refused (os error 111)",
                FaultKind::ConnectionFailed,
            ),
            (
                "S3 get records/a: error reading a body from connection: Connection reset by peer (os error 104)",
                FaultKind::ConnectionFailed,
            ),
            (
                "S3 put k: error sending request: operation timed out",
                FaultKind::Timeout,
            ),
            (
                "S3 head : error sending request: client error (Connect): invalid peer certificate: UnknownIssuer",
                FaultKind::Tls,
            ),
        ] {
            assert_eq!(kind(text), Some(want), "{text}");
        }
    }

    #[test]
    fn refusals_and_other_failures_are_not_outages() {
        for text in [
            "uploading the snapshot: S3 put etcd/s-1.db: HTTP 403 SignatureDoesNotMatch",
            "An error occurred (AccessDenied) when calling the PutObject operation: Access Denied",
            "An error occurred (NoSuchBucket) when calling the ListObjectsV2 operation: The specified bucket does not exist",
            "An error occurred (403) when calling the HeadBucket operation: Forbidden",
            "mariadb-dump failed: Got error: 1045: Access denied for user 'root'",
            "Job has reached the specified backoff limit",
            "",
        ] {
            assert_eq!(classify(text), None, "{text}");
        }
    }

    #[test]
    fn endpoints_normalise() {
        assert_eq!(
            normalize_endpoint("127.0.0.1:9000").as_deref(),
            Some("127.0.0.1:9000")
        );
        assert_eq!(
            normalize_endpoint("https://s3.example.org").as_deref(),
            Some("s3.example.org:443")
        );
        assert_eq!(
            normalize_endpoint("http://MinIO:80/bucket?x=1").as_deref(),
            Some("minio:80")
        );
        assert_eq!(
            normalize_endpoint("https://user:pw@s3.example.org:8443/").as_deref(),
            Some("s3.example.org:8443")
        );
        assert_eq!(normalize_endpoint(""), None);
    }
}
