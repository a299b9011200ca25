//! The controller: watches Clusters, Backups, ObjectStores and Secrets, starts one instance task per
//! live Cluster (by uid) and stops it when the Cluster goes; the [`Registry`] stops them all.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use api::thirdparty::barman::ObjectStore;
use api::thirdparty::cnpg::{Backup, Cluster};
use k8s_openapi::api::core::v1::Secret;
use kube::core::ApiResource;
use serde_json::Value;
use tokio::sync::{Notify, watch};

use super::Options;
use super::instance::Instance;
use super::shared::Shared;
use crate::cache::spawn_sanitized_watches;

/// Stops every instance when asked (the simulator's shutdown path).
#[derive(Clone, Default)]
pub struct Registry {
    tasks: Arc<Mutex<BTreeMap<String, InstanceHandle>>>,
}

struct InstanceHandle {
    stop: watch::Sender<bool>,
    done: watch::Receiver<bool>,
}

impl Registry {
    /// Stops every PostgreSQL process and removes every instance directory.
    pub async fn stop_all(&self) {
        let handles: Vec<InstanceHandle> =
            std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()))
                .into_values()
                .collect();
        for h in &handles {
            let _ = h.stop.send(true);
        }
        for mut h in handles {
            let _ = tokio::time::timeout(Duration::from_secs(25), h.done.wait_for(|d| *d)).await;
        }
    }
}

/// Runs the simulator forever.
pub async fn run(
    client: kube::Client,
    options: Options,
    registry: Registry,
    readiness: runtime::Readiness,
) -> anyhow::Result<()> {
    let notify = Arc::new(Notify::new());
    let (tick, _) = watch::channel(0u64);
    let shared = Arc::new(Shared {
        client: client.clone(),
        options,
        clusters: Arc::default(),
        backups: Arc::default(),
        object_stores: Arc::default(),
        secrets: Arc::default(),
        tick,
    });
    spawn_sanitized_watches(
        &client,
        &readiness,
        &notify,
        drop_managed_fields,
        vec![
            (
                &shared.clusters,
                ApiResource::erase::<Cluster>(&()),
                "cnpg: watch Cluster",
            ),
            (
                &shared.backups,
                ApiResource::erase::<Backup>(&()),
                "cnpg: watch Backup",
            ),
            (
                &shared.object_stores,
                ApiResource::erase::<ObjectStore>(&()),
                "cnpg: watch ObjectStore",
            ),
            (
                &shared.secrets,
                ApiResource::erase::<Secret>(&()),
                "cnpg: watch Secret",
            ),
        ],
    );
    loop {
        notify.notified().await;
        shared.tick.send_modify(|t| *t += 1);
        let clusters = shared.clusters.snapshot();
        let live: BTreeMap<String, (String, String)> = clusters
            .iter()
            .filter(|(_, c)| c["metadata"]["deletionTimestamp"].is_null())
            .filter_map(|((ns, name), c)| {
                c["metadata"]["uid"]
                    .as_str()
                    .map(|uid| (uid.to_owned(), (ns.clone(), name.clone())))
            })
            .collect();
        let mut tasks = registry.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|uid, handle| {
            let keep = live.contains_key(uid);
            if !keep {
                let _ = handle.stop.send(true);
            }
            keep
        });
        for (uid, (ns, name)) in live {
            if tasks.contains_key(&uid) {
                continue;
            }
            let (stop_tx, stop_rx) = watch::channel(false);
            let (done_tx, done_rx) = watch::channel(false);
            tasks.insert(
                uid.clone(),
                InstanceHandle {
                    stop: stop_tx,
                    done: done_rx,
                },
            );
            let instance = Instance::new(shared.clone(), ns, name, uid);
            tokio::spawn(async move {
                instance.run(stop_rx).await;
                let _ = done_tx.send(true);
            });
        }
    }
}

fn drop_managed_fields(v: &mut Value) {
    if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
}
