//! CloudNativePG with the barman-cloud plugin (Postgres applications): the pure parts of the backup
//! path, shared with the restore path (names, template rendering, the source-spec snapshot).
//!
//! ```text
//!  BackupJob ─► Postgres app <ns>/<app> ─► Cluster postgres-<app>
//!     ObjectStore postgres-<app> (owned by the Cluster, server-side applied, no serverName)
//!     Cluster spec.plugins = [barman-cloud.cloudnative-pg.io {barmanObjectName, serverName}]
//!     cnpg Backup <job>-xxxxx {method: plugin} labelled owned-by + cnpg.io/cluster
//!  completed ─► catalog Backup <job> (driverMetadata cnpg.io/*, artifact cnpg://<server>/<backup>,
//!               underlyingResources CNPGBackupSnapshot)
//! ```

use std::collections::BTreeMap;

use api::contract::labels;
use serde_json::{Value as Json, json};

/// Field manager of every CNPG write.
pub const FIELD_MANAGER: &str = "cozystack-cnpg-backup-driver";
/// The barman-cloud plugin's name.
pub const PLUGIN_NAME: &str = "barman-cloud.cloudnative-pg.io";
/// The Postgres application kind.
pub const APP_KIND: &str = "Postgres";
/// A cnpg Backup's completed phase.
pub const PHASE_COMPLETED: &str = "completed";
/// A cnpg Backup's failed phase.
pub const PHASE_FAILED: &str = "failed";
/// The healthy Cluster phase.
pub const HEALTHY_PHASE: &str = "Cluster in healthy state";
/// How long a cnpg Backup may stay `failed` before the job fails (CNPG may retry out of it).
pub const FAILED_PHASE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30 * 60);

/// Driver metadata keys on the catalog Backup.
pub mod keys {
    /// The cnpg Backup's name.
    pub const BACKUP_NAME: &str = "cnpg.io/backup-name";
    /// The effective barman server name.
    pub const SERVER_NAME: &str = "cnpg.io/server-name";
    /// The rendered destination path.
    pub const DESTINATION_PATH: &str = "cnpg.io/destination-path";
    /// The rendered endpoint URL (always present, may be empty).
    pub const ENDPOINT_URL: &str = "cnpg.io/endpoint-url";
    /// The Cluster's name.
    pub const CLUSTER_NAME: &str = "cnpg.io/cluster-name";
    /// The rendered S3 credentials Secret name (only with s3Credentials).
    pub const S3_SECRET_REF: &str = "cnpg.io/s3-secret-ref";
    /// barman's backup id of the base backup (ours).
    pub const BACKUP_ID: &str = "cnpg.io/backup-id";
    /// First WAL of the base backup (ours).
    pub const BEGIN_WAL: &str = "cnpg.io/begin-wal";
    /// Last WAL of the base backup (ours).
    pub const END_WAL: &str = "cnpg.io/end-wal";
    /// When the base backup stopped: the earliest point it can restore to (ours).
    pub const STOPPED_AT: &str = "cnpg.io/stopped-at";
}

/// The snapshot kind in `status.underlyingResources`.
pub const SNAPSHOT_KIND: &str = "CNPGBackupSnapshot";

/// The cnpg Cluster of a Postgres application.
pub fn cluster_name(app: &str) -> String {
    format!("postgres-{app}")
}

/// The Flux HelmRelease of a Postgres application (named like its Cluster).
pub fn release_name(app: &str) -> String {
    cluster_name(app)
}

/// Upstream's gate on the application reference (raw, not normalised).
pub fn validate_app_ref(r: &api::TypedLocalObjectReference) -> Result<(), String> {
    crate::app_ref::validate("CNPG", APP_KIND, r)
}

/// Renders the strategy template against the application (as JSON) and the route's parameters.
pub fn render_template(template: &Json, app: &Json, parameters: &BTreeMap<String, String>) -> Json {
    crate::template::render_for_app(template, app, parameters)
}

/// The serverName the live Cluster's barman-cloud plugin archives under: the plugin's
/// `serverName` parameter, else the Cluster's name; `None` when the plugin is not attached.
pub fn live_server_name(cluster: &Json) -> Option<String> {
    let plugins = cluster["spec"]["plugins"].as_array()?;
    let plugin = plugins.iter().find(|p| p["name"] == PLUGIN_NAME)?;
    match plugin["parameters"]["serverName"].as_str() {
        Some(s) if !s.is_empty() => Some(s.to_owned()),
        _ => cluster["metadata"]["name"].as_str().map(str::to_owned),
    }
}

