//! Simulated third-party operators: small controllers that move foreign objects through the same
//! status transitions the real operators do, against any API server (the kube emulator in tests and
//! in the dev control plane), selectable one by one with `--sims`.
//!
//! ```text
//!  operator-sims --sims cosi,velero
//!     │ installs permissive CRDs for the kinds it serves (if absent)
//!     ├─ cosi:   Bucket ─► BucketClaim bucket-<name> ─(delay)─► status.bucketName=bucket-<uid>, bucketReady
//!     │          Bucket + bound claim ─► Secret bucket-<name>-<user>-credentials (accessKey, secretKey,
//!     │                                   endpoint as a bare host, bucketName), like the bucket chart
//!     └─ velero: BackupStorageLocation ─► status.phase Available iff its credential Secret key exists
//! ```
//!
//! Data flow: each simulator watches its kinds through a `kube::Client` into a [`Cache`] and
//! re-evaluates every object it serves whenever anything changes (event-driven; no polling).
//! Invariants: simulators only write objects and status fields the real operator owns, every
//! transition is one the real operator makes, and no credential value is ever logged. Adding a
//! simulator (CNPG, Flux, …) means adding a [`Sim`] variant, its CRDs and its module.

pub mod cache;
pub mod cosi;
pub mod velero;

use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PostParams};

/// A simulated operator.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Sim {
    /// COSI provisioner plus the bucket application chart (BucketClaim, credentials Secret).
    Cosi,
    /// Velero's BackupStorageLocation validation.
    Velero,
}

impl Sim {
    /// The third-party CRDs this simulator serves.
    pub fn crds(self) -> Vec<CustomResourceDefinition> {
        use api::thirdparty::{apps, cosi, permissive_crd, velero};
        match self {
            Sim::Cosi => vec![
                permissive_crd::<cosi::BucketClaim>(true),
                permissive_crd::<apps::Bucket>(true),
            ],
            Sim::Velero => vec![permissive_crd::<velero::BackupStorageLocation>(true)],
        }
    }
}

/// Runs the selected simulators.
#[derive(clap::Parser, Debug, Clone)]
#[command(name = "operator-sims", version, about)]
pub struct Args {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: runtime::ClientArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub admin: runtime::AdminArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub log: runtime::LogArgs,
    /// Simulators to run (comma-separated).
    #[arg(
        long,
        env = "SIMS",
        value_enum,
        value_delimiter = ',',
        default_value = "cosi,velero"
    )]
    pub sims: Vec<Sim>,
    /// Install the permissive CRDs of the selected simulators when absent.
    #[arg(long, env = "INSTALL_CRDS", action = clap::ArgAction::Set, default_value_t = true)]
    pub install_crds: bool,
    /// COSI: delay between a BucketClaim appearing and its bucket being reported ready.
    #[arg(long, env = "COSI_DELAY_MS", default_value_t = 200)]
    pub cosi_delay_ms: u64,
    /// COSI: S3 endpoint written to credentials Secrets (a bare host, as the bucket chart writes it).
    #[arg(long, env = "COSI_ENDPOINT", default_value = "s3.cozy.local")]
    pub cosi_endpoint: String,
}

/// Creates each CRD unless a CRD of that name exists.
pub async fn install_crds(
    client: &kube::Client,
    crds: &[CustomResourceDefinition],
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), crd).await {
            Ok(_) => tracing::info!(crd = name, "installed permissive CRD"),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("create CRD {name}")),
        }
    }
    Ok(())
}

/// Runs the daemon until SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let daemon = runtime::Daemon::start(
        "operator-sims",
        &args.client,
        &args.admin,
        &args.log,
        &serde_json::json!({
            "sims": args.sims.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>(),
            "installCrds": args.install_crds,
            "cosiDelayMs": args.cosi_delay_ms,
            "cosiEndpoint": args.cosi_endpoint,
        }),
    )
    .await?;
    let client = daemon.client.clone();
    let crds_ready = daemon.readiness.register("crds");
    if args.install_crds {
        let crds: Vec<_> = args.sims.iter().flat_map(|s| s.crds()).collect();
        install_crds(&client, &crds).await?;
    }
    crds_ready.set_ready();
    let mut tasks = tokio::task::JoinSet::new();
    for sim in &args.sims {
        match sim {
            Sim::Cosi => {
                tasks.spawn(cosi::run(
                    client.clone(),
                    cosi::Options {
                        delay: Duration::from_millis(args.cosi_delay_ms),
                        endpoint: args.cosi_endpoint.clone(),
                    },
                    daemon.readiness.clone(),
                ));
            }
            Sim::Velero => {
                tasks.spawn(velero::run(client.clone(), daemon.readiness.clone()));
            }
        }
    }
    let shutdown = daemon.shutdown.clone();
    daemon
        .run(async move {
            tokio::select! {
                _ = shutdown.signaled() => {}
                Some(r) = tasks.join_next() => {
                    r.context("simulator task")??;
                }
            }
            tasks.abort_all();
            Ok(())
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[test]
    fn args_and_crds() {
        Args::command().debug_assert();
        let args = Args::parse_from(["operator-sims", "--sims=velero", "--install-crds=false"]);
        assert_eq!(args.sims, [Sim::Velero]);
        assert!(!args.install_crds);
        let names = |s: Sim| -> Vec<String> {
            s.crds()
                .into_iter()
                .map(|c| c.metadata.name.unwrap())
                .collect()
        };
        assert_eq!(
            names(Sim::Cosi),
            [
                "bucketclaims.objectstorage.k8s.io",
                "buckets.apps.cozystack.io"
            ]
        );
        assert_eq!(names(Sim::Velero), ["backupstoragelocations.velero.io"]);
    }
}
