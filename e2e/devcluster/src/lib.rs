//! The dev control plane behind `hack/dev-up.sh`: one command that starts the kube emulator with
//! `deploy/crds/` loaded, writes `.dev/kubeconfig`, starts every daemon in [`DAEMONS`] as a separate process
//! pointed at it, seeds the example tenant, prints what to run next, and stays in the foreground until
//! Ctrl-C/SIGTERM.
//!
//! ```text
//! devcluster ─► kube emulator (in-process, 127.0.0.1) ◄── kubectl --kubeconfig .dev/kubeconfig
//!            ├► operator-sims: S3 server (.dev/dataplane/s3), COSI, Velero, CNPG (real PostgreSQL), Flux
//!            ├► daemon processes (KUBECONFIG=.dev/kubeconfig, ADMIN_ADDR=127.0.0.1:<free>) ─┘
//!            ├► tenant-acme: Postgres orders-db (sample rows) and orders-db-copy (empty), MariaDB
//!            │  shop-db (sample rows) and shop-db-copy (empty) ([`mariadb`]), Etcd etcd (keys, [`etcd`])
//!            └► demos: examples/backupjob.yaml applied; waits for Succeeded, shows the Backup and
//!               barman-cloud's listing of the bucket; the PITR restore; the MariaDB and Etcd
//!               backups and restores; the failed-backup cleanup (`--no-demo` skips them)
//! ```
//! With `--ha` the lease server starts right after the simulators and every backup daemon runs two
//! replicas (`<bin>-a`, `<bin>-b`) contending on it with a short lease TTL ([`HA_LEASE_TTL`]); the
//! summary then names each component's leader and prints how to fail one over. The lease server
//! always serves as in production: TLS (a dev CA in `<dev-dir>/lease-tls`) and ServiceAccount
//! tokens (`<dev-dir>/lease-tokens/<component>`, audience `cozy-backups-lease`) reviewed against
//! the emulator.
//!
//! With `--real-api` the same plane runs on kube-apiserver, etcd and kube-controller-manager
//! (built by `hack/install-kube.sh`; `COZY_KUBE_BIN` names another directory of them), started
//! by the end-to-end harness's real backend ([`harness::ControlPlane`], docs/real-api.md) instead
//! of the emulator; `--persist` and a fixed `--port` are emulator-only.
//!
//! The stages live in modules: `start` (the API server, how daemons are spawned, the reports on
//! them), `seed` (platform objects, application CRDs, the Postgres applications), `demos` (the
//! Postgres demos, the failed-backup cleanup, the status table, the shared waits), and
//! [`mariadb`] and [`etcd`] (their applications' seeds and demos); [`run`] strings them together.
//!
//! Invariants: daemons are started only after the emulator serves every CRD; `{s3-http}` in a
//! daemon's arguments is the S3 server's plain-HTTP endpoint (the in-cluster fallback) and
//! `{s3-ca}` its dev CA's file, both known once the simulators are ready; `--check` proves the whole path (emulator, CRDs, every daemon's `/ready`, the seeded
//! databases answering, the demo backup in the bucket) and exits 0, so tests and CI can run the same
//! command.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};

mod demos;
pub mod etcd;
pub mod mariadb;
mod seed;
mod start;

pub use demos::{
    DEMO_BACKUPJOB, DEMO_DEADLINE, DEMO_RESTOREJOB, demo_backup, demo_failed_cleanup_seen,
    demo_failed_cleanup_start, demo_restore, demo_status,
};
pub(crate) use demos::{restore_succeeded, within};
pub use seed::{
    SAMPLE_SQL, install_app_crds, seed_platform_objects, seed_sample_rows, seed_tenant,
};
pub(crate) use seed::{created, dynamic, psql_count};
use start::{Plane, ending_with_the_plane, lease_token, print_ha, write_metrics};

/// One daemon the dev control plane runs: binary name (in the cargo target dir) and extra arguments.
#[derive(Debug, Clone, Copy)]
pub struct DaemonEntry {
    /// Cargo binary name.
    pub bin: &'static str,
    /// Extra arguments after the common ones (kubeconfig and admin address come from the environment).
    pub args: &'static [&'static str],
}

