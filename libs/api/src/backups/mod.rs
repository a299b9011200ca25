//! Group `backups.cozystack.io/v1alpha1`: the tenant-facing backup API.
//!
//! | kind | scope | status subresource |
//! |---|---|---|
//! | [`BackupClass`] | cluster | yes |
//! | [`BackupJob`] | namespaced | yes |
//! | [`Backup`] | namespaced | **no** (status is written through the main resource, as upstream) |
//! | [`Plan`] | namespaced | yes |
//! | [`RestoreJob`] | namespaced | yes |

mod backup;
mod backup_class;
mod backup_job;
mod plan;
mod restore_job;

pub use backup::*;
pub use backup_class::*;
pub use backup_job::*;
pub use plan::*;
pub use restore_job::*;

/// Category every kind of this group belongs to (`kubectl get cozy-backups`).
pub const CATEGORY: &str = "cozy-backups";
