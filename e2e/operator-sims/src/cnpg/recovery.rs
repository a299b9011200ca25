//! `bootstrap.recovery`: one attempt per `full-recovery` pod, from barman-cloud-backup-list to a
//! promoted server (and stopped again); the instance task retries after a pause when it fails.

use serde_json::json;
use tokio::sync::mpsc;

use super::instance::Instance;
use super::object_store::resolve_object_store;
use super::spec::{Controls, RecoverySource};
use super::{CLUSTER_LABEL, FIELD_MANAGER};
use crate::pg::{self, Server, StartOptions};
use crate::podlog;

impl Instance {
    /// One recovery attempt in a fresh `full-recovery` pod; true when the data directory is
    /// recovered and the server was promoted (and stopped again).
    pub(super) async fn recover(&self, source: &RecoverySource, attempt: u32) -> bool {
        let suffix = crate::cosi::random_key(b"bcdfghjklmnpqrstvwxz2456789", 5);
        let job = format!("{}-1-full-recovery", self.name);
        let pod = format!("{job}-{suffix}");
        let body = json!({
            "metadata": {
                "name": pod,
                "labels": {CLUSTER_LABEL: self.name, "cnpg.io/jobRole": "full-recovery",
                           "cnpg.io/instanceName": format!("{}-1", self.name), "job-name": job},
                "ownerReferences": self.owner(),
            },
            "spec": {"restartPolicy": "Never", "containers": [
                {"name": "full-recovery", "image": "ghcr.io/cloudnative-pg/postgresql"}]},
        });
        if let Err(e) = podlog::create_pod(&self.shared.client, &self.ns, body).await {
            tracing::warn!(error = %e, "creating the recovery pod failed");
        }
        let (log, sink) = podlog::sink(
            self.shared.client.clone(),
            self.ns.clone(),
            pod.clone(),
            "full-recovery".into(),
        );
        let say = |line: String| {
            let _ = log.send(format!("cnpg-sim: {line}"));
        };
        say(format!(
            "recovery attempt {attempt} from server {}",
            source.server_name
        ));
        let ok = self.recover_into(source, &say, &log).await;
        drop(log);
        let _ = sink.await;
        podlog::finish_pod(
            &self.shared.client,
            &self.ns,
            &pod,
            "full-recovery",
            if ok { 0 } else { 1 },
            FIELD_MANAGER,
        )
        .await;
        ok
    }

    async fn wait_unhung(&self) {
        let mut tick = self.shared.tick.subscribe();
        while self.cluster().is_some_and(|c| Controls::of(&c).hang) {
            if tick.changed().await.is_err() {
                return;
            }
        }
    }

    async fn recover_into(
        &self,
        source: &RecoverySource,
        say: &impl Fn(String),
        log: &mpsc::UnboundedSender<String>,
    ) -> bool {
        self.wait_unhung().await;
        let target_time = match &source.target_time {
            None => None,
            Some(t) => match pg::postgres_target_time(t) {
                Some(v) => Some(v),
                None => {
                    say(format!("invalid recoveryTarget.targetTime {t:?}"));
                    return false;
                }
            },
        };
        let resolved = match resolve_object_store(
            &self.shared.object_stores,
            &self.shared.secrets,
            &self.ns,
            &source.object_store,
        ) {
            Ok(r) => r,
            Err(e) => {
                say(format!(
                    "error while resolving the recovery object store: {e}"
                ));
                return false;
            }
        };
        let target = match self.shared.target(
            &self.dir,
            &source.object_store,
            &resolved,
            &source.server_name,
            &[],
        ) {
            Ok(t) => t,
            Err(e) => {
                say(e);
                return false;
            }
        };
        let backups = match pg::list_backups(self.tc(), &self.dir.root, &target).await {
            Ok(b) => b,
            Err(e) => {
                say(format!("while listing backups: {e}"));
                return false;
            }
        };
        let Some(backup) = pg::choose_backup(&backups, target_time.as_ref().map(|t| t.1)) else {
            say(format!(
                "no target backup found for server {} under {}{}",
                source.server_name,
                target.destination_path,
                source
                    .target_time
                    .as_ref()
                    .map(|t| format!(" ending at or before {t}"))
                    .unwrap_or_default()
            ));
            return false;
        };
        say(format!(
            "restoring base backup {} (ended {})",
            backup.backup_id,
            backup.end_time.as_deref().unwrap_or("?")
        ));
        if let Err(e) = self
            .dir
            .restore_base_backup(self.tc(), &target, &backup.backup_id)
            .await
        {
            say(e.to_string());
            return false;
        }
        let env = target.env_file(None);
        if let Err(e) = self.dir.write_private(self.tc(), "restore.env", &env) {
            say(e.to_string());
            return false;
        }
        let mut settings = vec![
            ("archive_mode".to_owned(), "off".to_owned()),
            (
                "restore_command".to_owned(),
                format!("{} %f %p", self.dir.root.join("bin/restore-wal").display()),
            ),
            ("recovery_target_action".to_owned(), "promote".to_owned()),
        ];
        if let Some((pg_time, _)) = &target_time {
            settings.push(("recovery_target_time".to_owned(), pg_time.clone()));
        }
        let port = match pg::free_port() {
            Ok(p) => p,
            Err(e) => {
                say(e.to_string());
                return false;
            }
        };
        let (mut server, mut lines) =
            match Server::start(self.tc(), &self.dir, port, &StartOptions { settings }) {
                Ok(s) => s,
                Err(e) => {
                    say(e.to_string());
                    return false;
                }
            };
        let mut promoted = false;
        while let Some(line) = lines.recv().await {
            let ready = line.contains("database system is ready to accept connections");
            let _ = log.send(line);
            if ready {
                promoted = true;
                break;
            }
        }
        if promoted {
            // Keep forwarding what the server says while it shuts down.
            let log = log.clone();
            let forward = tokio::spawn(async move {
                while let Some(line) = lines.recv().await {
                    let _ = log.send(line);
                }
            });
            server.stop(self.tc()).await;
            let _ = forward.await;
            say("recovery completed".into());
            self.dir.remove("restore.env");
            true
        } else {
            let code = server.wait().await;
            say(format!("postgres exited with code {code}"));
            false
        }
    }
}
