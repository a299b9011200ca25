//! The loop the FoundationDB and Percona MongoDB simulators share: clusters whose status follows
//! from the cluster alone, and backups and restores whose status follows from the object and its
//! cluster (`spec.clusterName` of a backup, the restore's own field, in the object's namespace).
//!
//! ```text
//!  any change of a watched cluster, backup or restore
//!     ─► every cluster: status ≠ cluster_status ─► write
//!     ─► every backup:  backup_status(backup, cluster) ≠ status ─► write (None: leave it)
//!     ─► every restore: restores.status(restore, cluster) ≠ status ─► write (None: leave it)
//! ```
//!
//! Each write replaces the whole status ([`write_status`]), so the next transition follows the
//! watch event of the previous write (no timers).

use std::sync::Arc;

use kube::core::ApiResource;
use serde_json::Value;
use tokio::sync::Notify;

use crate::cache::{Cache, spawn_watches};
use crate::conditions::write_status;

/// One simulated operator of this shape.
pub struct Operator {
    /// The simulator's name (`fdb`), prefixing its readiness checks.
    pub sim: &'static str,
    /// Field manager of its status writes.
    pub field_manager: &'static str,
    /// The cluster kind.
    pub clusters: ApiResource,
    /// The backup kind.
    pub backups: ApiResource,
    /// A cluster's status.
    pub cluster_status: fn(&Value) -> Value,
    /// A backup's next status given its cluster (`None`: no change).
    pub backup_status: fn(&Value, Option<&Value>) -> Option<Value>,
    /// The restore kind.
    pub restores: Restores,
}

/// The restore kind of an [`Operator`].
pub struct Restores {
    /// The restore kind.
    pub kind: ApiResource,
    /// The spec field naming the restore's cluster (`clusterName`, `destinationClusterName`).
    pub cluster_field: &'static str,
    /// A restore's next status given its cluster (`None`: no change).
    pub status: fn(&Value, Option<&Value>) -> Option<Value>,
}

/// Runs `op` forever.
pub async fn run(
    client: kube::Client,
    readiness: runtime::Readiness,
    op: Operator,
) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let clusters = Arc::new(Cache::default());
    let backups = Arc::new(Cache::default());
    let restores = Arc::new(Cache::default());
    spawn_watches(
        &client,
        &readiness,
        &notify,
        vec![
            (
                &clusters,
                op.clusters.clone(),
                &format!("{}: watch {}", op.sim, op.clusters.kind),
            ),
            (
                &backups,
                op.backups.clone(),
                &format!("{}: watch {}", op.sim, op.backups.kind),
            ),
            (
                &restores,
                op.restores.kind.clone(),
                &format!("{}: watch {}", op.sim, op.restores.kind.kind),
            ),
        ],
    );
    loop {
        notify.notified().await;
        for (_, cluster) in clusters.snapshot() {
            let want = (op.cluster_status)(&cluster);
            if cluster["status"] != want {
                write_status(&client, &op.clusters, op.field_manager, &cluster, want).await;
            }
        }
        for ((ns, _), backup) in backups.snapshot() {
            let cluster_name = backup["spec"]["clusterName"].as_str().unwrap_or_default();
            let cluster = clusters.get(&ns, cluster_name);
            if let Some(want) = (op.backup_status)(&backup, cluster.as_ref())
                && backup["status"] != want
            {
                write_status(&client, &op.backups, op.field_manager, &backup, want).await;
            }
        }
        for ((ns, _), restore) in restores.snapshot() {
            let cluster_name = restore["spec"][op.restores.cluster_field]
                .as_str()
                .unwrap_or_default();
            let cluster = clusters.get(&ns, cluster_name);
            if let Some(want) = (op.restores.status)(&restore, cluster.as_ref())
                && restore["status"] != want
            {
                write_status(&client, &op.restores.kind, op.field_manager, &restore, want).await;
            }
        }
    }
}
