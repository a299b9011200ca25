//! `etcd-operator.cozystack.io/v1alpha2`: `EtcdCluster` and `EtcdSnapshot`.

use super::view;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

view! {
    /// The tenant etcd cluster (singleton named `etcd`).
    kind "EtcdCluster" ("etcd-operator.cozystack.io", "v1alpha2", "etcdclusters", namespaced);
    spec EtcdClusterSpec {
        /// Members.
        replicas: i64,
        /// Bootstrap settings (`restore.source.s3` during a restore).
        bootstrap: serde_json::Value,
    }
    status EtcdClusterStatus = "EtcdClusterStatus" {
        /// Conditions (`Available`).
        conditions: Vec<Condition>,
    }
}

view! {
    /// A snapshot of an EtcdCluster to S3.
    kind "EtcdSnapshot" ("etcd-operator.cozystack.io", "v1alpha2", "etcdsnapshots", namespaced);
    spec EtcdSnapshotSpec {
        /// The cluster (`{name: etcd}`).
        cluster_ref: serde_json::Value,
        /// Destination (`s3 {bucket, endpoint, key, region, forcePathStyle, credentialsSecretRef}`).
        destination: serde_json::Value,
    }
    status EtcdSnapshotStatus = "EtcdSnapshotStatus" {
        /// `Complete`, `Failed`, or in progress.
        phase: String,
        /// Stored artifact (`uri`, `sizeBytes`, `checksum`).
        artifact: serde_json::Value,
        /// Conditions.
        conditions: Vec<Condition>,
    }
}
