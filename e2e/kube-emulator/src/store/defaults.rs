//! Server-side defaulting of the built-in kinds (what kube-apiserver's defaulters and strategies fill in).

use base64::Engine;
use serde_json::{Value, json};

use super::State;
use crate::kinds::Kind;

impl State {
    /// Server-side defaulting for the built-in kinds. `old` is the stored view on updates.
    pub(super) fn defaults(&mut self, kind: &Kind, obj: &mut Value, old: Option<&Value>) {
        if kind.custom {
            return;
        }
        let create = old.is_none();
        match kind.kind.as_str() {
            "Secret" => {
                if let Some(sd) = obj.as_object_mut().and_then(|m| m.remove("stringData"))
                    && let Some(sd) = sd.as_object()
                {
                    for (k, v) in sd {
                        let enc = base64::engine::general_purpose::STANDARD
                            .encode(v.as_str().unwrap_or_default());
                        obj["data"][k] = json!(enc);
                    }
                }
                if obj["type"].is_null() {
                    obj["type"] = json!("Opaque");
                }
            }
            "Namespace" => {
                if obj["spec"]["finalizers"].is_null() {
                    obj["spec"]["finalizers"] = json!(["kubernetes"]);
                }
                if create || obj["status"]["phase"].is_null() {
                    obj["status"]["phase"] = json!("Active");
                }
            }
            "Pod" => {
                pod_spec(&mut obj["spec"]);
                if obj["spec"]["enableServiceLinks"].is_null() {
                    obj["spec"]["enableServiceLinks"] = json!(true);
                }
                if create {
                    obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"});
                }
            }
            "PersistentVolumeClaim" => {
                if obj["spec"]["volumeMode"].is_null() {
                    obj["spec"]["volumeMode"] = json!("Filesystem");
                }
                if create {
                    obj["status"] = json!({"phase": "Pending"});
                }
            }
            "Service" => {
                let spec = &mut obj["spec"];
                if spec["type"].is_null() {
                    spec["type"] = json!("ClusterIP");
                }
                if spec["sessionAffinity"].is_null() {
                    spec["sessionAffinity"] = json!("None");
                }
                if spec["clusterIP"].is_null() && spec["type"] != "ExternalName" {
                    let ip = match old.and_then(|o| o["spec"]["clusterIP"].as_str()) {
                        Some(ip) => ip.to_string(),
                        None => {
                            let n = self.next_cluster_ip;
                            self.next_cluster_ip += 1;
                            format!("10.96.{}.{}", n / 250, n % 250 + 1)
                        }
                    };
                    spec["clusterIP"] = json!(ip);
                }
                if spec["clusterIPs"].is_null() && spec["clusterIP"].is_string() {
                    spec["clusterIPs"] = json!([spec["clusterIP"].clone()]);
                }
                if let Some(ports) = spec["ports"].as_array_mut() {
                    for p in ports {
                        if p["protocol"].is_null() {
                            p["protocol"] = json!("TCP");
                        }
                        if p["targetPort"].is_null() {
                            p["targetPort"] = p["port"].clone();
                        }
                    }
                }
            }
            "Deployment" => {
                let spec = &mut obj["spec"];
                if spec["replicas"].is_null() {
                    spec["replicas"] = json!(1);
                }
                let strategy = &mut spec["strategy"];
                if strategy["type"].is_null() {
                    strategy["type"] = json!("RollingUpdate");
                }
                if strategy["type"] == "RollingUpdate" {
                    let ru = &mut strategy["rollingUpdate"];
                    for k in ["maxUnavailable", "maxSurge"] {
                        if ru[k].is_null() {
                            ru[k] = json!("25%");
                        }
                    }
                }
                if spec["revisionHistoryLimit"].is_null() {
                    spec["revisionHistoryLimit"] = json!(10);
                }
                if spec["progressDeadlineSeconds"].is_null() {
                    spec["progressDeadlineSeconds"] = json!(600);
                }
                pod_spec(&mut spec["template"]["spec"]);
            }
            "Job" => {
                let spec = &mut obj["spec"];
                if spec["completions"].is_null() && spec["parallelism"].is_null() {
                    spec["completions"] = json!(1);
                }
                if spec["parallelism"].is_null() {
                    spec["parallelism"] = json!(1);
                }
                if spec["backoffLimit"].is_null() {
                    spec["backoffLimit"] = json!(if spec["backoffLimitPerIndex"].is_null() {
                        6
                    } else {
                        i32::MAX
                    });
                }
                if spec["completionMode"].is_null() {
                    spec["completionMode"] = json!("NonIndexed");
                }
                if spec["suspend"].is_null() {
                    spec["suspend"] = json!(false);
                }
                if spec["podReplacementPolicy"].is_null() {
                    spec["podReplacementPolicy"] = json!(if spec["podFailurePolicy"].is_null() {
                        "TerminatingOrFailed"
                    } else {
                        "Failed"
                    });
                }
                pod_spec(&mut spec["template"]["spec"]);
                // A Job with no labels of its own takes its pod template's (before the generated ones).
                let template_labels = obj["spec"]["template"]["metadata"]["labels"].clone();
                if template_labels.is_object()
                    && obj["metadata"]["labels"]
                        .as_object()
                        .is_none_or(|m| m.is_empty())
                {
                    obj["metadata"]["labels"] = template_labels;
                }
                if create && obj["spec"]["manualSelector"] != true {
                    job_selector(obj);
                }
            }
            _ => {}
        }
    }
}

