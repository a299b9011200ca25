//! Bad input, end to end: the real `strategy-renderer` against the emulator with the simulated COSI
//! provisioner and Velero. Once every default object is rendered, one run walks its configuration
//! ConfigMap through every broken shape of the table in [`cases`] (wrong types, unknown keys,
//! values it cannot use, text that is not YAML, huge and unicode values). Each must end in a
//! Warning Event `InvalidConfiguration` on the ConfigMap naming the key, with nothing rendered
//! changed (the last good configuration stays in force) and the admin's own objects untouched. A
//! good edit afterwards takes effect, and the renderer neither panics nor restarts.

use std::collections::BTreeMap;
use std::path::PathBuf;

use harness::{DaemonSpec, Harness, until};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::json;

const RENDERER: &str = "strategy-renderer";
const CONFIG_NS: &str = "cozy-backup-controller";
const CONFIG: &str = "strategy-renderer-config";
const RENDERS: &str = "cozy_backups_strategy_renderer_renders_total";

/// One broken `values.yaml` and the fragment its Event must carry.
struct Case {
    what: &'static str,
    values: String,
    fragment: String,
}

fn case(what: &'static str, values: &str, fragment: &str) -> Case {
    Case {
        what,
        values: values.into(),
        fragment: fragment.into(),
    }
}

fn cases() -> Vec<Case> {
    let long_bucket = "b".repeat(300);
    let huge_region = "r".repeat(600 * 1024);
    vec![
        case(
            "provisionBucket a string",
            "backupStorage:\n  provisionBucket: maybe\n",
            "backupStorage.provisionBucket: invalid type: string \"maybe\", expected a boolean",
        ),
        case(
            "forcePathStyle a number",
            "backupStorage:\n  forcePathStyle: 42\n",
            "backupStorage.forcePathStyle: invalid type",
        ),
        case(
            "systemNamespaces a string instead of a list",
            "backupStorage:\n  systemNamespaces: cozy-velero\n",
            "backupStorage.systemNamespaces: invalid type",
        ),
        case(
            "bslEnabled a list",
            "velero:\n  bslEnabled: [true]\n",
            "velero.bslEnabled: invalid type",
        ),
        case(
            "an unknown key in backupStorage (a typo)",
            "backupStorage:\n  bucketNmae: cozy-backups\n",
            "backupStorage.bucketNmae: unknown field",
        ),
        case(
            "an unknown top-level block",
            "velro:\n  namespace: cozy-velero\n",
            "velro",
        ),
        case(
            "backupStorage a list",
            "backupStorage: [1, 2]\n",
            "backupStorage: expected a mapping",
        ),
        case(
            "values.yaml that is not YAML",
            "backupStorage: {provisionBucket: true\n  - : :\n",
            "ConfigMap key values.yaml: ",
        ),
        case(
            "namespace not a namespace name (unicode)",
            "backupStorage:\n  namespace: tenant-röot\n",
            "backupStorage.namespace: must be a namespace name",
        ),
        case(
            "a namespace outside tenant-* with provisionBucket",
            "backupStorage:\n  namespace: default\n",
            "backupStorage.namespace: must be a tenant-* namespace",
        ),
        case(
            "bucketName empty",
            "backupStorage:\n  bucketName: ''\n",
            "backupStorage.bucketName: must not be empty",
        ),
        case(
            "bucketName of 300 characters",
            &format!("backupStorage:\n  bucketName: {long_bucket}\n"),
            "backupStorage.bucketName: must be a DNS label",
        ),
        case(
            "endpoint empty",
            "backupStorage:\n  endpoint: ''\n",
            "backupStorage.endpoint: must be a URL without whitespace, got \"\"",
        ),
        case(
            "endpoint with an emoji host and a space",
            "backupStorage:\n  endpoint: 'https://s3 🚀.example.com'\n",
            "backupStorage.endpoint: must be a URL without whitespace",
        ),
        case(
            "systemSecretName empty",
            "backupStorage:\n  systemSecretName: ''\n",
            "backupStorage.systemSecretName: must not be empty",
        ),
        case(
            "velero.namespace empty, with a 600 KiB region",
            &format!("backupStorage:\n  region: {huge_region}\nvelero:\n  namespace: ''\n"),
            "velero.namespace: must be a namespace name",
        ),
    ]
}

fn kinds() -> Vec<ApiResource> {
    use api::strategy as s;
    vec![
        ApiResource::erase::<api::thirdparty::apps::Bucket>(&()),
        ApiResource::erase::<api::backups::BackupClass>(&()),
        ApiResource::erase::<s::CNPG>(&()),
        ApiResource::erase::<s::Etcd>(&()),
        ApiResource::erase::<s::MariaDB>(&()),
        ApiResource::erase::<s::Altinity>(&()),
        ApiResource::erase::<s::MongoDB>(&()),
        ApiResource::erase::<s::FoundationDB>(&()),
        ApiResource::erase::<s::Velero>(&()),
        ApiResource::erase::<api::thirdparty::velero::BackupStorageLocation>(&()),
    ]
}

