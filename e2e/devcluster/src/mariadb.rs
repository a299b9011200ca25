//! The example tenant's MariaDB applications and the MariaDB demo.
//!
//! ```text
//! seed:  MariaDB shop-db ─► operator MariaDB mariadb-shop-db (what the chart renders) ─► mariadbd
//!        └► Secret mariadb-shop-db-credentials (root, host, port) ─► `mariadb` over TCP:
//!           database shop, table orders, three rows (INSERT IGNORE: once)
//!        MariaDB shop-db-copy ─► mariadb-shop-db-copy (empty: the restore-to-copy target)
//! demo:  BackupJob shop-db-adhoc ─► the dump in the bucket
//!        ─► RestoreJob shop-db-to-copy (targetApplicationRef shop-db-copy) ─► copy's rows
//!        ─► a row changed in shop-db ─► RestoreJob shop-db-in-place ─► shop-db's rows
//! ```
//!
//! Jobs that exist already (a `--persist` snapshot) are shown as they are, not run again.

use std::time::Duration;

use anyhow::Context as _;
use kube::api::Api;
use serde_json::json;

use crate::{TENANT, created};

/// The seeded MariaDB application with sample rows.
pub const APP: &str = "shop-db";
/// The seeded, empty MariaDB application the demo restores into.
pub const COPY: &str = "shop-db-copy";
/// The sample rows (idempotent: the primary key keeps a second run from adding rows).
pub const SAMPLE_SQL: &str = "CREATE DATABASE IF NOT EXISTS shop; \
     CREATE TABLE IF NOT EXISTS shop.orders (id int PRIMARY KEY, item varchar(64) NOT NULL); \
     INSERT IGNORE INTO shop.orders VALUES (1, 'apples'), (2, 'pears'), (3, 'plums')";
/// The query the demo prints the rows with.
pub const ROWS_SQL: &str = "SELECT GROUP_CONCAT(item ORDER BY id) FROM shop.orders";
/// How long the servers may take to accept connections.
const READY: Duration = Duration::from_secs(90);

/// The operator `MariaDB` the Cozystack chart renders for application `app`.
pub fn server(app: &str) -> String {
    format!("mariadb-{app}")
}

/// Creates the applications and the operator MariaDBs their chart would render (existing ones are
/// kept).
pub async fn create(client: &kube::Client) -> anyhow::Result<()> {
    use api::thirdparty::{apps, mariadb};
    let apps = crate::dynamic::<apps::MariaDB>(client);
    let servers = crate::dynamic::<mariadb::MariaDB>(client);
    for app in [APP, COPY] {
        let body = json!({
            "apiVersion": "apps.cozystack.io/v1alpha1", "kind": "MariaDB",
            "metadata": {"name": app, "namespace": TENANT},
            "spec": {"replicas": 1, "size": "1Gi"},
        });
        created(&apps, body)
            .await
            .with_context(|| format!("creating MariaDB {app}"))?;
        let name = server(app);
        let body = json!({
            "apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "MariaDB",
            "metadata": {"name": name, "namespace": TENANT},
            "spec": {"replicas": 1, "rootPasswordSecretKeyRef": {
                "name": format!("{name}-credentials"), "key": "root"}},
        });
        created(&servers, body)
            .await
            .with_context(|| format!("creating k8s.mariadb.com MariaDB {name}"))?;
    }
    Ok(())
}

/// Where a server listens and its root password, as its Secret says.
#[derive(Debug, Clone)]
pub struct Conn {
    /// The server's name (for messages).
    pub server: String,
    /// Host.
    pub host: String,
    /// TCP port.
    pub port: String,
    /// root's password.
    pub password: String,
}

