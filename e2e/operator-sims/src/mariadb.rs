//! Simulated mariadb-operator (`k8s.mariadb.com/v1alpha1`): one-shot logical `Backup`s and
//! `Restore`s move through the `Complete` condition exactly as the operator's `SetCompleteWithJob`
//! writes it for the dump (or restore) Job it runs.
//!
//! ```text
//!  Backup (no spec.schedule, not complete)
//!    mariaDbRef names no MariaDB ─► Complete=False/Failed "MariaDB not found" (retried on changes)
//!    dump Job started           ─► Complete=False/JobRunning "Running"
//!    ├─ default                 ─► Complete=True/JobComplete "Success"
//!    ├─ fail-backup             ─► Complete=True/JobFailed "Failed"   (what the operator writes)
//!    └─ hang                    ─► stays JobRunning until the annotation goes
//!  Restore: the same, with the restore controls
//! ```
//!
//! Test controls are annotations on the operator `MariaDB` the Backup or Restore names: for
//! Backups [`crate::cnpg::ANNOTATION_FAIL_BACKUP`] (any value: the operator's message is always
//! `Failed`) and [`crate::cnpg::ANNOTATION_HANG`] (`"true"`); for Restores
//! [`crate::cnpg::ANNOTATION_FAIL_RESTORE`] and [`crate::cnpg::ANNOTATION_HANG_RESTORE`].
//!
//! Without a data plane (`--sims mariadb` alone) no dump or restore runs: no bytes move. With one
//! (the `s3` simulator runs too: a [`Plane`]) every `MariaDB` is a real `mariadbd`
//! ([`crate::mysqld`]) whose root password is in the Secret the chart's users read, the default
//! path of a Backup runs `mariadb-dump` and uploads the dump to its `storage.s3`, and a Restore
//! downloads the newest dump and replays it with `mariadb`; `Complete` then follows the real
//! outcome (`JobFailed` with the tool's words):
//!
//! ```text
//!  MariaDB ─► mariadbd in <root>/<ns>/<name>-<uid> ─► Secret <name>-credentials (root, host, port)
//!          ─► status Ready=True/StatefulSetReady; deleted ─► server stopped, directory removed
//!  Backup JobRunning ─► mariadb-dump ─► s3://<bucket>/<prefix>/backup.<time>[.<compression>].sql
//!                    ─► maxRetention prunes older dumps ─► JobComplete | JobFailed "<error>"
//!  Restore JobRunning ─► newest dump at or before targetRecoveryTime (default now) ─► mariadb
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use api::thirdparty::mariadb::{Backup, MariaDB, Restore};
use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};

use crate::cache::{Cache, spawn_watches};
use crate::cnpg::{
    ANNOTATION_FAIL_BACKUP, ANNOTATION_FAIL_RESTORE, ANNOTATION_HANG, ANNOTATION_HANG_RESTORE,
};
use crate::conditions::{annotations, condition, now, patch_status, with_condition};
use crate::mysqld::{self, ServerDir};

/// Field manager of the simulated operator.
pub const FIELD_MANAGER: &str = "operator-sims-mariadb";

/// The test-control annotations of one kind of one-shot object: `(fail, hang)`.
pub type Controls = (&'static str, &'static str);
/// The controls of Backups.
pub const BACKUP_CONTROLS: Controls = (ANNOTATION_FAIL_BACKUP, ANNOTATION_HANG);
/// The controls of Restores.
pub const RESTORE_CONTROLS: Controls = (ANNOTATION_FAIL_RESTORE, ANNOTATION_HANG_RESTORE);

