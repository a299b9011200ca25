//! The renderer's decisions as pure functions over values (no client, no clock): what to apply,
//! what to prune and what to keep; the `cozy-default` Ready condition and the missing gauge; and
//! how a new configuration is taken into force.
//!
//! ```text
//!  DesiredObjects ─┐
//!  observed (caches, JSON) ─┼─► plan() ─► Plan { apply (create | drift | new render), prune, keep, left_in_place }
//!  last applied ───┘
//!  DesiredObjects + observed + system Secret ─► ready_status() ─► Ready condition, missing count
//!  ConfigMemory + parse result ──────────────► next_config() ─► config in force, error to report, readiness
//! ```

use std::collections::{BTreeMap, BTreeSet};

use api::ConditionStatus;
use api::contract::reasons;
use serde_json::Value;
use strategy_render::{DesiredObjects, MANAGED_BY_LABEL, MANAGED_BY_VALUE, RenderConfig};

/// Identity of an object in the renderer's view: kind, namespace, name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    /// Kind (the owned kinds' labels: `BackupClass`, `CNPG`, …, `BackupStorageLocation`).
    pub kind: String,
    /// Namespace of a namespaced object.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl Key {
    /// The key of a rendered or observed object (`kind`, `metadata.namespace`, `metadata.name`;
    /// absent fields read as empty).
    pub fn of(obj: &Value) -> Self {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
        Self {
            kind: s(&obj["kind"]),
            namespace: obj["metadata"]["namespace"].as_str().map(str::to_owned),
            name: s(&obj["metadata"]["name"]),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// One server-side apply to make.
#[derive(Clone, Debug, PartialEq)]
pub struct Apply {
    /// The object.
    pub key: Key,
    /// The full apply body.
    pub object: Value,
    /// Why.
    pub why: ApplyReason,
}

/// Why an object is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyReason {
    /// It does not exist.
    Create,
    /// Someone changed what we applied last time: revert it (counted as drift).
    Drift,
    /// The render changed (new configuration or inputs), or this replica has not applied it yet.
    Render,
}

/// One deletion to make (with a uid precondition, so a re-created object is not deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prune {
    /// The object.
    pub key: Key,
    /// Its uid when observed.
    pub uid: Option<String>,
}

/// What an evaluation must do.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Objects to apply, in render order.
    pub apply: Vec<Apply>,
    /// Objects of ours no longer desired.
    pub prune: Vec<Prune>,
    /// Desired objects that already hold every rendered value.
    pub keep: Vec<Key>,
    /// Objects of ours no longer desired that are never deleted (a Bucket holds every backup).
    pub left_in_place: Vec<Key>,
}

/// The kinds never pruned: deleting a Bucket because the configuration moved would destroy data.
const NEVER_PRUNED: &[&str] = &["Bucket"];

/// Decides applies and prunes. `observed` holds what the watches show of every owned kind;
/// `last_applied` what this process applied last per object (to tell drift from a new render).
pub fn plan(
    desired: &DesiredObjects,
    observed: &BTreeMap<Key, Value>,
    last_applied: &BTreeMap<Key, Value>,
) -> Plan {
    let mut out = Plan::default();
    let mut wanted = BTreeSet::new();
    for object in &desired.objects {
        let key = Key::of(object);
        wanted.insert(key.clone());
        let why = match observed.get(&key) {
            Some(current) if strategy_render::is_subset(object, current) => {
                out.keep.push(key);
                continue;
            }
            Some(_) if last_applied.get(&key) == Some(object) => ApplyReason::Drift,
            Some(_) => ApplyReason::Render,
            None => ApplyReason::Create,
        };
        out.apply.push(Apply {
            key,
            object: object.clone(),
            why,
        });
    }
    for (key, current) in observed {
        let ours = current["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY_VALUE;
        if !ours || wanted.contains(key) {
            continue;
        }
        if NEVER_PRUNED.contains(&key.kind.as_str()) {
            out.left_in_place.push(key.clone());
            continue;
        }
        out.prune.push(Prune {
            key: key.clone(),
            uid: current["metadata"]["uid"].as_str().map(str::to_owned),
        });
    }
    out
}

/// The `cozy-default` Ready condition's content and the missing count behind
/// `cozystack_backup_default_objects_missing`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadyStatus {
    /// `True` when nothing is missing.
    pub status: ConditionStatus,
    /// `DefaultObjectsPresent` or `DefaultObjectsMissing`.
    pub reason: &'static str,
    /// `every object cozy-default routes to exists`, or `missing: <Kind>/<name>, …[; waiting …]`.
    pub message: String,
    /// How many entries are missing (the gauge's value).
    pub missing: usize,
}

