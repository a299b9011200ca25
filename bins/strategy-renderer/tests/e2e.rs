//! End-to-end: the real `strategy-renderer` binary against the kube emulator, with the simulated
//! COSI provisioner and Velero (the `operator-sims` binary) and the real credentials projector
//! binary, driven and checked with kubectl exactly as the admin documentation's verification
//! commands are written.
//!
//! Each behaviour is its own test over the same fixture ([`Env::bootstrapped`]: a platform whose
//! bucket COSI has bound and whose every default object exists).

use std::collections::BTreeMap;
use std::path::PathBuf;

use harness::{Admin, DaemonSpec, Harness, eventually, until};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

const TIMEOUT: std::time::Duration = harness::DEADLINE;
const RENDERS: &str = "cozy_backups_strategy_renderer_renders_total";
const MISSING: &str = "cozystack_backup_default_objects_missing";
const RENDERER: &str = "strategy-renderer";

fn renderer() -> DaemonSpec {
    DaemonSpec::new(
        RENDERER,
        PathBuf::from(env!("CARGO_BIN_EXE_strategy-renderer")),
    )
    .args(["--log-level", "info"])
}

fn sims(name: &str, which: &str) -> DaemonSpec {
    DaemonSpec::new(
        name,
        harness::locate_binary("operator-sims").expect("operator-sims is built"),
    )
    .args([
        format!("--sims={which}"),
        "--cosi-delay-ms=100".into(),
        "--cosi-endpoint=s3.example.com".into(),
    ])
}

fn projector() -> DaemonSpec {
    DaemonSpec::new(
        "credentials-projector",
        harness::locate_binary("credentials-projector").expect("credentials-projector is built"),
    )
    .args([
        "--log-level=warn",
        "--source-namespace=tenant-root",
        "--source-name=bucket-cozy-backups-system-credentials",
        "--endpoint=http://seaweedfs-s3.tenant-root.svc.cozy.local:8333",
        "--region=us-east-1",
        "--force-path-style=true",
        "--system-namespaces=cozy-velero",
    ])
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

/// Admin-owned objects the renderer must never touch (YAML as an admin pastes it).
const ADMIN_OBJECTS: &str = r#"
apiVersion: backups.cozystack.io/v1alpha1
kind: BackupClass
metadata:
  name: admin-class
spec:
  strategies:
    - application: {kind: Postgres}
      strategyRef: {apiGroup: strategy.backups.cozystack.io, kind: CNPG, name: admin-cnpg}
---
apiVersion: strategy.backups.cozystack.io/v1alpha1
kind: CNPG
metadata:
  name: admin-cnpg
spec:
  template:
    barmanObjectStore: {destinationPath: "s3://mine/"}
"#;

/// One test's control plane: emulator, the renderer and the simulated operators.
struct Env {
    h: Harness,
    client: kube::Client,
    admin: Admin,
}

impl Env {
    /// The emulator with the platform namespaces, the simulators' CRDs, Velero, the admin's own
    /// objects and the renderer (ready); COSI not started yet.
    async fn fresh() -> Env {
        let mut h = Harness::start().await.unwrap();
        let client = h.client();
        h.create_namespaces(&["tenant-root", "cozy-velero", "cozy-backup-controller"])
            .await
            .unwrap();
        let crds: Vec<_> = [operator_sims::Sim::Cosi, operator_sims::Sim::Velero]
            .iter()
            .flat_map(|s| s.crds())
            .collect();
        operator_sims::install_crds(&client, &crds).await.unwrap();
        h.spawn_ready(sims("velero", "velero"), TIMEOUT)
            .await
            .unwrap();
        h.apply_yaml(None, ADMIN_OBJECTS);
        let admin = h
            .spawn_ready(renderer(), TIMEOUT)
            .await
            .unwrap()
            .admin()
            .await
            .unwrap();
        let env = Env { h, client, admin };
        env.evaluated_after(0.0).await;
        env
    }

    /// [`Env::fresh`], then COSI binds the bucket and the platform settles: every default object
    /// exists with the COSI endpoint, Ready=True, and Velero has judged the BSL.
    async fn bootstrapped() -> Env {
        let mut env = Env::fresh().await;
        env.h
            .spawn_ready(sims("cosi", "cosi"), TIMEOUT)
            .await
            .unwrap();
        let client = env.client.clone();
        until(
            "every default object rendered from the bound bucket, Ready=True",
            || {
                let client = client.clone();
                async move { settled(&client).await }
            },
        )
        .await;
        env
    }

    fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.admin.metrics().value(name, labels)
    }

    /// Waits until the renderer finished at least one more evaluation than `after` (a positive
    /// signal that it evaluated, before asserting that nothing changed).
    async fn evaluated_after(&self, after: f64) {
        until("another evaluation", || async move {
            self.metric(RENDERS, &[]) > after
        })
        .await;
    }

    /// Applies the renderer's ConfigMap as an admin would and waits for the evaluation of it.
    async fn set_config(&self, values: &str) {
        let renders = self.metric(RENDERS, &[]);
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), "cozy-backup-controller");
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
        self.evaluated_after(renders).await;
    }

    async fn get(&self, kind: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        get(&self.client, kind, ns, name).await
    }
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

