//! Simulated CloudNativePG operator and barman-cloud plugin, over real PostgreSQL processes and
//! real barman-cloud commands. It stays one file of about 1,800 lines for now: one instance task
//! per Cluster drives bootstrap, recovery, archiving and backups through shared per-Cluster state,
//! and the stages below read and write that state in turn (the PostgreSQL process plumbing is
//! already apart, in `pg.rs`).
//!
//! ```text
//!  Cluster (uid) ──► instance task (one per Cluster, see below)
//!     ├─ PVCs <cluster>-1..N (label cnpg.io/cluster), Pods <cluster>-1..N, Secrets -app/-superuser
//!     ├─ bootstrap.initdb (default): initdb, database `app` owned by `app`
//!     ├─ bootstrap.recovery: Pod <cluster>-1-full-recovery-xxxxx, container full-recovery:
//!     │     barman-cloud-backup-list → newest base backup ended at/before the target →
//!     │     barman-cloud-restore → postgres with restore_command=barman-cloud-wal-restore
//!     │     (+ recovery_target_time) → promoted: done │ exited (e.g. FATAL recovery ended before
//!     │     configured recovery target was reached): pod Failed, a new pod after a pause, forever
//!     ├─ spec.plugins[barman-cloud…, isWALArchiver] + ObjectStore + its Secrets ─► archive_command
//!     │     barman-cloud-wal-archive; condition ContinuousArchiving from each attempt
//!     └─ status: phase, instances, readyInstances, currentPrimary, conditions
//!  Backup (method plugin) ─► started ─► barman-cloud-backup ─► completed (backupId, WALs, LSNs, …)
//!                                                          └► failed (error: barman's last words)
//!     └─ ObjectStore status.serverRecoveryWindow[serverName] refreshed from barman-cloud-backup-list
//! ```
//!
//! Only instance 1 runs PostgreSQL; instances 2..N are objects only (see `docs/dataplane.md`).
//! Test controls (Cluster annotations): [`ANNOTATION_ARCHIVE_DELAY`], [`ANNOTATION_FAIL_BACKUP`],
//! [`ANNOTATION_HANG`]. Invariants: a Cluster's bootstrap is read once, when its instance is
//! created; every process of an instance is stopped and its directory removed when the Cluster (by
//! uid) goes or this process stops; credentials reach only 0600 files and child environments.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::thirdparty::barman::ObjectStore;
use api::thirdparty::cnpg::{Backup, Cluster};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, watch};

use crate::cache::{Cache, spawn_sanitized_watches};
use crate::pg::{self, BarmanTarget, InstanceDir, Server, StartOptions, Toolchain};
use crate::podlog;

/// Field manager of the simulated operator.
pub const FIELD_MANAGER: &str = "operator-sims-cnpg";
/// The barman-cloud plugin's name.
pub const PLUGIN: &str = "barman-cloud.cloudnative-pg.io";
/// Cluster label on every object of a cluster.
pub const CLUSTER_LABEL: &str = "cnpg.io/cluster";
/// The healthy phase.
pub const PHASE_HEALTHY: &str = "Cluster in healthy state";
/// The phase while the first primary is being set up (initdb or recovery).
pub const PHASE_SETTING_UP: &str = "Setting up primary";
/// Test control: seconds (e.g. `2` or `1.5s`) each WAL archive attempt waits first.
pub const ANNOTATION_ARCHIVE_DELAY: &str = "operator-sims.cozy-backups.io/archive-delay";
/// Test control: plugin Backups of this Cluster fail with this message (without running barman).
pub const ANNOTATION_FAIL_BACKUP: &str = "operator-sims.cozy-backups.io/fail-backup";
/// Test control (`"true"`): Backups of this Cluster stay `started` and a recovery stays in its
/// current step until the annotation is removed.
pub const ANNOTATION_HANG: &str = "operator-sims.cozy-backups.io/hang";
/// Test control for the operator-object restores (MariaDB, MongoDB, FoundationDB, Etcd, Velero):
/// the restore fails, the value being the operator's message where the operator reports one.
pub const ANNOTATION_FAIL_RESTORE: &str = "operator-sims.cozy-backups.io/fail-restore";
/// Test control (`"true"`) for the operator-object restores: the restore stays in progress until
/// the annotation is removed.
pub const ANNOTATION_HANG_RESTORE: &str = "operator-sims.cozy-backups.io/hang-restore";

/// Settings of the CNPG simulator.
#[derive(Clone, Debug)]
pub struct Options {
    /// PostgreSQL binaries and the account they run as.
    pub toolchain: Toolchain,
    /// Root of the instance directories (`<root>/<namespace>/<cluster>-<uid>`).
    pub root: PathBuf,
    /// The CA barman-cloud trusts when an ObjectStore names no `endpointCA` (the dev CA standing
    /// in for the public trust store); `None` leaves barman on its default trust store.
    pub default_ca: Option<PathBuf>,
    /// Pause between recovery attempts (CloudNativePG re-creates the recovery pod).
    pub recovery_retry: Duration,
}

/// Test controls read from a Cluster's annotations.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Controls {
    /// Seconds each WAL archive attempt waits.
    pub archive_delay: Option<f64>,
    /// Backups fail with this message.
    pub fail_backup: Option<String>,
    /// Backups and recovery make no progress.
    pub hang: bool,
}

impl Controls {
    /// Reads the controls of a Cluster.
    pub fn of(cluster: &Value) -> Self {
        let a = &cluster["metadata"]["annotations"];
        Controls {
            archive_delay: a[ANNOTATION_ARCHIVE_DELAY]
                .as_str()
                .and_then(|s| s.trim().trim_end_matches('s').parse::<f64>().ok())
                .filter(|d| *d > 0.0),
            fail_backup: a[ANNOTATION_FAIL_BACKUP]
                .as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            hang: a[ANNOTATION_HANG].as_str() == Some("true"),
        }
    }
}

/// The barman-cloud plugin entry of a Cluster: `(barmanObjectName, serverName, isWALArchiver)`.
pub fn plugin_entry(cluster: &Value) -> Option<(String, String, bool)> {
    let name = cluster["metadata"]["name"].as_str().unwrap_or_default();
    cluster["spec"]["plugins"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == PLUGIN && p["enabled"] != false)
        .map(|p| {
            let params = &p["parameters"];
            (
                params["barmanObjectName"].as_str().unwrap_or("").to_owned(),
                params["serverName"].as_str().unwrap_or(name).to_owned(),
                p["isWALArchiver"] == true,
            )
        })
}

/// Where a recovery reads from, as CloudNativePG resolves `bootstrap.recovery`.
#[derive(Clone, Debug, PartialEq)]
pub struct RecoverySource {
    /// The ObjectStore named by the external cluster's plugin parameters.
    pub object_store: String,
    /// The server name (the plugin parameter; the new cluster's name when absent).
    pub server_name: String,
    /// `recoveryTarget.targetTime` as the user wrote it.
    pub target_time: Option<String>,
}

