//! Table columns and cells of the built-in kinds, as kube-apiserver's printers produce them (the columns
//! `kubectl get` shows: READY, STATUS, UP-TO-DATE, TYPE, DATA, …). The server always renders the wide
//! columns; kubectl shows those with priority 1 only with `-o wide`. Column descriptions are the field
//! documentation of the Kubernetes types (from the k8s-openapi schemas), as upstream takes them from the
//! types' Swagger docs.
//!
//! Kinds without a printer here get the default columns (Name, Created At), as upstream.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use k8s_openapi::api::{apps::v1 as apps, batch::v1 as batch, core::v1 as core};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::schemars::{self, JsonSchema};
use serde_json::{Value, json};

use crate::json::{age, human_duration};
use crate::kinds::Kind;

/// The description of `field` in the schema of `T`.
fn doc<T: JsonSchema>(field: &str) -> String {
    let mut generator = schemars::SchemaGenerator::default();
    let schema = T::json_schema(&mut generator);
    schema.as_value()["properties"][field]["description"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn col(name: &str, ty: &str, priority: i64, description: String) -> Value {
    let format = if name == "Name" { "name" } else { "" };
    json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority})
}

fn name_col() -> Value {
    col("Name", "string", 0, doc::<ObjectMeta>("name"))
}

fn age_col() -> Value {
    col("Age", "string", 0, doc::<ObjectMeta>("creationTimestamp"))
}

fn template_cols(selector_doc: String) -> Vec<Value> {
    vec![
        col(
            "Containers",
            "string",
            1,
            "Names of each container in the template.".into(),
        ),
        col(
            "Images",
            "string",
            1,
            "Images referenced by each container in the template.".into(),
        ),
        col("Selector", "string", 1, selector_doc),
    ]
}

/// Column definitions per kind name (built once, on first use).
static COLUMNS: LazyLock<BTreeMap<&'static str, Vec<Value>>> = LazyLock::new(|| {
    let mut m = BTreeMap::new();
    m.insert(
        "Pod",
        vec![
            name_col(),
            col("Ready", "string", 0, "The aggregate readiness state of this pod for accepting traffic.".into()),
            col("Status", "string", 0, "The aggregate status of the containers in this pod.".into()),
            col("Restarts", "string", 0, "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.".into()),
            age_col(),
            col("IP", "string", 1, doc::<core::PodStatus>("podIP")),
            col("Node", "string", 1, doc::<core::PodSpec>("nodeName")),
            col("Nominated Node", "string", 1, doc::<core::PodStatus>("nominatedNodeName")),
            col("Readiness Gates", "string", 1, doc::<core::PodSpec>("readinessGates")),
        ],
    );
    let mut deploy = vec![
        name_col(),
        col(
            "Ready",
            "string",
            0,
            "Number of the pod with ready state".into(),
        ),
        col(
            "Up-to-date",
            "string",
            0,
            doc::<apps::DeploymentStatus>("updatedReplicas"),
        ),
        col(
            "Available",
            "string",
            0,
            doc::<apps::DeploymentStatus>("availableReplicas"),
        ),
        age_col(),
    ];
    deploy.extend(template_cols(doc::<apps::DeploymentSpec>("selector")));
    m.insert("Deployment", deploy);
    let mut job = vec![
        name_col(),
        col("Status", "string", 0, "Status of the job.".into()),
        col(
            "Completions",
            "string",
            0,
            doc::<batch::JobStatus>("succeeded"),
        ),
        col(
            "Duration",
            "string",
            0,
            "Time required to complete the job.".into(),
        ),
        age_col(),
    ];
    job.extend(template_cols(doc::<batch::JobSpec>("selector")));
    m.insert("Job", job);
    m.insert(
        "Service",
        vec![
            name_col(),
            col("Type", "string", 0, doc::<core::ServiceSpec>("type")),
            col(
                "Cluster-IP",
                "string",
                0,
                doc::<core::ServiceSpec>("clusterIP"),
            ),
            col(
                "External-IP",
                "string",
                0,
                doc::<core::ServiceSpec>("externalIPs"),
            ),
            col("Port(s)", "string", 0, doc::<core::ServiceSpec>("ports")),
            age_col(),
            col(
                "Selector",
                "string",
                1,
                doc::<core::ServiceSpec>("selector"),
            ),
        ],
    );
    m.insert(
        "Secret",
        vec![
            name_col(),
            col("Type", "string", 0, doc::<core::Secret>("type")),
            col("Data", "string", 0, doc::<core::Secret>("data")),
            age_col(),
        ],
    );
    m.insert(
        "ConfigMap",
        vec![
            name_col(),
            col("Data", "string", 0, doc::<core::ConfigMap>("data")),
            age_col(),
        ],
    );
    m.insert(
        "Namespace",
        vec![
            name_col(),
            col("Status", "string", 0, "The status of the namespace".into()),
            age_col(),
        ],
    );
    m.insert(
        "ServiceAccount",
        vec![
            name_col(),
            col(
                "Secrets",
                "string",
                0,
                doc::<core::ServiceAccount>("secrets"),
            ),
            age_col(),
        ],
    );
    m.insert(
        "Lease",
        vec![
            name_col(),
            col(
                "Holder",
                "string",
                0,
                doc::<k8s_openapi::api::coordination::v1::LeaseSpec>("holderIdentity"),
            ),
            age_col(),
        ],
    );
    m.insert(
        "Event",
        vec![
            col(
                "Last Seen",
                "string",
                0,
                doc::<core::Event>("lastTimestamp"),
            ),
            col("Type", "string", 0, doc::<core::Event>("type")),
            col("Reason", "string", 0, doc::<core::Event>("reason")),
            col("Object", "string", 0, doc::<core::Event>("involvedObject")),
            col(
                "Subobject",
                "string",
                1,
                doc::<core::ObjectReference>("fieldPath"),
            ),
            col("Source", "string", 1, doc::<core::Event>("source")),
            col("Message", "string", 0, doc::<core::Event>("message")),
            col(
                "First Seen",
                "string",
                1,
                doc::<core::Event>("firstTimestamp"),
            ),
            col("Count", "string", 1, doc::<core::Event>("count")),
            col("Name", "string", 1, doc::<ObjectMeta>("name")),
        ],
    );
    m
});

