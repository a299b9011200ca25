//! Every integration and end-to-end test of this package, in one test binary: one link of
//! the large harness instead of one per file (faster CI, a fraction of the disk). Each file
//! below is a module; `cargo nextest run -p <package> <module>::` runs one of them.

mod emulator;
mod helm;
mod platform;
mod real_api;
mod render;
mod takeover;
