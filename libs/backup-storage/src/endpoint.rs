//! Endpoint resolution and per-driver adaptation (docs/strategy-renderer.md, "What it renders").

/// The resolved endpoint E (upstream Helm helper `backupstrategy-controller.endpoint`).
///
/// * `provisionBucket: false` → `values_endpoint` verbatim (no trim, no scheme change).
/// * `provisionBucket: true` and the system Secret's decoded `endpoint` is non-empty →
///   `https://` + the value with surrounding whitespace trimmed, then a leading `https://` and then a
///   leading `http://` removed (the scheme is forced to https: the external S3 ingress is the only
///   endpoint backup operators can verify).
/// * otherwise → `values_endpoint` verbatim (the fallback).
pub fn resolve(
    provision_bucket: bool,
    values_endpoint: &str,
    secret_endpoint: Option<&[u8]>,
) -> String {
    match secret_endpoint {
        Some(raw) if provision_bucket && !raw.is_empty() => {
            let value = String::from_utf8_lossy(raw);
            let trimmed = value.trim();
            let host = trimmed.strip_prefix("https://").unwrap_or(trimmed);
            let host = host.strip_prefix("http://").unwrap_or(host);
            format!("https://{host}")
        }
        _ => values_endpoint.to_owned(),
    }
}

/// H: E with a leading `https://` and then a leading `http://` removed, case-sensitively and with
/// nothing else touched (MariaDB `s3.endpoint`, FoundationDB `accountName`).
pub fn host_form(endpoint: &str) -> &str {
    let rest = endpoint.strip_prefix("https://").unwrap_or(endpoint);
    rest.strip_prefix("http://").unwrap_or(rest)
}

/// S: whether E starts with `https://` (MariaDB `tls.enabled`, FoundationDB `secure_connection`).
pub fn is_secure(endpoint: &str) -> bool {
    endpoint.starts_with("https://")
}

/// Upstream Go `stripScheme`, used for the projected Secret's `endpoint` key and the
/// `blob_credentials.json` account key.
///
/// Only an exact lower-case `http://` or `https://` prefix counts; anything else is returned
/// unchanged. The URL is parsed the way Go's `net/url` does: userinfo, query and fragment are
/// dropped, the path is percent-decoded and kept unless it is empty or exactly `/`. When Go's parser
/// would reject the URL (control characters, an invalid host character or port, a bad escape) or the
/// host is empty, the literal prefixes are trimmed instead (`http://` first, then `https://`).
pub fn strip_scheme(input: &str) -> String {
    if !input.starts_with("http://") && !input.starts_with("https://") {
        return input.to_owned();
    }
    match go_parse_host_path(input) {
        Some((host, path)) if !host.is_empty() => {
            if path.is_empty() || path == "/" {
                host
            } else {
                host + &path
            }
        }
        _ => {
            let rest = input.strip_prefix("http://").unwrap_or(input);
            rest.strip_prefix("https://").unwrap_or(rest).to_owned()
        }
    }
}

/// The `(host, decoded path)` of an `http(s)://` URL as Go's `url.Parse` yields them, or `None`
/// where Go would return an error.
fn go_parse_host_path(input: &str) -> Option<(String, String)> {
    if input.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return None; // "invalid control character in URL"
    }
    let (without_fragment, fragment) = match input.split_once('#') {
        Some((a, f)) => (a, Some(f)),
        None => (input, None),
    };
    if let Some(f) = fragment {
        percent_decode(f)?; // Go validates the fragment's escapes.
    }
    let rest = without_fragment.split_once("://").map(|(_, r)| r)?;
    let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let host = match authority.rfind('@') {
        Some(i) => {
            if !authority[..i].bytes().all(valid_userinfo_byte) {
                return None; // "invalid userinfo"
            }
            &authority[i + 1..]
        }
        None => authority,
    };
    let host = parse_host(host)?;
    let path = percent_decode(path)?;
    Some((host, path))
}

fn valid_userinfo_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._:~!$&'()*+,;=%@".contains(&b)
}

/// Go's `parseHost`: an optional `:port` of digits, host bytes limited to what Go accepts unescaped.
fn parse_host(host: &str) -> Option<String> {
    if host.starts_with('[') {
        // IPv6 literal: `[...]` optionally followed by `:port`.
        let end = host.find(']')?;
        let port = &host[end + 1..];
        if !port.is_empty() && !valid_optional_port(port) {
            return None;
        }
        return Some(host.to_owned());
    }
    if let Some(i) = host.rfind(':')
        && !valid_optional_port(&host[i..])
    {
        return None; // "invalid port"
    }
    let allowed =
        |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:[]<>\"%".contains(&b) || b >= 0x80;
    if !host.bytes().all(allowed) {
        return None; // "invalid character in host name"
    }
    percent_decode(host)
}

