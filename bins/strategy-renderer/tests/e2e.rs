//! End-to-end: the real `strategy-renderer` binary against the kube emulator, with the simulated
//! COSI provisioner and Velero (the `operator-sims` library) and the real credentials projector
//! (its library), all in the test process, driven and
//! checked with kubectl exactly as the admin documentation's verification commands are written.
//!
//! One scenario, in order: fresh control plane (Bucket + BackupClass only) → COSI binds the bucket
//! (all strategies + BSL) → seed commands → drift reverts → no-op evaluation writes nothing →
//! pruning when `bslEnabled` is turned off → invalid configuration keeps the last good render →
//! kill -9 and restart converge without writes.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use harness::{DaemonSpec, Harness};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(20);

fn renderer() -> DaemonSpec {
    DaemonSpec::new(
        "strategy-renderer",
        PathBuf::from(env!("CARGO_BIN_EXE_strategy-renderer")),
    )
    .args(["--log-level", "info"])
}

fn http_get(addr: &str, path: &str) -> (u16, String) {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    );
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    let code = body
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = body.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (code, body.to_owned())
}

/// The value of a metric line `name{labels} value` (the first whose prefix matches), or 0.
fn metric(addr: &str, prefix: &str) -> f64 {
    http_get(addr, "/metrics")
        .1
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

const RENDERS: &str = "cozy_backups_strategy_renderer_renders_total";

async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    while !f().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Waits until the renderer finished at least one more evaluation than `after` (a positive signal
/// that it evaluated, before asserting that nothing changed).
async fn evaluated_after(addr: &str, after: f64) {
    eventually("another evaluation", || async move {
        metric(addr, RENDERS) > after
    })
    .await;
}

fn kubectl(h: &Harness, args: &[&str]) -> String {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(h.kubeconfig_path())
        .args(args)
        .output()
        .expect("kubectl runs");
    assert!(
        out.status.success(),
        "kubectl {} failed:\nstdout: {}\nstderr: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn kinds() -> Vec<(&'static str, ApiResource)> {
    use api::strategy as s;
    vec![
        (
            "Bucket",
            ApiResource::erase::<api::thirdparty::apps::Bucket>(&()),
        ),
        (
            "BackupClass",
            ApiResource::erase::<api::backups::BackupClass>(&()),
        ),
        ("CNPG", ApiResource::erase::<s::CNPG>(&())),
        ("Etcd", ApiResource::erase::<s::Etcd>(&())),
        ("MariaDB", ApiResource::erase::<s::MariaDB>(&())),
        ("Altinity", ApiResource::erase::<s::Altinity>(&())),
        ("MongoDB", ApiResource::erase::<s::MongoDB>(&())),
        ("FoundationDB", ApiResource::erase::<s::FoundationDB>(&())),
        ("Velero", ApiResource::erase::<s::Velero>(&())),
        (
            "BackupStorageLocation",
            ApiResource::erase::<api::thirdparty::velero::BackupStorageLocation>(&()),
        ),
    ]
}

/// `Kind/[ns/]name` → resourceVersion of every object of the rendered kinds (ours and the admin's).
async fn all_rvs(client: &kube::Client) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (kind, ar) in kinds() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        for o in api.list(&ListParams::default()).await.unwrap().items {
            let ns = o
                .metadata
                .namespace
                .clone()
                .map(|n| n + "/")
                .unwrap_or_default();
            out.insert(
                format!("{kind}/{ns}{}", o.metadata.name.clone().unwrap()),
                o.metadata.resource_version.clone().unwrap(),
            );
        }
    }
    out
}

fn names(rvs: &BTreeMap<String, String>) -> Vec<&str> {
    rvs.keys().map(String::as_str).collect()
}

async fn get(client: &kube::Client, kind: &str, ns: Option<&str>, name: &str) -> Option<Value> {
    let ar = kinds().into_iter().find(|(k, _)| *k == kind).unwrap().1;
    let api: Api<DynamicObject> = match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &ar),
        None => Api::all_with(client.clone(), &ar),
    };
    api.get_opt(name)
        .await
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

