//! Contract strings shared with the upstream Cozystack controllers.
//!
//! Every label key, annotation, finalizer, condition type, reason, phase and API group that is part of
//! the compatibility contract lives here, so no daemon ever spells one by hand. The values are copied
//! from upstream Cozystack's controllers; changing one breaks wire compatibility
//! with objects written by the upstream controllers.

/// API groups and versions.
pub mod groups {
    /// Core backup API group (`BackupClass`, `BackupJob`, `Backup`, `Plan`, `RestoreJob`).
    pub const BACKUPS: &str = "backups.cozystack.io";
    /// Strategy CR group (`CNPG`, `Etcd`, `MariaDB`, …).
    pub const STRATEGY: &str = "strategy.backups.cozystack.io";
    /// Group of `ApplicationDefinition`.
    pub const COZYSTACK: &str = "cozystack.io";
    /// Group of the tenant-facing application kinds (`Postgres`, `VMDisk`, …) and `Bucket`.
    pub const APPS: &str = "apps.cozystack.io";
    /// The single served version of every group we own.
    pub const V1ALPHA1: &str = "v1alpha1";
}

/// `DefaultApplicationAPIGroup`: an applicationRef whose `apiGroup` is nil or empty means this group.
pub const DEFAULT_APPLICATION_API_GROUP: &str = groups::APPS;

/// Labels.
pub mod labels {
    /// Ownership label on every driver-side object: the owning BackupJob (or RestoreJob) name.
    pub const OWNED_BY_JOB_NAME: &str = "backups.cozystack.io/owned-by.BackupJobName";
    /// Ownership label on every driver-side object: the owning BackupJob (or RestoreJob) namespace.
    pub const OWNED_BY_JOB_NAMESPACE: &str = "backups.cozystack.io/owned-by.BackupJobNamespace";
    /// Label key marking objects managed by the backup platform (projected Secrets).
    pub const MANAGED_BY: &str = "apps.cozystack.io/managed-by";
    /// Value of [`MANAGED_BY`] for objects we own.
    pub const MANAGED_BY_VALUE: &str = "cozystack-backups";
    /// Label on FoundationDBBackups created by the driver, naming the target cluster.
    pub const FOUNDATIONDB_CLUSTER: &str = "backups.cozystack.io/foundationdb-cluster";
    /// CNPG cluster label on cnpg Backups and PVCs.
    pub const CNPG_CLUSTER: &str = "cnpg.io/cluster";
    /// Mode label on batch Jobs of the generic Job strategy (`backup` / `restore`).
    pub const JOB_STRATEGY_MODE: &str = "job.strategy.backups.cozystack.io/mode";
    /// Mode label on batch Jobs of the Altinity strategy (`backup` / `restore`).
    pub const ALTINITY_STRATEGY_MODE: &str = "altinity.strategy.backups.cozystack.io/mode";
    /// Application kind label on HelmReleases and workloads.
    pub const APPLICATION_KIND: &str = "apps.cozystack.io/application.kind";
    /// Application group label on HelmReleases.
    pub const APPLICATION_GROUP: &str = "apps.cozystack.io/application.group";
    /// Application name label on HelmReleases and workloads.
    pub const APPLICATION_NAME: &str = "apps.cozystack.io/application.name";
    /// Ours: marks a cnpg Backup and its catalog `Backup` taken by a RestoreJob of the live
    /// database just before an in-place restore purged it (value `"true"`).
    pub const SAFETY_BACKUP: &str = "backups.cozystack.io/safety-backup";
    /// Ours: the RestoreJob a safety backup was taken for.
    pub const SAFETY_BACKUP_FOR: &str = "backups.cozystack.io/safety-backup.RestoreJobName";
    /// Ours: marks the cnpg Backup a CNPG point-in-time restore took of its source Cluster to
    /// force a WAL switch (its archive must cover the recovery target); the value is the
    /// RestoreJob's name.
    pub const WAL_SWITCH_FOR: &str = "backups.cozystack.io/wal-switch.RestoreJobName";
    /// Ours: a catalog `Backup` re-created from its record in the bucket (value `"true"`).
    pub const RESTORED_FROM_CATALOG: &str = "backups.cozystack.io/restored-from-catalog";
}

