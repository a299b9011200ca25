//! Checks of `deploy/monitoring/`: reading the PrometheusRule and the Grafana dashboard, turning
//! them into inputs `promtool` accepts, finding every metric name a PromQL expression selects, and
//! comparing those names with what the daemons really export.
//!
//! The promtool checks live in this crate's tests; the metric-name check needs daemons that did
//! real work and runs in the dev control plane's test (`e2e/devcluster`), which scrapes every
//! daemon after its demo backup, restore and failed-job cleanup.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_yaml::Value;

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the crate lives in e2e/<name>")
        .to_path_buf()
}

/// `deploy/monitoring/`.
pub fn monitoring_dir() -> PathBuf {
    workspace_root().join("deploy/monitoring")
}

/// Reads and parses a YAML or JSON file, naming the file on failure.
fn read_yaml(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_yaml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The PrometheusRule manifest `deploy/monitoring/prometheusrule.yaml`.
pub fn prometheus_rule() -> Result<Value, String> {
    read_yaml(&monitoring_dir().join("prometheusrule.yaml"))
}

/// A plain Prometheus rules file (`groups:`) holding the PrometheusRule's `spec.groups`.
pub fn plain_rules(rule: &Value) -> Result<String, String> {
    if rule["apiVersion"].as_str() != Some("monitoring.coreos.com/v1")
        || rule["kind"].as_str() != Some("PrometheusRule")
    {
        return Err("apiVersion/kind: not a monitoring.coreos.com/v1 PrometheusRule".into());
    }
    let groups = rule["spec"]["groups"].clone();
    if !groups.is_sequence() {
        return Err("spec.groups: missing or not a list".into());
    }
    let mut doc = serde_yaml::Mapping::new();
    doc.insert("groups".into(), groups);
    serde_yaml::to_string(&doc).map_err(|e| e.to_string())
}

/// One alerting rule of the PrometheusRule.
#[derive(Clone, Debug)]
pub struct Alert {
    /// `alert`.
    pub name: String,
    /// `expr`.
    pub expr: String,
    /// `annotations.runbook_url`, if set.
    pub runbook_url: Option<String>,
}

/// Every alerting rule in the PrometheusRule.
pub fn alerts(rule: &Value) -> Vec<Alert> {
    let mut out = Vec::new();
    for group in rule["spec"]["groups"].as_sequence().into_iter().flatten() {
        for r in group["rules"].as_sequence().into_iter().flatten() {
            if let Some(name) = r["alert"].as_str() {
                out.push(Alert {
                    name: name.to_owned(),
                    expr: r["expr"].as_str().unwrap_or_default().to_owned(),
                    runbook_url: r["annotations"]["runbook_url"].as_str().map(str::to_owned),
                });
            }
        }
    }
    out
}

/// The Grafana dashboard `deploy/monitoring/dashboard.json`.
pub fn dashboard() -> Result<serde_json::Value, String> {
    let path = monitoring_dir().join("dashboard.json");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// One query of a dashboard panel.
#[derive(Clone, Debug)]
pub struct Query {
    /// The panel's title.
    pub panel: String,
    /// The target's `refId`.
    pub ref_id: String,
    /// The PromQL expression as written in the dashboard.
    pub expr: String,
}

/// Every target expression of every panel, rows' nested panels included.
pub fn dashboard_queries(dash: &serde_json::Value) -> Vec<Query> {
    fn walk(panels: &serde_json::Value, out: &mut Vec<Query>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(expr) = t["expr"].as_str() {
                    out.push(Query {
                        panel: p["title"].as_str().unwrap_or_default().to_owned(),
                        ref_id: t["refId"].as_str().unwrap_or_default().to_owned(),
                        expr: expr.to_owned(),
                    });
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dash["panels"], &mut out);
    out
}

/// Grafana's range variables replaced by a fixed duration, so that Prometheus can parse the query.
pub fn without_grafana_variables(expr: &str) -> String {
    ["$__rate_interval", "$__interval", "$__range"]
        .iter()
        .fold(expr.to_owned(), |e, v| e.replace(v, "5m"))
}

/// A rules file with one recording rule per dashboard query (`promtool check rules` parses each).
pub fn queries_as_recording_rules(queries: &[Query]) -> String {
    let rules: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let mut m = serde_yaml::Mapping::new();
            m.insert("record".into(), format!("dashboard:query_{i}").into());
            m.insert("expr".into(), without_grafana_variables(&q.expr).into());
            Value::Mapping(m)
        })
        .collect();
    let mut group = serde_yaml::Mapping::new();
    group.insert("name".into(), "dashboard-queries".into());
    group.insert("rules".into(), Value::Sequence(rules));
    let mut doc = serde_yaml::Mapping::new();
    doc.insert(
        "groups".into(),
        Value::Sequence(vec![Value::Mapping(group)]),
    );
    serde_yaml::to_string(&doc).expect("a mapping of strings serialises")
}

/// A metric a PromQL expression selects.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum NameRef {
    /// `name{…}` or `{__name__="name"}`.
    Exact(String),
    /// `{__name__=~"regex"}` (anchored, as Prometheus anchors it).
    Pattern(String),
}

