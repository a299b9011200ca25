//! Simulated Job controller (kube-controller-manager's, for `batch/v1` Jobs): the kube emulator has
//! no workload controllers, so this moves Jobs through the status the real controller writes for a
//! single-pod Job (`completions` 1), without running a pod.
//!
//! ```text
//!  Job (not suspended, no startTime) ─► startTime, active 1, ready 0, terminating 0
//!  started ─► default     ─► SuccessCriteriaMet + Complete (True, CompletionsReached, "Reached expected
//!                            number of succeeded pods"), succeeded 1, completionTime, active gone
//!          ─► fail-backup ─► FailureTarget + Failed (True, BackoffLimitExceeded, "Job has reached the
//!                            specified backoff limit"), failed backoffLimit+1, active gone
//!          ─► hang        ─► stays active until the annotation goes
//!  Complete or Failed: terminal.
//! ```
//!
//! Test controls are annotations on the Job's pod template (set through a strategy's template) or
//! on the Job itself (which win, so a test can end a hang): [`crate::cnpg::ANNOTATION_FAIL_BACKUP`]
//! (any value) and [`crate::cnpg::ANNOTATION_HANG`] (`"true"`). The restore controls
//! [`crate::cnpg::ANNOTATION_FAIL_RESTORE`] (any non-empty value) and
//! [`crate::cnpg::ANNOTATION_HANG_RESTORE`] (`"true"`) do the same; as their empty value does
//! nothing, a strategy's template can fail or hold only its restore Jobs
//! (`'{{ if eq .Mode "restore" }}true{{ end }}'`: annotation keys are not rendered). Backup and
//! restore Jobs are alike to this controller.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::cache::{Cache, spawn_watches};
use crate::cnpg::{
    ANNOTATION_FAIL_BACKUP, ANNOTATION_FAIL_RESTORE, ANNOTATION_HANG, ANNOTATION_HANG_RESTORE,
};
use crate::conditions::{annotations, now, patch_status};

/// Field manager of the simulated controller.
pub const FIELD_MANAGER: &str = "operator-sims-job-controller";
/// The real controller's message of a completed Job.
pub const COMPLETED_MESSAGE: &str = "Reached expected number of succeeded pods";
/// The real controller's message of a Job out of retries.
pub const BACKOFF_MESSAGE: &str = "Job has reached the specified backoff limit";

/// The controls in force: the pod template's annotations overlaid by the Job's own.
fn controls(job: &Value) -> BTreeMap<String, String> {
    let mut c = annotations(&job["spec"]["template"]);
    c.extend(annotations(job));
    c
}