/// Annotations.
pub mod annotations {
    /// Pod-template annotation on `cozy-system/cozystack-api` carrying the ApplicationDefinition hash.
    pub const CONFIG_HASH: &str = "cozystack.io/config-hash";
    /// Flux: force a Helm upgrade (honoured only together with [`FLUX_REQUESTED_AT`]).
    pub const FLUX_FORCE_AT: &str = "reconcile.fluxcd.io/forceAt";
    /// Flux: request a reconcile.
    pub const FLUX_REQUESTED_AT: &str = "reconcile.fluxcd.io/requestedAt";
    /// Annotation on a Velero Backup with the JSON of the VM's underlying resources.
    pub const UNDERLYING_RESOURCES: &str = "backups.cozystack.io/underlying-resources";
    /// Annotation on a CNPG ObjectStore: the barman `retentionPolicy` the strategy template asks
    /// for, as the backup-runner last rendered it.
    pub const TEMPLATE_RETENTION_POLICY: &str = "backups.cozystack.io/template-retention-policy";
    /// Annotation on a CNPG ObjectStore: the shortest barman `retentionPolicy` that keeps every
    /// base backup the catalog lists, as the retention-cleaner last computed it. The applied
    /// `spec.retentionPolicy` is the longer of this and the template's.
    pub const RETENTION_FLOOR: &str = "backups.cozystack.io/retention-floor";
}

/// Finalizers.
pub mod finalizers {
    /// Finalizer on `Backup` and `RestoreJob`.
    pub const CLEANUP: &str = "backups.cozystack.io/cleanup";
    /// Legacy finalizer on `Backup`, honoured and removed together with [`CLEANUP`].
    pub const CLEANUP_VELERO_LEGACY: &str = "backups.cozystack.io/cleanup-velero";
}

/// Names of platform objects.
pub mod names {
    /// The projected credentials Secret in tenant and system namespaces.
    pub const CREDENTIALS_SECRET: &str = "cozy-backups-creds";
    /// The platform default BackupClass.
    pub const DEFAULT_BACKUP_CLASS: &str = "cozy-default";
    /// The Velero BackupStorageLocation rendered by the platform.
    pub const DEFAULT_BSL: &str = "cozy-default";
    /// Namespace of every Velero object the drivers create.
    pub const VELERO_NAMESPACE: &str = "cozy-velero";
}

/// Phases written to `status.phase`.
pub mod phases {
    /// BackupJob/RestoreJob: declared upstream, never written.
    pub const PENDING: &str = "Pending";
    /// BackupJob/RestoreJob: a driver is working.
    pub const RUNNING: &str = "Running";
    /// BackupJob/RestoreJob: terminal success.
    pub const SUCCEEDED: &str = "Succeeded";
    /// BackupJob/RestoreJob/Backup: terminal failure.
    pub const FAILED: &str = "Failed";
    /// Backup: the catalog entry is usable.
    pub const READY: &str = "Ready";

    /// True for the phases after which no controller acts on a job.
    pub fn is_terminal(phase: Option<&str>) -> bool {
        matches!(phase, Some(SUCCEEDED) | Some(FAILED))
    }
}

