//! The instance task of one Cluster: PVCs, then initdb or a recovery, then the primary (Pods,
//! Secrets, a healthy status, the ContinuousArchiving condition from its log), then serving until
//! the Cluster goes: following configuration changes and starting Backup jobs. Only instance 1 runs
//! PostgreSQL; instances 2..N are objects only.

use std::sync::Arc;

use api::thirdparty::cnpg::Cluster;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::Api;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::backup::BackupJob;
use super::shared::Shared;
use super::spec::recovery_source;
use super::{CLUSTER_LABEL, PHASE_HEALTHY, PHASE_SETTING_UP};
use crate::pg::{self, InstanceDir, Server, StartOptions, Toolchain};
use crate::podlog;

/// One Cluster's instance manager.
pub(super) struct Instance {
    pub(super) shared: Arc<Shared>,
    pub(super) ns: String,
    pub(super) name: String,
    pub(super) uid: String,
    pub(super) dir: InstanceDir,
}

/// What ends waiting for an instance step.
enum Interrupt {
    Stop,
}

impl Instance {
    pub(super) fn new(shared: Arc<Shared>, ns: String, name: String, uid: String) -> Self {
        let short: String = uid.chars().take(8).collect();
        let dir = InstanceDir {
            root: shared
                .options
                .root
                .join(&ns)
                .join(format!("{name}-{short}")),
        };
        Instance {
            shared,
            ns,
            name,
            uid,
            dir,
        }
    }

    pub(super) fn tc(&self) -> &Toolchain {
        &self.shared.options.toolchain
    }

    pub(super) fn cluster(&self) -> Option<Value> {
        self.shared
            .clusters
            .get(&self.ns, &self.name)
            .filter(|c| c["metadata"]["uid"] == self.uid.as_str())
    }

    pub(super) fn owner(&self) -> Value {
        json!([{
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": self.name,
            "uid": self.uid, "controller": true, "blockOwnerDeletion": true,
        }])
    }

