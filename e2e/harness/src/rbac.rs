//! Checks requests from the emulator's audit log against a daemon's RBAC manifest: every request a
//! daemon made in a test must be allowed by its ClusterRole, so the manifest cannot fall behind the
//! code ("the RBAC matches what the code calls").

use std::path::Path;

use serde_yaml::Value;

use crate::audit::{Audit, Request};

/// One PolicyRule of a ClusterRole.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rule {
    /// `apiGroups` ("" = core, "*" = any).
    pub groups: Vec<String>,
    /// `resources`, possibly `plural/subresource` ("*" = any).
    pub resources: Vec<String>,
    /// `verbs` ("*" = any).
    pub verbs: Vec<String>,
    /// `resourceNames` (empty = any).
    pub names: Vec<String>,
}

impl Rule {
    /// True when this rule allows `r`, with Kubernetes' RBAC semantics (a create or a list is never
    /// restricted by `resourceNames`, so such a rule does not allow them).
    pub fn allows(&self, r: &Request) -> bool {
        let any = |list: &[String], want: &str| list.iter().any(|x| x == "*" || x == want);
        let resource = match r.subresource.as_deref() {
            Some(sub) => format!("{}/{sub}", r.resource),
            None => r.resource.clone(),
        };
        let named = self.names.is_empty()
            || (!matches!(r.verb.as_str(), "create" | "list" | "deletecollection")
                && r.name.as_ref().is_some_and(|n| self.names.contains(n)));
        any(&self.groups, &r.group)
            && any(&self.resources, &resource)
            && any(&self.verbs, &r.verb)
            && named
    }
}

/// The rules of every ClusterRole in the YAML file at `path`.
pub fn cluster_role_rules(path: &Path) -> Vec<Rule> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let strings = |v: &Value| -> Vec<String> {
        v.as_sequence()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    };
    serde_yaml::Deserializer::from_str(&text)
        .filter_map(|d| <Value as serde::Deserialize>::deserialize(d).ok())
        .filter(|d| d["kind"] == "ClusterRole")
        .flat_map(|d| d["rules"].as_sequence().cloned().unwrap_or_default())
        .map(|rule| Rule {
            groups: strings(&rule["apiGroups"]),
            resources: strings(&rule["resources"]),
            verbs: strings(&rule["verbs"]),
            names: strings(&rule["resourceNames"]),
        })
        .collect()
}