/// Condition types.
pub mod condition_types {
    /// The universal summary condition.
    pub const READY: &str = "Ready";
    /// Owned by the credentials projector on BackupJob and RestoreJob.
    pub const CREDENTIALS_PROJECTED: &str = "CredentialsProjected";
    /// RestoreJob: the target cluster was purged (CNPG, Etcd).
    pub const TARGET_PURGED: &str = "TargetPurged";
    /// RestoreJob: the CNPG WAL-archive gate.
    pub const WAL_ARCHIVE_READY: &str = "WALArchiveReady";
    /// RestoreJob: CNPG point-in-time recovery convergence.
    pub const RECOVERY_CONVERGED: &str = "RecoveryConverged";
    /// RestoreJob: Etcd captured the live cluster spec before purging it.
    pub const ETCD_CLUSTER_SPEC_CAPTURED: &str = "EtcdClusterSpecCaptured";
    /// Ours, RestoreJob (CNPG): the requested `recoveryTime` was checked against the recoverable
    /// window of the archive before anything was changed.
    pub const RECOVERY_WINDOW_CHECKED: &str = "RecoveryWindowChecked";
    /// Ours, RestoreJob (CNPG in place): the live database was backed up before the purge.
    pub const SAFETY_BACKUP_READY: &str = "SafetyBackupReady";
    /// Ours, RestoreJob (CNPG PITR): the WAL archive covers a recovery target that lay past the
    /// newest archived point, before anything was changed.
    pub const RECOVERY_TARGET_ARCHIVED: &str = "RecoveryTargetArchived";
    /// Plan: the cron schedule does not parse (`PlanConditionError`).
    pub const PLAN_ERROR: &str = "Error";
}

/// Condition reasons.
pub mod reasons {
    // BackupJob Ready reasons.
    /// BackupJob: the named BackupClass does not exist (transient).
    pub const BACKUP_CLASS_NOT_FOUND: &str = "BackupClassNotFound";
    /// BackupJob/RestoreJob: credentials projection hit a transient error.
    pub const CREDENTIALS_PROJECTION_PENDING: &str = "CredentialsProjectionPending";
    /// BackupJob/RestoreJob: the Strategy CR does not exist yet.
    pub const STRATEGY_NOT_READY: &str = "StrategyNotReady";
    /// BackupJob (CNPG): the cnpg Cluster does not exist yet.
    pub const CLUSTER_NOT_READY: &str = "ClusterNotReady";
    /// BackupJob (CNPG): the cnpg Backup reported `failed` inside the deadline.
    pub const CNPG_BACKUP_TRANSIENT_FAILURE: &str = "CNPGBackupTransientFailure";
    /// BackupJob (MariaDB): the operator CR does not exist yet.
    pub const MARIADB_NOT_READY: &str = "MariaDBNotReady";
    /// BackupJob (Etcd): the EtcdCluster is not Available.
    pub const ETCD_CLUSTER_NOT_AVAILABLE: &str = "EtcdClusterNotAvailable";
    /// BackupJob (Etcd): the snapshot is in progress.
    pub const ETCD_BACKUP_RUNNING: &str = "EtcdBackupRunning";
    /// BackupJob (FoundationDB): the cluster does not exist.
    pub const FOUNDATIONDB_CLUSTER_NOT_READY: &str = "FoundationDBClusterNotReady";
    /// BackupJob (FoundationDB): the cluster is not available.
    pub const FOUNDATIONDB_CLUSTER_NOT_AVAILABLE: &str = "FoundationDBClusterNotAvailable";
    /// BackupJob (FoundationDB): the cluster version is unknown.
    pub const FOUNDATIONDB_CLUSTER_VERSION_UNKNOWN: &str = "FoundationDBClusterVersionUnknown";
    /// BackupJob (FoundationDB): a Secret the agent template references is missing.
    pub const MISSING_BLOB_CREDENTIALS_SECRET: &str = "MissingBlobCredentialsSecret";
    /// BackupJob (FoundationDB): the backup has not reached a restorable snapshot.
    pub const FOUNDATIONDB_BACKUP_RUNNING: &str = "FoundationDBBackupRunning";
    /// BackupJob (MongoDB): the application does not exist yet.
    pub const MONGODB_APPLICATION_NOT_READY: &str = "MongoDBApplicationNotReady";
    /// BackupJob (MongoDB): the Percona cluster does not exist yet.
    pub const PERCONA_SERVER_MONGODB_NOT_READY: &str = "PerconaServerMongoDBNotReady";
    /// BackupJob (MongoDB): backups are disabled on the Percona cluster.
    pub const PERCONA_SERVER_MONGODB_BACKUPS_DISABLED: &str = "PerconaServerMongoDBBackupsDisabled";
    /// BackupJob: terminal failure.
    pub const BACKUP_FAILED: &str = "BackupFailed";
    /// BackupJob: success.
    pub const BACKUP_COMPLETED: &str = "BackupCompleted";