/// The serverName a Cluster archives under: the live plugin's (a Cluster keeps its name once it
/// archives); else, for a Cluster bootstrapped by recovery, the template's name suffixed with the
/// first 8 characters of the Cluster's uid; else the template's name. A recovered Cluster runs on
/// a new timeline: archiving it under the name its source (or an earlier incarnation of itself)
/// archived under would put two histories in one archive, and PostgreSQL numbers the timelines of
/// two restores to the same point alike, so a later restore of that server could follow the wrong
/// one or never reach its target.
pub fn archive_server_name(cluster: &Json, template_server: &str) -> String {
    if let Some(live) = live_server_name(cluster) {
        return live;
    }
    let uid = cluster["metadata"]["uid"].as_str().unwrap_or_default();
    if cluster["spec"]["bootstrap"]["recovery"].is_object() && !uid.is_empty() {
        let short: String = uid.chars().filter(|c| *c != '-').take(8).collect();
        return format!("{template_server}-{short}");
    }
    template_server.to_owned()
}

/// The barman configuration of the ObjectStore from the rendered template.
fn barman_configuration(store: &Json) -> Json {
    let s = |k: &str| store[k].as_str().unwrap_or_default().to_owned();
    let mut out = json!({"destinationPath": s("destinationPath")});
    if let Some(e) = store["endpointURL"].as_str().filter(|e| !e.is_empty()) {
        out["endpointURL"] = json!(e);
    }
    let ca = &store["endpointCA"];
    if let Some(name) = ca["secretRef"]["name"].as_str().filter(|n| !n.is_empty()) {
        let key = ca["key"]
            .as_str()
            .filter(|k| !k.is_empty())
            .unwrap_or("ca.crt");
        out["endpointCA"] = json!({"name": name, "key": key});
    }
    let creds = &store["s3Credentials"];
    if creds.is_object() {
        let name = creds["secretRef"]["name"].as_str().unwrap_or_default();
        let ak = creds["accessKeyIDKey"]
            .as_str()
            .filter(|k| !k.is_empty())
            .unwrap_or("AWS_ACCESS_KEY_ID");
        let sk = creds["secretAccessKeyKey"]
            .as_str()
            .filter(|k| !k.is_empty())
            .unwrap_or("AWS_SECRET_ACCESS_KEY");
        out["s3Credentials"] = json!({
            "accessKeyId": {"name": name, "key": ak},
            "secretAccessKey": {"name": name, "key": sk},
        });
    }
    let nonempty = |v: &Json| v.as_str().is_some_and(|s| !s.is_empty());
    let wal = &store["wal"];
    if nonempty(&wal["compression"]) || nonempty(&wal["encryption"]) {
        let mut w = json!({});
        for k in ["compression", "encryption"] {
            if nonempty(&wal[k]) {
                w[k] = wal[k].clone();
            }
        }
        out["wal"] = w;
    }
    let data = &store["data"];
    if nonempty(&data["compression"]) || nonempty(&data["encryption"]) || data["jobs"].is_number() {
        let mut d = json!({});
        for k in ["compression", "encryption"] {
            if nonempty(&data[k]) {
                d[k] = data[k].clone();
            }
        }
        if data["jobs"].is_number() {
            d["jobs"] = data["jobs"].clone();
        }
        out["data"] = d;
    }
    out
}

/// The ObjectStore apply body: named after the Cluster, controlled by it, no serverName.
pub fn object_store(namespace: &str, cluster: &str, cluster_uid: &str, rendered: &Json) -> Json {
    let store = &rendered["barmanObjectStore"];
    let mut spec = json!({
        "configuration": barman_configuration(store),
        "instanceSidecarConfiguration": {
            "env": [{"name": "AWS_REQUEST_CHECKSUM_CALCULATION", "value": "when_required"}]
        },
    });
    if let Some(r) = store["retentionPolicy"].as_str().filter(|r| !r.is_empty()) {
        spec["retentionPolicy"] = json!(r);
    }
    json!({
        "apiVersion": "barmancloud.cnpg.io/v1",
        "kind": "ObjectStore",
        "metadata": {
            "name": cluster,
            "namespace": namespace,
            "ownerReferences": [{
                "apiVersion": "postgresql.cnpg.io/v1",
                "kind": "Cluster",
                "name": cluster,
                "uid": cluster_uid,
                "controller": true,
            }],
        },
        "spec": spec,
    })
}