/// The printer columns of a built-in kind, if it has a printer.
pub(crate) fn columns(kind: &Kind) -> Option<Vec<Value>> {
    if kind.custom {
        return None;
    }
    COLUMNS.get(kind.kind.as_str()).cloned()
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_str().unwrap_or_default()
}

fn n(v: &Value, path: &[&str]) -> i64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_i64().unwrap_or_default()
}

/// `translateTimestampSince`: the age of a timestamp, `<unknown>` when unset.
fn since(ts: &str) -> String {
    if ts.is_empty() {
        "<unknown>".into()
    } else {
        age(ts)
    }
}

fn created(obj: &Value) -> String {
    since(s(obj, &["metadata", "creationTimestamp"]))
}

fn containers(spec: &Value) -> (String, String) {
    let cs = spec["containers"].as_array().cloned().unwrap_or_default();
    let names: Vec<&str> = cs.iter().map(|c| s(c, &["name"])).collect();
    let images: Vec<&str> = cs.iter().map(|c| s(c, &["image"])).collect();
    (names.join(","), images.join(","))
}

/// `labels.FormatLabels`: `k=v,…` sorted, `<none>` when empty.
fn format_labels(m: &Value) -> String {
    let mut pairs: Vec<String> = m
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

/// A label selector as `labels.Selector.String()` prints it (requirements sorted by key); `empty` is what
/// an empty selector prints as.
fn format_selector(sel: &Value, empty: &str) -> String {
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel["matchLabels"].as_object() {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or_default())));
        }
    }
    for r in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = s(r, &["key"]).to_string();
        let mut values: Vec<&str> = r["values"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        values.sort();
        let text = match s(r, &["operator"]) {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.clone(),
            "DoesNotExist" => format!("!{key}"),
            _ => return "<invalid>".into(),
        };
        reqs.push((key, text));
    }
    reqs.sort();
    if reqs.is_empty() {
        empty.into()
    } else {
        reqs.into_iter()
            .map(|(_, t)| t)
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn has_condition(obj: &Value, ty: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == ty))
        .is_some_and(|c| c["status"] == "True")
}