/// Reads the recovery source of a Cluster with `bootstrap.recovery`; `Ok(None)` without one.
pub fn recovery_source(cluster: &Value) -> Result<Option<RecoverySource>, String> {
    let recovery = &cluster["spec"]["bootstrap"]["recovery"];
    if recovery.is_null() {
        return Ok(None);
    }
    let name = cluster["metadata"]["name"].as_str().unwrap_or_default();
    let Some(source) = recovery["source"].as_str().filter(|s| !s.is_empty()) else {
        return Err(
            "bootstrap.recovery: only recovery from an external cluster (source) is supported"
                .into(),
        );
    };
    let external = cluster["spec"]["externalClusters"]
        .as_array()
        .and_then(|l| l.iter().find(|e| e["name"] == source))
        .ok_or_else(|| format!("missing external cluster: {source}"))?;
    let plugin = &external["plugin"];
    if plugin["name"] != PLUGIN {
        return Err(format!(
            "external cluster {source}: only the {PLUGIN} plugin is supported"
        ));
    }
    let object_store = plugin["parameters"]["barmanObjectName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("external cluster {source}: missing barmanObjectName parameter"))?
        .to_owned();
    let server_name = plugin["parameters"]["serverName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or(name)
        .to_owned();
    let target = &recovery["recoveryTarget"];
    for unsupported in ["targetXID", "targetName", "targetLSN", "targetImmediate"] {
        if !target[unsupported].is_null() {
            return Err(format!(
                "recoveryTarget.{unsupported} is not supported by the simulator"
            ));
        }
    }
    let target_time = target["targetTime"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_owned);
    Ok(Some(RecoverySource {
        object_store,
        server_name,
        target_time,
    }))
}

/// An ObjectStore resolved against its Secrets: what barman-cloud needs, minus the server name.
#[derive(Clone, PartialEq)]
pub struct Resolved {
    /// `configuration.destinationPath`.
    pub destination_path: String,
    /// `configuration.endpointURL`.
    pub endpoint_url: Option<String>,
    /// AWS credentials and the sidecar environment.
    pub env: BTreeMap<String, String>,
    /// PEM of `configuration.endpointCA`, when set.
    pub ca_pem: Option<String>,
    /// `barman-cloud-wal-archive` compression/encryption arguments.
    pub wal_args: Vec<String>,
    /// `barman-cloud-backup` compression/encryption/jobs arguments.
    pub data_args: Vec<String>,
}

impl std::fmt::Debug for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolved")
            .field("destination_path", &self.destination_path)
            .field("endpoint_url", &self.endpoint_url)
            .finish_non_exhaustive()
    }
}

fn secret_key(secrets: &Cache, ns: &str, selector: &Value, what: &str) -> Result<String, String> {
    use base64::Engine as _;
    let name = selector["name"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{what}: missing secret name"))?;
    let key = selector["key"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{what}: missing secret key"))?;
    let secret = secrets
        .get(ns, name)
        .ok_or_else(|| format!("while getting secret {name}: secrets \"{name}\" not found"))?;
    let encoded = secret["data"][key]
        .as_str()
        .ok_or_else(|| format!("missing key {key}, inside secret {name}"))?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|_| format!("key {key} of secret {name} is not base64"))?;
    String::from_utf8(bytes).map_err(|_| format!("key {key} of secret {name} is not UTF-8"))
}

fn compression_args(compression: &Value) -> Vec<String> {
    match compression.as_str() {
        Some("gzip") => vec!["--gzip".into()],
        Some("bzip2") => vec!["--bzip2".into()],
        Some("snappy") => vec!["--snappy".into()],
        _ => vec![],
    }
}

/// Resolves ObjectStore `ns/name` against the Secrets it names.
pub fn resolve_object_store(
    object_stores: &Cache,
    secrets: &Cache,
    ns: &str,
    name: &str,
) -> Result<Resolved, String> {
    let store = object_stores
        .get(ns, name)
        .ok_or_else(|| format!("ObjectStore {ns}/{name} not found"))?;
    let cfg = &store["spec"]["configuration"];
    let destination_path = cfg["destinationPath"]
        .as_str()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| format!("ObjectStore {ns}/{name}: missing configuration.destinationPath"))?
        .to_owned();
    let s3 = &cfg["s3Credentials"];
    if s3.is_null() {
        return Err(format!(
            "ObjectStore {ns}/{name}: only s3Credentials are supported by the simulator"
        ));
    }
    if s3["inheritFromIAMRole"] == true {
        return Err(format!(
            "ObjectStore {ns}/{name}: inheritFromIAMRole is not supported by the simulator"
        ));
    }
    let mut env = BTreeMap::new();
    env.insert(
        "AWS_ACCESS_KEY_ID".to_owned(),
        secret_key(secrets, ns, &s3["accessKeyId"], "accessKeyId")?,
    );
    env.insert(
        "AWS_SECRET_ACCESS_KEY".to_owned(),
        secret_key(secrets, ns, &s3["secretAccessKey"], "secretAccessKey")?,
    );
    if !s3["sessionToken"].is_null() {
        env.insert(
            "AWS_SESSION_TOKEN".to_owned(),
            secret_key(secrets, ns, &s3["sessionToken"], "sessionToken")?,
        );
    }
    if let Some(region) = s3["region"].as_object() {
        let region = secret_key(secrets, ns, &Value::Object(region.clone()), "region")?;
        env.insert("AWS_DEFAULT_REGION".to_owned(), region);
    }
    for e in store["spec"]["instanceSidecarConfiguration"]["env"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let (Some(k), Some(v)) = (e["name"].as_str(), e["value"].as_str()) {
            env.insert(k.to_owned(), v.to_owned());
        }
    }
    let ca_pem = if cfg["endpointCA"].is_null() {
        None
    } else {
        Some(secret_key(secrets, ns, &cfg["endpointCA"], "endpointCA")?)
    };
    let mut wal_args = compression_args(&cfg["wal"]["compression"]);
    if let Some(enc) = cfg["wal"]["encryption"].as_str().filter(|s| !s.is_empty()) {
        wal_args.extend(["--encryption".to_owned(), enc.to_owned()]);
    }
    let mut data_args = compression_args(&cfg["data"]["compression"]);
    if let Some(enc) = cfg["data"]["encryption"].as_str().filter(|s| !s.is_empty()) {
        data_args.extend(["--encryption".to_owned(), enc.to_owned()]);
    }
    if cfg["data"]["immediateCheckpoint"] == true {
        data_args.push("--immediate-checkpoint".to_owned());
    }
    if let Some(jobs) = cfg["data"]["jobs"].as_i64() {
        data_args.extend(["--jobs".to_owned(), jobs.to_string()]);
    }
    Ok(Resolved {
        destination_path,
        endpoint_url: cfg["endpointURL"]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
        env,
        ca_pem,
        wal_args,
        data_args,
    })
}

/// Everything the simulator watches, shared with the instance tasks.
struct Shared {
    client: kube::Client,
    options: Options,
    clusters: Arc<Cache>,
    backups: Arc<Cache>,
    object_stores: Arc<Cache>,
    secrets: Arc<Cache>,
    /// Bumped on every change of any watched object.
    tick: watch::Sender<u64>,
}