/// The API requests of clients whose User-Agent starts with `user_agent` that no rule allows,
/// one line each (`verb group/resource[/sub] ns/name`), without repeats.
pub fn denied(audit: &Audit, user_agent: &str, rules: &[Rule]) -> Vec<String> {
    let mut out: Vec<String> = audit
        .requests
        .iter()
        .filter(|r| r.user_agent.starts_with(user_agent) && !r.resource.is_empty())
        .filter(|r| !rules.iter().any(|rule| rule.allows(r)))
        .map(|r| {
            format!(
                "{} {}/{}{} {}/{}",
                r.verb,
                r.group,
                r.resource,
                r.subresource
                    .as_deref()
                    .map(|s| format!("/{s}"))
                    .unwrap_or_default(),
                r.namespace.as_deref().unwrap_or(""),
                r.name.as_deref().unwrap_or("")
            )
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Panics unless every request of the `component` daemon (User-Agent `<component>/…`) in the
/// audit log is allowed by `deploy/<component>/rbac.yaml`.
pub fn assert_allowed(audit: &Audit, component: &str) {
    let path = crate::workspace_root()
        .join("deploy")
        .join(component)
        .join("rbac.yaml");
    let rules = cluster_role_rules(&path);
    let denied = denied(audit, &format!("{component}/"), &rules);
    assert!(
        denied.is_empty(),
        "{} does not allow what {component} called:\n{}",
        path.display(),
        denied.join("\n")
    );
}

/// The components whose ClusterRole may `get` Secrets (and nothing else of them), with why.
pub const SECRET_READERS: &[(&str, &str)] = &[(
    "restore-orchestrator",
    "a restore drill connects to its scratch database with the operator's `-app` Secret",
)];

/// Checks `deploy/<component>/rbac.yaml` for least privilege and returns its rules for the
/// component's own checks: no wildcard group or verb; a wildcard resource only to `get` the
/// `apps.cozystack.io` applications; none of `update`, `deletecollection`, `escalate`, `bind`,
/// `impersonate`; no Secrets, except `get` for the [`SECRET_READERS`]; the binding names
/// `cozy-backups:<component>` and the ServiceAccount `<component>`.
pub fn assert_least_privilege(component: &str) -> Vec<Rule> {
    let path = crate::workspace_root()
        .join("deploy")
        .join(component)
        .join("rbac.yaml");
    let rules = cluster_role_rules(&path);
    let has = |list: &[String], x: &str| list.iter().any(|v| v == x);
    for rule in &rules {
        assert!(
            !has(&rule.groups, "*") && !has(&rule.verbs, "*"),
            "wildcard in {rule:?}"
        );
        if has(&rule.resources, "*") {
            assert_eq!(
                (rule.groups.as_slice(), rule.verbs.as_slice()),
                (
                    &["apps.cozystack.io".to_owned()][..],
                    &["get".to_owned()][..]
                ),
                "a wildcard resource other than reading applications"
            );
        }
        for forbidden in [
            "deletecollection",
            "escalate",
            "bind",
            "impersonate",
            "update",
        ] {
            assert!(!has(&rule.verbs, forbidden), "{forbidden} in {rule:?}");
        }
        if has(&rule.resources, "secrets") {
            // Only the components listed in SECRET_READERS read Secrets, and only with `get`.
            assert!(
                SECRET_READERS.iter().any(|(c, _)| *c == component)
                    && rule.verbs == ["get"]
                    && rule.resources == ["secrets"],
                "{component} reads no credentials: {rule:?}"
            );
        }
    }
    let binding = manifests(component, "rbac.yaml")
        .into_iter()
        .find(|d| d["kind"] == "ClusterRoleBinding")
        .expect("a ClusterRoleBinding");
    assert_eq!(
        binding["roleRef"]["name"].as_str(),
        Some(format!("cozy-backups:{component}").as_str())
    );
    assert_eq!(binding["subjects"][0]["name"].as_str(), Some(component));
    rules
}

/// The YAML documents of `deploy/<component>/<file>`.
pub fn manifests(component: &str, file: &str) -> Vec<Value> {
    let path = crate::workspace_root()
        .join("deploy")
        .join(component)
        .join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| {
            serde::Deserialize::deserialize(d)
                .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
        })
        .collect()
}

/// The env var names of the first container of `deploy/<component>/deployment.yaml`.
pub fn deployment_env(component: &str) -> std::collections::BTreeSet<String> {
    let deployment = &manifests(component, "deployment.yaml")[0];
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_sequence()
        .map(|env| {
            env.iter()
                .filter_map(|e| e["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Checks `deploy/<component>/deployment.yaml` of a daemon scaled out on the lease service
/// against the env vars its binary reads (`known`): every env var set is read, the pod runs as
/// the component's ServiceAccount, there are several replicas, and the lease endpoint and the pod
/// name (its lease identity) are set.
pub fn assert_scaled_out_deployment(component: &str, known: &std::collections::BTreeSet<String>) {
    let env = deployment_env(component);
    let unknown: Vec<&String> = env.difference(known).collect();
    assert!(unknown.is_empty(), "env the binary ignores: {unknown:?}");
    let deployment = &manifests(component, "deployment.yaml")[0];
    assert_eq!(
        deployment["spec"]["template"]["spec"]["serviceAccountName"].as_str(),
        Some(component)
    );
    assert!(
        deployment["spec"]["replicas"].as_u64().unwrap_or(0) > 1,
        "{component}: one replica"
    );
    assert!(env.contains("LEASE_ENDPOINT") && env.contains("POD_NAME"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(
        verb: &str,
        group: &str,
        resource: &str,
        sub: Option<&str>,
        name: Option<&str>,
    ) -> Request {
        Request {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            namespace: Some("ns".into()),
            name: name.map(str::to_owned),
            subresource: sub.map(str::to_owned),
            code: 200,
            user_agent: "d/1".into(),
            query: String::new(),
            time: String::new(),
            user: String::new(),
        }
    }

    #[test]
    fn rules_match_group_resource_subresource_verb_and_names() {
        let rule = Rule {
            groups: vec!["g".into()],
            resources: vec!["things".into(), "things/status".into()],
            verbs: vec!["get".into(), "patch".into()],
            names: vec![],
        };
        assert!(rule.allows(&req("get", "g", "things", None, Some("a"))));
        assert!(rule.allows(&req("patch", "g", "things", Some("status"), Some("a"))));
        assert!(!rule.allows(&req("patch", "g", "things", Some("scale"), Some("a"))));
        assert!(!rule.allows(&req("get", "", "things", None, Some("a"))));
        assert!(!rule.allows(&req("delete", "g", "things", None, Some("a"))));
        let named = Rule {
            names: vec!["a".into()],
            verbs: vec!["get".into(), "list".into()],
            ..rule
        };
        assert!(named.allows(&req("get", "g", "things", None, Some("a"))));
        assert!(!named.allows(&req("get", "g", "things", None, Some("b"))));
        assert!(!named.allows(&req("list", "g", "things", None, None)));
    }
}
