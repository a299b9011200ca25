//! `catalog`: the Backup catalog's records in the system bucket, seen from the operator's seat
//! (docs/disaster-recovery.md).
//!
//! ```text
//!  Secret tenant-root/bucket-cozy-backups-system-credentials ─► S3 client (--endpoint, --ca-file)
//!  Secret cozy-backup-controller/cozy-backups-catalog-key    ─► verifies each record (never printed)
//!  catalog status         records ⋈ Backups: in both, bucket only, cluster only, refused (reason)
//!  catalog sync --dry-run what the runner's sync would do with each record, nothing written
//!  catalog export -n NS   the verified records of one namespace (JSON), refusals named
//! ```
//!
//! Invariants: read only (no write to the bucket or the API); the key and the bucket keys are never
//! printed; a missing or unreadable Secret fails naming the Secret and the flag that overrides it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;

use anyhow::Context as _;
use api::backups::{Backup, BackupSpec, BackupStatus};
use backup_storage::catalog::{self as record, Rejection};
use backup_storage::s3::{Got, S3Client, S3Config};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

/// The catalog subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum CatalogCommand {
    /// Records in the bucket against Backups in the cluster: in both, bucket only, cluster only,
    /// refused (with the reason).
    Status {
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Format::Table)]
        output: Format,
        #[command(flatten)]
        bucket: BucketArgs,
    },
    /// Preview the backup-runner's catalog sync: which Backups it would re-create, which records
    /// it would refuse. Nothing is written (the runner's leader does the sync).
    Sync {
        /// Required: only a preview is offered.
        #[arg(long)]
        dry_run: bool,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Format::Table)]
        output: Format,
        #[command(flatten)]
        bucket: BucketArgs,
    },
    /// Print the records of the namespace (`-n`) as JSON: each record's key, whether it verifies,
    /// and its content.
    Export {
        #[command(flatten)]
        bucket: BucketArgs,
    },
}

/// Output formats.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Columns.
    Table,
    /// JSON.
    Json,
}

/// Where the bucket and the key are.
#[derive(clap::Args, Debug, Clone)]
pub struct BucketArgs {
    /// The system bucket's credentials Secret, `<namespace>/<name>`.
    #[arg(
        long,
        default_value = "tenant-root/bucket-cozy-backups-system-credentials"
    )]
    pub bucket_secret: String,
    /// The catalog's HMAC key Secret, `<namespace>/<name>`.
    #[arg(
        long,
        default_value = "cozy-backup-controller/cozy-backups-catalog-key"
    )]
    pub key_secret: String,
    /// The S3 endpoint URL (default: `https://` + the bucket Secret's endpoint).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// A PEM bundle of CAs trusted for the endpoint.
    #[arg(long)]
    pub ca_file: Option<std::path::PathBuf>,
}

/// The key of the signing key in its Secret (as the runner writes it).
const KEY_DATA: &str = "hmac-sha256.key";

async fn secret(client: &kube::Client, which: &str, flag: &str) -> anyhow::Result<Secret> {
    let (ns, name) = which
        .split_once('/')
        .with_context(|| format!("{flag} {which:?} is not <namespace>/<name>"))?;
    match Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
    {
        Ok(Some(s)) => Ok(s),
        Ok(None) => Err(crate::Exit::not_found(format!(
            "Secret {ns}/{name} not found ({flag}); the catalog commands need it"
        ))
        .into()),
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 401 => anyhow::bail!(
            "not allowed to read Secret {ns}/{name} ({flag}): the catalog commands need `get` on it \
             (an operator's rights)"
        ),
        Err(e) => Err(e).with_context(|| format!("get Secret {ns}/{name}")),
    }
}

