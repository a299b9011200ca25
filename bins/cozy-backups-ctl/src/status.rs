//! `status`: one row per application that has Backups, BackupJobs or Plans.
//!
//! - last backup: the newest catalog Backup (by `spec.takenAt`) whose phase is not `Failed`;
//! - recoverable window: Postgres only, as `window` computes it (errors become `unknown` and a
//!   warning on stderr, so one unreadable Cluster does not hide the other rows; a cluster without
//!   CloudNativePG gets the window of the catalog alone and one note on stderr saying so);
//! - running: BackupJobs that are not terminal (`Running`, or no phase yet);
//! - last failure: the newest `Failed` BackupJob (by `completedAt`, else creation) and its message;
//! - verified: the newest restore drill recorded on one of its Backups (`status.verification`).

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Context as _;
use api::backups::{Backup, BackupJob, Plan};
use api::contract::phases;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams};
use serde::Serialize;

use crate::Format;
use crate::render::{age, table};
use crate::window::{compute, rfc3339};

/// One application's backup state.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AppStatus {
    /// Namespace.
    pub namespace: String,
    /// `spec.applicationRef.kind`.
    pub kind: String,
    /// `spec.applicationRef.name`.
    pub name: String,
    /// Plans of the application.
    pub plans: Vec<String>,
    /// The newest successful backup.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<LastBackup>,
    /// The recoverable window (Postgres).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recoverable_window: Option<Window>,
    /// BackupJobs not yet terminal, oldest first.
    pub running_jobs: Vec<String>,
    /// The newest failed BackupJob.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failure: Option<Failure>,
    /// The newest restore drill recorded on one of the application's Backups.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_verification: Option<Verification>,
}

/// A restore drill's result (`Backup.status.verification`, docs/drills.md).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    /// The Backup that was drilled.
    pub backup: String,
    /// `Passed` or `Failed`.
    pub result: String,
    /// When it was recorded.
    pub verified_at: String,
    /// What was verified, or why it failed.
    pub message: String,
}

/// The newest successful backup.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LastBackup {
    /// The Backup's name.
    pub name: String,
    /// `spec.takenAt`.
    pub taken_at: String,
}

/// A Postgres application's recoverable window.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Window {
    /// The archive's server name.
    pub server: String,
    /// Start; absent when unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// End; absent when unknown.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
}

/// The newest failed BackupJob.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// The job's name.
    pub job: String,
    /// `status.message`.
    pub message: String,
}

type Key = (String, String, String);

fn key(ns: &Option<String>, r: &api::meta::TypedLocalObjectReference) -> Key {
    (
        ns.clone().unwrap_or_default(),
        r.name.clone(),
        r.kind.clone(),
    )
}

async fn list<K>(
    client: &kube::Client,
    namespace: Option<&str>,
    what: &str,
) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let scope = namespace.map_or_else(|| "all namespaces".to_owned(), |ns| ns.to_owned());
    Ok(api
        .list(&ListParams::default())
        .await
        .map_err(crate::platform_error::<K>)
        .with_context(|| format!("list {what} in {scope}"))?
        .items)
}

