//! Every integration and end-to-end test of this package, in one test binary: one link of
//! the large harness instead of one per file (faster CI, a fraction of the disk). Each file
//! below is a module; `cargo nextest run -p <package> <module>::` runs one of them.

mod dataplane;
mod support;

mod altinity;
mod bad_input;
mod cnpg;
mod deploy;
mod drills;
mod etcd;
mod etcd_dataplane;
mod every_driver;
mod failover;
mod faults;
mod foundationdb;
mod job;
mod mariadb;
mod mariadb_dataplane;
mod mongodb;
mod storage_breaker;
mod velero;