/// The bucket client and the key.
async fn open_bucket(
    client: &kube::Client,
    args: &BucketArgs,
) -> anyhow::Result<(S3Client, Vec<u8>)> {
    let s = secret(client, &args.bucket_secret, "--bucket-secret").await?;
    let data: BTreeMap<String, Vec<u8>> = s
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    let (ns, name) = args.bucket_secret.split_once('/').unwrap_or_default();
    let creds = backup_storage::credentials::parse_source(ns, name, &data)
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    let endpoint = match &args.endpoint {
        Some(e) => e.clone(),
        None if !creds.endpoint.is_empty() => {
            backup_storage::endpoint::resolve(true, "", Some(creds.endpoint.as_bytes()))
        }
        None => anyhow::bail!(
            "Secret {} has no endpoint; pass --endpoint",
            args.bucket_secret
        ),
    };
    if creds.bucket_name.is_empty() {
        anyhow::bail!("Secret {} names no bucket (bucketName)", args.bucket_secret);
    }
    let ca_pem = match &args.ca_file {
        Some(p) => {
            Some(std::fs::read(p).with_context(|| format!("read --ca-file {}", p.display()))?)
        }
        None => None,
    };
    let s3 = S3Client::new(S3Config::for_source(&creds, endpoint, ca_pem))?;
    let key = secret(client, &args.key_secret, "--key-secret")
        .await?
        .data
        .and_then(|mut d| d.remove(KEY_DATA))
        .map(|b| b.0)
        .unwrap_or_default();
    if key.len() < record::KEY_MIN_BYTES {
        anyhow::bail!(
            "Secret {} holds no usable key under {KEY_DATA} (at least {} bytes)",
            args.key_secret,
            record::KEY_MIN_BYTES
        );
    }
    Ok((s3, key))
}

/// One record, read and verified.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Seen {
    /// The object key.
    pub key: String,
    /// `namespace/name` when the key is a record path.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// The refusal's reason, when refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Why, in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The verified payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<record::Payload>,
}

async fn read_all(s3: &S3Client, key: &[u8], prefix: &str) -> anyhow::Result<Vec<Seen>> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = s3.list_page(prefix, token.as_deref()).await?;
        for obj in page.objects {
            let path = record::parse_object_key(&obj.key).map(|(n, b)| format!("{n}/{b}"));
            let verdict = if path.is_none() {
                Err(Rejection::Key)
            } else if obj.size > record::RECORD_MAX_BYTES {
                Err(Rejection::TooLarge)
            } else {
                match s3.get_capped(&obj.key, record::RECORD_MAX_BYTES).await? {
                    Got::Bytes(b) => record::open(key, &obj.key, &b).and_then(|p| {
                        check_backup(&p)?;
                        Ok(p)
                    }),
                    Got::TooLarge => Err(Rejection::TooLarge),
                    Got::Missing => continue,
                }
            };
            out.push(match verdict {
                Ok(p) => Seen {
                    key: obj.key,
                    backup: path,
                    refused: None,
                    detail: None,
                    payload: Some(p),
                },
                Err(why) => Seen {
                    key: obj.key,
                    backup: path,
                    refused: Some(why.reason().into()),
                    detail: Some(why.to_string()),
                    payload: None,
                },
            });
        }
        match page.next {
            Some(t) => token = Some(t),
            None => return Ok(out),
        }
    }
}

fn check_backup(p: &record::Payload) -> Result<(), Rejection> {
    serde_json::from_value::<BackupSpec>(p.spec.clone())
        .map_err(|e| Rejection::Invalid(format!("spec: {e}")))?;
    if let Some(s) = &p.status {
        serde_json::from_value::<BackupStatus>(s.clone())
            .map_err(|e| Rejection::Invalid(format!("status: {e}")))?;
    }
    Ok(())
}

