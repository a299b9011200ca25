//! Stage three: the demos after start (`--no-demo` skips them) — the documentation's BackupJob and
//! point-in-time restore of Postgres, the failed-backup cleanup, the tenant's status through the
//! kubectl plugin (the MariaDB and Etcd demos are in [`crate::mariadb`] and [`crate::etcd`]) — and
//! the waits they share.

use std::time::Duration;

use anyhow::Context as _;
use kube::api::Api;

use crate::TENANT;

/// How long each of the MariaDB and Etcd demos may take before the plane ends with its error.
pub const DEMO_DEADLINE: Duration = Duration::from_secs(300);

/// The tenant's BackupJob from the documentation, applied as written.
pub const DEMO_BACKUPJOB: &str = "examples/backupjob.yaml";

/// Applies [`DEMO_BACKUPJOB`] (kept when it exists already), waits for it to end, and shows the
/// result: the job's phase, its catalog `Backup`, and barman-cloud's own listing of the bucket.
pub async fn demo_backup(
    client: &kube::Client,
    s3: &operator_sims::s3::Endpoints,
) -> anyhow::Result<()> {
    use api::backups::{Backup, BackupJob};
    use kube::api::PostParams;
    let path = harness::workspace_root().join(DEMO_BACKUPJOB);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let job: BackupJob =
        serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let ns = job.metadata.namespace.clone().unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    let jobs: Api<BackupJob> = Api::namespaced(client.clone(), &ns);
    match jobs.create(&PostParams::default(), &job).await {
        Ok(_) => println!("Demo: created BackupJob {ns}/{name} from {DEMO_BACKUPJOB}"),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            println!("Demo: BackupJob {ns}/{name} exists already")
        }
        Err(e) => return Err(e).context("creating the demo BackupJob"),
    }
    let job = wait_terminal(&jobs, &name, "backup-runner").await?;
    let status = job.status.clone().unwrap_or_default();
    let phase = status.phase.clone().unwrap_or_default();
    anyhow::ensure!(
        phase == api::contract::phases::SUCCEEDED,
        "BackupJob {ns}/{name} ended {phase}: {}",
        status.message.unwrap_or_default()
    );
    let backup_name = status.backup_ref.map(|r| r.name).unwrap_or_default();
    let backup = Api::<Backup>::namespaced(client.clone(), &ns)
        .get(&backup_name)
        .await
        .with_context(|| format!("reading Backup {ns}/{backup_name}"))?;
    let md = backup.spec.driver_metadata.clone().unwrap_or_default();
    let field = |k: &str| md.get(k).cloned().unwrap_or_default();
    println!("  BackupJob {ns}/{name}: {phase}");
    println!(
        "  Backup {ns}/{backup_name}: base backup {} in {} (WAL {} … {})",
        field("cnpg.io/backup-id"),
        field("cnpg.io/destination-path"),
        field("cnpg.io/begin-wal"),
        field("cnpg.io/end-wal"),
    );
    let listing = barman_listing(
        client,
        s3,
        &field("cnpg.io/destination-path"),
        &field("cnpg.io/server-name"),
    )
    .await?;
    anyhow::ensure!(
        listing.contains(&field("cnpg.io/backup-id")),
        "barman-cloud-backup-list does not show backup {}:\n{listing}",
        field("cnpg.io/backup-id")
    );
    println!("  barman-cloud-backup-list of the bucket:");
    for line in listing.lines() {
        println!("    {line}");
    }
    Ok(())
}

/// The documentation's point-in-time RestoreJob, applied with the recovery time replaced.
pub const DEMO_RESTOREJOB: &str = "examples/restorejob-pitr.yaml";

