//! A small S3 client for the catalog records (feature `s3`): path-style requests signed with AWS
//! Signature Version 4, the four calls the catalog needs (put, capped get, delete, one page of
//! ListObjectsV2), and a count of the requests made.
//!
//! ```text
//!  S3Client::new(endpoint URL, bucket, region, keys, CA?) ──► PUT/GET/DELETE /<bucket>/<key>
//!                                                         └─► GET /<bucket>?list-type=2&prefix=…
//! ```
//!
//! Invariants: a read never holds more than the cap it was given (a body is read chunk by chunk
//! and abandoned past the cap); error messages name the operation, the object key and S3's error
//! code, never a credential or a signature.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

/// Requests one client (and its clones) has in flight at most: a catch-up over thousands of
/// Backups queues here instead of opening thousands of connections.
pub const MAX_IN_FLIGHT: usize = 16;

/// The largest ListObjectsV2 page read (1,000 keys of up to 1,024 bytes, and their XML).
const LIST_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// What went wrong talking to S3.
#[derive(Debug, thiserror::Error)]
pub enum S3Error {
    /// The client could not be configured.
    #[error("S3 client configuration: {0}")]
    Config(String),
    /// The request did not complete.
    #[error("S3 {op} {key}: {message}")]
    Transport {
        /// The operation.
        op: &'static str,
        /// The object key or prefix.
        key: String,
        /// The transport error.
        message: String,
    },
    /// S3 answered with an error status.
    #[error("S3 {op} {key}: HTTP {status} {code}")]
    Status {
        /// The operation.
        op: &'static str,
        /// The object key or prefix.
        key: String,
        /// HTTP status.
        status: u16,
        /// S3's `<Code>` (empty when none).
        code: String,
    },
    /// A listing that does not parse.
    #[error("S3 {op} {key}: unreadable response: {message}")]
    Response {
        /// The operation.
        op: &'static str,
        /// The prefix.
        key: String,
        /// What was wrong.
        message: String,
    },
}

impl S3Error {
    /// Whether retrying may help (transport errors, throttling, 5xx).
    pub fn is_transient(&self) -> bool {
        match self {
            S3Error::Transport { .. } => true,
            S3Error::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }
}

/// Where the bucket is and how to sign for it.
#[derive(Clone)]
pub struct S3Config {
    /// `http(s)://host[:port]`.
    pub endpoint: String,
    /// The bucket.
    pub bucket: String,
    /// The signing region (`us-east-1` when empty).
    pub region: String,
    /// Access key id.
    pub access_key: String,
    /// Secret access key.
    pub secret_key: String,
    /// Extra CA certificates (PEM) trusted for HTTPS endpoints.
    pub ca_pem: Option<Vec<u8>>,
}

impl S3Config {
    /// The configuration for the bucket a credentials Secret names (its bucket, region and keys,
    /// as [`crate::credentials::parse_source`] read them), at `endpoint`, trusting `ca_pem`.
    pub fn for_source(
        creds: &crate::credentials::SourceCredentials,
        endpoint: String,
        ca_pem: Option<Vec<u8>>,
    ) -> Self {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        S3Config {
            endpoint,
            bucket: text(&creds.bucket_name),
            region: text(&creds.region),
            access_key: text(&creds.access_key),
            secret_key: text(&creds.secret_key),
            ca_pem,
        }
    }
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("endpoint", &self.endpoint)
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("access_key", &"<redacted>")
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

/// One object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The object key.
    pub key: String,
    /// Its size in bytes.
    pub size: u64,
    /// Its ETag (quotes removed).
    pub etag: String,
}

/// One page of a listing.
#[derive(Debug, Clone, Default)]
pub struct Page {
    /// The objects of the page, in key order.
    pub objects: Vec<Listed>,
    /// The token of the next page, when the listing is truncated.
    pub next: Option<String>,
}

/// The result of a capped read.
#[derive(Debug)]
pub enum Got {
    /// The object's bytes.
    Bytes(Vec<u8>),
    /// The object is larger than the cap (nothing more was read).
    TooLarge,
    /// No such object.
    Missing,
}

/// The client (cheap to clone).
#[derive(Clone)]
pub struct S3Client {
    cfg: Arc<S3Config>,
    host: String,
    base: String,
    http: reqwest::Client,
    requests: Arc<AtomicU64>,
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for S3Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Client").field("cfg", &self.cfg).finish()
    }
}