/// What the default-objects gate knows about the system credentials Secret.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SystemSecret<'a> {
    /// The Secret does not exist (yet).
    Absent,
    /// It exists; the bucket it names (flat `bucketName`, else `BucketInfo`'s `spec.bucketName`).
    Present {
        /// The bucket name, when the Secret carries one.
        bucket_name: Option<&'a str>,
    },
}

/// Computes the Ready status, in the order of upstream's default-objects gate:
///
/// 1. the system credentials Secret is absent → only that Secret is missing;
/// 2. the Secret names no bucket → only that Secret is missing (one deliberate difference: with
///    `provisionBucket: false` the bucket is `backupStorage.bucketName` itself, so once that resolves
///    the Secret's name is not needed);
/// 3. otherwise each required object that does not exist, `<Kind>/<name>`, sorted. The bucket name
///    comes from the Secret, as upstream's does: a BucketClaim that has not reported
///    `status.bucketName` yet does not hold the count back (the message then also says the render
///    is waiting for the claim).
pub fn ready_status(
    desired: &DesiredObjects,
    config: &RenderConfig,
    observed: &BTreeMap<Key, Value>,
    secret: SystemSecret<'_>,
) -> ReadyStatus {
    let bs = &config.backup_storage;
    let secret_entry = || vec![format!("Secret/{}", bs.system_secret_name)];
    let external_bucket = !bs.provision_bucket && desired.bucket_name.is_some();
    let (missing, unnamed) = match secret {
        SystemSecret::Absent => (secret_entry(), false),
        SystemSecret::Present { bucket_name: None } if !external_bucket => (secret_entry(), true),
        SystemSecret::Present { .. } => (
            desired
                .required
                .iter()
                .filter(|r| {
                    !observed.contains_key(&Key {
                        kind: r.kind.clone(),
                        namespace: r.namespace.clone(),
                        name: r.name.clone(),
                    })
                })
                .map(|r| r.display())
                .collect(),
            false,
        ),
    };
    if missing.is_empty() {
        return ReadyStatus {
            status: ConditionStatus::True,
            reason: reasons::DEFAULT_OBJECTS_PRESENT,
            message: "every object cozy-default routes to exists".into(),
            missing: 0,
        };
    }
    let mut message = format!("missing: {}", missing.join(", "));
    if unnamed {
        message.push_str(&format!(
            "; Secret {}/{} names no bucket (no bucketName key, no spec.bucketName in BucketInfo)",
            bs.namespace, bs.system_secret_name
        ));
    }
    if desired.bucket_name.is_none() {
        message.push_str(&format!(
            "; waiting for BucketClaim {}/{} to report status.bucketName",
            bs.namespace,
            backup_storage::bucket::bucket_claim_name(&bs.bucket_name)
        ));
    }
    ReadyStatus {
        status: ConditionStatus::False,
        reason: reasons::DEFAULT_OBJECTS_MISSING,
        message,
        missing: missing.len(),
    }
}

/// What the renderer remembers about configurations (never the source of truth: the ConfigMap is).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConfigMemory {
    /// The last configuration that parsed and validated.
    pub last_good: Option<RenderConfig>,
    /// The last error reported (each distinct error is reported once).
    pub last_error: Option<String>,
}

/// How the `configuration` readiness check reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigReadiness {
    /// The ConfigMap is valid (or absent: defaults).
    Valid,
    /// Rejected, the last good configuration stays in force.
    RejectedKeepingLastGood(String),
    /// Rejected and no good configuration was ever seen: nothing may be written.
    RejectedNoneGood(String),
}

/// The outcome of taking a (possibly new) ConfigMap into account.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigStep {
    /// The configuration to render with, if any.
    pub in_force: Option<RenderConfig>,
    /// The memory after this step.
    pub memory: ConfigMemory,
    /// A rejection not reported before (log, Event, counter).
    pub report: Option<String>,
    /// The configuration became valid again after a rejection.
    pub recovered: bool,
    /// The configuration in force changed.
    pub changed: bool,
    /// The readiness check.
    pub readiness: ConfigReadiness,
}

