//! `backup` and `restore`: create a BackupJob or RestoreJob, optionally follow it to its end.

use std::io::Write;
use std::time::Duration;

use anyhow::Context as _;
use api::backups::{Backup, BackupJob, BackupJobSpec, RestoreJob, RestoreJobSpec};
use api::contract::{groups, phases};
use api::meta::{LocalObjectReference, TypedLocalObjectReference};
use drivers::restore::cnpg::Placement;
use futures::StreamExt as _;
use kube::api::{Api, ObjectMeta, PostParams};
use serde::Serialize;

use crate::{Exit, ObjectOutput, exit};

/// What `backup` asks for.
pub(crate) struct BackupRequest<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) app: &'a str,
    pub(crate) kind: &'a str,
    pub(crate) class: &'a str,
}

/// What `restore` asks for.
pub(crate) struct RestoreRequest<'a> {
    pub(crate) namespace: &'a str,
    pub(crate) backup: &'a str,
    pub(crate) to: Option<&'a str>,
    pub(crate) at: Option<&'a str>,
}

fn non_empty(flag: &str, value: &str) -> anyhow::Result<()> {
    if value.trim().is_empty() {
        anyhow::bail!("{flag} must not be empty");
    }
    Ok(())
}

/// Creates the BackupJob `<app>-xxxxx` (generateName).
pub(crate) async fn create_backup_job(
    client: &kube::Client,
    r: &BackupRequest<'_>,
) -> anyhow::Result<BackupJob> {
    non_empty("APP", r.app)?;
    non_empty("--kind", r.kind)?;
    non_empty("--class", r.class)?;
    let job = BackupJob {
        metadata: ObjectMeta {
            generate_name: Some(format!("{}-", r.app)),
            namespace: Some(r.namespace.to_owned()),
            ..Default::default()
        },
        spec: BackupJobSpec {
            plan_ref: None,
            application_ref: TypedLocalObjectReference::new(groups::APPS, r.kind, r.app),
            backup_class_name: r.class.to_owned(),
        },
        status: None,
    };
    Api::<BackupJob>::namespaced(client.clone(), r.namespace)
        .create(&PostParams::default(), &job)
        .await
        .map_err(crate::platform_error::<BackupJob>)
        .with_context(|| {
            format!(
                "create a BackupJob for {} {}/{} (class {})",
                r.kind, r.namespace, r.app, r.class
            )
        })
}

/// Strategy kinds whose restores accept `recoveryTime`.
const POINT_IN_TIME_STRATEGIES: [&str; 2] = ["CNPG", "MongoDB"];

/// Reads the Backup, checks `--at` (Postgres: against the recoverable window, before anything is
/// created), then creates the RestoreJob `<target>-restore-xxxxx`.
pub(crate) async fn create_restore_job(
    client: &kube::Client,
    r: &RestoreRequest<'_>,
    warnings: &mut dyn Write,
) -> anyhow::Result<RestoreJob> {
    non_empty("--from", r.backup)?;
    if let Some(to) = r.to {
        non_empty("--to", to)?;
    }
    let backup = Api::<Backup>::namespaced(client.clone(), r.namespace)
        .get_opt(r.backup)
        .await
        .map_err(crate::platform_error::<Backup>)
        .with_context(|| format!("get Backup {}/{}", r.namespace, r.backup))?
        .ok_or_else(|| {
            Exit::not_found(format!(
                "--from: Backup {:?} not found in namespace {:?}",
                r.backup, r.namespace
            ))
        })?;
    let source = &backup.spec.application_ref;
    let strategy = backup.spec.strategy_ref.kind.as_str();
    let target = r.to.unwrap_or(&source.name);

    if let Some(at) = r.at {
        if !POINT_IN_TIME_STRATEGIES.contains(&strategy) {
            anyhow::bail!(
                "--at: Backup {}/{} was made by strategy kind {strategy:?}, whose restores do not take a point in time (only {})",
                r.namespace,
                r.backup,
                POINT_IN_TIME_STRATEGIES.join(", ")
            );
        }
        if strategy == "CNPG" {
            check_window(client, r.namespace, &backup, at, warnings).await?;
        }
    }

    let job = RestoreJob {
        metadata: ObjectMeta {
            generate_name: Some(format!("{target}-restore-")),
            namespace: Some(r.namespace.to_owned()),
            ..Default::default()
        },
        spec: RestoreJobSpec {
            backup_ref: LocalObjectReference::new(r.backup),
            target_application_ref: r.to.map(|to| TypedLocalObjectReference {
                api_group: source.api_group.clone().or(Some(groups::APPS.to_owned())),
                kind: source.kind.clone(),
                name: to.to_owned(),
            }),
            options: r.at.map(|at| serde_json::json!({"recoveryTime": at})),
        },
        status: None,
    };
    Api::<RestoreJob>::namespaced(client.clone(), r.namespace)
        .create(&PostParams::default(), &job)
        .await
        .map_err(crate::platform_error::<RestoreJob>)
        .with_context(|| {
            format!(
                "create a RestoreJob from Backup {}/{} into {} {target}",
                r.namespace, r.backup, source.kind
            )
        })
}

