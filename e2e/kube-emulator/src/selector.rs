//! Label and field selectors as list and watch filters.
//!
//! Label selectors follow the apimachinery grammar (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`,
//! `k notin (a,b)`, `k>N`, `k<N`, comma = AND). Field selectors support `=`, `==`, `!=` on
//! `metadata.name`/`metadata.namespace` for every kind plus a few kind-specific fields; anything else is
//! rejected so that a typo fails like it does upstream.

use serde_json::Value;

use crate::kinds::Kind;

#[derive(Debug, Clone, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    Exists(String),
    NotExists(String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Gt(String, i64),
    Lt(String, i64),
}

/// A parsed label selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct LabelSelector(Vec<Req>);

fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 316
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl LabelSelector {
    /// Parses the query-string form; errors become 400 BadRequest.
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let bad = || format!("unable to parse requirement: found '{part}', invalid selector");
            let r = if let Some(k) = part.strip_prefix('!') {
                let k = k.trim();
                if !valid_key(k) {
                    return Err(bad());
                }
                Req::NotExists(k.into())
            } else if let Some(i) = part.find(" notin ").or_else(|| part.find(" in ")) {
                let (k, rest) = part.split_at(i);
                let rest = rest.trim_start();
                let (neg, rest) = match rest.strip_prefix("notin") {
                    Some(r) => (true, r),
                    None => (false, rest.strip_prefix("in").unwrap_or(rest)),
                };
                let rest = rest.trim();
                let inner = rest
                    .strip_prefix('(')
                    .and_then(|r| r.strip_suffix(')'))
                    .ok_or_else(bad)?;
                let vals: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
                let k = k.trim();
                if !valid_key(k) || vals.iter().any(|v| !valid_value(v)) {
                    return Err(bad());
                }
                if neg {
                    Req::NotIn(k.into(), vals)
                } else {
                    Req::In(k.into(), vals)
                }
            } else if let Some((k, v)) = part.split_once("!=") {
                Req::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('>') {
                Req::Gt(k.trim().into(), v.trim().parse().map_err(|_| bad())?)
            } else if let Some((k, v)) = part.split_once('<') {
                Req::Lt(k.trim().into(), v.trim().parse().map_err(|_| bad())?)
            } else {
                if !valid_key(&part) {
                    return Err(bad());
                }
                Req::Exists(part.clone())
            };
            match &r {
                Req::Eq(k, v) | Req::Ne(k, v) if !valid_key(k) || !valid_value(v) => {
                    return Err(bad());
                }
                _ => {}
            }
            reqs.push(r);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether the selector selects everything.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the object's labels satisfy every requirement.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::Gt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            Req::Lt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        })
    }
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

fn allowed_fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "Event" => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        "Pod" => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "Secret" => &["type"],
        "Namespace" => &["status.phase"],
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses the query-string form for a kind; unknown fields are 400 BadRequest, worded as upstream: the
    /// kinds with their own field-label conversion (those with extra fields, and custom resources) say
    /// `field label not supported`, the others name the two metadata fields.
    pub(crate) fn parse(s: &str, kind: &Kind) -> Result<Self, String> {
        let extra: Vec<&str> = allowed_fields(&kind.kind)
            .iter()
            .copied()
            .chain(kind.selectable_fields.iter().map(String::as_str))
            .collect();
        let namespace_ok = !kind.custom || kind.namespaced;
        let mut out = Vec::new();
        for part in split_top(s) {
            let (k, neg, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, false, v)
            } else {
                return Err(format!(
                    "invalid selector: '{part}'; can't understand '{part}'"
                ));
            };
            let k = k.trim();
            let known = k == "metadata.name"
                || (k == "metadata.namespace" && namespace_ok)
                || extra.contains(&k);
            if !known {
                return Err(if kind.custom || !allowed_fields(&kind.kind).is_empty() {
                    format!("field label not supported: {k}")
                } else {
                    format!(
                        "\"{k}\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
                    )
                });
            }
            out.push((k.to_string(), neg, v.trim().to_string()));
        }
        Ok(FieldSelector(out))
    }

    /// Whether the selector selects everything.
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the object (in the requested representation) satisfies every term.
    pub(crate) fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, neg, v)| {
            let mut cur = obj;
            for seg in k.split('.') {
                cur = &cur[seg];
            }
            let actual = match cur {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                Value::Object(o) if k == "source" => o
                    .get("component")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                other => other.to_string(),
            };
            (actual == *v) != *neg
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_grammar() {
        let obj = json!({"metadata": {"labels": {"app": "web", "tier": "3"}}});
        let cases = [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
            ("app in (web,db)", true),
            ("app notin (web,db)", false),
            ("tier>2", true),
            ("tier<2", false),
            ("app=web,tier=3", true),
            ("app=web,tier=4", false),
            ("", true),
        ];
        for (sel, want) in cases {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&obj),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("a=(b").is_err());
    }

    #[test]
    fn field_selectors() {
        let kind = |k: &str| {
            crate::kinds::builtins()
                .into_iter()
                .find(|x| x.kind == k)
                .unwrap()
        };
        let obj = json!({"metadata": {"name": "a", "namespace": "n"}});
        assert!(
            FieldSelector::parse("metadata.name=a", &kind("ConfigMap"))
                .unwrap()
                .matches(&obj)
        );
        assert!(
            !FieldSelector::parse("metadata.name!=a", &kind("ConfigMap"))
                .unwrap()
                .matches(&obj)
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=a", &kind("ConfigMap")).unwrap_err(),
            "\"spec.foo\" is not a known field selector: only \"metadata.name\", \"metadata.namespace\""
        );
        assert_eq!(
            FieldSelector::parse("spec.foo=a", &kind("Pod")).unwrap_err(),
            "field label not supported: spec.foo"
        );
    }
}
