//! Helpers shared by the data-plane end-to-end tests: polling with a deadline, dynamic APIs,
//! `psql` and `kubectl` as a user would run them, and process checks.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::Harness;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::Value;

pub const TIMEOUT: Duration = Duration::from_secs(120);

pub async fn eventually<F, Fut, T>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + TIMEOUT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

pub fn api<K: kube::Resource<DynamicType = ()>>(h: &Harness, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(h.client(), ns, &ApiResource::erase::<K>(&()))
}

pub async fn apply(api: &Api<DynamicObject>, body: Value) {
    let name = body["metadata"]["name"].as_str().unwrap().to_owned();
    api.patch(
        &name,
        &PatchParams::apply("dataplane-test").force(),
        &Patch::Apply(&body),
    )
    .await
    .unwrap_or_else(|e| panic!("applying {name}: {e}"));
}

pub async fn get(api: &Api<DynamicObject>, name: &str) -> Option<Value> {
    api.get_opt(name)
        .await
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

pub async fn secret_data(h: &Harness, ns: &str, name: &str) -> Option<BTreeMap<String, String>> {
    let s = Api::<Secret>::namespaced(h.client(), ns)
        .get_opt(name)
        .await
        .unwrap()?;
    Some(
        s.data?
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8(v.0).unwrap()))
            .collect(),
    )
}

/// Runs SQL through `psql` with a connection URI, as a user would with the `-app` Secret.
pub fn psql(uri: &str, sql: &str) -> String {
    let out = std::process::Command::new("/usr/lib/postgresql/15/bin/psql")
        .args([
            uri,
            "-X",
            "-q",
            "-A",
            "-t",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            sql,
        ])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

pub async fn cluster_uri(h: &Harness, ns: &str, secret: &str) -> String {
    secret_data(h, ns, secret).await.unwrap()["uri"].clone()
}

pub async fn wait_healthy(h: &Harness, ns: &str, name: &str) {
    let clusters = api::<api::thirdparty::cnpg::Cluster>(h, ns);
    eventually(&format!("Cluster {name} healthy"), || {
        let clusters = clusters.clone();
        async move {
            let c = get(&clusters, name).await?;
            (c["status"]["phase"] == "Cluster in healthy state").then_some(())
        }
    })
    .await;
}

/// Processes whose command line mentions `dir` (PostgreSQL servers, barman commands).
pub fn processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.display().to_string();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(&needle) {
                found.push(text);
            }
        }
    }
    found
}

pub fn kubectl_logs(h: &Harness, ns: &str, pod: &str, container: &str) -> String {
    let out = std::process::Command::new("kubectl")
        .env("KUBECONFIG", h.kubeconfig_path())
        .env("KUBECACHEDIR", h.work_dir().join("kubecache"))
        .args(["-n", ns, "logs", pod, "-c", container])
        .output()
        .expect("kubectl");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Spawns `operator-sims` with these simulators (fast COSI, short recovery retries); returns the
/// data directory.
pub async fn spawn_sims(h: &mut Harness, sims: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec!["--cosi-delay-ms=10", "--cnpg-recovery-retry-ms=500"];
    args.extend(extra);
    h.spawn_dataplane(sims, &args).await.unwrap().data_dir
}
