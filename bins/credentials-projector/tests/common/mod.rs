//! Shared fixtures of the end-to-end tests: the projector spawned against the emulator, the source
//! Secret, a BackupClass routing Postgres to CNPG, jobs, polling with deadlines, /metrics and a leak
//! check.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::time::Duration;

use api::backups::{BackupClass, BackupJob, RestoreJob};
use api::{Condition, TypedLocalObjectReference};
use harness::{DaemonSpec, Harness};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

pub const NAME: &str = "credentials-projector";
pub const SOURCE: &str = "bucket-cozy-backups-system-credentials";
pub const TARGET: &str = "cozy-backups-creds";
pub const STRATEGY: &str = "strategy.backups.cozystack.io";
pub const DEADLINE: Duration = harness::DEADLINE;

/// The projector's configuration in a test.
pub struct Setup {
    pub source_ns: String,
    pub endpoint: String,
    pub region: String,
    pub force_path_style: String,
    pub system_namespaces: String,
}

/// Spawns the projector and waits for `/ready`.
pub async fn spawn(h: &mut Harness, s: &Setup) {
    let bin = std::path::PathBuf::from(env!("CARGO_BIN_EXE_credentials-projector"));
    let spec = DaemonSpec::new(NAME, bin)
        .env("BACKUP_STORAGE_SECRET_NAMESPACE", &s.source_ns)
        .env("BACKUP_STORAGE_SECRET_NAME", SOURCE)
        .env("BACKUP_STORAGE_ENDPOINT", &s.endpoint)
        .env("BACKUP_STORAGE_REGION", &s.region)
        .env("BACKUP_STORAGE_FORCE_PATH_STYLE", &s.force_path_style)
        .env("BACKUP_STORAGE_SYSTEM_NAMESPACES", &s.system_namespaces)
        // Rounds in tests are driven by leadership and source changes only, so counts are exact.
        .env("SYSTEM_TICK", "1h")
        .env("LEASE_ENDPOINT", "none");
    h.spawn_ready(spec, DEADLINE)
        .await
        .expect("projector ready");
}

fn bytes(pairs: &[(&str, &str)]) -> BTreeMap<String, ByteString> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
        .collect()
}

/// Creates or replaces the source Secret with exactly `data`.
pub async fn set_source(h: &Harness, ns: &str, data: &[(&str, &str)]) {
    let api: Api<Secret> = Api::namespaced(h.client(), ns);
    let mut secret = Secret {
        metadata: ObjectMeta {
            name: Some(SOURCE.into()),
            labels: Some(BTreeMap::from([(
                "apps.cozystack.io/user-secret".into(),
                "true".into(),
            )])),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(bytes(data)),
        ..Default::default()
    };
    match api.get_opt(SOURCE).await.unwrap() {
        None => {
            api.create(&PostParams::default(), &secret).await.unwrap();
        }
        Some(existing) => {
            secret.metadata.resource_version = existing.metadata.resource_version;
            api.replace(SOURCE, &PostParams::default(), &secret)
                .await
                .unwrap();
        }
    }
}

/// Creates a Secret named like the target in `ns` (owned or not).
pub async fn put_target(h: &Harness, ns: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) {
    let api: Api<Secret> = Api::namespaced(h.client(), ns);
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(TARGET.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).into(), (*v).into()))
                    .collect(),
            ),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(bytes(data)),
        ..Default::default()
    };
    api.create(&PostParams::default(), &secret).await.unwrap();
}

/// The target in `ns`, if any.
pub async fn target(h: &Harness, ns: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(h.client(), ns)
        .get_opt(TARGET)
        .await
        .unwrap()
}

/// The target's data as strings.
pub fn data_of(secret: &Secret) -> BTreeMap<String, String> {
    secret
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect()
}

/// Expected data from pairs.
pub fn expect(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The ten keys for these credentials (upstream formats).
pub fn ten_keys(
    ak: &str,
    sk: &str,
    endpoint: &str,
    bucket: Option<&str>,
    region: Option<&str>,
    force: Option<&str>,
) -> BTreeMap<String, String> {
    let mut m = expect(&[
        ("AWS_ACCESS_KEY_ID", ak),
        ("AWS_SECRET_ACCESS_KEY", sk),
        ("accessKey", ak),
        ("secretKey", sk),
        ("endpoint", endpoint),
    ]);
    m.insert(
        "cloud".into(),
        format!("[default]\naws_access_key_id={ak}\naws_secret_access_key={sk}\n"),
    );
    m.insert(
        "blob_credentials.json".into(),
        format!(r#"{{"accounts":{{"{endpoint}":{{"api_key":"{ak}","secret":"{sk}"}}}}}}"#),
    );
    for (k, v) in [
        ("bucketName", bucket),
        ("region", region),
        ("forcePathStyle", force),
    ] {
        if let Some(v) = v {
            m.insert(k.into(), v.into());
        }
    }
    m
}

/// Creates the BackupClass `name` routing Postgres → CNPG `cozy-default-cnpg` plus `extra` routes
/// (application kind, strategy group, strategy kind).
pub async fn backup_class(h: &Harness, name: &str, extra: &[(&str, &str, &str)]) {
    let mut strategies = vec![json!({
        "strategyRef": {"apiGroup": STRATEGY, "kind": "CNPG", "name": "cozy-default-cnpg"},
        "application": {"kind": "Postgres"},
    })];
    for (app, group, kind) in extra {
        strategies.push(json!({
            "strategyRef": {"apiGroup": group, "kind": kind, "name": "x"},
            "application": {"apiGroup": "apps.cozystack.io", "kind": app},
        }));
    }
    let class: BackupClass = serde_json::from_value(json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupClass",
        "metadata": {"name": name},
        "spec": {"strategies": strategies},
    }))
    .unwrap();
    Api::<BackupClass>::all(h.client())
        .create(&PostParams::default(), &class)
        .await
        .unwrap();
}

