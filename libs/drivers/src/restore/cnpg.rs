//! The CNPG restore as one pure decision over what the executor observed: `decide(&Observed) ->
//! Step`, called again after every action until it returns a status write or a wait.
//!
//! ```text
//!  source ref Postgres? ─► startedAt (+ phase Running; the pass does nothing else)
//!  target kind/group ─► CNPG strategy (StrategyNotReady) ─► target app ─► driverMetadata
//!  ─► options ─► snapshot ─► render the strategy against the TARGET with the snapshot's parameters
//!  purge needed ⇔ TargetPurged not True AND the live Cluster is not this restore's own recovery
//!   ├─ PITR pre-flight (ours): recoveryTime before the window ─► Failed/RecoveryTargetBeforeWindow
//!   ├─ WAL-archive gate: source cnpg Backup completed with endWal (gone counts as ready)
//!   ├─ safety backup (ours, in place): cnpg Backup + catalog Backup of the live database
//!   ├─ suspend HelmRelease postgres-<target> ─► merge-patch the app ─► delete Cluster and PVCs
//!   └─ wait until the Cluster and every labelled PVC are gone (HelmRelease still suspended)
//!  TargetPurged=True/ClusterPurged ─► resume the HelmRelease (every pass from here)
//!  recovery Cluster healthy ─► Succeeded (health wins over the deadline)
//!  past restoreTimeoutSeconds ─► read recovery pod logs ─► RecoveryTargetUnreachable | RestoreFailed
//! ```
//!
//! Invariants: nothing is mutated before the pre-flight, the WAL gate and the safety backup pass;
//! the Cluster is deleted at most once per restore (the `TargetPurged` condition, and a recovery
//! Cluster created strictly after `startedAt` is this restore's own); every wait has a deadline
//! (restore, WAL gate, safety backup) that ends in an explained `Failed`; a refused patch or purge
//! resumes the HelmRelease before failing. Passwords of a Backup written by this project are never
//! in its snapshot, so the patch keeps the target's own; upstream snapshots that carry them still
//! restore them.

use std::collections::BTreeMap;
use std::time::Duration;

use api::backups::{Backup, RecoverableWindow, RestoreJob, RestoreJobStatus};
use api::contract::{condition_types, event_reasons, groups, labels, reasons};
use api::meta::find_condition;
use api::{ConditionStatus, TypedLocalObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Map, Value as Json, json};

use super::options::{CnpgOptions, parse_rfc3339};
use super::skeleton::{
    self, fail, failed, helm_release, owned_by, status_of, strategy_not_ready, target_app_name,
};
use super::{Action, Event, ObjectRef, OnError, Selection, Step, elapsed, write_or_wait};
use crate::cnpg::{self as driver, keys};
use crate::status::go_duration;

/// The recovery container whose log tells why a point-in-time recovery stopped.
pub const RECOVERY_CONTAINER: &str = "full-recovery";
/// Lines read from the end of each recovery log.
pub const RECOVERY_LOG_TAIL: i64 = 200;
/// Recovery pods inspected, newest first.
pub const RECOVERY_PODS: usize = 5;
/// PostgreSQL's FATAL when the archive ends before the recovery target.
pub const TARGET_NOT_REACHED: &str = "recovery ended before configured recovery target was reached";

/// The name of the safety backup (the cnpg Backup and its catalog entry) of a RestoreJob.
pub fn safety_backup_name(job: &str) -> String {
    format!("{job}-safety")
}

/// One recovery pod's log as the executor could read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogRead {
    /// The last lines.
    Lines(String),
    /// The read was Forbidden (no `pods/log` grant).
    Forbidden,
    /// Any other read error (skipped).
    Failed,
}

/// What the CNPG restore looks at. Objects are passed as JSON, as the executor's caches hold them.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The RestoreJob.
    pub job: &'a RestoreJob,
    /// The Backup it restores.
    pub backup: &'a Backup,
    /// Now.
    pub now: Time,
    /// The CNPG strategy CR the Backup names (`None`: not found).
    pub strategy: Option<&'a Json>,
    /// The target Postgres application (`None`: not found).
    pub target_app: Option<&'a Json>,
    /// The target Cluster `postgres-<target>` (`None`: not found).
    pub cluster: Option<&'a Json>,
    /// PVCs labelled `cnpg.io/cluster=postgres-<target>`.
    pub pvcs: &'a [Json],
    /// The HelmRelease `postgres-<target>` (`None`: not found).
    pub helm_release: Option<&'a Json>,
    /// The cnpg Backup named by the Backup's `cnpg.io/backup-name` (`None`: not found).
    pub source_cnpg_backup: Option<&'a Json>,
    /// The ObjectStore of the source server (for the recoverable window), if any.
    pub object_store: Option<&'a Json>,
    /// The source Cluster, if it still exists (its last archived WAL time ends the window).
    pub source_cluster: Option<&'a Json>,
    /// The catalog Backups in the namespace (for the recoverable window).
    pub catalog: &'a [Backup],
    /// The safety cnpg Backup `<job>-safety` (`None`: not found).
    pub safety_cnpg_backup: Option<&'a Json>,
    /// The safety catalog Backup `<job>-safety` (`None`: not found).
    pub safety_catalog: Option<&'a Backup>,
    /// Pods labelled `cnpg.io/cluster=postgres-<target>`.
    pub pods: &'a [Json],
    /// Recovery logs read in this pass, `(pod, read)` newest first (`None`: not read yet).
    pub logs: Option<&'a [(String, LogRead)]>,
}

/// Where a restore reads from and writes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The namespace (always the Backup's).
    pub namespace: String,
    /// The source application.
    pub source: String,
    /// The target application.
    pub app: String,
    /// The target kind.
    pub kind: String,
    /// The target API group (`""` when unset).
    pub api_group: String,
    /// The target Cluster (and HelmRelease) name.
    pub cluster: String,
}

impl Target {
    /// In place: the target is the source application.
    pub fn in_place(&self) -> bool {
        self.app == self.source
    }
}

/// The target: the Backup's application overridden field by field by the job's non-empty
/// `targetApplicationRef` name and kind and its non-nil apiGroup; the namespace is the Backup's.
pub fn target(job: &RestoreJob, backup: &Backup) -> Target {
    let source = &backup.spec.application_ref;
    let over = job.spec.target_application_ref.as_ref();
    let kind = over
        .map(|t| t.kind.clone())
        .filter(|k| !k.is_empty())
        .unwrap_or_else(|| source.kind.clone());
    let api_group = over
        .and_then(|t| t.api_group.clone())
        .or_else(|| source.api_group.clone())
        .unwrap_or_default();
    let app = target_app_name(job, backup);
    Target {
        namespace: backup.metadata.namespace.clone().unwrap_or_default(),
        source: source.name.clone(),
        cluster: driver::cluster_name(&app),
        app,
        kind,
        api_group,
    }
}

/// The recoverable window of a server's archive, from what is really in it: from the stop time of
/// the oldest base backup still there (the ObjectStore's first recoverability point, else the
/// oldest catalog Backup of that server) to the newest archived point known (the source Cluster's
/// last archived WAL time, the newest successful base backup, the newest catalog Backup's end).
/// `None` when no start is known.
pub fn recoverable_window(
    server: &str,
    object_store: Option<&Json>,
    source_cluster: Option<&Json>,
    catalog: &[Backup],
) -> Option<RecoverableWindow> {
    let time = crate::catalog::time;
    let reported = object_store.map(|o| &o["status"]["serverRecoveryWindow"][server]);
    let ours: Vec<&Backup> = catalog
        .iter()
        .filter(|b| {
            b.spec
                .driver_metadata
                .as_ref()
                .and_then(|m| m.get(keys::SERVER_NAME))
                .is_some_and(|s| s == server)
        })
        .collect();
    let stopped = |b: &Backup| {
        b.spec
            .driver_metadata
            .as_ref()
            .and_then(|m| m.get(keys::STOPPED_AT))
            .and_then(|s| time(&json!(s)))
    };
    let from = reported
        .and_then(|r| time(&r["firstRecoverabilityPoint"]))
        .or_else(|| {
            ours.iter()
                .filter_map(|b| {
                    b.status
                        .as_ref()
                        .and_then(|s| s.recoverable_window.as_ref())
                        .and_then(|w| w.from.clone())
                        .or_else(|| stopped(b))
                })
                .min_by_key(|t| t.0)
        })?;
    let archived = source_cluster
        .filter(|c| driver::live_server_name(c).as_deref() == Some(server))
        .and_then(|c| time(&c["status"]["lastArchivedWALTime"]));
    let to = [
        archived,
        reported.and_then(|r| time(&r["lastSuccessfulBackupTime"])),
    ]
    .into_iter()
    .flatten()
    .chain(ours.iter().filter_map(|b| stopped(b)))
    .max_by_key(|t| t.0);
    Some(RecoverableWindow {
        from: Some(from),
        to,
    })
}

/// Where a recovery target lies relative to a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// Before the oldest base backup: PostgreSQL would promote at the backup's end instead.
    Before(String),
    /// Inside the window.
    Inside(String),
    /// After the newest archived point known now, by this much.
    After(Duration, String),
    /// No window known.
    Unknown(String),
}