    // RestoreJob reasons.
    /// RestoreJob (MariaDB): the target operator CR does not exist yet.
    pub const TARGET_MARIADB_NOT_READY: &str = "TargetMariaDBNotReady";
    /// RestoreJob (Etcd): the recreated cluster is bootstrapping.
    pub const ETCD_CLUSTER_BOOTSTRAPPING: &str = "EtcdClusterBootstrapping";
    /// RestoreJob (FoundationDB): the target cluster does not exist yet.
    pub const TARGET_FOUNDATIONDB_CLUSTER_NOT_READY: &str = "TargetFoundationDBClusterNotReady";
    /// RestoreJob (FoundationDB): the restore is running.
    pub const FOUNDATIONDB_RESTORE_RUNNING: &str = "FoundationDBRestoreRunning";
    /// RestoreJob (MongoDB): the target Percona cluster does not exist yet.
    pub const TARGET_PERCONA_SERVER_MONGODB_NOT_READY: &str = "TargetPerconaServerMongoDBNotReady";
    /// RestoreJob (MongoDB): backups are disabled on the target Percona cluster.
    pub const TARGET_PERCONA_SERVER_MONGODB_BACKUPS_DISABLED: &str =
        "TargetPerconaServerMongoDBBackupsDisabled";
    /// RestoreJob: terminal failure.
    pub const RESTORE_FAILED: &str = "RestoreFailed";
    /// RestoreJob (CNPG PITR): the recovery target lies past the archived WAL.
    pub const RECOVERY_TARGET_UNREACHABLE: &str = "RecoveryTargetUnreachable";
    /// RestoreJob: success.
    pub const RESTORE_COMPLETED: &str = "RestoreCompleted";
    /// RestoreJob `TargetPurged` (CNPG, Etcd).
    pub const CLUSTER_PURGED: &str = "ClusterPurged";
    /// RestoreJob `TargetPurged` (Etcd crash recovery).
    pub const CLUSTER_PURGED_RECOVERED: &str = "ClusterPurgedRecovered";
    /// RestoreJob `WALArchiveReady=False`.
    pub const WAITING_FOR_ARCHIVE: &str = "WaitingForArchive";
    /// RestoreJob `WALArchiveReady=True`.
    pub const ARCHIVE_CAUGHT_UP: &str = "ArchiveCaughtUp";
    /// RestoreJob `RecoveryConverged=True`.
    pub const RECOVERY_CONVERGED: &str = "RecoveryConverged";
    /// RestoreJob `EtcdClusterSpecCaptured=True`.
    pub const SPEC_CAPTURED: &str = "SpecCaptured";
    /// Ours, RestoreJob (CNPG PITR, terminal): the recovery target lies before the oldest base
    /// backup in the archive (on `Ready` and `RecoveryWindowChecked=False`).
    pub const RECOVERY_TARGET_BEFORE_WINDOW: &str = "RecoveryTargetBeforeWindow";
    /// Ours, `RecoveryWindowChecked=True`: the target lies inside the known window.
    pub const RECOVERY_TARGET_IN_WINDOW: &str = "RecoveryTargetInWindow";
    /// Ours, `RecoveryWindowChecked=True`: the target lies after the newest archived point known
    /// now (allowed; the archiver may catch up).
    pub const RECOVERY_TARGET_AFTER_WINDOW: &str = "RecoveryTargetAfterWindow";
    /// Ours, `RecoveryWindowChecked=True`: no window could be computed (nothing reported yet).
    pub const RECOVERY_WINDOW_UNKNOWN: &str = "RecoveryWindowUnknown";
    /// Ours, `SafetyBackupReady=False`: the safety backup is being taken.
    pub const SAFETY_BACKUP_RUNNING: &str = "SafetyBackupRunning";
    /// Ours, `SafetyBackupReady=True`: the safety backup is in the catalog.
    pub const SAFETY_BACKUP_COMPLETED: &str = "SafetyBackupCompleted";
    /// Ours, `SafetyBackupReady=False` (terminal): the safety backup failed or timed out, so the
    /// live database was not purged.
    pub const SAFETY_BACKUP_FAILED: &str = "SafetyBackupFailed";
    /// Ours, `RecoveryTargetArchived=False`: a WAL switch of the source was asked for and the
    /// restore waits for the archive to pass the recovery target.
    pub const WAITING_FOR_WAL_SWITCH: &str = "WaitingForWALSwitch";
    /// Ours, `RecoveryTargetArchived=True`: the recoverable window now ends at or after the
    /// recovery target.
    pub const ARCHIVE_COVERS_TARGET: &str = "ArchiveCoversTarget";

