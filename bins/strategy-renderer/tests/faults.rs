//! The renderer's main scenario (a fresh platform; COSI binds the bucket; every default object is
//! rendered, `cozy-default` turns Ready and Velero judges the BSL) under the seeded API fault
//! schedule with an API server restart in the middle: the same end state as without faults, no spin,
//! no crash, and the outage reported on `/ready`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use harness::faults::{self, RunStats};
use harness::{DaemonSpec, Harness, eventually_within};
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use serde_json::Value;

const RENDERER: &str = "strategy-renderer";
const TIMEOUT: Duration = harness::DEADLINE;
/// Settling under faults waits out retries with backoff.
const SETTLE: Duration = Duration::from_secs(90);
/// How long the settled platform is watched for requests that should not happen.
const QUIET: Duration = Duration::from_secs(2);

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

/// `Kind/[ns/]name` → spec and the Ready condition / phase of every object of the rendered kinds,
/// with the run's bucket name (it carries the BucketClaim's uid) replaced by `<bucket>`.
async fn end_state(client: &kube::Client) -> BTreeMap<String, Value> {
    read_end_state(client)
        .await
        .unwrap_or_else(|e| panic!("reading the end state: {e}"))
}

/// [`end_state`], or the first error: the test's own connections may be reset by the API
/// server outage the chaos run stages, so a wait for the settled state reads again.
async fn read_end_state(client: &kube::Client) -> Result<BTreeMap<String, Value>, kube::Error> {
    let claim: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "tenant-root",
        &ApiResource::erase::<api::thirdparty::cosi::BucketClaim>(&()),
    );
    let uid = claim
        .get_opt("bucket-cozy-backups")
        .await?
        .and_then(|c| c.metadata.uid)
        .unwrap_or_else(|| "-".into());
    let mut out = BTreeMap::new();
    for (kind, ar) in kinds() {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        for o in api.list(&ListParams::default()).await?.items {
            let ns = o
                .metadata
                .namespace
                .clone()
                .map(|n| n + "/")
                .unwrap_or_default();
            let v = serde_json::to_value(&o).unwrap();
            let ready = v["status"]["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .map(|c| {
                    (
                        c["status"].clone(),
                        c["reason"].clone(),
                        c["message"].clone(),
                    )
                });
            let summary = serde_json::json!({
                "spec": v["spec"], "ready": ready, "phase": v["status"]["phase"],
            })
            .to_string()
            .replace(&format!("bucket-{uid}"), "<bucket>");
            out.insert(
                format!("{kind}/{ns}{}", o.metadata.name.clone().unwrap()),
                serde_json::from_str(&summary).unwrap(),
            );
        }
    }
    Ok(out)
}

/// Every default object exists, rendered from COSI's endpoint, `cozy-default` is Ready and Velero
/// has judged the BSL. (The kinds are listed one after the other, so every object whose render
/// carries the endpoint is checked: a pass that rendered from a Secret without it is rewritten a
/// moment later.)
fn settled(state: &BTreeMap<String, Value>) -> bool {
    let ready = |k: &str| state.get(k).is_some_and(|o| o["ready"][0] == "True");
    state.len() == 13
        && ready("BackupClass/cozy-default")
        && state
            .get("MariaDB/cozy-default-mariadb")
            .is_some_and(|m| m["spec"]["template"]["storage"]["s3"]["endpoint"] == "s3.example.com")
        && state
            .get("FoundationDB/cozy-default-foundationdb")
            .is_some_and(|f| {
                f["spec"]["template"]["blobStoreConfiguration"]["accountName"] == "s3.example.com"
            })
        && state
            .get("BackupStorageLocation/cozy-velero/cozy-default")
            .is_some_and(|b| {
                b["spec"]["config"]["s3Url"] == "https://s3.example.com" && b["phase"].is_string()
            })
}

type Outcome = faults::Run<BTreeMap<String, Value>>;

async fn run(chaos: bool) -> Outcome {
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
    if chaos {
        h.set_chaos(Some(faults::schedule(&format!("{RENDERER}/"))))
            .unwrap();
    }
    let started = Instant::now();
    h.spawn_ready(renderer(), SETTLE).await.unwrap();
    h.spawn_ready(sims("cosi", "cosi"), TIMEOUT).await.unwrap();
    let outage = if chaos {
        h.api_server_outage(&[RENDERER], SETTLE).await.unwrap()
    } else {
        Vec::new()
    };
    let state = eventually_within("the platform settled", SETTLE, || {
        let client = client.clone();
        async move {
            let state = read_end_state(&client).await.ok()?;
            settled(&state).then_some(state)
        }
    })
    .await;
    // Watched for a while longer: a spinning renderer shows up in the request count.
    tokio::time::sleep(QUIET).await;
    let stats = RunStats::since(&h, RENDERER, started);
    assert_eq!(end_state(&client).await, state, "the settled state held");
    Outcome::finish(&mut h, RENDERER, state, stats, outage).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bootstrap_converges_under_api_faults_and_a_restart() {
    let calm = run(false).await;
    let faulty = run(true).await;
    pretty_assertions::assert_eq!(faulty.state, calm.state);
    faults::assert_survived(RENDERER, &calm, &faulty, 3);
}
