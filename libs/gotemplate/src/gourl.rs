//! Go's `net/url` as slim-sprig's `urlParse` and `urlJoin` use it: `url.Parse`, the fields they
//! read, `URL.Hostname()`, `Userinfo.String()` and `URL.String()`.
//!
//! Written here rather than taken from the `url` crate, which follows the WHATWG URL standard:
//! it normalizes (lower-cases hosts, resolves dot segments, adds `/` paths, converts IDNs) and
//! rejects or accepts other strings than Go, whose parser keeps the text as written and has its
//! own escaping classes per component. Each step follows Go's `net/url`.

/// The components of Go's `url.URL` that slim-sprig reads or sets.
#[derive(Default, Debug)]
pub(crate) struct Url {
    pub(crate) scheme: Vec<u8>,
    pub(crate) opaque: Vec<u8>,
    /// The user name and, when one was given, the password.
    pub(crate) user: Option<(Vec<u8>, Option<Vec<u8>>)>,
    pub(crate) host: Vec<u8>,
    pub(crate) path: Vec<u8>,
    pub(crate) raw_path: Vec<u8>,
    pub(crate) omit_host: bool,
    pub(crate) force_query: bool,
    pub(crate) raw_query: Vec<u8>,
    pub(crate) fragment: Vec<u8>,
    pub(crate) raw_fragment: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Path,
    Host,
    Zone,
    UserPassword,
    Fragment,
}

/// Go's `shouldEscape` for the modes used here.
fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_' | b'~') {
        return false;
    }
    let host_like = matches!(mode, Mode::Host | Mode::Zone);
    let allowed = match c {
        b'$' | b'&' | b'+' | b'=' | b',' | b';' => true,
        b':' => mode != Mode::UserPassword,
        b'/' => matches!(mode, Mode::Path | Mode::Fragment),
        b'@' => matches!(mode, Mode::Path | Mode::Fragment),
        b'?' => mode == Mode::Fragment,
        b'!' | b'(' | b')' | b'*' => host_like || mode == Mode::Fragment,
        b'"' | b'\'' | b'<' | b'>' | b'[' | b']' => host_like,
        _ => false,
    };
    !allowed
}

fn unhex(c: u8) -> u8 {
    9 * (c >> 6) + (c & 15)
}

fn unescape(s: &[u8], mode: Mode) -> Result<Vec<u8>, String> {
    let mut n = 0;
    let mut i = 0;
    while i < s.len() {
        match s[i] {
            b'%' => {
                n += 1;
                if i + 2 >= s.len()
                    || !s[i + 1].is_ascii_hexdigit()
                    || !s[i + 2].is_ascii_hexdigit()
                {
                    let bad = &s[i..s.len().min(i + 3)];
                    return Err(format!("invalid URL escape {}", crate::strconv::quote(bad)));
                }
                if mode == Mode::Host && unhex(s[i + 1]) < 8 && &s[i..i + 3] != b"%25" {
                    return Err(format!(
                        "invalid URL escape {}",
                        crate::strconv::quote(&s[i..i + 3])
                    ));
                }
                if mode == Mode::Zone {
                    let v = (unhex(s[i + 1]) << 4) | unhex(s[i + 2]);
                    if &s[i..i + 3] != b"%25" && v != b' ' && should_escape(v, Mode::Host) {
                        return Err(format!(
                            "invalid URL escape {}",
                            crate::strconv::quote(&s[i..i + 3])
                        ));
                    }
                }
                i += 3;
            }
            c => {
                if matches!(mode, Mode::Host | Mode::Zone) && c < 0x80 && should_escape(c, mode) {
                    return Err(format!(
                        "invalid character {} in host name",
                        crate::strconv::quote(&s[i..=i])
                    ));
                }
                i += 1;
            }
        }
    }
    if n == 0 {
        return Ok(s.to_vec());
    }
    let mut t = Vec::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        if s[i] == b'%' {
            t.push((unhex(s[i + 1]) << 4) | unhex(s[i + 2]));
            i += 3;
        } else {
            t.push(s[i]);
            i += 1;
        }
    }
    Ok(t)
}

fn escape(s: &[u8], mode: Mode) -> Vec<u8> {
    let mut t = Vec::with_capacity(s.len());
    for &c in s {
        if should_escape(c, mode) {
            t.extend_from_slice(format!("%{c:02X}").as_bytes());
        } else {
            t.push(c);
        }
    }
    t
}

fn find(s: &[u8], c: u8) -> Option<usize> {
    s.iter().position(|&b| b == c)
}

fn rfind(s: &[u8], c: u8) -> Option<usize> {
    s.iter().rposition(|&b| b == c)
}

