//! Helpers shared by the data-plane end-to-end tests: polling with a deadline, dynamic APIs,
//! `psql` and `kubectl` as a user would run them, and process checks.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use harness::Harness;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

pub const TIMEOUT: Duration = harness::dataplane::DATAPLANE_DEADLINE;

/// Polls with the data plane's deadline.
pub async fn eventually<F, Fut, T>(what: &str, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    harness::eventually_within(what, TIMEOUT, f).await
}

pub fn api<K: kube::Resource<DynamicType = ()>>(h: &Harness, ns: &str) -> Api<DynamicObject> {
    h.dynamic::<K>(ns)
}

pub async fn apply(api: &Api<DynamicObject>, body: Value) {
    harness::dataplane::apply(api, body).await;
}

pub async fn get(api: &Api<DynamicObject>, name: &str) -> Option<Value> {
    api.get_opt(name)
        .await
        .unwrap()
        .map(|o| serde_json::to_value(o).unwrap())
}

pub async fn secret_data(h: &Harness, ns: &str, name: &str) -> Option<BTreeMap<String, String>> {
    h.secret_data(ns, name).await
}

pub use harness::dataplane::{processes_under, psql};

pub async fn cluster_uri(h: &Harness, ns: &str, secret: &str) -> String {
    secret_data(h, ns, secret).await.unwrap()["uri"].clone()
}

pub async fn wait_healthy(h: &Harness, ns: &str, name: &str) {
    h.healthy_cluster_uri(ns, name).await;
}

pub fn kubectl_logs(h: &Harness, ns: &str, pod: &str, container: &str) -> String {
    h.kubectl_logs(ns, pod, container)
}

/// Spawns `operator-sims` with these simulators (fast COSI, short recovery retries); returns the
/// data directory.
pub async fn spawn_sims(h: &mut Harness, sims: &str, extra: &[&str]) -> PathBuf {
    let mut args = vec!["--cosi-delay-ms=10", "--cnpg-recovery-retry-ms=500"];
    args.extend(extra);
    h.spawn_dataplane(sims, &args).await.unwrap().data_dir
}

/// Creates Bucket `name` (one `system` user) in `ns` and waits for its credentials (the data of
/// Secret `bucket-<name>-system-credentials`).
pub async fn bucket_credentials(h: &Harness, ns: &str, name: &str) -> BTreeMap<String, String> {
    apply(
        &api::<api::thirdparty::apps::Bucket>(h, ns),
        serde_json::json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Bucket",
               "metadata": {"name": name}, "spec": {"users": {"system": {}}}}),
    )
    .await;
    let secret = format!("bucket-{name}-system-credentials");
    eventually("the bucket credentials", || secret_data(h, ns, &secret)).await
}

/// Waits for cnpg Backup `name` to finish (phase `completed` or `failed`); returns its status.
pub async fn backup_finished(backups: &Api<DynamicObject>, name: &str) -> Value {
    eventually(&format!("Backup {name} finished"), || async move {
        let b = get(backups, name).await?;
        matches!(b["status"]["phase"].as_str(), Some("completed" | "failed"))
            .then(|| b["status"].clone())
    })
    .await
}

/// Waits until no process runs from under `dir` (no PostgreSQL outlives what owned it).
pub async fn no_processes_under(what: &str, dir: &std::path::Path) {
    eventually(what, || async move {
        processes_under(dir).is_empty().then_some(())
    })
    .await;
}

/// Switches PostgreSQL (superuser connection `admin`) to a new WAL segment and waits until that
/// segment is archived: everything committed before the call is in the bucket.
pub async fn archive_current_wal(what: &str, admin: &str) {
    let segment = psql(admin, "SELECT pg_walfile_name(pg_switch_wal())");
    eventually(what, || async {
        let last = psql(
            admin,
            "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver",
        );
        (last.as_str() >= segment.as_str()).then_some(())
    })
    .await;
}