/// Every daemon started by the dev control plane. Adding a daemon is one line here.
pub const DAEMONS: &[DaemonEntry] = &[
    // Simulated third-party operators first: they install the permissive CRDs (BucketClaim,
    // apps.cozystack.io Bucket, velero.io BackupStorageLocation) the other daemons watch.
    // The S3 server (real keys, HTTPS with a dev CA), CNPG over real PostgreSQL and Flux's
    // helm-controller for Postgres apps, mariadb-operator over real mariadbd and etcd-operator over
    // real etcd members; the data plane lives in <dev-dir>/dataplane. The Job-controller,
    // FoundationDB and Percona MongoDB simulators move their backups' status (no data).
    DaemonEntry {
        bin: "operator-sims",
        args: &[
            "--sims=s3,cosi,velero,cnpg,flux,mariadb,etcd,jobs,fdb,psmdb",
            "--cosi-delay-ms=500",
            "--data-dir={dev-dir}/dataplane",
        ],
    },
    // Renders Bucket cozy-backups, BackupClass cozy-default, the cozy-default-* strategies and the
    // BSL from upstream's default values (config: ConfigMap cozy-backup-controller/strategy-renderer-config,
    // absent = defaults); the fallback endpoint is the dev S3 server's plain-HTTP one.
    DaemonEntry {
        bin: "strategy-renderer",
        args: &["--endpoint={s3-http}"],
    },
    // The flags mirror the upstream chart's env (BACKUP_STORAGE_*): the source is the system bucket's
    // credentials Secret the simulated COSI provisioner creates in tenant-root; cozy-velero is the one
    // system namespace. Until that Secret exists the projector reports SourceSecretMissing.
    DaemonEntry {
        bin: "credentials-projector",
        args: &[
            "--source-namespace=tenant-root",
            "--source-name=bucket-cozy-backups-system-credentials",
            "--target-name=cozy-backups-creds",
            "--endpoint={s3-http}",
            "--region=us-east-1",
            "--force-path-style=true",
            "--system-namespaces=cozy-velero",
        ],
    },
    // Runs BackupJobs (the demo below: examples/backupjob.yaml) and Plans, single replica. A
    // backup that cannot finish (e.g. WAL archiving failing, so PostgreSQL waits forever for the
    // backup's last segment) fails after 15 minutes instead of the production default of 6 hours.
    DaemonEntry {
        bin: "backup-runner",
        args: &["--backup-deadline=15m"],
    },
    // Runs RestoreJobs (the demo below: examples/restorejob-pitr.yaml), single replica. Its
    // storage breaker probes the system bucket at the endpoint of its Secret, over TLS with the
    // dev CA.
    DaemonEntry {
        bin: "restore-orchestrator",
        args: &["--storage-ca-file={s3-ca}"],
    },
    // Applies Plan retention and deletes failed backups; the short TTL lets a newcomer watch the
    // demo's failed BackupJob disappear (production default: 1440 minutes).
    DaemonEntry {
        bin: "retention-cleaner",
        args: &["--failed-backup-ttl=15s", "--debounce=1s"],
    },
    // Rolls cozy-system/cozystack-api (seeded below) when the set of ApplicationDefinitions changes.
    DaemonEntry {
        bin: "apidef-restarter",
        args: &["--debounce=2s"],
    },
    // The lease service, its epoch ConfigMap in its own namespace (where its Role allows it),
    // secured as in production: TLS with a certificate of a dev CA generated into
    // <dev-dir>/lease-tls, and every caller authenticated by a ServiceAccount token (TokenReview
    // against the emulator) and allowed only its own component's leases; the TLS flags are added
    // in [`run`]. The dev daemons run single-replica (`--lease-endpoint=none`) unless `--ha`; the
    // gRPC port is picked freely and logged ("serving leases").
    DaemonEntry {
        bin: "lease-server",
        args: &[
            "--grpc-addr=127.0.0.1:0",
            "--namespace=cozy-backup-controller",
        ],
    },
];

/// The lease TTL of the replicas under `--ha` (also the lease server's `--max-ttl`, so its quiet
/// period after a restart is as short): a crashed leader is replaced within this.
pub const HA_LEASE_TTL: &str = "5s";