/// The seed's PITR scenario: a marker row, a recorded timestamp, a later row, the BackupJob
/// `orders-db-adhoc`, then [`DEMO_RESTOREJOB`] with that timestamp into `orders-db-copy`; prints
/// the copy's rows (the marker, not the later row). A restore that exists already is shown as is.
pub async fn demo_restore(
    client: &kube::Client,
    pg_bin_dir: &std::path::Path,
    orders_uri: &str,
) -> anyhow::Result<()> {
    use api::backups::{BackupJob, RestoreJob};
    use kube::api::PostParams;
    let path = harness::workspace_root().join(DEMO_RESTOREJOB);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut restore: RestoreJob =
        serde_yaml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let ns = restore.metadata.namespace.clone().unwrap_or_default();
    let name = restore.metadata.name.clone().unwrap_or_default();
    let restores: Api<RestoreJob> = Api::namespaced(client.clone(), &ns);
    if restores.get_opt(&name).await?.is_none() {
        let psql = |sql: &'static str| async move {
            let out = tokio::process::Command::new(pg_bin_dir.join("psql"))
                .args([
                    orders_uri,
                    "-X",
                    "-A",
                    "-t",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-c",
                    sql,
                ])
                .output()
                .await?;
            anyhow::ensure!(
                out.status.success(),
                "psql: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
        };
        psql("INSERT INTO orders (customer, amount) VALUES ('marker', 1.00)").await?;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let at = psql("SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')")
            .await?;
        tokio::time::sleep(Duration::from_millis(1100)).await;
        psql("INSERT INTO orders (customer, amount) VALUES ('after-marker', 2.00)").await?;
        println!("Demo: marker row written, recovery time {at}, one more row written");
        let backup = restore.spec.backup_ref.name.clone();
        let job: BackupJob = serde_json::from_value(serde_json::json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
            "metadata": {"name": backup, "namespace": ns},
            "spec": {"backupClassName": "cozy-default", "applicationRef": {
                "apiGroup": "apps.cozystack.io", "kind": "Postgres", "name": "orders-db"}}}))?;
        let jobs: Api<BackupJob> = Api::namespaced(client.clone(), &ns);
        match jobs.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).context("creating BackupJob orders-db-adhoc"),
        }
        let job = wait_terminal(&jobs, &backup, "backup-runner").await?;
        let phase = job.status.and_then(|s| s.phase).unwrap_or_default();
        anyhow::ensure!(
            phase == "Succeeded",
            "BackupJob {ns}/{backup} ended {phase}"
        );
        println!("  BackupJob {ns}/{backup}: {phase}");
        restore.spec.options = Some(serde_json::json!({"recoveryTime": at}));
        restores
            .create(&PostParams::default(), &restore)
            .await
            .context("creating the demo RestoreJob")?;
        println!("Demo: created RestoreJob {ns}/{name} from {DEMO_RESTOREJOB} (recoveryTime {at})");
    }
    let done = wait_terminal(&restores, &name, "restore-orchestrator").await?;
    let status = done.status.clone().unwrap_or_default();
    let phase = status.phase.clone().unwrap_or_default();
    anyhow::ensure!(
        phase == api::contract::phases::SUCCEEDED,
        "RestoreJob {ns}/{name} ended {phase}: {}",
        status.message.unwrap_or_default()
    );
    println!("  RestoreJob {ns}/{name}: {phase}");
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), &ns);
    let copy_uri = secrets
        .get("postgres-orders-db-copy-app")
        .await?
        .data
        .and_then(|d| {
            d.get("uri")
                .map(|u| String::from_utf8_lossy(&u.0).into_owned())
        })
        .context("postgres-orders-db-copy-app has no uri")?;
    let out = tokio::process::Command::new(pg_bin_dir.join("psql"))
        .args([
            copy_uri.as_str(),
            "-X",
            "-A",
            "-t",
            "-c",
            "SELECT string_agg(customer, ',' ORDER BY id) FROM orders",
        ])
        .output()
        .await?;
    println!(
        "  orders-db-copy rows: {}",
        String::from_utf8_lossy(&out.stdout).trim()
    );
    Ok(())
}

/// The failed BackupJob of the cleanup demo.
const TYPO_JOB: &str = "orders-db-typo";