impl Shared {
    /// Turns a resolved ObjectStore into a barman target inside `dir` (writing its CA file).
    fn target(
        &self,
        dir: &InstanceDir,
        store_name: &str,
        resolved: &Resolved,
        server_name: &str,
        args: &[String],
    ) -> Result<BarmanTarget, String> {
        let mut env = resolved.env.clone();
        // The CA is always copied into the instance directory, owned by the user barman runs as:
        // the S3 server's own directory may be one that user cannot enter (a private
        // --data-dir, e.g. made by `mktemp -d`), and barman would then fail every TLS handshake
        // with "[Errno 13] Permission denied".
        let pem = match (&resolved.ca_pem, &self.options.default_ca) {
            (Some(pem), _) => Some(pem.clone()),
            (None, Some(path)) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("reading the S3 server's CA {}: {e}", path.display()))?,
            ),
            (None, None) => None,
        };
        if let Some(pem) = pem {
            let name = format!("{store_name}-ca.crt");
            let ca = dir.root.join(&name);
            // Called at every change of a watched object: rewrite only what changed.
            if std::fs::read_to_string(&ca).ok().as_deref() != Some(pem.as_str()) {
                dir.write_private(&self.options.toolchain, &name, &pem)
                    .map_err(|e| e.to_string())?;
            }
            env.insert("AWS_CA_BUNDLE".to_owned(), ca.display().to_string());
        }
        Ok(BarmanTarget {
            destination_path: resolved.destination_path.clone(),
            server_name: server_name.to_owned(),
            endpoint_url: resolved.endpoint_url.clone(),
            args: args.to_vec(),
            env,
        })
    }

    async fn patch_status<K>(&self, ns: &str, name: &str, status: Value)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &ApiResource::erase::<K>(&()));
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        if let Err(e) = api
            .patch_status(name, &params, &Patch::Merge(&json!({ "status": status })))
            .await
        {
            tracing::debug!(namespace = ns, name, kind = K::kind(&()).as_ref(), error = %e, "status update failed");
        }
    }

    /// Sets one condition of a Cluster (list-map by type), keeping the others.
    async fn set_condition(&self, ns: &str, name: &str, cond: Value) {
        let Some(cluster) = self.clusters.get(ns, name) else {
            return;
        };
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let Some(conditions) =
            crate::conditions::with_condition(&cluster["status"]["conditions"], cond, &now)
        else {
            return;
        };
        self.patch_status::<Cluster>(ns, name, json!({ "conditions": conditions }))
            .await;
    }
}

/// Stops every instance when asked (the simulator's shutdown path).
#[derive(Clone, Default)]
pub struct Registry {
    tasks: Arc<Mutex<BTreeMap<String, InstanceHandle>>>,
}

struct InstanceHandle {
    stop: watch::Sender<bool>,
    done: watch::Receiver<bool>,
}

impl Registry {
    /// Stops every PostgreSQL process and removes every instance directory.
    pub async fn stop_all(&self) {
        let handles: Vec<InstanceHandle> =
            std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()))
                .into_values()
                .collect();
        for h in &handles {
            let _ = h.stop.send(true);
        }
        for mut h in handles {
            let _ = tokio::time::timeout(Duration::from_secs(25), h.done.wait_for(|d| *d)).await;
        }
    }
}

/// Runs the simulator forever.
pub async fn run(
    client: kube::Client,
    options: Options,
    registry: Registry,
    readiness: runtime::Readiness,
) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let (tick, _) = watch::channel(0u64);
    let shared = Arc::new(Shared {
        client: client.clone(),
        options,
        clusters: Arc::default(),
        backups: Arc::default(),
        object_stores: Arc::default(),
        secrets: Arc::default(),
        tick,
    });
    spawn_sanitized_watches(
        &client,
        &readiness,
        &notify,
        drop_managed_fields,
        vec![
            (
                &shared.clusters,
                ApiResource::erase::<Cluster>(&()),
                "cnpg: watch Cluster",
            ),
            (
                &shared.backups,
                ApiResource::erase::<Backup>(&()),
                "cnpg: watch Backup",
            ),
            (
                &shared.object_stores,
                ApiResource::erase::<ObjectStore>(&()),
                "cnpg: watch ObjectStore",
            ),
            (
                &shared.secrets,
                ApiResource::erase::<Secret>(&()),
                "cnpg: watch Secret",
            ),
        ],
    );
    loop {
        notify.notified().await;
        shared.tick.send_modify(|t| *t += 1);
        let clusters = shared.clusters.snapshot();
        let live: BTreeMap<String, (String, String)> = clusters
            .iter()
            .filter(|(_, c)| c["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|((ns, name), c)| {
                c["metadata"]["uid"]
                    .as_str()
                    .map(|uid| (uid.to_owned(), (ns.clone(), name.clone())))
            })
            .collect();
        let mut tasks = registry.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|uid, handle| {
            let keep = live.contains_key(uid);
            if !keep {
                let _ = handle.stop.send(true);
            }
            keep
        });
        for (uid, (ns, name)) in live {
            if tasks.contains_key(&uid) {
                continue;
            }
            let (stop_tx, stop_rx) = watch::channel(false);
            let (done_tx, done_rx) = watch::channel(false);
            tasks.insert(
                uid.clone(),
                InstanceHandle {
                    stop: stop_tx,
                    done: done_rx,
                },
            );
            let instance = Instance::new(shared.clone(), ns, name, uid);
            tokio::spawn(async move {
                instance.run(stop_rx).await;
                let _ = done_tx.send(true);
            });
        }
    }
}

fn drop_managed_fields(v: &mut Value) {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
}

/// One Cluster's instance manager.
struct Instance {
    shared: Arc<Shared>,
    ns: String,
    name: String,
    uid: String,
    dir: InstanceDir,
}

/// What ends waiting for an instance step.
enum Interrupt {
    Stop,
}

impl Instance {
    fn new(shared: Arc<Shared>, ns: String, name: String, uid: String) -> Self {
        let short: String = uid.chars().take(8).collect();
        let dir = InstanceDir {
            root: shared
                .options
                .root
                .join(&ns)
                .join(format!("{name}-{short}")),
        };
        Instance {
            shared,
            ns,
            name,
            uid,
            dir,
        }
    }

    fn tc(&self) -> &Toolchain {
        &self.shared.options.toolchain
    }

    fn cluster(&self) -> Option<Value> {
        self.shared
            .clusters
            .get(&self.ns, &self.name)
            .filter(|c| c["metadata"]["uid"] == self.uid.as_str())
    }

    fn owner(&self) -> Value {
        json!([{
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": self.name,
            "uid": self.uid, "controller": true, "blockOwnerDeletion": true,
        }])
    }

