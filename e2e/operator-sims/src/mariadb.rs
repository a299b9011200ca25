//! Simulated mariadb-operator (`k8s.mariadb.com/v1alpha1`): one-shot logical `Backup`s and
//! `Restore`s move through the `Complete` condition exactly as the operator's `SetCompleteWithJob`
//! writes it for the dump (or restore) Job it runs.
//!
//! ```text
//!  Backup (no spec.schedule, not complete)
//!    mariaDbRef names no MariaDB ─► Complete=False/Failed "MariaDB not found" (retried on changes)
//!    dump Job started           ─► Complete=False/JobRunning "Running"
//!    ├─ default                 ─► Complete=True/JobComplete "Success"
//!    ├─ fail-backup             ─► Complete=True/JobFailed "Failed"   (what the operator writes)
//!    └─ hang                    ─► stays JobRunning until the annotation goes
//!  Restore: the same, with the restore controls
//! ```
//!
//! Test controls are annotations on the operator `MariaDB` the Backup or Restore names: for
//! Backups [`crate::cnpg::ANNOTATION_FAIL_BACKUP`] (any value: the operator's message is always
//! `Failed`) and [`crate::cnpg::ANNOTATION_HANG`] (`"true"`); for Restores
//! [`crate::cnpg::ANNOTATION_FAIL_RESTORE`] and [`crate::cnpg::ANNOTATION_HANG_RESTORE`]. No dump or
//! restore runs: no Job, no Pod, no bytes in the bucket (see `docs/dataplane.md`).

use std::sync::Arc;

use api::thirdparty::mariadb::{Backup, MariaDB, Restore};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::cache::{Cache, spawn_watches};
use crate::cnpg::{
    ANNOTATION_FAIL_BACKUP, ANNOTATION_FAIL_RESTORE, ANNOTATION_HANG, ANNOTATION_HANG_RESTORE,
};
use crate::conditions::{annotations, condition, now, patch_status, with_condition};

/// Field manager of the simulated operator.
pub const FIELD_MANAGER: &str = "operator-sims-mariadb";

/// The test-control annotations of one kind of one-shot object: `(fail, hang)`.
pub type Controls = (&'static str, &'static str);
/// The controls of Backups.
pub const BACKUP_CONTROLS: Controls = (ANNOTATION_FAIL_BACKUP, ANNOTATION_HANG);
/// The controls of Restores.
pub const RESTORE_CONTROLS: Controls = (ANNOTATION_FAIL_RESTORE, ANNOTATION_HANG_RESTORE);

/// The `Complete` condition a Backup or Restore should show next, given the MariaDB it names
/// (`None`: it does not exist) and the controls of its kind; `None` when the object is finished or
/// already shows it.
pub fn next_condition(
    backup: &Value,
    mariadb: Option<&Value>,
    controls: Controls,
) -> Option<Value> {
    let (fail, hang) = controls;
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
    if controls.get(hang).map(String::as_str) == Some("true") {
        return None;
    }
    if controls.contains_key(fail) {
        return Some(condition("Complete", true, "JobFailed", "Failed"));
    }
    Some(condition("Complete", true, "JobComplete", "Success"))
}

