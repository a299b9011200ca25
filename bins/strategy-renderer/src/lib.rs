//! The `strategy-renderer` daemon: keeps the platform default backup objects equal to what
//! `strategy_render::render` computes from the configuration and the live bucket state.
//!
//! ```text
//!  watches (event-driven, no polling)                 one evaluation loop (leader only writes)
//!  ConfigMap <cfg-ns>/<cfg-name> (values.yaml) ──┐
//!  BucketClaim <ns>/bucket-<bucketName> ─────────┤     parse_config ─► render ─► DesiredObjects
//!  Secret <ns>/<systemSecretName> (endpoint) ────┼──►  for each desired: SSA apply unless already equal
//!  Bucket, BackupClass, 7 strategy kinds, BSL ───┘     prune objects with our managed-by label
//!          (the rendered objects: drift/deletes)        BackupClass cozy-default status Ready + gauge
//! ```
//!
//! Invariants:
//! * Nothing is evaluated before every watch has delivered its initial list, so a restart never
//!   mistakes "not listed yet" for "absent" (no pruning or re-creation after kill -9).
//! * Writes are server-side applies under [`FIELD_MANAGER`] with force; an object already holding
//!   every rendered value is not written at all.
//! * Only objects labelled `app.kubernetes.io/managed-by=strategy-renderer` are ever deleted, and a
//!   `Bucket` never is (it holds the backups); sibling BackupClasses and admin strategies are
//!   never touched.
//! * An invalid configuration never changes the cluster: the last good one stays in force, and the
//!   error (naming the key) goes to the log, a Warning Event on the ConfigMap and `/ready`.
//! * The Secret watch keeps only the `endpoint` value; no credential is held, logged or reported.

mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::platform::{BackupStorageValues, VeleroValues};
use api::{Condition, ConditionStatus};
use clap::Parser;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use strategy_render::{DesiredObjects, MANAGED_BY_LABEL, MANAGED_BY_VALUE, RenderConfig};

use watch::{Shared, Target};

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "strategy-renderer";
/// Component name (logs, metrics prefix, Event reporter).
pub const COMPONENT: &str = "strategy-renderer";

/// Metric names.
pub mod metric_names {
    /// Counter: evaluations that completed (inputs read, objects compared and written as needed).
    pub const RENDERS: &str = "cozy_backups_strategy_renderer_renders_total";
    /// Counter `{kind}`: server-side applies issued.
    pub const APPLIES: &str = "cozy_backups_strategy_renderer_applies_total";
    /// Counter `{kind}`: applies that reverted a change made by someone else.
    pub const DRIFT_REVERTS: &str = "cozy_backups_strategy_renderer_drift_reverts_total";
    /// Counter `{kind}`: objects deleted because they are no longer desired.
    pub const PRUNES: &str = "cozy_backups_strategy_renderer_prunes_total";
    /// Gauge: 1 when the current ConfigMap parses and validates, else 0.
    pub const CONFIG_VALID: &str = "cozy_backups_strategy_renderer_config_valid";
    /// Counter: rejected configurations (counted once per distinct error).
    pub const CONFIG_ERRORS: &str = "cozy_backups_strategy_renderer_config_errors_total";
}

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

/// A kind the renderer writes: its API resource, whether it is namespaced, and a static metric label.
#[derive(Clone, Debug)]
struct OwnedKind {
    label: &'static str,
    resource: ApiResource,
    namespaced: bool,
}

fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

fn owned_kinds() -> Vec<OwnedKind> {
    use api::strategy as s;
    let k = |label, resource, namespaced| OwnedKind {
        label,
        resource,
        namespaced,
    };
    vec![
        k("Bucket", erase::<api::thirdparty::apps::Bucket>(), true),
        k("BackupClass", erase::<api::backups::BackupClass>(), false),
        k("CNPG", erase::<s::CNPG>(), false),
        k("Etcd", erase::<s::Etcd>(), false),
        k("MariaDB", erase::<s::MariaDB>(), false),
        k("Altinity", erase::<s::Altinity>(), false),
        k("MongoDB", erase::<s::MongoDB>(), false),
        k("FoundationDB", erase::<s::FoundationDB>(), false),
        k("Velero", erase::<s::Velero>(), false),
        k(
            "BackupStorageLocation",
            erase::<api::thirdparty::velero::BackupStorageLocation>(),
            true,
        ),
    ]
}