    async fn run(self, mut stop: watch::Receiver<bool>) {
        tracing::info!(
            namespace = self.ns,
            cluster = self.name,
            "instance starting"
        );
        let outcome = self.bring_up(&mut stop).await;
        match outcome {
            Ok(Some(server)) => self.serve(server, &mut stop).await,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(namespace = self.ns, cluster = self.name, error = %e, "instance failed");
                self.shared
                    .patch_status::<Cluster>(
                        &self.ns,
                        &self.name,
                        json!({"phase": "Cluster is unrecoverable and needs manual intervention",
                               "phaseReason": e}),
                    )
                    .await;
                let _ = stop.wait_for(|s| *s).await;
            }
        }
        self.dir.remove_all();
        tracing::info!(
            namespace = self.ns,
            cluster = self.name,
            "instance stopped and removed"
        );
    }

    async fn wait_or_stop<F: std::future::Future>(
        stop: &mut watch::Receiver<bool>,
        f: F,
    ) -> Result<F::Output, Interrupt> {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => Err(Interrupt::Stop),
            v = f => Ok(v),
        }
    }

    fn instances(&self) -> i64 {
        self.cluster()
            .and_then(|c| c["spec"]["instances"].as_i64())
            .unwrap_or(1)
            .max(1)
    }

    /// Creates the PVCs, then initdb or recovery; returns the running primary.
    async fn bring_up(&self, stop: &mut watch::Receiver<bool>) -> Result<Option<Server>, String> {
        let Some(cluster) = self.cluster() else {
            return Ok(None);
        };
        self.dir.create(self.tc()).map_err(|e| e.to_string())?;
        self.shared
            .patch_status::<Cluster>(
                &self.ns,
                &self.name,
                json!({"phase": PHASE_SETTING_UP, "instances": self.instances(),
                       "readyInstances": 0, "latestGeneratedNode": self.instances(),
                       "targetPrimary": format!("{}-1", self.name)}),
            )
            .await;
        self.create_pvcs(&cluster).await;
        if !cluster["spec"]["bootstrap"]["pg_basebackup"].is_null() {
            return Err("bootstrap.pg_basebackup is not supported by the simulator".into());
        }
        let recovery = recovery_source(&cluster);
        match recovery {
            Err(e) => Err(e),
            Ok(Some(source)) => {
                let mut attempt = 0u32;
                loop {
                    attempt += 1;
                    match Self::wait_or_stop(stop, self.recover(&source, attempt)).await {
                        Err(Interrupt::Stop) => return Ok(None),
                        Ok(true) => break,
                        Ok(false) => {
                            let pause = self.shared.options.recovery_retry;
                            if Self::wait_or_stop(stop, tokio::time::sleep(pause))
                                .await
                                .is_err()
                            {
                                return Ok(None);
                            }
                        }
                    }
                }
                self.start_primary(stop).await
            }
            Ok(None) => {
                self.dir
                    .initdb(self.tc())
                    .await
                    .map_err(|e| e.to_string())?;
                self.start_primary(stop).await
            }
        }
    }

    async fn create_pvcs(&self, cluster: &Value) {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.shared.client.clone(), &self.ns);
        let size = cluster["spec"]["storage"]["size"].as_str().unwrap_or("1Gi");
        for n in 1..=self.instances() {
            let instance = format!("{}-{n}", self.name);
            let mut spec = json!({
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": size}},
            });
            if let Some(sc) = cluster["spec"]["storage"]["storageClass"].as_str() {
                spec["storageClassName"] = json!(sc);
            }
            let pvc = json!({
                "metadata": {
                    "name": instance,
                    "labels": {CLUSTER_LABEL: self.name, "cnpg.io/instanceName": instance,
                               "cnpg.io/pvcRole": "PG_DATA"},
                    "ownerReferences": self.owner(),
                },
                "spec": spec,
            });
            if let Err(e) = podlog::create_owned(&api, pvc).await {
                tracing::warn!(error = %e, "creating a PVC failed");
            }
        }
    }

    /// One recovery attempt in a fresh `full-recovery` pod; true when the data directory is
    /// recovered and the server was promoted (and stopped again).
    async fn recover(&self, source: &RecoverySource, attempt: u32) -> bool {
        let suffix = crate::cosi::random_key(b"bcdfghjklmnpqrstvwxz2456789", 5);
        let job = format!("{}-1-full-recovery", self.name);
        let pod = format!("{job}-{suffix}");
        let body = json!({
            "metadata": {
                "name": pod,
                "labels": {CLUSTER_LABEL: self.name, "cnpg.io/jobRole": "full-recovery",
                           "cnpg.io/instanceName": format!("{}-1", self.name), "job-name": job},
                "ownerReferences": self.owner(),
            },
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "full-recovery", "image": "ghcr.io/cloudnative-pg/postgresql"}]},
        });
        if let Err(e) = podlog::create_pod(&self.shared.client, &self.ns, body).await {
            tracing::warn!(error = %e, "creating the recovery pod failed");
        }
        let (log, sink) = podlog::sink(
            self.shared.client.clone(),
            self.ns.clone(),
            pod.clone(),
            "full-recovery".into(),
        );
        let say = |line: String| {
            let _ = log.send(format!("cnpg-sim: {line}"));
        };
        say(format!(
            "recovery attempt {attempt} from server {}",
            source.server_name
        ));
        let ok = self.recover_into(source, &say, &log).await;
        drop(log);
        let _ = sink.await;
        podlog::finish_pod(
            &self.shared.client,
            &self.ns,
            &pod,
            "full-recovery",
            if ok { 0 } else { 1 },
            FIELD_MANAGER,
        )
        .await;
        ok
    }

    async fn wait_unhung(&self) {
        let mut tick = self.shared.tick.subscribe();
        while self.cluster().is_some_and(|c| Controls::of(&c).hang) {
            if tick.changed().await.is_err() {
                return;
            }
        }
    }

    async fn recover_into(
        &self,
        source: &RecoverySource,
        say: &impl Fn(String),
        log: &mpsc::UnboundedSender<String>,
    ) -> bool {
        self.wait_unhung().await;
        let target_time = match &source.target_time {
            None => None,
            Some(t) => match pg::postgres_target_time(t) {
                Some(v) => Some(v),
                None => {
                    say(format!("invalid recoveryTarget.targetTime {t:?}"));
                    return false;
                }
            },
        };
        let resolved = match resolve_object_store(
            &self.shared.object_stores,
            &self.shared.secrets,
            &self.ns,
            &source.object_store,
        ) {
            Ok(r) => r,
            Err(e) => {
                say(format!(
                    "error while resolving the recovery object store: {e}"
                ));
                return false;
            }
        };
        let target = match self.shared.target(
            &self.dir,
            &source.object_store,
            &resolved,
            &source.server_name,
            &[],
        ) {
            Ok(t) => t,
            Err(e) => {
                say(e);
                return false;
            }
        };
        let backups = match pg::list_backups(self.tc(), &self.dir.root, &target).await {
            Ok(b) => b,
            Err(e) => {
                say(format!("while listing backups: {e}"));
                return false;
            }
        };
        let Some(backup) = pg::choose_backup(&backups, target_time.as_ref().map(|t| t.1)) else {
            say(format!(
                "no target backup found for server {} under {}{}",
                source.server_name,
                target.destination_path,
                source
                    .target_time
                    .as_ref()
                    .map(|t| format!(" ending at or before {t}"))
                    .unwrap_or_default()
            ));
            return false;
        };
        say(format!(
            "restoring base backup {} (ended {})",
            backup.backup_id,
            backup.end_time.as_deref().unwrap_or("?")
        ));
        if let Err(e) = self
            .dir
            .restore_base_backup(self.tc(), &target, &backup.backup_id)
            .await
        {
            say(e.to_string());
            return false;
        }
        let env = target.env_file(None);
        if let Err(e) = self.dir.write_private(self.tc(), "restore.env", &env) {
            say(e.to_string());
            return false;
        }
        let mut settings = vec![
            ("archive_mode".to_owned(), "off".to_owned()),
            (
                "restore_command".to_owned(),
                format!("{} %f %p", self.dir.root.join("bin/restore-wal").display()),
            ),
            ("recovery_target_action".to_owned(), "promote".to_owned()),
        ];
        if let Some((pg_time, _)) = &target_time {
            settings.push(("recovery_target_time".to_owned(), pg_time.clone()));
        }
        let port = match pg::free_port() {
            Ok(p) => p,
            Err(e) => {
                say(e.to_string());
                return false;
            }
        };
        let (mut server, mut lines) =
            match Server::start(self.tc(), &self.dir, port, &StartOptions { settings }) {
                Ok(s) => s,
                Err(e) => {
                    say(e.to_string());
                    return false;
                }
            };
        let mut promoted = false;
        while let Some(line) = lines.recv().await {
            let ready = line.contains("database system is ready to accept connections");
            let _ = log.send(line);
            if ready {
                promoted = true;
                break;
            }
        }
        if promoted {
            // Keep forwarding what the server says while it shuts down.
            let log = log.clone();
            let forward = tokio::spawn(async move {
                while let Some(line) = lines.recv().await {
                    let _ = log.send(line);
                }
            });
            server.stop(self.tc()).await;
            let _ = forward.await;
            say("recovery completed".into());
            self.dir.remove("restore.env");
            true
        } else {
            let code = server.wait().await;
            say(format!("postgres exited with code {code}"));
            false
        }
    }

    /// Starts the primary with the archive settings, sets the app role up, writes Secrets, Pods
    /// and a healthy status.
    async fn start_primary(
        &self,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Option<Server>, String> {
        let port = pg::free_port().map_err(|e| e.to_string())?;
        let settings = vec![
            ("archive_mode".to_owned(), "on".to_owned()),
            (
                "archive_command".to_owned(),
                format!("{} %p", self.dir.root.join("bin/archive-wal").display()),
            ),
            ("archive_timeout".to_owned(), "5min".to_owned()),
        ];
        self.apply_archive_config();
        let (server, mut lines) =
            Server::start(self.tc(), &self.dir, port, &StartOptions { settings })
                .map_err(|e| e.to_string())?;
        let primary_pod = format!("{}-1", self.name);
        self.create_instance_pods().await;
        let (log, _sink) = podlog::sink(
            self.shared.client.clone(),
            self.ns.clone(),
            primary_pod,
            "postgres".into(),
        );
        // Wait for "ready to accept connections", forwarding the log.
        let mut last = std::collections::VecDeque::new();
        let ready = Self::wait_or_stop(stop, async {
            while let Some(line) = lines.recv().await {
                let ready = line.contains("database system is ready to accept connections");
                if last.len() == 3 {
                    last.pop_front();
                }
                last.push_back(line.clone());
                let _ = log.send(line);
                if ready {
                    return true;
                }
            }
            false
        })
        .await;
        match ready {
            Err(Interrupt::Stop) => {
                server.stop(self.tc()).await;
                return Ok(None);
            }
            Ok(false) => {
                // What the server said last says why (its whole log is the pod's).
                let said: Vec<String> = last.into_iter().collect();
                return Err(format!(
                    "PostgreSQL exited during start-up: {}",
                    said.join("; ")
                ));
            }
            Ok(true) => {}
        }
        // From now on the log lines also drive the ContinuousArchiving condition.
        let shared = self.shared.clone();
        let (ns, name) = (self.ns.clone(), self.name.clone());
        tokio::spawn(async move {
            let mut last_error: Vec<String> = Vec::new();
            while let Some(line) = lines.recv().await {
                if line.starts_with("cnpg-sim: archived WAL file") {
                    last_error.clear();
                    shared
                        .set_condition(
                            &ns,
                            &name,
                            json!({"type": "ContinuousArchiving", "status": "True",
                                   "reason": "ContinuousArchivingSuccess",
                                   "message": "Continuous archiving is working"}),
                        )
                        .await;
                } else if line.starts_with("cnpg-sim: failed to archive WAL file") {
                    let message = if last_error.is_empty() {
                        line.trim_start_matches("cnpg-sim: ").to_owned()
                    } else {
                        last_error.join("; ")
                    };
                    last_error.clear();
                    shared
                        .set_condition(
                            &ns,
                            &name,
                            json!({"type": "ContinuousArchiving", "status": "False",
                                   "reason": "ContinuousArchivingFailing", "message": message}),
                        )
                        .await;
                } else if line.contains("ERROR") && !line.contains("LOG:") {
                    // barman-cloud's own error lines (stderr of archive_command).
                    last_error.push(line.trim().to_owned());
                    if last_error.len() > 3 {
                        last_error.remove(0);
                    }
                }
                let _ = log.send(line);
            }
        });
        self.ensure_app_role_and_secrets(&server).await?;
        let instances = self.instances();
        let names: Vec<String> = (1..=instances)
            .map(|n| format!("{}-{n}", self.name))
            .collect();
        self.shared
            .set_condition(
                &self.ns,
                &self.name,
                json!({"type": "Ready", "status": "True", "reason": "ClusterIsReady",
                       "message": "Cluster is Ready"}),
            )
            .await;
        self.shared
            .patch_status::<Cluster>(
                &self.ns,
                &self.name,
                json!({
                    "phase": PHASE_HEALTHY,
                    "instances": instances,
                    "readyInstances": instances,
                    "currentPrimary": names[0],
                    "targetPrimary": names[0],
                    "instanceNames": names,
                    "writeService": format!("{}-rw", self.name),
                    "readService": format!("{}-r", self.name),
                    "instancesStatus": {"healthy": names},
                }),
            )
            .await;
        tracing::info!(
            namespace = self.ns,
            cluster = self.name,
            port,
            "instance healthy"
        );
        Ok(Some(server))
    }

    async fn create_instance_pods(&self) {
        for n in 1..=self.instances() {
            let pod = format!("{}-{n}", self.name);
            let role = if n == 1 { "primary" } else { "replica" };
            let body = json!({
                "metadata": {
                    "name": pod,
                    "labels": {CLUSTER_LABEL: self.name, "cnpg.io/instanceName": pod,
                               "cnpg.io/instanceRole": role, "role": role,
                               "cnpg.io/podRole": "instance"},
                    "ownerReferences": self.owner(),
                },
                "spec": {"containers": [{"name": "postgres",
                                         "image": "ghcr.io/cloudnative-pg/postgresql"}]},
            });
            if let Err(e) = podlog::create_pod(&self.shared.client, &self.ns, body).await {
                tracing::warn!(error = %e, "creating an instance pod failed");
            }
            if n > 1 {
                podlog::append(
                    &self.shared.client,
                    &self.ns,
                    &pod,
                    "postgres",
                    "cnpg-sim: simulated replica: no PostgreSQL process runs for this instance\n"
                        .into(),
                )
                .await;
            }
        }
    }

    /// Database `app` owned by role `app` (created after initdb; kept after a recovery), the
    /// role's password from the `-app` Secret, and the Secrets pointing at this server.
    async fn ensure_app_role_and_secrets(&self, server: &Server) -> Result<(), String> {
        let secrets: Api<Secret> = Api::namespaced(self.shared.client.clone(), &self.ns);
        let mut passwords = BTreeMap::new();
        for (suffix, user) in [("app", "app"), ("superuser", "postgres")] {
            let name = format!("{}-{suffix}", self.name);
            let existing = self
                .shared
                .secrets
                .get(&self.ns, &name)
                .filter(|s| s["metadata"]["ownerReferences"][0]["uid"] == self.uid.as_str());
            let password = existing
                .and_then(|s| {
                    use base64::Engine as _;
                    let b = s["data"]["password"].as_str()?;
                    let raw = base64::engine::general_purpose::STANDARD.decode(b).ok()?;
                    String::from_utf8(raw).ok()
                })
                .unwrap_or_else(|| {
                    crate::cosi::random_key(
                        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                        64,
                    )
                });
            passwords.insert(user, password.clone());
            let dbname = if user == "app" { "app" } else { "*" };
            let body = app_secret(
                &self.ns,
                &name,
                &self.uid,
                &self.name,
                user,
                &password,
                dbname,
                server.port,
            );
            let params = PatchParams::apply(FIELD_MANAGER).force();
            secrets
                .patch(&name, &params, &Patch::Apply(&body))
                .await
                .map_err(|e| format!("writing Secret {name}: {e}"))?;
        }
        let quote = |s: &str| s.replace('\'', "''");
        let sql = format!(
            "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'app') THEN \
             CREATE ROLE app LOGIN; END IF; END $$; \
             ALTER ROLE app WITH LOGIN PASSWORD '{}'; ALTER ROLE postgres WITH PASSWORD '{}';",
            quote(&passwords["app"]),
            quote(&passwords["postgres"])
        );
        server
            .psql(self.tc(), "postgres", &sql)
            .await
            .map_err(|e| e.to_string())?;
        let has_db = server
            .psql(
                self.tc(),
                "postgres",
                "SELECT count(*) FROM pg_database WHERE datname = 'app'",
            )
            .await
            .map_err(|e| e.to_string())?;
        if has_db == "0" {
            server
                .psql(self.tc(), "postgres", "CREATE DATABASE app OWNER app")
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Writes (or removes) `archive.env` from the Cluster's plugin entry, its ObjectStore and
    /// Secrets, and the archive-delay control; returns the error that keeps archiving off.
    fn apply_archive_config(&self) -> Option<String> {
        let cluster = self.cluster()?;
        let controls = Controls::of(&cluster);
        let entry = plugin_entry(&cluster).filter(|(_, _, archiver)| *archiver);
        let Some((store, server_name, _)) = entry else {
            self.dir.remove("archive.env");
            return None;
        };
        let resolved = resolve_object_store(
            &self.shared.object_stores,
            &self.shared.secrets,
            &self.ns,
            &store,
        );
        let target = resolved.and_then(|r| {
            self.shared
                .target(&self.dir, &store, &r, &server_name, &r.wal_args)
        });
        match target {
            Ok(t) => {
                let text = t.env_file(controls.archive_delay);
                let current =
                    std::fs::read_to_string(self.dir.root.join("archive.env")).unwrap_or_default();
                if current != text
                    && let Err(e) = self.dir.write_private(self.tc(), "archive.env", &text)
                {
                    return Some(e.to_string());
                }
                None
            }
            Err(e) => {
                // Without a usable configuration every archive attempt fails, as it does when
                // the plugin cannot read its ObjectStore.
                let text = format!(
                    "echo {} >&2\nexit 1\n",
                    pg::shell_quote(&format!("ERROR: {e}"))
                );
                let _ = self.dir.write_private(self.tc(), "archive.env", &text);
                Some(e)
            }
        }
    }

    /// The running primary: follows configuration changes, runs Backups, restarts a crashed
    /// server, until the Cluster goes.
    async fn serve(&self, mut server: Server, stop: &mut watch::Receiver<bool>) {
        let mut tick = self.shared.tick.subscribe();
        let backup_lock = Arc::new(tokio::sync::Mutex::new(()));
        let mut started: std::collections::BTreeSet<String> = Default::default();
        let endpoint = (self.dir.clone(), server.port);
        loop {
            if let Some(err) = self.apply_archive_config() {
                tracing::debug!(namespace = self.ns, cluster = self.name, error = %err, "archiving misconfigured");
            }
            for ((ns, name), backup) in self.shared.backups.snapshot() {
                if ns != self.ns
                    || backup["spec"]["cluster"]["name"] != self.name.as_str()
                    || !backup["status"]["phase"].as_str().unwrap_or("").is_empty()
                    || started.contains(&name)
                {
                    continue;
                }
                started.insert(name.clone());
                let job = BackupJob {
                    shared: self.shared.clone(),
                    ns,
                    name,
                    cluster: self.name.clone(),
                    cluster_uid: self.uid.clone(),
                    dir: endpoint.0.clone(),
                    port: endpoint.1,
                    lock: backup_lock.clone(),
                };
                tokio::spawn(job.run());
            }
            let exited = tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                r = tick.changed() => if r.is_err() { break } else { None },
                code = server.wait() => Some(code),
            };
            if let Some(code) = exited {
                tracing::warn!(
                    namespace = self.ns,
                    cluster = self.name,
                    code,
                    "PostgreSQL exited"
                );
                self.shared
                    .patch_status::<Cluster>(
                        &self.ns,
                        &self.name,
                        json!({"phase": "Failing over", "readyInstances": 0}),
                    )
                    .await;
                let _ = stop.wait_for(|s| *s).await;
                break;
            }
        }
        server.stop(self.tc()).await;
    }
}

/// The `<cluster>-app` / `<cluster>-superuser` Secret as CloudNativePG writes it, except that the
/// host is the local server (127.0.0.1 and its port) so that a user can connect from this machine.
#[allow(clippy::too_many_arguments)]
pub fn app_secret(
    ns: &str,
    name: &str,
    cluster_uid: &str,
    cluster: &str,
    user: &str,
    password: &str,
    dbname: &str,
    port: u16,
) -> Value {
    use base64::Engine as _;
    let host = "127.0.0.1";
    let enc = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let pw_url: String = url_encode(password);
    let uri = format!("postgresql://{user}:{pw_url}@{host}:{port}/{dbname}");
    let jdbc = format!("jdbc:postgresql://{host}:{port}/{dbname}?password={pw_url}&user={user}");
    let user_type = if user == "postgres" {
        "superuser"
    } else {
        "app"
    };
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/basic-auth",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                "cnpg.io/userType": user_type,
                "cnpg.io/reload": "true",
                "app.kubernetes.io/managed-by": "cloudnative-pg",
                CLUSTER_LABEL: cluster,
            },
            "ownerReferences": [{
                "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": cluster,
                "uid": cluster_uid, "controller": true, "blockOwnerDeletion": true,
            }],
        },
        "data": {
            "username": enc(user),
            "user": enc(user),
            "password": enc(password),
            "dbname": enc(dbname),
            "host": enc(host),
            "port": enc(&port.to_string()),
            "pgpass": enc(&format!("{host}:{port}:{dbname}:{user}:{password}\n")),
            "uri": enc(&uri),
            "jdbc-uri": enc(&jdbc),
            "fqdn-uri": enc(&uri),
            "fqdn-jdbc-uri": enc(&jdbc),
        },
    })
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// One plugin Backup, from `started` to `completed`/`failed`.
struct BackupJob {
    shared: Arc<Shared>,
    ns: String,
    name: String,
    cluster: String,
    cluster_uid: String,
    dir: InstanceDir,
    port: u16,
    lock: Arc<tokio::sync::Mutex<()>>,
}

