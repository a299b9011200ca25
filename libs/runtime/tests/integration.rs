//! Every integration and end-to-end test of this package, in one test binary: one link of
//! the large harness instead of one per file (faster CI, a fraction of the disk). Each file
//! below is a module; `cargo nextest run -p <package> <module>::` runs one of them.

mod conditions;
mod events;
mod lease_readiness;
mod lease_release;
mod lease_spread;
mod probe_daemon;
mod retry;
mod singleton;
mod watch;