/// The failed-backup cleanup, first half: a BackupJob naming an application that does not exist
/// fails at once. [`demo_failed_cleanup_seen`] then waits for its deletion (the other demos run
/// meanwhile: the dev TTL is 15 s).
pub async fn demo_failed_cleanup_start(client: &kube::Client) -> anyhow::Result<()> {
    use api::backups::BackupJob;
    use kube::api::PostParams;
    let (ns, name) = (TENANT, TYPO_JOB);
    let jobs: Api<BackupJob> = Api::namespaced(client.clone(), ns);
    let job: BackupJob = serde_json::from_value(serde_json::json!({
        "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"backupClassName": "cozy-default", "applicationRef": {
            "apiGroup": "apps.cozystack.io", "kind": "Postgres", "name": "orders-dbb"}}}))?;
    match jobs.create(&PostParams::default(), &job).await {
        Ok(_) => {
            let job = wait_terminal(&jobs, name, "backup-runner").await?;
            let status = job.status.unwrap_or_default();
            println!(
                "Demo: BackupJob {ns}/{name} (application orders-dbb does not exist): {}: {}",
                status.phase.unwrap_or_default(),
                status.message.unwrap_or_default()
            );
        }
        // Already there from an earlier run (or already cleaned up: then the Event shows).
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context("creating BackupJob orders-db-typo"),
    }
    Ok(())
}

/// The failed-backup cleanup, second half: the retention-cleaner deletes the failed BackupJob once
/// it outlived the dev TTL and says why in an Event.
pub async fn demo_failed_cleanup_seen(client: &kube::Client) -> anyhow::Result<()> {
    use api::backups::BackupJob;
    use k8s_openapi::api::events::v1::Event;
    use kube::api::ListParams;
    let (ns, name) = (TENANT, TYPO_JOB);
    let jobs: Api<BackupJob> = Api::namespaced(client.clone(), ns);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while jobs.get_opt(name).await?.is_some() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "BackupJob {ns}/{name} was not cleaned up within 90s (see .dev/logs/retention-cleaner.log)"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // The Event is written after the deletion (the recorder may still be sending it): wait for it
    // under the same deadline instead of printing an empty reason.
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let note = loop {
        let found = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some(api::contract::event_reasons::FAILED_BACKUP_EXPIRED)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            })
            .and_then(|e| e.note);
        if let Some(note) = found {
            break note;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "BackupJob {ns}/{name} was deleted but no {} Event names it within 90s (see .dev/logs/retention-cleaner.log)",
            api::contract::event_reasons::FAILED_BACKUP_EXPIRED
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    println!("  retention-cleaner deleted BackupJob {ns}/{name}: {note}");
    Ok(())
}

/// What a tenant sees after the demos: `kubectl cozy-backups status` (the cozy-backups-ctl binary)
/// of the example tenant, with the last backup and the PostgreSQL recoverable window per application.
pub fn demo_status(kubeconfig: &std::path::Path) -> anyhow::Result<()> {
    let bin = harness::locate_binary("cozy-backups-ctl")?;
    let out = std::process::Command::new(bin)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["status", "-n", TENANT])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "cozy-backups-ctl status: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    println!("Demo: kubectl cozy-backups status -n {TENANT}");
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        println!("  {line}");
    }
    Ok(())
}

/// Runs demo `what` with [`DEMO_DEADLINE`]: its own error, or that it did not end in time.
pub(crate) async fn within(
    what: &str,
    demo: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    match tokio::time::timeout(DEMO_DEADLINE, demo).await {
        Ok(r) => r.with_context(|| format!("{what} failed")),
        Err(_) => anyhow::bail!(
            "{what} did not finish within {}s (see the daemons' logs in .dev/logs/)",
            DEMO_DEADLINE.as_secs()
        ),
    }
}