/// The length in days of a barman `retentionPolicy` (`30d`, `4w`, `6m`; a month counts as 31
/// days, so comparisons err on the long side), `None` when it is not of that form.
pub fn policy_days(text: &str) -> Option<u64> {
    let unit = text.chars().last()?;
    let n: u64 = text[..text.len() - unit.len_utf8()].parse().ok()?;
    if n == 0 {
        return None;
    }
    n.checked_mul(match unit {
        'd' => 1,
        'w' => 7,
        'm' => 31,
        _ => return None,
    })
}

/// The `retentionPolicy` an ObjectStore carries given the strategy template's value and the
/// retention-cleaner's floor: the longer window. A floor that does not parse is ignored; a template
/// value that does not parse is kept unless a floor replaces it. `None` when neither is set.
pub fn effective_retention(template: Option<&str>, floor: Option<&str>) -> Option<String> {
    let template = template.filter(|t| !t.is_empty());
    let floor = floor.filter(|f| policy_days(f).is_some());
    match (template, floor) {
        (Some(t), Some(f)) if policy_days(t).is_some_and(|t| t >= policy_days(f).unwrap_or(0)) => {
            Some(t.to_owned())
        }
        (_, Some(f)) => Some(f.to_owned()),
        (t, None) => t.map(str::to_owned),
    }
}

/// Completes an ObjectStore apply body with the retention the live ObjectStore's floor asks for:
/// records the template's value in an annotation (the retention-cleaner merges with it) and sets
/// `spec.retentionPolicy` to the longer of the two.
pub fn with_retention_floor(mut store: Json, live: Option<&Json>) -> Json {
    use api::contract::annotations::{RETENTION_FLOOR, TEMPLATE_RETENTION_POLICY};
    let template = store["spec"]["retentionPolicy"].as_str().map(str::to_owned);
    let floor = live.and_then(|l| l["metadata"]["annotations"][RETENTION_FLOOR].as_str());
    store["metadata"]["annotations"] =
        json!({TEMPLATE_RETENTION_POLICY: template.clone().unwrap_or_default()});
    if let Some(policy) = effective_retention(template.as_deref(), floor) {
        store["spec"]["retentionPolicy"] = json!(policy);
    }
    store
}

/// The Cluster apply body: only the barman-cloud plugin entry.
pub fn cluster_plugins(namespace: &str, cluster: &str, server_name: &str) -> Json {
    let mut parameters = json!({"barmanObjectName": cluster});
    if !server_name.is_empty() {
        parameters["serverName"] = json!(server_name);
    }
    json!({
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": {"name": cluster, "namespace": namespace},
        "spec": {"plugins": [{
            "name": PLUGIN_NAME,
            "isWALArchiver": true,
            "parameters": parameters,
        }]},
    })
}

/// The plugin-method cnpg Backup of a job.
pub fn cnpg_backup(job_namespace: &str, job_name: &str, cluster: &str) -> Json {
    json!({
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Backup",
        "metadata": {
            "generateName": format!("{job_name}-"),
            "namespace": job_namespace,
            "labels": {
                labels::OWNED_BY_JOB_NAME: job_name,
                labels::OWNED_BY_JOB_NAMESPACE: job_namespace,
                labels::CNPG_CLUSTER: cluster,
            },
        },
        "spec": {
            "method": "plugin",
            "cluster": {"name": cluster},
            "pluginConfiguration": {"name": PLUGIN_NAME},
        },
    })
}

/// `(status.phase, status.error)` of a cnpg Backup.
pub fn backup_phase(backup: &Json) -> (String, String) {
    let s = |k: &str| backup["status"][k].as_str().unwrap_or_default().to_owned();
    (s("phase"), s("error"))
}