/// Places `target` in `window` (the messages name the server and the bounds).
pub fn place(
    target: &Time,
    raw: &str,
    window: Option<&RecoverableWindow>,
    server: &str,
) -> Placement {
    let fmt = |t: &Option<Time>| {
        t.as_ref()
            .map(|t| t.0.to_string())
            .unwrap_or_else(|| "unknown".into())
    };
    let Some(w) = window else {
        return Placement::Unknown(format!(
            "no recoverable window is known for server {server:?} yet; recoveryTime {raw} was not checked"
        ));
    };
    let span = format!("{} … {}", fmt(&w.from), fmt(&w.to));
    if let Some(from) = &w.from
        && target.0 < from.0
    {
        return Placement::Before(format!(
            "point-in-time recovery target {raw} is before the recoverable window of server {server:?} ({span}): the oldest base backup in the archive stopped at {}, and PostgreSQL would silently recover to that point instead. Pick a recoveryTime at or after it",
            from.0
        ));
    }
    if let Some(to) = &w.to
        && target.0 > to.0
    {
        let past = Duration::try_from(target.0.duration_since(to.0)).unwrap_or_default();
        return Placement::After(
            past,
            format!(
                "recoveryTime {raw} is {} past the newest archived point known now ({}; window {span}); recovery waits for the archiver to catch up and ends RecoveryTargetUnreachable after restoreTimeoutSeconds if it never does",
                go_duration(Duration::from_secs(past.as_secs())),
                to.0
            ),
        );
    }
    Placement::Inside(format!(
        "recoveryTime {raw} lies inside the recoverable window of server {server:?} ({span})"
    ))
}

/// RFC 7386: `patch` applied to `doc`.
pub fn merge_patch_apply(doc: &Json, patch: &Json) -> Json {
    let Some(p) = patch.as_object() else {
        return patch.clone();
    };
    let mut out = doc.as_object().cloned().unwrap_or_default();
    for (k, v) in p {
        if v.is_null() {
            out.remove(k);
        } else {
            let merged = merge_patch_apply(out.get(k).unwrap_or(&Json::Null), v);
            out.insert(k.clone(), merged);
        }
    }
    Json::Object(out)
}

/// RFC 7386: the patch that turns `from` into `to` (objects recurse; removed keys become `null`).
pub fn merge_patch_diff(from: &Json, to: &Json) -> Json {
    match (from.as_object(), to.as_object()) {
        (Some(f), Some(t)) => {
            let mut out = Map::new();
            for (k, fv) in f {
                match t.get(k) {
                    None => {
                        out.insert(k.clone(), Json::Null);
                    }
                    Some(tv) if tv != fv => {
                        out.insert(k.clone(), merge_patch_diff(fv, tv));
                    }
                    Some(_) => {}
                }
            }
            for (k, tv) in t {
                if !f.contains_key(k) {
                    out.insert(k.clone(), tv.clone());
                }
            }
            Json::Object(out)
        }
        _ => to.clone(),
    }
}

/// The users to restore: the snapshot's, each keeping the password the snapshot carries (an
/// upstream-written Backup) or else the target's current one (ours never stores passwords).
fn restored_users(snapshot: &Json, current: &Json) -> Json {
    let mut users = snapshot["users"].as_object().cloned().unwrap_or_default();
    for (name, user) in users.iter_mut() {
        let Some(u) = user.as_object_mut() else {
            continue;
        };
        if !u.contains_key("password")
            && let Some(p) = current[name]["password"].as_str()
        {
            u.insert("password".into(), json!(p));
        }
    }
    Json::Object(users)
}

/// The merge patch of the target Postgres application: bootstrap from the source server, the
/// source's backup coordinates with the rendered credentials and CA, inline S3 keys cleared, and
/// databases and users replaced by the snapshot's.
pub fn app_patch(
    app: &Json,
    server: &str,
    metadata: &BTreeMap<String, String>,
    rendered: &Json,
    snapshot: &Json,
    recovery_time: &str,
) -> Json {
    let spec = &app["spec"];
    let clear = |v: &Json| (!v.is_null()).then_some(Json::Null);
    let mut bootstrap = json!({"enabled": true, "oldName": server, "serverName": server});
    if !recovery_time.is_empty() {
        bootstrap["recoveryTime"] = json!(recovery_time);
    } else if let Some(n) = clear(&spec["bootstrap"]["recoveryTime"]) {
        bootstrap["recoveryTime"] = n;
    }
    let md = |k: &str| metadata.get(k).cloned().unwrap_or_default();
    let mut backup = json!({"destinationPath": md(keys::DESTINATION_PATH)});
    let endpoint = md(keys::ENDPOINT_URL);
    if !endpoint.is_empty() {
        backup["endpointURL"] = json!(endpoint);
    } else if let Some(n) = clear(&spec["backup"]["endpointURL"]) {
        backup["endpointURL"] = n;
    }
    for k in ["s3AccessKey", "s3SecretKey"] {
        if let Some(n) = clear(&spec["backup"][k]) {
            backup[k] = n;
        }
    }
    let store = &rendered["barmanObjectStore"];
    let nonempty = |v: &Json, default: &str| {
        v.as_str()
            .filter(|s| !s.is_empty())
            .unwrap_or(default)
            .to_owned()
    };
    let creds = &store["s3Credentials"];
    match creds["secretRef"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
    {
        Some(name) => {
            backup["s3CredentialsSecret"] = json!({
                "name": name,
                "accessKeyIDKey": nonempty(&creds["accessKeyIDKey"], "AWS_ACCESS_KEY_ID"),
                "secretAccessKeyKey": nonempty(&creds["secretAccessKeyKey"], "AWS_SECRET_ACCESS_KEY"),
            });
        }
        None => {
            if let Some(n) = clear(&spec["backup"]["s3CredentialsSecret"]) {
                backup["s3CredentialsSecret"] = n;
            }
        }
    }
    let ca = &store["endpointCA"];
    match ca["secretRef"]["name"].as_str().filter(|n| !n.is_empty()) {
        Some(name) => {
            backup["endpointCA"] = json!({"name": name, "key": nonempty(&ca["key"], "ca.crt")});
        }
        None => {
            if let Some(n) = clear(&spec["backup"]["endpointCA"]) {
                backup["endpointCA"] = n;
            }
        }
    }
    let databases = snapshot
        .get("databases")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let users = restored_users(snapshot, &spec["users"]);
    let mut patch = json!({"spec": {"bootstrap": bootstrap, "backup": backup}});
    for (key, desired) in [("databases", databases), ("users", users)] {
        let current = spec.get(key).cloned().unwrap_or_else(|| json!({}));
        let diff = merge_patch_diff(&current, &desired);
        if diff.as_object().is_some_and(|m| !m.is_empty()) {
            patch["spec"][key] = diff;
        }
    }
    patch
}

/// The live Cluster's recovery state: `Some(creationTimestamp)` when it exists, is not being
/// deleted and carries `spec.bootstrap.recovery`.
fn recovery_cluster(cluster: Option<&Json>) -> Option<Option<Time>> {
    let c = cluster?;
    if !c["metadata"]["deletionTimestamp"].is_null()
        || !c["spec"]["bootstrap"]["recovery"].is_object()
    {
        return None;
    }
    Some(crate::catalog::time(&c["metadata"]["creationTimestamp"]))
}

fn deleting(o: &Json) -> bool {
    !o["metadata"]["deletionTimestamp"].is_null()
}

fn condition_is_true(status: &RestoreJobStatus, type_: &str) -> bool {
    find_condition(&status.conditions, type_).is_some_and(|c| c.is_true())
}

fn set(
    status: &mut RestoreJobStatus,
    type_: &str,
    s: ConditionStatus,
    reason: &str,
    message: &str,
    now: &Time,
) {
    crate::status::set_condition(status, type_, s, reason, message, now);
}

/// How long from `since` until `deadline` passes, at least a second.
fn remaining(since: &Time, deadline: Duration, now: &Time) -> Duration {
    deadline
        .saturating_sub(elapsed(since, now))
        .max(Duration::from_secs(1))
}

/// The WAL-archive gate over the source cnpg Backup: `(ready, message)`.
pub fn wal_archive_gate(
    namespace: &str,
    name: Option<&str>,
    cnpg_backup: Option<&Json>,
) -> (bool, String) {
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return (
            false,
            "Backup driverMetadata is missing cnpg.io/backup-name".into(),
        );
    };
    let Some(b) = cnpg_backup else {
        return (
            true,
            format!("cnpg.io/Backup {namespace}/{name} no longer exists; skipping archive gate"),
        );
    };
    let (phase, _) = driver::backup_phase(b);
    if phase != driver::PHASE_COMPLETED {
        return (
            false,
            format!(
                "waiting for cnpg.io/Backup {namespace}/{name} to complete (current phase={phase:?})"
            ),
        );
    }
    match b["status"]["endWal"].as_str().filter(|w| !w.is_empty()) {
        None => (
            false,
            format!(
                "cnpg.io/Backup {namespace}/{name} has phase=completed but has not recorded status.endWal yet"
            ),
        ),
        Some(wal) => (
            true,
            format!("cnpg.io/Backup {namespace}/{name} phase=completed, endWal={wal:?}"),
        ),
    }
}