/// Creates BackupJob `name` of application `kind`/`app` through `cozy-default` (or finds it from an
/// earlier run), says so under `title`, and waits for it to end; fails unless it succeeded.
pub(crate) async fn adhoc_backup_succeeded(
    client: &kube::Client,
    title: &str,
    (kind, app): (&str, &str),
    name: &str,
) -> anyhow::Result<()> {
    let jobs: Api<api::backups::BackupJob> = Api::namespaced(client.clone(), TENANT);
    let fresh = crate::created(
        &jobs,
        serde_json::json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "BackupJob",
            "metadata": {"name": name, "namespace": TENANT},
            "spec": {"backupClassName": "cozy-default", "applicationRef": {
                "apiGroup": "apps.cozystack.io", "kind": kind, "name": app}}}),
    )
    .await
    .with_context(|| format!("creating BackupJob {name}"))?;
    println!(
        "{title}: BackupJob {TENANT}/{name} of {app} {}",
        if fresh { "created" } else { "exists already" }
    );
    let job = wait_terminal(&jobs, name, "backup-runner").await?;
    let status = job.status.unwrap_or_default();
    let phase = status.phase.unwrap_or_default();
    anyhow::ensure!(
        phase == api::contract::phases::SUCCEEDED,
        "BackupJob {TENANT}/{name} ended {phase}: {}",
        status.message.unwrap_or_default()
    );
    println!("  BackupJob {TENANT}/{name}: {phase}");
    Ok(())
}

/// Waits for RestoreJob `name` to end and fails unless it succeeded.
pub(crate) async fn restore_succeeded(
    restores: &Api<api::backups::RestoreJob>,
    name: &str,
) -> anyhow::Result<()> {
    let done = wait_terminal(restores, name, "restore-orchestrator").await?;
    let status = done.status.unwrap_or_default();
    let phase = status.phase.unwrap_or_default();
    anyhow::ensure!(
        phase == api::contract::phases::SUCCEEDED,
        "RestoreJob {TENANT}/{name} ended {phase}: {}",
        status.message.unwrap_or_default()
    );
    println!("  RestoreJob {TENANT}/{name}: {phase}");
    Ok(())
}

/// Waits up to 180 s for a BackupJob or RestoreJob to reach a terminal phase.
pub(crate) async fn wait_terminal<K>(api: &Api<K>, name: &str, daemon: &str) -> anyhow::Result<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + HasPhase,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let obj = api.get(name).await?;
        if obj.terminal() {
            return Ok(obj);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{} {name} did not finish within 180s (see .dev/logs/{daemon}.log)",
            K::kind(&())
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A job with a terminal phase.
pub(crate) trait HasPhase {
    fn terminal(&self) -> bool;
}

impl HasPhase for api::backups::BackupJob {
    fn terminal(&self) -> bool {
        self.is_terminal()
    }
}

impl HasPhase for api::backups::RestoreJob {
    fn terminal(&self) -> bool {
        self.is_terminal()
    }
}

/// `barman-cloud-backup-list` of `destination`/`server` with the platform bucket's keys.
async fn barman_listing(
    client: &kube::Client,
    s3: &operator_sims::s3::Endpoints,
    destination: &str,
    server: &str,
) -> anyhow::Result<String> {
    use k8s_openapi::api::core::v1::Secret;
    let secret = Api::<Secret>::namespaced(client.clone(), "tenant-root")
        .get("bucket-cozy-backups-system-credentials")
        .await?;
    let key = |k: &str| -> anyhow::Result<String> {
        let v = secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .with_context(|| format!("the bucket credentials have no {k}"))?;
        Ok(String::from_utf8(v.0.clone())?)
    };
    let out = tokio::process::Command::new("barman-cloud-backup-list")
        .env("AWS_ACCESS_KEY_ID", key("accessKey")?)
        .env("AWS_SECRET_ACCESS_KEY", key("secretKey")?)
        .env("AWS_CA_BUNDLE", &s3.ca_file)
        .args(["--endpoint-url", &s3.https, destination, server])
        .output()
        .await
        .context("running barman-cloud-backup-list (hack/install-dataplane.sh installs it)")?;
    anyhow::ensure!(
        out.status.success(),
        "barman-cloud-backup-list: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
