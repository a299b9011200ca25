//! Strategies that run a `batch/v1` Job from a rendered pod template: the generic Job strategy (any
//! application kind) and Altinity (ClickHouse, see [`crate::altinity`]). The pure parts shared by
//! the backup and the restore path: names, the render context, the Job body, how the Job's
//! conditions read and how parameters round-trip through the catalog.
//!
//! ```text
//!  BackupJob ─► application (any kind for Job) ─► render spec.template (a PodTemplateSpec) against
//!     {Application, Release: {Name, Namespace}, Mode, Parameters}
//!  ─► batch/v1 Job <job>-backup (labels <flavor>/mode + owned-by, also on the pod template;
//!     restartPolicy Never unless set; backoffLimit 2; controller ownerReference to the BackupJob)
//!  Complete=True ─► catalog Backup <job> (driverMetadata <flavor>/parameter/<k> = each parameter)
//!  Failed=True ─► failed with the condition's message
//! ```

use std::collections::BTreeMap;

use api::contract::labels;
use serde_json::{Value as Json, json};

/// What differs between the strategies that run a batch Job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flavor {
    /// Label naming the run's mode (`backup`/`restore`) on the Job and its pods.
    pub mode_label: &'static str,
    /// Prefix of the driverMetadata keys that carry the route's parameters.
    pub parameter_prefix: &'static str,
    /// Ready message of a completed backup.
    pub backup_completed: &'static str,
    /// Failure message when the Job's Failed condition has none.
    pub backup_failed: &'static str,
    /// Ready message of a completed restore.
    pub restore_completed: &'static str,
    /// Failure message of a restore when the Job's Failed condition has none.
    pub restore_failed: &'static str,
    /// Message prefix of a failed render.
    pub render_failed: &'static str,
}

/// The generic Job strategy.
pub const JOB: Flavor = Flavor {
    mode_label: labels::JOB_STRATEGY_MODE,
    parameter_prefix: "job.strategy.backups.cozystack.io/parameter/",
    backup_completed: "backup Job completed",
    backup_failed: "backup Job reported Failed",
    restore_completed: "restore Job completed",
    restore_failed: "restore Job reported Failed",
    render_failed: "failed to template Job strategy",
};

/// The Altinity (clickhouse-backup) strategy.
pub const ALTINITY: Flavor = Flavor {
    mode_label: labels::ALTINITY_STRATEGY_MODE,
    parameter_prefix: "altinity.strategy.backups.cozystack.io/parameter/",
    backup_completed: "clickhouse-backup Job completed",
    backup_failed: "clickhouse-backup Job reported Failed",
    restore_completed: "clickhouse-backup Job completed",
    restore_failed: "clickhouse-backup restore Job reported Failed",
    render_failed: "failed to template Altinity strategy",
};

/// Mode of a backup run.
pub const MODE_BACKUP: &str = "backup";
/// Mode of a restore run.
pub const MODE_RESTORE: &str = "restore";
/// Retries of the pod before the Job fails (upstream's fixed value).
pub const BACKOFF_LIMIT: i64 = 2;

/// The batch Job of a BackupJob.
pub fn backup_job_name(job: &str) -> String {
    format!("{job}-backup")
}

/// The batch Job of a RestoreJob.
pub fn restore_job_name(job: &str) -> String {
    format!("{job}-restore")
}

/// The source Backup a restore renders against (`.Backup`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceBackup {
    /// The Backup's name.
    pub name: String,
    /// The Backup's namespace.
    pub namespace: String,
    /// The backed-up application (apiGroup empty when the Backup stored none).
    pub application_ref: api::TypedLocalObjectReference,
}

/// The render context: `.Application` (the live object), `.Release` (`Name` = the application's
/// name, `Namespace`), `.Mode`, `.Parameters`, and on restore `.Backup`. Upstream passes
/// `.Release` and `.Backup` as Go maps, so a missing key prints `<no value>`.
pub fn context(
    app: &Json,
    release_name: &str,
    release_namespace: &str,
    mode: &str,
    parameters: &BTreeMap<String, String>,
    backup: Option<&SourceBackup>,
) -> Json {
    let mut ctx = json!({
        "Application": app,
        "Release": {"Name": release_name, "Namespace": release_namespace},
        "Mode": mode,
        "Parameters": parameters,
    });
    if let Some(b) = backup {
        ctx["Backup"] = json!({
            "Name": b.name,
            "Namespace": b.namespace,
            "ApplicationRef": {
                "APIGroup": b.application_ref.api_group.clone().unwrap_or_default(),
                "Kind": b.application_ref.kind,
                "Name": b.application_ref.name,
            },
        });
    }
    ctx
}

