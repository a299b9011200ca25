use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Condition, LocalObjectReference, TypedLocalObjectReference};

/// BackupJob requests one backup of one application through a BackupClass.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "backups.cozystack.io",
    version = "v1alpha1",
    kind = "BackupJob",
    namespaced,
    status = "BackupJobStatus",
    shortname = "bjob",
    category = "cozy-backups",
    derive = "PartialEq",
    derive = "Default",
    doc = "BackupJob requests one backup of one application through a BackupClass.",
    printcolumn(
        name = "Application",
        type_ = "string",
        json_path = ".spec.applicationRef.name"
    ),
    printcolumn(
        name = "Kind",
        type_ = "string",
        json_path = ".spec.applicationRef.kind",
        priority = 1
    ),
    printcolumn(name = "Class", type_ = "string", json_path = ".spec.backupClassName"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Backup",
        type_ = "string",
        json_path = ".status.backupRef.name",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    selectable = ".spec.applicationRef.apiGroup",
    selectable = ".spec.applicationRef.kind",
    selectable = ".spec.applicationRef.name",
    annotation("options.cozystack.io/source.applicationRef.kind", "appkind"),
    annotation("options.cozystack.io/source.planRef.name", "plan"),
    annotation("options.cozystack.io/source.backupClassName", "backupclass")
)]
#[serde(rename_all = "camelCase")]
pub struct BackupJobSpec {
    /// The Plan that created this job; omitted for ad-hoc runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_ref: Option<LocalObjectReference>,
    /// The application to back up. An empty apiGroup means `apps.cozystack.io`.
    pub application_ref: TypedLocalObjectReference,
    /// The BackupClass that routes the application to a strategy. Immutable.
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "backupClassName is immutable"}]))]
    pub backup_class_name: String,
}

/// Observed state of a BackupJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupJobStatus {
    /// `Running`, `Succeeded` or `Failed`; empty while the job waits for a transient condition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The Backup this job produced (same name as the job).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup_ref: Option<LocalObjectReference>,
    /// When a driver started working on the job; every driver deadline is measured from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the job reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Human-readable outcome of a failed job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Conditions, keyed by type (`Ready`, `CredentialsProjected`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::meta::conditions_schema")]
    pub conditions: Vec<Condition>,
}

impl BackupJob {
    /// True once the job reached `Succeeded` or `Failed`.
    pub fn is_terminal(&self) -> bool {
        crate::contract::phases::is_terminal(self.status.as_ref().and_then(|s| s.phase.as_deref()))
    }
}