/// Every default object exists and is rendered from the COSI Secret's endpoint, `cozy-default` is
/// Ready, and Velero has written the BSL's phase: nothing is left for anyone to write.
async fn settled(client: &kube::Client) -> bool {
    let class = get(client, "BackupClass", None, "cozy-default").await;
    let mariadb = get(client, "MariaDB", None, "cozy-default-mariadb").await;
    let bsl = get(
        client,
        "BackupStorageLocation",
        Some("cozy-velero"),
        "cozy-default",
    )
    .await;
    names(&all_rvs(client).await) == FULL_SET
        && class.is_some_and(|c| ready_condition(&c)["status"] == "True")
        && mariadb
            .is_some_and(|m| m["spec"]["template"]["storage"]["s3"]["endpoint"] == "s3.example.com")
        && bsl.is_some_and(|b| {
            b["spec"]["config"]["s3Url"] == "https://s3.example.com"
                && b["status"]["phase"].is_string()
        })
}

fn admin_rvs(rvs: BTreeMap<String, String>) -> Vec<(String, String)> {
    rvs.into_iter()
        .filter(|(k, _)| k.contains("admin-"))
        .collect()
}

/// A fresh control plane has only the Bucket and the BackupClass, and (like upstream's
/// default-objects gate) reports just the missing credentials Secret; once COSI binds the bucket
/// everything renders, the seed's verification commands work as written, and the real projector
/// makes the BSL Available.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_renders_everything_once_the_bucket_is_bound() {
    let mut env = Env::fresh().await;
    assert_eq!(
        names(&all_rvs(&env.client).await),
        [
            "BackupClass/admin-class",
            "BackupClass/cozy-default",
            "Bucket/tenant-root/cozy-backups",
            "CNPG/admin-cnpg",
        ]
    );
    let class = env.get("BackupClass", None, "cozy-default").await.unwrap();
    let ready = ready_condition(&class);
    assert_eq!(
        (&ready["status"], &ready["reason"], &ready["message"]),
        (
            &json!("False"),
            &json!("DefaultObjectsMissing"),
            &json!(
                "missing: Secret/bucket-cozy-backups-system-credentials; waiting for BucketClaim \
                 tenant-root/bucket-cozy-backups to report status.bucketName"
            )
        )
    );
    assert_eq!(env.metric(MISSING, &[("backupclass", "cozy-default")]), 1.0);

    env.h
        .spawn_ready(sims("cosi", "cosi"), TIMEOUT)
        .await
        .unwrap();
    let client = env.client.clone();
    until(
        "every default object rendered from the bound bucket, Ready=True",
        || {
            let client = client.clone();
            async move { settled(&client).await }
        },
    )
    .await;
    assert_eq!(env.metric(MISSING, &[("backupclass", "cozy-default")]), 0.0);
    let claim: Api<DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        "tenant-root",
        &ApiResource::erase::<api::thirdparty::cosi::BucketClaim>(&()),
    );
    let uid = claim
        .get("bucket-cozy-backups")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    let bsl = env
        .get("BackupStorageLocation", Some("cozy-velero"), "cozy-default")
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
    let mariadb = env
        .get("MariaDB", None, "cozy-default-mariadb")
        .await
        .unwrap();
    let s3 = &mariadb["spec"]["template"]["storage"]["s3"];
    assert_eq!(
        (&s3["endpoint"], &s3["tls"]["enabled"]),
        (&json!("s3.example.com"), &json!(true))
    );

    // The seed's verification commands, as written.
    let out = env.h.kubectl(&["get", "backupclasses"]);
    assert!(
        out.contains("cozy-default") && out.contains("admin-class"),
        "{out}"
    );
    let out = env
        .h
        .kubectl(&["get", "backupclass", "cozy-default", "-o", "yaml"]);
    assert!(
        out.contains("name: cozy-default-velero-vmdisk") && out.contains("type: Ready"),
        "{out}"
    );
    let out = env
        .h
        .kubectl(&["-n", "tenant-root", "get", "bucket", "cozy-backups"]);
    assert!(out.contains("cozy-backups"), "{out}");
    let out = env.h.kubectl(&[
        "-n",
        "tenant-root",
        "get",
        "secret",
        "bucket-cozy-backups-system-credentials",
    ]);
    assert!(
        out.contains("bucket-cozy-backups-system-credentials"),
        "{out}"
    );
    let out = env.h.kubectl(&[
        "-n",
        "cozy-velero",
        "get",
        "backupstoragelocation",
        "cozy-default",
    ]);
    assert!(out.contains("cozy-default"), "{out}");
    // The real credentials projector (flags as in the dev control plane) projects
    // cozy-backups-creds with its `cloud` key into cozy-velero: the BSL turns Available.
    env.h.spawn_ready(projector(), TIMEOUT).await.unwrap();
    env.h.kubectl(&[
        "-n",
        "cozy-velero",
        "wait",
        "backupstoragelocation",
        "cozy-default",
        "--for=jsonpath={.status.phase}=Available",
        "--timeout=20s",
    ]);
    env.h.cleanup().await.unwrap();
}

