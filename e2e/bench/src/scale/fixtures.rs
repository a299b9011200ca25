//! The objects each daemon is measured against: `n` relevant objects, ten per namespace (so 1,000
//! namespaces at 10,000), plus the few fixed objects the daemon needs to reach its steady state.
//!
//! Terminal objects are what accumulate on a large platform, so the job kinds are seeded finished
//! (`Succeeded`); the credentials projector also gets one pending job in every tenth namespace, and
//! the retention cleaner one expired Backup in every tenth namespace, so their first pass does some
//! real work besides looking at everything.

use std::collections::HashMap;

use api::backups::{Backup, BackupClass, BackupJob, Plan, RestoreJob, RetentionPolicy};
use api::thirdparty::{apps, cosi, permissive_crd, velero};
use base64::Engine;
use chrono::{DateTime, SecondsFormat, Utc};
use kube::core::ApiResource;
use serde_json::{Value, json};

use super::Daemon;

/// Objects per namespace.
pub const PER_NAMESPACE: usize = 10;

/// Size of each ApplicationDefinition's `openAPISchema`, in KiB (the size of the platform's
/// larger application schemas; the apidef benchmark uses the same).
pub const SCHEMA_KIB: usize = 30;

/// The namespace of the storage credentials and the platform Bucket.
pub const STORAGE_NAMESPACE: &str = "tenant-root";
/// The system credentials Secret (the source of every projected copy).
pub const SOURCE_SECRET: &str = "bucket-cozy-backups-system-credentials";
/// The Velero namespace (a system namespace of the projector).
pub const VELERO_NAMESPACE: &str = "cozy-velero";
/// The apidef-restarter's Deployment namespace and name.
pub const API_DEPLOYMENT: (&str, &str) = ("cozy-system", "cozystack-api");

/// Identifies an object: (kind, namespace, name).
pub type Key = (String, String, String);

/// What one daemon is measured against.
#[derive(Debug, Default)]
pub struct Seed {
    /// Manifests to create, namespaces first (CRDs are created before anything by the loader).
    pub manifests: Vec<Value>,
    /// Statuses to put back after creation (a create drops `status` where it is a subresource).
    pub statuses: HashMap<Key, Value>,
    /// The kinds of the relevant objects (the baseline lists and watches these).
    pub measured: Vec<ApiResource>,
    /// How many relevant objects there are.
    pub objects: usize,
    /// The relevant objects, in words.
    pub describe: String,
    /// Objects of the daemon's controller kind it must reconcile at least once to have caught up.
    pub reconciles: usize,
    /// Credentials the projector must project (pending jobs).
    pub projections: usize,
    /// Backups the retention cleaner must delete.
    pub deletions: usize,
}

impl Seed {
    fn push(&mut self, mut manifest: Value) {
        if let Some(status) = manifest.as_object_mut().and_then(|m| m.remove("status")) {
            self.statuses.insert(key_of(&manifest), status);
        }
        self.manifests.push(manifest);
    }

    fn namespace(&mut self, name: &str) {
        self.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}));
    }

    fn typed<K: serde::Serialize>(&mut self, object: &K, namespace: Option<&str>) {
        let mut v = serde_json::to_value(object).expect("a serialisable object");
        if let Some(ns) = namespace {
            v["metadata"]["namespace"] = json!(ns);
        }
        self.push(v);
    }
}

/// The identifying triple of a manifest or stored object.
pub fn key_of(o: &Value) -> Key {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        s(&o["kind"]),
        s(&o["metadata"]["namespace"]),
        s(&o["metadata"]["name"]),
    )
}