/// The `Complete` condition a Backup or Restore should show next, given the MariaDB it names
/// (`None`: it does not exist) and the controls of its kind; `None` when the object is finished or
/// already shows it.
pub fn next_condition(
    backup: &Value,
    mariadb: Option<&Value>,
    controls: Controls,
) -> Option<Value> {
    let (fail, hang) = controls;
    if backup["spec"]["schedule"].is_object() {
        return None;
    }
    let current = backup["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Complete");
    if current.is_some_and(|c| c["status"] == "True") {
        return None;
    }
    let Some(mariadb) = mariadb else {
        return Some(condition("Complete", false, "Failed", "MariaDB not found"));
    };
    let controls = annotations(mariadb);
    let running = current.is_some_and(|c| c["reason"] == "JobRunning");
    if !running {
        return Some(condition("Complete", false, "JobRunning", "Running"));
    }
    if controls.get(hang).map(String::as_str) == Some("true") {
        return None;
    }
    if controls.contains_key(fail) {
        return Some(condition("Complete", true, "JobFailed", "Failed"));
    }
    Some(condition("Complete", true, "JobComplete", "Success"))
}

/// The data plane: where the servers live and which CA an upload trusts by default.
#[derive(Clone, Debug)]
pub struct Plane {
    /// Server directories: `<root>/<namespace>/<mariadb>-<uid>`.
    pub root: PathBuf,
    /// The S3 server's development CA, trusted when a Backup's `tls` names no CA.
    pub default_ca: Option<PathBuf>,
}

/// The servers of the data plane, by namespace and name (cheap to clone).
#[derive(Clone, Default)]
pub struct Registry {
    servers: Arc<Mutex<BTreeMap<(String, String), Entry>>>,
}

struct Entry {
    uid: String,
    /// Set once the server accepts connections.
    ready: Option<ServerDir>,
    stop: watch::Sender<bool>,
    done: watch::Receiver<bool>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), Entry>> {
        self.servers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The directory of the running server `ns/name`, once it accepts connections.
    pub fn ready(&self, ns: &str, name: &str) -> Option<ServerDir> {
        self.lock()
            .get(&(ns.to_owned(), name.to_owned()))
            .and_then(|e| e.ready.clone())
    }

    /// Stops every server and removes its directory.
    pub async fn stop_all(&self) {
        let entries: Vec<Entry> = std::mem::take(&mut *self.lock()).into_values().collect();
        for e in &entries {
            let _ = e.stop.send(true);
        }
        for mut e in entries {
            let _ =
                tokio::time::timeout(std::time::Duration::from_secs(25), e.done.wait_for(|d| *d))
                    .await;
        }
    }
}

/// Everything a job task needs.
#[derive(Clone)]
struct Shared {
    client: kube::Client,
    plane: Plane,
    registry: Registry,
    notify: Arc<Notify>,
    servers: Arc<Cache>,
}

