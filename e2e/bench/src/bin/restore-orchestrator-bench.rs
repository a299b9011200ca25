//! Benchmark of the restore-orchestrator (not a test; run through
//! hack/bench/restore-orchestrator/run.sh).
//!
//! On the real data plane (PostgreSQL, barman-cloud, the S3 server; the simulated CNPG and Flux)
//! with the real daemon binaries: a small `orders-db` (a few thousand rows), two base backups with a
//! recorded point in time between them. Each round restores that point twice:
//!
//! - through the orchestrator: a RestoreJob into the prepared `orders-db-copy`, timed from its
//!   create call to `Succeeded` (the copy's Cluster healthy on the restored data);
//! - by hand, the baseline: the barman-cloud commands an operator would run, with no Kubernetes in
//!   between: `barman-cloud-backup-list`, `barman-cloud-restore` of the newest base backup before
//!   the target, PostgreSQL started with `barman-cloud-wal-restore` as its restore_command and the
//!   target time, timed until it has promoted and accepts connections.
//!
//! Prints both medians, their ratio, and the orchestrator's RSS. The orchestrator's time also holds
//! the simulated operators' own steps (Flux re-rendering the Cluster, CNPG starting the recovered
//! instance again after its recovery pod), which a real cluster has too.

#[path = "../../../../bins/restore-orchestrator/tests/dataplane/mod.rs"]
mod dataplane;

use std::time::{Duration, Instant};

use api::backups::Backup;
use dataplane::{Platform, TENANT, mark};
use harness::dataplane::psql;
use kube::api::Api;
use operator_sims::pg;
use serde_json::json;

