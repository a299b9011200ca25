//! The dev control plane behind `hack/dev-up.sh`: one command that starts the kube emulator with
//! `deploy/crds/` loaded, writes `.dev/kubeconfig`, starts every daemon in [`DAEMONS`] as a separate process
//! pointed at it, prints what to run next, and stays in the foreground until Ctrl-C/SIGTERM.
//!
//! ```text
//! devcluster ─► kube emulator (in-process, 127.0.0.1) ◄── kubectl --kubeconfig .dev/kubeconfig
//!            └► daemon processes (KUBECONFIG=.dev/kubeconfig, ADMIN_ADDR=127.0.0.1:<free>) ─┘
//! ```
//! Invariants: daemons are started only after the emulator serves every CRD; `--check` proves the whole
//! path (emulator, CRDs, every daemon's `/ready`) and exits 0, so tests and CI can run the same command.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ListParams};

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
    DaemonEntry {
        bin: "operator-sims",
        args: &["--sims=cosi,velero", "--cosi-delay-ms=500"],
    },
    // Renders Bucket cozy-backups, BackupClass cozy-default, the cozy-default-* strategies and the
    // BSL from upstream's default values (config: ConfigMap cozy-backup-controller/strategy-renderer-config,
    // absent = defaults).
    DaemonEntry {
        bin: "strategy-renderer",
        args: &[],
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
            "--endpoint=http://seaweedfs-s3.tenant-root.svc.cozy.local:8333",
            "--region=us-east-1",
            "--force-path-style=true",
            "--system-namespaces=cozy-velero",
        ],
    },
    // Rolls cozy-system/cozystack-api (seeded below) when the set of ApplicationDefinitions changes.
    DaemonEntry {
        bin: "apidef-restarter",
        args: &["--debounce=2s"],
    },
    // The lease service, its epoch ConfigMap in `default`. The dev daemons run single-replica
    // (`--lease-endpoint=none`); the gRPC port is picked freely and logged ("serving leases").
    DaemonEntry {
        bin: "lease-server",
        args: &["--grpc-addr=127.0.0.1:0", "--namespace=default"],
    },
];

/// Namespaces the dev control plane creates before starting the daemons: the platform bucket's
/// tenant, Velero's namespace and the backup controllers' namespace (the renderer's ConfigMap).
pub const NAMESPACES: &[&str] = &["tenant-root", "cozy-velero", "cozy-backup-controller"];

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
}

/// Runs the dev control plane until a signal, `--exit-after`, or (with `--check`) verification.
pub async fn run(args: Args) -> anyhow::Result<()> {
    std::fs::create_dir_all(&args.dev_dir)
        .with_context(|| format!("creating {}", args.dev_dir.display()))?;
    let kubeconfig = args.dev_dir.join("kubeconfig");
    let config = kube_emulator::Config {
        port: args.port,
        kubeconfig_out: Some(kubeconfig.clone()),
        crd_dirs: vec![args.crds.clone()],
        snapshot: args.persist.then(|| args.dev_dir.join("snapshot.json")),
        audit_log: Some(args.dev_dir.join("audit.jsonl")),
        ..Default::default()
    };
    let emulator = kube_emulator::Emulator::start(config)
        .await
        .context("starting the kube emulator")?;
    let crds: Api<CustomResourceDefinition> = Api::all(emulator.client());
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

    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(emulator.client());
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

    seed_platform_objects(&emulator.client())
        .await
        .context("creating the platform objects")?;

    let logs = args.dev_dir.join("logs");
    std::fs::create_dir_all(&logs)?;
    let mut daemons = Vec::new();
    for entry in DAEMONS {
        let bin = harness::locate_binary(entry.bin).with_context(|| {
            format!(
                "{} is not built; run hack/dev-up.sh, which builds every binary",
                entry.bin
            )
        })?;
        let spec = harness::DaemonSpec::new(entry.bin, bin).args(entry.args.iter().copied());
        let mut d = harness::Daemon::spawn(spec, &kubeconfig, &logs)?;
        d.wait_ready(Duration::from_secs(60)).await?;
        daemons.push(d);
    }

    let kc = kubeconfig.display();
    println!("Dev control plane is up.");
    println!("  API server:  {}", emulator.url());
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
    if args.check {
        println!("check passed");
    } else {
        match args.exit_after {
            Some(s) => {
                println!("Stopping after {s}s.");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(s)) => {}
                    _ = kube_emulator::cli::wait_for_signal() => {}
                }
            }
            None => {
                println!("Press Ctrl-C to stop.");
                kube_emulator::cli::wait_for_signal().await;
            }
        }
    }
    for d in &mut daemons {
        d.kill().await?;
    }
    emulator.shutdown().await;
    Ok(())
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
}