/// Runs the simulator forever; with `plane`, every MariaDB is a real server and Backups and
/// Restores move real bytes.
pub async fn run(
    client: kube::Client,
    readiness: runtime::Readiness,
    plane: Option<Plane>,
    registry: Registry,
) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let backups = Arc::new(Cache::default());
    let restores = Arc::new(Cache::default());
    let servers = Arc::new(Cache::default());
    let backup_ar = ApiResource::erase::<Backup>(&());
    let restore_ar = ApiResource::erase::<Restore>(&());
    spawn_watches(
        &client,
        &readiness,
        &notify,
        vec![
            (&backups, backup_ar.clone(), "mariadb: watch Backup"),
            (&restores, restore_ar.clone(), "mariadb: watch Restore"),
            (
                &servers,
                ApiResource::erase::<MariaDB>(&()),
                "mariadb: watch MariaDB",
            ),
        ],
    );
    let shared = plane.map(|plane| Shared {
        client: client.clone(),
        plane,
        registry,
        notify: notify.clone(),
        servers: servers.clone(),
    });
    // Jobs started (by the uid of their Backup or Restore): each runs once.
    let mut started: BTreeSet<String> = BTreeSet::new();
    let kinds = [
        (&backups, &backup_ar, BACKUP_CONTROLS),
        (&restores, &restore_ar, RESTORE_CONTROLS),
    ];
    loop {
        notify.notified().await;
        if let Some(shared) = &shared {
            reconcile_servers(shared, &servers.snapshot());
        }
        for (cache, ar, controls) in kinds {
            for ((ns, name), obj) in cache.snapshot() {
                let server_name = obj["spec"]["mariaDbRef"]["name"].as_str().unwrap_or("");
                let server = servers.get(&ns, server_name);
                let Some(cond) = next_condition(&obj, server.as_ref(), controls) else {
                    continue;
                };
                if let Some(shared) = &shared
                    && cond["reason"] == "JobComplete"
                {
                    // The Job runs for real; its outcome writes the condition.
                    let uid = obj["metadata"]["uid"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    let Some(dir) = shared.registry.ready(&ns, server_name) else {
                        continue;
                    };
                    if started.insert(uid) {
                        let restore = ar.kind == "Restore";
                        let backup = restore
                            .then(|| {
                                let name = obj["spec"]["backupRef"]["name"].as_str()?;
                                backups.get(&ns, name)
                            })
                            .flatten();
                        tokio::spawn(run_job(
                            shared.clone(),
                            ar.clone(),
                            cache.clone(),
                            obj,
                            dir,
                            restore.then_some(backup),
                        ));
                    }
                    continue;
                }
                let Some(conditions) =
                    with_condition(&obj["status"]["conditions"], cond.clone(), &now())
                else {
                    continue;
                };
                tracing::info!(kind = %ar.kind, namespace = ns, name, reason = %cond["reason"], status = %cond["status"], "Complete condition");
                patch_status(
                    &client,
                    ar,
                    cache,
                    FIELD_MANAGER,
                    &ns,
                    &name,
                    json!({ "conditions": conditions }),
                )
                .await;
            }
        }
    }
}