/// The entries that run as replicas under `--ha`: everything but the simulators and the lease
/// server itself.
pub fn is_replicated(entry: &DaemonEntry) -> bool {
    !matches!(entry.bin, "operator-sims" | "lease-server")
}

/// Namespaces the dev control plane creates before starting the daemons: the platform bucket's
/// tenant, Velero's namespace, the backup controllers' namespace (the renderer's ConfigMap) and the
/// example tenant.
pub const NAMESPACES: &[&str] = &[
    "tenant-root",
    "cozy-velero",
    "cozy-backup-controller",
    TENANT,
];

/// The example tenant of the backup documentation.
pub const TENANT: &str = "tenant-acme";

/// Starts the dev control plane.
#[derive(Debug, Parser)]
#[command(name = "devcluster", version)]
pub struct Args {
    /// Directory for the kubeconfig, daemon logs and the optional snapshot (git-ignored).
    #[arg(long, env = "DEV_DIR", default_value_os_t = harness::workspace_root().join(".dev"))]
    pub dev_dir: PathBuf,
    /// API server port (0 picks a free one).
    #[arg(long, env = "DEV_PORT", default_value_t = 0)]
    pub port: u16,
    /// CRD directory to preload.
    #[arg(long, env = "DEV_CRDS", default_value_os_t = harness::crd_dir())]
    pub crds: PathBuf,
    /// Keep objects across restarts in <dev-dir>/snapshot.json.
    #[arg(long, env = "DEV_PERSIST")]
    pub persist: bool,
    /// Stop after this many seconds instead of waiting for Ctrl-C.
    #[arg(long, env = "DEV_EXIT_AFTER")]
    pub exit_after: Option<u64>,
    /// Start everything, verify it (CRDs served, daemons ready), print the next steps and exit.
    #[arg(long, env = "DEV_CHECK")]
    pub check: bool,
    /// Do not run the demo backup (examples/backupjob.yaml) after start.
    #[arg(long, env = "DEV_NO_DEMO")]
    pub no_demo: bool,
    /// After start (and the demos), write each daemon's `/metrics` to `<dir>/<daemon>.prom`.
    #[arg(long, env = "DEV_METRICS_DIR")]
    pub metrics_dir: Option<PathBuf>,
    /// Run every backup daemon as two replicas on the lease server (leadership and work leases),
    /// and print how to watch a failover.
    #[arg(long, env = "DEV_HA")]
    pub ha: bool,
    /// Run on kube-apiserver + etcd + kube-controller-manager (hack/install-kube.sh builds them;
    /// COZY_KUBE_BIN names another directory of them) instead of the kube emulator.
    #[arg(long, env = "DEV_REAL_API")]
    pub real_api: bool,
    /// Directory of the PostgreSQL client binaries (psql seeds the sample rows).
    #[arg(long, env = "PG_BIN_DIR", default_value = "/usr/lib/postgresql/15/bin")]
    pub pg_bin_dir: PathBuf,
}

