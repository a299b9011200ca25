//! The catalog sync (leader only, a `runtime::Singleton` pass on leadership and every
//! `--catalog-sync-interval`): re-creates the Backups whose record is in the system bucket and
//! whose namespace exists, but which the cluster lacks (docs/disaster-recovery.md).
//!
//! ```text
//!  ListObjectsV2 catalog/v1/ (pages of 1,000, streamed)
//!    key not catalog/v1/<ns>/<name>.json ─────────────► refuse bad_key        (no GET)
//!    Backup <ns>/<name> in the cache ─────────────────► skip                  (no GET)
//!    namespace missing ───────────────────────────────► skip, counted         (no GET)
//!    listed size > 1 MiB ─────────────────────────────► refuse too_large      (no GET)
//!    GET (≤ 1 MiB, 8 at a time) ─► open: MAC, path, shape ─► refuse <reason>
//!                               └► create Backup (label restored-from-catalog, status included)
//!                                     409 ─► exists: never overwritten
//!                                     201 ─► Normal Event RestoredFromCatalog on the Backup
//! ```
//!
//! Each refusal is counted and reported once per object version (key and ETag) per process: a
//! Warning Event `CatalogRecordRefused` about the signing-key Secret in its namespace for the first
//! [`EVENTS_PER_PASS`] of a pass, then one summary Event; no Event carries a record's content.
//! Memory is bounded by one listing page, one record and the remembered refusals
//! ([`REMEMBERED_MAX`]). A pass killed at any point is simply run again: creates are idempotent
//! (409) and nothing else is written.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use api::backups::Backup;
use backup_storage::catalog::{self as record, Rejection};
use backup_storage::s3::Got;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ObjectReference};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource};
use runtime::singleton::{Evaluate, Outcome, Pass};
use runtime::{ErrorClass, ReconcileError};

use crate::records::{Bucket, Mirror};

/// Individual Warning Events per pass; further refusals are summarised in one Event.
pub const EVENTS_PER_PASS: usize = 10;
/// Refusals remembered (so that a junk key is reported once); the set is cleared beyond this.
pub const REMEMBERED_MAX: usize = 100_000;
/// Records fetched and verified at once.
pub const CONCURRENCY: usize = 8;