/// The source-spec snapshot stored in `Backup.status.underlyingResources`: the application's
/// databases and users and the route's parameters. Unlike upstream, user passwords are **not**
/// stored (tenants can read Backups); the restore path re-reads them from the source Secret or
/// lets the chart generate new ones, and still accepts upstream snapshots that carry them.
pub fn snapshot(app: &Json, parameters: &BTreeMap<String, String>) -> Json {
    let mut snap = json!({
        "kind": SNAPSHOT_KIND,
        "apiVersion": "backups.cozystack.io/v1alpha1",
    });
    let databases = &app["spec"]["databases"];
    if databases.as_object().is_some_and(|m| !m.is_empty()) {
        snap["databases"] = databases.clone();
    }
    if let Some(users) = app["spec"]["users"].as_object().filter(|m| !m.is_empty()) {
        let scrubbed: serde_json::Map<String, Json> = users
            .iter()
            .map(|(name, user)| {
                let mut user = user.clone();
                if let Some(u) = user.as_object_mut() {
                    u.remove("password");
                }
                (name.clone(), user)
            })
            .collect();
        snap["users"] = Json::Object(scrubbed);
    }
    if !parameters.is_empty() {
        snap["parameters"] = json!(parameters);
    }
    snap
}

/// What the catalog Backup of a completed cnpg Backup records.
#[derive(Debug, Clone, PartialEq)]
pub struct Completed<'a> {
    /// The cnpg Backup.
    pub cnpg_backup: &'a Json,
    /// The Cluster's name.
    pub cluster: &'a str,
    /// The effective server name.
    pub server_name: &'a str,
    /// The rendered strategy template.
    pub rendered: &'a Json,
}

/// The catalog Backup's `driverMetadata`, `artifact.uri` and `takenAt` (RFC 3339 or `None` for
/// "now") of a completed cnpg Backup.
pub fn catalog_fields(c: &Completed<'_>) -> (BTreeMap<String, String>, String, Option<String>) {
    let store = &c.rendered["barmanObjectStore"];
    let name = c.cnpg_backup["metadata"]["name"]
        .as_str()
        .unwrap_or_default();
    let s = |v: &Json| v.as_str().unwrap_or_default().to_owned();
    let mut md = BTreeMap::from([
        (keys::BACKUP_NAME.to_owned(), name.to_owned()),
        (keys::SERVER_NAME.to_owned(), c.server_name.to_owned()),
        (
            keys::DESTINATION_PATH.to_owned(),
            s(&store["destinationPath"]),
        ),
        (keys::ENDPOINT_URL.to_owned(), s(&store["endpointURL"])),
        (keys::CLUSTER_NAME.to_owned(), c.cluster.to_owned()),
    ]);
    if store["s3Credentials"].is_object() {
        md.insert(
            keys::S3_SECRET_REF.to_owned(),
            s(&store["s3Credentials"]["secretRef"]["name"]),
        );
    }
    let status = &c.cnpg_backup["status"];
    for (key, field) in [
        (keys::BACKUP_ID, "backupId"),
        (keys::BEGIN_WAL, "beginWal"),
        (keys::END_WAL, "endWal"),
        (keys::STOPPED_AT, "stoppedAt"),
    ] {
        if let Some(v) = status[field].as_str().filter(|v| !v.is_empty()) {
            md.insert(key.to_owned(), v.to_owned());
        }
    }
    let taken = status["startedAt"]
        .as_str()
        .filter(|t| !t.is_empty())
        .map(str::to_owned);
    (md, format!("cnpg://{}/{name}", c.server_name), taken)
}

