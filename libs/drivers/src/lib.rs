//! The strategy drivers' pure logic, shared by the `backup-runner` (backup paths) and the
//! `restore-orchestrator` (restore paths): no Kubernetes client, no clock.
//!
//! ```text
//!  template   Go text/template rendering of strategy templates (our gotemplate engine: Go's
//!             text/template with slim-sprig's functions)
//!  status     the job status transitions every driver makes (fail, wait, start, running, success)
//!  cnpg       CloudNativePG + barman-cloud: names, bodies, phases, snapshot, catalog fields
//!  mariadb    mariadb-operator logical backups: operator Backup body, Complete condition, catalog
//!  etcd       etcd-operator snapshots: destination, EtcdSnapshot body, phases, catalog
//!  job        strategies running a batch/v1 Job from a pod template (Job, Altinity)
//!  altinity   clickhouse-backup: the Job mechanics behind a ClickHouse gate
//!  catalog    the Backup catalog entry in upstream's common shape
//!  app_ref    upstream's gate on the application reference (kind and group)
//!  foundationdb  FoundationDBBackup: one running backup per cluster, readiness, catalog fields
//!  velero     Velero Backup of VMInstance/VMDisk apps: VM resources, failure details, catalog fields
//!  mongodb    PerconaServerMongoDBBackup: precondition, states, catalog fields
//! ```

pub mod altinity;
pub mod app_ref;
pub mod catalog;
pub mod cnpg;
pub mod driver;
pub mod etcd;
pub mod foundationdb;
pub mod job;
pub mod mariadb;
pub mod mongodb;
pub mod restore;
pub mod status;
pub mod storage_fault;
pub mod template;
pub mod velero;

pub use driver::Driver;
