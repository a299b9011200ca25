//! Every integration and end-to-end test of this package, in one test binary: one link of
//! the large harness instead of one per file (faster CI, a fraction of the disk). Each file
//! below is a module; `cargo nextest run -p <package> <module>::` runs one of them.

mod common;
#[path = "common/privileged.rs"]
mod privileged;

mod adversarial;
mod refusals;
mod roundtrip;
mod vector;