const AGGREGATIONS: &[&str] = &[
    "sum",
    "min",
    "max",
    "avg",
    "group",
    "stddev",
    "stdvar",
    "count",
    "count_values",
    "bottomk",
    "topk",
    "quantile",
    "limitk",
    "limit_ratio",
];
const GROUPING: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "inf", "nan"];

/// The metric names an expression selects. Handles vector selectors with and without braces,
/// `__name__` matchers, functions, aggregations with `by`/`without`, binary-operator modifiers,
/// strings, durations and subqueries; what it cannot read is an error naming the position.
pub fn metric_names(expr: &str) -> Result<Vec<NameRef>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let skip_ws = |mut j: usize| {
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        j
    };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '"' || c == '\'' || c == '`' {
            i = skip_string(&chars, i)?;
        } else if c == '{' {
            let (end, names) = matchers(&chars, i)?;
            out.extend(names);
            i = end;
        } else if c == '[' {
            i = chars[i..]
                .iter()
                .position(|&x| x == ']')
                .map(|p| i + p + 1)
                .ok_or_else(|| format!("unclosed '[' at {i}"))?;
        } else if c.is_ascii_digit()
            || (c == '.' && chars.get(i + 1).is_some_and(|d| d.is_ascii_digit()))
        {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let next = skip_ws(i);
            let lower = word.to_ascii_lowercase();
            if GROUPING.contains(&lower.as_str()) {
                // A label list follows (optional after group_left/group_right).
                if chars.get(next) == Some(&'(') {
                    i = chars[next..]
                        .iter()
                        .position(|&x| x == ')')
                        .map(|p| next + p + 1)
                        .ok_or_else(|| format!("unclosed label list after {word} at {next}"))?;
                }
            } else if KEYWORDS.contains(&lower.as_str()) {
                // Operators and modifiers; offset's duration is skipped as a number.
            } else if chars.get(next) == Some(&'(') {
                // A function call or an aggregation with its argument list.
            } else if AGGREGATIONS.contains(&lower.as_str()) {
                // `sum by (…) (…)`: the grouping keyword comes next.
            } else {
                out.push(NameRef::Exact(word));
            }
        } else {
            i += 1;
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// The index after the string literal starting at `start`.
fn skip_string(chars: &[char], start: usize) -> Result<usize, String> {
    let quote = chars[start];
    let mut j = start + 1;
    while j < chars.len() {
        if chars[j] == '\\' && quote != '`' {
            j += 2;
            continue;
        }
        if chars[j] == quote {
            return Ok(j + 1);
        }
        j += 1;
    }
    Err(format!("unclosed string at {start}"))
}

/// Reads a `{…}` matcher list at `start`; returns the index after it and any `__name__` matchers.
fn matchers(chars: &[char], start: usize) -> Result<(usize, Vec<NameRef>), String> {
    let mut names = Vec::new();
    let mut j = start + 1;
    loop {
        while j < chars.len() && (chars[j].is_whitespace() || chars[j] == ',') {
            j += 1;
        }
        match chars.get(j) {
            None => return Err(format!("unclosed '{{' at {start}")),
            Some('}') => return Ok((j + 1, names)),
            _ => {}
        }
        let label_start = j;
        while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
            j += 1;
        }
        let label: String = chars[label_start..j].iter().collect();
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        let op_start = j;
        while j < chars.len() && matches!(chars[j], '=' | '!' | '~') {
            j += 1;
        }
        let op: String = chars[op_start..j].iter().collect();
        while j < chars.len() && chars[j].is_whitespace() {
            j += 1;
        }
        if label.is_empty() || op.is_empty() || !matches!(chars.get(j), Some('"' | '\'' | '`')) {
            return Err(format!("unreadable label matcher at {label_start}"));
        }
        let end = skip_string(chars, j)?;
        let value: String = chars[j + 1..end - 1].iter().collect();
        j = end;
        if label == "__name__" {
            match op.as_str() {
                "=" => names.push(NameRef::Exact(value)),
                "=~" => names.push(NameRef::Pattern(value)),
                _ => return Err(format!("negative __name__ matcher at {label_start}")),
            }
        }
    }
}

