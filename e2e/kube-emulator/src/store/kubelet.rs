//! The emulator's stand-in kubelet: pod log text supplied through the admin hook, and the Running phase
//! that comes with it.

use serde_json::{Value, json};

use super::{State, WriteOpts};
use crate::error::ApiError;
use crate::json::now;
use crate::schema::FieldValidation;
use crate::ssa::Scope;

impl State {
    /// Sets the log text of a pod container and marks the pod Running (the emulator's stand-in kubelet).
    pub(crate) fn set_pod_log(
        &mut self,
        ns: &str,
        pod: &str,
        container: Option<&str>,
        text: &str,
        append: bool,
    ) -> Result<(), ApiError> {
        let kind = self.kind("", "v1", "pods").expect("pods");
        let old = self.get(&kind, Some(ns), pod)?;
        let containers: Vec<String> = old["spec"]["containers"]
            .as_array()
            .map(|cs| {
                cs.iter()
                    .filter_map(|c| c["name"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let container = match container {
            Some(c) => c.to_string(),
            None => containers.first().cloned().unwrap_or_default(),
        };
        let entry = self
            .logs
            .entry((ns.into(), pod.into(), container))
            .or_default();
        if append {
            entry.push_str(text);
        } else {
            *entry = text.to_string();
        }
        if old["status"]["phase"] != "Running" {
            let mut new = old.clone();
            let started = now();
            new["status"]["phase"] = json!("Running");
            new["status"]["containerStatuses"] = Value::Array(
                containers
                    .iter()
                    .map(|c| {
                        json!({
                "name": c, "ready": true, "restartCount": 0, "image": "", "imageID": "",
                "state": {"running": {"startedAt": started}}})
                    })
                    .collect(),
            );
            let opts = WriteOpts {
                dry_run: false,
                manager: "kubelet".into(),
                field_validation: FieldValidation::Ignore,
            };
            self.write(
                &kind,
                Some(ns),
                pod,
                old,
                new,
                Scope::StatusOnly,
                &opts,
                false,
                false,
            )?;
        }
        Ok(())
    }
}
