//! The process-wide Prometheus recorder behind `/metrics`.

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Renders the metrics of the global recorder.
#[derive(Clone)]
pub struct Metrics {
    handle: PrometheusHandle,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    /// Installs the global Prometheus recorder (once per process; later calls share it).
    /// Duration histograms ending in `_seconds` get Prometheus buckets rather than summaries,
    /// from a millisecond (a reconcile) to six hours (a large backup or restore).
    pub fn install() -> Self {
        let handle = HANDLE.get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Suffix("_seconds".into()),
                    &[
                        0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                        60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 21600.0,
                    ],
                )
                .expect("bucket list is non-empty")
                .build_recorder();
            let handle = recorder.handle();
            // Fails only if another recorder was installed first; then ours just isn't global.
            let _ = metrics::set_global_recorder(recorder);
            handle
        });
        Self {
            handle: handle.clone(),
        }
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.handle.render()
    }
}