/// Runs the dev control plane until a signal, `--exit-after`, or (with `--check`) verification.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    std::fs::create_dir_all(&args.dev_dir)
        .with_context(|| format!("creating {}", args.dev_dir.display()))?;
    let kubeconfig = args.dev_dir.join("kubeconfig");
    let plane = Plane::start(&args, &kubeconfig).await?;
    let api_started = started.elapsed();
    let crds: Api<CustomResourceDefinition> = Api::all(plane.client());
    let served = crds
        .list(&ListParams::default())
        .await
        .context("listing CRDs")?
        .items
        .len();
    let on_disk = kube_emulator::read_manifests(&args.crds)?
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .count();
    anyhow::ensure!(
        served >= on_disk,
        "only {served} of {on_disk} CRDs are served"
    );

    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(plane.client());
    for ns in NAMESPACES {
        let body = k8s_openapi::api::core::v1::Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some((*ns).to_owned()),
                ..Default::default()
            },
            ..Default::default()
        };
        match namespaces.create(&Default::default(), &body).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating namespace {ns}")),
        }
    }

    seed_platform_objects(&plane.client())
        .await
        .context("creating the platform objects")?;
    install_app_crds(&plane.client())
        .await
        .context("installing the MariaDB and Etcd application CRDs")?;

    let logs = args.dev_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let mut daemons = Vec::new();
    let dataplane = args.dev_dir.join("dataplane");
    let mut s3: Option<operator_sims::s3::Endpoints> = None;
    // Under --ha the lease server must serve before the replicas start.
    let mut order: Vec<&DaemonEntry> = DAEMONS.iter().collect();
    if args.ha {
        order.sort_by_key(|e| match e.bin {
            "operator-sims" => 0,
            "lease-server" => 1,
            _ => 2,
        });
    }
    let mut grpc: Option<String> = None;
    // The lease server's certificate, from a CA generated for this dev directory (as the tests'
    // secured lease servers get theirs).
    let lease_tls = harness::LeaseTls::generate(&args.dev_dir.join("lease-tls"))
        .context("generating the lease server's certificates")?;
    // Each of the project's daemons runs as its own ServiceAccount with its deploy/ RBAC, as in a
    // cluster; the simulated operators (not ours) run as the admin.
    let mut tokens: std::collections::BTreeMap<String, String> = Default::default();
    let mut lease_tokens: std::collections::BTreeMap<String, PathBuf> = Default::default();
    for entry in order {
        let bin = harness::locate_binary(entry.bin).with_context(|| {
            format!(
                "{} is not built; run hack/dev-up.sh, which builds every binary",
                entry.bin
            )
        })?;
        let mut entry_args = Vec::new();
        for a in entry.args {
            let mut a = a.replace("{dev-dir}", &args.dev_dir.display().to_string());
            if a.contains("{s3-http}") || a.contains("{s3-ca}") {
                let e = s3.as_ref().context("the S3 server is not running")?;
                a = a
                    .replace("{s3-http}", &e.http)
                    .replace("{s3-ca}", &e.ca_file.display().to_string());
            }
            entry_args.push(a);
        }
        if entry.bin == "operator-sims" && args.persist {
            entry_args.extend(start::previous_s3_addrs(&dataplane.join("s3")));
        }
        if entry.bin == "lease-server" {
            entry_args.extend([
                "--tls-cert-file".to_owned(),
                lease_tls.cert_file.display().to_string(),
                "--tls-key-file".to_owned(),
                lease_tls.key_file.display().to_string(),
            ]);
            if args.ha {
                entry_args.push(format!("--max-ttl={HA_LEASE_TTL}"));
            }
        }
        let replicas: Vec<String> = match &grpc {
            Some(_) if is_replicated(entry) => ["a", "b"]
                .iter()
                .map(|r| format!("{}-{r}", entry.bin))
                .collect(),
            _ => vec![entry.bin.to_owned()],
        };
        for name in replicas {
            let mut spec = harness::DaemonSpec::new(&name, bin.clone()).args(entry_args.clone());
            let own_kubeconfig = match spec.component() {
                Some(component) => {
                    if !tokens.contains_key(&component) {
                        let (_, token) =
                            harness::identity::provision_component(plane.client(), &component)
                                .await
                                .with_context(|| format!("provisioning {component}'s identity"))?;
                        tokens.insert(component.clone(), token);
                    }
                    let path = args.dev_dir.join(format!("kubeconfig.{name}"));
                    harness::identity::write_component_kubeconfig(
                        &kubeconfig,
                        &path,
                        &component,
                        &tokens[&component],
                    )?;
                    path
                }
                None => kubeconfig.clone(),
            };
            if let (Some(grpc), true) = (&grpc, is_replicated(entry)) {
                let component = spec
                    .component()
                    .with_context(|| format!("{name} has no ServiceAccount in deploy/"))?;
                // One token per component, shared by its replicas.
                let token = match lease_tokens.get(&component) {
                    Some(path) => path,
                    None => {
                        let path = lease_token(&plane.client(), &component, &args.dev_dir)
                            .await
                            .with_context(|| format!("issuing {component}'s lease token"))?;
                        lease_tokens.entry(component.clone()).or_insert(path)
                    }
                };
                spec = spec.args([
                    "--lease-endpoint".to_owned(),
                    format!("https://{grpc}"),
                    "--lease-ca-file".to_owned(),
                    lease_tls.ca_file.display().to_string(),
                    "--lease-token-file".to_owned(),
                    token.display().to_string(),
                    "--identity".to_owned(),
                    name.clone(),
                    "--lease-ttl".to_owned(),
                    HA_LEASE_TTL.to_owned(),
                ]);
            }
            let spec = ending_with_the_plane(spec)?;
            let mut d = harness::Daemon::spawn(spec, &own_kubeconfig, &logs)?;
            d.wait_ready(Duration::from_secs(60)).await?;
            if entry.bin == "operator-sims" {
                s3 = Some(
                    operator_sims::s3::Endpoints::read(&dataplane.join("s3"))
                        .context("reading the S3 server's endpoints")?,
                );
            }
            if args.ha && entry.bin == "lease-server" {
                let report = d.admin().await?.ready_report();
                grpc = Some(
                    report
                        .split("gRPC on ")
                        .nth(1)
                        .and_then(|rest| rest.split_whitespace().next())
                        .map(str::to_owned)
                        .context("the lease server did not report its gRPC address")?,
                );
            }
            daemons.push(d);
        }
    }

    seed_tenant(&plane.client())
        .await
        .context("seeding the example tenant")?;
    let orders_uri = seed_sample_rows(&plane.client(), &args.pg_bin_dir)
        .await
        .context("seeding the sample rows of tenant-acme/orders-db")?;
    let shop = mariadb::seed_rows(&plane.client())
        .await
        .context("seeding the sample rows of tenant-acme/shop-db (MariaDB)")?;
    let etcd_member = etcd::seed_keys(&plane.client())
        .await
        .context("seeding the keys of tenant-acme/etcd (Etcd)")?;

    let kc = kubeconfig.display();
    println!("Dev control plane is up.");
    println!("  API server:  {}", plane.url());
    for line in plane.describe() {
        println!("               {line}");
    }
    println!(
        "  started in:  {:.1} s to the API server serving the CRDs, {:.1} s to every daemon ready and the tenant seeded",
        api_started.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    println!("  kubeconfig:  {kc}");
    println!(
        "  CRDs:        {served} served from {}",
        args.crds.display()
    );
    if daemons.is_empty() {
        println!("  daemons:     none yet (add them to DAEMONS in e2e/devcluster/src/lib.rs)");
    }
    for d in &daemons {
        println!(
            "  daemon:      {} (admin http://{}, log {})",
            d.spec.name,
            d.admin_addr,
            d.log_path.display()
        );
    }
    println!("Next:");
    println!("  kubectl --kubeconfig {kc} get backupclasses");
    println!("  kubectl --kubeconfig {kc} get backupclass cozy-default -o yaml");
    println!("  kubectl --kubeconfig {kc} -n tenant-root get bucket cozy-backups");
    println!("  kubectl --kubeconfig {kc} -n cozy-velero get backupstoragelocation cozy-default");
    println!("  kubectl --kubeconfig {kc} api-resources --api-group=backups.cozystack.io");
    println!("  export KUBECONFIG={kc}   # then plain kubectl works");
    if let Some(e) = &s3 {
        println!("Data plane (docs/dataplane.md):");
        println!(
            "  S3:          {} (TLS, dev CA {}), {} (plain)",
            e.https,
            e.ca_file.display(),
            e.http
        );
        println!(
            "  psql:        psql \"$(kubectl --kubeconfig {kc} -n {TENANT} get secret postgres-orders-db-app -o jsonpath='{{.data.uri}}' | base64 -d)\" -c 'TABLE orders'"
        );
        println!(
            "  orders-db:   {} sample rows",
            psql_count(&args.pg_bin_dir, &orders_uri)
                .await
                .unwrap_or_default()
        );
        println!(
            "  mariadb:     {}",
            mariadb::client_line(&kc.to_string(), &shop)
        );
        println!(
            "  shop-db:     {} (MariaDB {}:{}, shop-db-copy empty)",
            shop.rows().await.unwrap_or_default(),
            shop.host,
            shop.port
        );
        println!("  etcdctl:     {}", etcd::client_line(&kc.to_string()));
        println!(
            "  etcd:        {} keys under config/ (member {etcd_member})",
            etcd::KEYS.len()
        );
    }
    if !args.no_demo {
        let e = s3.as_ref().context("the S3 server is not running")?;
        demo_backup(&plane.client(), e)
            .await
            .context("the demo backup (examples/backupjob.yaml)")?;
        demo_restore(&plane.client(), &args.pg_bin_dir, &orders_uri)
            .await
            .context("the demo point-in-time restore (examples/restorejob-pitr.yaml)")?;
        demo_failed_cleanup_start(&plane.client())
            .await
            .context("the demo failed-backup cleanup")?;
        // The MariaDB and Etcd demos run while the failed BackupJob waits out its TTL.
        let kc = kc.to_string();
        within(
            "the MariaDB demo",
            mariadb::demo(&plane.client(), &dataplane, &kc),
        )
        .await?;
        within("the Etcd demo", etcd::demo(&plane.client(), &kc)).await?;
        demo_failed_cleanup_seen(&plane.client())
            .await
            .context("the demo failed-backup cleanup")?;
        demo_status(&kubeconfig).context("the tenant's status (kubectl cozy-backups status)")?;
    }
    if let Some(dir) = &args.metrics_dir {
        write_metrics(dir, &daemons)?;
    }
    if let Some(grpc) = &grpc {
        print_ha(grpc, &daemons).await?;
    }
    if args.check {
        println!("check passed");
    } else {
        match args.exit_after {
            Some(s) => {
                println!("{}", will_stop_at(std::time::SystemTime::now(), s));
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(s)) => {
                        println!("Stopping: --exit-after {s}s elapsed.");
                    }
                    _ = kube_emulator::cli::wait_for_signal() => {
                        println!("Stopping: signal received.");
                    }
                }
            }
            None => {
                println!("Press Ctrl-C to stop.");
                kube_emulator::cli::wait_for_signal().await;
                println!("Stopping: signal received.");
            }
        }
    }
    // SIGTERM first: the simulators then stop their PostgreSQL servers and remove their data.
    for d in &mut daemons {
        if let Some(pid) = d
            .pid()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
    for d in &mut daemons {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        while d.is_running() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        d.kill().await?;
    }
    plane.shutdown().await;
    if !args.check {
        println!("Stopped.");
    }
    Ok(())
}