impl BackupJob {
    async fn set(&self, status: Value) {
        self.shared
            .patch_status::<Backup>(&self.ns, &self.name, status)
            .await;
    }

    async fn fail(&self, error: String) {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        tracing::info!(
            namespace = self.ns,
            backup = self.name,
            error,
            "backup failed"
        );
        self.set(json!({"phase": "failed", "error": error, "reconciliationTerminatedAt": now}))
            .await;
        self.shared
            .set_condition(
                &self.ns,
                &self.cluster,
                json!({"type": "LastBackupSucceeded", "status": "False",
                       "reason": "LastBackupFailed", "message": error}),
            )
            .await;
    }

    async fn run(self) {
        let Some(backup) = self.shared.backups.get(&self.ns, &self.name) else {
            return;
        };
        if backup["spec"]["method"] != "plugin" {
            return self
                .fail(format!(
                    "unsupported backup method {} (the simulator implements method plugin)",
                    backup["spec"]["method"]
                ))
                .await;
        }
        let plugin = backup["spec"]["pluginConfiguration"]["name"]
            .as_str()
            .unwrap_or("");
        if plugin != PLUGIN {
            return self
                .fail(format!("requested plugin is not available: {plugin}"))
                .await;
        }
        if self.lock.try_lock().is_err() {
            self.set(json!({"phase": "pending"})).await;
        }
        let _guard = self.lock.lock().await;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        self.set(json!({
            "phase": "started", "error": null, "method": "plugin",
            "instanceID": {"podName": format!("{}-1", self.cluster)},
            "reconciliationStartedAt": now,
        }))
        .await;
        self.shared
            .set_condition(
                &self.ns,
                &self.cluster,
                json!({"type": "LastBackupSucceeded", "status": "False",
                       "reason": "BackupStarted", "message": "New Backup starting up"}),
            )
            .await;
        // Hang: stay `started` until the control is removed (or the cluster goes).
        let mut tick = self.shared.tick.subscribe();
        loop {
            let cluster = self
                .shared
                .clusters
                .get(&self.ns, &self.cluster)
                .filter(|c| c["metadata"]["uid"] == self.cluster_uid.as_str());
            let Some(cluster) = cluster else { return };
            if !Controls::of(&cluster).hang {
                break;
            }
            if tick.changed().await.is_err() {
                return;
            }
        }
        let Some(cluster) = self.shared.clusters.get(&self.ns, &self.cluster) else {
            return;
        };
        if let Some(message) = Controls::of(&cluster).fail_backup {
            return self.fail(message).await;
        }
        let Some((store, server_name, _)) = plugin_entry(&cluster) else {
            return self
                .fail(format!(
                    "cluster {} has no {PLUGIN} plugin entry to take a backup with",
                    self.cluster
                ))
                .await;
        };
        let resolved = match resolve_object_store(
            &self.shared.object_stores,
            &self.shared.secrets,
            &self.ns,
            &store,
        ) {
            Ok(r) => r,
            Err(e) => return self.fail(e).await,
        };
        let target = match self.shared.target(
            &self.dir,
            &store,
            &resolved,
            &server_name,
            &resolved.data_args,
        ) {
            Ok(t) => t,
            Err(e) => return self.fail(e).await,
        };
        let barman_name = format!("backup-{}", chrono::Utc::now().format("%Y%m%d%H%M%S"));
        tracing::info!(
            namespace = self.ns,
            backup = self.name,
            server = server_name,
            "running barman-cloud-backup"
        );
        let server = ServerRef {
            dir: self.dir.clone(),
            port: self.port,
        };
        let info = match server
            .backup(&self.shared.options.toolchain, &target, &barman_name)
            .await
        {
            Ok(i) => i,
            Err(e) => {
                self.record_failed_time(&store, &server_name).await;
                return self.fail(e.to_string()).await;
            }
        };
        let ts = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map(|t| json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
                .unwrap_or(Value::Null)
        };
        // The plugin refreshes the recovery window before it reports the backup done.
        self.refresh_recovery_window(&store, &target).await;
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        self.set(json!({
            "phase": "completed",
            "error": null,
            "backupId": info.backup_id,
            "backupName": info.backup_name.clone().unwrap_or(barman_name.clone()),
            "serverName": server_name,
            "destinationPath": target.destination_path,
            "endpointURL": target.endpoint_url,
            "beginWal": info.begin_wal,
            "endWal": info.end_wal,
            "beginLSN": info.begin_xlog,
            "endLSN": info.end_xlog,
            "startedAt": ts(info.begun()),
            "stoppedAt": ts(info.ended()),
            "online": true,
            "reconciliationTerminatedAt": now,
            "pluginMetadata": {
                "timeline": info.timeline.unwrap_or(1).to_string(),
                "version": "150000",
                "name": barman_name,
                "displayName": barman_name,
                "clusterUID": self.cluster_uid,
                "pluginName": PLUGIN,
            },
        }))
        .await;
        tracing::info!(
            namespace = self.ns,
            backup = self.name,
            backup_id = info.backup_id,
            "backup completed"
        );
        self.shared
            .set_condition(
                &self.ns,
                &self.cluster,
                json!({"type": "LastBackupSucceeded", "status": "True",
                       "reason": "LastBackupSucceeded", "message": "Backup was successful"}),
            )
            .await;
    }