fn pod(obj: &Value) -> Vec<Value> {
    let status = &obj["status"];
    let total = obj["spec"]["containers"].as_array().map_or(0, Vec::len);
    let mut reason = s(status, &["phase"]).to_string();
    if !s(status, &["reason"]).is_empty() {
        reason = s(status, &["reason"]).to_string();
    }
    let mut ready = 0;
    let mut restarts = 0;
    let mut running = false;
    for c in status["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .rev()
    {
        restarts += n(c, &["restartCount"]);
        let state = &c["state"];
        if !s(state, &["waiting", "reason"]).is_empty() {
            reason = s(state, &["waiting", "reason"]).to_string();
        } else if !s(state, &["terminated", "reason"]).is_empty() {
            reason = s(state, &["terminated", "reason"]).to_string();
        } else if state["terminated"].is_object() {
            let signal = n(state, &["terminated", "signal"]);
            reason = if signal != 0 {
                format!("Signal:{signal}")
            } else {
                format!("ExitCode:{}", n(state, &["terminated", "exitCode"]))
            };
        } else if c["ready"] == true && state["running"].is_object() {
            running = true;
            ready += 1;
        }
    }
    if reason == "Completed" && running {
        reason = if has_condition(obj, "Ready") {
            "Running".into()
        } else {
            "NotReady".into()
        };
    }
    let phase = s(status, &["phase"]);
    if obj["metadata"]["deletionTimestamp"].is_string() && !matches!(phase, "Succeeded" | "Failed")
    {
        reason = "Terminating".into();
    }
    let or_none = |v: &str| {
        if v.is_empty() {
            "<none>".to_string()
        } else {
            v.to_string()
        }
    };
    let gates = obj["spec"]["readinessGates"]
        .as_array()
        .filter(|g| !g.is_empty())
        .map(|g| {
            let t = g
                .iter()
                .filter(|gate| has_condition(obj, s(gate, &["conditionType"])))
                .count();
            format!("{t}/{}", g.len())
        })
        .unwrap_or_else(|| "<none>".into());
    vec![
        json!(s(obj, &["metadata", "name"])),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts.to_string()),
        json!(created(obj)),
        json!(or_none(
            status["podIPs"][0]["ip"].as_str().unwrap_or_default()
        )),
        json!(or_none(s(obj, &["spec", "nodeName"]))),
        json!(or_none(s(status, &["nominatedNodeName"]))),
        json!(gates),
    ]
}

fn deployment(obj: &Value) -> Vec<Value> {
    let st = &obj["status"];
    let (names, images) = containers(&obj["spec"]["template"]["spec"]);
    vec![
        json!(s(obj, &["metadata", "name"])),
        json!(format!(
            "{}/{}",
            n(st, &["readyReplicas"]),
            n(obj, &["spec", "replicas"])
        )),
        json!(n(st, &["updatedReplicas"])),
        json!(n(st, &["availableReplicas"])),
        json!(created(obj)),
        json!(names),
        json!(images),
        json!(format_selector(&obj["spec"]["selector"], "")),
    ]
}

