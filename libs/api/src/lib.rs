//! Rust types of every Kubernetes kind the backup control plane serves or reads.
//!
//! ```text
//!   contract    exact upstream strings (labels, finalizer, conditions, reasons, phases, groups)
//!   meta        Condition (list-map keyed by `type`), object references, schema helpers
//!   backups     backups.cozystack.io/v1alpha1            BackupClass BackupJob Backup Plan RestoreJob
//!   strategy    strategy.backups.cozystack.io/v1alpha1   CNPG Etcd MariaDB Altinity FoundationDB MongoDB Velero Job
//!   appdef      cozystack.io/v1alpha1                    ApplicationDefinition
//!   thirdparty  typed views of CNPG, barman-cloud, Flux, Velero, COSI, apps.cozystack.io and operator kinds
//!   crds        the generated CRDs (deploy/crds/)
//! ```
//!
//! Invariants: JSON field names and group/kind/plural spellings are wire-compatible with upstream
//! Cozystack; deliberate differences are listed in `docs/api.md`.
//! Third-party views keep unknown fields so a read-modify-write never drops data.

pub mod appdef;
pub mod backups;
pub mod contract;
pub mod crds;
pub mod meta;
pub mod platform;
pub mod strategy;
#[cfg(feature = "test-util")]
pub mod test_util;
pub mod thirdparty;

pub use meta::{Condition, ConditionStatus, LocalObjectReference, TypedLocalObjectReference};
