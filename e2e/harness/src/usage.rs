//! Which of a component's RBAC grants its daemon needed in the tests (the over-privilege report).
//!
//! ```text
//!  Harness drop ─► audit lines whose user is a provisioned component's ServiceAccount (the
//!                  emulator's request log, or kube-apiserver's audit log turned into its lines)
//!               ─► <target>/rbac-usage/<component>/[real.]<test binary>.<test>.<pid>.<n>.jsonl
//!                  (`real.`: the harness ran on kube-apiserver)
//!  rbac-usage (bin) ─► every grant of deploy/<component>/rbac.yaml, one per
//!                      rule × verb × resource × resourceName, scoped by the bindings that give
//!                      it to the ServiceAccount (cluster-wide, or one namespace)
//!                  ─► the union of the recorded requests that were authorised (not 401/403);
//!                      a server-side apply that created its object (patch → 201) also needed
//!                      `create`, as kube-apiserver authorises it
//!                  ─► each grant: needed (some request only it allows), redundant (everything it
//!                      allowed another grant allows too), unused (it allowed nothing); a rule
//!                      under a `# rbac: kept because …` comment is reported as kept
//! ```
//!
//! "Needed" is what makes the report a proof: removing a needed grant denies a request a test
//! made, so that test gets the API server's 403.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::audit::Request;

/// The marker, in a comment right above a rule entry, that keeps a grant nothing in the tests
/// needs; the text after it says why.
pub const KEPT_MARKER: &str = "rbac: kept because";

/// Where a grant applies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    /// Every namespace and cluster-scoped objects (a ClusterRoleBinding).
    Cluster,
    /// One namespace (a RoleBinding).
    Namespace(String),
}

/// One verb on one resource (and one name, if named) of one rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Grant {
    /// `ClusterRole/<name>` or `Role/<namespace>/<name>`.
    pub role: String,
    /// 1-based line of the rule entry in rbac.yaml.
    pub line: usize,
    /// API group ("" core).
    pub group: String,
    /// Resource, possibly `plural/subresource`.
    pub resource: String,
    /// Verb.
    pub verb: String,
    /// The resourceName, if the rule names objects.
    pub name: Option<String>,
    /// Where it applies (one entry per binding that gives the role to the ServiceAccount).
    pub scopes: Vec<Scope>,
    /// The reason of a `# rbac: kept because …` comment above the rule.
    pub kept: Option<String>,
}

impl Grant {
    /// True when this grant alone authorises `r` (kube-apiserver's rule semantics).
    pub fn allows(&self, r: &Request) -> bool {
        let resource = match r.subresource.as_deref() {
            Some(sub) => format!("{}/{sub}", r.resource),
            None => r.resource.clone(),
        };
        let wild = |want: &str, have: &str| want == "*" || want == have;
        let resource_ok = wild(&self.resource, &resource)
            || (self.resource.starts_with("*/")
                && r.subresource.as_deref() == Some(&self.resource[2..]));
        // A POST create and a deletecollection carry no name, so a named rule never allows them.
        let name_ok = match &self.name {
            None => true,
            Some(n) => r.authorized_name().as_deref() == Some(n.as_str()),
        };
        let scope_ok = self.scopes.iter().any(|s| match s {
            Scope::Cluster => true,
            Scope::Namespace(ns) => r.namespace.as_deref() == Some(ns.as_str()),
        });
        wild(&self.group, &r.group)
            && resource_ok
            && wild(&self.verb, &r.verb)
            && name_ok
            && scope_ok
    }

    /// `verb group/resource[ name] in <scopes>` for the report.
    pub fn describe(&self) -> String {
        let scopes: Vec<String> = self
            .scopes
            .iter()
            .map(|s| match s {
                Scope::Cluster => "cluster-wide".to_owned(),
                Scope::Namespace(ns) => format!("namespace {ns}"),
            })
            .collect();
        format!(
            "{} {}/{}{} ({}, {}, line {})",
            self.verb,
            if self.group.is_empty() {
                "core"
            } else {
                &self.group
            },
            self.resource,
            self.name
                .as_deref()
                .map(|n| format!(" named {n}"))
                .unwrap_or_default(),
            if scopes.is_empty() {
                "bound to nobody".to_owned()
            } else {
                scopes.join(", ")
            },
            self.role,
            self.line
        )
    }
}

