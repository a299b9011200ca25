use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Condition, LocalObjectReference, TypedLocalObjectReference};

/// RestoreJob restores an application from a Backup, in place or into another application.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "backups.cozystack.io",
    version = "v1alpha1",
    kind = "RestoreJob",
    namespaced,
    status = "RestoreJobStatus",
    shortname = "rjob",
    category = "cozy-backups",
    derive = "PartialEq",
    derive = "Default",
    doc = "RestoreJob restores an application from a Backup.",
    printcolumn(name = "Backup", type_ = "string", json_path = ".spec.backupRef.name"),
    printcolumn(
        name = "Target",
        type_ = "string",
        json_path = ".spec.targetApplicationRef.name"
    ),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    annotation("options.cozystack.io/source.backupRef.name", "backup"),
    annotation("options.cozystack.io/source.targetApplicationRef.kind", "appkind")
)]
#[serde(rename_all = "camelCase")]
pub struct RestoreJobSpec {
    /// The Backup to restore from (same namespace).
    pub backup_ref: LocalObjectReference,
    /// The application to restore into; empty means the backup's own application (in place).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_application_ref: Option<TypedLocalObjectReference>,
    /// Driver-specific options, e.g. `recoveryTime` (RFC 3339) and `restoreTimeoutSeconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::preserve_unknown_object")]
    pub options: Option<serde_json::Value>,
}

/// Observed state of a RestoreJob.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreJobStatus {
    /// `Running`, `Succeeded` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// When a driver started the restore; deadlines are measured from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// When the restore reached a terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// Human-readable outcome of a failed restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Conditions, keyed by type (`Ready`, `TargetPurged`, `WALArchiveReady`, …).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::meta::conditions_schema")]
    pub conditions: Vec<Condition>,
}

impl RestoreJob {
    /// True once the restore reached `Succeeded` or `Failed`.
    pub fn is_terminal(&self) -> bool {
        crate::contract::phases::is_terminal(self.status.as_ref().and_then(|s| s.phase.as_deref()))
    }
}