fn is_finished(job: &Value) -> bool {
    job["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| (c["type"] == "Complete" || c["type"] == "Failed") && c["status"] == "True")
}

fn job_condition(type_: &str, reason: &str, message: &str, now: &str) -> Value {
    json!({
        "type": type_, "status": "True", "reason": reason, "message": message,
        "lastProbeTime": now, "lastTransitionTime": now,
    })
}

/// The status merge patch that moves `job` on at `now`; `None` when there is nothing to do.
pub fn next_status(job: &Value, now: &str) -> Option<Value> {
    if is_finished(job) || job["spec"]["suspend"] == true {
        return None;
    }
    if job["status"]["startTime"].is_null() {
        return Some(json!({
            "startTime": now, "active": 1, "ready": 0, "terminating": 0,
            "uncountedTerminatedPods": {},
        }));
    }
    let controls = controls(job);
    if [ANNOTATION_HANG, ANNOTATION_HANG_RESTORE]
        .iter()
        .any(|k| controls.get(*k).map(String::as_str) == Some("true"))
    {
        return None;
    }
    let mut conditions: Vec<Value> = job["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let fails = controls.contains_key(ANNOTATION_FAIL_BACKUP)
        || controls
            .get(ANNOTATION_FAIL_RESTORE)
            .is_some_and(|v| !v.is_empty());
    if fails {
        let retries = job["spec"]["backoffLimit"].as_i64().unwrap_or(6);
        conditions.push(job_condition(
            "FailureTarget",
            "BackoffLimitExceeded",
            BACKOFF_MESSAGE,
            now,
        ));
        conditions.push(job_condition(
            "Failed",
            "BackoffLimitExceeded",
            BACKOFF_MESSAGE,
            now,
        ));
        return Some(json!({
            "active": null, "ready": 0, "failed": retries + 1, "conditions": conditions,
        }));
    }
    conditions.push(job_condition(
        "SuccessCriteriaMet",
        "CompletionsReached",
        COMPLETED_MESSAGE,
        now,
    ));
    conditions.push(job_condition(
        "Complete",
        "CompletionsReached",
        COMPLETED_MESSAGE,
        now,
    ));
    Some(json!({
        "active": null, "ready": 0, "succeeded": 1, "completionTime": now,
        "conditions": conditions,
    }))
}

/// Runs the simulator forever.
pub async fn run(client: kube::Client, readiness: runtime::Readiness) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let jobs = Arc::new(Cache::default());
    let ar = ApiResource::erase::<Job>(&());
    spawn_watches(
        &client,
        &readiness,
        &notify,
        vec![(&jobs, ar.clone(), "jobs: watch Job")],
    );
    loop {
        notify.notified().await;
        for ((ns, name), job) in jobs.snapshot() {
            let Some(status) = next_status(&job, &now()) else {
                continue;
            };
            tracing::info!(namespace = ns, name, status = %status, "Job status");
            patch_status(&client, &ar, &jobs, FIELD_MANAGER, &ns, &name, status).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(template_annotations: Value, status: Value) -> Value {
        json!({"metadata": {"name": "j"},
               "spec": {"backoffLimit": 2, "template": {"metadata": {"annotations": template_annotations}}},
               "status": status})
    }

    #[test]
    fn a_job_starts_then_completes() {
        let new = job(json!({}), json!({}));
        let started = next_status(&new, "t1").unwrap();
        assert_eq!(started["startTime"], "t1");
        assert_eq!(started["active"], 1);
        let running = job(json!({}), json!({"startTime": "t1", "active": 1}));
        let done = next_status(&running, "t2").unwrap();
        assert_eq!(done["succeeded"], 1);
        assert_eq!(done["completionTime"], "t2");
        assert_eq!(done["active"], Value::Null);
        let types: Vec<&str> = done["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["SuccessCriteriaMet", "Complete"]);
        assert_eq!(done["conditions"][1]["message"], COMPLETED_MESSAGE);
        let finished = job(
            json!({}),
            json!({"startTime": "t1", "conditions": done["conditions"]}),
        );
        assert_eq!(next_status(&finished, "t3"), None);
    }

    #[test]
    fn controls_fail_or_hold_a_job() {
        let failing = job(
            json!({ANNOTATION_FAIL_BACKUP: "x"}),
            json!({"startTime": "t1", "active": 1}),
        );
        let failed = next_status(&failing, "t2").unwrap();
        assert_eq!(failed["failed"], 3, "backoffLimit + 1 pods failed");
        assert_eq!(failed["conditions"][1]["type"], "Failed");
        assert_eq!(failed["conditions"][1]["reason"], "BackoffLimitExceeded");
        assert_eq!(failed["conditions"][1]["message"], BACKOFF_MESSAGE);
        let mut hanging = job(
            json!({ANNOTATION_HANG: "true"}),
            json!({"startTime": "t1", "active": 1}),
        );
        assert_eq!(next_status(&hanging, "t2"), None);
        hanging["metadata"]["annotations"] = json!({ANNOTATION_HANG: "false"});
        assert!(
            next_status(&hanging, "t2").is_some(),
            "the Job's own annotation wins"
        );
        let mut suspended = job(json!({}), json!({}));
        suspended["spec"]["suspend"] = json!(true);
        assert_eq!(next_status(&suspended, "t1"), None);
    }

    #[test]
    fn restore_controls_act_only_when_set() {
        let running = json!({"startTime": "t1", "active": 1});
        let with = |a: Value| job(a, running.clone());
        let failed = next_status(&with(json!({ANNOTATION_FAIL_RESTORE: "true"})), "t2").unwrap();
        assert_eq!(failed["conditions"][1]["type"], "Failed");
        assert_eq!(
            next_status(&with(json!({ANNOTATION_HANG_RESTORE: "true"})), "t2"),
            None
        );
        let backup_mode = with(json!({ANNOTATION_FAIL_RESTORE: "", ANNOTATION_HANG_RESTORE: ""}));
        assert_eq!(
            next_status(&backup_mode, "t2").unwrap()["conditions"][1]["type"],
            "Complete",
            "a template's restore-only control renders empty on a backup Job"
        );
    }
}