    pub(super) async fn run(self, mut stop: watch::Receiver<bool>) {
        tracing::info!(
            namespace = self.ns,
            cluster = self.name,
            "instance starting"
        );
        let outcome = self.bring_up(&mut stop).await;
        match outcome {
            Ok(Some(server)) => self.serve(server, &mut stop).await,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(namespace = self.ns, cluster = self.name, error = %e, "instance failed");
                self.shared
                    .patch_status::<Cluster>(
                        &self.ns,
                        &self.name,
                        json!({"phase": "Cluster is unrecoverable and needs manual intervention",
                               "phaseReason": e}),
                    )
                    .await;
                let _ = stop.wait_for(|s| *s).await;
            }
        }
        self.dir.remove_all();
        tracing::info!(
            namespace = self.ns,
            cluster = self.name,
            "instance stopped and removed"
        );
    }

    async fn wait_or_stop<F: std::future::Future>(
        stop: &mut watch::Receiver<bool>,
        f: F,
    ) -> Result<F::Output, Interrupt> {
        tokio::select! {
            _ = stop.wait_for(|s| *s) => Err(Interrupt::Stop),
            v = f => Ok(v),
        }
    }

    pub(super) fn instances(&self) -> i64 {
        self.cluster()
            .and_then(|c| c["spec"]["instances"].as_i64())
            .unwrap_or(1)
            .max(1)
    }

    /// Creates the PVCs, then initdb or recovery; returns the running primary.
    async fn bring_up(&self, stop: &mut watch::Receiver<bool>) -> Result<Option<Server>, String> {
        let Some(cluster) = self.cluster() else {
            return Ok(None);
        };
        self.dir.create(self.tc()).map_err(|e| e.to_string())?;
        self.shared
            .patch_status::<Cluster>(
                &self.ns,
                &self.name,
                json!({"phase": PHASE_SETTING_UP, "instances": self.instances(),
                       "readyInstances": 0, "latestGeneratedNode": self.instances(),
                       "targetPrimary": format!("{}-1", self.name)}),
            )
            .await;
        self.create_pvcs(&cluster).await;
        if !cluster["spec"]["bootstrap"]["pg_basebackup"].is_null() {
            return Err("bootstrap.pg_basebackup is not supported by the simulator".into());
        }
        let recovery = recovery_source(&cluster);
        match recovery {
            Err(e) => Err(e),
            Ok(Some(source)) => {
                let mut attempt = 0u32;
                loop {
                    attempt += 1;
                    match Self::wait_or_stop(stop, self.recover(&source, attempt)).await {
                        Err(Interrupt::Stop) => return Ok(None),
                        Ok(true) => break,
                        Ok(false) => {
                            let pause = self.shared.options.recovery_retry;
                            if Self::wait_or_stop(stop, tokio::time::sleep(pause))
                                .await
                                .is_err()
                            {
                                return Ok(None);
                            }
                        }
                    }
                }
                self.start_primary(stop).await
            }
            Ok(None) => {
                self.dir
                    .initdb(self.tc())
                    .await
                    .map_err(|e| e.to_string())?;
                self.start_primary(stop).await
            }
        }
    }

    async fn create_pvcs(&self, cluster: &Value) {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.shared.client.clone(), &self.ns);
        let size = cluster["spec"]["storage"]["size"].as_str().unwrap_or("1Gi");
        for n in 1..=self.instances() {
            let instance = format!("{}-{n}", self.name);
            let mut spec = json!({
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": size}},
            });
            if let Some(sc) = cluster["spec"]["storage"]["storageClass"].as_str() {
                spec["storageClassName"] = json!(sc);
            }
            let pvc = json!({
                "metadata": {
                    "name": instance,
                    "labels": {CLUSTER_LABEL: self.name, "cnpg.io/instanceName": instance,
                               "cnpg.io/pvcRole": "PG_DATA"},
                    "ownerReferences": self.owner(),
                },
                "spec": spec,
            });
            if let Err(e) = podlog::create_owned(&api, pvc).await {
                tracing::warn!(error = %e, "creating a PVC failed");
            }
        }
    }

    /// Starts the primary with the archive settings, sets the app role up, writes Secrets, Pods
    /// and a healthy status.
    async fn start_primary(
        &self,
        stop: &mut watch::Receiver<bool>,
    ) -> Result<Option<Server>, String> {
        let port = pg::free_port().map_err(|e| e.to_string())?;
        let settings = vec![
            ("archive_mode".to_owned(), "on".to_owned()),
            (
                "archive_command".to_owned(),
                format!("{} %p", self.dir.root.join("bin/archive-wal").display()),
            ),
            ("archive_timeout".to_owned(), "5min".to_owned()),
        ];
        self.apply_archive_config();
        let (server, mut lines) =
            Server::start(self.tc(), &self.dir, port, &StartOptions { settings })
                .map_err(|e| e.to_string())?;
        let primary_pod = format!("{}-1", self.name);
        self.create_instance_pods().await;
        let (log, _sink) = podlog::sink(
            self.shared.client.clone(),
            self.ns.clone(),
            primary_pod,
            "postgres".into(),
        );
        // Wait for "ready to accept connections", forwarding the log.
        let mut last = std::collections::VecDeque::new();
        let ready = Self::wait_or_stop(stop, async {
            while let Some(line) = lines.recv().await {
                let ready = line.contains("database system is ready to accept connections");
                if last.len() == 3 {
                    last.pop_front();
                }
                last.push_back(line.clone());
                let _ = log.send(line);
                if ready {
                    return true;
                }
            }
            false
        })
        .await;
        match ready {
            Err(Interrupt::Stop) => {
                server.stop(self.tc()).await;
                return Ok(None);
            }
            Ok(false) => {
                // What the server said last says why (its whole log is the pod's).
                let said: Vec<String> = last.into_iter().collect();
                return Err(format!(
                    "PostgreSQL exited during start-up: {}",
                    said.join("; ")
                ));
            }
            Ok(true) => {}
        }
        // From now on the log lines also drive the ContinuousArchiving condition.
        let shared = self.shared.clone();
        let (ns, name) = (self.ns.clone(), self.name.clone());
        tokio::spawn(async move {
            let mut last_error: Vec<String> = Vec::new();
            while let Some(line) = lines.recv().await {
                if line.starts_with("cnpg-sim: archived WAL file") {
                    last_error.clear();
                    shared
                        .set_condition(
                            &ns,
                            &name,
                            json!({"type": "ContinuousArchiving", "status": "True",
                                   "reason": "ContinuousArchivingSuccess",
                                   "message": "Continuous archiving is working"}),
                        )
                        .await;
                } else if line.starts_with("cnpg-sim: failed to archive WAL file") {
                    let message = if last_error.is_empty() {
                        line.trim_start_matches("cnpg-sim: ").to_owned()
                    } else {
                        last_error.join("; ")
                    };
                    last_error.clear();
                    shared
                        .set_condition(
                            &ns,
                            &name,
                            json!({"type": "ContinuousArchiving", "status": "False",
                                   "reason": "ContinuousArchivingFailing", "message": message}),
                        )
                        .await;
                } else if line.contains("ERROR") && !line.contains("LOG:") {
                    // barman-cloud's own error lines (stderr of archive_command).
                    last_error.push(line.trim().to_owned());
                    if last_error.len() > 3 {
                        last_error.remove(0);
                    }
                }
                let _ = log.send(line);
            }
        });
        self.ensure_app_role_and_secrets(&server).await?;
        let instances = self.instances();
        let names: Vec<String> = (1..=instances)
            .map(|n| format!("{}-{n}", self.name))
            .collect();
        self.shared
            .set_condition(
                &self.ns,
                &self.name,
                json!({"type": "Ready", "status": "True", "reason": "ClusterIsReady",
                       "message": "Cluster is Ready"}),
            )
            .await;
        self.shared
            .patch_status::<Cluster>(
                &self.ns,
                &self.name,
                json!({
                    "phase": PHASE_HEALTHY,
                    "instances": instances,
                    "readyInstances": instances,
                    "currentPrimary": names[0],
                    "targetPrimary": names[0],
                    "instanceNames": names,
                    "writeService": format!("{}-rw", self.name),
                    "readService": format!("{}-r", self.name),
                    "instancesStatus": {"healthy": names},
                }),
            )
            .await;
        tracing::info!(
            namespace = self.ns,
            cluster = self.name,
            port,
            "instance healthy"
        );
        Ok(Some(server))
    }

    async fn create_instance_pods(&self) {
        for n in 1..=self.instances() {
            let pod = format!("{}-{n}", self.name);
            let role = if n == 1 { "primary" } else { "replica" };
            let body = json!({
                "metadata": {
                    "name": pod,
                    "labels": {CLUSTER_LABEL: self.name, "cnpg.io/instanceName": pod,
                               "cnpg.io/instanceRole": role, "role": role,
                               "cnpg.io/podRole": "instance"},
                    "ownerReferences": self.owner(),
                },
                "spec": {"containers": [{"name": "postgres",
                                         "image": "ghcr.io/cloudnative-pg/postgresql"}]},
            });
            if let Err(e) = podlog::create_pod(&self.shared.client, &self.ns, body).await {
                tracing::warn!(error = %e, "creating an instance pod failed");
            }
            if n > 1 {
                podlog::append(
                    &self.shared.client,
                    &self.ns,
                    &pod,
                    "postgres",
                    "cnpg-sim: simulated replica: no PostgreSQL process runs for this instance\n"
                        .into(),
                )
                .await;
            }
        }
    }

    /// The running primary: follows configuration changes, runs Backups, restarts a crashed
    /// server, until the Cluster goes.
    async fn serve(&self, mut server: Server, stop: &mut watch::Receiver<bool>) {
        let mut tick = self.shared.tick.subscribe();
        let backup_lock = Arc::new(tokio::sync::Mutex::new(()));
        let mut started: std::collections::BTreeSet<String> = Default::default();
        let endpoint = (self.dir.clone(), server.port);
        loop {
            if let Some(err) = self.apply_archive_config() {
                tracing::debug!(namespace = self.ns, cluster = self.name, error = %err, "archiving misconfigured");
            }
            for ((ns, name), backup) in self.shared.backups.snapshot() {
                if ns != self.ns
                    || backup["spec"]["cluster"]["name"] != self.name.as_str()
                    || !backup["status"]["phase"].as_str().unwrap_or("").is_empty()
                    || started.contains(&name)
                {
                    continue;
                }
                started.insert(name.clone());
                let job = BackupJob {
                    shared: self.shared.clone(),
                    ns,
                    name,
                    cluster: self.name.clone(),
                    cluster_uid: self.uid.clone(),
                    dir: endpoint.0.clone(),
                    port: endpoint.1,
                    lock: backup_lock.clone(),
                };
                tokio::spawn(job.run());
            }
            let exited = tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                r = tick.changed() => if r.is_err() { break } else { None },
                code = server.wait() => Some(code),
            };
            if let Some(code) = exited {
                tracing::warn!(
                    namespace = self.ns,
                    cluster = self.name,
                    code,
                    "PostgreSQL exited"
                );
                self.shared
                    .patch_status::<Cluster>(
                        &self.ns,
                        &self.name,
                        json!({"phase": "Failing over", "readyInstances": 0}),
                    )
                    .await;
                let _ = stop.wait_for(|s| *s).await;
                break;
            }
        }
        server.stop(self.tc()).await;
    }
}
