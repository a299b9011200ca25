//! The `Backup` catalog entry every driver writes on success, in upstream's common shape: named
//! after the BackupJob, in its namespace, **no ownerReferences** (it must outlive the job) and no
//! labels, `spec.applicationRef` as the job stored it (not normalised), the resolved strategy, the
//! Plan when there is one, and the status written in the create call (`phase: Ready`, optional
//! artifact and underlying resources) because the Backup CRD has no status subresource.

use std::collections::BTreeMap;

use api::backups::{Backup, BackupArtifact, BackupJob, BackupSpec, BackupStatus};
use api::contract::phases;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;
use serde_json::Value as Json;

/// What a driver contributes to its catalog entry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Entry {
    /// `spec.takenAt` (`None`: now).
    pub taken_at: Option<Time>,
    /// `spec.driverMetadata`.
    pub driver_metadata: BTreeMap<String, String>,
    /// `status.artifact.uri`, when the driver knows one.
    pub artifact_uri: Option<String>,
    /// `status.artifact` size and checksum passed through from the operator, when reported.
    pub artifact_size_bytes: Option<i64>,
    /// Checksum of the artifact, when reported.
    pub artifact_checksum: Option<String>,
    /// `status.underlyingResources`.
    pub underlying_resources: Option<Json>,
    /// `status.recoverableWindow` (point-in-time archives).
    pub recoverable_window: Option<api::backups::RecoverableWindow>,
}

/// The catalog Backup of `job` made through `strategy_ref` (the resolved route's strategy).
pub fn backup(
    job: &BackupJob,
    strategy_ref: &api::TypedLocalObjectReference,
    entry: Entry,
    now: &Time,
) -> Backup {
    let driver_metadata = (!entry.driver_metadata.is_empty()).then_some(entry.driver_metadata);
    Backup {
        metadata: ObjectMeta {
            name: job.metadata.name.clone(),
            namespace: job.metadata.namespace.clone(),
            ..Default::default()
        },
        spec: BackupSpec {
            application_ref: job.spec.application_ref.clone(),
            plan_ref: job.spec.plan_ref.clone(),
            strategy_ref: strategy_ref.clone(),
            taken_at: entry.taken_at.unwrap_or_else(|| now.clone()),
            driver_metadata,
        },
        status: Some(BackupStatus {
            phase: Some(phases::READY.into()),
            artifact: entry.artifact_uri.map(|uri| BackupArtifact {
                uri,
                size_bytes: entry.artifact_size_bytes,
                checksum: entry.artifact_checksum,
            }),
            underlying_resources: entry.underlying_resources,
            recoverable_window: entry.recoverable_window,
            ..Default::default()
        }),
    }
}

/// Parses an RFC 3339 time from an operator's status (`None` when absent or unparsable).
pub fn time(value: &Json) -> Option<Time> {
    value
        .as_str()
        .filter(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .map(Time)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_common_shape() {
        let mut job = BackupJob::test("nightly-1")
            .namespace("t")
            .app_ref(api::TypedLocalObjectReference {
                api_group: None,
                kind: "Postgres".into(),
                name: "db".into(),
            })
            .plan("nightly")
            .build();
        job.metadata.uid = Some("u".into());
        let strategy = api::TypedLocalObjectReference::new(
            "strategy.backups.cozystack.io",
            "CNPG",
            "cozy-default-cnpg",
        );
        let now = Time("2026-01-01T00:00:00Z".parse().unwrap());
        let b = backup(
            &job,
            &strategy,
            Entry {
                artifact_uri: Some("cnpg://s/b".into()),
                ..Default::default()
            },
            &now,
        );
        assert_eq!(
            serde_json::to_value(&b).unwrap(),
            serde_json::json!({
                "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
                "metadata": {"name": "nightly-1", "namespace": "t"},
                "spec": {"applicationRef": {"kind": "Postgres", "name": "db"},
                         "planRef": {"name": "nightly"},
                         "strategyRef": {"apiGroup": "strategy.backups.cozystack.io", "kind": "CNPG", "name": "cozy-default-cnpg"},
                         "takenAt": "2026-01-01T00:00:00Z"},
                "status": {"phase": "Ready", "artifact": {"uri": "cnpg://s/b"}}
            })
        );
    }
}
