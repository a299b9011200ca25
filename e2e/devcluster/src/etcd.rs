//! The example tenant's Etcd application and the Etcd demo.
//!
//! ```text
//! seed:  Etcd etcd ─► HelmRelease etcd + EtcdCluster etcd (what the chart renders; the chart pins
//!        the cluster's name, so the tenant's Etcd is named etcd too) ─► a real etcd member
//!        └► Service etcd-client (annotation operator-sims.cozy-backups.io/endpoint) ─► etcdctl put
//!           config/greeting, config/region, config/replicas
//! demo:  BackupJob etcd-adhoc ─► the snapshot in the bucket ─► config/greeting changed
//!        ─► RestoreJob etcd-in-place (the cluster is recreated from the snapshot) ─► etcdctl get
//! ```

use std::time::Duration;

use anyhow::Context as _;
use kube::api::Api;
use serde_json::json;

use crate::{TENANT, created};

/// The tenant's Etcd application (and its HelmRelease).
pub const APP: &str = "etcd";
/// The EtcdCluster the chart renders (always this name).
pub const CLUSTER: &str = "etcd";
/// The client Service of the cluster.
pub const SERVICE: &str = "etcd-client";
/// The annotation on the client Service with the member's address.
pub const ENDPOINT: &str = "operator-sims.cozy-backups.io/endpoint";
/// The seeded keys.
pub const KEYS: &[(&str, &str)] = &[
    ("config/greeting", "hello"),
    ("config/region", "eu-west"),
    ("config/replicas", "3"),
];
/// How long the member may take to become Available.
const READY: Duration = Duration::from_secs(90);

/// Creates the application, its HelmRelease and the EtcdCluster the chart renders (existing ones
/// are kept).
pub async fn create(client: &kube::Client) -> anyhow::Result<()> {
    use api::thirdparty::{apps, etcd, flux};
    created(
        &crate::dynamic::<apps::Etcd>(client),
        json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": "Etcd",
               "metadata": {"name": APP, "namespace": TENANT}, "spec": {"replicas": 1, "size": "1Gi"}}),
    )
    .await
    .context("creating Etcd etcd")?;
    created(
        &crate::dynamic::<flux::HelmRelease>(client),
        json!({"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
               "metadata": {"name": APP, "namespace": TENANT},
               "spec": {"chart": {"spec": {"chart": "etcd"}}}}),
    )
    .await
    .context("creating HelmRelease etcd")?;
    created(
        &crate::dynamic::<etcd::EtcdCluster>(client),
        json!({"apiVersion": "etcd-operator.cozystack.io/v1alpha2", "kind": "EtcdCluster",
               "metadata": {"name": CLUSTER, "namespace": TENANT},
               "spec": {"replicas": 1, "storage": {"size": "1Gi"}}}),
    )
    .await
    .context("creating EtcdCluster etcd")?;
    Ok(())
}

/// Waits for the live EtcdCluster to be Available and answers its member's address (from the
/// client Service owned by that very cluster: after a restore, the new one's).
pub async fn member(client: &kube::Client) -> anyhow::Result<String> {
    use api::thirdparty::etcd;
    use k8s_openapi::api::core::v1::Service;
    let clusters = crate::dynamic::<etcd::EtcdCluster>(client);
    let services: Api<Service> = Api::namespaced(client.clone(), TENANT);
    let deadline = tokio::time::Instant::now() + READY;
    loop {
        if let Some(c) = clusters.get_opt(CLUSTER).await?
            && c.data["status"]["conditions"].as_array().is_some_and(|cs| {
                cs.iter()
                    .any(|c| c["type"] == "Available" && c["status"] == "True")
            })
            && let Some(svc) = services.get_opt(SERVICE).await?
            && svc
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| Some(&o.uid) == c.metadata.uid.as_ref())
            && let Some(endpoint) = svc
                .metadata
                .annotations
                .and_then(|a| a.get(ENDPOINT).cloned())
        {
            // The Service may still name a previous run's member (`--persist`) until the
            // simulator has started this run's: it answers once it is current.
            match etcdctl(&endpoint, &["endpoint", "health"]).await {
                Ok(_) => return Ok(endpoint),
                Err(e) if tokio::time::Instant::now() >= deadline => return Err(e),
                Err(_) => {}
            }
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "EtcdCluster {TENANT}/{CLUSTER} was not Available within {}s (see .dev/logs/operator-sims.log)",
            READY.as_secs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `etcdctl --endpoints endpoint args…`; its stdout, trimmed.
pub async fn etcdctl(endpoint: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = tokio::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", endpoint])
        .args(args)
        .output()
        .await
        .context("running etcdctl (hack/install-dataplane.sh installs it)")?;
    anyhow::ensure!(
        out.status.success(),
        "etcdctl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// Waits for the member and puts [`KEYS`]; answers the member's address.
pub async fn seed_keys(client: &kube::Client) -> anyhow::Result<String> {
    let endpoint = member(client).await?;
    for (k, v) in KEYS {
        etcdctl(&endpoint, &["put", k, v]).await?;
    }
    Ok(endpoint)
}

/// The `etcdctl` command line a user types to see the keys (the member's address from the
/// Service, which a restore replaces).
pub fn client_line(kubeconfig: &str) -> String {
    format!(
        "etcdctl --endpoints \"$(kubectl --kubeconfig {kubeconfig} -n {TENANT} get service {SERVICE} -o jsonpath='{{.metadata.annotations.operator-sims\\.cozy-backups\\.io/endpoint}}')\" get --prefix config/"
    )
}

/// The demo: back the cluster up, change a key, restore in place, show the key.
pub async fn demo(client: &kube::Client, kubeconfig: &str) -> anyhow::Result<()> {
    use api::backups::{Backup, RestoreJob};
    let backup = "etcd-adhoc";
    crate::demos::adhoc_backup_succeeded(client, "Demo (Etcd)", ("Etcd", APP), backup).await?;
    let artifact = Api::<Backup>::namespaced(client.clone(), TENANT)
        .get(backup)
        .await
        .with_context(|| format!("reading Backup {TENANT}/{backup}"))?
        .status
        .and_then(|s| s.artifact);
    if let Some(a) = artifact {
        println!(
            "  snapshot in the bucket: {} ({} bytes, {})",
            a.uri,
            a.size_bytes.unwrap_or_default(),
            a.checksum.unwrap_or_default()
        );
    }
    let restores: Api<RestoreJob> = Api::namespaced(client.clone(), TENANT);
    let name = "etcd-in-place";
    if restores.get_opt(name).await?.is_none() {
        let endpoint = member(client).await?;
        etcdctl(&endpoint, &["put", "config/greeting", "changed"]).await?;
        println!(
            "  config/greeting changed: {}",
            etcdctl(&endpoint, &["get", "config/greeting", "--print-value-only"]).await?
        );
    }
    let fresh = created(
        &restores,
        json!({"apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
               "metadata": {"name": name, "namespace": TENANT},
               "spec": {"backupRef": {"name": backup}}}),
    )
    .await
    .with_context(|| format!("creating RestoreJob {name}"))?;
    println!(
        "  RestoreJob {TENANT}/{name} (in place) {}",
        if fresh { "created" } else { "exists already" }
    );
    crate::restore_succeeded(&restores, name).await?;
    let endpoint = member(client).await?;
    println!(
        "  etcdctl get config/greeting: {}",
        etcdctl(&endpoint, &["get", "config/greeting", "--print-value-only"]).await?
    );
    println!("  check: {}", client_line(kubeconfig));
    Ok(())
}