/// Prometheus' own series, which no daemon exports.
pub const PROMETHEUS_OWN: &[&str] = &["up", "ALERTS", "ALERTS_FOR_STATE"];

/// Metrics that appear only after an event the dev control plane does not cause, with the reason.
/// Each must be a string constant in a daemon's source, which [`check_names`] verifies with a
/// search of `bins/` and `libs/`.
pub const RARE: &[(&str, &str)] = &[
    (
        "cozy_backups_retention_cleaner_refusals_total",
        "a Plan retention policy that would delete too many Backups at once",
    ),
    (
        "cozy_backups_retention_cleaner_deletion_errors_total",
        "a deletion the API refuses or fails",
    ),
    (
        "cozy_backups_backup_runner_plan_slots_total",
        "a Plan's schedule slot; the dev demos create no Plan",
    ),
    (
        "cozy_backups_restore_orchestrator_last_verified_timestamp_seconds",
        "a passed restore drill; the dev demos create no Plan with spec.verification",
    ),
    (
        "cozy_backups_restore_orchestrator_verification_expected_since_timestamp_seconds",
        "a Plan with spec.verification; the dev demos create none",
    ),
    (
        "cozy_backups_backup_runner_storage_available",
        "a job passing the storage breaker, which guards the system bucket's endpoint only with \
         the catalog on; the dev backup-runner runs without the catalog",
    ),
    (
        "cozy_backups_lease_server_grants_total",
        "a lease request; the dev daemons run single-replica without the lease service",
    ),
    (
        "cozy_backups_lease_server_renewals_total",
        "a lease renewal; the dev daemons run single-replica without the lease service",
    ),
    (
        "cozy_backups_lease_server_expirations_total",
        "a lease expiring; the dev daemons run single-replica without the lease service",
    ),
];

/// Name patterns whose metrics appear only after a rare event, with the quoted string literals
/// that compose the names in the source (checked like [`RARE`]): the reconcile failure counters
/// exist only after a failed run, and libs/runtime builds their names from the daemon's name.
pub const RARE_PATTERNS: &[(&str, &[&str])] = &[(
    "cozy_backups_.+_reconcile_failures_total",
    &["cozy_backups_{}_reconcile", "{prefix}_failures_total"],
)];

/// The sample names (suffixes included) and the histogram base names of a Prometheus text
/// exposition.
pub fn exposition_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            if let (Some(name), Some(kind)) = (parts.next(), parts.next()) {
                names.insert(name.to_owned());
                if kind == "histogram" || kind == "summary" {
                    for suffix in ["_bucket", "_sum", "_count"] {
                        names.insert(format!("{name}{suffix}"));
                    }
                }
            }
        } else if !line.is_empty() && !line.starts_with('#') {
            let end = line
                .find(|c: char| c == '{' || c.is_whitespace())
                .unwrap_or(line.len());
            names.insert(line[..end].to_owned());
        }
    }
    names
}