/// Starts a server for every MariaDB without one (or with one of an earlier object of the same
/// name) and stops the servers whose MariaDB is gone.
fn reconcile_servers(shared: &Shared, mariadbs: &BTreeMap<(String, String), Value>) {
    let mut registry = shared.registry.lock();
    let gone: Vec<(String, String)> = registry
        .iter()
        .filter(|(key, e)| {
            mariadbs
                .get(*key)
                .and_then(|o| o["metadata"]["uid"].as_str())
                != Some(e.uid.as_str())
        })
        .map(|(k, _)| k.clone())
        .collect();
    for key in gone {
        if let Some(e) = registry.remove(&key) {
            tracing::info!(
                namespace = key.0,
                name = key.1,
                "MariaDB gone: stopping its server"
            );
            let _ = e.stop.send(true);
        }
    }
    for (key, obj) in mariadbs {
        if registry.contains_key(key) || obj["metadata"]["deletionTimestamp"].is_string() {
            continue;
        }
        let uid = obj["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (stop, stop_rx) = watch::channel(false);
        let (done_tx, done) = watch::channel(false);
        registry.insert(
            key.clone(),
            Entry {
                uid,
                ready: None,
                stop,
                done,
            },
        );
        tokio::spawn(serve(shared.clone(), obj.clone(), stop_rx, done_tx));
    }
}

/// How often a server that fails to start is tried.
const START_ATTEMPTS: u32 = 3;

/// Runs the server of MariaDB `obj` until told to stop, then removes its directory.
async fn serve(
    shared: Shared,
    obj: Value,
    mut stop: watch::Receiver<bool>,
    done: watch::Sender<bool>,
) {
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let uid = obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let dir = ServerDir::new(
        shared.plane.root.join(&ns).join(format!("{name}-{uid}")),
        &uid,
    );
    let start = async {
        let secret = password(&shared.client, &obj).await?;
        // A Pod that fails to start is restarted; so is a server here, a few times.
        let mut attempt = 1;
        let server = loop {
            match mysqld::Server::init_and_start(dir.clone(), &secret.password).await {
                Ok(server) => break server,
                Err(e) if attempt < START_ATTEMPTS => {
                    tracing::warn!(namespace = ns, name, attempt, error = %e, "MariaDB server did not start; trying again");
                    attempt += 1;
                    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                }
                Err(e) => return Err(e.to_string()),
            }
        };
        write_secret(&shared.client, &obj, &secret, server.port).await?;
        Ok::<_, String>(server)
    };
    let started = tokio::select! {
        r = start => Some(r),
        _ = stop.wait_for(|s| *s) => None,
    };
    let ar = ApiResource::erase::<MariaDB>(&());
    let server = match started {
        Some(Ok(server)) => {
            tracing::info!(
                namespace = ns,
                name,
                port = server.port,
                "MariaDB server ready"
            );
            if let Some(e) = shared
                .registry
                .lock()
                .get_mut(&(ns.clone(), name.clone()))
                .filter(|e| e.uid == uid)
            {
                e.ready = Some(dir.clone());
            }
            set_ready(
                &shared,
                &ar,
                &obj,
                condition("Ready", true, "StatefulSetReady", "Running"),
            )
            .await;
            shared.notify.notify_one();
            Some(server)
        }
        Some(Err(message)) => {
            tracing::warn!(
                namespace = ns,
                name,
                error = message,
                "MariaDB server did not start"
            );
            set_ready(
                &shared,
                &ar,
                &obj,
                condition("Ready", false, "Failed", &message),
            )
            .await;
            None
        }
        None => None,
    };
    let _ = stop.wait_for(|s| *s).await;
    if let Some(server) = server {
        server.stop().await;
    }
    let _ = std::fs::remove_file(&dir.socket);
    let _ = std::fs::remove_dir_all(&dir.root);
    let _ = done.send(true);
}

async fn set_ready(shared: &Shared, ar: &ApiResource, obj: &Value, cond: Value) {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let current = shared
        .servers
        .get(ns, name)
        .map(|o| o["status"]["conditions"].clone())
        .unwrap_or(Value::Null);
    if let Some(conditions) = with_condition(&current, cond, &now()) {
        patch_status(
            &shared.client,
            ar,
            &shared.servers,
            FIELD_MANAGER,
            ns,
            name,
            json!({ "conditions": conditions }),
        )
        .await;
    }
}

/// Where a MariaDB's root password lives, and the password.
struct RootSecret {
    name: String,
    key: String,
    password: String,
    /// Whether the Secret (or its key) has to be written.
    write: bool,
}

/// The root password of MariaDB `obj`: from `spec.rootPasswordSecretKeyRef` when it names a
/// Secret key that exists, else from `<name>-credentials` key `root`, else a new one.
async fn password(client: &kube::Client, obj: &Value) -> Result<RootSecret, String> {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let reference = &obj["spec"]["rootPasswordSecretKeyRef"];
    let secret_name = reference["name"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map_or_else(|| format!("{name}-credentials"), str::to_owned);
    let key = reference["key"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or("root")
        .to_owned();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let existing = secrets
        .get_opt(&secret_name)
        .await
        .map_err(|e| format!("reading Secret {secret_name}: {e}"))?
        .and_then(|s| s.data?.get(&key).map(|v| v.0.clone()))
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .filter(|v| !v.is_empty());
    Ok(match existing {
        Some(password) => RootSecret {
            name: secret_name,
            key,
            password,
            write: false,
        },
        None => RootSecret {
            name: secret_name,
            key,
            password: crate::cosi::random_key(
                b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
                24,
            ),
            write: true,
        },
    })
}

/// Writes the connection Secret: the root password (when new) and where the server listens
/// (`host`, `port`: this machine, not the Service).
async fn write_secret(
    client: &kube::Client,
    obj: &Value,
    secret: &RootSecret,
    port: u16,
) -> Result<(), String> {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let b64 = |v: &str| base64::engine::general_purpose::STANDARD.encode(v);
    let mut data = json!({"host": b64("127.0.0.1"), "port": b64(&port.to_string())});
    if secret.write {
        data[&secret.key] = json!(b64(&secret.password));
    }
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let exists = secrets
        .get_opt(&secret.name)
        .await
        .map_err(|e| format!("reading Secret {}: {e}", secret.name))?
        .is_some();
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    if exists {
        secrets
            .patch(
                &secret.name,
                &params,
                &Patch::Merge(&json!({ "data": data })),
            )
            .await
            .map(|_| ())
    } else {
        let body: Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret.name, "namespace": ns,
                "ownerReferences": [{"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "MariaDB",
                    "name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"],
                    "controller": true, "blockOwnerDeletion": true}]},
            "type": "Opaque",
            "data": data,
        }))
        .map_err(|e| e.to_string())?;
        secrets
            .create(&PostParams::default(), &body)
            .await
            .map(|_| ())
    }
    .map_err(|e| format!("writing Secret {}: {e}", secret.name))
}