fn stamp(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn tenants(prefix: &str, n: usize) -> Vec<String> {
    (0..n.div_ceil(PER_NAMESPACE))
        .map(|i| format!("tenant-{prefix}{i:04}"))
        .collect()
}

fn ready_condition(reason: &str, message: &str, at: &str) -> Value {
    json!({"type": "Ready", "status": "True", "reason": reason, "message": message,
           "lastTransitionTime": at, "observedGeneration": 1})
}

fn succeeded_job(at: &str) -> Value {
    json!({"phase": "Succeeded", "startedAt": at, "completedAt": at,
           "message": "backup completed",
           "conditions": [ready_condition("BackupSucceeded", "backup completed", at)]})
}

fn default_class() -> BackupClass {
    BackupClass::test("cozy-default")
        .route("Postgres", "CNPG", "cozy-default-cnpg")
        .build()
}

fn source_secret(namespace: &str) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({"apiVersion": "v1", "kind": "Secret",
           "metadata": {"name": SOURCE_SECRET, "namespace": namespace},
           "data": {"accessKey": b64("scale-bench-access"), "secretKey": b64("scale-bench-secret"),
                    "endpoint": b64("https://s3.example.com"), "bucketName": b64("cozy-backups-0001")}})
}

/// An `openAPISchema` string of about `kib` KiB: nested settings with descriptions and enums.
pub fn schema(seed: usize, kib: usize) -> String {
    let mut props = serde_json::Map::new();
    let mut len = 0;
    let mut i = 0;
    while len < kib * 1024 {
        let p = json!({
            "type": "object",
            "description": format!("Setting {i} of application kind {seed}: storage, replicas and class."),
            "properties": {
                "size": {"type": "string", "default": "10Gi", "pattern": "^[0-9]+(Gi|Mi)$"},
                "replicas": {"type": "integer", "minimum": 1, "maximum": 9},
                "mode": {"type": "string", "enum": ["standalone", "replicated", "sharded"]}
            }
        });
        len += p.to_string().len() + 12;
        props.insert(format!("setting{i}"), p);
        i += 1;
    }
    json!({"type": "object", "properties": props}).to_string()
}

/// The operators' kinds the daemons watch, as accepting CRDs: a platform has them installed, and a
/// kind that is not served would be listed again every 30 s (the watches' backoff), which is not
/// the steady state being measured.
pub fn platform_crds()
-> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    use api::thirdparty::{barman, cnpg, etcd, fdb, flux, mariadb, percona};
    vec![
        permissive_crd::<cosi::BucketClaim>(true),
        permissive_crd::<apps::Bucket>(true),
        permissive_crd::<apps::Postgres>(true),
        permissive_crd::<apps::MariaDB>(true),
        permissive_crd::<apps::Etcd>(true),
        permissive_crd::<apps::ClickHouse>(true),
        permissive_crd::<apps::MongoDB>(true),
        permissive_crd::<apps::FoundationDB>(true),
        permissive_crd::<velero::BackupStorageLocation>(true),
        permissive_crd::<velero::Backup>(true),
        permissive_crd::<velero::Restore>(true),
        permissive_crd::<velero::DeleteBackupRequest>(true),
        permissive_crd::<barman::ObjectStore>(true),
        permissive_crd::<cnpg::Backup>(true),
        permissive_crd::<cnpg::Cluster>(true),
        permissive_crd::<etcd::EtcdCluster>(true),
        permissive_crd::<etcd::EtcdSnapshot>(true),
        permissive_crd::<fdb::FoundationDBBackup>(true),
        permissive_crd::<fdb::FoundationDBCluster>(true),
        permissive_crd::<fdb::FoundationDBRestore>(true),
        permissive_crd::<flux::HelmRelease>(true),
        permissive_crd::<mariadb::Backup>(true),
        permissive_crd::<mariadb::MariaDB>(true),
        permissive_crd::<mariadb::Restore>(true),
        permissive_crd::<percona::PerconaServerMongoDB>(true),
        permissive_crd::<percona::PerconaServerMongoDBBackup>(true),
        permissive_crd::<percona::PerconaServerMongoDBRestore>(true),
    ]
}

