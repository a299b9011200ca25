//! Every integration and end-to-end test of this package, in one test binary: one link of
//! the large harness instead of one per file (faster CI, a fraction of the disk). Each file
//! below is a module; `cargo nextest run -p <package> <module>::` runs one of them.

mod common;

mod dataplane;
mod flux;
mod mariadb_dataplane;
mod s3;
mod sims;