/// Runs the Job of Backup or Restore `obj` against the server in `dir` and writes its outcome.
/// `backup` is `Some` for a Restore: the Backup its `backupRef` names, if it exists.
async fn run_job(
    shared: Shared,
    ar: ApiResource,
    cache: Arc<Cache>,
    obj: Value,
    dir: ServerDir,
    backup: Option<Option<Value>>,
) {
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let uid = obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let job = dir.job(&uid);
    let outcome = match &backup {
        None => backup_job(&shared, &obj, &dir, &job).await,
        Some(b) => restore_job(&shared, &obj, b.as_ref(), &dir, &job).await,
    };
    let _ = std::fs::remove_dir_all(&job);
    let cond = match &outcome {
        Ok(()) => condition("Complete", true, "JobComplete", "Success"),
        Err(message) => condition("Complete", true, "JobFailed", message),
    };
    tracing::info!(kind = %ar.kind, namespace = ns, name, reason = %cond["reason"], message = %cond["message"], "Job finished");
    let current = cache
        .get(&ns, &name)
        .map(|o| o["status"]["conditions"].clone())
        .unwrap_or(Value::Null);
    if let Some(conditions) = with_condition(&current, cond, &now()) {
        patch_status(
            &shared.client,
            &ar,
            &cache,
            FIELD_MANAGER,
            &ns,
            &name,
            json!({ "conditions": conditions }),
        )
        .await;
    }
    shared.notify.notify_one();
}