/// The objects for `daemon` with `n` relevant objects.
pub fn seed(daemon: Daemon, n: usize) -> Seed {
    let now = Utc::now();
    let at = stamp(now);
    let mut s = Seed::default();
    for crd in platform_crds() {
        s.typed(&crd, None);
    }
    match daemon {
        Daemon::StrategyRenderer => {
            for ns in [
                STORAGE_NAMESPACE,
                VELERO_NAMESPACE,
                "cozy-backup-controller",
            ] {
                s.namespace(ns);
            }
            s.push(source_secret(STORAGE_NAMESPACE));
            s.push(json!({
                "apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketClaim",
                "metadata": {"name": "bucket-cozy-backups", "namespace": STORAGE_NAMESPACE},
                "spec": {"protocols": ["s3"]},
                "status": {"bucketReady": true, "bucketName": "cozy-backups-0001"},
            }));
            let bucket = ApiResource::erase::<apps::Bucket>(&());
            let namespaces = tenants("s", n);
            for ns in &namespaces {
                s.namespace(ns);
            }
            for i in 0..n {
                let ns = &namespaces[i / PER_NAMESPACE];
                s.push(json!({
                    "apiVersion": bucket.api_version, "kind": "Bucket",
                    "metadata": {"name": format!("bucket-{}", i % PER_NAMESPACE), "namespace": ns},
                    "spec": {"users": {"admin": {"readonly": false}, "reader": {"readonly": true}}},
                }));
            }
            s.measured = vec![bucket];
            s.describe = format!(
                "{n} tenant Buckets (a kind it renders) in {} namespaces",
                namespaces.len()
            );
        }
        Daemon::CredentialsProjector | Daemon::BackupRunner => {
            let projector = daemon == Daemon::CredentialsProjector;
            if projector {
                for ns in [STORAGE_NAMESPACE, VELERO_NAMESPACE] {
                    s.namespace(ns);
                }
                s.push(source_secret(STORAGE_NAMESPACE));
            }
            s.typed(&default_class(), None);
            let namespaces = tenants(if projector { "p" } else { "r" }, n);
            for ns in &namespaces {
                s.namespace(ns);
            }
            for i in 0..n {
                let ns = &namespaces[i / PER_NAMESPACE];
                let k = i % PER_NAMESPACE;
                let day = now - chrono::Duration::days(k as i64);
                let mut job = serde_json::to_value(
                    BackupJob::test(&format!("db-{k}-{}", day.format("%Y%m%d")))
                        .namespace(ns)
                        .for_app("Postgres", &format!("db-{k}"))
                        .class("cozy-default")
                        .build(),
                )
                .expect("a BackupJob");
                // One pending job in every tenth namespace for the projector; the rest finished.
                let pending = projector && k == 0 && (i / PER_NAMESPACE).is_multiple_of(10);
                if pending {
                    s.projections += 1;
                } else {
                    job["status"] = succeeded_job(&stamp(day));
                }
                s.push(job);
            }
            s.measured = vec![ApiResource::erase::<BackupJob>(&())];
            s.reconciles = n;
            s.describe = if projector {
                format!(
                    "{n} BackupJobs in {} namespaces ({} pending, the rest Succeeded)",
                    namespaces.len(),
                    s.projections
                )
            } else {
                format!(
                    "{n} BackupJobs in {} namespaces (all Succeeded)",
                    namespaces.len()
                )
            };
        }
        Daemon::RestoreOrchestrator => {
            s.typed(&default_class(), None);
            let namespaces = tenants("o", n);
            for ns in &namespaces {
                s.namespace(ns);
            }
            for i in 0..n / 2 {
                let ns = &namespaces[(2 * i) / PER_NAMESPACE];
                let name = format!("db-{i}-backup");
                let mut backup = serde_json::to_value(
                    Backup::test(&name)
                        .namespace(ns)
                        .for_app("Postgres", &format!("db-{}", i % 5))
                        .build(),
                )
                .expect("a Backup");
                backup["status"] = json!({"phase": "Ready"});
                s.push(backup);
                let mut restore = serde_json::to_value(
                    RestoreJob::test(&format!("restore-{i}"), &name)
                        .namespace(ns)
                        .build(),
                )
                .expect("a RestoreJob");
                // As every RestoreJob a controller has seen, upstream's or ours: the cleanup
                // finalizer is added even to a finished job, so a restart finds it there.
                restore["metadata"]["finalizers"] = json!([api::contract::finalizers::CLEANUP]);
                restore["status"] = json!({
                    "phase": "Succeeded", "startedAt": at, "completedAt": at,
                    "message": "restore completed",
                    "conditions": [ready_condition("RestoreSucceeded", "restore completed", &at)],
                });
                s.push(restore);
            }
            s.measured = vec![
                ApiResource::erase::<Backup>(&()),
                ApiResource::erase::<RestoreJob>(&()),
            ];
            s.reconciles = n / 2;
            s.describe = format!(
                "{} Backups and {} Succeeded RestoreJobs in {} namespaces",
                n / 2,
                n / 2,
                namespaces.len()
            );
        }
        Daemon::RetentionCleaner => {
            let namespaces = tenants("c", n);
            for ns in &namespaces {
                s.namespace(ns);
            }
            for (j, ns) in namespaces.iter().enumerate() {
                // keepLast 10 keeps everything; every tenth namespace keeps 9 of its 10.
                let keep = if j % 10 == 0 { 9 } else { 10 };
                let mut plan = Plan::test("nightly", "0 2 * * *")
                    .namespace(ns)
                    .for_app("Postgres", "db")
                    .build();
                plan.spec.retention_policy = Some(RetentionPolicy {
                    keep_last: Some(keep),
                    ..Default::default()
                });
                s.typed(&plan, None);
                let count = PER_NAMESPACE.min(n - j * PER_NAMESPACE);
                s.deletions += count.saturating_sub(keep as usize);
                for day in 1..=count {
                    let t = now - chrono::Duration::days(day as i64);
                    let mut b = Backup::test(&format!("nightly-{}", t.format("%Y%m%d")))
                        .namespace(ns)
                        .for_app("Postgres", "db")
                        .build();
                    b.spec.plan_ref = Some(api::LocalObjectReference::new("nightly"));
                    b.spec.taken_at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                        stamp(t).parse().expect("an RFC 3339 time"),
                    );
                    let mut v = serde_json::to_value(&b).expect("a Backup");
                    v["status"] = json!({"phase": "Ready"});
                    s.push(v);
                }
            }
            s.measured = vec![ApiResource::erase::<Backup>(&())];
            s.describe = format!(
                "{n} Ready Backups of {} Plans in {} namespaces ({} expired by keepLast)",
                namespaces.len(),
                namespaces.len(),
                s.deletions
            );
        }
        Daemon::ApidefRestarter => {
            let (ns, name) = API_DEPLOYMENT;
            s.namespace(ns);
            s.push(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name, "namespace": ns},
                "spec": {"selector": {"matchLabels": {"app": "cozystack-api"}},
                         "template": {"metadata": {"labels": {"app": "cozystack-api"}},
                                      "spec": {"containers": [{"name": "api", "image": "cozystack-api"}]}}},
            }));
            let defs = n / PER_NAMESPACE;
            for i in 0..defs {
                s.push(json!({
                    "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
                    "metadata": {"name": format!("app-{i:04}")},
                    "spec": {
                        "application": {"kind": format!("App{i}"), "openAPISchema": schema(i, SCHEMA_KIB),
                                        "plural": format!("app{i}s"), "singular": format!("app{i}")},
                        "release": {"prefix": format!("app{i}-"), "labels": {"cozystack.io/ui": "true"},
                                    "chartRef": {"kind": "ExternalArtifact", "name": format!("app{i}"), "namespace": "cozy-public"}},
                        "secrets": {"include": [{"resourceNames": ["{{ .name }}-credentials"]}]},
                        "dashboard": {"category": "Databases", "singular": format!("App {i}"), "plural": format!("Apps {i}"),
                                      "tags": ["db"], "tabs": ["workloads", "secrets", "yaml"]}
                    }
                }));
            }
            s.measured = vec![ApiResource::erase::<api::appdef::ApplicationDefinition>(&())];
            s.objects = defs;
            s.describe =
                format!("{defs} ApplicationDefinitions (~{SCHEMA_KIB} KiB openAPISchema each)");
            return s;
        }
    }
    s.objects = n;
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(s: &Seed, kind: &str) -> usize {
        s.manifests.iter().filter(|m| m["kind"] == kind).count()
    }

    fn typed_with_status<K: serde::de::DeserializeOwned>(s: &Seed, kind: &str) -> Vec<K> {
        s.manifests
            .iter()
            .filter(|m| m["kind"] == kind)
            .map(|m| {
                let mut m = m.clone();
                if let Some(st) = s.statuses.get(&key_of(&m)) {
                    m["status"] = st.clone();
                }
                serde_json::from_value(m).expect("the daemon's own type reads the seeded object")
            })
            .collect()
    }

    #[test]
    fn job_kinds_are_seeded_ten_per_namespace_and_mostly_terminal() {
        let s = seed(Daemon::BackupRunner, 1000);
        assert_eq!(count(&s, "Namespace"), 100);
        let jobs: Vec<BackupJob> = typed_with_status(&s, "BackupJob");
        assert_eq!(jobs.len(), 1000);
        assert!(jobs.iter().all(BackupJob::is_terminal));
        assert_eq!((s.objects, s.reconciles), (1000, 1000));

        let s = seed(Daemon::CredentialsProjector, 1000);
        let jobs: Vec<BackupJob> = typed_with_status(&s, "BackupJob");
        assert_eq!(jobs.iter().filter(|j| !j.is_terminal()).count(), 10);
        assert_eq!(s.projections, 10);
        assert_eq!(count(&s, "Secret"), 1);
    }

    #[test]
    fn the_orchestrator_gets_half_backups_half_finished_restores() {
        let s = seed(Daemon::RestoreOrchestrator, 1000);
        let restores: Vec<RestoreJob> = typed_with_status(&s, "RestoreJob");
        let backups: Vec<Backup> = typed_with_status(&s, "Backup");
        assert_eq!((restores.len(), backups.len()), (500, 500));
        assert!(restores.iter().all(RestoreJob::is_terminal));
        assert!(restores.iter().all(|r| {
            r.metadata.finalizers.as_deref()
                == Some(&[api::contract::finalizers::CLEANUP.to_owned()])
        }));
        assert_eq!(s.reconciles, 500);
        assert_eq!(s.measured.len(), 2);
    }

    #[test]
    fn the_cleaner_keeps_all_but_one_backup_in_every_tenth_namespace() {
        let s = seed(Daemon::RetentionCleaner, 1000);
        let backups: Vec<Backup> = typed_with_status(&s, "Backup");
        assert_eq!(backups.len(), 1000);
        assert_eq!(count(&s, "Plan"), 100);
        assert_eq!(s.deletions, 10);
    }

    #[test]
    fn the_renderer_gets_foreign_buckets_and_its_inputs() {
        let s = seed(Daemon::StrategyRenderer, 1000);
        assert_eq!(count(&s, "Bucket"), 1000);
        assert_eq!(count(&s, "CustomResourceDefinition"), platform_crds().len());
        let claim = (
            "BucketClaim".into(),
            STORAGE_NAMESPACE.into(),
            "bucket-cozy-backups".into(),
        );
        assert_eq!(s.statuses[&claim]["bucketName"], "cozy-backups-0001");
    }

    #[test]
    fn the_restarter_gets_one_definition_per_ten_objects() {
        let s = seed(Daemon::ApidefRestarter, 1000);
        assert_eq!(count(&s, "ApplicationDefinition"), 100);
        assert_eq!(s.objects, 100);
        let len = s.manifests.last().unwrap()["spec"]["application"]["openAPISchema"]
            .as_str()
            .unwrap()
            .len();
        assert!(
            (SCHEMA_KIB * 1024..SCHEMA_KIB * 1024 + 2048).contains(&len),
            "{len}"
        );
    }
}