fn ready_condition(class: &Value) -> Value {
    class["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
        .unwrap_or(Value::Null)
}

async fn set_config(client: &kube::Client, values: &str) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "cozy-backup-controller");
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "strategy-renderer-config"},
        "data": {"values.yaml": values},
    });
    api.patch(
        "strategy-renderer-config",
        &PatchParams::apply("e2e-admin").force(),
        &Patch::Apply(&cm),
    )
    .await
    .unwrap();
}

const FULL_SET: [&str; 13] = [
    "Altinity/cozy-default-altinity",
    "BackupClass/admin-class",
    "BackupClass/cozy-default",
    "BackupStorageLocation/cozy-velero/cozy-default",
    "Bucket/tenant-root/cozy-backups",
    "CNPG/admin-cnpg",
    "CNPG/cozy-default-cnpg",
    "Etcd/cozy-default-etcd",
    "FoundationDB/cozy-default-foundationdb",
    "MariaDB/cozy-default-mariadb",
    "MongoDB/cozy-default-mongodb",
    "Velero/cozy-default-velero-vmdisk",
    "Velero/cozy-default-velero-vminstance",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_seed_commands_drift_prune_invalid_config_and_restart() {
    let mut h = Harness::start().await.unwrap();
    let client = h.client();
    h.create_namespaces(&["tenant-root", "cozy-velero", "cozy-backup-controller"])
        .await
        .unwrap();
    // The simulated operators' CRDs, then Velero (COSI comes later, to observe the fresh state).
    let crds: Vec<_> = [operator_sims::Sim::Cosi, operator_sims::Sim::Velero]
        .iter()
        .flat_map(|s| s.crds())
        .collect();
    operator_sims::install_crds(&client, &crds).await.unwrap();
    let sims_readiness = runtime::Readiness::default();
    let velero = tokio::spawn(operator_sims::velero::run(
        client.clone(),
        sims_readiness.clone(),
    ));

    // Admin-owned objects the renderer must never touch.
    let admin = r#"{"apiVersion":"v1","kind":"List","items":[
      {"apiVersion":"backups.cozystack.io/v1alpha1","kind":"BackupClass","metadata":{"name":"admin-class"},
       "spec":{"strategies":[{"application":{"kind":"Postgres"},
         "strategyRef":{"apiGroup":"strategy.backups.cozystack.io","kind":"CNPG","name":"admin-cnpg"}}]}},
      {"apiVersion":"strategy.backups.cozystack.io/v1alpha1","kind":"CNPG","metadata":{"name":"admin-cnpg"},
       "spec":{"template":{"barmanObjectStore":{"destinationPath":"s3://mine/"}}}}]}"#;
    let admin_file = h.work_dir().join("admin.json");
    std::fs::write(&admin_file, admin).unwrap();
    kubectl(
        &h,
        &[
            "apply",
            "--server-side",
            "--validate=false",
            "-f",
            admin_file.to_str().unwrap(),
        ],
    );

    // 1. Fresh control plane: only the Bucket and the BackupClass.
    let d = h.spawn_ready(renderer(), TIMEOUT).await.unwrap();
    let addr = d.admin_addr.clone();
    evaluated_after(&addr, 0.0).await;
    let rvs = all_rvs(&client).await;
    assert_eq!(
        names(&rvs),
        [
            "BackupClass/admin-class",
            "BackupClass/cozy-default",
            "Bucket/tenant-root/cozy-backups",
            "CNPG/admin-cnpg",
        ]
    );
    let class = get(&client, "BackupClass", None, "cozy-default")
        .await
        .unwrap();
    let ready = ready_condition(&class);
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["reason"], "DefaultObjectsMissing");
    assert_eq!(
        ready["message"],
        "missing: Altinity/cozy-default-altinity, BackupStorageLocation/cozy-default, \
         CNPG/cozy-default-cnpg, Etcd/cozy-default-etcd, MariaDB/cozy-default-mariadb, \
         MongoDB/cozy-default-mongodb, Velero/cozy-default-velero-vmdisk, \
         Velero/cozy-default-velero-vminstance; waiting for BucketClaim \
         tenant-root/bucket-cozy-backups to report status.bucketName"
    );
    assert_eq!(
        metric(
            &addr,
            "cozystack_backup_default_objects_missing{backupclass=\"cozy-default\"}"
        ),
        8.0
    );

    // 2. The simulated COSI provisions the bucket: everything appears.
    let cosi = tokio::spawn(operator_sims::cosi::run(
        client.clone(),
        operator_sims::cosi::Options {
            delay: Duration::from_millis(100),
            endpoint: "s3.example.com".into(),
            s3: None,
        },
        sims_readiness.clone(),
    ));
    eventually("every default object and Ready=True", || {
        let client = client.clone();
        async move {
            let class = get(&client, "BackupClass", None, "cozy-default").await;
            all_rvs(&client).await.len() == FULL_SET.len()
                && class.is_some_and(|c| ready_condition(&c)["status"] == "True")
        }
    })
    .await;
    assert_eq!(
        metric(
            &addr,
            "cozystack_backup_default_objects_missing{backupclass=\"cozy-default\"}"
        ),
        0.0
    );
    let claim: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "tenant-root",
        &ApiResource::erase::<api::thirdparty::cosi::BucketClaim>(&()),
    );
    let claim = claim.get("bucket-cozy-backups").await.unwrap();
    let uid = claim.metadata.uid.clone().unwrap();
    let bsl = get(
        &client,
        "BackupStorageLocation",
        Some("cozy-velero"),
        "cozy-default",
    )
    .await
    .unwrap();
    assert_eq!(
        bsl["spec"],
        json!({
            "provider": "aws", "default": false,
            "objectStorage": {"bucket": format!("bucket-{uid}"), "prefix": "velero"},
            "credential": {"name": "cozy-backups-creds", "key": "cloud"},
            "config": {"region": "us-east-1", "s3ForcePathStyle": "true", "s3Url": "https://s3.example.com"},
        })
    );
    let mariadb = get(&client, "MariaDB", None, "cozy-default-mariadb")
        .await
        .unwrap();
    assert_eq!(
        mariadb["spec"]["template"]["storage"]["s3"]["endpoint"],
        "s3.example.com"
    );
    assert_eq!(
        mariadb["spec"]["template"]["storage"]["s3"]["tls"]["enabled"],
        true
    );

    // 3. The seed's verification commands, as written.
    let out = kubectl(&h, &["get", "backupclasses"]);
    assert!(
        out.contains("cozy-default") && out.contains("admin-class"),
        "{out}"
    );
    let out = kubectl(&h, &["get", "backupclass", "cozy-default", "-o", "yaml"]);
    assert!(
        out.contains("name: cozy-default-velero-vmdisk") && out.contains("type: Ready"),
        "{out}"
    );
    let out = kubectl(&h, &["-n", "tenant-root", "get", "bucket", "cozy-backups"]);
    assert!(out.contains("cozy-backups"), "{out}");
    let out = kubectl(
        &h,
        &[
            "-n",
            "tenant-root",
            "get",
            "secret",
            "bucket-cozy-backups-system-credentials",
        ],
    );
    assert!(
        out.contains("bucket-cozy-backups-system-credentials"),
        "{out}"
    );
    let out = kubectl(
        &h,
        &[
            "-n",
            "cozy-velero",
            "get",
            "backupstoragelocation",
            "cozy-default",
        ],
    );
    assert!(out.contains("cozy-default"), "{out}");
    // The real credentials projector (issue 5, in this process through its library; flags as in
    // the dev control plane) projects cozy-backups-creds with its `cloud` key into cozy-velero.
    let projector_args = <credentials_projector::Args as clap::Parser>::parse_from([
        "credentials-projector",
        "--kubeconfig",
        h.kubeconfig_path().to_str().unwrap(),
        "--admin-addr=127.0.0.1:0",
        "--log-level=warn",
        "--source-namespace=tenant-root",
        "--source-name=bucket-cozy-backups-system-credentials",
        "--endpoint=http://seaweedfs-s3.tenant-root.svc.cozy.local:8333",
        "--region=us-east-1",
        "--force-path-style=true",
        "--system-namespaces=cozy-velero",
    ]);
    let projector = tokio::spawn(credentials_projector::run(projector_args));
    kubectl(
        &h,
        &[
            "-n",
            "cozy-velero",
            "wait",
            "backupstoragelocation",
            "cozy-default",
            "--for=jsonpath={.status.phase}=Available",
            "--timeout=20s",
        ],
    );

    // 4. Drift: an edit, a deletion and a route removal are reverted at once.
    let admin_before: Vec<(String, String)> = all_rvs(&client)
        .await
        .into_iter()
        .filter(|(k, _)| k.contains("admin-"))
        .collect();
    kubectl(
        &h,
        &[
            "patch",
            "cnpgs.strategy.backups.cozystack.io",
            "cozy-default-cnpg",
            "--type=merge",
            "-p",
            r#"{"spec":{"template":{"barmanObjectStore":{"retentionPolicy":"7d"}}}}"#,
        ],
    );
    kubectl(
        &h,
        &[
            "delete",
            "etcds.strategy.backups.cozystack.io",
            "cozy-default-etcd",
        ],
    );
    kubectl(
        &h,
        &[
            "patch",
            "backupclass",
            "cozy-default",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/strategies/6"}]"#,
        ],
    );
    eventually("drift reverted", || {
        let client = client.clone();
        async move {
            let cnpg = get(&client, "CNPG", None, "cozy-default-cnpg").await;
            let etcd = get(&client, "Etcd", None, "cozy-default-etcd").await;
            let class = get(&client, "BackupClass", None, "cozy-default").await;
            cnpg.is_some_and(|c| {
                c["spec"]["template"]["barmanObjectStore"]["retentionPolicy"] == "30d"
            }) && etcd.is_some()
                && class
                    .is_some_and(|c| c["spec"]["strategies"].as_array().map(Vec::len) == Some(7))
        }
    })
    .await;
    assert!(
        metric(
            &addr,
            "cozy_backups_strategy_renderer_drift_reverts_total{kind=\"CNPG\"}"
        ) >= 1.0
    );

    // 5. An evaluation with nothing to change writes nothing.
    eventually("Ready back to True", || {
        let client = client.clone();
        async move {
            get(&client, "BackupClass", None, "cozy-default")
                .await
                .is_some_and(|c| ready_condition(&c)["status"] == "True")
        }
    })
    .await;
    let before = all_rvs(&client).await;
    let renders = metric(&addr, RENDERS);
    set_config(&client, "backupStorage:\n  region: us-east-1\n").await;
    evaluated_after(&addr, renders).await;
    assert_eq!(
        all_rvs(&client).await,
        before,
        "a no-op evaluation wrote something"
    );
    // And the emulator, like a real API server, keeps the resourceVersion of an identical forced
    // apply by our field manager (so even a redundant apply would not be a write).
    let class = get(&client, "BackupClass", None, "cozy-default")
        .await
        .unwrap();
    let classes: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<api::backups::BackupClass>(&()),
    );
    let same = json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupClass",
        "metadata": {"name": "cozy-default", "labels": class["metadata"]["labels"]},
        "spec": class["spec"],
    });
    let after = classes
        .patch(
            "cozy-default",
            &PatchParams::apply("strategy-renderer").force(),
            &Patch::Apply(&same),
        )
        .await
        .unwrap();
    assert_eq!(
        after.metadata.resource_version.as_deref(),
        class["metadata"]["resourceVersion"].as_str()
    );

    // 6. Pruning: bslEnabled off removes the BSL and the Velero strategies, keeps the routes.
    set_config(&client, "velero:\n  bslEnabled: false\n").await;
    eventually("Velero objects pruned", || {
        let client = client.clone();
        async move {
            let n = names(&all_rvs(&client).await)
                .into_iter()
                .filter(|k| k.starts_with("Velero/") || k.starts_with("BackupStorageLocation/"))
                .count();
            n == 0
        }
    })
    .await;
    let class = get(&client, "BackupClass", None, "cozy-default")
        .await
        .unwrap();
    assert_eq!(class["spec"]["strategies"].as_array().unwrap().len(), 7);
    let admin_after: Vec<(String, String)> = all_rvs(&client)
        .await
        .into_iter()
        .filter(|(k, _)| k.contains("admin-"))
        .collect();
    assert_eq!(admin_after, admin_before, "admin objects were touched");

    // 7. An invalid configuration: last good render kept, error named in /ready, log and Event.
    let before = all_rvs(&client).await;
    let renders = metric(&addr, RENDERS);
    set_config(&client, "backupStorage:\n  provisionBucket: maybe\n").await;
    evaluated_after(&addr, renders).await;
    let (code, ready) = http_get(&addr, "/ready");
    assert_eq!(code, 200, "{ready}");
    assert!(
        ready.contains("keeping the last good configuration")
            && ready.contains("backupStorage.provisionBucket"),
        "{ready}"
    );
    assert_eq!(
        metric(&addr, "cozy_backups_strategy_renderer_config_valid"),
        0.0
    );
    assert_eq!(all_rvs(&client).await, before);
    let log = h.daemon("strategy-renderer").unwrap().log();
    assert!(log.contains("backupStorage.provisionBucket"), "{log}");
    let events = kubectl(
        &h,
        &[
            "-n",
            "cozy-backup-controller",
            "get",
            "events",
            "-o",
            "json",
        ],
    );
    assert!(
        events.contains("InvalidConfiguration") && events.contains("backupStorage.provisionBucket"),
        "{events}"
    );
    let system_secret =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), "tenant-root")
            .get("bucket-cozy-backups-system-credentials")
            .await
            .unwrap();
    let secret_key = String::from_utf8(system_secret.data.unwrap()["secretKey"].0.clone()).unwrap();
    assert!(!log.contains(&secret_key), "a secret value reached the log");
    set_config(&client, "velero:\n  bslEnabled: false\n").await;
    eventually("configuration valid again", || {
        let addr = addr.clone();
        async move { metric(&addr, "cozy_backups_strategy_renderer_config_valid") == 1.0 }
    })
    .await;

    // 8. kill -9 and restart: converges with no write at all.
    let before = all_rvs(&client).await;
    h.restart("strategy-renderer", TIMEOUT).await.unwrap();
    let addr = h.daemon("strategy-renderer").unwrap().admin_addr.clone();
    evaluated_after(&addr, 0.0).await;
    assert_eq!(
        all_rvs(&client).await,
        before,
        "the restart wrote something"
    );

    cosi.abort();
    velero.abort();
    projector.abort();
    h.cleanup().await.unwrap();
}