/// Takes the parse result of the current ConfigMap into account.
pub fn next_config(memory: &ConfigMemory, parsed: Result<RenderConfig, String>) -> ConfigStep {
    match parsed {
        Ok(config) => ConfigStep {
            changed: memory.last_good.as_ref() != Some(&config),
            recovered: memory.last_error.is_some(),
            in_force: Some(config.clone()),
            memory: ConfigMemory {
                last_good: Some(config),
                last_error: None,
            },
            report: None,
            readiness: ConfigReadiness::Valid,
        },
        Err(message) => {
            let fresh = memory.last_error.as_deref() != Some(message.as_str());
            ConfigStep {
                in_force: memory.last_good.clone(),
                memory: ConfigMemory {
                    last_good: memory.last_good.clone(),
                    last_error: Some(message.clone()),
                },
                report: fresh.then(|| message.clone()),
                recovered: false,
                changed: false,
                readiness: match &memory.last_good {
                    Some(_) => ConfigReadiness::RejectedKeepingLastGood(message),
                    None => ConfigReadiness::RejectedNoneGood(message),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    fn config() -> RenderConfig {
        RenderConfig::default()
    }

    fn desired(bucket: Option<&str>) -> DesiredObjects {
        strategy_render::render(&config(), bucket, Some(b"s3.example.com"))
    }

    /// A system Secret that names `bucket`.
    fn named(bucket: &str) -> SystemSecret<'_> {
        SystemSecret::Present {
            bucket_name: Some(bucket),
        }
    }

    /// Observed = what the API server holds after applying `objects` (a uid added).
    fn observed_as_applied(objects: &[Value]) -> BTreeMap<Key, Value> {
        objects
            .iter()
            .map(|o| {
                let mut o = o.clone();
                let uid = format!("uid-{}", o["metadata"]["name"].as_str().unwrap_or_default());
                o["metadata"]["uid"] = json!(uid);
                o["metadata"]["resourceVersion"] = json!("7");
                (Key::of(&o), o)
            })
            .collect()
    }

    fn key(kind: &str, ns: Option<&str>, name: &str) -> Key {
        Key {
            kind: kind.into(),
            namespace: ns.map(Into::into),
            name: name.into(),
        }
    }

    #[test]
    fn plans_creates_keeps_drift_and_new_renders() {
        let d = desired(Some("bucket-1"));
        let all: Vec<Key> = d.objects.iter().map(Key::of).collect();
        // Nothing observed: create everything, in render order.
        let p = plan(&d, &BTreeMap::new(), &BTreeMap::new());
        assert_eq!(
            p.apply.iter().map(|a| a.key.clone()).collect::<Vec<_>>(),
            all
        );
        assert!(p.apply.iter().all(|a| a.why == ApplyReason::Create));
        // Everything as applied: keep everything, write nothing.
        let mut observed = observed_as_applied(&d.objects);
        let p = plan(&d, &observed, &BTreeMap::new());
        assert_eq!((p.apply.len(), p.keep, p.prune.len()), (0, all.clone(), 0));

        // Someone edits what we applied: drift. A changed render of an object we applied
        // differently before: a new render, not drift.
        let last: BTreeMap<Key, Value> =
            d.objects.iter().map(|o| (Key::of(o), o.clone())).collect();
        let cnpg = key("CNPG", None, "cozy-default-cnpg");
        observed.get_mut(&cnpg).unwrap()["spec"]["template"]["serverName"] = json!("edited");
        let p = plan(&d, &observed, &last);
        assert_eq!(
            p.apply
                .iter()
                .map(|a| (a.key.clone(), a.why))
                .collect::<Vec<_>>(),
            [(cnpg.clone(), ApplyReason::Drift)]
        );
        let mut older = last.clone();
        older.insert(cnpg.clone(), json!({"an": "older render"}));
        let p = plan(&d, &observed, &older);
        assert_eq!(p.apply[0].why, ApplyReason::Render);
    }

    #[test]
    fn prunes_only_ours_and_never_a_bucket() {
        let with_bucket = desired(Some("bucket-1"));
        let mut observed = observed_as_applied(&with_bucket.objects);
        // An admin's sibling class without our label and one with a foreign managed-by value.
        for (name, labels) in [
            ("admin-class", json!({})),
            ("helm-class", json!({MANAGED_BY_LABEL: "Helm"})),
        ] {
            let o = json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupClass",
                           "metadata": {"name": name, "labels": labels, "uid": "u"}});
            observed.insert(Key::of(&o), o);
        }
        // bslEnabled off and provisionBucket off: the Velero objects go, the Bucket stays.
        let mut c = config();
        c.velero.bsl_enabled = false;
        c.backup_storage.provision_bucket = false;
        let d = strategy_render::render(&c, None, None);
        let p = plan(&d, &observed, &BTreeMap::new());
        let mut pruned: Vec<String> = p.prune.iter().map(|x| x.key.to_string()).collect();
        pruned.sort();
        assert_eq!(
            pruned,
            [
                "BackupStorageLocation/cozy-velero/cozy-default",
                "Velero/cozy-default-velero-vmdisk",
                "Velero/cozy-default-velero-vminstance",
            ]
        );
        assert_eq!(
            p.prune
                .iter()
                .find(|x| x.key.kind == "Velero")
                .unwrap()
                .uid
                .as_deref(),
            Some("uid-cozy-default-velero-vmdisk")
        );
        assert_eq!(
            p.left_in_place,
            [key("Bucket", Some("tenant-root"), "cozy-backups")]
        );
    }

    #[test]
    fn a_kind_whose_crd_is_missing_is_still_applied() {
        // The BSL cache is empty (its kind is not served): plan says create; the executor's
        // failure for that one object does not hold back the others, and Ready names it.
        let d = desired(Some("bucket-1"));
        let mut observed = observed_as_applied(&d.objects);
        let bsl = key("BackupStorageLocation", Some("cozy-velero"), "cozy-default");
        observed.remove(&bsl);
        let p = plan(&d, &observed, &BTreeMap::new());
        assert_eq!(
            p.apply
                .iter()
                .map(|a| (a.key.clone(), a.why))
                .collect::<Vec<_>>(),
            [(bsl, ApplyReason::Create)]
        );
        let r = ready_status(&d, &config(), &observed, named("bucket-1"));
        assert_eq!(
            (r.status, r.reason, r.message.as_str(), r.missing),
            (
                ConditionStatus::False,
                "DefaultObjectsMissing",
                "missing: BackupStorageLocation/cozy-default",
                1
            )
        );
    }

    #[test]
    fn ready_status_in_upstream_shape() {
        let c = config();
        // Bootstrap: no Secret, no bucket name: only the Secret is missing (upstream's gate).
        let d = desired(None);
        let r = ready_status(&d, &c, &BTreeMap::new(), SystemSecret::Absent);
        assert_eq!(
            (r.reason, r.message.as_str(), r.missing),
            (
                "DefaultObjectsMissing",
                "missing: Secret/bucket-cozy-backups-system-credentials; waiting for BucketClaim \
                 tenant-root/bucket-cozy-backups to report status.bucketName",
                1
            )
        );
        // Secret there, bucket known, nothing applied yet: every required object, sorted.
        let d = desired(Some("bucket-1"));
        let r = ready_status(&d, &c, &BTreeMap::new(), named("bucket-1"));
        assert_eq!(
            r.message,
            "missing: Altinity/cozy-default-altinity, BackupStorageLocation/cozy-default, \
             CNPG/cozy-default-cnpg, Etcd/cozy-default-etcd, MariaDB/cozy-default-mariadb, \
             MongoDB/cozy-default-mongodb, Velero/cozy-default-velero-vmdisk, \
             Velero/cozy-default-velero-vminstance"
        );
        assert_eq!(r.missing, 8);
        let r = ready_status(&d, &c, &observed_as_applied(&d.objects), named("bucket-1"));
        assert_eq!(
            (r.status, r.reason, r.message.as_str(), r.missing),
            (
                ConditionStatus::True,
                "DefaultObjectsPresent",
                "every object cozy-default routes to exists",
                0
            )
        );
    }

    #[test]
    fn the_gate_takes_the_bucket_from_the_secret_before_the_claim_reports_it() {
        // The Secret names a bucket, the BucketClaim has no status.bucketName: the renderer
        // cannot render the gated objects yet, but the gate counts them as upstream's does.
        let c = config();
        let unresolved = desired(None);
        let waiting = "; waiting for BucketClaim tenant-root/bucket-cozy-backups to report \
                       status.bucketName";
        // Nothing rendered: every routed object and the BSL.
        let r = ready_status(&unresolved, &c, &BTreeMap::new(), named("bucket-1"));
        assert_eq!(
            (r.status, r.message, r.missing),
            (
                ConditionStatus::False,
                format!(
                    "missing: Altinity/cozy-default-altinity, BackupStorageLocation/cozy-default, \
                     CNPG/cozy-default-cnpg, Etcd/cozy-default-etcd, MariaDB/cozy-default-mariadb, \
                     MongoDB/cozy-default-mongodb, Velero/cozy-default-velero-vmdisk, \
                     Velero/cozy-default-velero-vminstance{waiting}"
                ),
                8
            )
        );
        // Everything exists (rendered for that bucket before): nothing missing.
        let all = observed_as_applied(&desired(Some("bucket-1")).objects);
        let r = ready_status(&unresolved, &c, &all, named("bucket-1"));
        assert_eq!(
            (r.status, r.reason, r.missing),
            (ConditionStatus::True, "DefaultObjectsPresent", 0)
        );
        // Without Velero the Velero routes and the BSL are not counted.
        let mut no_velero = config();
        no_velero.velero.bsl_enabled = false;
        let d = strategy_render::render(&no_velero, None, Some(b"s3.example.com"));
        let r = ready_status(&d, &no_velero, &BTreeMap::new(), named("bucket-1"));
        assert_eq!(
            (r.message, r.missing),
            (
                format!(
                    "missing: Altinity/cozy-default-altinity, CNPG/cozy-default-cnpg, \
                     Etcd/cozy-default-etcd, MariaDB/cozy-default-mariadb, \
                     MongoDB/cozy-default-mongodb{waiting}"
                ),
                5
            )
        );
    }

    #[test]
    fn a_secret_that_names_no_bucket_is_what_the_gate_reports() {
        let c = config();
        let unnamed = SystemSecret::Present { bucket_name: None };
        let names_none = "missing: Secret/bucket-cozy-backups-system-credentials; Secret \
                          tenant-root/bucket-cozy-backups-system-credentials names no bucket (no \
                          bucketName key, no spec.bucketName in BucketInfo)";
        // Upstream's order: the Secret's bucket name is checked before any routed object, also
        // when the claim already reported one.
        for d in [desired(None), desired(Some("bucket-1"))] {
            let r = ready_status(&d, &c, &BTreeMap::new(), unnamed);
            assert_eq!(r.missing, 1, "{}", r.message);
            assert!(r.message.starts_with(names_none), "{}", r.message);
        }
        // provisionBucket: false: the bucket is backupStorage.bucketName; the routed objects count.
        let mut external = config();
        external.backup_storage.provision_bucket = false;
        let d = strategy_render::render(&external, None, Some(b"s3.example.com"));
        let r = ready_status(&d, &external, &BTreeMap::new(), unnamed);
        assert_eq!(r.missing, 8, "{}", r.message);
        let r = ready_status(&d, &external, &observed_as_applied(&d.objects), unnamed);
        assert_eq!(r.missing, 0, "{}", r.message);
    }

    #[test]
    fn configurations_valid_invalid_same_invalid_valid() {
        let good = config();
        let mut other = config();
        other.backup_storage.region = "eu-west-1".into();
        let start = ConfigMemory::default();
        // A bad ConfigMap at start: nothing in force, not ready, reported once.
        let s = next_config(&start, Err("backupStorage.x: unknown".into()));
        assert_eq!(
            (s.in_force.clone(), s.report.clone(), s.readiness.clone()),
            (
                None,
                Some("backupStorage.x: unknown".into()),
                ConfigReadiness::RejectedNoneGood("backupStorage.x: unknown".into())
            )
        );
        // Valid: in force, changed, recovered.
        let s = next_config(&s.memory, Ok(good.clone()));
        assert_eq!(
            (s.in_force.clone(), s.changed, s.recovered, s.report.clone()),
            (Some(good.clone()), true, true, None)
        );
        // The same valid config again: nothing new.
        let s = next_config(&s.memory, Ok(good.clone()));
        assert_eq!((s.changed, s.recovered), (false, false));
        // Invalid: the last good stays in force, reported once …
        let s = next_config(&s.memory, Err("region: invalid type".into()));
        assert_eq!(
            (s.in_force.clone(), s.report.clone(), s.readiness.clone()),
            (
                Some(good.clone()),
                Some("region: invalid type".into()),
                ConfigReadiness::RejectedKeepingLastGood("region: invalid type".into())
            )
        );
        // … the same invalid one again is not reported again …
        let s = next_config(&s.memory, Err("region: invalid type".into()));
        assert_eq!((s.in_force.clone(), s.report.clone()), (Some(good), None));
        // … and a different valid one takes over.
        let s = next_config(&s.memory, Ok(other.clone()));
        assert_eq!(
            (s.in_force, s.changed, s.recovered, s.readiness),
            (Some(other), true, true, ConfigReadiness::Valid)
        );
    }
}