/// Slot indices of the input watches; owned kinds follow at `OWNED_BASE + i`.
const SLOT_CONFIG: usize = 0;
const SLOT_CLAIM: usize = 1;
const SLOT_SECRET: usize = 2;
const OWNED_BASE: usize = 3;

/// Errors of one evaluation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An API call failed.
    #[error("{action} {object}: {source}")]
    Api {
        /// What was attempted (`apply`, `delete`, `apply status`).
        action: &'static str,
        /// The object.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl runtime::ReconcileError for Error {
    fn kind(&self) -> &'static str {
        match self {
            Error::Api { .. } => "api",
        }
    }
    fn class(&self) -> runtime::ErrorClass {
        runtime::ErrorClass::Transient
    }
}

/// Everything an evaluation needs.
struct Context {
    /// Kubernetes client.
    client: kube::Client,
    /// Flag/env defaults the ConfigMap is laid over.
    defaults: RenderConfig,
    /// The ConfigMap's coordinates (for Events).
    config_ref: (String, String),
    /// Watched state, one slot per watch.
    shared: Arc<Shared>,
    /// Retargets the BucketClaim watch when the configuration moves it.
    claim_target: tokio::sync::watch::Sender<Target>,
    /// Retargets the Secret watch.
    secret_target: tokio::sync::watch::Sender<Target>,
    /// The writable kinds, parallel to the owned slots.
    kinds: Vec<OwnedKind>,
    /// `/ready` check for the configuration.
    config_ready: runtime::ReadyHandle,
    /// Publishes Warning Events about a rejected configuration.
    recorder: Recorder,
    /// Reconcile runs/failures/duration.
    metrics: runtime::ControllerMetrics,
    /// Leadership: only the leader writes.
    leader: lease::LeaderElector,
    /// Mutable memory between evaluations (never the source of truth; all rebuilt from watches).
    memory: Mutex<Memory>,
}

#[derive(Default)]
struct Memory {
    /// The last configuration that parsed and validated.
    last_good: Option<RenderConfig>,
    /// The last configuration error reported (to report each distinct error once).
    last_error: Option<String>,
    /// What we last applied per object, to tell drift (someone else changed it) from a new render.
    last_applied: BTreeMap<(usize, Option<String>, String), Value>,
}

