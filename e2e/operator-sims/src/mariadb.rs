//! Simulated mariadb-operator (`k8s.mariadb.com/v1alpha1`): one-shot logical `Backup`s move through
//! the `Complete` condition exactly as the operator's `SetCompleteWithJob` writes it for the dump Job
//! it runs.
//!
//! ```text
//!  Backup (no spec.schedule, not complete)
//!    mariaDbRef names no MariaDB ─► Complete=False/Failed "MariaDB not found" (retried on changes)
//!    dump Job started           ─► Complete=False/JobRunning "Running"
//!    ├─ default                 ─► Complete=True/JobComplete "Success"
//!    ├─ fail-backup             ─► Complete=True/JobFailed "Failed"   (what the operator writes)
//!    └─ hang                    ─► stays JobRunning until the annotation goes
//! ```
//!
//! Test controls are annotations on the operator `MariaDB` the Backup names
//! ([`crate::cnpg::ANNOTATION_FAIL_BACKUP`] with any value: the operator's message is always
//! `Failed`; [`crate::cnpg::ANNOTATION_HANG`] `"true"`). No dump runs: no Job, no Pod, no bytes in
//! the bucket (see `docs/dataplane.md`).

use std::sync::Arc;

use api::thirdparty::mariadb::{Backup, MariaDB};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::cache::{Cache, spawn_watches};
use crate::cnpg::{ANNOTATION_FAIL_BACKUP, ANNOTATION_HANG};
use crate::conditions::{annotations, condition, now, patch_status, with_condition};

/// Field manager of the simulated operator.
pub const FIELD_MANAGER: &str = "operator-sims-mariadb";

/// The `Complete` condition a Backup should show next, given the MariaDB it names (`None`: it does
/// not exist); `None` when the Backup is finished or already shows it.
pub fn next_condition(backup: &Value, mariadb: Option<&Value>) -> Option<Value> {
    if backup["spec"]["schedule"].is_object() {
        return None;
    }
    let current = backup["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Complete");
    if current.is_some_and(|c| c["status"] == "True") {
        return None;
    }
    let Some(mariadb) = mariadb else {
        return Some(condition("Complete", false, "Failed", "MariaDB not found"));
    };
    let controls = annotations(mariadb);
    let running = current.is_some_and(|c| c["reason"] == "JobRunning");
    if !running {
        return Some(condition("Complete", false, "JobRunning", "Running"));
    }
    if controls.get(ANNOTATION_HANG).map(String::as_str) == Some("true") {
        return None;
    }
    if controls.contains_key(ANNOTATION_FAIL_BACKUP) {
        return Some(condition("Complete", true, "JobFailed", "Failed"));
    }
    Some(condition("Complete", true, "JobComplete", "Success"))
}

/// Runs the simulator forever.
pub async fn run(client: kube::Client, readiness: runtime::Readiness) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let backups = Arc::new(Cache::default());
    let servers = Arc::new(Cache::default());
    let backup_ar = ApiResource::erase::<Backup>(&());
    spawn_watches(
        &client,
        &readiness,
        &notify,
        vec![
            (&backups, backup_ar.clone(), "mariadb: watch Backup"),
            (
                &servers,
                ApiResource::erase::<MariaDB>(&()),
                "mariadb: watch MariaDB",
            ),
        ],
    );
    loop {
        notify.notified().await;
        for ((ns, name), backup) in backups.snapshot() {
            let server_name = backup["spec"]["mariaDbRef"]["name"].as_str().unwrap_or("");
            let server = servers.get(&ns, server_name);
            let Some(cond) = next_condition(&backup, server.as_ref()) else {
                continue;
            };
            let Some(conditions) =
                with_condition(&backup["status"]["conditions"], cond.clone(), &now())
            else {
                continue;
            };
            tracing::info!(namespace = ns, name, reason = %cond["reason"], status = %cond["status"], "Backup Complete condition");
            patch_status(
                &client,
                &backup_ar,
                &backups,
                FIELD_MANAGER,
                &ns,
                &name,
                json!({ "conditions": conditions }),
            )
            .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(reason: Option<(&str, &str)>) -> Value {
        let mut b =
            json!({"metadata": {"name": "b"}, "spec": {"mariaDbRef": {"name": "mariadb-shop"}}});
        if let Some((status, reason)) = reason {
            b["status"] =
                json!({"conditions": [{"type": "Complete", "status": status, "reason": reason}]});
        }
        b
    }

    fn server(annotations: Value) -> Value {
        json!({"metadata": {"name": "mariadb-shop", "annotations": annotations}})
    }

    #[test]
    fn the_complete_condition_follows_the_dump_job() {
        let plain = server(json!({}));
        let reason = |c: Option<Value>| c.map(|c| (c["status"].clone(), c["reason"].clone()));
        assert_eq!(
            reason(next_condition(&backup(None), None)),
            Some((json!("False"), json!("Failed")))
        );
        assert_eq!(
            reason(next_condition(&backup(None), Some(&plain))),
            Some((json!("False"), json!("JobRunning")))
        );
        assert_eq!(
            reason(next_condition(
                &backup(Some(("False", "Failed"))),
                Some(&plain)
            )),
            Some((json!("False"), json!("JobRunning"))),
            "the MariaDB appeared"
        );
        let running = backup(Some(("False", "JobRunning")));
        assert_eq!(
            reason(next_condition(&running, Some(&plain))),
            Some((json!("True"), json!("JobComplete")))
        );
        assert_eq!(
            reason(next_condition(
                &running,
                Some(&server(json!({ANNOTATION_FAIL_BACKUP: "boom"})))
            )),
            Some((json!("True"), json!("JobFailed")))
        );
        assert_eq!(
            next_condition(&running, Some(&server(json!({ANNOTATION_HANG: "true"})))),
            None
        );
        assert_eq!(
            next_condition(&backup(Some(("True", "JobComplete"))), Some(&plain)),
            None
        );
        assert_eq!(
            next_condition(&backup(Some(("True", "JobFailed"))), Some(&plain)),
            None,
            "finished either way"
        );
    }
}