/// `SetDefaults_PodSpec` and the defaulters of what a pod spec contains (containers, ports, probes,
/// volumes, field references), as applied to Pods and to the pod templates of Deployments and Jobs.
fn pod_spec(spec: &mut Value) {
    let Some(m) = spec.as_object_mut() else {
        return;
    };
    for (k, v) in [
        ("dnsPolicy", json!("ClusterFirst")),
        ("restartPolicy", json!("Always")),
        ("securityContext", json!({})),
        ("terminationGracePeriodSeconds", json!(30)),
        ("schedulerName", json!("default-scheduler")),
    ] {
        if m.get(k).is_none_or(Value::is_null) {
            m.insert(k.into(), v);
        }
    }
    for list in ["initContainers", "containers"] {
        if let Some(cs) = m.get_mut(list).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(container);
        }
    }
    if let Some(vs) = m.get_mut("volumes").and_then(Value::as_array_mut) {
        vs.iter_mut().for_each(volume);
    }
}

/// Sets `m[k] = v` unless `m` already has a non-null `k`.
fn default_to(m: &mut serde_json::Map<String, Value>, k: &str, v: Value) {
    if m.get(k).is_none_or(Value::is_null) {
        m.insert(k.into(), v);
    }
}

/// `SetDefaults_Container` plus ports, probes and env field references.
fn container(c: &mut Value) {
    let Some(c) = c.as_object_mut() else {
        return;
    };
    // `latest` (also when no tag and no digest is given) pulls always; a tag or a digest does not.
    let img = c.get("image").and_then(Value::as_str).unwrap_or_default();
    let (name, digest) = match img.split_once('@') {
        Some((n, _)) => (n, true),
        None => (img, false),
    };
    let tag = name
        .rsplit('/')
        .next()
        .and_then(|last| last.split_once(':'))
        .map(|(_, t)| t);
    let always = match tag {
        Some(t) => t == "latest",
        None => !digest,
    };
    default_to(
        c,
        "imagePullPolicy",
        json!(if always { "Always" } else { "IfNotPresent" }),
    );
    default_to(c, "terminationMessagePath", json!("/dev/termination-log"));
    default_to(c, "terminationMessagePolicy", json!("File"));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            default_to(p, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) else {
            continue;
        };
        for (k, v) in [
            ("timeoutSeconds", 1),
            ("periodSeconds", 10),
            ("successThreshold", 1),
            ("failureThreshold", 3),
        ] {
            default_to(p, k, json!(v));
        }
        if let Some(h) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
            default_to(h, "path", json!("/"));
            default_to(h, "scheme", json!("HTTP"));
        }
    }
    for e in c
        .get_mut("env")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(r) = e
            .get_mut("valueFrom")
            .and_then(|v| v.get_mut("fieldRef"))
            .and_then(Value::as_object_mut)
        {
            default_to(r, "apiVersion", json!("v1"));
        }
    }
}

/// `SetDefaults_Volume` and the volume sources' `defaultMode` (0644).
fn volume(v: &mut Value) {
    let Some(m) = v.as_object_mut() else {
        return;
    };
    if m.keys().all(|k| k == "name") {
        m.insert("emptyDir".into(), json!({}));
    }
    for source in ["secret", "configMap", "projected", "downwardAPI"] {
        if let Some(s) = m.get_mut(source).and_then(Value::as_object_mut)
            && !s.contains_key("defaultMode")
        {
            s.insert("defaultMode".into(), json!(420));
        }
    }
}

/// The Job strategy's `generateSelector`: the pod template gets the job-name and controller-uid labels
/// (the `batch.kubernetes.io/` ones and the legacy ones), and the selector selects the controller uid.
fn job_selector(obj: &mut Value) {
    let name = obj["metadata"]["name"].clone();
    let uid = obj["metadata"]["uid"].clone();
    let labels = &mut obj["spec"]["template"]["metadata"]["labels"];
    if !labels.is_object() {
        *labels = json!({});
    }
    for (k, v) in [
        ("job-name", &name),
        ("batch.kubernetes.io/job-name", &name),
        ("controller-uid", &uid),
        ("batch.kubernetes.io/controller-uid", &uid),
    ] {
        if labels[k].is_null() {
            labels[k] = v.clone();
        }
    }
    let ml = &mut obj["spec"]["selector"]["matchLabels"];
    if !ml.is_object() {
        *ml = json!({});
    }
    if ml["batch.kubernetes.io/controller-uid"].is_null() {
        ml["batch.kubernetes.io/controller-uid"] = uid;
    }
}
