//! `helm.toolkit.fluxcd.io/v2`: Flux `HelmRelease`.

use super::view;

view! {
    /// A Flux HelmRelease.
    kind "HelmRelease" ("helm.toolkit.fluxcd.io", "v2", "helmreleases", namespaced);
    spec HelmReleaseSpec {
        /// Suspension flag. Kept as raw JSON: upstream treats a non-boolean value as not suspended.
        suspend: serde_json::Value,
        /// Chart source reference.
        chart_ref: serde_json::Value,
        /// Inline chart template.
        chart: serde_json::Value,
        /// Values sources.
        values_from: Vec<serde_json::Value>,
        /// Inline values.
        values: serde_json::Value,
        /// Reconcile interval.
        interval: String,
    }
    status HelmReleaseStatus = "HelmReleaseStatus" {
        /// Conditions (`Ready`, `Released`, `Stalled`, …).
        conditions: Vec<serde_json::Value>,
        /// The `reconcile.fluxcd.io/requestedAt` value last handled.
        last_handled_reconcile_at: String,
        /// The `reconcile.fluxcd.io/forceAt` value last handled.
        last_handled_force_at: String,
        /// Digest of the values of the last attempt.
        last_attempted_config_digest: String,
        /// Release history, newest first.
        history: Vec<serde_json::Value>,
    }
}

impl HelmRelease {
    /// True only when `spec.suspend` is the boolean `true`.
    pub fn is_suspended(&self) -> bool {
        matches!(self.spec.suspend, Some(serde_json::Value::Bool(true)))
    }
}
