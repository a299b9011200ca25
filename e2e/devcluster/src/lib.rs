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
//! Invariants: daemons are started only after the emulator serves every CRD; `{s3-http}` in a daemon's
//! arguments is the S3 server's plain-HTTP endpoint (the in-cluster fallback), known once the simulators
//! are ready; `--check` proves the whole path (emulator, CRDs, every daemon's `/ready`, the seeded
//! databases answering, the demo backup in the bucket) and exits 0, so tests and CI can run the same
//! command.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};

pub mod etcd;
pub mod mariadb;

/// How long each of the MariaDB and Etcd demos may take before the plane ends with its error.
pub const DEMO_DEADLINE: Duration = Duration::from_secs(300);

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
    // Runs RestoreJobs (the demo below: examples/restorejob-pitr.yaml), single replica.
    DaemonEntry {
        bin: "restore-orchestrator",
        args: &[],
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

/// Sample data seeded into `orders-db` (idempotent: only into an empty table).
pub const SAMPLE_SQL: &str = "CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, customer text NOT NULL, \
     amount numeric(10,2) NOT NULL, created_at timestamptz NOT NULL DEFAULT now()); \
     INSERT INTO orders (customer, amount) SELECT * FROM (VALUES ('alice', 19.99), ('bob', 5.00), \
     ('carol', 42.50)) v WHERE NOT EXISTS (SELECT 1 FROM orders);";

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

/// The API server the plane runs on.
enum Plane {
    /// The kube emulator, in this process.
    Emulator(Box<kube_emulator::Running>),
    /// kube-apiserver, etcd and kube-controller-manager (`--real-api`), started by the harness's
    /// real backend; its watchdog stops them and removes their directory when this process ends.
    Real(&'static harness::ControlPlane),
}

impl Plane {
    /// Starts the API server with the CRDs of `args.crds` served and writes the admin's kubeconfig
    /// to `kubeconfig`.
    async fn start(args: &Args, kubeconfig: &std::path::Path) -> anyhow::Result<Self> {
        if !args.real_api {
            let config = kube_emulator::Config {
                port: args.port,
                kubeconfig_out: Some(kubeconfig.to_path_buf()),
                crd_dirs: vec![args.crds.clone()],
                snapshot: args.persist.then(|| args.dev_dir.join("snapshot.json")),
                audit_log: Some(args.dev_dir.join("audit.jsonl")),
                ..Default::default()
            };
            let emulator = kube_emulator::Emulator::start(config)
                .await
                .context("starting the kube emulator")?;
            return Ok(Self::Emulator(Box::new(emulator)));
        }
        anyhow::ensure!(
            !args.persist,
            "--persist keeps the emulator's objects; the real API server keeps nothing across \
             restarts here (etcd runs in a temporary directory)"
        );
        anyhow::ensure!(
            args.port == 0,
            "--port {}: the real API server listens on a free port of its own choosing",
            args.port
        );
        let cp = tokio::task::spawn_blocking(harness::ControlPlane::shared)
            .await
            .context("starting the real control plane")?
            .context("starting the real control plane (hack/install-kube.sh builds it)")?;
        if args.crds != harness::crd_dir() {
            harness::crds::apply_dir(&cp.client(&cp.admin_token), &args.crds)
                .await
                .with_context(|| format!("applying the CRDs of {}", args.crds.display()))?;
        }
        harness::real::write_admin_kubeconfig(cp, kubeconfig)
            .with_context(|| format!("writing {}", kubeconfig.display()))?;
        Ok(Self::Real(cp))
    }

    /// A client of the admin.
    fn client(&self) -> kube::Client {
        match self {
            Self::Emulator(e) => e.client(),
            Self::Real(cp) => cp.client(&cp.admin_token),
        }
    }

    /// The API server's URL.
    fn url(&self) -> String {
        match self {
            Self::Emulator(e) => e.url(),
            Self::Real(cp) => cp.url.clone(),
        }
    }

    /// What the plane's API server is and costs, for the summary: one line per process with its
    /// resident memory (the emulator runs inside this process).
    fn describe(&self) -> Vec<String> {
        match self {
            Self::Emulator(_) => vec![format!(
                "kube emulator in devcluster (pid {}): {}",
                std::process::id(),
                harness::rss(Some(std::process::id()))
            )],
            Self::Real(cp) => {
                let mut lines = vec![format!(
                    "kube-apiserver {} with etcd and kube-controller-manager (binaries {}, audit log {})",
                    cp.version,
                    cp.bin_dir.display(),
                    cp.audit_log.display()
                )];
                lines.extend(
                    cp.pids
                        .iter()
                        .zip(cp.rss())
                        .map(|((name, pid), (_, rss))| format!("{name} (pid {pid}): {rss}")),
                );
                lines
            }
        }
    }

    /// Stops the API server: the emulator at once; the real processes get SIGTERM (the harness's
    /// watchdog kills what is left and removes their directory once this process has ended).
    async fn shutdown(self) {
        match self {
            Self::Emulator(e) => e.shutdown().await,
            Self::Real(cp) => {
                for (_, pid) in &cp.pids {
                    if let Some(pid) = i32::try_from(*pid)
                        .ok()
                        .and_then(rustix::process::Pid::from_raw)
                    {
                        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
                    }
                }
            }
        }
    }
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
            if a.contains("{s3-http}") {
                let e = s3.as_ref().context("the S3 server is not running")?;
                a = a.replace("{s3-http}", &e.http);
            }
            entry_args.push(a);
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

/// `spec` run through `setpriv --pdeathsig TERM`: the daemon gets SIGTERM when this process ends,
/// however it ends (also SIGKILL), and shuts down as on Ctrl-C; the simulators stop their
/// PostgreSQL servers, which in turn die with the simulators (docs/dataplane.md, "No process
/// outlives the plane"). The kernel signals when the thread that spawned the daemon exits: they are
/// all spawned from [`run`], which runs on the main thread for the process's whole life. The
/// daemon keeps the identity its own binary gives it.
fn ending_with_the_plane(mut spec: harness::DaemonSpec) -> anyhow::Result<harness::DaemonSpec> {
    let setpriv = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(operator_sims::pg::SETPRIV))
        .find(|p| p.is_file())
        .context(
            "setpriv is not on PATH: the dev control plane starts its daemons through it so that \
             they stop when it does; install util-linux (Debian: apt-get install util-linux)",
        )?;
    let component = spec.component();
    let real = std::mem::replace(&mut spec.bin, setpriv);
    spec.args.splice(
        0..0,
        [
            "--pdeathsig".to_owned(),
            "TERM".to_owned(),
            "--".to_owned(),
            real.display().to_string(),
        ],
    );
    Ok(match component {
        Some(c) => spec.identity(&c),
        None => spec,
    })
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

/// A token of `component`'s ServiceAccount (provisioned already) for the lease server's audience,
/// issued through TokenRequest and written to `<dev-dir>/lease-tokens/<component>` (mode 0600).
async fn lease_token(
    client: &kube::Client,
    component: &str,
    dev_dir: &std::path::Path,
) -> anyhow::Result<PathBuf> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let (ns, name) = harness::identity::service_account(component);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![harness::LEASE_AUDIENCE.to_owned()],
            expiration_seconds: Some(7 * 24 * 3600),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let token = Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create_token_request(&name, &Default::default(), &request)
        .await?
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .with_context(|| format!("the TokenRequest for {ns}/{name} answered no token"))?;
    let dir = dev_dir.join("lease-tokens");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(component);
    let _ = std::fs::remove_file(&path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| f.write_all(token.as_bytes()))
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
}

/// The example tenant's applications: Postgres `orders-db` (gets sample rows) and `orders-db-copy`
/// (stays empty: the target of the documentation's point-in-time RestoreJob), MariaDB `shop-db` and
/// `shop-db-copy` ([`mariadb::create`]) and Etcd `etcd` ([`etcd::create`]). Existing ones are kept.
pub async fn seed_tenant(client: &kube::Client) -> anyhow::Result<()> {
    use api::thirdparty::apps::Postgres;
    use kube::api::{DynamicObject, PostParams};
    let ar = kube::core::ApiResource::erase::<Postgres>(&());
    let apps: Api<DynamicObject> = Api::namespaced_with(client.clone(), TENANT, &ar);
    for name in ["orders-db", "orders-db-copy"] {
        let app: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Postgres",
            "metadata": {"name": name, "namespace": TENANT},
            "spec": {"size": "1Gi", "replicas": 1},
        }))?;
        match apps.create(&PostParams::default(), &app).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating Postgres {name}")),
        }
    }
    mariadb::create(client).await?;
    etcd::create(client).await?;
    Ok(())
}