/// Renders the strategy's pod template against `context`.
pub fn render_pod_template(template: &Json, context: &Json) -> Json {
    crate::template::render(template, context)
}

/// The owner of a batch Job (a BackupJob or a RestoreJob).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner<'a> {
    /// `backups.cozystack.io/v1alpha1`.
    pub api_version: &'a str,
    /// `BackupJob` or `RestoreJob`.
    pub kind: &'a str,
    /// Its name.
    pub name: &'a str,
    /// Its uid.
    pub uid: &'a str,
}

/// The batch Job running the rendered pod template: named `name` in `namespace`, labelled with
/// the mode and `owner_labels` (also stamped on the pod template), `restartPolicy: Never` unless
/// the template sets one, `backoffLimit: 2`, controlled by `owner` (garbage-collected with it).
pub fn batch_job(
    namespace: &str,
    name: &str,
    flavor: &Flavor,
    mode: &str,
    owner_labels: &[(&str, &str)],
    owner: &Owner<'_>,
    rendered: &Json,
) -> Json {
    let mut job_labels = serde_json::Map::new();
    job_labels.insert(flavor.mode_label.into(), json!(mode));
    for (k, v) in owner_labels {
        job_labels.insert((*k).into(), json!(v));
    }
    let mut pod = if rendered.is_object() {
        rendered.clone()
    } else {
        json!({})
    };
    if !pod["spec"].is_object() {
        pod["spec"] = json!({});
    }
    if pod["spec"]["restartPolicy"]
        .as_str()
        .is_none_or(str::is_empty)
    {
        pod["spec"]["restartPolicy"] = json!("Never");
    }
    if !pod["metadata"].is_object() {
        pod["metadata"] = json!({});
    }
    if !pod["metadata"]["labels"].is_object() {
        pod["metadata"]["labels"] = json!({});
    }
    for (k, v) in &job_labels {
        pod["metadata"]["labels"][k] = v.clone();
    }
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": job_labels,
            "ownerReferences": [{
                "apiVersion": owner.api_version,
                "kind": owner.kind,
                "name": owner.name,
                "uid": owner.uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
        },
        "spec": {
            "backoffLimit": BACKOFF_LIMIT,
            "template": pod,
        },
    })
}

/// Where a batch Job is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// `Complete=True`.
    Complete,
    /// `Failed=True`, with the condition's message (empty when it has none).
    Failed(String),
    /// Neither yet.
    Running,
}

/// Reads a batch Job's conditions: the first `True` condition of type `Complete` or `Failed`
/// decides, as upstream reads them.
pub fn state(job: &Json) -> State {
    for c in job["status"]["conditions"].as_array().into_iter().flatten() {
        if c["status"] != "True" {
            continue;
        }
        match c["type"].as_str() {
            Some("Complete") => return State::Complete,
            Some("Failed") => {
                return State::Failed(c["message"].as_str().unwrap_or_default().to_owned());
            }
            _ => {}
        }
    }
    State::Running
}

/// The catalog Backup's `driverMetadata`: each route parameter under the flavor's prefix.
pub fn driver_metadata(
    flavor: &Flavor,
    parameters: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    parameters
        .iter()
        .map(|(k, v)| (format!("{}{k}", flavor.parameter_prefix), v.clone()))
        .collect()
}