/// Runs the daemon until SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let defaults = args.render.defaults();
    let daemon = runtime::Daemon::start(
        COMPONENT,
        &args.client,
        &args.admin,
        &args.log,
        &serde_json::json!({
            "configMap": format!("{}/{}", args.render.config_namespace, args.render.config_name),
            "defaults": &defaults,
            "leaseEndpoint": args.lease.lease_endpoint,
        }),
    )
    .await?;
    let (leader, _work) = daemon.leases(&args.lease, COMPONENT).await?;
    describe_metrics();
    let kinds = owned_kinds();
    let shared = Arc::new(Shared::new(OWNED_BASE + kinds.len()));
    let client = daemon.client.clone();

    // The input watches. The BucketClaim and Secret targets follow the configuration; they start
    // from the defaults and are retargeted by the first evaluation if the ConfigMap says otherwise.
    let bs = &defaults.backup_storage;
    let (claim_tx, claim_rx) = tokio::sync::watch::channel(claim_target(&defaults));
    let (secret_tx, secret_rx) =
        tokio::sync::watch::channel(Target::named(&bs.namespace, &bs.system_secret_name));
    let (_config_tx, config_rx) = tokio::sync::watch::channel(Target::named(
        &args.render.config_namespace,
        &args.render.config_name,
    ));
    let mut tasks = tokio::task::JoinSet::new();
    let spawn_watch = |tasks: &mut tokio::task::JoinSet<()>,
                       slot: usize,
                       kind: &'static str,
                       resource: ApiResource,
                       target: tokio::sync::watch::Receiver<Target>,
                       sanitize: fn(&mut Value)| {
        let ready = daemon.readiness.register(&format!("watch {kind}"));
        tasks.spawn(watch::run(
            client.clone(),
            resource,
            target,
            shared.clone(),
            slot,
            kind,
            ready,
            sanitize,
        ));
    };
    spawn_watch(
        &mut tasks,
        SLOT_CONFIG,
        "ConfigMap",
        erase::<k8s_openapi::api::core::v1::ConfigMap>(),
        config_rx,
        keep_config_key,
    );
    spawn_watch(
        &mut tasks,
        SLOT_CLAIM,
        "BucketClaim",
        erase::<api::thirdparty::cosi::BucketClaim>(),
        claim_rx,
        |_| {},
    );
    spawn_watch(
        &mut tasks,
        SLOT_SECRET,
        "Secret",
        erase::<k8s_openapi::api::core::v1::Secret>(),
        secret_rx,
        keep_endpoint_only,
    );
    // Constant targets: the senders live as long as the daemon.
    let mut constant_targets = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        let (tx, rx) = tokio::sync::watch::channel(Target::all());
        constant_targets.push(tx);
        spawn_watch(
            &mut tasks,
            OWNED_BASE + i,
            k.label,
            k.resource.clone(),
            rx,
            |_| {},
        );
    }
    let config_ready = daemon.readiness.register("configuration");
    let ctx = Arc::new(Context {
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: COMPONENT.into(),
                instance: Some(args.lease.identity()),
            },
        ),
        client,
        defaults,
        config_ref: (
            args.render.config_namespace.clone(),
            args.render.config_name.clone(),
        ),
        shared: shared.clone(),
        claim_target: claim_tx,
        secret_target: secret_tx,
        kinds,
        config_ready,
        metrics: runtime::ControllerMetrics::new(COMPONENT, "defaults"),
        leader,
        memory: Mutex::new(Memory::default()),
    });
    let shutdown = daemon.shutdown.clone();
    daemon
        .run(async move {
            tokio::select! {
                _ = evaluation_loop(ctx) => {}
                _ = shutdown.signaled() => {}
            }
            tasks.abort_all();
            drop(constant_targets);
            Ok(())
        })
        .await
}

fn describe_metrics() {
    use metric_names::*;
    metrics::describe_counter!(RENDERS, "Completed evaluations of the default objects.");
    metrics::describe_counter!(APPLIES, "Server-side applies of default objects, by kind.");
    metrics::describe_counter!(
        DRIFT_REVERTS,
        "Applies that reverted an outside change of a default object, by kind."
    );
    metrics::describe_counter!(
        PRUNES,
        "Default objects deleted as no longer desired, by kind."
    );
    metrics::describe_gauge!(CONFIG_VALID, "1 when the configuration ConfigMap is valid.");
    metrics::describe_counter!(CONFIG_ERRORS, "Rejected configurations.");
    metrics::describe_gauge!(
        api::contract::metrics::DEFAULT_OBJECTS_MISSING,
        "Default objects cozy-default routes to that do not exist (upstream-compatible)."
    );
    metrics::counter!(RENDERS).absolute(0);
}

fn claim_target(c: &RenderConfig) -> Target {
    let bs = &c.backup_storage;
    if bs.provision_bucket {
        Target::named(
            &bs.namespace,
            &backup_storage::bucket::bucket_claim_name(&bs.bucket_name),
        )
    } else {
        // External S3: no BucketClaim is consulted; watch nothing.
        Target::none()
    }
}

/// The ConfigMap slot keeps only identity and `data.values.yaml`.
fn keep_config_key(v: &mut Value) {
    let values = v["data"][strategy_render::config::VALUES_KEY].clone();
    v["data"] = serde_json::json!({ strategy_render::config::VALUES_KEY: values });
    if let Some(o) = v.get_mut("binaryData") {
        *o = Value::Null;
    }
}

