//! placeholder

/// The HelmRelease of a Postgres application (named like its Cluster).
pub fn release_name(app: &str) -> String {
    crate::cnpg::cluster_name(app)
}