/// The restore-orchestrator's PITR pre-flight, run before creating anything: a time before the
/// window is refused; after its end or with no window known, a warning.
async fn check_window(
    client: &kube::Client,
    namespace: &str,
    backup: &Backup,
    at: &str,
    warnings: &mut dyn Write,
) -> anyhow::Result<()> {
    let app = &backup.spec.application_ref.name;
    let server = crate::window::server_of(backup);
    let catalog = crate::window::catalog(client, namespace).await?;
    let computed =
        crate::window::compute(client, namespace, app, server.as_deref(), &catalog).await?;
    // Why the window is what it is, when it matters: outside it, or none known.
    let note = computed.unserved_note();
    let explain = |warnings: &mut dyn Write| -> std::io::Result<()> {
        match &note {
            Some(note) => writeln!(warnings, "Note: {note}."),
            None => Ok(()),
        }
    };
    let when = drivers::restore::options::parse_rfc3339(at)
        .map_err(|e| anyhow::anyhow!("--at {at:?} is not an RFC 3339 timestamp: {e}"))?;
    let when = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(when);
    match drivers::restore::cnpg::place(&when, at, computed.window.as_ref(), &computed.server) {
        Placement::Before(message) => {
            explain(warnings)?;
            Err(anyhow::anyhow!(
                "--at: {message}; no RestoreJob was created (see `window -n {namespace} {app}`)"
            ))
        }
        Placement::After(_, message) | Placement::Unknown(message) => {
            writeln!(warnings, "Warning: --at: {message}")?;
            explain(warnings)?;
            Ok(())
        }
        Placement::Inside(_) => Ok(()),
    }
}

/// Prints what was created: `<resource>/<name> created`, or the object.
pub(crate) fn print_created<K>(
    obj: &K,
    output: Option<ObjectOutput>,
    out: &mut dyn Write,
) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = ()> + Serialize,
{
    let name = format!(
        "{}.{}/{}",
        K::kind(&()).to_lowercase(),
        K::group(&()),
        obj.meta().name.as_deref().unwrap_or_default()
    );
    match output {
        None => writeln!(out, "{name} created")?,
        Some(ObjectOutput::Name) => writeln!(out, "{name}")?,
        Some(ObjectOutput::Json) => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(obj).context("render JSON")?
        )?,
        Some(ObjectOutput::Yaml) => write!(
            out,
            "{}",
            serde_yaml::to_string(obj).context("render YAML")?
        )?,
    }
    Ok(())
}

/// The phase, message and (BackupJob) produced Backup of a job as it changes.
struct Seen {
    phase: Option<String>,
    message: Option<String>,
    produced: Option<String>,
}

/// Follows a job with a watch on its name, printing each phase change as
/// `<kind>/<name>: <phase>`, until it is terminal, deleted, or `timeout` passes.
async fn follow<K>(
    api: Api<K>,
    job: &K,
    timeout: Duration,
    seen: fn(&K) -> Seen,
    out: &mut dyn Write,
) -> anyhow::Result<()>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    let kind = K::kind(&());
    let name = job.meta().name.clone().unwrap_or_default();
    let ns = job.meta().namespace.clone().unwrap_or_default();
    let mut last: Option<Option<String>> = None;
    let mut stream = kube::runtime::watcher::watch_object(api, &name).boxed();
    let follow = async {
        while let Some(event) = stream.next().await {
            let Some(obj) = event.with_context(|| format!("watch {kind} {ns}/{name}"))? else {
                anyhow::bail!("{kind} {ns}/{name} was deleted while waiting for it");
            };
            let s = seen(&obj);
            if last.as_ref() != Some(&s.phase) {
                let shown = s.phase.as_deref().unwrap_or("Pending (no phase yet)");
                writeln!(out, "{}/{name}: {shown}", kind.to_lowercase())?;
                out.flush()?;
                last = Some(s.phase.clone());
            }
            match s.phase.as_deref() {
                Some(phases::SUCCEEDED) => {
                    if let Some(b) = s.produced {
                        writeln!(out, "backup.backups.cozystack.io/{b} is the result")?;
                    }
                    return Ok(());
                }
                Some(phases::FAILED) => {
                    return Err(Exit {
                        code: exit::JOB_FAILED,
                        message: format!(
                            "{kind} {ns}/{name} failed: {}",
                            s.message.as_deref().unwrap_or("(no message)")
                        ),
                    }
                    .into());
                }
                _ => {}
            }
        }
        anyhow::bail!("the watch of {kind} {ns}/{name} ended")
    };
    match tokio::time::timeout(timeout, follow).await {
        Ok(result) => result,
        Err(_) => Err(Exit {
            code: exit::TIMED_OUT,
            message: format!(
                "{kind} {ns}/{name} is not finished after --timeout {} (last phase: {}); it goes on in the cluster",
                drivers::status::go_duration(timeout),
                last.flatten().as_deref().unwrap_or("none")
            ),
        }
        .into()),
    }
}

/// `backup --wait`.
pub(crate) async fn wait_backup_job(
    client: &kube::Client,
    namespace: &str,
    job: &BackupJob,
    timeout: Duration,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let seen = |j: &BackupJob| Seen {
        phase: j.status.as_ref().and_then(|s| s.phase.clone()),
        message: j.status.as_ref().and_then(|s| s.message.clone()),
        produced: j
            .status
            .as_ref()
            .and_then(|s| s.backup_ref.as_ref())
            .map(|b| b.name.clone()),
    };
    follow(
        Api::namespaced(client.clone(), namespace),
        job,
        timeout,
        seen,
        out,
    )
    .await
}

/// `restore --wait`.
pub(crate) async fn wait_restore_job(
    client: &kube::Client,
    namespace: &str,
    job: &RestoreJob,
    timeout: Duration,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let seen = |j: &RestoreJob| Seen {
        phase: j.status.as_ref().and_then(|s| s.phase.clone()),
        message: j.status.as_ref().and_then(|s| s.message.clone()),
        produced: None,
    };
    follow(
        Api::namespaced(client.clone(), namespace),
        job,
        timeout,
        seen,
        out,
    )
    .await
}