/// The Secret names the bucket (as COSI's BucketInfo does) while the BucketClaim has no
/// `status.bucketName` yet: as upstream's default-objects gate, the gauge counts the routed objects
/// (the bucket comes from the Secret), and without Velero the Velero routes and the BSL are not
/// counted; the renderer itself keeps waiting for the claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gauge_counts_routed_objects_once_the_secret_names_the_bucket() {
    let mut env = Env::fresh().await;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(env.client.clone(), "tenant-root");
    let renders = env.metric(RENDERS, &[]);
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "bucket-cozy-backups-system-credentials"},
        "stringData": {"BucketInfo": json!({"spec": {"bucketName": "bucket-4f2a",
            "secretS3": {"endpoint": "s3.example.com", "accessKeyID": "AK",
                         "accessSecretKey": "SK"}}}).to_string()},
    });
    secrets
        .patch(
            "bucket-cozy-backups-system-credentials",
            &PatchParams::apply("e2e-admin").force(),
            &Patch::Apply(&secret),
        )
        .await
        .unwrap();
    env.evaluated_after(renders).await;
    let gauge = || env.metric(MISSING, &[("backupclass", "cozy-default")]);
    until("the gauge to count the routed objects", || async move {
        gauge() == 8.0
    })
    .await;
    let class = env.get("BackupClass", None, "cozy-default").await.unwrap();
    let ready = ready_condition(&class);
    assert_eq!(
        (&ready["status"], &ready["message"]),
        (
            &json!("False"),
            &json!(
                "missing: Altinity/cozy-default-altinity, BackupStorageLocation/cozy-default, \
                 CNPG/cozy-default-cnpg, Etcd/cozy-default-etcd, MariaDB/cozy-default-mariadb, \
                 MongoDB/cozy-default-mongodb, Velero/cozy-default-velero-vmdisk, \
                 Velero/cozy-default-velero-vminstance; waiting for BucketClaim \
                 tenant-root/bucket-cozy-backups to report status.bucketName"
            )
        )
    );
    // Still nothing but the Bucket and the BackupClass rendered: the render waits for the claim.
    assert_eq!(
        names(&all_rvs(&env.client).await),
        [
            "BackupClass/admin-class",
            "BackupClass/cozy-default",
            "Bucket/tenant-root/cozy-backups",
            "CNPG/admin-cnpg",
        ]
    );
    env.set_config("velero:\n  bslEnabled: false\n").await;
    until(
        "the gauge to leave Velero out",
        || async move { gauge() == 5.0 },
    )
    .await;
    env.h.cleanup().await.unwrap();
}