    // Credentials projection (`CredentialsProjected` condition and failure metric labels).
    /// The source Secret does not exist (transient).
    pub const SOURCE_SECRET_MISSING: &str = "SourceSecretMissing";
    /// The source Secret cannot be parsed or lacks required keys (terminal).
    pub const SOURCE_SECRET_MALFORMED: &str = "SourceSecretMalformed";
    /// The target Secret exists without our ownership label (terminal).
    pub const TARGET_SECRET_NOT_OWNED: &str = "TargetSecretNotOwned";
    /// An API call failed (transient).
    pub const API_ERROR: &str = "APIError";
    /// Metric label for an error that is not a projection error.
    pub const UNKNOWN: &str = "Unknown";
    /// `CredentialsProjected=True`.
    pub const PROJECTED: &str = "Projected";

    // Plan `Error` condition. Upstream uses "Failed to parse cron spec" / "Cron spec is valid", which
    // contain spaces and are rejected by the condition-reason pattern of a real API server; we use
    // the CamelCase forms (documented in docs/api.md).
    /// Plan `Error=True`: the cron spec does not parse.
    pub const CRON_SPEC_INVALID: &str = "CronSpecInvalid";
    /// Plan `Error=False`: the cron spec parses.
    pub const CRON_SPEC_VALID: &str = "CronSpecValid";

    // BackupClass `cozy-default` Ready (written by the strategy renderer).
    /// Every object the default class routes to exists.
    pub const DEFAULT_OBJECTS_PRESENT: &str = "DefaultObjectsPresent";
    /// Some object the default class routes to is missing.
    pub const DEFAULT_OBJECTS_MISSING: &str = "DefaultObjectsMissing";
}

/// Event reasons.
pub mod event_reasons {
    /// BackupJob (Velero): a Velero Backup was created.
    pub const VELERO_BACKUP_CREATED: &str = "VeleroBackupCreated";
    /// BackupJob (Velero): creating the Velero Backup failed.
    pub const VELERO_BACKUP_CREATION_FAILED: &str = "VeleroBackupCreationFailed";
    /// RestoreJob: `spec.options` is not valid for the driver.
    pub const MALFORMED_OPTIONS: &str = "MalformedOptions";
    /// RestoreJob: the Backup's snapshot payload does not decode.
    pub const MALFORMED_SNAPSHOT: &str = "MalformedSnapshot";
    /// RestoreJob: an option key the driver does not know.
    pub const UNKNOWN_RESTORE_OPTION: &str = "UnknownRestoreOption";
    /// RestoreJob (ours): an option whose value cannot apply (a timeout that is not positive), so
    /// the driver's default applies instead.
    pub const RESTORE_OPTION_IGNORED: &str = "RestoreOptionIgnored";
    /// RestoreJob (CNPG): recovery pod logs could not be read.
    pub const RECOVERY_CLASSIFICATION_FORBIDDEN: &str = "RecoveryClassificationForbidden";
    /// RestoreJob: cleanup on deletion failed.
    pub const CLEANUP_FAILED: &str = "CleanupFailed";
    /// RestoreJob (Velero): preparation steps.
    pub const PREPARE_FOR_RESTORE: &str = "PrepareForRestore";
    /// RestoreJob (Velero): HelmRelease renamed after a copy restore.
    pub const POST_RESTORE_RENAME: &str = "PostRestoreRename";
    /// RestoreJob (Velero): a Velero Restore was created.
    pub const VELERO_RESTORE_CREATED: &str = "VeleroRestoreCreated";
    /// RestoreJob (Velero): creating the Velero Restore failed.
    pub const VELERO_RESTORE_CREATION_FAILED: &str = "VeleroRestoreCreationFailed";
    /// Ours, RestoreJob (CNPG in place): the safety backup was started.
    pub const SAFETY_BACKUP_STARTED: &str = "SafetyBackupStarted";
    /// Ours, RestoreJob (CNPG in place): the safety backup is in the catalog.
    pub const SAFETY_BACKUP_COMPLETED: &str = "SafetyBackupCompleted";
    /// Ours, RestoreJob (CNPG in place): the safety backup failed; the purge was refused.
    pub const SAFETY_BACKUP_FAILED: &str = "SafetyBackupFailed";
    /// Strategy renderer: its configuration ConfigMap was rejected.
    pub const INVALID_CONFIGURATION: &str = "InvalidConfiguration";

