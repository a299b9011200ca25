//! Command line: the shared runtime groups and the renderer's defaults, which the configuration
//! ConfigMap's `values.yaml` overrides key by key (their own defaults equal upstream's values).

use api::platform::{BackupStorageValues, VeleroValues};
use clap::Parser;
use strategy_render::RenderConfig;

/// Renders the platform default BackupClass, strategies, Bucket and Velero BSL.
#[derive(Parser, Debug, Clone)]
#[command(name = "strategy-renderer", version, about)]
pub struct Args {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: runtime::ClientArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub admin: runtime::AdminArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub log: runtime::LogArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub lease: runtime::LeaseArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub render: RenderArgs,
}

/// Renderer settings. The storage flags are defaults that the ConfigMap's `values.yaml` overrides
/// key by key; their own defaults equal upstream's `values.yaml`.
#[derive(clap::Args, Debug, Clone)]
pub struct RenderArgs {
    /// Namespace of the configuration ConfigMap.
    #[arg(
        long,
        env = "CONFIG_NAMESPACE",
        default_value = "cozy-backup-controller"
    )]
    pub config_namespace: String,
    /// Name of the configuration ConfigMap (key `values.yaml` = `{backupStorage: …, velero: …}`).
    #[arg(long, env = "CONFIG_NAME", default_value = "strategy-renderer-config")]
    pub config_name: String,
    /// Route FoundationDB applications in cozy-default to cozy-default-foundationdb (upstream ships the
    /// strategy unbound because the operator does not mount cozy-backups-creds; see the docs).
    #[arg(long, env = "BIND_FOUNDATIONDB")]
    pub bind_foundationdb: bool,
    /// Image of the Altinity strategy's client container.
    #[arg(long, env = "CH_BACKUP_CLIENT_IMAGE", default_value = strategy_render::config::DEFAULT_CH_BACKUP_CLIENT_IMAGE)]
    pub ch_backup_client_image: String,
    /// Default `backupStorage.provisionBucket`.
    #[arg(long, env = "BACKUP_STORAGE_PROVISION_BUCKET", action = clap::ArgAction::Set, default_value_t = BackupStorageValues::default().provision_bucket)]
    pub provision_bucket: bool,
    /// Default `backupStorage.namespace`.
    #[arg(long, env = "BACKUP_STORAGE_SECRET_NAMESPACE", default_value_t = BackupStorageValues::default().namespace)]
    pub storage_namespace: String,
    /// Default `backupStorage.bucketName`.
    #[arg(long, env = "BACKUP_STORAGE_BUCKET_NAME", default_value_t = BackupStorageValues::default().bucket_name)]
    pub bucket_name: String,
    /// Default `backupStorage.bucketNameOverride`.
    #[arg(long, env = "BACKUP_STORAGE_BUCKET_NAME_OVERRIDE", default_value_t = BackupStorageValues::default().bucket_name_override)]
    pub bucket_name_override: String,
    /// Default `backupStorage.endpoint` (the fallback endpoint, a full URL).
    #[arg(long, env = "BACKUP_STORAGE_ENDPOINT", default_value_t = BackupStorageValues::default().endpoint)]
    pub endpoint: String,
    /// Default `backupStorage.region`.
    #[arg(long, env = "BACKUP_STORAGE_REGION", default_value_t = BackupStorageValues::default().region)]
    pub region: String,
    /// Default `backupStorage.forcePathStyle`.
    #[arg(long, env = "BACKUP_STORAGE_FORCE_PATH_STYLE", action = clap::ArgAction::Set, default_value_t = BackupStorageValues::default().force_path_style)]
    pub force_path_style: bool,
    /// Default `backupStorage.systemSecretName`.
    #[arg(long, env = "BACKUP_STORAGE_SECRET_NAME", default_value_t = BackupStorageValues::default().system_secret_name)]
    pub system_secret_name: String,
    /// Default `backupStorage.systemNamespaces` (comma-separated; read by the credentials projector,
    /// accepted here so one values block serves both).
    #[arg(
        long,
        env = "BACKUP_STORAGE_SYSTEM_NAMESPACES",
        value_delimiter = ',',
        default_value = "cozy-velero"
    )]
    pub system_namespaces: Vec<String>,
    /// Default `velero.bslEnabled`.
    #[arg(long, env = "VELERO_BSL_ENABLED", action = clap::ArgAction::Set, default_value_t = VeleroValues::default().bsl_enabled)]
    pub velero_bsl_enabled: bool,
    /// Default `velero.namespace`.
    #[arg(long, env = "VELERO_NAMESPACE", default_value_t = VeleroValues::default().namespace)]
    pub velero_namespace: String,
}

impl RenderArgs {
    /// The configuration the flags describe (before the ConfigMap is laid over it).
    pub fn defaults(&self) -> RenderConfig {
        RenderConfig {
            backup_storage: BackupStorageValues {
                provision_bucket: self.provision_bucket,
                namespace: self.storage_namespace.clone(),
                bucket_name: self.bucket_name.clone(),
                bucket_name_override: self.bucket_name_override.clone(),
                endpoint: self.endpoint.clone(),
                region: self.region.clone(),
                force_path_style: self.force_path_style,
                system_secret_name: self.system_secret_name.clone(),
                system_namespaces: self.system_namespaces.clone(),
                reconcile_default_objects: true,
            },
            velero: VeleroValues {
                bsl_enabled: self.velero_bsl_enabled,
                namespace: self.velero_namespace.clone(),
            },
            bind_foundationdb: self.bind_foundationdb,
            ch_backup_client_image: self.ch_backup_client_image.clone(),
        }
    }
}