const ROUNDS: usize = 3;
const ROWS: usize = 5_000;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The by-hand restore of `target_time` from the archive `destination`/`server`.
async fn by_hand(
    p: &Platform,
    round: usize,
    destination: &str,
    server: &str,
    target_time: &str,
) -> anyhow::Result<(Duration, String)> {
    let tc = pg::Toolchain {
        bin_dir: std::env::var("PG_BIN_DIR")
            .unwrap_or_else(|_| harness::dataplane::PG_BIN.into())
            .into(),
        run_as: pg::resolve_run_as("postgres"),
    };
    let creds =
        p.h.secret_data("tenant-root", "bucket-cozy-backups-system-credentials")
            .await
            .ok_or_else(|| anyhow::anyhow!("no bucket credentials"))?;
    let target = pg::BarmanTarget {
        destination_path: destination.to_owned(),
        server_name: server.to_owned(),
        endpoint_url: Some(p.dp.https.clone()),
        args: Vec::new(),
        env: [
            ("AWS_ACCESS_KEY_ID", creds["accessKey"].clone()),
            ("AWS_SECRET_ACCESS_KEY", creds["secretKey"].clone()),
            ("AWS_CA_BUNDLE", p.dp.ca_file.display().to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect(),
    };
    let dir = pg::InstanceDir {
        root: p.h.work_dir().join(format!("by-hand-{round}")),
    };
    let (pg_time, at) =
        pg::postgres_target_time(target_time).ok_or_else(|| anyhow::anyhow!("bad target"))?;
    let start = Instant::now();
    dir.create(&tc)?;
    let backups = pg::list_backups(&tc, &dir.root, &target).await?;
    let backup = pg::choose_backup(&backups, Some(at))
        .ok_or_else(|| anyhow::anyhow!("no base backup before {target_time}"))?;
    dir.restore_base_backup(&tc, &target, &backup.backup_id)
        .await?;
    dir.write_private(&tc, "restore.env", &target.env_file(None))?;
    let settings = vec![
        ("archive_mode".to_owned(), "off".to_owned()),
        (
            "restore_command".to_owned(),
            format!("{} %f %p", dir.root.join("bin/restore-wal").display()),
        ),
        ("recovery_target_action".to_owned(), "promote".to_owned()),
        ("recovery_target_time".to_owned(), pg_time),
    ];
    let (server, mut lines) =
        pg::Server::start(&tc, &dir, pg::free_port()?, &pg::StartOptions { settings })?;
    let mut ready = false;
    while let Some(line) = lines.recv().await {
        if line.contains("database system is ready to accept connections") {
            ready = true;
            break;
        }
    }
    anyhow::ensure!(ready, "PostgreSQL exited before promoting");
    let took = start.elapsed();
    let rows = server
        .psql(&tc, "app", "SELECT count(*) FROM orders")
        .await?;
    server.stop(&tc).await;
    let _ = std::fs::remove_dir_all(&dir.root);
    Ok((took, rows))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let mut p = Platform::start().await;
    let uri = p.uri("orders-db").await;
    psql(&uri, "CREATE TABLE orders (id int PRIMARY KEY, item text)");
    psql(
        &uri,
        &format!("INSERT INTO orders SELECT g, 'item ' || g FROM generate_series(1, {ROWS}) g"),
    );
    p.backup("bench-base").await;
    psql(
        &uri,
        &format!("INSERT INTO orders VALUES ({}, 'marker')", ROWS + 1),
    );
    let t = mark(&uri).await;
    psql(
        &uri,
        &format!("INSERT INTO orders VALUES ({}, 'later')", ROWS + 2),
    );
    p.backup("bench-adhoc").await;
    p.app("orders-db-copy").await;
    p.uri("orders-db-copy").await;
    let backup: Backup = Api::namespaced(p.h.client(), TENANT)
        .get("bench-adhoc")
        .await?;
    let md = backup.spec.driver_metadata.clone().unwrap_or_default();
    let (destination, server) = (
        md["cnpg.io/destination-path"].clone(),
        md["cnpg.io/server-name"].clone(),
    );
    let want = (ROWS + 1).to_string();

    let (mut ours, mut manual) = (Vec::new(), Vec::new());
    let (mut before_purge, mut after_healthy) = (Vec::new(), Vec::new());
    let restores: Api<api::backups::RestoreJob> = Api::namespaced(p.h.client(), TENANT);
    let clusters = p.h.dynamic::<api::thirdparty::cnpg::Cluster>(TENANT);
    for round in 0..ROUNDS {
        let name = format!("bench-{round}");
        let start = Instant::now();
        p.restore(
            &name,
            "bench-adhoc",
            Some("orders-db-copy"),
            json!({"recoveryTime": t}),
        )
        .await;
        // Polled every 20 ms: when the old Cluster went, when the recovered one turned healthy,
        // when the job ended. What lies between is the orchestrator's own latency.
        let (mut gone, mut healthy) = (None, None);
        let job = loop {
            let job = restores.get(&name).await?;
            let cluster = clusters.get_opt("postgres-orders-db-copy").await?;
            let started = job.status.as_ref().and_then(|s| s.started_at.clone());
            let recovered = cluster.as_ref().is_some_and(|c| {
                c.data["spec"]["bootstrap"]["recovery"].is_object()
                    && c.metadata
                        .creation_timestamp
                        .as_ref()
                        .zip(started.as_ref())
                        .is_some_and(|(t, s)| t.0 >= s.0)
            });
            if gone.is_none() && (cluster.is_none() || recovered) {
                gone = Some(start.elapsed());
            }
            let is_healthy = cluster
                .as_ref()
                .is_some_and(|c| c.data["status"]["phase"] == "Cluster in healthy state");
            if healthy.is_none() && recovered && is_healthy {
                healthy = Some(start.elapsed());
            }
            if job.is_terminal() {
                break job;
            }
            anyhow::ensure!(
                start.elapsed() < harness::dataplane::DATAPLANE_DEADLINE,
                "{name} did not finish"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let took = start.elapsed();
        before_purge.push(gone.unwrap_or(took));
        after_healthy.push(took.saturating_sub(healthy.unwrap_or(took)));
        anyhow::ensure!(
            dataplane::phase(&job) == "Succeeded",
            "{name}: {:?}",
            job.status
        );
        let rows = psql(
            &p.uri("orders-db-copy").await,
            "SELECT count(*) FROM orders",
        );
        anyhow::ensure!(rows == want, "{name}: {rows} rows, want {want}");
        ours.push(took);

        let (took, rows) = by_hand(&p, round, &destination, &server, &t).await?;
        anyhow::ensure!(rows == want, "by hand: {rows} rows, want {want}");
        manual.push(took);
        println!(
            "round {round}: orchestrator {:.2}s, by hand {:.2}s",
            ours[round].as_secs_f64(),
            took.as_secs_f64()
        );
    }
    let pid =
        p.h.daemon("restore-orchestrator")
            .ok()
            .and_then(|d| d.pid());
    let (o, m) = (median(ours), median(manual));
    println!("point-in-time restore of a {ROWS}-row database, median of {ROUNDS} rounds:");
    println!(
        "  restore-orchestrator (RestoreJob created → Succeeded): {:.2}s",
        o.as_secs_f64()
    );
    println!(
        "  by hand (barman-cloud-restore + PostgreSQL recovery): {:.2}s",
        m.as_secs_f64()
    );
    println!(
        "  ratio orchestrator / by hand: {:.2}",
        o.as_secs_f64() / m.as_secs_f64()
    );
    println!(
        "  the orchestrator's own steps: created → old Cluster gone {:.2}s; recovered Cluster healthy → Succeeded {:.3}s",
        median(before_purge).as_secs_f64(),
        median(after_healthy).as_secs_f64()
    );
    println!("  restore-orchestrator {}", harness::rss(pid));
    p.h.cleanup().await?;
    Ok(())
}
