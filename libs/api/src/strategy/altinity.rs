use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::StrategyStatus;

/// Altinity backs up ClickHouse through the clickhouse-backup sidecar API; the driver wraps the
/// rendered pod template in a batch Job.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "strategy.backups.cozystack.io",
    version = "v1alpha1",
    kind = "Altinity",
    plural = "altinities",
    singular = "altinity",
    status = "StrategyStatus",
    category = "cozy-backup-strategies",
    derive = "PartialEq",
    derive = "Default",
    doc = "Altinity backs up ClickHouse through the clickhouse-backup sidecar API."
)]
#[serde(rename_all = "camelCase")]
pub struct AltinitySpec {
    /// Pod template rendered with `.Application`, `.Release`, `.Mode`, `.Parameters` and, on
    /// restore, `.Backup`.
    pub template: PodTemplateSpec,
}