fn valid_optional_port(port: &str) -> bool {
    match port.strip_prefix(':') {
        Some(digits) => digits.bytes().all(|b| b.is_ascii_digit()),
        None => port.is_empty(),
    }
}

/// Decodes `%XX` escapes; `None` on a malformed escape (Go: "invalid URL escape").
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hi = (hex[0] as char).to_digit(16)?;
            let lo = (hex[1] as char).to_digit(16)?;
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FALLBACK: &str = "http://seaweedfs-s3.tenant-root.svc.cozy.local:8333";

    /// Derivation from the system Secret with provisionBucket=true.
    #[test]
    fn table_b_derived_endpoint() {
        let cases: &[(Option<&[u8]>, &str, &str, bool)] = &[
            (
                Some(b"s3.example.com"),
                "https://s3.example.com",
                "s3.example.com",
                true,
            ),
            (
                Some(b"s3.example.com\n"),
                "https://s3.example.com",
                "s3.example.com",
                true,
            ),
            (
                Some(b"http://s3.example.com:8333"),
                "https://s3.example.com:8333",
                "s3.example.com:8333",
                true,
            ),
            (
                Some(b"https://s3.example.com"),
                "https://s3.example.com",
                "s3.example.com",
                true,
            ),
            (
                Some(b"s3.example.com:8333/"),
                "https://s3.example.com:8333/",
                "s3.example.com:8333/",
                true,
            ),
            (Some(b"  \t"), "https://", "", true),
            (
                None,
                FALLBACK,
                "seaweedfs-s3.tenant-root.svc.cozy.local:8333",
                false,
            ),
            (
                Some(b""),
                FALLBACK,
                "seaweedfs-s3.tenant-root.svc.cozy.local:8333",
                false,
            ),
        ];
        for (secret, e, h, s) in cases {
            let got = resolve(true, FALLBACK, *secret);
            assert_eq!(
                (got.as_str(), host_form(&got), is_secure(&got)),
                (*e, *h, *s),
                "{secret:?}"
            );
        }
    }

    /// Table B row 8 and Table A row 3: provisionBucket=false uses the value verbatim.
    #[test]
    fn external_s3_is_verbatim() {
        let e = resolve(false, "HTTPS://x:1", Some(b"s3.example.com"));
        assert_eq!(
            (e.as_str(), host_form(&e), is_secure(&e)),
            ("HTTPS://x:1", "HTTPS://x:1", false)
        );
        let e = resolve(false, "https://minio.example.internal:9000", None);
        assert_eq!(e, "https://minio.example.internal:9000");
    }

    /// Table A (helm-unittest cases, fallback path).
    #[test]
    fn table_a_fallback_forms() {
        let e = resolve(true, "https://s3.example.com:8333", None);
        assert_eq!(
            (host_form(&e), is_secure(&e)),
            ("s3.example.com:8333", true)
        );
        let e = resolve(true, "http://s3.example.com:8333", None);
        assert_eq!(
            (host_form(&e), is_secure(&e)),
            ("s3.example.com:8333", false)
        );
    }

    /// Table C: Go stripScheme.
    #[test]
    fn table_c_strip_scheme() {
        let cases = [
            (
                "seaweedfs-s3.tenant-root.svc:8333",
                "seaweedfs-s3.tenant-root.svc:8333",
            ),
            (
                "http://seaweedfs-s3.tenant-root.svc:8333",
                "seaweedfs-s3.tenant-root.svc:8333",
            ),
            ("https://s3.example.com", "s3.example.com"),
            ("http://host:8333", "host:8333"),
            ("https://host:8333", "host:8333"),
            ("host:8333", "host:8333"),
            ("https://example.com/path/", "example.com/path/"),
            ("https://example.com/", "example.com"),
            ("https://example.com", "example.com"),
            ("", ""),
            ("https://x.com:9000/a/b?q=1", "x.com:9000/a/b"),
            ("https://user:pw@x.com:1", "x.com:1"),
            ("https://x.com#frag", "x.com"),
            ("https://x.com/%41", "x.com/A"),
            ("HTTPS://x.com", "HTTPS://x.com"),
            (" https://x.com", " https://x.com"),
            ("https://x.com\n", "x.com\n"),
            ("https://x .com", "x .com"),
            ("http://https://x", "https://x"),
            ("https://x.com:443", "x.com:443"),
            ("https://X.Example.COM", "X.Example.COM"),
            ("https://x.com:port", "x.com:port"),
        ];
        for (input, want) in cases {
            assert_eq!(strip_scheme(input), want, "strip_scheme({input:?})");
        }
    }
}