fn job(obj: &Value) -> Vec<Value> {
    let spec = &obj["spec"];
    let succeeded = n(&obj["status"], &["succeeded"]);
    let completions = if spec["completions"].is_number() {
        format!("{succeeded}/{}", n(spec, &["completions"]))
    } else if n(spec, &["parallelism"]) > 1 {
        format!("{succeeded}/1 of {}", n(spec, &["parallelism"]))
    } else {
        format!("{succeeded}/1")
    };
    let start = s(obj, &["status", "startTime"]);
    let end = s(obj, &["status", "completionTime"]);
    let duration = match (start.is_empty(), end.is_empty()) {
        (true, _) => String::new(),
        (false, true) => age(start),
        (false, false) => {
            match (
                chrono::DateTime::parse_from_rfc3339(start),
                chrono::DateTime::parse_from_rfc3339(end),
            ) {
                (Ok(a), Ok(b)) => human_duration((b - a).num_seconds()),
                _ => "<invalid>".into(),
            }
        }
    };
    let status = if has_condition(obj, "Complete") {
        "Complete"
    } else if has_condition(obj, "Failed") {
        "Failed"
    } else if obj["metadata"]["deletionTimestamp"].is_string() {
        "Terminating"
    } else if has_condition(obj, "Suspended") {
        "Suspended"
    } else if has_condition(obj, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = containers(&spec["template"]["spec"]);
    vec![
        json!(s(obj, &["metadata", "name"])),
        json!(status),
        json!(completions),
        json!(duration),
        json!(created(obj)),
        json!(names),
        json!(images),
        json!(format_selector(&spec["selector"], "<none>")),
    ]
}

fn service(obj: &Value) -> Vec<Value> {
    let spec = &obj["spec"];
    let ty = s(spec, &["type"]);
    let cluster_ip = spec["clusterIPs"][0].as_str().unwrap_or("<none>");
    let external: Vec<&str> = spec["externalIPs"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let external_ip = match ty {
        "ClusterIP" | "NodePort" if external.is_empty() => "<none>".to_string(),
        "ClusterIP" | "NodePort" => external.join(","),
        "LoadBalancer" => {
            let mut ingress: Vec<&str> = obj["status"]["loadBalancer"]["ingress"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|i| i["ip"].as_str().or(i["hostname"].as_str()))
                        .collect()
                })
                .unwrap_or_default();
            ingress.sort();
            ingress.dedup();
            ingress.extend(external);
            if ingress.is_empty() {
                "<pending>".into()
            } else {
                ingress.join(",")
            }
        }
        "ExternalName" => s(spec, &["externalName"]).to_string(),
        _ => "<unknown>".into(),
    };
    let ports: Vec<String> = spec["ports"]
        .as_array()
        .map(|ps| {
            ps.iter()
                .map(|p| {
                    let node = n(p, &["nodePort"]);
                    if node > 0 {
                        format!("{}:{node}/{}", n(p, &["port"]), s(p, &["protocol"]))
                    } else {
                        format!("{}/{}", n(p, &["port"]), s(p, &["protocol"]))
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let ports = if ports.is_empty() {
        "<none>".into()
    } else {
        ports.join(",")
    };
    vec![
        json!(s(obj, &["metadata", "name"])),
        json!(ty),
        json!(cluster_ip),
        json!(external_ip),
        json!(ports),
        json!(created(obj)),
        json!(format_labels(&spec["selector"])),
    ]
}

fn count(v: &Value) -> i64 {
    v.as_object().map_or(0, |m| m.len() as i64)
}

/// An event in either API's field names (core/v1 or events.k8s.io/v1).
fn event(obj: &Value) -> Vec<Value> {
    let pick = |a: &str, b: &str| {
        let x = s(obj, &[a]);
        if x.is_empty() { s(obj, &[b]) } else { x }
    };
    let regarding = if obj["involvedObject"].is_object() {
        &obj["involvedObject"]
    } else {
        &obj["regarding"]
    };
    let first_ts = pick("firstTimestamp", "deprecatedFirstTimestamp");
    let first = if first_ts.is_empty() {
        since(s(obj, &["eventTime"]))
    } else {
        since(first_ts)
    };
    let last_ts = pick("lastTimestamp", "deprecatedLastTimestamp");
    let mut last = if last_ts.is_empty() {
        first.clone()
    } else {
        since(last_ts)
    };
    let mut count = if obj["count"].is_number() {
        n(obj, &["count"])
    } else {
        n(obj, &["deprecatedCount"])
    };
    if obj["series"].is_object() {
        last = since(s(obj, &["series", "lastObservedTime"]));
        count = n(obj, &["series", "count"]);
    } else if count == 0 {
        count = 1;
    }
    let kind = s(regarding, &["kind"]).to_lowercase();
    let target = match s(regarding, &["name"]) {
        "" => kind,
        name => format!("{kind}/{name}"),
    };
    let source = &obj[if obj["source"].is_object() {
        "source"
    } else {
        "deprecatedSource"
    }];
    let component = match s(source, &["component"]) {
        "" => pick("reportingComponent", "reportingController"),
        c => c,
    };
    let instance = match s(source, &["host"]) {
        "" => s(obj, &["reportingInstance"]),
        h => h,
    };
    let source = if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    };
    vec![
        json!(last),
        json!(s(obj, &["type"])),
        json!(s(obj, &["reason"])),
        json!(target),
        json!(s(regarding, &["fieldPath"])),
        json!(source),
        json!(pick("message", "note").trim()),
        json!(first),
        json!(count),
        json!(s(obj, &["metadata", "name"])),
    ]
}

/// The cells of one object of a built-in kind with a printer.
pub(crate) fn cells(kind: &Kind, obj: &Value) -> Option<Vec<Value>> {
    if kind.custom {
        return None;
    }
    let name = || json!(s(obj, &["metadata", "name"]));
    Some(match kind.kind.as_str() {
        "Pod" => pod(obj),
        "Deployment" => deployment(obj),
        "Job" => job(obj),
        "Service" => service(obj),
        "Secret" => vec![
            name(),
            json!(s(obj, &["type"])),
            json!(count(&obj["data"])),
            json!(created(obj)),
        ],
        "ConfigMap" => vec![
            name(),
            json!(count(&obj["data"]) + count(&obj["binaryData"])),
            json!(created(obj)),
        ],
        "Namespace" => vec![
            name(),
            json!(s(obj, &["status", "phase"])),
            json!(created(obj)),
        ],
        "ServiceAccount" => vec![
            name(),
            json!(obj["secrets"].as_array().map_or(0, Vec::len)),
            json!(created(obj)),
        ],
        "Lease" => vec![
            name(),
            json!(s(obj, &["spec", "holderIdentity"])),
            json!(created(obj)),
        ],
        "Event" => event(obj),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_printer_has_as_many_cells_as_columns() {
        for k in crate::kinds::builtins() {
            if let Some(cols) = columns(&k) {
                let cells = cells(&k, &json!({"metadata": {"name": "x"}})).unwrap();
                assert_eq!(cells.len(), cols.len(), "{}", k.kind);
                assert!(
                    cols.iter()
                        .all(|c| !c["description"].as_str().unwrap().is_empty())
                );
            }
        }
    }

    #[test]
    fn selectors_print_sorted() {
        let sel = json!({"matchLabels": {"b": "2", "a": "1"},
            "matchExpressions": [{"key": "c", "operator": "In", "values": ["y", "x"]}]});
        assert_eq!(format_selector(&sel, ""), "a=1,b=2,c in (x,y)");
    }
}