/// Runs the simulator forever.
pub async fn run(client: kube::Client, readiness: runtime::Readiness) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let backups = Arc::new(Cache::default());
    let restores = Arc::new(Cache::default());
    let servers = Arc::new(Cache::default());
    let backup_ar = ApiResource::erase::<Backup>(&());
    let restore_ar = ApiResource::erase::<Restore>(&());
    spawn_watches(
        &client,
        &readiness,
        &notify,
        vec![
            (&backups, backup_ar.clone(), "mariadb: watch Backup"),
            (&restores, restore_ar.clone(), "mariadb: watch Restore"),
            (
                &servers,
                ApiResource::erase::<MariaDB>(&()),
                "mariadb: watch MariaDB",
            ),
        ],
    );
    let kinds = [
        (&backups, &backup_ar, BACKUP_CONTROLS),
        (&restores, &restore_ar, RESTORE_CONTROLS),
    ];
    loop {
        notify.notified().await;
        for (cache, ar, controls) in kinds {
            for ((ns, name), obj) in cache.snapshot() {
                let server_name = obj["spec"]["mariaDbRef"]["name"].as_str().unwrap_or("");
                let server = servers.get(&ns, server_name);
                let Some(cond) = next_condition(&obj, server.as_ref(), controls) else {
                    continue;
                };
                let Some(conditions) =
                    with_condition(&obj["status"]["conditions"], cond.clone(), &now())
                else {
                    continue;
                };
                tracing::info!(kind = %ar.kind, namespace = ns, name, reason = %cond["reason"], status = %cond["status"], "Complete condition");
                patch_status(
                    &client,
                    ar,
                    cache,
                    FIELD_MANAGER,
                    &ns,
                    &name,
                    json!({ "conditions": conditions }),
                )
                .await;
            }
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
            reason(next_condition(&backup(None), None, BACKUP_CONTROLS)),
            Some((json!("False"), json!("Failed")))
        );
        assert_eq!(
            reason(next_condition(&backup(None), Some(&plain), BACKUP_CONTROLS)),
            Some((json!("False"), json!("JobRunning")))
        );
        assert_eq!(
            reason(next_condition(
                &backup(Some(("False", "Failed"))),
                Some(&plain),
                BACKUP_CONTROLS
            )),
            Some((json!("False"), json!("JobRunning"))),
            "the MariaDB appeared"
        );
        let running = backup(Some(("False", "JobRunning")));
        assert_eq!(
            reason(next_condition(&running, Some(&plain), BACKUP_CONTROLS)),
            Some((json!("True"), json!("JobComplete")))
        );
        assert_eq!(
            reason(next_condition(
                &running,
                Some(&server(json!({ANNOTATION_FAIL_BACKUP: "boom"}))),
                BACKUP_CONTROLS
            )),
            Some((json!("True"), json!("JobFailed")))
        );
        assert_eq!(
            next_condition(
                &running,
                Some(&server(json!({ANNOTATION_HANG: "true"}))),
                BACKUP_CONTROLS
            ),
            None
        );
        assert_eq!(
            next_condition(
                &backup(Some(("True", "JobComplete"))),
                Some(&plain),
                BACKUP_CONTROLS
            ),
            None
        );
        assert_eq!(
            next_condition(
                &backup(Some(("True", "JobFailed"))),
                Some(&plain),
                BACKUP_CONTROLS
            ),
            None,
            "finished either way"
        );
    }

    #[test]
    fn restores_follow_their_own_controls() {
        let restore = |status: Option<(&str, &str)>| {
            let mut r = backup(status);
            r["metadata"]["name"] = json!("rj-x1");
            r
        };
        let running = restore(Some(("False", "JobRunning")));
        let reason = |c: Option<Value>| {
            c.map(|c| {
                (
                    c["status"].clone(),
                    c["reason"].clone(),
                    c["message"].clone(),
                )
            })
        };
        assert_eq!(
            reason(next_condition(
                &restore(None),
                Some(&server(json!({}))),
                RESTORE_CONTROLS
            )),
            Some((json!("False"), json!("JobRunning"), json!("Running")))
        );
        assert_eq!(
            reason(next_condition(
                &running,
                Some(&server(json!({}))),
                RESTORE_CONTROLS
            )),
            Some((json!("True"), json!("JobComplete"), json!("Success")))
        );
        assert_eq!(
            reason(next_condition(
                &running,
                Some(&server(json!({ANNOTATION_FAIL_RESTORE: "x"}))),
                RESTORE_CONTROLS
            )),
            Some((json!("True"), json!("JobFailed"), json!("Failed")))
        );
        assert_eq!(
            next_condition(
                &running,
                Some(&server(json!({ANNOTATION_HANG_RESTORE: "true"}))),
                RESTORE_CONTROLS
            ),
            None
        );
        assert_eq!(
            reason(next_condition(
                &running,
                Some(&server(
                    json!({ANNOTATION_FAIL_BACKUP: "x", ANNOTATION_HANG: "true"})
                )),
                RESTORE_CONTROLS
            )),
            Some((json!("True"), json!("JobComplete"), json!("Success"))),
            "backup controls leave restores alone"
        );
    }
}
