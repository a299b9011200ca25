//! The loop the FoundationDB and Percona MongoDB simulators share: clusters whose status follows
//! from the cluster alone, and backups whose status follows from the backup and its cluster
//! (`spec.clusterName` in the backup's namespace).
//!
//! ```text
//!  any change of a watched cluster or backup ─► every cluster: status ≠ cluster_status ─► write
//!                                             ─► every backup: backup_status(backup, cluster)
//!                                                 ≠ status ─► write (None: leave it as it is)
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
    }
}