/// A failed pass.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The bucket side.
    #[error("catalog sync: {0}")]
    Mirror(#[from] crate::records::MirrorError),
    /// Listing the bucket.
    #[error("catalog sync: {0}")]
    S3(#[from] backup_storage::s3::S3Error),
    /// An API call.
    #[error("catalog sync: {action}: {source}")]
    Api {
        /// What was attempted.
        action: &'static str,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The Backup cache ended.
    #[error("catalog sync: the Backup cache is gone")]
    CacheGone,
}

impl ReconcileError for SyncError {
    fn kind(&self) -> &'static str {
        match self {
            SyncError::Mirror(e) => e.kind(),
            SyncError::S3(_) => "s3",
            SyncError::Api { .. } => "api",
            SyncError::CacheGone => "cache",
        }
    }
    fn class(&self) -> ErrorClass {
        ErrorClass::Transient
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Objects listed under the prefix.
    pub listed: u64,
    /// Backups re-created.
    pub restored: u64,
    /// Records whose Backup exists.
    pub present: u64,
    /// Records of namespaces that do not exist.
    pub namespace_missing: u64,
    /// Records refused in this pass (new refusals only), by reason.
    pub rejected: BTreeMap<&'static str, u64>,
    /// S3 requests the bucket client has made so far (all passes and record writes).
    pub s3_requests: u64,
    /// Creates that failed for a reason other than "exists" (tried again next pass).
    pub failed: u64,
    /// The bucket is not configured.
    pub unconfigured: bool,
}

impl Outcome for Report {
    fn noteworthy(&self) -> bool {
        self.restored > 0 || !self.rejected.is_empty() || self.failed > 0
    }
}

/// One record's fate.
enum Fate {
    Present,
    NamespaceMissing,
    Restored,
    Failed,
    Refused(String, Rejection),
}

/// The sync loop's state.
pub struct CatalogSync {
    client: Client,
    mirror: Arc<Mirror>,
    backups: Store<Backup>,
    recorder: runtime::events::Recorder,
    key_secret: (String, String),
    refused: HashSet<(String, String)>,
}

impl CatalogSync {
    /// A sync over `backups` (the Backup cache) through `mirror`.
    pub fn new(
        client: Client,
        mirror: Arc<Mirror>,
        backups: Store<Backup>,
        recorder: runtime::events::Recorder,
        key_secret: &str,
    ) -> Self {
        let (ns, name) = key_secret.split_once('/').unwrap_or(("", key_secret));
        CatalogSync {
            client,
            mirror,
            backups,
            recorder,
            key_secret: (ns.to_owned(), name.to_owned()),
            refused: HashSet::new(),
        }
    }

    fn key_secret_ref(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Secret".into()),
            namespace: Some(self.key_secret.0.clone()),
            name: Some(self.key_secret.1.clone()),
            ..Default::default()
        }
    }

    /// One pass (public for the benchmark and the tests).
    pub async fn pass(&mut self) -> Result<Report, SyncError> {
        let mut report = Report::default();
        self.mirror.ensure_key().await?;
        let Some(bucket) = self.mirror.bucket().await? else {
            report.unconfigured = true;
            metrics::counter!(crate::metrics::CATALOG_SYNCS, "result" => "unconfigured")
                .increment(1);
            return Ok(report);
        };
        self.backups
            .wait_until_ready()
            .await
            .map_err(|_| SyncError::CacheGone)?;
        let namespaces: HashSet<String> = Api::<Namespace>::all(self.client.clone())
            .list_metadata(&ListParams::default())
            .await
            .map_err(|source| SyncError::Api {
                action: "list namespaces",
                source,
            })?
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        let requests_before = bucket.s3.requests();
        let result = self.walk(&bucket, &namespaces, &mut report).await;
        metrics::counter!(crate::metrics::CATALOG_SYNC_S3_REQUESTS)
            .increment(bucket.s3.requests().saturating_sub(requests_before));
        let label = if result.is_ok() { "ok" } else { "error" };
        metrics::counter!(crate::metrics::CATALOG_SYNCS, "result" => label).increment(1);
        result.map(|()| report)
    }

    async fn walk(
        &mut self,
        bucket: &Bucket,
        namespaces: &HashSet<String>,
        report: &mut Report,
    ) -> Result<(), SyncError> {
        let mut token: Option<String> = None;
        let mut events = 0usize;
        let mut summary: BTreeMap<&'static str, u64> = BTreeMap::new();
        loop {
            let page = bucket
                .s3
                .list_page(record::PREFIX, token.as_deref())
                .await?;
            report.listed += page.objects.len() as u64;
            let mut fetch = Vec::new();
            for obj in page.objects {
                let seen = (obj.key.clone(), obj.etag.clone());
                if self.refused.contains(&seen) {
                    continue;
                }
                let Some((ns, name)) = record::parse_object_key(&obj.key) else {
                    self.refuse(
                        &obj.key,
                        &obj.etag,
                        Rejection::Key,
                        report,
                        &mut events,
                        &mut summary,
                    )
                    .await;
                    continue;
                };
                if self.backups.get(&ObjectRef::new(name).within(ns)).is_some() {
                    report.present += 1;
                    continue;
                }
                if !namespaces.contains(ns) {
                    report.namespace_missing += 1;
                    continue;
                }
                if obj.size > record::RECORD_MAX_BYTES {
                    self.refuse(
                        &obj.key,
                        &obj.etag,
                        Rejection::TooLarge,
                        report,
                        &mut events,
                        &mut summary,
                    )
                    .await;
                    continue;
                }
                fetch.push(obj);
            }
            let fates: Vec<(String, Fate)> = futures::stream::iter(fetch)
                .map(|obj| {
                    let bucket = bucket.clone();
                    let client = self.client.clone();
                    let recorder = self.recorder.clone();
                    async move {
                        let fate = restore_one(&bucket, &client, &recorder, &obj.key).await;
                        (obj.etag, fate)
                    }
                })
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
            for (etag, fate) in fates {
                match fate {
                    Fate::Present => report.present += 1,
                    Fate::NamespaceMissing => report.namespace_missing += 1,
                    Fate::Restored => report.restored += 1,
                    Fate::Failed => report.failed += 1,
                    Fate::Refused(key, why) => {
                        self.refuse(&key, &etag, why, report, &mut events, &mut summary)
                            .await
                    }
                }
            }
            report.s3_requests = bucket.s3.requests();
            match page.next {
                Some(next) => token = Some(next),
                None => break,
            }
        }
        if !summary.is_empty() {
            let by_reason: Vec<String> = summary.iter().map(|(r, n)| format!("{r}: {n}")).collect();
            let total: u64 = summary.values().sum();
            self.event(
                EventType::Warning,
                "CatalogRecordsRefused",
                &format!(
                    "{total} more catalog records under {} refused in this pass ({}); nothing was created from them",
                    record::PREFIX,
                    by_reason.join(", ")
                ),
            )
            .await;
        }
        Ok(())
    }

    async fn refuse(
        &mut self,
        key: &str,
        etag: &str,
        why: Rejection,
        report: &mut Report,
        events: &mut usize,
        summary: &mut BTreeMap<&'static str, u64>,
    ) {
        let reason = why.reason();
        metrics::counter!(crate::metrics::CATALOG_REJECTED, "reason" => reason).increment(1);
        *report.rejected.entry(reason).or_default() += 1;
        if self.refused.len() >= REMEMBERED_MAX {
            self.refused.clear();
        }
        self.refused.insert((key.to_owned(), etag.to_owned()));
        let shown: String = key.chars().take(300).collect();
        tracing::warn!(record = %shown, reason, "refused a catalog record: {why}");
        if *events < EVENTS_PER_PASS {
            *events += 1;
            self.event(
                EventType::Warning,
                "CatalogRecordRefused",
                &format!(
                    "refused catalog record {shown} ({reason}): {why}; nothing was created from it"
                ),
            )
            .await;
        } else {
            *summary.entry(reason).or_default() += 1;
        }
    }

    async fn event(&self, type_: EventType, reason: &str, note: &str) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(runtime::events::note(note)),
            action: "CatalogSync".into(),
            secondary: None,
        };
        if let Err(e) = self
            .recorder
            .publish_single(&ev, &self.key_secret_ref())
            .await
        {
            tracing::debug!(error = %e, "could not publish an Event");
        }
    }
}