/// The grants `rbac_yaml` (the text of a component's rbac.yaml) gives the ServiceAccount
/// `sa_namespace/sa_name`.
pub fn grants(rbac_yaml: &str, sa_namespace: &str, sa_name: &str) -> Vec<Grant> {
    let mut docs: Vec<(usize, Vec<&str>)> = vec![(1, Vec::new())];
    for (i, line) in rbac_yaml.lines().enumerate() {
        if line.trim_end() == "---" {
            docs.push((i + 2, Vec::new()));
        } else if let Some(last) = docs.last_mut() {
            last.1.push(line);
        }
    }
    let parsed: Vec<(usize, Vec<&str>, Value)> = docs
        .into_iter()
        .filter_map(|(first, lines)| {
            let v: serde_yaml::Value = serde_yaml::from_str(&lines.join("\n")).ok()?;
            let v = serde_json::to_value(v).ok()?;
            v.is_object().then_some((first, lines, v))
        })
        .collect();
    // Which roles the ServiceAccount is bound to, and where.
    let mut bound: BTreeMap<String, Vec<Scope>> = BTreeMap::new();
    for (_, _, d) in &parsed {
        let kind = d["kind"].as_str().unwrap_or_default();
        if kind != "RoleBinding" && kind != "ClusterRoleBinding" {
            continue;
        }
        let binding_ns = d["metadata"]["namespace"].as_str();
        let ours = d["subjects"].as_array().into_iter().flatten().any(|s| {
            s["kind"] == "ServiceAccount"
                && s["name"] == sa_name
                && s["namespace"].as_str().or(binding_ns) == Some(sa_namespace)
        });
        if !ours {
            continue;
        }
        let role_kind = d["roleRef"]["kind"].as_str().unwrap_or_default();
        let role_name = d["roleRef"]["name"].as_str().unwrap_or_default();
        let (key, scope) = match (kind, role_kind, binding_ns) {
            ("ClusterRoleBinding", "ClusterRole", _) => {
                (format!("ClusterRole/{role_name}"), Scope::Cluster)
            }
            ("RoleBinding", "ClusterRole", Some(ns)) => (
                format!("ClusterRole/{role_name}"),
                Scope::Namespace(ns.into()),
            ),
            ("RoleBinding", "Role", Some(ns)) => (
                format!("Role/{ns}/{role_name}"),
                Scope::Namespace(ns.into()),
            ),
            _ => continue,
        };
        bound.entry(key).or_default().push(scope);
    }
    let mut out = Vec::new();
    for (first, lines, d) in &parsed {
        let kind = d["kind"].as_str().unwrap_or_default();
        let role = match kind {
            "ClusterRole" => format!(
                "ClusterRole/{}",
                d["metadata"]["name"].as_str().unwrap_or("")
            ),
            "Role" => format!(
                "Role/{}/{}",
                d["metadata"]["namespace"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().unwrap_or("")
            ),
            _ => continue,
        };
        let entries = rule_entries(lines);
        let scopes = bound.get(&role).cloned().unwrap_or_default();
        for (i, rule) in d["rules"].as_array().into_iter().flatten().enumerate() {
            let (line, kept) = entries
                .get(i)
                .map(|(l, k)| (first + l, k.clone()))
                .unwrap_or((*first, None));
            let list = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            };
            let names: Vec<Option<String>> = match list("resourceNames") {
                n if n.is_empty() => vec![None],
                n => n.into_iter().map(Some).collect(),
            };
            for group in list("apiGroups") {
                for resource in list("resources") {
                    for verb in list("verbs") {
                        for name in &names {
                            out.push(Grant {
                                role: role.clone(),
                                line,
                                group: group.clone(),
                                resource: resource.clone(),
                                verb: verb.clone(),
                                name: name.clone(),
                                scopes: scopes.clone(),
                                kept: kept.clone(),
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// `(0-based line within the document, kept reason)` of each entry of the document's `rules:`.
fn rule_entries(lines: &[&str]) -> Vec<(usize, Option<String>)> {
    let Some(start) = lines.iter().position(|l| l.trim_end() == "rules:") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut item_indent: Option<usize> = None;
    for (i, line) in lines.iter().enumerate().skip(start + 1) {
        let trimmed = line.trim_start();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let indent = line.len() - trimmed.len();
        if indent == 0 && !trimmed.starts_with('-') {
            break; // the next top-level key
        }
        if !trimmed.starts_with("- ") {
            continue;
        }
        match item_indent {
            None => item_indent = Some(indent),
            Some(n) if n != indent => continue,
            Some(_) => {}
        }
        // The comment block right above the entry.
        let kept = lines[..i]
            .iter()
            .rev()
            .take_while(|l| l.trim_start().starts_with('#'))
            .find_map(|l| {
                let text = l.trim_start().trim_start_matches('#').trim();
                text.strip_prefix(KEPT_MARKER)
                    .map(|why| why.trim().to_owned())
            });
        out.push((i, kept));
    }
    out
}

/// What the tests showed of one grant.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Some authorised request was allowed by this grant and no other: removing it fails a test.
    Needed,
    /// It allowed requests, but other grants allow each of them too.
    Redundant,
    /// No recorded request needed it.
    Unused,
}

/// What authorising `r` took in kube-apiserver: the request itself and, for a server-side apply
/// that created its object (a `patch` answered 201), a `create` of that name too.
fn authorisations(r: &Request) -> Vec<Request> {
    let mut out = vec![r.clone()];
    if r.verb == "patch" && r.code == 201 {
        out.push(Request {
            verb: "create".into(),
            ..r.clone()
        });
    }
    out
}

/// Each grant with its verdict against `requests` (only authorised ones count).
pub fn assess(grants: &[Grant], requests: &[Request]) -> Vec<(Grant, Verdict)> {
    let authorised: Vec<Request> = requests
        .iter()
        .filter(|r| !matches!(r.code, 401 | 403) && !r.resource.is_empty())
        .flat_map(authorisations)
        .collect();
    let mut allowed = vec![false; grants.len()];
    let mut sole = vec![false; grants.len()];
    for r in &authorised {
        let who: Vec<usize> = (0..grants.len()).filter(|&i| grants[i].allows(r)).collect();
        if let [only] = who.as_slice() {
            sole[*only] = true;
        }
        for &i in &who {
            allowed[i] = true;
        }
    }
    grants
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let v = if sole[i] {
                Verdict::Needed
            } else if allowed[i] {
                Verdict::Redundant
            } else {
                Verdict::Unused
            };
            (g.clone(), v)
        })
        .collect()
}

/// The folder per-test usage is written to: `RBAC_USAGE_DIR`, or `<target>/rbac-usage`.
pub fn usage_dir() -> PathBuf {
    std::env::var_os("RBAC_USAGE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::target_dir().join("rbac-usage"))
}

/// The file-name prefix of a record made on kube-apiserver (`COZY_E2E_API=real` or a `real_api`
/// test); the emulator's records have none.
pub const REAL_PREFIX: &str = "real.";

/// Every recorded request of `component` under `dir`, and how many files they came from.
pub fn recorded(dir: &Path, component: &str) -> (Vec<Request>, usize) {
    recorded_on(dir, component, None)
}

/// [`recorded`], only of the records made on `backend` (None: every record).
pub fn recorded_on(
    dir: &Path,
    component: &str,
    backend: Option<crate::ApiBackend>,
) -> (Vec<Request>, usize) {
    let mut files = 0;
    let mut requests = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir.join(component)) else {
        return (requests, 0);
    };
    for e in entries.flatten() {
        let path = e.path();
        let real = e.file_name().to_string_lossy().starts_with(REAL_PREFIX);
        let wanted = match backend {
            None => true,
            Some(crate::ApiBackend::Real) => real,
            Some(crate::ApiBackend::Emulator) => !real,
        };
        if wanted
            && path.extension().is_some_and(|x| x == "jsonl")
            && let Ok(text) = std::fs::read_to_string(&path)
        {
            files += 1;
            requests.extend(text.lines().filter_map(Request::parse));
        }
    }
    (requests, files)
}

/// The records of `component` under `dir`, one `(file name, requests)` per test record, sorted by
/// file name (which starts with the test binary and the test).
pub fn recorded_files(dir: &Path, component: &str) -> Vec<(String, Vec<Request>)> {
    let mut out: Vec<(String, Vec<Request>)> = std::fs::read_dir(dir.join(component))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "jsonl"))
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok()?;
            Some((
                e.file_name().to_string_lossy().into_owned(),
                text.lines().filter_map(Request::parse).collect(),
            ))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// For each of `grants`, the first of `records` (as [`recorded_files`] answers them) with a
/// request only that grant allows: the test that needed it.
pub fn needed_by<'a>(
    grants: &[Grant],
    records: &'a [(String, Vec<Request>)],
) -> Vec<Option<&'a str>> {
    let mut out: Vec<Option<&str>> = vec![None; grants.len()];
    for (file, requests) in records {
        for (i, (_, verdict)) in assess(grants, requests).into_iter().enumerate() {
            if verdict == Verdict::Needed && out[i].is_none() {
                out[i] = Some(file.as_str());
            }
        }
    }
    out
}

/// A file name for this test process's record: the backend (`real.` for kube-apiserver), the test
/// binary, the test, the process.
pub(crate) fn record_name(real: bool) -> String {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let binary = std::env::var("NEXTEST_BINARY_ID").ok().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            // A binary rebuilt while it runs is `<path> (deleted)` on Linux.
            .map(|p| {
                let p = p.to_string_lossy();
                PathBuf::from(p.strip_suffix(" (deleted)").unwrap_or(&p))
            })
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "tests".into())
    });
    let test = std::env::var("NEXTEST_TEST_NAME")
        .ok()
        .unwrap_or_else(|| std::thread::current().name().unwrap_or("main").to_owned());
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!(
        "{}{}.{}.{}.{}.jsonl",
        if real { REAL_PREFIX } else { "" },
        clean(&binary),
        clean(&test),
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

impl crate::Harness {
    /// Writes the audit lines of every component identity this harness provisioned to
    /// [`usage_dir`]`/<component>/` (called when the harness is dropped).
    pub(crate) fn record_rbac_usage(&self) {
        if self.identities.is_empty() {
            return;
        }
        let audit = self.audit_log();
        let name = record_name(self.control_plane().is_some());
        for (component, identity) in &self.identities {
            let lines: Vec<&str> = audit
                .lines()
                .filter(|l| {
                    serde_json::from_str::<Value>(l)
                        .is_ok_and(|v| v["user"].as_str() == Some(identity.user.as_str()))
                })
                .collect();
            let dir = usage_dir().join(component);
            if std::fs::create_dir_all(&dir).is_ok() {
                let mut text = lines.join("\n");
                text.push('\n');
                let _ = std::fs::write(dir.join(&name), text);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RBAC: &str = r#"# header
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: c
rules:
  - apiGroups: ["g"]
    resources: ["things", "things/status"]
    verbs: ["get", "patch"]
  # rbac: kept because only a path no test reaches deletes
  - apiGroups: ["g"]
    resources: ["things"]
    verbs: ["delete"]
  - apiGroups: ["g"]
    resources: ["*"]
    verbs: ["get"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: c
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: c}
subjects:
  - kind: ServiceAccount
    name: sa
    namespace: sys
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: r
  namespace: t
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    resourceNames: ["cfg"]
    verbs: ["get", "watch", "create", "patch"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: r
  namespace: t
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: r}
subjects:
  - kind: ServiceAccount
    name: sa
    namespace: sys
"#;

    fn req(verb: &str, group: &str, resource: &str, ns: &str, name: Option<&str>) -> Request {
        Request {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            namespace: (!ns.is_empty()).then(|| ns.to_owned()),
            name: name.map(str::to_owned),
            subresource: None,
            code: 200,
            user_agent: String::new(),
            query: String::new(),
            user: "system:serviceaccount:sys:sa".into(),
            time: String::new(),
        }
    }

    #[test]
    fn grants_expand_rules_with_scopes_lines_and_markers() {
        let g = grants(RBAC, "sys", "sa");
        // 2 resources × 2 verbs + 1 + 1 + 4 named.
        assert_eq!(g.len(), 4 + 1 + 1 + 4);
        assert_eq!(g[0].line, 7);
        assert_eq!(g[0].scopes, vec![Scope::Cluster]);
        assert_eq!(
            g[4].kept.as_deref(),
            Some("only a path no test reaches deletes")
        );
        assert_eq!(g[4].line, 11);
        assert!(g[5].kept.is_none());
        let cm = &g[6];
        assert_eq!(cm.scopes, vec![Scope::Namespace("t".into())]);
        assert_eq!(cm.name.as_deref(), Some("cfg"));
        assert_eq!(cm.role, "Role/t/r");
        // Nobody else's binding counts.
        assert!(
            grants(RBAC, "sys", "other")
                .iter()
                .all(|g| g.scopes.is_empty())
        );
    }

    #[test]
    fn needed_by_names_the_first_record_that_needed_a_grant() {
        let g = grants(RBAC, "sys", "sa");
        let mut status = req("patch", "g", "things", "x", Some("a"));
        status.subresource = Some("status".into());
        let records = vec![
            (
                "a".to_owned(),
                vec![req("get", "g", "things", "x", Some("a"))],
            ),
            (
                "b".to_owned(),
                vec![req("get", "g", "others", "x", Some("b"))],
            ),
            (
                "c".to_owned(),
                vec![status, req("get", "g", "others", "x", None)],
            ),
        ];
        let by = needed_by(&g, &records);
        assert_eq!(by[0], None, "get things: g/* get allows it too");
        assert_eq!(by[3], Some("c"), "patch things/status");
        assert_eq!(by[5], Some("b"), "get g/*: the first record that needed it");
        assert_eq!(by[1], None);
    }

    #[test]
    fn records_are_told_apart_by_backend() {
        let dir = std::env::temp_dir().join(format!("rbac-usage-test-{}", std::process::id()));
        let c = dir.join("c");
        std::fs::create_dir_all(&c).unwrap();
        let line = |verb: &str| {
            format!(r#"{{"verb":"{verb}","path":"/api/v1/namespaces/t/configmaps","code":200}}"#)
        };
        std::fs::write(c.join(record_name(false)), line("list") + "\n").unwrap();
        std::fs::write(c.join(record_name(true)), line("watch") + "\n").unwrap();
        let verbs = |backend| -> Vec<String> {
            let (requests, files) = recorded_on(&dir, "c", backend);
            assert_eq!(files, requests.len());
            let mut v: Vec<String> = requests.into_iter().map(|r| r.verb).collect();
            v.sort();
            v
        };
        assert_eq!(verbs(None), ["list", "watch"]);
        assert_eq!(verbs(Some(crate::ApiBackend::Real)), ["watch"]);
        assert_eq!(verbs(Some(crate::ApiBackend::Emulator)), ["list"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn verdicts_need_a_request_only_that_grant_allows() {
        let g = grants(RBAC, "sys", "sa");
        let mut watch = req("watch", "", "configmaps", "t", None);
        watch.query = "fieldSelector=metadata.name%3Dcfg&watch=true".into();
        let mut denied = req("delete", "g", "things", "x", Some("a"));
        denied.code = 403;
        let mut status = req("patch", "g", "things", "x", Some("a"));
        status.subresource = Some("status".into());
        let requests = vec![
            req("get", "g", "things", "x", Some("a")), // also allowed by g/* get
            req("get", "g", "others", "x", Some("b")), // only g/* get
            status,
            watch,
            req("get", "", "configmaps", "elsewhere", Some("cfg")), // out of the Role's namespace
            denied,
            {
                // A server-side apply that created the named ConfigMap: patch and create.
                let mut apply = req("patch", "", "configmaps", "t", Some("cfg"));
                apply.code = 201;
                apply
            },
        ];
        let v: Vec<Verdict> = assess(&g, &requests).into_iter().map(|(_, v)| v).collect();
        use Verdict::*;
        assert_eq!(
            v,
            vec![
                Redundant, // get things
                Unused,    // patch things
                Unused,    // get things/status
                Needed,    // patch things/status
                Unused,    // delete things (kept; the 403 does not count)
                Needed,    // get g/*
                Unused,    // get configmaps cfg
                Needed,    // watch configmaps cfg (the field selector names it)
                Needed,    // create configmaps cfg: the apply that created it
                Needed,    // patch configmaps cfg: that apply
            ]
        );
    }
}
