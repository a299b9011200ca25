use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::StrategyStatus;
use crate::thirdparty::velero::{BackupSpec, RestoreSpec};

/// Velero backs up VMInstance and VMDisk applications with Velero.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "strategy.backups.cozystack.io",
    version = "v1alpha1",
    kind = "Velero",
    plural = "veleroes",
    singular = "velero",
    status = "StrategyStatus",
    category = "cozy-backup-strategies",
    derive = "PartialEq",
    derive = "Default",
    doc = "Velero backs up VMInstance and VMDisk applications with Velero."
)]
#[serde(rename_all = "camelCase")]
pub struct VeleroSpec {
    /// The template rendered per job.
    pub template: VeleroTemplate,
}

/// Per-job template of a Velero strategy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VeleroTemplate {
    /// Spec of the Velero Backup.
    pub spec: BackupSpec,
    /// Spec of the Velero Restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_spec: Option<RestoreSpec>,
}