/// An edit, a deletion and a route removal of rendered objects are reverted at once; the admin's
/// own objects are untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_is_reverted_at_once() {
    let mut env = Env::bootstrapped().await;
    let admin_before = admin_rvs(all_rvs(&env.client).await);
    env.h.kubectl(&[
        "patch",
        "cnpgs.strategy.backups.cozystack.io",
        "cozy-default-cnpg",
        "--type=merge",
        "-p",
        r#"{"spec":{"template":{"barmanObjectStore":{"retentionPolicy":"7d"}}}}"#,
    ]);
    env.h.kubectl(&[
        "delete",
        "etcds.strategy.backups.cozystack.io",
        "cozy-default-etcd",
    ]);
    env.h.kubectl(&[
        "patch",
        "backupclass",
        "cozy-default",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/strategies/6"}]"#,
    ]);
    let client = env.client.clone();
    until("drift reverted", || {
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
        env.metric(
            "cozy_backups_strategy_renderer_drift_reverts_total",
            &[("kind", "CNPG")]
        ) >= 1.0
    );
    assert_eq!(admin_rvs(all_rvs(&env.client).await), admin_before);
    env.h.cleanup().await.unwrap();
}

/// An evaluation with nothing to change writes nothing; and the emulator, like a real API server,
/// keeps the resourceVersion of an identical forced apply by our field manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evaluation_with_nothing_to_change_writes_nothing() {
    let mut env = Env::bootstrapped().await;
    let before = all_rvs(&env.client).await;
    env.set_config("backupStorage:\n  region: us-east-1\n")
        .await;
    assert_eq!(
        all_rvs(&env.client).await,
        before,
        "a no-op evaluation wrote something"
    );
    let class = env.get("BackupClass", None, "cozy-default").await.unwrap();
    let classes: Api<DynamicObject> = Api::all_with(
        env.client.clone(),
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
    env.h.cleanup().await.unwrap();
}

/// `velero.bslEnabled: false` prunes the BSL and the Velero strategies and keeps the routes and
/// the admin's objects; `backupStorage.forcePathStyle` reaches the BSL as the chart quotes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn configuration_changes_prune_and_rerender() {
    let mut env = Env::bootstrapped().await;
    let admin_before = admin_rvs(all_rvs(&env.client).await);

    env.set_config("backupStorage:\n  forcePathStyle: false\n")
        .await;
    let style = env.h.kubectl(&[
        "-n",
        "cozy-velero",
        "get",
        "backupstoragelocation",
        "cozy-default",
        "-o",
        "jsonpath={.spec.config.s3ForcePathStyle}",
    ]);
    assert_eq!(style, "false");

    env.set_config("velero:\n  bslEnabled: false\n").await;
    let client = env.client.clone();
    until("Velero objects pruned", || {
        let client = client.clone();
        async move {
            !names(&all_rvs(&client).await)
                .into_iter()
                .any(|k| k.starts_with("Velero/") || k.starts_with("BackupStorageLocation/"))
        }
    })
    .await;
    let class = env.get("BackupClass", None, "cozy-default").await.unwrap();
    assert_eq!(class["spec"]["strategies"].as_array().unwrap().len(), 7);
    assert_eq!(
        admin_rvs(all_rvs(&env.client).await),
        admin_before,
        "admin objects were touched"
    );
    env.h.cleanup().await.unwrap();
}