/// `url.Parse`.
pub(crate) fn parse(raw: &[u8]) -> Result<Url, String> {
    let (u, frag) = match find(raw, b'#') {
        Some(i) => (&raw[..i], &raw[i + 1..]),
        None => (raw, &b""[..]),
    };
    let mut url = parse_no_fragment(u)?;
    if !frag.is_empty() {
        url.fragment = unescape(frag, Mode::Fragment)?;
        url.raw_fragment = if escape(&url.fragment, Mode::Fragment) == frag {
            Vec::new()
        } else {
            frag.to_vec()
        };
    }
    Ok(url)
}

fn parse_no_fragment(raw: &[u8]) -> Result<Url, String> {
    if raw.iter().any(|&b| b < b' ' || b == 0x7f) {
        return Err("net/url: invalid control character in URL".into());
    }
    let mut url = Url::default();
    if raw == b"*" {
        url.path = b"*".to_vec();
        return Ok(url);
    }
    // getScheme
    let mut rest = raw;
    for (i, &c) in raw.iter().enumerate() {
        if c.is_ascii_alphabetic() {
            continue;
        }
        if c.is_ascii_digit() || matches!(c, b'+' | b'-' | b'.') {
            if i == 0 {
                break;
            }
            continue;
        }
        if c == b':' {
            if i == 0 {
                return Err("missing protocol scheme".into());
            }
            url.scheme = raw[..i].to_ascii_lowercase();
            rest = &raw[i + 1..];
        }
        break;
    }
    if rest.ends_with(b"?") && rest.iter().filter(|&&c| c == b'?').count() == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some(i) = find(rest, b'?') {
        url.raw_query = rest[i + 1..].to_vec();
        rest = &rest[..i];
    }
    if !rest.starts_with(b"/") {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_vec();
            return Ok(url);
        }
        let segment = &rest[..find(rest, b'/').unwrap_or(rest.len())];
        if find(segment, b':').is_some() {
            return Err("first path segment in URL cannot contain colon".into());
        }
    }
    if (!url.scheme.is_empty() || !rest.starts_with(b"///")) && rest.starts_with(b"//") {
        let mut authority = &rest[2..];
        rest = b"";
        if let Some(i) = find(authority, b'/') {
            rest = &authority[i..];
            authority = &authority[..i];
        }
        let (user, host) = parse_authority(&url.scheme, authority)?;
        url.user = user;
        url.host = host;
    } else if !url.scheme.is_empty() && rest.starts_with(b"/") {
        url.omit_host = true;
    }
    url.path = unescape(rest, Mode::Path)?;
    url.raw_path = if escape(&url.path, Mode::Path) == rest {
        Vec::new()
    } else {
        rest.to_vec()
    };
    Ok(url)
}

type User = Option<(Vec<u8>, Option<Vec<u8>>)>;

fn parse_authority(scheme: &[u8], authority: &[u8]) -> Result<(User, Vec<u8>), String> {
    let at = rfind(authority, b'@');
    let host = parse_host(scheme, &authority[at.map_or(0, |i| i + 1)..])?;
    let Some(i) = at else {
        return Ok((None, host));
    };
    let userinfo = &authority[..i];
    let valid = userinfo.iter().all(|&c| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'-' | b'.'
                    | b'_'
                    | b':'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
                    | b'@'
            )
    });
    if !valid {
        return Err("net/url: invalid userinfo".into());
    }
    let user = match find(userinfo, b':') {
        None => (unescape(userinfo, Mode::UserPassword)?, None),
        Some(c) => (
            unescape(&userinfo[..c], Mode::UserPassword)?,
            Some(unescape(&userinfo[c + 1..], Mode::UserPassword)?),
        ),
    };
    Ok((Some(user), host))
}

fn valid_optional_port(port: &[u8]) -> bool {
    port.is_empty() || (port[0] == b':' && port[1..].iter().all(u8::is_ascii_digit))
}

fn parse_host(scheme: &[u8], host: &[u8]) -> Result<Vec<u8>, String> {
    match rfind(host, b'[') {
        Some(i) if i > 0 => return Err("invalid IP-literal".into()),
        Some(_) => {
            let close = rfind(host, b']').ok_or("missing ']' in host")?;
            let colon_port = &host[close + 1..];
            if !valid_optional_port(colon_port) {
                return Err("invalid port after host".into());
            }
            let port = unescape(colon_port, Mode::Host)?;
            let hostname = &host[1..close.max(1)];
            if close < 1 {
                return Err("invalid host".into());
            }
            let mut unescaped = match hostname.windows(3).position(|w| w == b"%25") {
                Some(z) => {
                    let mut h = unescape(&hostname[..z], Mode::Host)?;
                    h.extend(unescape(&hostname[z..], Mode::Zone)?);
                    h
                }
                None => unescape(hostname, Mode::Host)?,
            };
            if !is_ipv6(&unescaped) {
                return Err("invalid host".into());
            }
            let mut out = b"[".to_vec();
            out.append(&mut unescaped);
            out.push(b']');
            out.extend(port);
            return Ok(out);
        }
        None => {
            if let Some(first) = find(host, b':') {
                let last = rfind(host, b':').unwrap_or(first);
                let mut i = first;
                if last != first && scheme != b"http" && scheme != b"https" {
                    i = last;
                }
                if !valid_optional_port(&host[i..]) {
                    return Err("invalid port after host".into());
                }
            }
        }
    }
    unescape(host, Mode::Host)
}

