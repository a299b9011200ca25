//! Unit tests of the pure parts: what is read from a Cluster, ObjectStore resolution, the app
//! Secret.

use serde_json::{Value, json};

use super::*;
use crate::cache::Cache;

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