/// What `--exit-after <secs>` prints at start: when the plane will stop (UTC, to the second).
pub fn will_stop_at(now: std::time::SystemTime, secs: u64) -> String {
    let at = now + Duration::from_secs(secs);
    let at = k8s_openapi::jiff::Timestamp::try_from(at)
        .ok()
        .and_then(|t| t.round(k8s_openapi::jiff::Unit::Second).ok())
        .map(|t| t.to_string())
        .unwrap_or_else(|| "?".into());
    format!("Will stop at {at} (in {secs}s, --exit-after); Ctrl-C stops it earlier.")
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent() {
        Args::command().debug_assert();
    }

    /// `--persist` keeps the S3 server's ports of the previous run when they are free, else
    /// (and on a first run) lets it pick.
    #[test]
    fn persist_reuses_the_previous_s3_ports_when_free() {
        let dir = std::env::temp_dir().join(format!("devcluster-s3-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(start::previous_s3_addrs(&dir).is_empty(), "no previous run");
        let free = || {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
        };
        let (http, https) = (free(), free());
        let write = |https: std::net::SocketAddr| {
            let e = operator_sims::s3::Endpoints {
                http: format!("http://{http}"),
                https: format!("https://{https}"),
                ca_file: dir.join("ca.crt"),
                admin: String::new(),
            };
            std::fs::write(
                dir.join("endpoints.json"),
                serde_json::to_string(&e).unwrap(),
            )
            .unwrap();
        };
        write(https);
        assert_eq!(
            start::previous_s3_addrs(&dir),
            [
                format!("--s3-http-addr={http}"),
                format!("--s3-https-addr={https}")
            ]
        );
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        write(taken.local_addr().unwrap());
        assert!(start::previous_s3_addrs(&dir).is_empty(), "a port is taken");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn exit_after_says_when_it_will_stop() {
        let start = std::time::UNIX_EPOCH + Duration::from_millis(1_796_560_000_400);
        assert_eq!(
            will_stop_at(start, 900),
            "Will stop at 2026-12-06T12:41:40Z (in 900s, --exit-after); Ctrl-C stops it earlier."
        );
    }
}