/// Whether `netip.ParseAddr` reads an IPv6 address (with an optional non-empty zone).
fn is_ipv6(s: &[u8]) -> bool {
    let Some(kind) = s.iter().find(|c| matches!(c, b'.' | b':' | b'%')) else {
        return false;
    };
    if *kind != b':' {
        return false;
    }
    let (addr, zone) = match find(s, b'%') {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    if zone.is_some_and(<[u8]>::is_empty) {
        return false;
    }
    std::str::from_utf8(addr)
        .ok()
        .and_then(|a| a.parse::<std::net::Ipv6Addr>().ok())
        .is_some()
}

impl Url {
    /// `URL.Hostname()`.
    pub(crate) fn hostname(&self) -> Vec<u8> {
        let mut host = &self.host[..];
        if let Some(c) = rfind(host, b':')
            && valid_optional_port(&host[c..])
        {
            host = &host[..c];
        }
        if host.len() >= 2 && host.starts_with(b"[") && host.ends_with(b"]") {
            host = &host[1..host.len() - 1];
        }
        host.to_vec()
    }

    /// `Userinfo.String()` (empty without a user).
    pub(crate) fn userinfo(&self) -> Vec<u8> {
        let Some((name, password)) = &self.user else {
            return Vec::new();
        };
        let mut s = escape(name, Mode::UserPassword);
        if let Some(p) = password {
            s.push(b':');
            s.extend(escape(p, Mode::UserPassword));
        }
        s
    }

    fn escaped_path(&self) -> Vec<u8> {
        if !self.raw_path.is_empty()
            && valid_encoded(&self.raw_path, Mode::Path)
            && unescape(&self.raw_path, Mode::Path).is_ok_and(|p| p == self.path)
        {
            return self.raw_path.clone();
        }
        if self.path == b"*" {
            return b"*".to_vec();
        }
        escape(&self.path, Mode::Path)
    }

    fn escaped_fragment(&self) -> Vec<u8> {
        if !self.raw_fragment.is_empty()
            && valid_encoded(&self.raw_fragment, Mode::Fragment)
            && unescape(&self.raw_fragment, Mode::Fragment).is_ok_and(|f| f == self.fragment)
        {
            return self.raw_fragment.clone();
        }
        escape(&self.fragment, Mode::Fragment)
    }

    /// `URL.String()`.
    pub(crate) fn string(&self) -> Vec<u8> {
        let mut buf = Vec::new();
        if !self.scheme.is_empty() {
            buf.extend_from_slice(&self.scheme);
            buf.push(b':');
        }
        if !self.opaque.is_empty() {
            buf.extend_from_slice(&self.opaque);
        } else {
            let has_authority =
                !self.scheme.is_empty() || !self.host.is_empty() || self.user.is_some();
            let omitted = self.omit_host && self.host.is_empty() && self.user.is_none();
            if has_authority && !omitted {
                if !self.host.is_empty() || !self.path.is_empty() || self.user.is_some() {
                    buf.extend_from_slice(b"//");
                }
                if self.user.is_some() {
                    buf.extend(self.userinfo());
                    buf.push(b'@');
                }
                if !self.host.is_empty() {
                    buf.extend(escape(&self.host, Mode::Host));
                }
            }
            let path = self.escaped_path();
            if !path.is_empty() && path[0] != b'/' && !self.host.is_empty() {
                buf.push(b'/');
            }
            if buf.is_empty() {
                let segment = &path[..find(&path, b'/').unwrap_or(path.len())];
                if find(segment, b':').is_some() {
                    buf.extend_from_slice(b"./");
                }
            }
            buf.extend(path);
        }
        if self.force_query || !self.raw_query.is_empty() {
            buf.push(b'?');
            buf.extend_from_slice(&self.raw_query);
        }
        if !self.fragment.is_empty() {
            buf.push(b'#');
            buf.extend(self.escaped_fragment());
        }
        buf
    }
}

fn valid_encoded(s: &[u8], mode: Mode) -> bool {
    s.iter().all(|&c| {
        matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'['
                | b']'
                | b'%'
        ) || !should_escape(c, mode)
    })
}