/// The Secret slot keeps only identity and `data.endpoint`: credentials never enter our memory
/// beyond the watch decoder.
fn keep_endpoint_only(v: &mut Value) {
    let endpoint = v["data"]["endpoint"].clone();
    v["data"] = serde_json::json!({ "endpoint": endpoint });
    if let Some(o) = v.as_object_mut() {
        o.remove("stringData");
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            // last-applied annotations may carry the whole Secret.
            meta.remove("annotations");
            meta.remove("managedFields");
        }
    }
}

async fn evaluation_loop(ctx: Arc<Context>) {
    let mut leadership = Some(ctx.leader.subscribe());
    let backoff = runtime::Backoff::<api::backups::BackupClass>::new(
        Duration::from_millis(250),
        Duration::from_secs(60),
    );
    let root =
        ObjectRef::<api::backups::BackupClass>::new(api::contract::names::DEFAULT_BACKUP_CLASS);
    let mut retry: Option<Duration> = None;
    loop {
        match retry.take() {
            Some(delay) => {
                tokio::select! {
                    _ = ctx.shared.notified() => {}
                    _ = tokio::time::sleep(delay) => {}
                }
            }
            None => {
                tokio::select! {
                    _ = ctx.shared.notified() => {}
                    r = async { match leadership.as_mut() { Some(l) => l.changed().await, None => std::future::pending().await } } => {
                        if r.is_err() { leadership = None; }
                    }
                }
            }
        }
        if !ctx.shared.all_synced() {
            continue;
        }
        let timer = ctx.metrics.start();
        match evaluate(&ctx).await {
            Ok(()) => {
                timer.finish(None);
                backoff.reset(&root);
            }
            Err(e) => {
                timer.finish(Some(runtime::ReconcileError::kind(&e)));
                tracing::warn!(error = %e, "evaluation failed; retrying");
                retry = Some(backoff.next_delay(root.clone()));
            }
        }
    }
}

/// One evaluation: configuration → render → apply/prune → status.
async fn evaluate(ctx: &Context) -> Result<(), Error> {
    let Some(config) = current_config(ctx).await else {
        return Ok(());
    };
    // Follow the configuration with the scoped watches; a retarget means their state is stale
    // until they list again (their InitDone triggers the next evaluation).
    let claim = claim_target(&config);
    let secret = Target::named(
        &config.backup_storage.namespace,
        &config.backup_storage.system_secret_name,
    );
    let mut moved = false;
    for (tx, slot, target) in [
        (&ctx.claim_target, SLOT_CLAIM, claim),
        (&ctx.secret_target, SLOT_SECRET, secret),
    ] {
        if *tx.borrow() != target {
            ctx.shared.unsync(slot);
            tx.send_replace(target);
            moved = true;
        }
    }
    if moved {
        return Ok(());
    }
    let (claim_bucket, secret_endpoint) = ctx.shared.read(|slots| {
        let claim_bucket = slots[SLOT_CLAIM]
            .objects
            .values()
            .next()
            .map(|c| c["status"]["bucketName"].as_str().unwrap_or("").to_owned());
        let endpoint = slots[SLOT_SECRET]
            .objects
            .values()
            .next()
            .and_then(|s| s["data"]["endpoint"].as_str().map(decode_base64));
        (claim_bucket, endpoint)
    });
    let desired =
        strategy_render::render(&config, claim_bucket.as_deref(), secret_endpoint.as_deref());
    if !ctx.leader.current().is_leading() {
        return Ok(());
    }
    // One failing object (e.g. a kind whose CRD is missing) must not hold back the others or the
    // status that reports it; the first error is returned afterwards so the loop retries.
    let applied = apply_desired(ctx, &desired).await;
    let pruned = prune(ctx, &desired).await;
    let reported = report_status(ctx, &desired, &config).await;
    applied?;
    pruned?;
    reported?;
    metrics::counter!(metric_names::RENDERS).increment(1);
    Ok(())
}