/// An invalid configuration keeps the last good render; the error names the key in `/ready`, the
/// log and an Event; a valid one takes over again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_configuration_keeps_the_last_good_render() {
    let mut env = Env::bootstrapped().await;
    let before = all_rvs(&env.client).await;
    env.set_config("backupStorage:\n  provisionBucket: maybe\n")
        .await;
    let (code, ready) = env.admin.get("/ready");
    assert_eq!(code, 200, "{ready}");
    assert!(
        ready.contains("keeping the last good configuration")
            && ready.contains("backupStorage.provisionBucket"),
        "{ready}"
    );
    assert_eq!(
        env.metric("cozy_backups_strategy_renderer_config_valid", &[]),
        0.0
    );
    assert_eq!(all_rvs(&env.client).await, before);
    let log = env.h.daemon(RENDERER).unwrap().log();
    assert!(log.contains("backupStorage.provisionBucket"), "{log}");
    let events = env.h.kubectl(&[
        "-n",
        "cozy-backup-controller",
        "get",
        "events",
        "-o",
        "json",
    ]);
    assert!(
        events.contains("InvalidConfiguration") && events.contains("backupStorage.provisionBucket"),
        "{events}"
    );
    env.set_config("velero:\n  bslEnabled: true\n").await;
    assert_eq!(
        env.metric("cozy_backups_strategy_renderer_config_valid", &[]),
        1.0
    );
    env.h.cleanup().await.unwrap();
}

/// kill -9 and restart: the renderer converges without a single write, and no credential value
/// reached its log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_renderer_converges_without_writes() {
    let mut env = Env::bootstrapped().await;
    let before = all_rvs(&env.client).await;
    env.h.restart(RENDERER, TIMEOUT).await.unwrap();
    env.admin = env.h.daemon(RENDERER).unwrap().admin().await.unwrap();
    env.evaluated_after(0.0).await;
    assert_eq!(
        all_rvs(&env.client).await,
        before,
        "the restart wrote something"
    );
    let secret = eventually("the COSI credentials Secret", || async {
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(env.client.clone(), "tenant-root")
            .get_opt("bucket-cozy-backups-system-credentials")
            .await
            .unwrap()
    })
    .await;
    let values: Vec<String> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .filter(|(k, _)| k.contains("ecret") || k.contains("ccess"))
        .map(|(_, v)| String::from_utf8_lossy(&v.0).into_owned())
        .collect();
    assert!(!values.is_empty());
    let log = env.h.daemon(RENDERER).unwrap().log();
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    harness::leak::assert_no_leaks(&[("renderer log", &log)], &values);
    env.h.assert_no_secret_leaks(&values, &[]);
    env.h.cleanup().await.unwrap();
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
    h.spawn_ready(sims("cosi", "cosi"), TIMEOUT).await.unwrap();
    let admin = h
        .spawn_ready(renderer(), TIMEOUT)
        .await
        .unwrap()
        .admin()
        .await
        .unwrap();
    until("strategies rendered, BSL reported missing", || {
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
    let (code, ready) = admin.get("/ready");
    assert_eq!(code, 200, "{ready}");
    assert!(
        ready.contains("ok watch BackupStorageLocation: kind not served"),
        "{ready}"
    );
    h.cleanup().await.unwrap();
}