/// Reads the namespace (`None`: every namespace) and builds the rows, sorted by namespace,
/// application name and kind. `app` keeps only applications of that name.
pub async fn collect(
    client: &kube::Client,
    namespace: Option<&str>,
    app: Option<&str>,
    warnings: &mut dyn Write,
) -> anyhow::Result<Vec<AppStatus>> {
    let backups: Vec<Backup> = list(client, namespace, "Backups").await?;
    let jobs: Vec<BackupJob> = list(client, namespace, "BackupJobs").await?;
    let plans: Vec<Plan> = list(client, namespace, "Plans").await?;

    let mut rows: BTreeMap<Key, AppStatus> = BTreeMap::new();
    let mut row = |k: Key| {
        rows.entry(k.clone()).or_insert_with(|| AppStatus {
            namespace: k.0,
            name: k.1,
            kind: k.2,
            plans: Vec::new(),
            last_backup: None,
            recoverable_window: None,
            running_jobs: Vec::new(),
            last_failure: None,
            last_verification: None,
        });
    };
    for b in &backups {
        row(key(&b.metadata.namespace, &b.spec.application_ref));
    }
    for j in &jobs {
        row(key(&j.metadata.namespace, &j.spec.application_ref));
    }
    for p in &plans {
        row(key(&p.metadata.namespace, &p.spec.application_ref));
    }
    if let Some(app) = app {
        rows.retain(|k, _| k.1 == app);
    }

    let mut noted = false;
    for (k, status) in rows.iter_mut() {
        let mine = |ns: &Option<String>, r: &api::meta::TypedLocalObjectReference| key(ns, r) == *k;
        let name = |m: &kube::api::ObjectMeta| m.name.clone().unwrap_or_default();

        let mut own_plans: Vec<String> = plans
            .iter()
            .filter(|p| mine(&p.metadata.namespace, &p.spec.application_ref))
            .map(|p| name(&p.metadata))
            .collect();
        own_plans.sort();
        status.plans = own_plans;

        let own_backups: Vec<&Backup> = backups
            .iter()
            .filter(|b| mine(&b.metadata.namespace, &b.spec.application_ref))
            .collect();
        status.last_backup = own_backups
            .iter()
            .filter(|b| b.status.as_ref().and_then(|s| s.phase.as_deref()) != Some(phases::FAILED))
            .max_by_key(|b| (b.spec.taken_at.0, name(&b.metadata)))
            .map(|b| LastBackup {
                name: name(&b.metadata),
                taken_at: rfc3339(&Some(b.spec.taken_at.clone())).unwrap_or_default(),
            });

        status.last_verification = own_backups
            .iter()
            .filter_map(|b| {
                let v = b.status.as_ref()?.verification.as_ref()?;
                let at = v.last_verified_at.clone()?;
                Some((at.0, b, v))
            })
            .max_by_key(|(at, b, _)| (*at, name(&b.metadata)))
            .map(|(_, b, v)| Verification {
                backup: name(&b.metadata),
                result: v.result.clone().unwrap_or_default(),
                verified_at: rfc3339(&v.last_verified_at).unwrap_or_default(),
                message: v.message.clone().unwrap_or_default(),
            });

        let own_jobs: Vec<&BackupJob> = jobs
            .iter()
            .filter(|j| mine(&j.metadata.namespace, &j.spec.application_ref))
            .collect();
        let created = |j: &BackupJob| j.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let mut running: Vec<&BackupJob> = own_jobs
            .iter()
            .copied()
            .filter(|j| !j.is_terminal())
            .collect();
        running.sort_by_key(|j| (created(j), name(&j.metadata)));
        status.running_jobs = running.iter().map(|j| name(&j.metadata)).collect();
        status.last_failure = own_jobs
            .iter()
            .filter(|j| j.status.as_ref().and_then(|s| s.phase.as_deref()) == Some(phases::FAILED))
            .max_by_key(|j| {
                let done = j
                    .status
                    .as_ref()
                    .and_then(|s| s.completed_at.as_ref())
                    .map(|t| t.0);
                (done.or(created(j)), name(&j.metadata))
            })
            .map(|j| Failure {
                job: name(&j.metadata),
                message: j
                    .status
                    .as_ref()
                    .and_then(|s| s.message.clone())
                    .unwrap_or_default(),
            });

        if status.kind == drivers::cnpg::APP_KIND {
            let catalog: Vec<Backup> = own_backups.into_iter().cloned().collect();
            match compute(client, &status.namespace, &status.name, None, &catalog).await {
                Ok(c) => {
                    if let Some(note) = c.unserved_note().filter(|_| !noted) {
                        writeln!(warnings, "Note: {note}.")?;
                        noted = true;
                    }
                    let (from, to) = c
                        .window
                        .map(|w| (rfc3339(&w.from), rfc3339(&w.to)))
                        .unwrap_or_default();
                    status.recoverable_window = Some(Window {
                        server: c.server,
                        from,
                        to,
                    });
                }
                Err(e) => {
                    writeln!(
                        warnings,
                        "Warning: recoverable window of Postgres {}/{}: {e:#}",
                        status.namespace, status.name
                    )?;
                }
            }
        }
    }
    Ok(rows.into_values().collect())
}

/// The rows as a table (with a NAMESPACE column when `all_namespaces`), JSON or YAML.
pub fn render(
    rows: &[AppStatus],
    format: Format,
    all_namespaces: bool,
    now: Timestamp,
) -> anyhow::Result<String> {
    match format {
        Format::Json => {
            let value = serde_json::json!({"items": rows});
            return Ok(serde_json::to_string_pretty(&value).context("render JSON")? + "\n");
        }
        Format::Yaml => {
            let value = serde_json::json!({"items": rows});
            return serde_yaml::to_string(&value).context("render YAML");
        }
        Format::Table => {}
    }
    let none = || "<none>".to_owned();
    let mut headers = vec![
        "APPLICATION",
        "PLANS",
        "LAST BACKUP",
        "AGE",
        "RECOVERABLE",
        "VERIFIED",
        "RUNNING",
        "LAST FAILURE",
    ];
    if all_namespaces {
        headers.insert(0, "NAMESPACE");
    }
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let (last, last_age) = match &r.last_backup {
                Some(b) => (
                    b.name.clone(),
                    b.taken_at
                        .parse::<Timestamp>()
                        .map(|t| age(t, now))
                        .unwrap_or_else(|_| "?".into()),
                ),
                None => (none(), "-".into()),
            };
            let window = match (&r.recoverable_window, r.kind.as_str()) {
                (
                    Some(Window {
                        from: Some(f), to, ..
                    }),
                    _,
                ) => {
                    format!("{f}..{}", to.as_deref().unwrap_or("?"))
                }
                (_, drivers::cnpg::APP_KIND) => "unknown".into(),
                _ => "-".into(),
            };
            let mut row = vec![
                format!("{}/{}", r.kind, r.name),
                if r.plans.is_empty() {
                    none()
                } else {
                    r.plans.join(",")
                },
                last,
                last_age,
                window,
                match &r.last_verification {
                    Some(v) => format!(
                        "{} {} ({})",
                        v.result,
                        v.verified_at
                            .parse::<Timestamp>()
                            .map(|t| age(t, now))
                            .unwrap_or_else(|_| "?".into()),
                        v.backup
                    ),
                    None => none(),
                },
                if r.running_jobs.is_empty() {
                    none()
                } else {
                    r.running_jobs.join(",")
                },
                match &r.last_failure {
                    Some(f) if f.message.is_empty() => format!("{}: (no message)", f.job),
                    Some(f) => format!("{}: {}", f.job, f.message),
                    None => none(),
                },
            ];
            if all_namespaces {
                row.insert(0, r.namespace.clone());
            }
            row
        })
        .collect();
    Ok(table(&headers, &cells))
}