/// Waits for `orders-db`'s Cluster to be healthy, then inserts the sample rows (once) through the
/// `-app` Secret, as a user would; returns the connection URI.
pub async fn seed_sample_rows(
    client: &kube::Client,
    pg_bin_dir: &std::path::Path,
) -> anyhow::Result<String> {
    use api::thirdparty::cnpg::Cluster;
    use k8s_openapi::api::core::v1::Secret;
    use kube::api::DynamicObject;
    let clusters: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        TENANT,
        &kube::core::ApiResource::erase::<Cluster>(&()),
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), TENANT);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let uri = loop {
        let healthy = clusters
            .get_opt("postgres-orders-db")
            .await?
            .and_then(|c| c.data["status"]["phase"].as_str().map(str::to_owned))
            .is_some_and(|p| p == "Cluster in healthy state");
        if healthy
            && let Some(secret) = secrets.get_opt("postgres-orders-db-app").await?
            && let Some(uri) = secret.data.as_ref().and_then(|d| d.get("uri"))
        {
            break String::from_utf8(uri.0.clone())?;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "Cluster {TENANT}/postgres-orders-db did not become healthy within 90s (see .dev/logs/operator-sims.log)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let out = tokio::process::Command::new(pg_bin_dir.join("psql"))
        .args([
            uri.as_str(),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            SAMPLE_SQL,
        ])
        .output()
        .await
        .with_context(|| format!("running {}", pg_bin_dir.join("psql").display()))?;
    anyhow::ensure!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(uri)
}

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
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let note = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|e| {
            e.reason.as_deref() == Some(api::contract::event_reasons::FAILED_BACKUP_EXPIRED)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .and_then(|e| e.note)
        .unwrap_or_default();
    println!("  retention-cleaner deleted BackupJob {ns}/{name}: {note}");
    Ok(())
}

/// Writes each daemon's `/metrics` exposition to `<dir>/<daemon>.prom`.
/// Under `--ha`: which replica leads each component (waiting until each has exactly one leader)
/// and how to watch a failover.
async fn print_ha(grpc: &str, daemons: &[harness::Daemon]) -> anyhow::Result<()> {
    println!(
        "High availability (--ha): two replicas per daemon on the lease server at https://{grpc} (TLS, each replica authenticated by its ServiceAccount's token), lease TTL {HA_LEASE_TTL}."
    );
    let mut example: Option<(String, String, u32, PathBuf)> = None;
    for entry in DAEMONS.iter().filter(|e| is_replicated(e)) {
        let gauge = format!("cozy_backups_{}_leader", entry.bin.replace('-', "_"));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let leader = loop {
            let leaders: Vec<&harness::Daemon> = daemons
                .iter()
                .filter(|d| d.spec.name.starts_with(&format!("{}-", entry.bin)))
                .filter(|d| {
                    harness::Admin::new(d.admin_addr.clone())
                        .metrics()
                        .get(&gauge, &[])
                        == Some(1.0)
                })
                .collect();
            if let [one] = leaders[..] {
                break one;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "{}: expected exactly one leading replica, found {}",
                entry.bin,
                leaders.len()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        println!(
            "  {:<22} leader {} (pid {}, admin http://{})",
            entry.bin,
            leader.spec.name,
            leader.pid().unwrap_or_default(),
            leader.admin_addr
        );
        if example.is_none() {
            example = Some((
                entry.bin.to_owned(),
                leader.spec.name.clone(),
                leader.pid().unwrap_or_default(),
                leader
                    .log_path
                    .parent()
                    .map(PathBuf::from)
                    .unwrap_or_default(),
            ));
        }
    }
    if let Some((bin, leader, pid, logs)) = example {
        let gauge = format!("cozy_backups_{}_leader", bin.replace('-', "_"));
        let admins: Vec<String> = daemons
            .iter()
            .filter(|d| d.spec.name.starts_with(&format!("{bin}-")))
            .map(|d| d.admin_addr.clone())
            .collect();
        println!("Watch a failover (e.g. {bin}):");
        println!(
            "  leadership: for a in {}; do curl -s http://$a/metrics | grep '^{gauge} '; done",
            admins.join(" ")
        );
        println!(
            "  graceful:   kill -TERM {pid}   # {leader} releases its leases; the other replica leads within a second"
        );
        println!(
            "  crash:      kill -9 {pid}      # the other replica leads within one TTL ({HA_LEASE_TTL})"
        );
        println!(
            "  logs:       grep -h 'leading\\|released\\|lost leadership' {}/{bin}-*.log",
            logs.display()
        );
        println!("  (a killed replica is not restarted; restart dev-up to get both back)");
    }
    Ok(())
}

fn write_metrics(dir: &std::path::Path, daemons: &[harness::Daemon]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for d in daemons {
        let (status, body) = harness::Admin::new(d.admin_addr.clone()).get("/metrics");
        anyhow::ensure!(
            status == 200,
            "{}: GET /metrics answered {status}",
            d.spec.name
        );
        let path = dir.join(format!("{}.prom", d.spec.name));
        std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))?;
    }
    println!("Metrics of every daemon written to {}", dir.display());
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
async fn within(
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

/// The permissive CRDs of the MariaDB and Etcd applications (served by cozystack-api in a
/// cluster; the simulators serve the Postgres one), before the daemons start.
pub async fn install_app_crds(client: &kube::Client) -> anyhow::Result<()> {
    use api::thirdparty::{apps, permissive_crd};
    use kube::api::PostParams;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in [
        permissive_crd::<apps::MariaDB>(true),
        permissive_crd::<apps::Etcd>(true),
    ] {
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).context("creating a CRD"),
        }
    }
    Ok(())
}

/// An API of the namespaced kind `K` in the example tenant, as dynamic objects.
pub(crate) fn dynamic<K>(client: &kube::Client) -> Api<kube::api::DynamicObject>
where
    K: kube::Resource<DynamicType = ()>,
{
    Api::namespaced_with(
        client.clone(),
        TENANT,
        &kube::core::ApiResource::erase::<K>(&()),
    )
}

/// Creates `body` unless it exists (answers whether it created it); retries for 30 s while the
/// kind is not served yet (a CRD just created on kube-apiserver).
pub(crate) async fn created<K>(api: &Api<K>, body: serde_json::Value) -> anyhow::Result<bool>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(body)?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match api.create(&Default::default(), &obj).await {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(false),
            Err(kube::Error::Api(e)) if e.code == 404 && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
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
trait HasPhase {
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

async fn psql_count(pg_bin_dir: &std::path::Path, uri: &str) -> anyhow::Result<String> {
    let out = tokio::process::Command::new(pg_bin_dir.join("psql"))
        .args([uri, "-X", "-A", "-t", "-c", "SELECT count(*) FROM orders"])
        .output()
        .await?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Objects of the Cozystack platform that daemons act on but that no daemon creates: the
/// `cozy-system` namespace and the `cozystack-api` Deployment that apidef-restarter rolls (the
/// emulator runs no pods, so rolling it only changes its pod template). Existing objects (from a
/// `--persist` snapshot) are kept.
pub async fn seed_platform_objects(client: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::PostParams;

    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "cozy-system"}
    }))?;
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "cozystack-api", "namespace": "cozy-system"},
        "spec": {
            "selector": {"matchLabels": {"app": "cozystack-api"}},
            "template": {
                "metadata": {"labels": {"app": "cozystack-api"}},
                "spec": {"containers": [{"name": "cozystack-api", "image": "cozystack-api:dev"}]}
            }
        }
    }))?;
    fn created<T>(r: Result<T, kube::Error>) -> Result<(), kube::Error> {
        match r {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e),
        }
    }
    created(
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &namespace)
            .await,
    )
    .context("namespace cozy-system")?;
    created(
        Api::<Deployment>::namespaced(client.clone(), "cozy-system")
            .create(&PostParams::default(), &deployment)
            .await,
    )
    .context("deployment cozy-system/cozystack-api")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent() {
        Args::command().debug_assert();
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
