//! Projection metrics: upstream's two counters (names, labels and help texts unchanged) for the
//! tenant, system and rotation paths alike — upstream counted tenant failures but never tenant
//! successes — plus a latency histogram labelled by path.

use std::time::Duration;

use api::contract::metrics::{PROJECTION_FAILURES, PROJECTION_SUCCESSES};
use backup_storage::credentials::ProjectionError;

use crate::project::Outcome;

/// Histogram of one projection's duration (source read + target write), by path.
pub const PROJECTION_DURATION: &str =
    "cozy_backups_credentials_projector_projection_duration_seconds";

/// Which loop projected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// A BackupJob or RestoreJob's namespace.
    Tenant,
    /// A configured system namespace.
    System,
    /// A namespace holding a copy, refreshed after the source changed.
    Rotation,
}

impl Path {
    fn as_str(self) -> &'static str {
        match self {
            Self::Tenant => "tenant",
            Self::System => "system",
            Self::Rotation => "rotation",
        }
    }
}

/// Registers help texts (once at start).
pub fn describe() {
    metrics::describe_counter!(
        PROJECTION_FAILURES,
        "Number of failed BackupCredentials projections, by target namespace and reason."
    );
    metrics::describe_counter!(
        PROJECTION_SUCCESSES,
        "Number of successful BackupCredentials projections, by target namespace."
    );
    metrics::describe_histogram!(
        PROJECTION_DURATION,
        metrics::Unit::Seconds,
        "Duration of one credentials projection (source read and target write), by path."
    );
}

/// Records one projection into `namespace`.
pub fn record(
    namespace: &str,
    path: Path,
    elapsed: Duration,
    result: &Result<Outcome, ProjectionError>,
) {
    match result {
        Ok(_) => {
            metrics::counter!(PROJECTION_SUCCESSES, "namespace" => namespace.to_owned())
                .increment(1);
        }
        Err(e) => {
            metrics::counter!(
                PROJECTION_FAILURES,
                "namespace" => namespace.to_owned(),
                "reason" => e.reason.as_str()
            )
            .increment(1);
        }
    }
    metrics::histogram!(PROJECTION_DURATION, "path" => path.as_str()).record(elapsed.as_secs_f64());
}