impl Conn {
    /// Runs `sql` with the `mariadb` client over TCP as root (the password in the environment,
    /// never in argv); answers its output, trimmed.
    pub async fn sql(&self, sql: &str) -> anyhow::Result<String> {
        let out = tokio::process::Command::from(harness::dataplane::mariadb_command(
            &self.host,
            &self.port,
            &self.password,
            sql,
        ))
        .output()
        .await
        .context("running mariadb (hack/install-dataplane.sh installs it)")?;
        anyhow::ensure!(
            out.status.success(),
            "mariadb on {} ({}:{}): {}",
            self.server,
            self.host,
            self.port,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// The rows of `shop.orders`, joined by commas.
    pub async fn rows(&self) -> anyhow::Result<String> {
        self.sql(ROWS_SQL).await
    }
}

/// Waits for application `app`'s server to be Ready and answers its connection.
pub async fn conn(client: &kube::Client, app: &str) -> anyhow::Result<Conn> {
    use api::thirdparty::mariadb;
    use k8s_openapi::api::core::v1::Secret;
    let name = server(app);
    let servers = crate::dynamic::<mariadb::MariaDB>(client);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), TENANT);
    let deadline = tokio::time::Instant::now() + READY;
    loop {
        let ready = servers.get_opt(&name).await?.is_some_and(|s| {
            s.data["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        });
        if ready
            && let Some(data) = secrets
                .get_opt(&format!("{name}-credentials"))
                .await?
                .and_then(|s| s.data)
        {
            let field = |k: &str| {
                data.get(k)
                    .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                    .with_context(|| format!("Secret {TENANT}/{name}-credentials has no {k}"))
            };
            let conn = Conn {
                server: name.clone(),
                host: field("host")?,
                port: field("port")?,
                password: field("root")?,
            };
            // Status and Secret may still be those of a previous run (`--persist`) until the
            // simulator has started this run's server: it answers once they are current.
            match conn.sql("SELECT 1").await {
                Ok(_) => return Ok(conn),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => {}
            }
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "k8s.mariadb.com MariaDB {TENANT}/{name} was not Ready within {}s (see .dev/logs/operator-sims.log)",
            READY.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits for both servers and inserts the sample rows into `shop-db` (once); answers shop-db's
/// connection.
pub async fn seed_rows(client: &kube::Client) -> anyhow::Result<Conn> {
    let shop = conn(client, APP).await?;
    conn(client, COPY).await?;
    shop.sql(SAMPLE_SQL).await?;
    Ok(shop)
}

/// The `mariadb` command line a user types to see `app`'s rows (password from its Secret).
pub fn client_line(kubeconfig: &str, conn: &Conn) -> String {
    format!(
        "MYSQL_PWD=\"$(kubectl --kubeconfig {kubeconfig} -n {TENANT} get secret {}-credentials -o jsonpath='{{.data.root}}' | base64 -d)\" mariadb --no-defaults --protocol=tcp -h {} -P {} -u root -e 'SELECT * FROM shop.orders'",
        conn.server, conn.host, conn.port
    )
}

/// The demo: back shop-db up, restore it into shop-db-copy, change a row, restore in place.
pub async fn demo(
    client: &kube::Client,
    dataplane: &std::path::Path,
    kubeconfig: &str,
) -> anyhow::Result<()> {
    use api::backups::{Backup, RestoreJob};
    let shop = conn(client, APP).await?;
    let copy = conn(client, COPY).await?;
    let backup = "shop-db-adhoc";
    crate::demos::adhoc_backup_succeeded(client, "Demo (MariaDB)", ("MariaDB", APP), backup)
        .await?;
    let catalog = Api::<Backup>::namespaced(client.clone(), TENANT)
        .get(backup)
        .await
        .with_context(|| format!("reading Backup {TENANT}/{backup}"))?;
    let operator = catalog
        .spec
        .driver_metadata
        .unwrap_or_default()
        .get("k8s.mariadb.com/backup-name")
        .cloned()
        .unwrap_or_default();
    println!("  Backup {TENANT}/{backup}: k8s.mariadb.com Backup {operator}");
    for dump in dumps(dataplane, &format!("{TENANT}/{APP}")) {
        println!("  dump in the bucket: {dump}");
    }

    let restores: Api<RestoreJob> = Api::namespaced(client.clone(), TENANT);
    let to_copy = "shop-db-to-copy";
    let fresh = restore(
        &restores,
        to_copy,
        json!({"backupRef": {"name": backup}, "targetApplicationRef": {
            "apiGroup": "apps.cozystack.io", "kind": "MariaDB", "name": COPY}}),
    )
    .await?;
    match copy.rows().await {
        Ok(rows) => println!("  {COPY} rows: {rows}"),
        // `--persist`: the RestoreJob is an earlier run's, and the simulated servers start empty
        // on every run.
        Err(_) if !fresh => println!(
            "  {COPY} rows: none (restored by an earlier run; the servers start empty on each run)"
        ),
        Err(e) => return Err(e),
    }

    let in_place = "shop-db-in-place";
    if restores.get_opt(in_place).await?.is_none() {
        shop.sql("UPDATE shop.orders SET item = 'oops' WHERE id = 2")
            .await?;
        println!("  row 2 of {APP} changed: {}", shop.rows().await?);
    }
    restore(&restores, in_place, json!({"backupRef": {"name": backup}})).await?;
    println!("  {APP} rows: {}", shop.rows().await?);
    println!("  check: {}", client_line(kubeconfig, &shop));
    println!("  check: {}", client_line(kubeconfig, &copy));
    Ok(())
}

/// Creates RestoreJob `name` with `spec` (kept when it exists) and waits for it to succeed;
/// answers whether it created it.
async fn restore(
    restores: &Api<api::backups::RestoreJob>,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<bool> {
    let target = spec["targetApplicationRef"]["name"]
        .as_str()
        .map(|t| format!("into {t}"))
        .unwrap_or_else(|| "in place".into());
    let fresh = created(
        restores,
        json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
               "metadata": {"name": name, "namespace": TENANT}, "spec": spec}),
    )
    .await
    .with_context(|| format!("creating RestoreJob {name}"))?;
    println!(
        "  RestoreJob {TENANT}/{name} ({target}) {}",
        if fresh { "created" } else { "exists already" }
    );
    crate::restore_succeeded(restores, name).await?;
    Ok(fresh)
}

/// The objects under `prefix` in the S3 server's buckets, as `s3://bucket/key (N bytes)`.
fn dumps(dataplane: &std::path::Path, prefix: &str) -> Vec<String> {
    let buckets = dataplane.join("s3").join("buckets");
    let mut found = Vec::new();
    for bucket in std::fs::read_dir(&buckets).into_iter().flatten().flatten() {
        for f in std::fs::read_dir(bucket.path().join(prefix))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(meta) = f.metadata()
                && meta.is_file()
            {
                found.push(format!(
                    "s3://{}/{prefix}/{} ({} bytes)",
                    bucket.file_name().to_string_lossy(),
                    f.file_name().to_string_lossy(),
                    meta.len()
                ));
            }
        }
    }
    found.sort();
    found
}
