use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::StrategyStatus;

/// Job runs a generic backup/restore pod for any application kind.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "strategy.backups.cozystack.io",
    version = "v1alpha1",
    kind = "Job",
    plural = "jobs",
    singular = "job",
    status = "StrategyStatus",
    category = "cozy-backup-strategies",
    derive = "PartialEq",
    derive = "Default",
    doc = "Job runs a generic backup or restore pod for any application kind."
)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    /// Pod template rendered with `.Application`, `.Release`, `.Mode`, `.Parameters` and, on
    /// restore, `.Backup`.
    pub template: PodTemplateSpec,
}
