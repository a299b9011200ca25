//! A minimal blocking HTTP/1.1 GET over loopback, for readiness probes and the emulator admin API (the
//! harness has no HTTP client dependency and needs none for these plain-text calls).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// `GET http://{addr}{path}` → (status code, body).
pub(crate) fn get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    get_with_token(addr, path, "")
}

/// `GET http://{addr}{path}` with `Authorization: Bearer {token}` (none when empty).
pub(crate) fn get_with_token(
    addr: &str,
    path: &str,
    token: &str,
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let auth = if token.is_empty() {
        String::new()
    } else {
        format!("Authorization: Bearer {token}\r\n")
    };
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((code, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}