/// `Kind/[ns/]name` → resourceVersion of every object of the rendered kinds.
async fn all_rvs(client: &kube::Client) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for ar in kinds() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        for o in api.list(&ListParams::default()).await.unwrap().items {
            let ns = o.metadata.namespace.clone().unwrap_or_default();
            out.insert(
                format!("{}/{ns}/{}", ar.kind, o.metadata.name.clone().unwrap()),
                o.metadata.resource_version.clone().unwrap(),
            );
        }
    }
    out
}

async fn class_ready(client: &kube::Client) -> bool {
    let api: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &ApiResource::erase::<api::backups::BackupClass>(&()),
    );
    let Ok(Some(c)) = api.get_opt("cozy-default").await else {
        return false;
    };
    c.data["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
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

async fn renders(h: &mut Harness) -> f64 {
    let admin = h.daemon(RENDERER).unwrap().admin().await.unwrap();
    tokio::task::spawn_blocking(move || admin.metrics().value(RENDERS, &[]))
        .await
        .unwrap()
}

async fn set_config(h: &mut Harness, values: &str) {
    let before = renders(h).await;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": CONFIG},
                    "data": {"values.yaml": values}});
    Api::<ConfigMap>::namespaced(h.client(), CONFIG_NS)
        .patch(
            CONFIG,
            &PatchParams::apply("bad-input").force(),
            &Patch::Apply(&cm),
        )
        .await
        .unwrap_or_else(|e| panic!("the API server must accept the ConfigMap: {e}"));
    // A positive signal that the renderer evaluated this edit.
    let deadline = tokio::time::Instant::now() + harness::DEADLINE;
    while renders(h).await <= before {
        assert!(tokio::time::Instant::now() < deadline, "no evaluation");
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_configurations_end_in_named_events_and_keep_the_last_good_render() {
    let mut h = Harness::start().await.unwrap();
    let client = h.client();
    h.create_namespaces(&["tenant-root", "cozy-velero", CONFIG_NS])
        .await
        .unwrap();
    let crds: Vec<_> = [operator_sims::Sim::Cosi, operator_sims::Sim::Velero]
        .iter()
        .flat_map(|s| s.crds())
        .collect();
    operator_sims::install_crds(&client, &crds).await.unwrap();
    h.spawn_ready(sims("velero", "velero"), harness::DEADLINE)
        .await
        .unwrap();
    // An admin's own class, which the renderer must never touch.
    h.apply_yaml(
        None,
        "apiVersion: backups.cozystack.io/v1alpha1\nkind: BackupClass\nmetadata:\n  name: admin-class\n\
         spec:\n  strategies:\n    - application: {kind: Postgres}\n      strategyRef: \
         {apiGroup: strategy.backups.cozystack.io, kind: CNPG, name: admin-cnpg}\n",
    );
    h.spawn_ready(
        DaemonSpec::new(
            RENDERER,
            PathBuf::from(env!("CARGO_BIN_EXE_strategy-renderer")),
        ),
        harness::DEADLINE,
    )
    .await
    .unwrap();
    h.spawn_ready(sims("cosi", "cosi"), harness::DEADLINE)
        .await
        .unwrap();
    until("every default object rendered, cozy-default Ready", || {
        let client = client.clone();
        async move { class_ready(&client).await }
    })
    .await;
    set_config(&mut h, "velero:\n  bslEnabled: true\n").await;
    until("the render to settle", || {
        let client = client.clone();
        async move {
            let a = all_rvs(&client).await;
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            a == all_rvs(&client).await
        }
    })
    .await;
    let good = all_rvs(&client).await;

    let cases = cases();
    for c in &cases {
        set_config(&mut h, &c.values).await;
        harness::bad_input::settle(
            c.what,
            &format!("Warning InvalidConfiguration with {:.200}", c.fragment),
            harness::DEADLINE,
            || async {
                let events = h.events_about(CONFIG_NS, CONFIG).await;
                events
                    .iter()
                    .any(|(t, r, n)| {
                        t == "Warning" && r == "InvalidConfiguration" && n.contains(&c.fragment)
                    })
                    .then_some(())
                    .ok_or_else(|| format!("Events: {:.2000?}", events))
            },
        )
        .await;
        // The last good configuration stays in force: nothing rendered changed.
        assert_eq!(all_rvs(&client).await, good, "{}", c.what);
    }

    // A good edit after all of it takes effect.
    set_config(
        &mut h,
        "backupStorage:\n  region: eu-west-1\nvelero:\n  bslEnabled: true\n",
    )
    .await;
    let etcd = ApiResource::erase::<api::strategy::Etcd>(&());
    until("the region edit to be rendered", || {
        let client = client.clone();
        let etcd = etcd.clone();
        async move {
            let api: Api<DynamicObject> = Api::all_with(client, &etcd);
            api.get_opt("cozy-default-etcd")
                .await
                .ok()
                .flatten()
                .is_some_and(|o| o.data.to_string().contains("eu-west-1"))
        }
    })
    .await;
    let admin = all_rvs(&client).await;
    assert_eq!(
        admin.get("BackupClass//admin-class"),
        good.get("BackupClass//admin-class"),
        "the admin's class is never touched"
    );

    h.daemon(RENDERER).unwrap().assert_unharmed();
    h.cleanup().await.unwrap();
}
