//! Server-side defaulting of the built-in kinds (what kube-apiserver's defaulters and strategies fill in).

use base64::Engine;
use serde_json::{Value, json};

use super::State;
use crate::kinds::Kind;

impl State {
    /// Server-side defaulting for the built-in kinds (S8). `old` is the stored view on updates.
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
                let spec = &mut obj["spec"];
                for (k, v) in [
                    ("restartPolicy", json!("Always")),
                    ("dnsPolicy", json!("ClusterFirst")),
                    ("terminationGracePeriodSeconds", json!(30)),
                    ("schedulerName", json!("default-scheduler")),
                ] {
                    if spec[k].is_null() {
                        spec[k] = v;
                    }
                }
                if let Some(cs) = spec["containers"].as_array_mut() {
                    for c in cs {
                        if c["imagePullPolicy"].is_null() {
                            let img = c["image"].as_str().unwrap_or_default();
                            let latest = img.ends_with(":latest")
                                || !img.rsplit('/').next().unwrap_or("").contains(':');
                            c["imagePullPolicy"] =
                                json!(if latest { "Always" } else { "IfNotPresent" });
                        }
                    }
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
                if spec["strategy"].is_null() {
                    spec["strategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}});
                }
                if spec["revisionHistoryLimit"].is_null() {
                    spec["revisionHistoryLimit"] = json!(10);
                }
                if spec["progressDeadlineSeconds"].is_null() {
                    spec["progressDeadlineSeconds"] = json!(600);
                }
            }
            "Job" => {
                let spec = &mut obj["spec"];
                for (k, v) in [("backoffLimit", 6), ("completions", 1), ("parallelism", 1)] {
                    if spec[k].is_null() {
                        spec[k] = json!(v);
                    }
                }
            }
            _ => {}
        }
    }
}