/// Creates a BackupJob for application `kind`/`db` through `class`.
pub async fn backup_job(h: &Harness, ns: &str, name: &str, class: &str, kind: &str) {
    let job: BackupJob = serde_json::from_value(json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
        "metadata": {"name": name},
        "spec": {"applicationRef": {"kind": kind, "name": "db"}, "backupClassName": class},
    }))
    .unwrap();
    Api::<BackupJob>::namespaced(h.client(), ns)
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
}

/// Creates a Backup whose strategyRef is `group`/`kind` and a RestoreJob restoring it.
pub async fn restore_job(h: &Harness, ns: &str, name: &str, group: &str, kind: &str) {
    let backup: api::backups::Backup = serde_json::from_value(json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "Backup",
        "metadata": {"name": format!("{name}-backup")},
        "spec": {
            "applicationRef": {"kind": "Postgres", "name": "db"},
            "strategyRef": {"apiGroup": group, "kind": kind, "name": "s"},
            "takenAt": "2026-01-02T03:04:05Z",
        },
    }))
    .unwrap();
    Api::<api::backups::Backup>::namespaced(h.client(), ns)
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
    let job: RestoreJob = serde_json::from_value(json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
        "metadata": {"name": name},
        "spec": {"backupRef": {"name": format!("{name}-backup")}},
    }))
    .unwrap();
    Api::<RestoreJob>::namespaced(h.client(), ns)
        .create(&PostParams::default(), &job)
        .await
        .unwrap();
}

/// Sets a BackupJob's phase through `/status` (as the runner would).
pub async fn set_phase(h: &Harness, ns: &str, name: &str, phase: &str) {
    Api::<BackupJob>::namespaced(h.client(), ns)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase}})),
        )
        .await
        .unwrap();
}

/// The BackupJob's `CredentialsProjected` condition, if any.
pub async fn bj_condition(h: &Harness, ns: &str, name: &str) -> Option<Condition> {
    let job = Api::<BackupJob>::namespaced(h.client(), ns)
        .get(name)
        .await
        .unwrap();
    job.status.and_then(|s| {
        s.conditions
            .into_iter()
            .find(|c| c.type_ == "CredentialsProjected")
    })
}

/// The RestoreJob's `CredentialsProjected` condition, if any.
pub async fn rj_condition(h: &Harness, ns: &str, name: &str) -> Option<Condition> {
    let job = Api::<RestoreJob>::namespaced(h.client(), ns)
        .get(name)
        .await
        .unwrap();
    job.status.and_then(|s| {
        s.conditions
            .into_iter()
            .find(|c| c.type_ == "CredentialsProjected")
    })
}

pub use harness::eventually;

/// Waits for the BackupJob's condition to have `reason` (for the job's current generation).
pub async fn wait_bj(h: &Harness, ns: &str, name: &str, reason: &str) -> Condition {
    eventually(
        &format!("BackupJob {ns}/{name} CredentialsProjected {reason}"),
        || async {
            bj_condition(h, ns, name)
                .await
                .filter(|c| c.reason == reason)
        },
    )
    .await
}

/// The projector's `/metrics`.
pub fn metrics_text(h: &mut Harness) -> harness::Metrics {
    let addr = h.daemon(NAME).unwrap().admin_addr.clone();
    harness::Admin::new(addr).metrics()
}

/// Successes counted for `ns`.
pub fn successes(metrics: &harness::Metrics, ns: &str) -> f64 {
    metrics.value(
        "cozystack_backup_credentials_projection_successes_total",
        &[("namespace", ns)],
    )
}

/// Reconcile runs of a controller.
pub fn runs(metrics: &harness::Metrics, controller: &str) -> f64 {
    metrics.value(
        "cozy_backups_credentials_projector_reconcile_runs_total",
        &[("controller", controller)],
    )
}

/// Asserts that no secret value (or its base64) appears in the projector's log, any Event, the
/// status of any job, or /metrics.
pub async fn assert_no_leak(h: &mut Harness, secrets: &[&str]) {
    use k8s_openapi::api::core::v1::Event;
    let log = h.daemon(NAME).unwrap().log();
    assert!(!log.is_empty(), "the projector logged something");
    let events = Api::<Event>::all(h.client())
        .list(&Default::default())
        .await
        .unwrap();
    let events = serde_json::to_string(&events.items).unwrap();
    let bjs = Api::<BackupJob>::all(h.client())
        .list(&Default::default())
        .await
        .unwrap();
    let rjs = Api::<RestoreJob>::all(h.client())
        .list(&Default::default())
        .await
        .unwrap();
    let statuses = serde_json::to_string(&(
        bjs.items.iter().map(|j| &j.status).collect::<Vec<_>>(),
        rjs.items.iter().map(|j| &j.status).collect::<Vec<_>>(),
    ))
    .unwrap();
    assert!(statuses.contains("CredentialsProjected"), "{statuses}");
    let metrics = metrics_text(h);
    assert!(metrics.has("cozystack_backup_credentials_projection_successes_total"));
    harness::leak::assert_no_leaks(
        &[
            ("log", &log),
            ("events", &events),
            ("job status", &statuses),
            ("metrics", metrics.text()),
        ],
        secrets,
    );
    // And the harness's sweep: every project daemon's log and metrics, every Event, the status of
    // every object of the project's kinds, the emulator's audit log.
    h.assert_no_secret_leaks(secrets, &[]);
}

/// Reference for a Postgres application (unused field filler).
pub fn app(kind: &str) -> TypedLocalObjectReference {
    TypedLocalObjectReference::new("apps.cozystack.io", kind, "db")
}