/// The parameters a Backup recorded (the restore re-renders with the backup-time values).
pub fn parameters_of(
    flavor: &Flavor,
    driver_metadata: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    driver_metadata
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix(flavor.parameter_prefix)
                .filter(|p| !p.is_empty())
                .map(|p| (p.to_owned(), v.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn pod_template() -> Json {
        json!({"spec": {"containers": [{"name": "backup", "image": "backup-tool:test", "args": [
            "--app={{ .Release.Name }}", "--mode={{ .Mode }}",
            "--bucket={{ .Parameters.bucketName }}", "--replicas={{ .Application.spec.replicas }}"]}]}})
    }

    #[test]
    fn rendering_exposes_release_mode_parameters_and_the_live_application() {
        let params = BTreeMap::from([("bucketName".to_owned(), "gen-bucket".to_owned())]);
        let app = json!({"metadata": {"name": "app-test"}, "spec": {"replicas": 3}});
        let ctx = context(&app, "app-test", "tenant-test", MODE_BACKUP, &params, None);
        let rendered = render_pod_template(&pod_template(), &ctx);
        assert_eq!(
            rendered["spec"]["containers"][0]["args"],
            json!([
                "--app=app-test",
                "--mode=backup",
                "--bucket=gen-bucket",
                "--replicas=3"
            ])
        );
        // .Release is a map: a missing key prints <no value>, as with upstream's map[string]string.
        assert_eq!(
            crate::template::render_string("{{ .Release.Absent }}", &ctx),
            "<no value>"
        );
        let source = SourceBackup {
            name: "b1".into(),
            namespace: "tenant-test".into(),
            application_ref: api::TypedLocalObjectReference {
                api_group: None,
                kind: "Generic".into(),
                name: "old".into(),
            },
        };
        let ctx = context(
            &app,
            "new",
            "tenant-test",
            MODE_RESTORE,
            &params,
            Some(&source),
        );
        assert_eq!(
            crate::template::render_string(
                "{{ .Backup.ApplicationRef.Name }}/{{ .Backup.ApplicationRef.APIGroup }}/{{ .Backup.Name }}",
                &ctx
            ),
            "old//b1"
        );
    }

    #[test]
    fn the_batch_job_body() {
        let owner = Owner {
            api_version: "backups.cozystack.io/v1alpha1",
            kind: "BackupJob",
            name: "test-bj",
            uid: "uid-1",
        };
        let owned = [
            ("backups.cozystack.io/owned-by.BackupJobName", "test-bj"),
            (
                "backups.cozystack.io/owned-by.BackupJobNamespace",
                "tenant-test",
            ),
        ];
        let body = batch_job(
            "tenant-test",
            &backup_job_name("test-bj"),
            &JOB,
            MODE_BACKUP,
            &owned,
            &owner,
            &pod_template(),
        );
        let labels = json!({
            "job.strategy.backups.cozystack.io/mode": "backup",
            "backups.cozystack.io/owned-by.BackupJobName": "test-bj",
            "backups.cozystack.io/owned-by.BackupJobNamespace": "tenant-test"});
        assert_eq!(
            body["metadata"],
            json!({"name": "test-bj-backup", "namespace": "tenant-test", "labels": labels,
                   "ownerReferences": [{"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
                       "name": "test-bj", "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}]})
        );
        assert_eq!(body["spec"]["backoffLimit"], 2);
        assert_eq!(body["spec"]["template"]["metadata"]["labels"], labels);
        assert_eq!(body["spec"]["template"]["spec"]["restartPolicy"], "Never");
        let on_failure = json!({"metadata": {"labels": {"app": "x"}},
                                "spec": {"restartPolicy": "OnFailure", "containers": []}});
        let body = batch_job(
            "t",
            "j-backup",
            &ALTINITY,
            MODE_BACKUP,
            &owned,
            &owner,
            &on_failure,
        );
        assert_eq!(
            body["spec"]["template"]["spec"]["restartPolicy"],
            "OnFailure"
        );
        assert_eq!(body["spec"]["template"]["metadata"]["labels"]["app"], "x");
        assert_eq!(
            body["metadata"]["labels"]["altinity.strategy.backups.cozystack.io/mode"],
            "backup"
        );
    }

    #[test]
    fn job_conditions() {
        let j = |conds: Json| json!({"status": {"conditions": conds}});
        assert_eq!(state(&json!({})), State::Running);
        assert_eq!(
            state(&j(json!([
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached"},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached"}]))),
            State::Complete
        );
        assert_eq!(
            state(&j(json!([
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit"},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit"}]))),
            State::Failed("Job has reached the specified backoff limit".into())
        );
        assert_eq!(
            state(&j(
                json!([{"type": "Suspended", "status": "True"}, {"type": "Complete", "status": "False"}])
            )),
            State::Running
        );
    }

    #[test]
    fn parameters_round_trip_through_driver_metadata() {
        let params = BTreeMap::from([
            ("bucketName".to_owned(), "b".to_owned()),
            ("s3SecretName".to_owned(), "s".to_owned()),
        ]);
        let md = driver_metadata(&JOB, &params);
        assert_eq!(
            md.get("job.strategy.backups.cozystack.io/parameter/bucketName")
                .map(String::as_str),
            Some("b")
        );
        let mut with_foreign = md.clone();
        with_foreign.insert("other/key".into(), "x".into());
        with_foreign.insert(
            "job.strategy.backups.cozystack.io/parameter/".into(),
            "empty name".into(),
        );
        assert_eq!(parameters_of(&JOB, &with_foreign), params);
        assert!(parameters_of(&ALTINITY, &md).is_empty());
    }
}