async fn restore_one(
    bucket: &Bucket,
    client: &Client,
    recorder: &runtime::events::Recorder,
    key: &str,
) -> Fate {
    let bytes = match bucket.s3.get_capped(key, record::RECORD_MAX_BYTES).await {
        Ok(Got::Bytes(b)) => b,
        Ok(Got::TooLarge) => return Fate::Refused(key.to_owned(), Rejection::TooLarge),
        // Deleted since the listing.
        Ok(Got::Missing) => return Fate::Present,
        Err(e) => {
            tracing::warn!(record = %key, error = %e, "could not read a catalog record; next pass");
            return Fate::Failed;
        }
    };
    let backup = match bucket.open(key, &bytes) {
        Ok(b) => b,
        Err(why) => return Fate::Refused(key.to_owned(), why),
    };
    let ns = backup.metadata.namespace.clone().unwrap_or_default();
    let name = backup.metadata.name.clone().unwrap_or_default();
    match Api::<Backup>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &backup)
        .await
    {
        Ok(created) => {
            metrics::counter!(crate::metrics::CATALOG_RESTORED).increment(1);
            tracing::info!(backup = %format!("{ns}/{name}"), "re-created a Backup from its catalog record");
            let ev = Event {
                type_: EventType::Normal,
                reason: "RestoredFromCatalog".into(),
                note: Some(runtime::events::note(&format!(
                    "Backup {ns}/{name} re-created from its signed catalog record {key} in bucket {}",
                    bucket.s3.bucket()
                ))),
                action: "CatalogSync".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&ev, &created.object_ref(&())).await {
                tracing::debug!(error = %e, "could not publish an Event");
            }
            Fate::Restored
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Fate::Present,
        Err(kube::Error::Api(e)) if e.code == 404 => Fate::NamespaceMissing,
        Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => {
            Fate::Refused(key.to_owned(), Rejection::Invalid(e.message))
        }
        Err(e) => {
            tracing::warn!(backup = %format!("{ns}/{name}"), error = %e, "could not re-create a Backup; next pass");
            Fate::Failed
        }
    }
}

impl Evaluate for CatalogSync {
    type Outcome = Report;
    type Error = SyncError;

    async fn evaluate(&mut self, pass: &Pass) -> Result<Report, SyncError> {
        if !pass.is_leading() {
            return Ok(Report::default());
        }
        self.pass().await
    }
}