/// The recovery pods to inspect: those with a `full-recovery` container, newest first, at most 5.
pub fn recovery_pods(pods: &[Json]) -> Vec<String> {
    let mut found: Vec<(Option<Time>, String)> = pods
        .iter()
        .filter(|p| {
            p["spec"]["containers"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["name"] == RECOVERY_CONTAINER))
        })
        .map(|p| {
            (
                crate::catalog::time(&p["metadata"]["creationTimestamp"]),
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    found.sort_by(|a, b| {
        b.0.as_ref()
            .map(|t| t.0)
            .cmp(&a.0.as_ref().map(|t| t.0))
            .then(a.1.cmp(&b.1))
    });
    found
        .into_iter()
        .take(RECOVERY_PODS)
        .map(|(_, n)| n)
        .collect()
}

/// The log verdict: the newest pod whose log shows the FATAL, and whether any read was Forbidden.
pub fn classify(logs: &[(String, LogRead)]) -> (Option<String>, bool) {
    let unreachable = logs
        .iter()
        .find(|(_, r)| matches!(r, LogRead::Lines(l) if l.contains(TARGET_NOT_REACHED)))
        .map(|(p, _)| p.clone());
    let forbidden = logs.iter().any(|(_, r)| *r == LogRead::Forbidden);
    (unreachable, forbidden)
}

/// The safety cnpg Backup of the live Cluster.
pub fn safety_cnpg_backup(job: &RestoreJob, t: &Target) -> Json {
    let name = safety_backup_name(job.metadata.name.as_deref().unwrap_or_default());
    let mut body = driver::cnpg_backup(&t.namespace, "", &t.cluster);
    let meta = &mut body["metadata"];
    if let Some(m) = meta.as_object_mut() {
        m.remove("generateName");
    }
    meta["name"] = json!(name);
    let mut l = Map::new();
    for (k, v) in owned_by(job) {
        l.insert(k, json!(v));
    }
    l.insert(labels::CNPG_CLUSTER.into(), json!(t.cluster));
    l.insert(labels::SAFETY_BACKUP.into(), json!("true"));
    l.insert(labels::SAFETY_BACKUP_FOR.into(), json!(job.metadata.name));
    meta["labels"] = Json::Object(l);
    body
}

/// The catalog entry of a completed safety backup: the target application as it was, restorable
/// by another RestoreJob through the same strategy; labelled as a safety backup.
pub fn safety_catalog_backup(
    o: &Observed<'_>,
    t: &Target,
    completed: &Json,
    live_cluster: &Json,
    app: &Json,
    parameters: &BTreeMap<String, String>,
) -> Backup {
    let (job, backup, object_store, now) = (o.job, o.backup, o.object_store, &o.now);
    let server = driver::live_server_name(live_cluster).unwrap_or_else(|| t.cluster.clone());
    // The live archive's coordinates, shaped like a rendered template for the shared helper.
    let conf = object_store.map(|o| &o["spec"]["configuration"]);
    let conf = conf.unwrap_or(&Json::Null);
    let rendered = json!({"barmanObjectStore": {
        "destinationPath": conf["destinationPath"],
        "endpointURL": conf["endpointURL"],
        "s3Credentials": if conf["s3Credentials"].is_object() {
            json!({"secretRef": {"name": conf["s3Credentials"]["accessKeyId"]["name"]}})
        } else { Json::Null },
    }});
    let (md, uri, taken) = driver::catalog_fields(&driver::Completed {
        cnpg_backup: completed,
        cluster: &t.cluster,
        server_name: &server,
        rendered: &rendered,
    });
    let name = safety_backup_name(job.metadata.name.as_deref().unwrap_or_default());
    let entry = crate::catalog::Entry {
        taken_at: taken.and_then(|s| s.parse().ok().map(Time)),
        driver_metadata: md,
        artifact_uri: Some(uri),
        underlying_resources: Some(driver::snapshot(app, parameters)),
        recoverable_window: driver::recoverable_window(completed, object_store, &server),
        ..Default::default()
    };
    // The catalog helper builds entries for a BackupJob; the safety backup has the shape of one
    // made by a job of that name for the target application (no Plan).
    let mut shape = api::backups::BackupJob::default();
    shape.metadata.name = Some(name);
    shape.metadata.namespace = Some(t.namespace.clone());
    shape.spec.application_ref =
        TypedLocalObjectReference::new(groups::APPS, driver::APP_KIND, &t.app);
    let mut b = crate::catalog::backup(&shape, &backup.spec.strategy_ref, entry, now);
    b.metadata.labels = Some(BTreeMap::from([
        (labels::SAFETY_BACKUP.to_owned(), "true".to_owned()),
        (
            labels::SAFETY_BACKUP_FOR.to_owned(),
            job.metadata.name.clone().unwrap_or_default(),
        ),
    ]));
    b
}

/// The `Failed` status of a refused safety backup (`SafetyBackupReady=False/SafetyBackupFailed`).
fn safety_failed(status: &RestoreJobStatus, message: &str, now: &Time) -> Step {
    let mut s = status.clone();
    set(
        &mut s,
        condition_types::SAFETY_BACKUP_READY,
        ConditionStatus::False,
        reasons::SAFETY_BACKUP_FAILED,
        message,
        now,
    );
    fail(
        &s,
        message,
        vec![Event::warning(event_reasons::SAFETY_BACKUP_FAILED, message)],
        now,
    )
}

/// The step that attaches WAL archiving to the live Cluster before its safety backup, as the
/// backup path does: its ObjectStore (named after the Cluster, from the strategy rendered against
/// the target) and the barman-cloud plugin entry under the server name a backup would choose
/// (`archive_server_name`: a recovered Cluster gets a name of its own); `None` once the Cluster
/// archives.
fn attach_archiving(
    t: &Target,
    live: &Json,
    object_store: Option<&Json>,
    rendered: &Json,
) -> Option<Step> {
    if driver::live_server_name(live).is_some() {
        return None;
    }
    let on_error = OnError {
        prefix: "failed to attach barman-cloud plugin to Cluster",
        resume: None,
    };
    if object_store.is_none() {
        let uid = live["metadata"]["uid"].as_str().unwrap_or_default();
        return Some(Step::Act {
            action: Action::Create(driver::object_store(
                &t.namespace,
                &t.cluster,
                uid,
                rendered,
            )),
            events: Vec::new(),
            on_error,
        });
    }
    let template_server = rendered["serverName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or(&t.cluster);
    let server = driver::archive_server_name(live, template_server);
    let mut plugins = live["spec"]["plugins"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    plugins.extend(
        driver::cluster_plugins(&t.namespace, &t.cluster, &server)["spec"]["plugins"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
    );
    Some(Step::Act {
        action: Action::MergePatch {
            target: ObjectRef {
                api_version: "postgresql.cnpg.io/v1",
                kind: "Cluster",
                namespace: t.namespace.clone(),
                name: t.cluster.clone(),
            },
            patch: json!({"spec": {"plugins": plugins}}),
            field_manager: driver::FIELD_MANAGER,
        },
        events: Vec::new(),
        on_error,
    })
}

/// Decides the next step of a CNPG restore.
pub fn decide(o: &Observed<'_>) -> Step {
    let job = o.job;
    let backup = o.backup;
    let now = &o.now;
    let current = status_of(job);
    let mut status = current.clone();

    // 1. The source must be a Postgres application.
    if let Err(e) = driver::validate_app_ref(&backup.spec.application_ref) {
        return fail(&status, &e, Vec::new(), now);
    }
    let parsed = super::options::cnpg(job.spec.options.as_ref());
    let options: &CnpgOptions = &parsed.options;

    // 2. startedAt (and phase Running); this pass does nothing else. The executor writes it from a
    //    fresh read so a stale cache never moves it forward. Option Events are recorded once, here.
    let started = proceed!(skeleton::start(&status, now, || parsed.events));

    // 3. The target.
    let t = target(job, backup);
    if t.kind != driver::APP_KIND {
        return fail(
            &status,
            &format!(
                "target applicationRef.kind={:?} is not supported by the CNPG driver",
                t.kind
            ),
            Vec::new(),
            now,
        );
    }
    if !t.api_group.is_empty() && t.api_group != groups::APPS {
        return fail(
            &status,
            &format!(
                "target applicationRef.apiGroup={:?} is not supported by the CNPG driver",
                t.api_group
            ),
            Vec::new(),
            now,
        );
    }

    // 4. The strategy; 5. the target application.
    let Some(strategy) = o.strategy else {
        return strategy_not_ready(&status, &backup.spec.strategy_ref.name, now);
    };
    let Some(app) = o.target_app else {
        return fail(
            &status,
            &format!(
                "target Postgres application not found: {}/{} (deploy it before requesting a copy restore)",
                t.namespace, t.app
            ),
            Vec::new(),
            now,
        );
    };

    // 6. Source coordinates.
    let metadata = backup.spec.driver_metadata.clone().unwrap_or_default();
    let server = metadata.get(keys::SERVER_NAME).cloned().unwrap_or_default();
    if server.is_empty()
        || metadata
            .get(keys::DESTINATION_PATH)
            .is_none_or(|d| d.is_empty())
    {
        return fail(
            &status,
            "Backup driverMetadata is missing required CNPG fields",
            Vec::new(),
            now,
        );
    }

    // 8. The source-spec snapshot.
    let backup_ns = backup.metadata.namespace.clone().unwrap_or_default();
    let backup_name = backup.metadata.name.clone().unwrap_or_default();
    let snapshot = match backup
        .status
        .as_ref()
        .and_then(|s| s.underlying_resources.as_ref())
    {
        Some(s) if s["kind"] == driver::SNAPSHOT_KIND => s.clone(),
        other => {
            let why = match other {
                None => "status.underlyingResources is empty".to_owned(),
                Some(s) => format!(
                    "unexpected kind {:?}",
                    s["kind"].as_str().unwrap_or_default()
                ),
            };
            return fail(
                &status,
                &format!(
                    "Backup {backup_ns}/{backup_name} carries no usable source-spec snapshot in status.underlyingResources: {why} (re-take the backup with a controller version that persists source spec)"
                ),
                Vec::new(),
                now,
            );
        }
    };
    let parameters: BTreeMap<String, String> = snapshot["parameters"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    (
                        k.clone(),
                        v.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| v.to_string()),
                    )
                })
                .collect()
        })
        .unwrap_or_default();

    // 9. Render the strategy against the target with the backup-time parameters.
    let rendered = driver::render_template(&strategy["spec"]["template"], app, &parameters);

    // 10–11. The purge decision.
    let recovery = recovery_cluster(o.cluster);
    let purged = condition_is_true(&status, condition_types::TARGET_PURGED);
    let fresh = matches!(&recovery, Some(Some(created)) if created.0 > started.0);
    let release = helm_release(&t.namespace, &t.cluster);
    let suspended = o
        .helm_release
        .is_some_and(|hr| hr["spec"]["suspend"] == json!(true));

    if !purged && !fresh {
        // 12.0 (ours) PITR pre-flight, before anything is changed. Checked once and persisted
        //      before going on: a later pass (the source's ObjectStore may be gone with its purged
        //      Cluster) must never turn a started restore into a rejection.
        if !options.recovery_time.is_empty()
            && find_condition(&status.conditions, condition_types::RECOVERY_WINDOW_CHECKED)
                .is_none()
        {
            let raw = &options.recovery_time;
            let when = match parse_rfc3339(raw) {
                Ok(t) => Time(t),
                Err(e) => {
                    return fail(
                        &status,
                        &format!(
                            "spec.options.recoveryTime {raw:?} is not a valid RFC 3339 timestamp: {e}"
                        ),
                        Vec::new(),
                        now,
                    );
                }
            };
            let window = recoverable_window(&server, o.object_store, o.source_cluster, o.catalog);
            let (s, reason, message) = match place(&when, raw, window.as_ref(), &server) {
                Placement::Before(m) => {
                    set(
                        &mut status,
                        condition_types::RECOVERY_WINDOW_CHECKED,
                        ConditionStatus::False,
                        reasons::RECOVERY_TARGET_BEFORE_WINDOW,
                        &m,
                        now,
                    );
                    return Step::Status {
                        status: failed(&status, reasons::RECOVERY_TARGET_BEFORE_WINDOW, &m, now),
                        events: Vec::new(),
                        requeue: None,
                    };
                }
                Placement::Inside(m) => {
                    (ConditionStatus::True, reasons::RECOVERY_TARGET_IN_WINDOW, m)
                }
                Placement::After(_, m) => (
                    ConditionStatus::True,
                    reasons::RECOVERY_TARGET_AFTER_WINDOW,
                    m,
                ),
                Placement::Unknown(m) => {
                    (ConditionStatus::True, reasons::RECOVERY_WINDOW_UNKNOWN, m)
                }
            };
            set(
                &mut status,
                condition_types::RECOVERY_WINDOW_CHECKED,
                s,
                reason,
                &message,
                now,
            );
            return Step::Status {
                status,
                events: Vec::new(),
                requeue: None,
            };
        }

        // 12a. The WAL-archive gate.
        let (ready, message) = wal_archive_gate(
            &backup_ns,
            metadata.get(keys::BACKUP_NAME).map(String::as_str),
            o.source_cnpg_backup,
        );
        if !ready {
            set(
                &mut status,
                condition_types::WAL_ARCHIVE_READY,
                ConditionStatus::False,
                reasons::WAITING_FOR_ARCHIVE,
                &message,
                now,
            );
            let since = find_condition(&status.conditions, condition_types::WAL_ARCHIVE_READY)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            if elapsed(&since, now) > options.wal_archive_timeout {
                return fail(
                    &status,
                    &format!(
                        "WAL archive did not catch up to the backup endWal within {}: {message} (check that the source cnpg.io/Cluster has the barman-cloud plugin wired - spec.plugins referencing an ObjectStore - and is shipping WALs to object storage; override via spec.options.walArchiveTimeoutSeconds)",
                        go_duration(options.wal_archive_timeout)
                    ),
                    Vec::new(),
                    now,
                );
            }
            let requeue = Some(remaining(&since, options.wal_archive_timeout, now));
            return write_or_wait(&current, status, Vec::new(), requeue);
        }
        if !condition_is_true(&status, condition_types::WAL_ARCHIVE_READY) {
            // Persisted before the first mutation (upstream keeps it in memory): it is the durable
            // record that the HelmRelease may be suspended from here on, which the deletion
            // cleanup relies on.
            set(
                &mut status,
                condition_types::WAL_ARCHIVE_READY,
                ConditionStatus::True,
                reasons::ARCHIVE_CAUGHT_UP,
                &message,
                now,
            );
            return write_or_wait(&current, status, Vec::new(), None);
        }

        // 12b (ours). The safety backup of the live database before an in-place purge.
        let live = o.cluster.filter(|c| !deleting(c));
        if let Some(live) = live
            && t.in_place()
            && !options.skip_safety_backup
            && !condition_is_true(&status, condition_types::SAFETY_BACKUP_READY)
        {
            let job_name = job.metadata.name.clone().unwrap_or_default();
            let name = safety_backup_name(&job_name);
            let Some(since) =
                find_condition(&status.conditions, condition_types::SAFETY_BACKUP_READY)
                    .map(|c| c.last_transition_time.clone())
            else {
                set(
                    &mut status,
                    condition_types::SAFETY_BACKUP_READY,
                    ConditionStatus::False,
                    reasons::SAFETY_BACKUP_RUNNING,
                    &format!(
                        "backing up the live cluster {}/{} as Backup {}/{name} before purging it",
                        t.namespace, t.cluster, t.namespace
                    ),
                    now,
                );
                return Step::Status {
                    status,
                    events: Vec::new(),
                    requeue: None,
                };
            };
            let late = elapsed(&since, now) > options.safety_backup_timeout;
            let refuse = |why: String| {
                format!(
                    "safety backup cnpg.io/Backup {}/{name} {why}; refusing to purge the live cluster {}/{} (set spec.options.skipSafetyBackup=true to restore without a safety backup)",
                    t.namespace, t.namespace, t.cluster
                )
            };
            // A Cluster that does not archive (one a previous restore recreated, before any
            // backup attached the plugin again) gets the plugin the way a backup attaches it.
            if o.safety_cnpg_backup.is_none()
                && !late
                && let Some(step) = attach_archiving(&t, live, o.object_store, &rendered)
            {
                return step;
            }
            let Some(cnpg_backup) = o.safety_cnpg_backup else {
                if late {
                    return safety_failed(
                        &status,
                        &refuse(format!(
                            "was not created within {}",
                            go_duration(options.safety_backup_timeout)
                        )),
                        now,
                    );
                }
                return Step::Act {
                    action: Action::Create(safety_cnpg_backup(job, &t)),
                    events: vec![Event::normal(
                        event_reasons::SAFETY_BACKUP_STARTED,
                        format!(
                            "backing up the live cluster {}/{} as {name} before purging it",
                            t.namespace, t.cluster
                        ),
                    )],
                    on_error: OnError {
                        prefix: "failed to create the safety backup",
                        resume: None,
                    },
                };
            };
            let (phase, error) = driver::backup_phase(cnpg_backup);
            if phase == driver::PHASE_FAILED {
                let why = if error.is_empty() {
                    "failed".to_owned()
                } else {
                    format!("failed: {error}")
                };
                return safety_failed(&status, &refuse(why), now);
            }
            if phase != driver::PHASE_COMPLETED {
                if late {
                    return safety_failed(
                        &status,
                        &refuse(format!(
                            "did not complete within {} (phase={phase:?})",
                            go_duration(options.safety_backup_timeout)
                        )),
                        now,
                    );
                }
                return Step::Wait {
                    events: Vec::new(),
                    requeue: Some(remaining(&since, options.safety_backup_timeout, now)),
                };
            }
            if o.safety_catalog.is_none() {
                let entry = safety_catalog_backup(o, &t, cnpg_backup, live, app, &parameters);
                return Step::Act {
                    action: Action::Create(serde_json::to_value(entry).unwrap_or_default()),
                    events: Vec::new(),
                    on_error: OnError {
                        prefix: "failed to record the safety backup",
                        resume: None,
                    },
                };
            }
            let message = format!(
                "Backup {}/{name} holds {}/{} as it was before this restore; restore from it to undo",
                t.namespace, t.namespace, t.app
            );
            set(
                &mut status,
                condition_types::SAFETY_BACKUP_READY,
                ConditionStatus::True,
                reasons::SAFETY_BACKUP_COMPLETED,
                &message,
                now,
            );
            return Step::Status {
                status,
                events: vec![Event::normal(
                    event_reasons::SAFETY_BACKUP_COMPLETED,
                    message,
                )],
                requeue: None,
            };
        }

        // 12b. Suspend the HelmRelease while there is anything to delete (once the Cluster and
        //      its volumes are gone a later pass goes straight on to the resume).
        let remains = o.cluster.is_some() || !o.pvcs.is_empty();
        if remains && o.helm_release.is_some() && !suspended {
            return Step::Act {
                action: Action::SetSuspend {
                    release: release.clone(),
                    suspend: true,
                },
                events: Vec::new(),
                on_error: OnError {
                    prefix: "failed to suspend HelmRelease",
                    resume: None,
                },
            };
        }
        // 12c. Patch the target application (only when it would change something).
        let patch = app_patch(
            app,
            &server,
            &metadata,
            &rendered,
            &snapshot,
            &options.recovery_time,
        );
        if merge_patch_apply(app, &patch) != *app {
            return Step::Act {
                action: Action::MergePatch {
                    target: ObjectRef {
                        api_version: "apps.cozystack.io/v1alpha1",
                        kind: driver::APP_KIND,
                        namespace: t.namespace.clone(),
                        name: t.app.clone(),
                    },
                    patch,
                    field_manager: driver::FIELD_MANAGER,
                },
                events: Vec::new(),
                on_error: OnError {
                    prefix: "failed to patch Postgres app spec",
                    resume: Some(release.clone()),
                },
            };
        }
        // 12d. Purge the Cluster and its volumes.
        let on_purge_error = OnError {
            prefix: "failed to purge existing cluster",
            resume: Some(release.clone()),
        };
        if o.cluster.is_some_and(|c| !deleting(c)) {
            return Step::Act {
                action: Action::Delete(ObjectRef {
                    api_version: "postgresql.cnpg.io/v1",
                    kind: "Cluster",
                    namespace: t.namespace.clone(),
                    name: t.cluster.clone(),
                }),
                events: Vec::new(),
                on_error: on_purge_error,
            };
        }
        if o.pvcs.iter().any(|p| !deleting(p)) {
            return Step::Act {
                action: Action::DeleteAll(Selection {
                    api_version: "v1",
                    kind: "PersistentVolumeClaim",
                    namespace: t.namespace.clone(),
                    labels: vec![(labels::CNPG_CLUSTER.to_owned(), t.cluster.clone())],
                }),
                events: Vec::new(),
                on_error: on_purge_error,
            };
        }
        // 12e. Wait for them to go, the HelmRelease still suspended. Ours: the restore deadline
        //      bounds this wait too (a stuck finalizer would otherwise wait forever).
        if remains {
            if elapsed(&started, now) > options.restore_timeout {
                if suspended {
                    return skeleton::resume(release);
                }
                return fail(
                    &status,
                    &format!(
                        "purge of cnpg.io Cluster {}/{} did not finish within {} ({} still present; check their finalizers) (override via spec.options.restoreTimeoutSeconds)",
                        t.namespace,
                        t.cluster,
                        go_duration(options.restore_timeout),
                        if o.cluster.is_some() {
                            "the Cluster is"
                        } else {
                            "PersistentVolumeClaims are"
                        }
                    ),
                    Vec::new(),
                    now,
                );
            }
            return write_or_wait(
                &current,
                status,
                Vec::new(),
                Some(remaining(&started, options.restore_timeout, now)),
            );
        }
    }

    // 13. Record the purge once, before the HelmRelease is resumed (upstream resumes first): once
    //     Flux renders the recovery Cluster, a pass that had not yet recorded the purge could take
    //     it for the old one when both carry the same second as `startedAt`, and delete it again.
    if !purged {
        set(
            &mut status,
            condition_types::TARGET_PURGED,
            ConditionStatus::True,
            reasons::CLUSTER_PURGED,
            &format!(
                "Cluster {}/{} deleted; awaiting chart-rendered re-bootstrap",
                t.namespace, t.cluster
            ),
            now,
        );
        return Step::Status {
            status,
            events: Vec::new(),
            requeue: None,
        };
    }
    // 14. Resume the HelmRelease on every pass that gets here.
    if suspended {
        return skeleton::resume(release);
    }
    // 15. Health wins over the deadline.
    let healthy = recovery.is_some()
        && o.cluster
            .is_some_and(|c| c["status"]["phase"] == json!(driver::HEALTHY_PHASE));
    if healthy {
        set(
            &mut status,
            condition_types::RECOVERY_CONVERGED,
            ConditionStatus::True,
            reasons::RECOVERY_CONVERGED,
            &format!(
                "target cnpg.io Cluster {}/{} reached a healthy state",
                t.namespace, t.cluster
            ),
            now,
        );
        crate::status::restore_succeeded(
            &mut status,
            Some("target cnpg.io Cluster reached healthy state"),
            now,
        );
        return Step::Status {
            status,
            events: Vec::new(),
            requeue: None,
        };
    }
    // 16. The deadline, classified from the recovery logs when a recoveryTime was asked for.
    if elapsed(&started, now) <= options.restore_timeout {
        return write_or_wait(
            &current,
            status,
            Vec::new(),
            Some(remaining(&started, options.restore_timeout, now)),
        );
    }
    let deadline = go_duration(options.restore_timeout);
    let rt = &options.recovery_time;
    let (unreachable, forbidden) = if rt.is_empty() {
        (None, false)
    } else {
        match o.logs {
            Some(logs) => classify(logs),
            None => {
                let pods = recovery_pods(o.pods);
                if !pods.is_empty() {
                    return Step::Act {
                        action: Action::ReadLogs {
                            namespace: t.namespace.clone(),
                            pods,
                            container: RECOVERY_CONTAINER,
                            tail_lines: RECOVERY_LOG_TAIL,
                        },
                        events: Vec::new(),
                        on_error: OnError {
                            prefix: "failed to read recovery pod logs",
                            resume: None,
                        },
                    };
                }
                (None, false)
            }
        }
    };
    if let Some(pod) = unreachable {
        let message = format!(
            "point-in-time recovery target {rt} is past the latest WAL archived to object storage: over the {deadline} restore window recovery kept replaying all available WAL without reaching it and PostgreSQL gave up (\"{TARGET_NOT_REACHED}\"; most recent recovery pod: {pod}). Pick a recoveryTime inside the recoverable window - see the PITR docs on discovering the earliest/latest restorable time."
        );
        set(
            &mut status,
            condition_types::RECOVERY_CONVERGED,
            ConditionStatus::False,
            reasons::RECOVERY_TARGET_UNREACHABLE,
            &message,
            now,
        );
        return Step::Status {
            status: failed(&status, reasons::RECOVERY_TARGET_UNREACHABLE, &message, now),
            events: Vec::new(),
            requeue: None,
        };
    }
    let mut message = format!(
        "RestoreJob exceeded {deadline} deadline before target Cluster reached a healthy state (override via spec.options.restoreTimeoutSeconds)"
    );
    if !rt.is_empty() {
        message.push_str(&format!(
            "; spec.options.recoveryTime {rt} may be past the recoverable window, or the source may be large enough to need a longer restoreTimeoutSeconds"
        ));
    }
    let mut events = Vec::new();
    if forbidden {
        message.push_str(". NOTE: could not read recovery pod logs to classify this failure - the controller's pods/log RBAC grant appears to be missing, so a RecoveryTargetUnreachable diagnosis was unavailable");
        events.push(Event::warning(
            event_reasons::RECOVERY_CLASSIFICATION_FORBIDDEN,
            format!(
                "cannot read recovery pod logs (pods/log RBAC grant missing); unable to diagnose whether recoveryTime {rt} is past the recoverable window"
            ),
        ));
    }
    fail(&status, &message, events, now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::backups::BackupStatus;
    use pretty_assertions::assert_eq;

    fn t(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    const STARTED: &str = "2026-03-01T10:00:00Z";

    /// A namespace as the executor would observe it, plus a fake executor and operators.
    #[derive(Clone)]
    struct World {
        job: RestoreJob,
        backup: Backup,
        strategy: Option<Json>,
        app: Option<Json>,
        cluster: Option<Json>,
        pvcs: Vec<Json>,
        release: Option<Json>,
        source_cnpg_backup: Option<Json>,
        object_store: Option<Json>,
        catalog: Vec<Backup>,
        safety_cnpg_backup: Option<Json>,
        safety_catalog: Option<Backup>,
        pods: Vec<Json>,
        logs: Option<Vec<(String, LogRead)>>,
        /// What the executor did, in order.
        log: Vec<String>,
        events: Vec<(&'static str, String)>,
    }

    fn live_cluster(created: &str, recovery: bool) -> Json {
        let mut c = json!({
            "metadata": {"name": "postgres-db", "namespace": "t", "creationTimestamp": created},
            "spec": {"plugins": [{"name": driver::PLUGIN_NAME, "parameters": {"barmanObjectName": "postgres-db", "serverName": "postgres-db"}}]},
            "status": {"phase": "Cluster in healthy state"}});
        if recovery {
            c["spec"]["bootstrap"] = json!({"recovery": {"source": "postgres-db"}});
        }
        c
    }

    fn world() -> World {
        let mut job = RestoreJob::test("rj", "bk").namespace("t").build();
        job.metadata.finalizers = Some(vec!["backups.cozystack.io/cleanup".into()]);
        job.status = Some(RestoreJobStatus {
            phase: Some("Running".into()),
            started_at: Some(t(STARTED)),
            ..Default::default()
        });
        let mut backup = Backup::test("bk")
            .namespace("t")
            .driver_metadata(&[
                ("cnpg.io/backup-name", "bk-x1"),
                ("cnpg.io/server-name", "postgres-db"),
                ("cnpg.io/destination-path", "s3://bucket/t/db/"),
                ("cnpg.io/endpoint-url", "http://s3.local"),
                ("cnpg.io/stopped-at", "2026-03-01T08:00:00Z"),
            ])
            .build();
        backup.status = Some(BackupStatus {
            phase: Some("Ready".into()),
            underlying_resources: Some(json!({
                "kind": "CNPGBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                "databases": {"orders": {"roles": {"admin": ["orders"]}}},
                "users": {"orders": {"replication": false}},
                "parameters": {"secret": "cozy-backups-creds"}})),
            ..Default::default()
        });
        World {
            job,
            backup: backup.clone(),
            strategy: Some(json!({"spec": {"template": {"barmanObjectStore": {
                "destinationPath": "s3://bucket/t/{{ .Application.metadata.name }}/",
                "s3Credentials": {"secretRef": {"name": "{{ .Parameters.secret }}"}}}}}})),
            app: Some(
                json!({"metadata": {"name": "db", "namespace": "t"}, "spec": {
                "databases": {"orders": {"roles": {"admin": ["orders"]}}, "scratch": {}},
                "users": {"orders": {"password": "keep-me", "replication": true}, "temp": {"password": "x"}},
                "backup": {"s3AccessKey": "AKIA", "s3SecretKey": "secret"}}}),
            ),
            cluster: Some(live_cluster("2026-02-01T00:00:00Z", false)),
            pvcs: vec![json!({"metadata": {"name": "postgres-db-1"}})],
            release: Some(json!({"metadata": {"name": "postgres-db"}, "spec": {"suspend": false}})),
            source_cnpg_backup: Some(
                json!({"metadata": {"name": "bk-x1"}, "status": {"phase": "completed", "endWal": "000000010000000000000003"}}),
            ),
            object_store: Some(json!({
                "spec": {"configuration": {"destinationPath": "s3://bucket/t/db/", "s3Credentials": {"accessKeyId": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"}}}},
                "status": {"serverRecoveryWindow": {"postgres-db": {
                    "firstRecoverabilityPoint": "2026-03-01T08:00:00Z", "lastSuccessfulBackupTime": "2026-03-01T08:00:00Z"}}}})),
            catalog: vec![backup],
            safety_cnpg_backup: None,
            safety_catalog: None,
            pods: Vec::new(),
            logs: None,
            log: Vec::new(),
            events: Vec::new(),
        }
    }

    impl World {
        fn decide(&self, now: &str) -> Step {
            decide(&Observed {
                job: &self.job,
                backup: &self.backup,
                now: t(now),
                strategy: self.strategy.as_ref(),
                target_app: self.app.as_ref(),
                cluster: self.cluster.as_ref(),
                pvcs: &self.pvcs,
                helm_release: self.release.as_ref(),
                source_cnpg_backup: self.source_cnpg_backup.as_ref(),
                object_store: self.object_store.as_ref(),
                source_cluster: self.cluster.as_ref(),
                catalog: &self.catalog,
                safety_cnpg_backup: self.safety_cnpg_backup.as_ref(),
                safety_catalog: self.safety_catalog.as_ref(),
                pods: &self.pods,
                logs: self.logs.as_deref(),
            })
        }

        fn status(&self) -> RestoreJobStatus {
            self.job.status.clone().unwrap_or_default()
        }

        /// Runs decide → perform until a wait; returns the final wait's requeue. Deletions take
        /// effect at once (no finalizers in this world).
        fn run(&mut self, now: &str) -> Option<Duration> {
            for _ in 0..50 {
                let step = self.decide(now);
                match step {
                    Step::Status {
                        status,
                        events,
                        requeue,
                    } => {
                        self.log.push(format!("status {}", summary(&status)));
                        self.events
                            .extend(events.into_iter().map(|e| (e.reason, e.note)));
                        self.job.status = Some(status);
                        if self.job.is_terminal() {
                            return requeue;
                        }
                    }
                    Step::Wait { events, requeue } => {
                        self.events
                            .extend(events.into_iter().map(|e| (e.reason, e.note)));
                        return requeue;
                    }
                    Step::Act { action, events, .. } => {
                        self.events
                            .extend(events.into_iter().map(|e| (e.reason, e.note)));
                        self.perform(action);
                    }
                    other => panic!("unexpected {other:?}"),
                }
            }
            panic!("no progress: {:?}", self.log);
        }

        fn perform(&mut self, action: Action) {
            match action {
                Action::SetSuspend { release, suspend } => {
                    self.log.push(format!("suspend {} {suspend}", release.name));
                    if let Some(r) = self.release.as_mut() {
                        r["spec"]["suspend"] = json!(suspend);
                    }
                }
                Action::MergePatch { target, patch, .. } => {
                    self.log.push(format!("patch {}", target.name));
                    let app = self.app.take().unwrap();
                    self.app = Some(merge_patch_apply(&app, &patch));
                }
                Action::Delete(r) => {
                    self.log.push(format!("delete {} {}", r.kind, r.name));
                    self.cluster = None;
                }
                Action::DeleteAll(s) => {
                    self.log.push(format!("delete-all {}", s.kind));
                    self.pvcs.clear();
                }
                Action::Create(body) => {
                    let kind = body["kind"].as_str().unwrap().to_owned();
                    self.log.push(format!(
                        "create {kind} {}",
                        body["metadata"]["name"].as_str().unwrap()
                    ));
                    if kind == "Backup" && body["apiVersion"] == "postgresql.cnpg.io/v1" {
                        self.safety_cnpg_backup = Some(body);
                    } else {
                        self.safety_catalog = Some(serde_json::from_value(body).unwrap());
                    }
                }
                Action::ReadLogs { pods, .. } => {
                    self.log.push(format!("read-logs {}", pods.join(",")));
                    self.logs = Some(
                        pods.into_iter()
                            .map(|p| {
                                let read = self.pod_log(&p);
                                (p, read)
                            })
                            .collect(),
                    );
                }
            }
        }

        fn pod_log(&self, pod: &str) -> LogRead {
            self.pods
                .iter()
                .find(|p| p["metadata"]["name"] == pod)
                .map(|p| match p["log"].as_str() {
                    Some("forbidden") => LogRead::Forbidden,
                    Some(l) => LogRead::Lines(l.to_owned()),
                    None => LogRead::Failed,
                })
                .unwrap()
        }

        fn ready(&self) -> (String, String) {
            let s = self.status();
            let r = crate::status::ready(&s.conditions).cloned().unwrap();
            (r.reason, r.message)
        }

        fn condition(&self, type_: &str) -> Option<(ConditionStatus, String)> {
            find_condition(&self.status().conditions, type_).map(|c| (c.status, c.reason.clone()))
        }
    }

    /// Phase and the conditions' `type=status/reason`, for the action log.
    fn summary(s: &RestoreJobStatus) -> String {
        let mut out = s.phase.clone().unwrap_or_default();
        for c in &s.conditions {
            out.push_str(&format!(" {}={:?}/{}", c.type_, c.status, c.reason));
        }
        out
    }

    #[test]
    fn the_first_pass_only_stamps_started_at_and_records_option_events() {
        let mut w = world();
        w.job.status = None;
        w.job.spec.options = Some(json!({"restoreTimeoutSeconds": "5h"}));
        let step = w.decide("2026-03-01T10:00:00Z");
        let Step::Status { status, events, .. } = step else {
            panic!("{step:?}")
        };
        assert_eq!(
            (
                status.phase.as_deref(),
                status.started_at,
                events.len(),
                events[0].reason
            ),
            (
                Some("Running"),
                Some(t("2026-03-01T10:00:00Z")),
                1,
                "MalformedOptions"
            )
        );
    }

    #[test]
    fn in_place_restore_end_to_end_purges_exactly_once() {
        let mut w = world();
        w.job.spec.options = Some(json!({"recoveryTime": "2026-03-01T09:00:00Z"}));
        // Pass 1: pre-flight + gate recorded; 2: safety started; the operator has not finished it.
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.log,
            vec![
                "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow",
                "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp",
                "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp SafetyBackupReady=False/SafetyBackupRunning",
                "create Backup rj-safety",
            ]
        );
        let (_, window_message) = find_condition(&w.status().conditions, "RecoveryWindowChecked")
            .map(|c| (c.reason.clone(), c.message.clone()))
            .unwrap();
        assert!(window_message.starts_with("recoveryTime 2026-03-01T09:00:00Z is 1h0m0s past the newest archived point known now"), "{window_message}");
        // The safety cnpg Backup completes: the catalog entry, then the purge choreography.
        w.safety_cnpg_backup.as_mut().unwrap()["status"] = json!({
            "phase": "completed", "startedAt": "2026-03-01T10:00:02Z", "stoppedAt": "2026-03-01T10:00:05Z",
            "endWal": "000000010000000000000009"});
        w.log.clear();
        w.run("2026-03-01T10:00:10Z");
        assert_eq!(
            w.log,
            vec![
                "create Backup rj-safety",
                "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp SafetyBackupReady=True/SafetyBackupCompleted",
                "suspend postgres-db true",
                "patch db",
                "delete Cluster postgres-db",
                "delete-all PersistentVolumeClaim",
                "status Running RecoveryWindowChecked=True/RecoveryTargetAfterWindow WALArchiveReady=True/ArchiveCaughtUp SafetyBackupReady=True/SafetyBackupCompleted TargetPurged=True/ClusterPurged",
                "suspend postgres-db false",
            ]
        );
        let safety = w.safety_catalog.clone().unwrap();
        assert_eq!(
            (
                safety.metadata.labels.clone().unwrap(),
                safety.spec.application_ref.name.clone(),
                safety.spec.driver_metadata.as_ref().unwrap()["cnpg.io/backup-name"].clone(),
                safety
                    .status
                    .as_ref()
                    .unwrap()
                    .underlying_resources
                    .as_ref()
                    .unwrap()["users"]
                    .clone(),
            ),
            (
                BTreeMap::from([
                    (
                        "backups.cozystack.io/safety-backup".to_owned(),
                        "true".to_owned()
                    ),
                    (
                        "backups.cozystack.io/safety-backup.RestoreJobName".to_owned(),
                        "rj".to_owned()
                    ),
                ]),
                "db".to_owned(),
                "rj-safety".to_owned(),
                json!({"orders": {"replication": true}, "temp": {}}),
            ),
            "the safety entry is restorable and carries no password"
        );
        // The purged Cluster took its ObjectStore with it: the window is not checked again.
        w.object_store = None;
        w.catalog.clear();
        // The chart re-renders a recovery Cluster after startedAt: never purged again.
        w.cluster = Some({
            let mut c = live_cluster("2026-03-01T10:01:00Z", true);
            c["status"]["phase"] = json!("Setting up primary");
            c
        });
        w.log.clear();
        let requeue = w.run("2026-03-01T10:05:00Z");
        assert_eq!(w.log, Vec::<String>::new());
        assert_eq!(
            requeue,
            Some(Duration::from_secs(25 * 60)),
            "wakes at the restore deadline"
        );
        // Healthy after the deadline still succeeds (health wins).
        w.cluster.as_mut().unwrap()["status"]["phase"] = json!("Cluster in healthy state");
        w.run("2026-03-01T11:00:00Z");
        assert_eq!(w.status().phase.as_deref(), Some("Succeeded"));
        assert_eq!(
            w.ready(),
            (
                "RestoreCompleted".into(),
                "target cnpg.io Cluster reached healthy state".into()
            )
        );
        assert_eq!(
            w.condition("RecoveryConverged"),
            Some((ConditionStatus::True, "RecoveryConverged".into()))
        );
        assert_eq!(
            w.events.iter().map(|e| e.0).collect::<Vec<_>>(),
            vec!["SafetyBackupStarted", "SafetyBackupCompleted"]
        );
    }

    #[test]
    fn the_patch_bootstraps_from_the_source_and_replaces_databases_and_users() {
        let w = world();
        let app = w.app.clone().unwrap();
        let rendered = driver::render_template(
            &w.strategy.as_ref().unwrap()["spec"]["template"],
            &app,
            &BTreeMap::from([("secret".to_owned(), "cozy-backups-creds".to_owned())]),
        );
        let snapshot = w
            .backup
            .status
            .as_ref()
            .unwrap()
            .underlying_resources
            .clone()
            .unwrap();
        let md = w.backup.spec.driver_metadata.clone().unwrap();
        let patch = app_patch(&app, "postgres-db", &md, &rendered, &snapshot, "");
        assert_eq!(
            patch,
            json!({"spec": {
                "bootstrap": {"enabled": true, "oldName": "postgres-db", "serverName": "postgres-db"},
                "backup": {"destinationPath": "s3://bucket/t/db/", "endpointURL": "http://s3.local",
                           "s3AccessKey": null, "s3SecretKey": null,
                           "s3CredentialsSecret": {"name": "cozy-backups-creds",
                               "accessKeyIDKey": "AWS_ACCESS_KEY_ID", "secretAccessKeyKey": "AWS_SECRET_ACCESS_KEY"}},
                "databases": {"scratch": null},
                "users": {"orders": {"replication": false}, "temp": null}}})
        );
        let patched = merge_patch_apply(&app, &patch);
        assert_eq!(
            patched["spec"]["users"],
            json!({"orders": {"password": "keep-me", "replication": false}}),
            "our snapshots carry no password: the target keeps its own"
        );
        // An upstream snapshot with a password restores it; an empty recoveryTime clears a PITR.
        let mut upstream = snapshot.clone();
        upstream["users"]["orders"]["password"] = json!("from-backup");
        let mut pitr_app = patched.clone();
        pitr_app["spec"]["bootstrap"]["recoveryTime"] = json!("2026-01-01T00:00:00Z");
        let again = merge_patch_apply(
            &pitr_app,
            &app_patch(&pitr_app, "postgres-db", &md, &rendered, &upstream, ""),
        );
        assert_eq!(
            again["spec"]["users"]["orders"]["password"],
            json!("from-backup")
        );
        assert_eq!(again["spec"]["bootstrap"].get("recoveryTime"), None);
        // Applying it twice changes nothing (so the executor does not patch again).
        let p2 = app_patch(&patched, "postgres-db", &md, &rendered, &snapshot, "");
        assert_eq!(merge_patch_apply(&patched, &p2), patched);
    }

    #[test]
    fn a_leftover_recovery_cluster_is_purged_and_a_tie_counts_as_stale() {
        for created in ["2026-02-01T00:00:00Z", STARTED] {
            let mut w = world();
            w.job.spec.options = Some(json!({"skipSafetyBackup": true}));
            w.cluster = Some(live_cluster(created, true));
            w.run("2026-03-01T10:00:01Z");
            assert!(
                w.log.contains(&"delete Cluster postgres-db".to_owned()),
                "{created}: {:?}",
                w.log
            );
        }
        // Created strictly after startedAt: this restore's own; TargetPurged is recorded, no delete.
        let mut w = world();
        w.cluster = Some(live_cluster("2026-03-01T10:00:01Z", true));
        w.run("2026-03-01T10:00:02Z");
        assert_eq!(
            w.log,
            vec![
                "status Running TargetPurged=True/ClusterPurged",
                "status Succeeded TargetPurged=True/ClusterPurged RecoveryConverged=True/RecoveryConverged Ready=True/RestoreCompleted",
            ]
        );
    }

    #[test]
    fn a_copy_restore_takes_no_safety_backup_and_resumes_after_a_crash() {
        let mut w = world();
        w.job.spec.target_application_ref =
            Some(TypedLocalObjectReference::new("", "Postgres", "copy"));
        // A crash left the release suspended after the purge finished.
        w.cluster = None;
        w.pvcs.clear();
        w.release.as_mut().unwrap()["spec"]["suspend"] = json!(true);
        w.app.as_mut().unwrap()["metadata"]["name"] = json!("copy");
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(
            w.log,
            vec![
                "status Running WALArchiveReady=True/ArchiveCaughtUp",
                "patch copy",
                "status Running WALArchiveReady=True/ArchiveCaughtUp TargetPurged=True/ClusterPurged",
                "suspend postgres-copy false",
            ]
        );
    }

    #[test]
    fn the_wal_gate_waits_then_fails_and_a_reaped_backup_counts_as_ready() {
        let mut w = world();
        w.job.spec.options = Some(json!({"walArchiveTimeoutSeconds": 60}));
        w.source_cnpg_backup = Some(json!({"status": {"phase": "completed"}}));
        let requeue = w.run("2026-03-01T10:00:01Z");
        assert_eq!(requeue, Some(Duration::from_secs(60)));
        assert_eq!(
            w.condition("WALArchiveReady"),
            Some((ConditionStatus::False, "WaitingForArchive".into()))
        );
        assert_eq!(
            w.release.as_ref().unwrap()["spec"]["suspend"],
            json!(false),
            "no mutation while waiting"
        );
        w.run("2026-03-01T10:01:02Z");
        let (reason, message) = w.ready();
        assert_eq!(reason, "RestoreFailed");
        assert_eq!(
            message,
            "WAL archive did not catch up to the backup endWal within 1m0s: cnpg.io/Backup t/bk-x1 has phase=completed but has not recorded status.endWal yet (check that the source cnpg.io/Cluster has the barman-cloud plugin wired - spec.plugins referencing an ObjectStore - and is shipping WALs to object storage; override via spec.options.walArchiveTimeoutSeconds)"
        );
        assert_eq!(
            wal_archive_gate("t", Some("gone"), None),
            (
                true,
                "cnpg.io/Backup t/gone no longer exists; skipping archive gate".into()
            )
        );
        assert_eq!(
            wal_archive_gate("t", None, None),
            (
                false,
                "Backup driverMetadata is missing cnpg.io/backup-name".into()
            )
        );
        assert_eq!(
            wal_archive_gate(
                "t",
                Some("b"),
                Some(&json!({"status": {"phase": "running"}}))
            ),
            (
                false,
                "waiting for cnpg.io/Backup t/b to complete (current phase=\"running\")".into()
            )
        );
    }

    #[test]
    fn a_failed_safety_backup_refuses_the_purge() {
        let mut w = world();
        w.run("2026-03-01T10:00:01Z");
        w.safety_cnpg_backup.as_mut().unwrap()["status"] =
            json!({"phase": "failed", "error": "no plugin"});
        w.run("2026-03-01T10:00:05Z");
        assert_eq!(w.status().phase.as_deref(), Some("Failed"));
        assert_eq!(
            w.ready(),
            ("RestoreFailed".into(), "safety backup cnpg.io/Backup t/rj-safety failed: no plugin; refusing to purge the live cluster t/postgres-db (set spec.options.skipSafetyBackup=true to restore without a safety backup)".into())
        );
        assert_eq!(
            w.condition("SafetyBackupReady"),
            Some((ConditionStatus::False, "SafetyBackupFailed".into()))
        );
        assert!(
            w.cluster.is_some()
                && !w
                    .log
                    .iter()
                    .any(|l| l.starts_with("suspend") || l.starts_with("patch"))
        );
        // A safety backup that never completes fails at its own deadline.
        let mut w = world();
        w.job.spec.options = Some(json!({"safetyBackupTimeoutSeconds": 60}));
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.run("2026-03-01T10:00:31Z"), Some(Duration::from_secs(30)));
        w.run("2026-03-01T10:01:02Z");
        assert!(
            w.ready()
                .1
                .contains("did not complete within 1m0s (phase=\"\")"),
            "{}",
            w.ready().1
        );
    }

    #[test]
    fn a_target_before_the_window_is_rejected_before_anything_changes() {
        let mut w = world();
        w.job.spec.options = Some(json!({"recoveryTime": "2026-03-01T07:59:59Z"}));
        w.run("2026-03-01T10:00:01Z");
        let (reason, message) = w.ready();
        assert_eq!(reason, "RecoveryTargetBeforeWindow");
        assert_eq!(
            message,
            "point-in-time recovery target 2026-03-01T07:59:59Z is before the recoverable window of server \"postgres-db\" (2026-03-01T08:00:00Z … 2026-03-01T08:00:00Z): the oldest base backup in the archive stopped at 2026-03-01T08:00:00Z, and PostgreSQL would silently recover to that point instead. Pick a recoveryTime at or after it"
        );
        assert_eq!(
            w.log.len(),
            1,
            "one status write, nothing else: {:?}",
            w.log
        );
        let mut w = world();
        w.job.spec.options = Some(json!({"recoveryTime": "yesterday"}));
        w.run("2026-03-01T10:00:01Z");
        assert!(w.ready().1.starts_with(
            "spec.options.recoveryTime \"yesterday\" is not a valid RFC 3339 timestamp"
        ));
    }

    #[test]
    fn the_window_from_the_archive_and_the_catalog() {
        let store = json!({"status": {"serverRecoveryWindow": {"s": {
            "firstRecoverabilityPoint": "2026-01-01T00:00:00Z", "lastSuccessfulBackupTime": "2026-01-03T00:00:00Z"}}}});
        let cluster = json!({"metadata": {"name": "postgres-db"}, "spec": {"plugins": [
            {"name": driver::PLUGIN_NAME, "parameters": {"serverName": "s"}}]},
            "status": {"lastArchivedWALTime": "2026-01-04T00:00:00Z"}});
        let w = recoverable_window("s", Some(&store), Some(&cluster), &[]).unwrap();
        assert_eq!(
            (w.from, w.to),
            (
                Some(t("2026-01-01T00:00:00Z")),
                Some(t("2026-01-04T00:00:00Z"))
            )
        );
        // Without the ObjectStore: the oldest and newest catalog entries of that server only.
        let entry = |stopped: &str, server: &str| {
            Backup::test("b")
                .driver_metadata(&[
                    ("cnpg.io/server-name", server),
                    ("cnpg.io/stopped-at", stopped),
                ])
                .build()
        };
        let catalog = [
            entry("2026-01-02T00:00:00Z", "s"),
            entry("2026-01-01T12:00:00Z", "s"),
            entry("2025-01-01T00:00:00Z", "other"),
        ];
        let w = recoverable_window("s", None, None, &catalog).unwrap();
        assert_eq!(
            (w.from, w.to),
            (
                Some(t("2026-01-01T12:00:00Z")),
                Some(t("2026-01-02T00:00:00Z"))
            )
        );
        assert_eq!(recoverable_window("s", None, None, &[]), None);
        assert!(matches!(
            place(&t("2026-01-01T00:00:00Z"), "x", None, "s"),
            Placement::Unknown(_)
        ));
    }

    fn recovery_pod(name: &str, created: &str, log: Option<&str>) -> Json {
        json!({"metadata": {"name": name, "creationTimestamp": created},
               "spec": {"containers": [{"name": "full-recovery"}]}, "log": log})
    }

    /// A restore past its purge, waiting for health, with a PITR target.
    fn waiting(options: Json) -> World {
        let mut w = world();
        w.job.spec.options = Some(options);
        let mut c = live_cluster("2026-03-01T10:01:00Z", true);
        c["status"]["phase"] = json!("Setting up primary");
        w.cluster = Some(c);
        w.run("2026-03-01T10:01:01Z");
        assert_eq!(
            w.condition("TargetPurged"),
            Some((ConditionStatus::True, "ClusterPurged".into()))
        );
        w.log.clear();
        w
    }

    #[test]
    fn at_the_deadline_the_recovery_logs_classify_the_failure() {
        let fatal = "LOG: redo done\nFATAL:  recovery ended before configured recovery target was reached\n";
        let mut w =
            waiting(json!({"recoveryTime": "2026-03-01T09:30:00Z", "restoreTimeoutSeconds": 300}));
        w.pods = vec![
            recovery_pod("full-recovery-old", "2026-03-01T10:01:00Z", Some(fatal)),
            recovery_pod("full-recovery-new", "2026-03-01T10:03:00Z", Some(fatal)),
            json!({"metadata": {"name": "postgres-db-1", "creationTimestamp": "2026-03-01T10:04:00Z"},
                   "spec": {"containers": [{"name": "postgres"}]}}),
        ];
        assert_eq!(w.run("2026-03-01T10:04:59Z"), Some(Duration::from_secs(1)));
        w.run("2026-03-01T10:05:01Z");
        assert_eq!(w.log[0], "read-logs full-recovery-new,full-recovery-old");
        let (reason, message) = w.ready();
        assert_eq!(reason, "RecoveryTargetUnreachable");
        assert_eq!(
            message,
            "point-in-time recovery target 2026-03-01T09:30:00Z is past the latest WAL archived to object storage: over the 5m0s restore window recovery kept replaying all available WAL without reaching it and PostgreSQL gave up (\"recovery ended before configured recovery target was reached\"; most recent recovery pod: full-recovery-new). Pick a recoveryTime inside the recoverable window - see the PITR docs on discovering the earliest/latest restorable time."
        );
        assert_eq!(
            w.condition("RecoveryConverged"),
            Some((ConditionStatus::False, "RecoveryTargetUnreachable".into()))
        );

        // Forbidden logs: RestoreFailed with the note and the Event, no RecoveryConverged.
        let mut w =
            waiting(json!({"recoveryTime": "2026-03-01T09:30:00Z", "restoreTimeoutSeconds": 300}));
        w.pods = vec![recovery_pod(
            "full-recovery-a",
            "2026-03-01T10:01:00Z",
            Some("forbidden"),
        )];
        w.run("2026-03-01T10:05:01Z");
        assert_eq!(
            w.ready(),
            ("RestoreFailed".into(), "RestoreJob exceeded 5m0s deadline before target Cluster reached a healthy state (override via spec.options.restoreTimeoutSeconds); spec.options.recoveryTime 2026-03-01T09:30:00Z may be past the recoverable window, or the source may be large enough to need a longer restoreTimeoutSeconds. NOTE: could not read recovery pod logs to classify this failure - the controller's pods/log RBAC grant appears to be missing, so a RecoveryTargetUnreachable diagnosis was unavailable".into())
        );
        assert_eq!(w.condition("RecoveryConverged"), None);
        assert_eq!(
            w.events,
            vec![("RecoveryClassificationForbidden", "cannot read recovery pod logs (pods/log RBAC grant missing); unable to diagnose whether recoveryTime 2026-03-01T09:30:00Z is past the recoverable window".into())]
        );

        // Without a recoveryTime no logs are read: the plain deadline.
        let mut w = waiting(json!({"restoreTimeoutSeconds": 300}));
        w.pods = vec![recovery_pod(
            "full-recovery-a",
            "2026-03-01T10:01:00Z",
            Some(fatal),
        )];
        w.run("2026-03-01T10:05:01Z");
        assert_eq!(
            w.ready().1,
            "RestoreJob exceeded 5m0s deadline before target Cluster reached a healthy state (override via spec.options.restoreTimeoutSeconds)"
        );
        assert!(!w.log.iter().any(|l| l.starts_with("read-logs")));
    }

    #[test]
    fn recovery_pods_are_the_five_newest_with_the_container() {
        let pods: Vec<Json> = (0..7)
            .map(|i| recovery_pod(&format!("p{i}"), &format!("2026-03-01T10:0{i}:00Z"), None))
            .collect();
        assert_eq!(recovery_pods(&pods), vec!["p6", "p5", "p4", "p3", "p2"]);
    }

    #[test]
    fn gates_before_any_work() {
        type Change = Box<dyn Fn(&mut World)>;
        let cases: Vec<(&str, Change, &str)> = vec![
            (
                "target kind",
                Box::new(|w: &mut World| {
                    w.job.spec.target_application_ref =
                        Some(TypedLocalObjectReference::new("", "MariaDB", "x"));
                }),
                "target applicationRef.kind=\"MariaDB\" is not supported by the CNPG driver",
            ),
            (
                "target group",
                Box::new(|w: &mut World| {
                    w.job.spec.target_application_ref =
                        Some(TypedLocalObjectReference::new("example.org", "", ""));
                }),
                "target applicationRef.apiGroup=\"example.org\" is not supported by the CNPG driver",
            ),
            (
                "target app",
                Box::new(|w: &mut World| w.app = None),
                "target Postgres application not found: t/db (deploy it before requesting a copy restore)",
            ),
            (
                "metadata",
                Box::new(|w: &mut World| {
                    w.backup.spec.driver_metadata = None;
                }),
                "Backup driverMetadata is missing required CNPG fields",
            ),
            (
                "snapshot",
                Box::new(|w: &mut World| {
                    w.backup.status = None;
                }),
                "Backup t/bk carries no usable source-spec snapshot in status.underlyingResources: status.underlyingResources is empty (re-take the backup with a controller version that persists source spec)",
            ),
        ];
        for (name, change, message) in cases {
            let mut w = world();
            change(&mut w);
            w.run("2026-03-01T10:00:01Z");
            assert_eq!(
                w.ready(),
                ("RestoreFailed".into(), message.into()),
                "{name}"
            );
        }
        let mut w = world();
        w.strategy = None;
        w.run("2026-03-01T10:00:01Z");
        assert_eq!(w.ready().0, "StrategyNotReady");
    }

    #[test]
    fn a_refused_patch_or_purge_resumes_the_release() {
        let mut w = world();
        w.job.spec.options = Some(json!({"skipSafetyBackup": true}));
        let mut seen = Vec::new();
        for _ in 0..10 {
            match w.decide("2026-03-01T10:00:01Z") {
                Step::Act {
                    action, on_error, ..
                } => {
                    let kind = match &action {
                        Action::MergePatch { .. } => "patch",
                        Action::Delete(_) | Action::DeleteAll(_) => "purge",
                        _ => "other",
                    };
                    if kind != "other" {
                        seen.push((kind, on_error));
                    }
                    w.perform(action);
                }
                Step::Status { status, .. } => w.job.status = Some(status),
                _ => break,
            }
        }
        let resume = Some(helm_release("t", "postgres-db"));
        assert_eq!(
            seen,
            vec![
                (
                    "patch",
                    OnError {
                        prefix: "failed to patch Postgres app spec",
                        resume: resume.clone()
                    }
                ),
                (
                    "purge",
                    OnError {
                        prefix: "failed to purge existing cluster",
                        resume: resume.clone()
                    }
                ),
                (
                    "purge",
                    OnError {
                        prefix: "failed to purge existing cluster",
                        resume
                    }
                ),
            ]
        );
    }
}