    // Bad input (ours): a malformed object the daemon cannot act on as written.
    /// Backup runner: a string of the strategy's template does not parse as a Go template, or
    /// refers to a route parameter that is not set (upstream renders it anyway; the job goes on).
    pub const STRATEGY_TEMPLATE_INVALID: &str = "StrategyTemplateInvalid";
    /// Backup runner: the BackupClass routes the job to a strategy group no built-in driver
    /// serves; the job is left to the third-party controller of that group.
    pub const STRATEGY_NOT_HANDLED: &str = "StrategyNotHandled";
    /// Backup runner: a Plan's BackupJob for a due slot was refused by the API server (for
    /// example a Plan name so long that `<plan>-<minutes>` is not a valid object name).
    pub const BACKUP_JOB_CREATE_REFUSED: &str = "BackupJobCreateRefused";

    // Retention (ours): why the retention-cleaner deleted, kept or deferred an object.
    /// A Plan's successful Backup that no retention rule keeps was deleted.
    pub const RETENTION_EXPIRED: &str = "RetentionExpired";
    /// A Plan's successful Backup older than the policy's `maxAge` was deleted.
    pub const MAX_AGE_EXCEEDED: &str = "MaxAgeExceeded";
    /// A failed BackupJob or failed Backup older than the failed-backup TTL was deleted.
    pub const FAILED_BACKUP_EXPIRED: &str = "FailedBackupExpired";
    /// Kept by a rule of the Plan's retention policy (`keepLast`, `keepDaily`, …).
    pub const KEPT_BY_POLICY: &str = "KeptByPolicy";
    /// Kept although past the failed-backup TTL: among the Plan's newest `keepFailed` failures.
    pub const KEPT_FAILED: &str = "KeptFailed";
    /// Floor: the newest successful Backup of a Plan is never deleted.
    pub const KEPT_NEWEST_SUCCESS: &str = "KeptNewestSuccess";
    /// Floor: a RestoreJob that has not finished names this Backup.
    pub const KEPT_REFERENCED_BY_RESTORE: &str = "KeptReferencedByRestore";
    /// Floor (CNPG): a running point-in-time restore needs this base backup to reach its target.
    pub const KEPT_RECOVERY_WINDOW: &str = "KeptRecoveryWindow";
    /// Mass-deletion protection: a Plan's policy would delete too large a share of its successful
    /// Backups at once, so nothing of that Plan is deleted.
    pub const RETENTION_REFUSED: &str = "RetentionRefused";
    /// Mass-deletion protection: over the per-namespace limit of one sweep; left for the next.
    pub const RETENTION_DEFERRED: &str = "RetentionDeferred";
    /// A Plan's retention policy (or the schedule whose time zone it needs) is not valid; nothing
    /// of that Plan is deleted.
    pub const INVALID_RETENTION_POLICY: &str = "InvalidRetentionPolicy";
    /// FoundationDB: no Backup of the cluster remains, so its FoundationDBBackup (and the
    /// streaming `backup_agent`) was stopped.
    pub const FOUNDATIONDB_BACKUP_STOPPED: &str = "FoundationDBBackupStopped";
}