/// Without Velero's CRD (a cluster without Velero) everything else still renders, `/ready` is 200,
/// and `cozy-default` names the BSL as missing (upstream's gate silently skips an unmapped kind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_velero_crd_does_not_block_the_other_objects() {
    let mut h = Harness::start().await.unwrap();
    let client = h.client();
    h.create_namespaces(&["tenant-root", "cozy-backup-controller"])
        .await
        .unwrap();
    operator_sims::install_crds(&client, &operator_sims::Sim::Cosi.crds())
        .await
        .unwrap();
    let cosi = tokio::spawn(operator_sims::cosi::run(
        client.clone(),
        operator_sims::cosi::Options {
            delay: Duration::from_millis(10),
            endpoint: "s3.example.com".into(),
            s3: None,
        },
        runtime::Readiness::default(),
    ));
    let d = h.spawn_ready(renderer(), TIMEOUT).await.unwrap();
    let addr = d.admin_addr.clone();
    eventually("strategies rendered, BSL reported missing", || {
        let client = client.clone();
        async move {
            let class = get(&client, "BackupClass", None, "cozy-default").await;
            get(&client, "Velero", None, "cozy-default-velero-vmdisk")
                .await
                .is_some()
                && class.is_some_and(|c| {
                    ready_condition(&c)["message"] == "missing: BackupStorageLocation/cozy-default"
                })
        }
    })
    .await;
    let (code, ready) = http_get(&addr, "/ready");
    assert_eq!(code, 200, "{ready}");
    assert!(
        ready.contains("ok watch BackupStorageLocation: kind not served"),
        "{ready}"
    );
    cosi.abort();
    h.cleanup().await.unwrap();
}