/// Whether `name` is a quoted string in a Rust source file under `bins/` or `libs/`.
pub fn is_source_constant(name: &str) -> bool {
    fn search(dir: &Path, needle: &str) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n == "target") {
                    continue;
                }
                if search(&p, needle) {
                    return true;
                }
            } else if p.extension().is_some_and(|x| x == "rs")
                && std::fs::read_to_string(&p).is_ok_and(|t| t.contains(needle))
            {
                return true;
            }
        }
        false
    }
    let needle = format!("\"{name}\"");
    let root = workspace_root();
    search(&root.join("bins"), &needle) || search(&root.join("libs"), &needle)
}

/// Every name the monitoring files select, each with where it is used.
pub fn referenced_names() -> Result<Vec<(NameRef, String)>, String> {
    let mut out = Vec::new();
    for a in alerts(&prometheus_rule()?) {
        for n in metric_names(&a.expr).map_err(|e| format!("alert {}: {e}", a.name))? {
            out.push((n, format!("alert {}", a.name)));
        }
    }
    for q in dashboard_queries(&dashboard()?) {
        let expr = without_grafana_variables(&q.expr);
        for n in metric_names(&expr).map_err(|e| format!("panel {:?}: {e}", q.panel))? {
            out.push((n, format!("panel {:?} {}", q.panel, q.ref_id)));
        }
    }
    Ok(out)
}

/// Compares referenced names with the scraped ones; returns one line per name that no daemon
/// exported and that is neither Prometheus' own nor a verified [`RARE`] constant.
pub fn check_names(referenced: &[(NameRef, String)], scraped: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, used_by) in referenced {
        match name {
            NameRef::Exact(n) => {
                if PROMETHEUS_OWN.contains(&n.as_str()) || scraped.contains(n) {
                    continue;
                }
                let base = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| n.strip_suffix(s))
                    .unwrap_or(n);
                if RARE.iter().any(|(r, _)| *r == base) {
                    if !is_source_constant(base) {
                        problems.push(format!(
                            "{n} ({used_by}) is whitelisted as rare but is no string constant in bins/ or libs/"
                        ));
                    }
                    continue;
                }
                problems.push(format!("{n} ({used_by}) is exported by no daemon"));
            }
            NameRef::Pattern(p) => match regex::Regex::new(&format!("^(?:{p})$")) {
                Ok(re) if scraped.iter().any(|s| re.is_match(s)) => {}
                Ok(_) if RARE_PATTERNS.iter().any(|(r, _)| r == p) => {
                    let (_, needles) = RARE_PATTERNS.iter().find(|(r, _)| r == p).expect("found");
                    if let Some(n) = needles.iter().find(|n| !is_source_constant(n)) {
                        problems.push(format!(
                            "{{__name__=~{p:?}}} ({used_by}) is whitelisted as rare but {n:?} is no string in bins/ or libs/"
                        ));
                    }
                }
                Ok(_) => problems.push(format!(
                    "{{__name__=~{p:?}}} ({used_by}) matches no exported name"
                )),
                Err(e) => problems.push(format!("{{__name__=~{p:?}}} ({used_by}): {e}")),
            },
        }
    }
    problems
}

/// promtool, or `None` (after saying why) when it is absent and `PROMTOOL_REQUIRED` is not `1`.
/// `PROMTOOL` names the binary; otherwise it is looked up on `PATH`.
///
/// # Panics
/// When promtool is absent and `PROMTOOL_REQUIRED=1`.
pub fn promtool() -> Option<PathBuf> {
    let found = std::env::var_os("PROMTOOL")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
                .map(|d| d.join("promtool"))
                .find(|p| p.is_file())
        });
    if found.is_none() {
        let required = std::env::var("PROMTOOL_REQUIRED").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "promtool is not installed but PROMTOOL_REQUIRED=1: install Debian's prometheus package \
             (hack/install-tools.sh does) or set PROMTOOL to the binary"
        );
        println!(
            "SKIPPED: promtool is not installed (Debian package prometheus; hack/install-tools.sh); \
             set PROMTOOL_REQUIRED=1 to make this a failure"
        );
    }
    found
}

/// Runs `promtool args…` in `dir`.
pub fn run_promtool(promtool: &Path, dir: &Path, args: &[&str]) -> Output {
    Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", promtool.display()))
}