/// The recoverable window known when a cnpg Backup completed: from the ObjectStore's first
/// recoverability point for the server (the oldest base backup still in the archive; this backup's
/// own stop time when the plugin has not reported one yet) to this backup's stop time (its end WAL
/// is archived; archiving continues after it).
pub fn recoverable_window(
    cnpg_backup: &Json,
    object_store: Option<&Json>,
    server_name: &str,
) -> Option<api::backups::RecoverableWindow> {
    let stopped = crate::catalog::time(&cnpg_backup["status"]["stoppedAt"])?;
    let first = object_store
        .and_then(|o| {
            crate::catalog::time(
                &o["status"]["serverRecoveryWindow"][server_name]["firstRecoverabilityPoint"],
            )
        })
        .filter(|f| f.0 <= stopped.0)
        .unwrap_or_else(|| stopped.clone());
    Some(api::backups::RecoverableWindow {
        from: Some(first),
        to: Some(stopped),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_object_store_carries_the_longer_of_template_and_floor() {
        let store = |retention: Option<&str>| {
            let mut s = json!({"metadata": {"name": "postgres-db"}, "spec": {}});
            if let Some(r) = retention {
                s["spec"]["retentionPolicy"] = json!(r);
            }
            s
        };
        let live = |floor: &str| json!({"metadata": {"annotations": {"backups.cozystack.io/retention-floor": floor}}});
        let cases = [
            (Some("30d"), None, Some("30d")),
            (Some("30d"), Some(live("45d")), Some("45d")),
            (Some("30d"), Some(live("12d")), Some("30d")),
            (Some("6w"), Some(live("42d")), Some("6w")),
            (Some("6w"), Some(live("43d")), Some("43d")),
            (None, Some(live("3d")), Some("3d")),
            (None, Some(live("soon")), None),
            (Some("bogus"), Some(live("3d")), Some("3d")),
            (None, None, None),
        ];
        for (template, live, want) in cases {
            let out = with_retention_floor(store(template), live.as_ref());
            assert_eq!(
                out["spec"]["retentionPolicy"].as_str(),
                want,
                "{template:?} {live:?}"
            );
            assert_eq!(
                out["metadata"]["annotations"]["backups.cozystack.io/template-retention-policy"],
                template.unwrap_or_default(),
                "the template's own value is recorded"
            );
        }
    }
    use pretty_assertions::assert_eq;

    #[test]
    fn app_refs_in_upstream_words() {
        let ok = api::TypedLocalObjectReference::new("", "Postgres", "db");
        assert_eq!(validate_app_ref(&ok), Ok(()));
        let r = api::TypedLocalObjectReference::new("apps.cozystack.io", "MariaDB", "db");
        assert_eq!(
            validate_app_ref(&r),
            Err("CNPG strategy supports applicationRef.kind=\"Postgres\", got \"MariaDB\"".into())
        );
        let r = api::TypedLocalObjectReference::new("other.example.com", "Postgres", "db");
        assert_eq!(
            validate_app_ref(&r),
            Err("CNPG strategy supports applicationRef.apiGroup=\"apps.cozystack.io\", got \"other.example.com\"".into())
        );
    }

    #[test]
    fn a_recovered_cluster_archives_under_a_name_of_its_own() {
        let recovered = json!({"metadata": {"name": "postgres-db", "uid": "0a1b2c3d-4e5f-6789"},
            "spec": {"bootstrap": {"recovery": {"source": "old"}}}});
        assert_eq!(archive_server_name(&recovered, "t-db"), "t-db-0a1b2c3d");
        let fresh =
            json!({"metadata": {"name": "postgres-db", "uid": "0a1b2c3d-4e5f"}, "spec": {}});
        assert_eq!(archive_server_name(&fresh, "t-db"), "t-db");
        let mut archiving = recovered.clone();
        archiving["spec"]["plugins"] =
            json!([{"name": PLUGIN_NAME, "parameters": {"serverName": "kept"}}]);
        assert_eq!(archive_server_name(&archiving, "t-db"), "kept");
    }

    #[test]
    fn the_live_plugin_keeps_its_server_name() {
        let c = |plugins: Json| json!({"metadata": {"name": "postgres-db"}, "spec": {"plugins": plugins}});
        assert_eq!(live_server_name(&c(json!([]))), None);
        assert_eq!(
            live_server_name(&c(
                json!([{"name": PLUGIN_NAME, "parameters": {"serverName": "old"}}])
            )),
            Some("old".into())
        );
        assert_eq!(
            live_server_name(&c(json!([{"name": PLUGIN_NAME, "parameters": {}}]))),
            Some("postgres-db".into()),
            "attached without a serverName: the Cluster's own name"
        );
        assert_eq!(
            live_server_name(&json!({"metadata": {"name": "x"}, "spec": {}})),
            None
        );
    }

    #[test]
    fn object_store_and_cluster_bodies_as_upstream_builds_them() {
        let rendered = json!({"barmanObjectStore": {
            "destinationPath": "s3://b/t/db/", "endpointURL": "https://s3.example.com",
            "endpointCA": {"secretRef": {"name": "ca"}},
            "s3Credentials": {"secretRef": {"name": "cozy-backups-creds"}},
            "retentionPolicy": "30d",
            "wal": {"compression": "gzip"}, "data": {"compression": "gzip", "encryption": ""}}});
        assert_eq!(
            object_store("t", "postgres-db", "uid-1", &rendered),
            json!({
                "apiVersion": "barmancloud.cnpg.io/v1", "kind": "ObjectStore",
                "metadata": {"name": "postgres-db", "namespace": "t",
                    "ownerReferences": [{"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
                                         "name": "postgres-db", "uid": "uid-1", "controller": true}]},
                "spec": {
                    "configuration": {
                        "destinationPath": "s3://b/t/db/", "endpointURL": "https://s3.example.com",
                        "endpointCA": {"name": "ca", "key": "ca.crt"},
                        "s3Credentials": {
                            "accessKeyId": {"name": "cozy-backups-creds", "key": "AWS_ACCESS_KEY_ID"},
                            "secretAccessKey": {"name": "cozy-backups-creds", "key": "AWS_SECRET_ACCESS_KEY"}},
                        "wal": {"compression": "gzip"},
                        "data": {"compression": "gzip"}},
                    "retentionPolicy": "30d",
                    "instanceSidecarConfiguration": {"env": [
                        {"name": "AWS_REQUEST_CHECKSUM_CALCULATION", "value": "when_required"}]}}
            })
        );
        assert_eq!(
            cluster_plugins("t", "postgres-db", "postgres-db")["spec"],
            json!({"plugins": [{"name": PLUGIN_NAME, "isWALArchiver": true,
                "parameters": {"barmanObjectName": "postgres-db", "serverName": "postgres-db"}}]})
        );
    }

    #[test]
    fn snapshots_keep_structure_without_passwords() {
        let app = json!({"spec": {
            "databases": {"orders": {"roles": {"admin": ["orders"]}}},
            "users": {"orders": {"password": "s3cret", "replication": false}}}});
        let params = BTreeMap::from([("bucket".to_owned(), "b".to_owned())]);
        assert_eq!(
            snapshot(&app, &params),
            json!({"kind": "CNPGBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1",
                   "databases": {"orders": {"roles": {"admin": ["orders"]}}},
                   "users": {"orders": {"replication": false}},
                   "parameters": {"bucket": "b"}})
        );
        assert_eq!(
            snapshot(&json!({"spec": {}}), &BTreeMap::new()),
            json!({"kind": "CNPGBackupSnapshot", "apiVersion": "backups.cozystack.io/v1alpha1"})
        );
    }

    #[test]
    fn the_window_runs_from_the_oldest_base_backup_to_this_ones_end() {
        let b = json!({"status": {"stoppedAt": "2026-01-02T00:00:09Z"}});
        let store = json!({"status": {"serverRecoveryWindow": {"s": {"firstRecoverabilityPoint": "2026-01-01T00:00:05Z"}}}});
        let w = recoverable_window(&b, Some(&store), "s").unwrap();
        assert_eq!(
            (w.from.unwrap().0.to_string(), w.to.unwrap().0.to_string()),
            ("2026-01-01T00:00:05Z".into(), "2026-01-02T00:00:09Z".into())
        );
        let w = recoverable_window(&b, None, "s").unwrap();
        assert_eq!(w.from, w.to, "no report yet: this backup alone");
        assert_eq!(recoverable_window(&json!({}), None, "s"), None);
    }

    #[test]
    fn catalog_fields_of_a_completed_backup() {
        let b = json!({"metadata": {"name": "job-abcde"}, "status": {
            "phase": "completed", "startedAt": "2026-01-01T00:00:00Z", "stoppedAt": "2026-01-01T00:00:09Z",
            "backupId": "20260101T000000", "beginWal": "000000010000000000000002", "endWal": "000000010000000000000003"}});
        let rendered = json!({"barmanObjectStore": {"destinationPath": "s3://b/p/", "s3Credentials": {"secretRef": {"name": "creds"}}}});
        let (md, uri, taken) = catalog_fields(&Completed {
            cnpg_backup: &b,
            cluster: "postgres-db",
            server_name: "postgres-db",
            rendered: &rendered,
        });
        assert_eq!(uri, "cnpg://postgres-db/job-abcde");
        assert_eq!(taken.as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(
            md,
            BTreeMap::from([
                ("cnpg.io/backup-name".into(), "job-abcde".into()),
                ("cnpg.io/server-name".into(), "postgres-db".into()),
                ("cnpg.io/destination-path".into(), "s3://b/p/".into()),
                ("cnpg.io/endpoint-url".into(), "".into()),
                ("cnpg.io/cluster-name".into(), "postgres-db".into()),
                ("cnpg.io/s3-secret-ref".into(), "creds".into()),
                ("cnpg.io/backup-id".into(), "20260101T000000".into()),
                (
                    "cnpg.io/begin-wal".into(),
                    "000000010000000000000002".into()
                ),
                ("cnpg.io/end-wal".into(), "000000010000000000000003".into()),
                ("cnpg.io/stopped-at".into(), "2026-01-01T00:00:09Z".into()),
            ])
        );
    }
}
