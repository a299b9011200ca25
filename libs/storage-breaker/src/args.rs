//! The breaker's flags, the same in every daemon that has one (flattened into its arguments).

use std::time::Duration;

use serde::Serialize;

/// `--storage-breaker-failures`, `--storage-breaker-window`, `--storage-recovery-concurrency`.
#[derive(clap::Args, Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BreakerArgs {
    /// Storage failures (of distinct jobs, on one endpoint) within `--storage-breaker-window` that
    /// open the storage breaker of that endpoint.
    #[arg(long, env = "STORAGE_BREAKER_FAILURES", default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub storage_breaker_failures: u32,
    /// The window in which `--storage-breaker-failures` storage failures open the breaker.
    #[arg(long, env = "STORAGE_BREAKER_WINDOW", default_value = "5m", value_parser = positive)]
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub storage_breaker_window: Duration,
    /// Jobs that resume at once, oldest first, once the storage probe succeeds.
    #[arg(long, env = "STORAGE_RECOVERY_CONCURRENCY", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub storage_recovery_concurrency: u32,
}

impl BreakerArgs {
    /// The breaker settings these flags give.
    pub fn settings(&self) -> crate::Settings {
        crate::Settings {
            failures: self.storage_breaker_failures,
            window: self.storage_breaker_window,
            recovery_concurrency: self.storage_recovery_concurrency as usize,
        }
    }
}

fn positive(s: &str) -> Result<Duration, String> {
    match runtime::duration::parse(s)? {
        d if d.is_zero() => Err(format!("{s:?} is not a positive duration")),
        d => Ok(d),
    }
}