/// A fresh scratch directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct Scratch(PathBuf);

impl Scratch {
    /// Creates `<tmp>/monitoring-checks-<pid>-<name>` (emptied first).
    pub fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("monitoring-checks-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("creating a scratch directory");
        Self(dir)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exact(names: &[&str]) -> Vec<NameRef> {
        names.iter().map(|n| NameRef::Exact((*n).into())).collect()
    }

    #[test]
    fn names_of_selectors_functions_and_aggregations() {
        let got = metric_names(
            r#"histogram_quantile(0.95, sum by (le, kind) (rate(a_seconds_bucket{kind!="x"}[$__rate_interval])))"#,
        )
        .unwrap();
        assert_eq!(got, exact(&["a_seconds_bucket"]));
        let got = metric_names(
            "time() - max by (namespace) (b_ts) > 26 * 3600 unless on (namespace) c_total offset 1h",
        )
        .unwrap();
        assert_eq!(got, exact(&["b_ts", "c_total"]));
        let got = metric_names(
            r#"sum without (pod) (d) / ignoring(x) group_left e or absent(up{job="j"})"#,
        )
        .unwrap();
        assert_eq!(got, exact(&["d", "e", "up"]));
    }

    #[test]
    fn name_matchers_and_strings() {
        let got = metric_names(
            r#"label_replace({__name__=~"x_.+_total", a="}"}, "dst", "$1 up", "src", "(.*)") + {__name__="y"}"#,
        )
        .unwrap();
        assert_eq!(
            got,
            vec![
                NameRef::Exact("y".into()),
                NameRef::Pattern("x_.+_total".into())
            ]
        );
        assert!(metric_names(r#"x{a="unclosed}"#).is_err());
        assert!(metric_names(r#"{__name__!="x"}"#).is_err());
    }

    #[test]
    fn exposition_names_include_histogram_series() {
        let text = "# HELP h_seconds x\n# TYPE h_seconds histogram\nh_seconds_bucket{le=\"1\"} 0\n\
                    h_seconds_sum 0\nh_seconds_count 0\n# TYPE c_total counter\nc_total{a=\"b\"} 3\n";
        let names = exposition_names(text);
        for n in [
            "h_seconds",
            "h_seconds_bucket",
            "h_seconds_sum",
            "h_seconds_count",
            "c_total",
        ] {
            assert!(names.contains(n), "{n} in {names:?}");
        }
    }

    #[test]
    fn unknown_names_are_reported_with_their_user() {
        let scraped: BTreeSet<String> = ["c_total".to_owned(), "x_a_total".to_owned()].into();
        let refs = vec![
            (NameRef::Exact("c_total".into()), "alert A".to_owned()),
            (NameRef::Exact("up".into()), "alert B".to_owned()),
            (NameRef::Pattern("x_.+_total".into()), "panel P".to_owned()),
            (NameRef::Exact("nope_total".into()), "panel Q".to_owned()),
            (NameRef::Pattern("z_.+".into()), "panel R".to_owned()),
        ];
        let problems = check_names(&refs, &scraped);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].contains("nope_total (panel Q)"), "{problems:?}");
        assert!(problems[1].contains("z_.+"), "{problems:?}");
    }

    #[test]
    fn rare_names_are_accepted_only_as_source_constants() {
        for (name, _) in RARE {
            assert!(is_source_constant(name), "{name}");
        }
        for (_, needles) in RARE_PATTERNS {
            for n in *needles {
                assert!(is_source_constant(n), "{n}");
            }
        }
        assert!(!is_source_constant("cozy_backups_no_such_metric_total"));
        let refs = vec![
            (NameRef::Exact(RARE[0].0.into()), "alert A".to_owned()),
            (
                NameRef::Pattern(RARE_PATTERNS[0].0.into()),
                "alert B".to_owned(),
            ),
        ];
        assert!(check_names(&refs, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn plain_rules_rejects_other_kinds() {
        let v: Value = serde_yaml::from_str("apiVersion: v1\nkind: ConfigMap\n").unwrap();
        assert!(plain_rules(&v).unwrap_err().contains("apiVersion/kind"));
    }
}
