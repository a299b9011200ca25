//! The restarter's main scenario (the Deployment gets the definitions' hash; each of twelve spec
//! edits rolls it once more) under the seeded API fault schedule with an API server restart in
//! the middle: the same final annotation as without faults, never more rolls than without faults,
//! no spin, no crash, and the outage reported on `/ready`.

use std::time::{Duration, Instant};

use harness::faults::{self, RunStats};
use harness::{DaemonSpec, Harness, eventually_within};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;

const BIN: &str = "apidef-restarter";
const NS: &str = "cozy-system";
const DEPLOYMENT: &str = "cozystack-api";
const KEY: &str = "cozystack.io/config-hash";
/// Spec edits before and after the restart.
const EDITS: u32 = 6;
const SETTLE: Duration = Duration::from_secs(90);
/// How long the settled state is watched for requests that should not happen.
const QUIET: Duration = Duration::from_secs(2);

fn schema(revision: u32) -> String {
    json!({"type": "object", "properties": {"size": {"type": "string", "description": format!("revision {revision}")}}})
        .to_string()
}

async fn setup(client: &kube::Client) {
    let defs: Api<DynamicObject> = Api::all_with(client.clone(), &appdef::api_resource());
    for (name, kind) in [
        ("tcp-balancer", "TCPBalancer"),
        ("http-cache", "HTTPCache"),
        ("vm-disk", "VMDisk"),
    ] {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
            "metadata": {"name": name},
            "spec": {
                "application": {"kind": kind, "openAPISchema": schema(0),
                                "plural": format!("{}s", kind.to_lowercase()), "singular": kind.to_lowercase()},
                "release": {"prefix": format!("{name}-"),
                            "chartRef": {"kind": "ExternalArtifact", "name": name, "namespace": "cozy-public"}}
            }
        }))
        .unwrap();
        defs.create(&PostParams::default(), &obj).await.unwrap();
    }
    let d: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": DEPLOYMENT, "namespace": NS},
        "spec": {
            "selector": {"matchLabels": {"app": DEPLOYMENT}},
            "template": {
                "metadata": {"labels": {"app": DEPLOYMENT}},
                "spec": {"containers": [{"name": "api", "image": "cozystack-api:dev"}]}
            }
        }
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
}

async fn edit_spec(client: &kube::Client, name: &str, revision: u32) {
    let defs: Api<DynamicObject> = Api::all_with(client.clone(), &appdef::api_resource());
    let patch = json!({"spec": {"application": {"openAPISchema": schema(revision)}}});
    defs.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// `(annotation, generation)` of the Deployment.
async fn deployment(client: &kube::Client) -> (Option<String>, i64) {
    let d = Api::<Deployment>::namespaced(client.clone(), NS)
        .get(DEPLOYMENT)
        .await
        .unwrap();
    let generation = d.metadata.generation.unwrap_or(0);
    let annotation = d
        .spec
        .and_then(|s| s.template.metadata)
        .and_then(|m| m.annotations)
        .and_then(|a| a.get(KEY).cloned());
    (annotation, generation)
}

/// Waits until the annotation is the hash of the definitions as they are now.
async fn rolled(client: &kube::Client, what: &str) -> (String, i64) {
    let hash = appdef::config_hash_of(&appdef::list_all(client).await.unwrap()).unwrap();
    eventually_within(what, SETTLE, || async {
        match deployment(client).await {
            (Some(a), generation) if a == hash => Some((a, generation)),
            _ => None,
        }
    })
    .await
}

/// The end state: the Deployment's config-hash annotation and its generation (one per roll).
type Outcome = faults::Run<(String, i64)>;

async fn run(chaos: bool) -> Outcome {
    let mut h = Harness::start().await.unwrap();
    let client = h.client();
    h.create_namespaces(&[NS]).await.unwrap();
    setup(&client).await;
    if chaos {
        h.set_chaos(Some(faults::schedule(&format!("{BIN}/"))))
            .unwrap();
    }
    let started = Instant::now();
    let spec = DaemonSpec::new(BIN, harness::locate_binary(BIN).unwrap()).args([
        "--namespace",
        NS,
        "--debounce",
        "200ms",
        "--lease-endpoint",
        "none",
    ]);
    h.spawn_ready(spec, SETTLE).await.unwrap();
    rolled(&client, "the first roll").await;
    // Each edit is rolled before the next, so every one is a roll of its own.
    for revision in 1..=EDITS {
        edit_spec(&client, "http-cache", revision).await;
        rolled(&client, "the roll for an edit").await;
    }
    let outage = if chaos {
        h.api_server_outage(&[BIN], SETTLE).await.unwrap()
    } else {
        Vec::new()
    };
    // A client made before the restart may still pool a connection the old server closed; the
    // edits below are the test's, not the daemon's, so they go through a new one.
    let client = h.client();
    for revision in 1..EDITS {
        edit_spec(&client, "vm-disk", revision).await;
        rolled(&client, "the roll for an edit").await;
    }
    edit_spec(&client, "vm-disk", EDITS).await;
    let (annotation, generation) = rolled(&client, "the roll for the last edit").await;
    // Watched for a while longer: a spinning daemon shows up in the request count.
    tokio::time::sleep(QUIET).await;
    let stats = RunStats::since(&h, BIN, started);
    assert_eq!(
        deployment(&client).await,
        (Some(annotation.clone()), generation),
        "nothing rolled after the last edit"
    );
    Outcome::finish(&mut h, BIN, (annotation, generation), stats, outage).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolls_converge_under_api_faults_and_a_restart() {
    let calm = run(false).await;
    let faulty = run(true).await;
    assert_eq!(faulty.state.0, calm.state.0);
    assert_eq!(
        calm.state.1,
        2 + 2 * i64::from(EDITS),
        "one roll per edit without faults"
    );
    assert!(
        faulty.state.1 <= calm.state.1,
        "never more rolls than without faults: {} > {}",
        faulty.state.1,
        calm.state.1
    );
    // A quiet daemon (about 3 requests per roll): at 8 % a few faults, plus the watch cuts.
    assert!(faulty.counts.requests >= 30, "{:?}", faulty.counts);
    faults::assert_survived(BIN, &calm, &faulty, 2);
}