/// The dump Job: `mariadb-dump` of the server, upload to `storage.s3`, `maxRetention`.
async fn backup_job(
    shared: &Shared,
    obj: &Value,
    dir: &ServerDir,
    job: &std::path::Path,
) -> Result<(), String> {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let spec = &obj["spec"];
    let s3_spec = &spec["storage"]["s3"];
    if !s3_spec.is_object() {
        return Err("only storage.s3 is simulated".into());
    }
    let compression = mysqld::Compression::parse(spec["compression"].as_str().unwrap_or(""))?;
    let max_retention = match spec["maxRetention"].as_str().filter(|s| !s.is_empty()) {
        Some(s) => Some(
            mysqld::parse_go_duration(s).ok_or_else(|| format!("invalid maxRetention {s:?}"))?,
        ),
        None => None,
    };
    let databases: Vec<String> = spec["databases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|d| d.as_str().map(str::to_owned))
        .collect();
    let s3 = s3_client(shared, ns, s3_spec).await?;
    let file = mysqld::dump(dir, job, &databases, compression)
        .await
        .map_err(|e| e.to_string())?;
    let taken = chrono::Utc::now();
    let prefix = mysqld::normalized_prefix(s3_spec["prefix"].as_str().unwrap_or(""));
    let key = format!("{prefix}{}", mysqld::artifact_name(taken, compression));
    let bytes = std::fs::read(&file).map_err(|e| format!("reading the dump: {e}"))?;
    s3.put(&key, bytes).await.map_err(|e| e.to_string())?;
    tracing::info!(namespace = ns, bucket = s3.bucket(), key, "dump uploaded");
    if let Some(max) = max_retention {
        let deleted = mysqld::prune(&s3, &prefix, max, taken, &key).await?;
        if !deleted.is_empty() {
            tracing::info!(
                namespace = ns,
                ?deleted,
                "older dumps removed (maxRetention)"
            );
        }
    }
    Ok(())
}

/// The restore Job: the newest dump at or before `targetRecoveryTime` (default now) under the
/// Backup's `storage.s3` (or the Restore's own `s3`), replayed with `mariadb`.
async fn restore_job(
    shared: &Shared,
    obj: &Value,
    backup: Option<&Value>,
    dir: &ServerDir,
    job: &std::path::Path,
) -> Result<(), String> {
    let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default();
    let spec = &obj["spec"];
    let s3_spec = if spec["s3"].is_object() {
        &spec["s3"]
    } else {
        let backup = backup.ok_or_else(|| {
            format!(
                "Backup {:?} not found",
                spec["backupRef"]["name"].as_str().unwrap_or_default()
            )
        })?;
        &backup["spec"]["storage"]["s3"]
    };
    if !s3_spec.is_object() {
        return Err("only storage.s3 is simulated".into());
    }
    let target = match spec["targetRecoveryTime"].as_str() {
        Some(t) => chrono::DateTime::parse_from_rfc3339(t)
            .map_err(|e| format!("invalid targetRecoveryTime {t:?}: {e}"))?
            .to_utc(),
        None => chrono::Utc::now(),
    };
    let s3 = s3_client(shared, ns, s3_spec).await?;
    let prefix = mysqld::normalized_prefix(s3_spec["prefix"].as_str().unwrap_or(""));
    let (key, bytes) = mysqld::fetch_latest(&s3, &prefix, target).await?;
    tracing::info!(namespace = ns, bucket = s3.bucket(), key, "restoring dump");
    mysqld::replay(dir, job, &key, &bytes)
        .await
        .map_err(|e| e.to_string())
}

/// One key of a Secret in `ns`, as `{name, key}` names it.
async fn secret_key(client: &kube::Client, ns: &str, reference: &Value) -> Result<Vec<u8>, String> {
    let name = reference["name"].as_str().unwrap_or_default();
    let key = reference["key"].as_str().unwrap_or_default();
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .map_err(|e| format!("reading Secret {name}: {e}"))?
        .ok_or_else(|| format!("Secret \"{name}\" not found"))?;
    secret
        .data
        .and_then(|d| d.get(key).map(|v| v.0.clone()))
        .ok_or_else(|| format!("key \"{key}\" not found in Secret \"{name}\""))
}

/// The S3 client for a Backup's `storage.s3`: keys from its Secret references, `https` when
/// `tls.enabled`, trusting `tls.caSecretKeyRef` or else the development CA.
async fn s3_client(
    shared: &Shared,
    ns: &str,
    s3: &Value,
) -> Result<backup_storage::s3::S3Client, String> {
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).trim().to_owned();
    let access_key = text(secret_key(&shared.client, ns, &s3["accessKeyIdSecretKeyRef"]).await?);
    let secret_key_value =
        text(secret_key(&shared.client, ns, &s3["secretAccessKeySecretKeyRef"]).await?);
    let tls = s3["tls"]["enabled"].as_bool().unwrap_or(false);
    let endpoint = s3["endpoint"].as_str().unwrap_or_default();
    let endpoint = if endpoint.contains("://") {
        endpoint.to_owned()
    } else {
        format!("{}://{endpoint}", if tls { "https" } else { "http" })
    };
    let ca_pem = if !tls {
        None
    } else if s3["tls"]["caSecretKeyRef"].is_object() {
        Some(secret_key(&shared.client, ns, &s3["tls"]["caSecretKeyRef"]).await?)
    } else {
        shared
            .plane
            .default_ca
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
    };
    backup_storage::s3::S3Client::new(backup_storage::s3::S3Config {
        endpoint,
        bucket: s3["bucket"].as_str().unwrap_or_default().to_owned(),
        region: s3["region"].as_str().unwrap_or_default().to_owned(),
        access_key,
        secret_key: secret_key_value,
        ca_pem,
    })
    .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backup(reason: Option<(&str, &str)>) -> Value {
        let mut b =
            json!({"metadata": {"name": "b"}, "spec": {"mariaDbRef": {"name": "mariadb-shop"}}});
        if let Some((status, reason)) = reason {
            b["status"] =
                json!({"conditions": [{"type": "Complete", "status": status, "reason": reason}]});
        }
        b
    }

    fn server(annotations: Value) -> Value {
        json!({"metadata": {"name": "mariadb-shop", "annotations": annotations}})
    }

    #[test]
    fn the_complete_condition_follows_the_dump_job() {
        let plain = server(json!({}));
        let reason = |c: Option<Value>| c.map(|c| (c["status"].clone(), c["reason"].clone()));
        assert_eq!(
            reason(next_condition(&backup(None), None, BACKUP_CONTROLS)),
            Some((json!("False"), json!("Failed")))
        );
        assert_eq!(
            reason(next_condition(&backup(None), Some(&plain), BACKUP_CONTROLS)),
            Some((json!("False"), json!("JobRunning")))
        );
        assert_eq!(
            reason(next_condition(
                &backup(Some(("False", "Failed"))),
                Some(&plain),
                BACKUP_CONTROLS
            )),
            Some((json!("False"), json!("JobRunning"))),
            "the MariaDB appeared"
        );
        let running = backup(Some(("False", "JobRunning")));
        assert_eq!(
            reason(next_condition(&running, Some(&plain), BACKUP_CONTROLS)),
            Some((json!("True"), json!("JobComplete")))
        );
        assert_eq!(
            reason(next_condition(
                &running,
                Some(&server(json!({ANNOTATION_FAIL_BACKUP: "boom"}))),
                BACKUP_CONTROLS
            )),
            Some((json!("True"), json!("JobFailed")))
        );
        assert_eq!(
            next_condition(
                &running,
                Some(&server(json!({ANNOTATION_HANG: "true"}))),
                BACKUP_CONTROLS
            ),
            None
        );
        assert_eq!(
            next_condition(
                &backup(Some(("True", "JobComplete"))),
                Some(&plain),
                BACKUP_CONTROLS
            ),
            None
        );
        assert_eq!(
            next_condition(
                &backup(Some(("True", "JobFailed"))),
                Some(&plain),
                BACKUP_CONTROLS
            ),
            None,
            "finished either way"
        );
    }

    #[test]
    fn restores_follow_their_own_controls() {
        let restore = |status: Option<(&str, &str)>| {
            let mut r = backup(status);
            r["metadata"]["name"] = json!("rj-x1");
            r
        };
        let running = restore(Some(("False", "JobRunning")));
        let reason = |c: Option<Value>| {
            c.map(|c| {
                (
                    c["status"].clone(),
                    c["reason"].clone(),
                    c["message"].clone(),
                )
            })
        };
        assert_eq!(
            reason(next_condition(
                &restore(None),
                Some(&server(json!({}))),
                RESTORE_CONTROLS
            )),
            Some((json!("False"), json!("JobRunning"), json!("Running")))
        );
        assert_eq!(
            reason(next_condition(
                &running,
                Some(&server(json!({}))),
                RESTORE_CONTROLS
            )),
            Some((json!("True"), json!("JobComplete"), json!("Success")))
        );
        assert_eq!(
            reason(next_condition(
                &running,
                Some(&server(json!({ANNOTATION_FAIL_RESTORE: "x"}))),
                RESTORE_CONTROLS
            )),
            Some((json!("True"), json!("JobFailed"), json!("Failed")))
        );
        assert_eq!(
            next_condition(
                &running,
                Some(&server(json!({ANNOTATION_HANG_RESTORE: "true"}))),
                RESTORE_CONTROLS
            ),
            None
        );
        assert_eq!(
            reason(next_condition(
                &running,
                Some(&server(
                    json!({ANNOTATION_FAIL_BACKUP: "x", ANNOTATION_HANG: "true"})
                )),
                RESTORE_CONTROLS
            )),
            Some((json!("True"), json!("JobComplete"), json!("Success"))),
            "backup controls leave restores alone"
        );
    }
}