    async fn refresh_recovery_window(&self, store: &str, target: &BarmanTarget) {
        let list =
            match pg::list_backups(&self.shared.options.toolchain, &self.dir.root, target).await {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(error = %e, "reading the backup list failed");
                    return;
                }
            };
        let done: Vec<_> = list.iter().filter(|b| b.status == "DONE").collect();
        let first = done.iter().filter_map(|b| b.ended()).min();
        let last = done.iter().filter_map(|b| b.ended()).max();
        let fmt = |t: Option<chrono::DateTime<chrono::Utc>>| {
            t.map(|t| json!(t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)))
                .unwrap_or(Value::Null)
        };
        let window =
            json!({"firstRecoverabilityPoint": fmt(first), "lastSuccessfulBackupTime": fmt(last)});
        self.shared
            .patch_status::<ObjectStore>(
                &self.ns,
                store,
                json!({"serverRecoveryWindow": {target.server_name.clone(): window}}),
            )
            .await;
    }

    async fn record_failed_time(&self, store: &str, server_name: &str) {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        self.shared
            .patch_status::<ObjectStore>(
                &self.ns,
                store,
                json!({"serverRecoveryWindow": {server_name: {"lastFailedBackupTime": now}}}),
            )
            .await;
    }
}

/// The address of a running server, for commands that connect to it.
struct ServerRef {
    dir: InstanceDir,
    port: u16,
}

