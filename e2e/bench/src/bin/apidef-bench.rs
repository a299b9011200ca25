//! Benchmark (not a test; `hack/bench/apidef/run.sh`): hashing 100 and 1,000 ApplicationDefinitions
//! with realistic schema sizes, and the latency from the end of the debounce window to the patched
//! annotation with the real daemon against the in-process emulator.

use harness::{DaemonSpec, Harness};
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// An openAPISchema of roughly `kb` kilobytes: nested properties with descriptions and enums, the
/// shape of the platform's application schemas.
fn schema(seed: usize, kb: usize) -> String {
    let mut props = serde_json::Map::new();
    let mut i = 0;
    while serde_json::to_string(&props).unwrap().len() < kb * 1024 {
        props.insert(
            format!("field{i}"),
            json!({
                "type": "object",
                "description": format!("Setting {i} of application {seed}: size, replicas & <storage> class."),
                "properties": {
                    "size": {"type": "string", "default": "10Gi", "pattern": "^[0-9]+(Gi|Mi)$"},
                    "replicas": {"type": "integer", "minimum": 1, "maximum": 9},
                    "mode": {"type": "string", "enum": ["standalone", "replicated", "sharded"]}
                }
            }),
        );
        i += 1;
    }
    json!({"type": "object", "properties": props}).to_string()
}

fn spec(i: usize, kb: usize) -> Value {
    json!({
        "application": {"kind": format!("App{i}"), "openAPISchema": schema(i, kb),
                        "plural": format!("app{i}s"), "singular": format!("app{i}")},
        "release": {"prefix": format!("app{i}-"), "labels": {"cozystack.io/ui": "true"},
                    "chartRef": {"kind": "ExternalArtifact", "name": format!("app{i}"), "namespace": "cozy-public"}},
        "secrets": {"include": [{"resourceNames": ["{{ .name }}-credentials"]}]},
        "dashboard": {"category": "Databases", "singular": format!("App {i}"), "plural": format!("Apps {i}"),
                      "tags": ["db"], "tabs": ["workloads", "secrets", "yaml"]}
    })
}

fn bench_hash(n: usize, kb: usize) {
    let specs: Vec<(String, Value)> = (0..n)
        .map(|i| (format!("app-{i:04}"), spec(i, kb)))
        .collect();
    let bytes = appdef::canonical_json(specs.iter().map(|(n, s)| (n.as_str(), Some(s))))
        .unwrap()
        .len();
    let rounds = if n >= 1000 { 5 } else { 30 };
    let mut times = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        std::hint::black_box(
            appdef::config_hash(specs.iter().map(|(n, s)| (n.as_str(), Some(s)))).unwrap(),
        );
        times.push(t.elapsed());
    }
    times.sort();
    let median = times[times.len() / 2];
    println!(
        "hash {n:>5} definitions (~{kb} KB schema each, {:.1} MB canonical): median {:>8.2} ms, min {:>8.2} ms, {:.0} MB/s",
        bytes as f64 / 1e6,
        median.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        bytes as f64 / 1e6 / median.as_secs_f64()
    );
}

async fn bench_patch_latency(defs: usize, rounds: usize) -> anyhow::Result<()> {
    let debounce = Duration::from_secs(1);
    let mut h = Harness::start().await?;
    let ns = h.temp_namespace("bench").await?;
    let client = h.client();
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &appdef::api_resource());
    for i in 0..defs {
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
            "metadata": {"name": format!("app-{i:04}")}, "spec": spec(i, 30)
        }))?;
        api.create(&PostParams::default(), &obj).await?;
    }
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "cozystack-api"},
                "spec": {"selector": {"matchLabels": {"app": "api"}},
                         "template": {"metadata": {"labels": {"app": "api"}},
                                      "spec": {"containers": [{"name": "api", "image": "api"}]}}}
            }))?,
        )
        .await?;
    let annotation = || async {
        deployments.get("cozystack-api").await.ok().and_then(|d| {
            d.spec?
                .template
                .metadata?
                .annotations?
                .get("cozystack.io/config-hash")
                .cloned()
        })
    };
    let bin = harness::locate_binary("apidef-restarter")?;
    h.spawn_ready(
        DaemonSpec::new("apidef-restarter", bin).args(["--namespace", &ns, "--debounce", "1s"]),
        Duration::from_secs(60),
    )
    .await?;
    let wait_change = |from: Option<String>| async move {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let now = annotation().await;
            if now.is_some() && now != from {
                return Ok::<Instant, anyhow::Error>(Instant::now());
            }
            anyhow::ensure!(Instant::now() < deadline, "no patch within 60 s");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    wait_change(None).await?;
    let mut latencies = Vec::new();
    for r in 0..rounds {
        let before = annotation().await;
        let patch = json!({"spec": {"application": {"openAPISchema": schema(10_000 + r, 30)}}});
        let edited = Instant::now();
        api.patch("app-0000", &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        let seen = wait_change(before).await?;
        latencies.push(seen.duration_since(edited).saturating_sub(debounce));
    }
    latencies.sort();
    println!(
        "patch latency after the {}s debounce ({defs} definitions, {rounds} edits, polled every 2 ms): min {:.1} ms, median {:.1} ms, max {:.1} ms",
        debounce.as_secs(),
        latencies[0].as_secs_f64() * 1e3,
        latencies[latencies.len() / 2].as_secs_f64() * 1e3,
        latencies[latencies.len() - 1].as_secs_f64() * 1e3
    );
    h.cleanup().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    bench_hash(100, 30);
    bench_hash(1000, 30);
    bench_patch_latency(100, 10).await
}
