//! The state the simulator shares with its instance tasks and Backup jobs: the API client, the
//! options and the caches of every watched kind.

use std::sync::Arc;

use tokio::sync::watch;

use super::Options;
use crate::cache::Cache;

/// Everything the simulator watches, shared with the instance tasks.
pub(super) struct Shared {
    pub(super) client: kube::Client,
    pub(super) options: Options,
    pub(super) clusters: Arc<Cache>,
    pub(super) backups: Arc<Cache>,
    pub(super) object_stores: Arc<Cache>,
    pub(super) secrets: Arc<Cache>,
    /// Bumped on every change of any watched object.
    pub(super) tick: watch::Sender<u64>,
}