impl ServerRef {
    async fn backup(
        &self,
        tc: &Toolchain,
        target: &BarmanTarget,
        name: &str,
    ) -> Result<pg::BackupInfo, pg::Error> {
        pg::take_backup(tc, &self.dir, self.port, target, name).await
    }
}

/// Whether `path` lies under a directory PostgreSQL's unprivileged user can reach.
pub fn usable_root(preferred: &Path, run_as: Option<pg::RunAs>) -> PathBuf {
    let _ = std::fs::create_dir_all(preferred);
    if run_as.is_none() || pg::traversable_by_others(&preferred.join("x")) {
        preferred.to_path_buf()
    } else {
        let fallback =
            std::env::temp_dir().join(format!("operator-sims-pg-{}", std::process::id()));
        tracing::warn!(
            preferred = %preferred.display(),
            fallback = %fallback.display(),
            "the data directory is not reachable by the unprivileged PostgreSQL user; using a temporary one"
        );
        fallback
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache_with(objects: Vec<Value>) -> Cache {
        let c = Cache::default();
        for o in objects {
            c.insert(o);
        }
        c
    }

    #[test]
    fn plugin_entry_and_controls() {
        let cluster = json!({
            "metadata": {"name": "postgres-db", "annotations": {
                ANNOTATION_ARCHIVE_DELAY: "1.5s", ANNOTATION_HANG: "true"}},
            "spec": {"plugins": [{"name": PLUGIN, "isWALArchiver": true,
                                  "parameters": {"barmanObjectName": "postgres-db"}}]},
        });
        assert_eq!(
            plugin_entry(&cluster),
            Some(("postgres-db".into(), "postgres-db".into(), true))
        );
        assert_eq!(
            Controls::of(&cluster),
            Controls {
                archive_delay: Some(1.5),
                fail_backup: None,
                hang: true
            }
        );
        assert_eq!(plugin_entry(&json!({"spec": {}})), None);
    }

    #[test]
    fn recovery_source_follows_the_chart_shape() {
        let cluster = json!({
            "metadata": {"name": "postgres-copy"},
            "spec": {
                "bootstrap": {"recovery": {"source": "postgres-db",
                                           "recoveryTarget": {"targetTime": "2026-07-21T09:30:00Z"}}},
                "externalClusters": [{"name": "postgres-db", "plugin": {"name": PLUGIN,
                    "parameters": {"barmanObjectName": "postgres-copy-recovery",
                                   "serverName": "postgres-db"}}}],
            },
        });
        assert_eq!(
            recovery_source(&cluster),
            Ok(Some(RecoverySource {
                object_store: "postgres-copy-recovery".into(),
                server_name: "postgres-db".into(),
                target_time: Some("2026-07-21T09:30:00Z".into()),
            }))
        );
        let mut no_server = cluster.clone();
        no_server["spec"]["externalClusters"][0]["plugin"]["parameters"]
            .as_object_mut()
            .unwrap()
            .remove("serverName");
        assert_eq!(
            recovery_source(&no_server).unwrap().unwrap().server_name,
            "postgres-copy"
        );
        let mut missing = cluster.clone();
        missing["spec"]["externalClusters"] = json!([]);
        assert_eq!(
            recovery_source(&missing),
            Err("missing external cluster: postgres-db".into())
        );
        assert_eq!(recovery_source(&json!({"spec": {}})), Ok(None));
    }

    #[test]
    fn object_store_resolution_reads_the_named_secret_keys() {
        use base64::Engine as _;
        let enc = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        let stores = cache_with(vec![json!({
            "metadata": {"namespace": "t", "name": "os"},
            "spec": {
                "configuration": {
                    "destinationPath": "s3://b/t/db/", "endpointURL": "https://127.0.0.1:9",
                    "s3Credentials": {
                        "accessKeyId": {"name": "creds", "key": "AWS_ACCESS_KEY_ID"},
                        "secretAccessKey": {"name": "creds", "key": "AWS_SECRET_ACCESS_KEY"}},
                    "wal": {"compression": "gzip"}, "data": {"compression": "bzip2", "jobs": 2},
                },
                "instanceSidecarConfiguration": {"env": [
                    {"name": "AWS_REQUEST_CHECKSUM_CALCULATION", "value": "when_required"}]},
            },
        })]);
        let secrets = cache_with(vec![json!({
            "metadata": {"namespace": "t", "name": "creds"},
            "data": {"AWS_ACCESS_KEY_ID": enc("AK"), "AWS_SECRET_ACCESS_KEY": enc("SK")},
        })]);
        let r = resolve_object_store(&stores, &secrets, "t", "os").unwrap();
        assert_eq!(r.destination_path, "s3://b/t/db/");
        assert_eq!(r.endpoint_url.as_deref(), Some("https://127.0.0.1:9"));
        assert_eq!(r.wal_args, ["--gzip"]);
        assert_eq!(r.data_args, ["--bzip2", "--jobs", "2"]);
        assert_eq!(
            r.env.keys().map(String::as_str).collect::<Vec<_>>(),
            [
                "AWS_ACCESS_KEY_ID",
                "AWS_REQUEST_CHECKSUM_CALCULATION",
                "AWS_SECRET_ACCESS_KEY"
            ]
        );
        assert!(!format!("{r:?}").contains("SK"));
        assert_eq!(
            resolve_object_store(&stores, &Cache::default(), "t", "os").unwrap_err(),
            "while getting secret creds: secrets \"creds\" not found"
        );
        assert_eq!(
            resolve_object_store(&stores, &secrets, "t", "other").unwrap_err(),
            "ObjectStore t/other not found"
        );
    }

    #[test]
    fn app_secret_has_cnpg_keys_pointing_at_the_local_server() {
        let s = app_secret(
            "t",
            "postgres-db-app",
            "uid-1",
            "postgres-db",
            "app",
            "p@ss",
            "app",
            5433,
        );
        let keys: Vec<&str> = s["data"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "dbname",
                "fqdn-jdbc-uri",
                "fqdn-uri",
                "host",
                "jdbc-uri",
                "password",
                "pgpass",
                "port",
                "uri",
                "user",
                "username"
            ]
        );
        use base64::Engine as _;
        let dec = |k: &str| {
            String::from_utf8(
                base64::engine::general_purpose::STANDARD
                    .decode(s["data"][k].as_str().unwrap())
                    .unwrap(),
            )
            .unwrap()
        };
        assert_eq!(dec("uri"), "postgresql://app:p%40ss@127.0.0.1:5433/app");
        assert_eq!(s["type"], "kubernetes.io/basic-auth");
        assert_eq!(s["metadata"]["labels"]["cnpg.io/userType"], "app");
    }
}