/// The configuration in force: the ConfigMap laid over the defaults when valid, else the last good
/// one (reporting the error once); `None` when no good configuration has been seen yet.
async fn current_config(ctx: &Context) -> Option<RenderConfig> {
    let (values, cm) = ctx.shared.read(|slots| {
        let cm = slots[SLOT_CONFIG].objects.values().next().cloned();
        let values = cm.as_ref().and_then(|c| {
            c["data"][strategy_render::config::VALUES_KEY]
                .as_str()
                .map(str::to_owned)
        });
        (values, cm)
    });
    match strategy_render::parse_config(&ctx.defaults, values.as_deref()) {
        Ok(config) => {
            metrics::gauge!(metric_names::CONFIG_VALID).set(1.0);
            ctx.config_ready.set_ready();
            let mut mem = lock(&ctx.memory);
            if mem.last_error.take().is_some() {
                tracing::info!("configuration is valid again");
            }
            if mem.last_good.as_ref() != Some(&config) {
                tracing::info!(config = %serde_json::to_value(&config).unwrap_or_default(), "configuration in force");
            }
            mem.last_good = Some(config.clone());
            Some(config)
        }
        Err(err) => {
            let message = err.to_string();
            metrics::gauge!(metric_names::CONFIG_VALID).set(0.0);
            let (fresh, last_good) = {
                let mut mem = lock(&ctx.memory);
                let fresh = mem.last_error.as_deref() != Some(message.as_str());
                mem.last_error = Some(message.clone());
                (fresh, mem.last_good.clone())
            };
            let (ns, name) = &ctx.config_ref;
            match &last_good {
                Some(_) => ctx.config_ready.set_ready_with(&format!(
                    "ConfigMap {ns}/{name} rejected, keeping the last good configuration: {message}"
                )),
                None => ctx.config_ready.set_not_ready(&format!(
                    "ConfigMap {ns}/{name} rejected and no good configuration seen yet: {message}"
                )),
            }
            if fresh {
                metrics::counter!(metric_names::CONFIG_ERRORS).increment(1);
                tracing::warn!(configmap = %format!("{ns}/{name}"), error = %message, "invalid configuration; keeping the last good render");
                if let Some(cm) = &cm
                    && ctx.leader.current().is_leading()
                {
                    let reference = ObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("ConfigMap".into()),
                        namespace: Some(ns.clone()),
                        name: Some(name.clone()),
                        uid: cm["metadata"]["uid"].as_str().map(str::to_owned),
                        ..Default::default()
                    };
                    let event = Event {
                        type_: EventType::Warning,
                        reason: "InvalidConfiguration".into(),
                        note: Some(truncate(&message, 1000)),
                        action: "Render".into(),
                        secondary: None,
                    };
                    if let Err(e) = ctx.recorder.publish(&event, &reference).await {
                        tracing::warn!(error = %e, "could not publish the configuration Event");
                    }
                }
            }
            last_good
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn decode_base64(s: &str) -> Vec<u8> {
    // Secret data is standard base64; a value that does not decode is treated as absent.
    base64_decode(s).unwrap_or_default()
}

fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut buf = 0u32;
    let mut bits = 0;
    for b in s.bytes() {
        let v = match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' => break,
            b'\n' | b'\r' => continue,
            _ => return None,
        };
        buf = (buf << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buf >> bits) as u8);
            buf &= (1 << bits) - 1;
        }
    }
    Some(out)
}

fn slot_of(ctx: &Context, kind: &str) -> usize {
    OWNED_BASE
        + ctx
            .kinds
            .iter()
            .position(|k| k.label == kind)
            .expect("render() produces only owned kinds")
}

fn api_for(ctx: &Context, slot: usize, namespace: Option<&str>) -> Api<DynamicObject> {
    let k = &ctx.kinds[slot - OWNED_BASE];
    match (k.namespaced, namespace) {
        (true, Some(ns)) => Api::namespaced_with(ctx.client.clone(), ns, &k.resource),
        _ => Api::all_with(ctx.client.clone(), &k.resource),
    }
}