/// Strategy kinds, in the order upstream's `supportedBackupStrategyKinds()` returns them (the order
/// matters for the "supported: …" message).
pub const SUPPORTED_STRATEGY_KINDS: [&str; 8] = [
    "Job",
    "Velero",
    "CNPG",
    "Altinity",
    "MariaDB",
    "MongoDB",
    "FoundationDB",
    "Etcd",
];

/// Metric names that upstream defines and we must keep.
pub mod metrics {
    /// Counter `{namespace}`.
    pub const PROJECTION_SUCCESSES: &str =
        "cozystack_backup_credentials_projection_successes_total";
    /// Counter `{namespace, reason}`.
    pub const PROJECTION_FAILURES: &str = "cozystack_backup_credentials_projection_failures_total";
    /// Gauge `{backupclass}`.
    pub const DEFAULT_OBJECTS_MISSING: &str = "cozystack_backup_default_objects_missing";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_phases() {
        assert!(phases::is_terminal(Some("Succeeded")));
        assert!(phases::is_terminal(Some("Failed")));
        assert!(!phases::is_terminal(Some("Running")));
        assert!(!phases::is_terminal(Some("")));
        assert!(!phases::is_terminal(None));
    }

    #[test]
    fn condition_reasons_match_the_api_server_pattern() {
        // The metav1.Condition reason pattern: ^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$
        let ok = |r: &str| {
            let b = r.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphabetic()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || b"_,:".contains(c))
                && (b[b.len() - 1].is_ascii_alphanumeric() || b[b.len() - 1] == b'_')
        };
        for r in [
            reasons::CRON_SPEC_INVALID,
            reasons::CRON_SPEC_VALID,
            reasons::CREDENTIALS_PROJECTION_PENDING,
            reasons::RECOVERY_TARGET_UNREACHABLE,
            reasons::RECOVERY_TARGET_BEFORE_WINDOW,
            reasons::RECOVERY_TARGET_IN_WINDOW,
            reasons::RECOVERY_TARGET_AFTER_WINDOW,
            reasons::RECOVERY_WINDOW_UNKNOWN,
            reasons::SAFETY_BACKUP_RUNNING,
            reasons::SAFETY_BACKUP_COMPLETED,
            reasons::SAFETY_BACKUP_FAILED,
            reasons::WAITING_FOR_WAL_SWITCH,
            reasons::ARCHIVE_COVERS_TARGET,
            reasons::PROJECTED,
            reasons::API_ERROR,
        ] {
            assert!(ok(r), "{r} violates the condition reason pattern");
        }
        assert!(
            !ok("Failed to parse cron spec"),
            "upstream's reason is invalid by design"
        );
    }
}

/// Ours: restore drills (`Plan.spec.verification`), run by the restore-orchestrator.
pub mod drills {
    /// Label on every object a drill creates (the scratch application, its RestoreJob), value
    /// `"true"`. An application carrying it belongs to no tenant: no Plan backs it up, retention
    /// never governs it and no drill is run of it.
    pub const LABEL: &str = "backups.cozystack.io/drill";
    /// Label on a drill's objects: the Backup being verified.
    pub const BACKUP_LABEL: &str = "backups.cozystack.io/drill.BackupName";
    /// Annotation on a Backup while a drill of it runs: the drill's persisted state (JSON).
    pub const STATE_ANNOTATION: &str = "backups.cozystack.io/drill-state";
    /// Annotation on a Backup asking for one drill now (any value; removed when recorded).
    pub const REQUEST_ANNOTATION: &str = "backups.cozystack.io/verify-requested";
    /// The infix of a scratch application's name: `<app>-verify-<hash>`.
    pub const NAME_INFIX: &str = "-verify-";
    /// Condition type on a Backup: the last drill's result.
    pub const VERIFIED: &str = "Verified";
    /// `status.verification.result` of a drill that restored and checked the data.
    pub const PASSED: &str = "Passed";
    /// `status.verification.result` of a drill that could not.
    pub const FAILED: &str = "Failed";
}
