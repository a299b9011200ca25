//! Tracing setup: plain or JSON lines on stderr, filtered by `--log-level`.

use crate::args::{LogArgs, LogFormat};
use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// Installs the global subscriber. Calling it twice is harmless (the second call is ignored), which
/// keeps tests that start several daemons in one process simple.
pub fn init(args: &LogArgs) {
    let filter = EnvFilter::try_new(&args.log_level).unwrap_or_else(|_| EnvFilter::new("info"));
    let registry = tracing_subscriber::registry().with(filter);
    let result = match args.log_format {
        LogFormat::Plain => registry
            .with(fmt::layer().with_writer(std::io::stderr))
            .try_init(),
        LogFormat::Json => registry
            .with(
                fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    drop(result);
}