/// Runs a catalog subcommand in namespace `ns` (export).
pub async fn run(
    client: kube::Client,
    ns: &str,
    cmd: CatalogCommand,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    match cmd {
        CatalogCommand::Status { output, bucket } => {
            let (s3, key) = open_bucket(&client, &bucket).await?;
            let seen = read_all(&s3, &key, record::PREFIX).await?;
            let backups = Api::<Backup>::all(client.clone())
                .list_metadata(&ListParams::default())
                .await
                .context("list Backups")?;
            let in_cluster: BTreeSet<String> = backups
                .items
                .iter()
                .map(|b| format!("{}/{}", b.namespace().unwrap_or_default(), b.name_any()))
                .collect();
            let valid: BTreeSet<String> = seen
                .iter()
                .filter(|s| s.refused.is_none())
                .filter_map(|s| s.backup.clone())
                .collect();
            let rows: Vec<(String, String, String)> = valid
                .union(&in_cluster)
                .map(|b| {
                    let state = match (valid.contains(b), in_cluster.contains(b)) {
                        (true, true) => "in-both",
                        (true, false) => "bucket-only",
                        _ => "cluster-only",
                    };
                    (b.clone(), state.to_owned(), String::new())
                })
                .chain(seen.iter().filter(|s| s.refused.is_some()).map(|s| {
                    (
                        s.key.clone(),
                        format!("refused:{}", s.refused.as_deref().unwrap_or_default()),
                        s.detail.clone().unwrap_or_default(),
                    )
                }))
                .collect();
            print_rows(
                out,
                output,
                ["BACKUP/RECORD", "STATE", "DETAIL"],
                &rows,
                &summary(&rows),
            )
        }
        CatalogCommand::Sync {
            dry_run,
            output,
            bucket,
        } => {
            if !dry_run {
                anyhow::bail!(
                    "catalog sync only previews (--dry-run): the backup-runner's leader re-creates \
                     Backups every --catalog-sync-interval"
                );
            }
            let (s3, key) = open_bucket(&client, &bucket).await?;
            let seen = read_all(&s3, &key, record::PREFIX).await?;
            let namespaces: BTreeSet<String> = Api::<Namespace>::all(client.clone())
                .list_metadata(&ListParams::default())
                .await
                .context("list namespaces")?
                .items
                .into_iter()
                .filter_map(|n| n.metadata.name)
                .collect();
            let mut rows = Vec::new();
            for s in &seen {
                let action = match (&s.refused, &s.backup) {
                    (Some(reason), _) => (
                        format!("refuse ({reason})"),
                        s.detail.clone().unwrap_or_default(),
                    ),
                    (None, Some(b)) => {
                        let (ns, name) = b.split_once('/').unwrap_or_default();
                        if !namespaces.contains(ns) {
                            ("skip".into(), format!("namespace {ns} does not exist"))
                        } else if Api::<Backup>::namespaced(client.clone(), ns)
                            .get_metadata_opt(name)
                            .await
                            .with_context(|| format!("get Backup {b}"))?
                            .is_some()
                        {
                            ("keep".into(), "the Backup exists; never overwritten".into())
                        } else {
                            ("create".into(), String::new())
                        }
                    }
                    (None, None) => continue,
                };
                rows.push((
                    s.backup.clone().unwrap_or(s.key.clone()),
                    action.0,
                    action.1,
                ));
            }
            print_rows(
                out,
                output,
                ["BACKUP/RECORD", "ACTION", "DETAIL"],
                &rows,
                &summary(&rows),
            )
        }
        CatalogCommand::Export { bucket } => {
            crate::require_namespace(&client, ns).await?;
            let (s3, key) = open_bucket(&client, &bucket).await?;
            let seen = read_all(&s3, &key, &record::namespace_prefix(ns)).await?;
            writeln!(out, "{}", serde_json::to_string_pretty(&seen)?)?;
            Ok(())
        }
    }
}

fn summary(rows: &[(String, String, String)]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, state, _) in rows {
        *counts.entry(state.as_str()).or_default() += 1;
    }
    counts
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn print_rows(
    out: &mut dyn Write,
    output: Format,
    header: [&str; 3],
    rows: &[(String, String, String)],
    summary: &str,
) -> anyhow::Result<()> {
    match output {
        Format::Json => {
            let items: Vec<serde_json::Value> = rows
                .iter()
                .map(|(a, b, c)| {
                    serde_json::json!({"name": a, header[1].to_lowercase(): b, "detail": c})
                })
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&items)?)?;
        }
        Format::Table => {
            let w0 = rows
                .iter()
                .map(|r| r.0.len())
                .max()
                .unwrap_or(0)
                .max(header[0].len());
            let w1 = rows
                .iter()
                .map(|r| r.1.len())
                .max()
                .unwrap_or(0)
                .max(header[1].len());
            writeln!(out, "{:w0$}  {:w1$}  {}", header[0], header[1], header[2])?;
            for (a, b, c) in rows {
                writeln!(out, "{a:w0$}  {b:w1$}  {c}")?;
            }
            writeln!(out, "({summary})")?;
        }
    }
    Ok(())
}
