use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::meta::{Condition, LocalObjectReference, TypedLocalObjectReference};

/// Backup is a catalog entry for one completed backup. It has no status subresource: drivers write
/// its status in the create call, exactly as upstream.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "backups.cozystack.io",
    version = "v1alpha1",
    kind = "Backup",
    namespaced,
    status = "BackupStatus",
    shortname = "bkp",
    category = "cozy-backups",
    derive = "PartialEq",
    doc = "Backup is a catalog entry for one completed backup of an application.",
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
    printcolumn(name = "Taken", type_ = "date", json_path = ".spec.takenAt"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Recoverable From",
        type_ = "date",
        json_path = ".status.recoverableWindow.from",
        priority = 1
    ),
    printcolumn(
        name = "Recoverable To",
        type_ = "date",
        json_path = ".status.recoverableWindow.to",
        priority = 1
    ),
    printcolumn(
        name = "Artifact",
        type_ = "string",
        json_path = ".status.artifact.uri",
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
    annotation("options.cozystack.io/source.applicationRef.kind", "appkind")
)]
#[serde(rename_all = "camelCase")]
pub struct BackupSpec {
    /// The application that was backed up (as stored on the BackupJob, not normalised).
    pub application_ref: TypedLocalObjectReference,
    /// The Plan whose job produced this backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan_ref: Option<LocalObjectReference>,
    /// The strategy CR that produced the backup; restores dispatch on its kind.
    pub strategy_ref: TypedLocalObjectReference,
    /// When the backup's consistency point was taken.
    pub taken_at: Time,
    /// Driver-specific coordinates of the backup (operator object names, S3 paths, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::string_map")]
    pub driver_metadata: Option<BTreeMap<String, String>>,
}

/// Observed state of a Backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupStatus {
    /// `Ready` once usable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Where the backup data lives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<BackupArtifact>,
    /// A self-typed snapshot (inlined kind/apiVersion) of what a restore needs, e.g. the source
    /// application's databases and users.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::meta::preserve_unknown_object")]
    pub underlying_resources: Option<serde_json::Value>,
    /// Point-in-time restores (CNPG): the span of time this backup's archive could restore to when
    /// the backup completed (new; upstream has no such field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recoverable_window: Option<RecoverableWindow>,
    /// The last restore drill of this Backup (new; written by the restore-orchestrator).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<BackupVerification>,
    /// Conditions, keyed by type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::meta::conditions_schema")]
    pub conditions: Vec<Condition>,
}

/// The outcome of the last restore drill of a Backup.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupVerification {
    /// When the drill's result was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_verified_at: Option<Time>,
    /// `Passed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Passed", "Failed"]))]
    pub result: Option<String>,
    /// What was checked, or why the drill failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Seconds from the drill's start to its restore's terminal phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_seconds: Option<i64>,
    /// Seconds the check took.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_seconds: Option<i64>,
}

/// The recoverable span of a point-in-time archive.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecoverableWindow {
    /// The earliest restorable time: the stop time of the oldest base backup still in the archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Time>,
    /// The newest time known to be archived when the backup completed (its end WAL); WAL archiving
    /// continues, so later times usually restore too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<Time>,
}

/// Location and integrity data of a backup artifact.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupArtifact {
    /// Artifact URI, e.g. `cnpg://<server>/<backup>` or `s3://bucket/key`.
    pub uri: String,
    /// Size in bytes, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
    /// Checksum, e.g. `sha256:<hex>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}