impl S3Client {
    /// A client for `cfg`.
    pub fn new(mut cfg: S3Config) -> Result<Self, S3Error> {
        let url = url::Url::parse(&cfg.endpoint)
            .map_err(|e| S3Error::Config(format!("endpoint {:?}: {e}", cfg.endpoint)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(S3Error::Config(format!(
                "endpoint {:?} is not http(s)",
                cfg.endpoint
            )));
        }
        let host_name = url
            .host_str()
            .ok_or_else(|| S3Error::Config(format!("endpoint {:?} has no host", cfg.endpoint)))?;
        let host = match url.port() {
            Some(p) => format!("{host_name}:{p}"),
            None => host_name.to_owned(),
        };
        if cfg.bucket.is_empty() {
            return Err(S3Error::Config("no bucket name".into()));
        }
        if cfg.region.is_empty() {
            cfg.region = "us-east-1".into();
        }
        let mut builder = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10));
        if let Some(pem) = &cfg.ca_pem {
            for cert in reqwest::Certificate::from_pem_bundle(pem)
                .map_err(|e| S3Error::Config(format!("CA bundle: {e}")))?
            {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder
            .build()
            .map_err(|e| S3Error::Config(e.to_string()))?;
        let base = format!(
            "{}://{host}/{}",
            url.scheme(),
            uri_encode(&cfg.bucket, true)
        );
        Ok(S3Client {
            cfg: Arc::new(cfg),
            host,
            base,
            http,
            requests: Arc::new(AtomicU64::new(0)),
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
        })
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.cfg.bucket
    }

    /// The endpoint, as configured (`http(s)://host[:port]`; it carries no credential).
    pub fn endpoint(&self) -> &str {
        &self.cfg.endpoint
    }

    /// `HEAD` of the bucket: whether the store answers and the keys may use the bucket (the
    /// storage breaker's probe).
    pub async fn head_bucket(&self) -> Result<(), S3Error> {
        let _permit = self.permit().await;
        let resp = self
            .send("head", reqwest::Method::HEAD, "", &[], Vec::new())
            .await?;
        check("head", "", resp).await.map(|_| ())
    }

    /// Requests sent so far (by this client and its clones).
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Writes `body` at `key`.
    pub async fn put(&self, key: &str, body: Vec<u8>) -> Result<(), S3Error> {
        let _permit = self.permit().await;
        let resp = self
            .send("put", reqwest::Method::PUT, key, &[], body)
            .await?;
        check("put", key, resp).await.map(|_| ())
    }

    /// Deletes `key` (S3 answers success for a missing key too).
    pub async fn delete(&self, key: &str) -> Result<(), S3Error> {
        let _permit = self.permit().await;
        let resp = self
            .send("delete", reqwest::Method::DELETE, key, &[], Vec::new())
            .await?;
        match check("delete", key, resp).await {
            Err(S3Error::Status { status: 404, .. }) => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Reads `key`, at most `cap` bytes.
    pub async fn get_capped(&self, key: &str, cap: u64) -> Result<Got, S3Error> {
        let _permit = self.permit().await;
        let resp = self
            .send("get", reqwest::Method::GET, key, &[], Vec::new())
            .await?;
        let resp = match check("get", key, resp).await {
            Err(S3Error::Status { status: 404, .. }) => return Ok(Got::Missing),
            other => other?,
        };
        Ok(match read_capped("get", key, resp, cap).await? {
            Some(bytes) => Got::Bytes(bytes),
            None => Got::TooLarge,
        })
    }

    /// One page (up to 1,000 keys) of the objects under `prefix`, after `token`.
    pub async fn list_page(&self, prefix: &str, token: Option<&str>) -> Result<Page, S3Error> {
        let mut query = vec![
            ("list-type", "2".to_owned()),
            ("max-keys", "1000".to_owned()),
            ("prefix", prefix.to_owned()),
        ];
        if let Some(t) = token {
            query.push(("continuation-token", t.to_owned()));
        }
        let _permit = self.permit().await;
        let resp = self
            .send("list", reqwest::Method::GET, "", &query, Vec::new())
            .await?;
        let resp = check("list", prefix, resp).await?;
        let body = read_capped("list", prefix, resp, LIST_MAX_BYTES)
            .await?
            .ok_or_else(|| S3Error::Response {
                op: "list",
                key: prefix.into(),
                message: format!("page larger than {LIST_MAX_BYTES} bytes"),
            })?;
        parse_list(&String::from_utf8_lossy(&body)).map_err(|message| S3Error::Response {
            op: "list",
            key: prefix.into(),
            message,
        })
    }

    async fn permit(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        // The semaphore is never closed.
        self.in_flight.acquire().await.ok()
    }

    async fn send(
        &self,
        op: &'static str,
        method: reqwest::Method,
        key: &str,
        query: &[(&str, String)],
        body: Vec<u8>,
    ) -> Result<reqwest::Response, S3Error> {
        let path = if key.is_empty() {
            format!("/{}", uri_encode(&self.cfg.bucket, true))
        } else {
            format!(
                "/{}/{}",
                uri_encode(&self.cfg.bucket, true),
                uri_encode(key, false)
            )
        };
        let mut pairs: Vec<(String, String)> = query
            .iter()
            .map(|(k, v)| (uri_encode(k, true), uri_encode(v, true)))
            .collect();
        pairs.sort();
        let query_string = pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let now = chrono::Utc::now();
        let amz_date = now.format("%Y%m%dT%H%M%SZ").to_string();
        let date = now.format("%Y%m%d").to_string();
        let payload_hash = hex::encode(Sha256::digest(&body));
        let canonical_request = format!(
            "{method}\n{path}\n{query_string}\nhost:{}\nx-amz-content-sha256:{payload_hash}\nx-amz-date:{amz_date}\n\nhost;x-amz-content-sha256;x-amz-date\n{payload_hash}",
            self.host
        );
        let scope = format!("{date}/{}/s3/aws4_request", self.cfg.region);
        let string_to_sign = format!(
            "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
            hex::encode(Sha256::digest(canonical_request.as_bytes()))
        );
        let mut signing = hmac(
            format!("AWS4{}", self.cfg.secret_key).as_bytes(),
            date.as_bytes(),
        );
        for part in [self.cfg.region.as_bytes(), b"s3", b"aws4_request"] {
            signing = hmac(&signing, part);
        }
        let signature = hex::encode(hmac(&signing, string_to_sign.as_bytes()));
        let authorization = format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={signature}",
            self.cfg.access_key
        );
        let key_path = path
            .strip_prefix(&format!("/{}", uri_encode(&self.cfg.bucket, true)))
            .unwrap_or("");
        let mut url = format!("{}{key_path}", self.base);
        if !query_string.is_empty() {
            url.push('?');
            url.push_str(&query_string);
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
        self.http
            .request(method, url)
            .header("x-amz-date", amz_date)
            .header("x-amz-content-sha256", payload_hash)
            .header("authorization", authorization)
            .body(body)
            .send()
            .await
            .map_err(|e| S3Error::Transport {
                op,
                key: key.to_owned(),
                message: without_url(&e),
            })
    }
}

/// A transport error's text without the URL (it carries the bucket, never a credential, but the
/// message is shorter and stable without it).
fn without_url(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    if let Some(url) = e.url() {
        // reqwest writes "… for url (<url>)": drop the phrase with the URL.
        msg = msg
            .replace(&format!(" for url ({})", url.as_str()), "")
            .replace(url.as_str(), "");
    }
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(": ");
        msg.push_str(&s.to_string());
        source = s.source();
    }
    msg
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key size");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// SigV4's URI encoding: unreserved characters kept, `/` kept unless `slash`, the rest `%XX`.
fn uri_encode(s: &str, slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b'/' if !slash => out.push('/'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

async fn check(
    op: &'static str,
    key: &str,
    resp: reqwest::Response,
) -> Result<reqwest::Response, S3Error> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    // The error document names a code; read a bounded amount of it.
    let body = read_capped(op, key, resp, 64 * 1024)
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    let code = between(&text, "<Code>", "</Code>")
        .map(|c| c.chars().take(64).collect())
        .unwrap_or_default();
    Err(S3Error::Status {
        op,
        key: key.to_owned(),
        status: status.as_u16(),
        code,
    })
}

async fn read_capped(
    op: &'static str,
    key: &str,
    mut resp: reqwest::Response,
    cap: u64,
) -> Result<Option<Vec<u8>>, S3Error> {
    if resp.content_length().is_some_and(|n| n > cap) {
        return Ok(None);
    }
    let mut out = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if (out.len() + chunk.len()) as u64 > cap {
                    return Ok(None);
                }
                out.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(Some(out)),
            Err(e) => {
                return Err(S3Error::Transport {
                    op,
                    key: key.to_owned(),
                    message: without_url(&e),
                });
            }
        }
    }
}

fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let end = text[start..].find(close)? + start;
    Some(&text[start..end])
}

fn unescape(s: &str) -> String {
    if !s.contains('&') {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let Some(end) = rest.find(';') else {
            break;
        };
        let entity = &rest[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            e if e.starts_with("#x") => u32::from_str_radix(&e[2..], 16)
                .ok()
                .and_then(char::from_u32),
            e if e.starts_with('#') => e[1..].parse().ok().and_then(char::from_u32),
            _ => None,
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Parses a ListObjectsV2 result.
fn parse_list(xml: &str) -> Result<Page, String> {
    if !xml.contains("<ListBucketResult") {
        return Err("not a ListBucketResult".into());
    }
    let mut page = Page::default();
    let mut rest = xml;
    while let Some(start) = rest.find("<Contents>") {
        let block_start = start + "<Contents>".len();
        let end = rest[block_start..]
            .find("</Contents>")
            .ok_or("unterminated <Contents>")?
            + block_start;
        let block = &rest[block_start..end];
        let key = between(block, "<Key>", "</Key>").ok_or("<Contents> without <Key>")?;
        let size = between(block, "<Size>", "</Size>")
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        let etag = between(block, "<ETag>", "</ETag>")
            .map(|e| unescape(e).trim_matches('"').to_owned())
            .unwrap_or_default();
        page.objects.push(Listed {
            key: unescape(key),
            size,
            etag,
        });
        rest = &rest[end + "</Contents>".len()..];
    }
    let truncated = between(xml, "<IsTruncated>", "</IsTruncated>")
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("true"));
    if truncated {
        let token = between(xml, "<NextContinuationToken>", "</NextContinuationToken>")
            .filter(|t| !t.is_empty())
            .ok_or("truncated listing without NextContinuationToken")?;
        page.next = Some(unescape(token));
    }
    Ok(page)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_head_names_neither_the_url_nor_a_key() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let client = S3Client::new(S3Config {
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket: "bucket-x".into(),
            region: String::new(),
            access_key: "AKIAEXAMPLEKEY".into(),
            secret_key: "SECRETEXAMPLEVALUE".into(),
            ca_pem: None,
        })
        .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let err = runtime.block_on(client.head_bucket()).unwrap_err();
        assert!(err.is_transient(), "{err}");
        let text = err.to_string();
        assert!(
            text.starts_with("S3 head : error sending request"),
            "{text}"
        );
        for word in [
            "for url",
            "127.0.0.1",
            "AKIAEXAMPLEKEY",
            "SECRETEXAMPLEVALUE",
        ] {
            assert!(!text.contains(word), "{word} in {text}");
        }
    }

    #[test]
    fn encodes_as_sigv4_wants() {
        assert_eq!(uri_encode("a b/c~d", false), "a%20b/c~d");
        assert_eq!(uri_encode("a b/c", true), "a%20b%2Fc");
        assert_eq!(uri_encode("é", true), "%C3%A9");
    }

    #[test]
    fn parses_a_listing() {
        let xml = r#"<?xml version="1.0"?><ListBucketResult><IsTruncated>true</IsTruncated>
<Contents><Key>catalog/v1/a/b&amp;c.json</Key><Size>12</Size><ETag>&quot;e1&quot;</ETag></Contents>
<Contents><Key>catalog/v1/a/d.json</Key><Size>3</Size></Contents>
<NextContinuationToken>t&amp;1</NextContinuationToken></ListBucketResult>"#;
        let page = parse_list(xml).unwrap();
        assert_eq!(page.objects.len(), 2);
        assert_eq!(page.objects[0].key, "catalog/v1/a/b&c.json");
        assert_eq!(page.objects[0].etag, "e1");
        assert_eq!(page.objects[0].size, 12);
        assert_eq!(page.next.as_deref(), Some("t&1"));
        assert!(parse_list("<html/>").is_err());
        assert!(
            parse_list("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>")
                .is_err()
        );
    }

    #[test]
    fn config_debug_redacts() {
        let cfg = S3Config {
            endpoint: "http://127.0.0.1:1".into(),
            bucket: "b".into(),
            region: String::new(),
            access_key: "AKIDSECRET".into(),
            secret_key: "VERYSECRET".into(),
            ca_pem: None,
        };
        let text = format!("{:?}", S3Client::new(cfg).unwrap());
        assert!(!text.contains("SECRET"), "{text}");
    }
}
