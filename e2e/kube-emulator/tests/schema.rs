//! Structural schemas of custom resources and CEL rules, against the project's own CRDs from
//! `deploy/crds`: pruning with `fieldValidation` Strict/Warn/Ignore, OpenAPI validation and CEL transition
//! rules with upstream's 422 bodies, on the main resource and on `/status`.

use crate::common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};

const JOBS: &str = "/apis/backups.cozystack.io/v1alpha1/namespaces/default/backupjobs";
const MARIADBS: &str = "/apis/strategy.backups.cozystack.io/v1alpha1/mariadbs";

async fn project_emulator() -> kube_emulator::Running {
    let crds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/crds");
    emulator_with(kube_emulator::Config::default().with_crds(crds)).await
}

fn job(name: &str, class: &str) -> Value {
    json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
        "metadata": {"name": name},
        "spec": {"applicationRef": {"kind": "MariaDB", "name": "db"}, "backupClassName": class}})
}

fn invalid_status(message: &str, name: &str, group: &str, kind: &str, causes: Value) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Invalid", "code": 422,
        "details": {"name": name, "group": group, "kind": kind, "causes": causes}})
}

#[tokio::test]
async fn backup_job_validation_and_immutability() {
    let emu = project_emulator().await;
    let c = emu.client();
    let (code, _, body) = raw(&c, "POST", JOBS, "application/json", &job("x", "")).await;
    assert_eq!(code, 422);
    assert_eq!(
        body,
        invalid_status(
            "BackupJob.backups.cozystack.io \"x\" is invalid: spec.backupClassName: Invalid value: \"\": spec.backupClassName in body should be at least 1 chars long",
            "x",
            "backups.cozystack.io",
            "BackupJob",
            json!([{"reason": "FieldValueInvalid", "field": "spec.backupClassName",
                "message": "Invalid value: \"\": spec.backupClassName in body should be at least 1 chars long"}])
        )
    );

    let (code, _, created) = raw(&c, "POST", JOBS, "application/json", &job("x", "daily")).await;
    assert_eq!(code, 201, "{created}");
    // Transition rule `self == oldSelf`.
    let patch = json!({"spec": {"backupClassName": "weekly"}});
    let (code, _, body) = raw(
        &c,
        "PATCH",
        &format!("{JOBS}/x"),
        "application/merge-patch+json",
        &patch,
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body,
        invalid_status(
            "BackupJob.backups.cozystack.io \"x\" is invalid: spec.backupClassName: Invalid value: \"weekly\": backupClassName is immutable",
            "x",
            "backups.cozystack.io",
            "BackupJob",
            json!([{"reason": "FieldValueInvalid", "field": "spec.backupClassName",
                "message": "Invalid value: \"weekly\": backupClassName is immutable"}])
        )
    );
    // The same value again is fine (and a no-op).
    let same = json!({"spec": {"backupClassName": "daily"}});
    let (code, _, body) = raw(
        &c,
        "PATCH",
        &format!("{JOBS}/x"),
        "application/merge-patch+json",
        &same,
    )
    .await;
    assert_eq!(code, 200);
    assert_eq!(
        body["metadata"]["resourceVersion"],
        created["metadata"]["resourceVersion"]
    );

    // /status is validated against the status schema: a condition reason with spaces.
    let cond = |reason: &str| {
        json!({"status": {"conditions": [{"type": "Ready", "status": "False", "reason": reason,
            "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    };
    let (code, _, body) = raw(
        &c,
        "PATCH",
        &format!("{JOBS}/x/status"),
        "application/merge-patch+json",
        &cond("not camel case"),
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body,
        invalid_status(
            "BackupJob.backups.cozystack.io \"x\" is invalid: status.conditions[0].reason: Invalid value: \"not camel case\": status.conditions[0].reason in body should match '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'",
            "x",
            "backups.cozystack.io",
            "BackupJob",
            json!([{"reason": "FieldValueInvalid", "field": "status.conditions[0].reason",
                "message": "Invalid value: \"not camel case\": status.conditions[0].reason in body should match '^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$'"}])
        )
    );
    // A missing required condition field and a status outside the enum, reported together.
    let bad = json!({"status": {"conditions": [{"type": "Ready", "status": "Maybe", "reason": "R",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    let (code, _, body) = raw(
        &c,
        "PATCH",
        &format!("{JOBS}/x/status"),
        "application/merge-patch+json",
        &bad,
    )
    .await;
    assert_eq!(code, 422);
    assert_eq!(
        body["details"]["causes"],
        json!([
            {"reason": "FieldValueRequired", "field": "status.conditions[0].message", "message": "Required value"},
            {"reason": "FieldValueNotSupported", "field": "status.conditions[0].status",
             "message": "Unsupported value: \"Maybe\": supported values: \"True\", \"False\", \"Unknown\""},
        ])
    );
    let (code, _, body) = raw(
        &c,
        "PATCH",
        &format!("{JOBS}/x/status"),
        "application/merge-patch+json",
        &cond("BackupRunning"),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["status"]["conditions"][0]["reason"], "BackupRunning");
}

#[tokio::test]
async fn mariadb_strategy_cel_rule() {
    let emu = project_emulator().await;
    let c = emu.client();
    let s3 = json!({"bucket": "b", "endpoint": "http://s3",
        "accessKeyIdSecretKeyRef": {"name": "s", "key": "id"},
        "secretAccessKeySecretKeyRef": {"name": "s", "key": "secret"}});
    let strategy = |storage: Value| {
        json!({"apiVersion": "strategy.backups.cozystack.io/v1alpha1", "kind": "MariaDB",
            "metadata": {"name": "m"}, "spec": {"template": {"storage": storage}}})
    };
    let two = strategy(json!({"s3": s3, "volume": {"emptyDir": {}}}));
    let (code, _, body) = raw(&c, "POST", MARIADBS, "application/json", &two).await;
    assert_eq!(code, 422);
    assert_eq!(
        body,
        invalid_status(
            "MariaDB.strategy.backups.cozystack.io \"m\" is invalid: spec.template.storage: Invalid value: exactly one of s3, persistentVolumeClaim or volume must be set",
            "m",
            "strategy.backups.cozystack.io",
            "MariaDB",
            json!([{"reason": "FieldValueInvalid", "field": "spec.template.storage",
                "message": "Invalid value: exactly one of s3, persistentVolumeClaim or volume must be set"}])
        )
    );
    let (code, _, body) = raw(
        &c,
        "POST",
        MARIADBS,
        "application/json",
        &strategy(json!({"s3": s3})),
    )
    .await;
    assert_eq!(code, 201, "{body}");
    // `volume` preserves unknown fields: nothing is pruned inside it.
    let vol = json!({"spec": {"template": {"storage": {"s3": null, "volume": {"emptyDir": {"medium": "Memory"}}}}}});
    let (code, warnings, body) = raw(
        &c,
        "PATCH",
        &format!("{MARIADBS}/m"),
        "application/merge-patch+json",
        &vol,
    )
    .await;
    assert_eq!((code, warnings), (200, vec![]), "{body}");
    assert_eq!(
        body["spec"]["template"]["storage"],
        json!({"volume": {"emptyDir": {"medium": "Memory"}}})
    );
}

#[tokio::test]
async fn unknown_fields_by_field_validation() {
    let emu = project_emulator().await;
    let c = emu.client();
    let mut obj = job("u", "daily");
    obj["spec"]["bogus"] = json!(1);
    obj["spec"]["applicationRef"]["extra"] = json!("x");

    // Strict: 400 listing every unknown field, nothing stored.
    let (code, _, body) = raw(
        &c,
        "POST",
        &format!("{JOBS}?fieldValidation=Strict"),
        "application/json",
        &obj,
    )
    .await;
    assert_eq!(code, 400);
    assert_eq!(
        body,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 400,
            "reason": "BadRequest",
            "message": "BackupJob in version \"v1alpha1\" cannot be handled as a BackupJob: strict decoding error: unknown field \"spec.applicationRef.extra\", unknown field \"spec.bogus\""})
    );

    // Warn (the default): stored without them, one Warning header per field.
    let (code, warnings, body) = raw(&c, "POST", JOBS, "application/json", &obj).await;
    assert_eq!(code, 201);
    assert_eq!(
        warnings,
        vec![
            "299 - \"unknown field \\\"spec.applicationRef.extra\\\"\"".to_string(),
            "299 - \"unknown field \\\"spec.bogus\\\"\"".to_string(),
        ]
    );
    assert_eq!(
        body["spec"],
        json!({"applicationRef": {"kind": "MariaDB", "name": "db"}, "backupClassName": "daily"})
    );

    // Ignore: dropped silently.
    obj["metadata"]["name"] = json!("v");
    let (code, warnings, body) = raw(
        &c,
        "POST",
        &format!("{JOBS}?fieldValidation=Ignore"),
        "application/json",
        &obj,
    )
    .await;
    assert_eq!((code, warnings), (201, vec![]));
    assert_eq!(
        body["spec"],
        json!({"applicationRef": {"kind": "MariaDB", "name": "db"}, "backupClassName": "daily"})
    );
}
