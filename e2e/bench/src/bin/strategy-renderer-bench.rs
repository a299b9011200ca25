//! Benchmark (not a test; run `hack/bench/strategy-renderer/run.sh`): how fast the real
//! `strategy-renderer` binary reacts, against the in-process kube emulator.
//!
//! 1. Bucket bind: over N fresh control planes (default 50), the time from BucketClaim
//!    `status.bucketName` being written to the last default object (8 strategies + BSL) being
//!    present, observed through watches.
//! 2. Config edit: on each of them, the time from a ConfigMap edit (`region`) to every rendered
//!    object carrying the new value.
//!
//! The report prints median/p90/min/max next to upstream's documented behaviour.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use harness::{DaemonSpec, Harness};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use kube::runtime::watcher;
use serde_json::json;

fn kinds() -> Vec<ApiResource> {
    use api::strategy as s;
    vec![
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

/// Every object's `(kind/name, region-or-"")` as watch events arrive.
fn object_stream(
    client: &kube::Client,
) -> impl futures::Stream<Item = (String, String)> + Unpin + use<> {
    let streams = kinds().into_iter().map(|ar| {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let kind = ar.kind.clone();
        watcher(api, watcher::Config::default())
            .filter_map(move |e| {
                let kind = kind.clone();
                async move {
                    match e {
                        Ok(watcher::Event::Apply(o)) | Ok(watcher::Event::InitApply(o)) => {
                            let v = serde_json::to_value(&o).unwrap_or_default();
                            let region = [
                                &v["spec"]["config"]["region"],
                                &v["spec"]["template"]["destination"]["s3"]["region"],
                                &v["spec"]["template"]["storage"]["s3"]["region"],
                            ]
                            .into_iter()
                            .find_map(|r| r.as_str())
                            .unwrap_or("")
                            .to_owned();
                            Some((
                                format!("{kind}/{}", o.metadata.name.unwrap_or_default()),
                                region,
                            ))
                        }
                        _ => None,
                    }
                }
            })
            .boxed()
    });
    futures::stream::select_all(streams)
}

struct Sample {
    bind: Duration,
    edit: Duration,
}

async fn one_run(bin: &std::path::Path) -> Sample {
    let mut h = Harness::start().await.expect("emulator");
    let client = h.client();
    h.create_namespaces(&["tenant-root", "cozy-velero", "cozy-backup-controller"])
        .await
        .expect("namespaces");
    let crds: Vec<_> = [operator_sims::Sim::Cosi, operator_sims::Sim::Velero]
        .iter()
        .flat_map(|s| s.crds())
        .collect();
    operator_sims::install_crds(&client, &crds).await.unwrap();
    let claims: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "tenant-root",
        &ApiResource::erase::<api::thirdparty::cosi::BucketClaim>(&()),
    );
    claims
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "objectstorage.k8s.io/v1alpha1", "kind": "BucketClaim",
                "metadata": {"name": "bucket-cozy-backups"}, "spec": {"protocols": ["s3"]},
            }))
            .unwrap(),
        )
        .await
        .unwrap();
    h.spawn_ready(
        DaemonSpec::new("strategy-renderer", bin.to_path_buf()),
        Duration::from_secs(30),
    )
    .await
    .expect("renderer ready");
    let mut events = object_stream(&client);
    // Let the watches establish before starting the clock: wait until the BackupClass exists, so
    // the renderer has evaluated once (nothing gated exists yet).
    let classes: Api<api::backups::BackupClass> = Api::all(client.clone());
    while classes.get_opt("cozy-default").await.unwrap().is_none() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let t0 = Instant::now();
    claims
        .patch_status(
            "bucket-cozy-backups",
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": {"bucketName": "bucket-bench", "bucketReady": true}})),
        )
        .await
        .unwrap();
    let mut seen = BTreeSet::new();
    while seen.len() < 9 {
        let (name, _) = events.next().await.expect("watch ends");
        seen.insert(name);
    }
    let bind = t0.elapsed();

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "cozy-backup-controller");
    let t1 = Instant::now();
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "strategy-renderer-config"},
            "data": {"values.yaml": "backupStorage:\n  region: eu-west-1\n"},
        }))
        .unwrap(),
    )
    .await
    .unwrap();
    // Etcd, MariaDB and the BSL carry the region.
    let mut updated = BTreeSet::new();
    while updated.len() < 3 {
        let (name, region) = events.next().await.expect("watch ends");
        if region == "eu-west-1" {
            updated.insert(name);
        }
    }
    let edit = t1.elapsed();
    h.cleanup().await.ok();
    Sample { bind, edit }
}

fn stats(mut v: Vec<Duration>) -> String {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "median {:7.1} ms   p90 {:7.1} ms   min {:7.1} ms   max {:7.1} ms",
        ms(p(0.5)),
        ms(p(0.9)),
        ms(v[0]),
        ms(v[v.len() - 1])
    )
}

#[tokio::main]
async fn main() {
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(50);
    let bin = harness::locate_binary("strategy-renderer").expect("build strategy-renderer first");
    println!(
        "strategy-renderer benchmark: {runs} fresh control planes, binary {}",
        bin.display()
    );
    let mut samples = Vec::new();
    for i in 0..runs {
        let s = one_run(&bin).await;
        if (i + 1) % 10 == 0 {
            println!("  {} runs done", i + 1);
        }
        samples.push(s);
    }
    println!();
    println!(
        "BucketClaim status.bucketName set -> last default object present (8 strategies + BSL):"
    );
    println!(
        "  ours:     {}",
        stats(samples.iter().map(|s| s.bind).collect())
    );
    println!(
        "  upstream: not before the default-objects gate's next check (first at leader start, then every 1 min),"
    );
    println!(
        "            which forces a Helm upgrade of backupstrategy-controller (throttled to one per 5 min) that then"
    );
    println!(
        "            renders and applies the chart; without the gate, the next HelmRelease interval (5 min)."
    );
    println!("configuration edit (backupStorage.region) -> every rendered object carries it:");
    println!(
        "  ours:     {}",
        stats(samples.iter().map(|s| s.edit).collect())
    );
    println!(
        "  upstream: Package edit -> platform HelmRelease -> child Package -> backupstrategy-controller HelmRelease,"
    );
    println!(
        "            each reconciled on Flux's schedule (HelmRelease interval 5 min) with a full Helm upgrade."
    );
}