async fn apply_desired(ctx: &Context, desired: &DesiredObjects) -> Result<(), Error> {
    let mut first_error = None;
    for obj in &desired.objects {
        if let Err(e) = apply_one(ctx, obj).await {
            tracing::warn!(error = %e, "apply failed");
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

async fn apply_one(ctx: &Context, obj: &Value) -> Result<(), Error> {
    let key = strategy_render::ObjectKey::of(obj);
    let slot = slot_of(ctx, &key.kind);
    let label = ctx.kinds[slot - OWNED_BASE].label;
    let observed = ctx.shared.read(|slots| {
        slots[slot]
            .objects
            .get(&(key.namespace.clone(), key.name.clone()))
            .cloned()
    });
    if observed
        .as_ref()
        .is_some_and(|o| strategy_render::is_subset(obj, o))
    {
        return Ok(());
    }
    let mem_key = (slot, key.namespace.clone(), key.name.clone());
    let drift = observed.is_some() && lock(&ctx.memory).last_applied.get(&mem_key) == Some(obj);
    let api = api_for(ctx, slot, key.namespace.as_deref());
    let applied = api
        .patch(
            &key.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(obj),
        )
        .await
        .map_err(|source| Error::Api {
            action: "apply",
            object: key.to_string(),
            source,
        })?;
    metrics::counter!(metric_names::APPLIES, "kind" => label).increment(1);
    if drift {
        metrics::counter!(metric_names::DRIFT_REVERTS, "kind" => label).increment(1);
        tracing::info!(object = %key, "reverted an outside change");
    } else {
        tracing::info!(object = %key, created = observed.is_none(), "applied");
    }
    lock(&ctx.memory).last_applied.insert(mem_key, obj.clone());
    ctx.shared
        .upsert(slot, serde_json::to_value(applied).unwrap_or_default());
    Ok(())
}

async fn prune(ctx: &Context, desired: &DesiredObjects) -> Result<(), Error> {
    let wanted: BTreeSet<(String, Option<String>, String)> = desired
        .objects
        .iter()
        .map(|o| {
            let k = strategy_render::ObjectKey::of(o);
            (k.kind, k.namespace, k.name)
        })
        .collect();
    for (i, kind) in ctx.kinds.iter().enumerate() {
        let slot = OWNED_BASE + i;
        let ours: Vec<(Option<String>, String, Option<String>)> = ctx.shared.read(|slots| {
            slots[slot]
                .objects
                .iter()
                .filter(|(_, o)| o["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY_VALUE)
                .map(|((ns, name), o)| {
                    (
                        ns.clone(),
                        name.clone(),
                        o["metadata"]["uid"].as_str().map(str::to_owned),
                    )
                })
                .collect()
        });
        for (ns, name, uid) in ours {
            if wanted.contains(&(kind.label.to_owned(), ns.clone(), name.clone())) {
                continue;
            }
            if kind.label == "Bucket" {
                // A Bucket holds every backup; deleting it because the configuration moved would
                // destroy data. We stop managing it and say so.
                tracing::debug!(namespace = ?ns, name, "Bucket no longer desired; left in place");
                continue;
            }
            let api = api_for(ctx, slot, ns.as_deref());
            let params = DeleteParams {
                preconditions: uid.map(|uid| kube::api::Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&name, &params).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(source) => {
                    return Err(Error::Api {
                        action: "delete",
                        object: format!("{}/{}", kind.label, name),
                        source,
                    });
                }
            }
            metrics::counter!(metric_names::PRUNES, "kind" => kind.label).increment(1);
            tracing::info!(kind = kind.label, namespace = ?ns, name, "deleted: no longer desired");
            lock(&ctx.memory)
                .last_applied
                .remove(&(slot, ns.clone(), name.clone()));
            ctx.shared.remove(slot, &(ns, name));
        }
    }
    Ok(())
}

/// Condition reason when every required object exists.
pub const REASON_PRESENT: &str = "DefaultObjectsPresent";
/// Condition reason when some are missing.
pub const REASON_MISSING: &str = "DefaultObjectsMissing";

async fn report_status(
    ctx: &Context,
    desired: &DesiredObjects,
    config: &RenderConfig,
) -> Result<(), Error> {
    let class_name = api::contract::names::DEFAULT_BACKUP_CLASS;
    let class_slot = slot_of(ctx, "BackupClass");
    let (missing, observed_ready) = ctx.shared.read(|slots| {
        let missing: Vec<String> = desired
            .required
            .iter()
            .filter(|r| {
                let slot = OWNED_BASE
                    + ctx
                        .kinds
                        .iter()
                        .position(|k| k.label == r.kind)
                        .expect("required kinds are owned kinds");
                !slots[slot]
                    .objects
                    .contains_key(&(r.namespace.clone(), r.name.clone()))
            })
            .map(|r| r.display())
            .collect();
        let observed: Option<Condition> = slots[class_slot]
            .objects
            .get(&(None, class_name.to_owned()))
            .and_then(|o| o["status"]["conditions"].as_array().cloned())
            .and_then(|conds| {
                conds
                    .into_iter()
                    .filter_map(|c| serde_json::from_value::<Condition>(c).ok())
                    .find(|c| c.type_ == api::contract::condition_types::READY)
            });
        (missing, observed)
    });
    metrics::gauge!(api::contract::metrics::DEFAULT_OBJECTS_MISSING, "backupclass" => class_name)
        .set(missing.len() as f64);
    let (status, reason, message) = if missing.is_empty() {
        (
            ConditionStatus::True,
            REASON_PRESENT,
            "every object cozy-default routes to exists".to_owned(),
        )
    } else {
        let mut message = format!("missing: {}", missing.join(", "));
        if desired.bucket_name.is_none() {
            let bs = &config.backup_storage;
            message.push_str(&format!(
                "; waiting for BucketClaim {}/{} to report status.bucketName",
                bs.namespace,
                backup_storage::bucket::bucket_claim_name(&bs.bucket_name)
            ));
        }
        (ConditionStatus::False, REASON_MISSING, message)
    };
    let unchanged = observed_ready
        .as_ref()
        .is_some_and(|c| c.status == status && c.reason == reason && c.message == message);
    if unchanged {
        return Ok(());
    }
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let transition = match &observed_ready {
        Some(c) if c.status == status => c.last_transition_time.clone(),
        _ => now,
    };
    let condition = Condition::new(
        api::contract::condition_types::READY,
        status,
        reason,
        message,
        transition,
    );
    let api: Api<api::backups::BackupClass> = Api::all(ctx.client.clone());
    let updated =
        runtime::conditions::apply_conditions(&api, class_name, FIELD_MANAGER, &[condition])
            .await
            .map_err(|source| Error::Api {
                action: "apply status",
                object: format!("BackupClass/{class_name}"),
                source,
            })?;
    ctx.shared.upsert(
        class_slot,
        serde_json::to_value(updated).unwrap_or_default(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent_and_default_to_upstream_values() {
        Args::command().debug_assert();
        let args = Args::parse_from(["strategy-renderer"]);
        assert_eq!(args.render.defaults(), RenderConfig::default());
        let args = Args::parse_from([
            "strategy-renderer",
            "--velero-bsl-enabled=false",
            "--system-namespaces=a,b",
            "--bind-foundationdb",
        ]);
        let d = args.render.defaults();
        assert!(!d.velero.bsl_enabled && d.bind_foundationdb);
        assert_eq!(d.backup_storage.system_namespaces, ["a", "b"]);
    }

    #[test]
    fn secret_slot_keeps_only_the_endpoint() {
        let mut s = serde_json::json!({
            "metadata": {"name": "x", "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{secret}"}},
            "data": {"accessKey": "QUs=", "secretKey": "U0s=", "endpoint": "czMuZXhhbXBsZS5jb20="},
            "stringData": {"secretKey": "SK"},
        });
        keep_endpoint_only(&mut s);
        assert_eq!(
            s,
            serde_json::json!({"metadata": {"name": "x"}, "data": {"endpoint": "czMuZXhhbXBsZS5jb20="}})
        );
        assert_eq!(decode_base64("czMuZXhhbXBsZS5jb20="), b"s3.example.com");
        assert_eq!(decode_base64("czMuZXhhbXBsZS5jb20K"), b"s3.example.com\n");
        assert_eq!(decode_base64(""), b"");
    }
}
