//! The emulator's request audit log, parsed: who called which verb on what, with what result.
//! Tests count writes with it ("nothing was written twice", "deleted exactly once").

use serde_json::Value;

/// One API request.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// `get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, `deletecollection`.
    pub verb: String,
    /// API group ("" for core), from the path.
    pub group: String,
    /// Plural resource (`backupjobs`).
    pub resource: String,
    /// Namespace, if any.
    pub namespace: Option<String>,
    /// Object name, if any (a create has none).
    pub name: Option<String>,
    /// Subresource (`status`, `log`), if any.
    pub subresource: Option<String>,
    /// HTTP status code of the answer.
    pub code: u16,
    /// The client's User-Agent.
    pub user_agent: String,
    /// Raw query string.
    pub query: String,
    /// When it arrived (RFC 3339, whole seconds).
    pub time: String,
    /// The authenticated user (`system:serviceaccount:<ns>:<name>`, the admin's name,
    /// `system:anonymous`), empty when the credentials were refused.
    pub user: String,
}

impl Request {
    /// Parses one line of the emulator's JSONL audit log.
    pub fn parse(line: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(line).ok()?;
        let s = |k: &str| v[k].as_str().map(str::to_owned);
        let path = s("path").unwrap_or_default();
        let (group, from_path) = group_and_resource(&path);
        Some(Self {
            group,
            verb: s("verb")?,
            // A kind the emulator does not serve has no resource in the log; the path still names it.
            resource: s("resource").unwrap_or(from_path),
            namespace: s("namespace"),
            name: s("name"),
            subresource: s("subresource"),
            code: u16::try_from(v["code"].as_u64().unwrap_or(0)).unwrap_or(0),
            user_agent: s("userAgent").unwrap_or_default(),
            query: s("query").unwrap_or_default(),
            time: s("time").unwrap_or_default(),
            user: s("user").unwrap_or_default(),
        })
    }

    /// True for a verb that changes state.
    pub fn is_write(&self) -> bool {
        matches!(
            self.verb.as_str(),
            "create" | "update" | "patch" | "delete" | "deletecollection"
        )
    }

    /// True when the request succeeded (2xx).
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// The object name the authorizer saw: the path's, or for a list or watch the one a
    /// `metadata.name=<name>` field selector names (as kube-apiserver's RequestInfo does).
    pub fn authorized_name(&self) -> Option<String> {
        if self.name.is_some() {
            return self.name.clone();
        }
        if !matches!(self.verb.as_str(), "list" | "watch") {
            return None;
        }
        let selector = self.query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == "fieldSelector").then(|| percent_decode(v))
        })?;
        let parts: Vec<&str> = selector.split(',').collect();
        match parts.as_slice() {
            [one] => one
                .strip_prefix("metadata.name==")
                .or_else(|| one.strip_prefix("metadata.name="))
                .map(str::to_owned),
            _ => None,
        }
    }

    /// True when it is a dry run.
    pub fn is_dry_run(&self) -> bool {
        self.query.contains("dryRun=")
    }
}

/// Decodes `%XX` escapes and `+` (a query value).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 3;
                        continue;
                    }
                    None => out.push(b'%'),
                }
            }
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `(group, plural)` from an API path: `/apis/<group>/<version>/[namespaces/<ns>/]<plural>/…` or
/// `/api/v1/…` (core).
fn group_and_resource(path: &str) -> (String, String) {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["apis", group, _version, rest @ ..] => (*group, rest),
        ["api", _version, rest @ ..] => ("", rest),
        _ => return (String::new(), String::new()),
    };
    let resource = match rest {
        ["namespaces", _ns, plural, ..] => plural,
        [plural, ..] => plural,
        [] => &"",
    };
    (group.to_owned(), (*resource).to_owned())
}

/// Parsed audit log.
#[derive(Clone, Debug, Default)]
pub struct Audit {
    /// Every request, oldest first.
    pub requests: Vec<Request>,
}

impl Audit {
    /// Parses JSONL.
    pub fn parse(jsonl: &str) -> Self {
        Self {
            requests: jsonl.lines().filter_map(Request::parse).collect(),
        }
    }

    /// Successful, non-dry-run writes matching `verb` (None: any write verb), `resource`,
    /// `namespace` (None: any) and `name` (None: any).
    pub fn writes<'a>(
        &'a self,
        verb: Option<&'a str>,
        resource: &'a str,
        namespace: Option<&'a str>,
        name: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Request> + 'a {
        self.requests.iter().filter(move |r| {
            r.is_write()
                && r.succeeded()
                && !r.is_dry_run()
                && verb.is_none_or(|v| r.verb == v)
                && r.resource == resource
                && namespace.is_none_or(|ns| r.namespace.as_deref() == Some(ns))
                && name.is_none_or(|n| r.name.as_deref() == Some(n))
        })
    }

    /// Successful, non-dry-run creates of `resource` in API group `group` by clients whose
    /// User-Agent starts with `user_agent` (every client for "").
    pub fn creates_by(&self, user_agent: &str, group: &str, resource: &str) -> usize {
        self.writes(Some("create"), resource, None, None)
            .filter(|r| r.group == group && r.user_agent.starts_with(user_agent))
            .count()
    }

    /// Requests (any verb, any outcome) by clients whose User-Agent starts with `user_agent`, per
    /// second of arrival.
    pub fn per_second(&self, user_agent: &str) -> std::collections::BTreeMap<&str, usize> {
        let mut out = std::collections::BTreeMap::new();
        for r in self
            .requests
            .iter()
            .filter(|r| r.user_agent.starts_with(user_agent))
        {
            *out.entry(r.time.as_str()).or_insert(0) += 1;
        }
        out
    }

    /// The request rate of one client: `(total, peak)`: how many requests it made and the most it
    /// made within one second.
    pub fn rate(&self, user_agent: &str) -> (usize, usize) {
        let per_second = self.per_second(user_agent);
        (
            per_second.values().sum(),
            per_second.values().copied().max().unwrap_or(0),
        )
    }

    /// How many successful writes match (see [`Audit::writes`]).
    pub fn count_writes(
        &self,
        verb: Option<&str>,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> usize {
        self.writes(verb, resource, namespace, name).count()
    }
}
