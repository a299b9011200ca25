//! `apidef-restarter`: rolls the aggregated API server `cozy-system/cozystack-api` whenever the set
//! of ApplicationDefinitions changes, because that server registers one tenant-facing kind per
//! definition at start-up and never refreshes.
//!
//! ```text
//!  watch applicationdefinitions ──► set (name → spec) ──► trailing-edge debounce (--debounce, 5 s)
//!                                                              │ settled
//!                                     SHA-256 of the canonical [{name, spec}] (libs/appdef)
//!                                                              │
//!  watch + GET deployment (fieldSelector metadata.name) ──► annotation == hash ? skip
//!                                                              : merge-patch spec.template annotation
//!                                                                (only the lease leader writes)
//! ```
//!
//! Invariants: every decision is derived from the cluster (the hash of the listed set versus the
//! annotation on the live Deployment), never from what this process did before, so a restart or
//! failover at any instant neither loses nor duplicates a roll; a burst of changes produces one
//! patch after it settles; an unchanged hash never writes. See `docs/apidef-restarter.md`.

pub mod decide;
pub mod metrics;
pub mod restarter;

use std::time::Duration;

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::DynamicObject;
use lease::LeaderElector;
use runtime::{
    AdminArgs, ClientArgs, Daemon, LeaseArgs, LogArgs, Singleton, Trigger, Watch, WatchContext,
};
use serde::Serialize;

/// The component name (lease, metrics prefix, logs).
pub const COMPONENT: &str = "apidef-restarter";

/// Roll cozystack-api when the set of ApplicationDefinitions changes.
#[derive(Parser, Debug, Clone)]
#[command(name = "apidef-restarter", version, about)]
pub struct Args {
    /// Kubernetes client.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Admin server.
    #[command(flatten)]
    pub admin: AdminArgs,
    /// Logging.
    #[command(flatten)]
    pub log: LogArgs,
    /// Leadership.
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// Quiet period after the last ApplicationDefinition change before the hash is evaluated
    /// (trailing edge), e.g. `5s`, `1500ms`, `1m`.
    #[arg(long, env = "APIDEF_DEBOUNCE", default_value = "5s", value_parser = runtime::duration::parse)]
    pub debounce: Duration,
    /// Namespace of the Deployment to roll.
    #[arg(long, env = "APIDEF_TARGET_NAMESPACE", default_value = "cozy-system")]
    pub namespace: String,
    /// Name of the Deployment to roll.
    #[arg(
        long,
        env = "APIDEF_TARGET_DEPLOYMENT",
        default_value = "cozystack-api"
    )]
    pub deployment: String,
    /// Pod-template annotation that carries the hash.
    #[arg(long, env = "APIDEF_HASH_ANNOTATION", default_value = api::contract::annotations::CONFIG_HASH)]
    pub annotation: String,
}

/// The daemon's own settings (logged as the effective configuration).
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Debounce window.
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub debounce: Duration,
    /// Deployment namespace.
    pub namespace: String,
    /// Deployment name.
    pub deployment: String,
    /// Annotation key.
    pub annotation: String,
    /// Lease endpoint (`none` = single replica).
    pub lease_endpoint: String,
}

impl Args {
    /// The daemon settings from the arguments.
    pub fn config(&self) -> Config {
        Config {
            debounce: self.debounce,
            namespace: self.namespace.clone(),
            deployment: self.deployment.clone(),
            annotation: self.annotation.clone(),
            lease_endpoint: self.lease.lease_endpoint.clone(),
        }
    }
}

/// Definitions per page when listing them: 50 definitions with 30 KiB schemas are a 1.5 MB page,
/// and a platform's few dozen definitions still arrive in one.
const DEFINITIONS_PAGE_SIZE: u32 = 50;

/// The restarter's loop, ready to run: watches every ApplicationDefinition (untyped, so a
/// malformed one cannot break the watch) and the one Deployment (RBAC grants it by name, which
/// the API server honours for list/watch with the matching field selector), and evaluates
/// `--debounce` after a burst of definition changes settles, and at once when the Deployment
/// changes.
pub fn restarter_loop(
    client: &kube::Client,
    config: Config,
    elector: LeaderElector,
    ctx: &WatchContext,
) -> impl std::future::Future<Output = Result<(), runtime::ElectorClosed>> + use<> {
    let definitions_changed = Trigger::new();
    let deployment_changed = Trigger::new();
    let definitions = Watch::<DynamicObject>::new_with(client.clone(), appdef::api_resource())
        .describe("ApplicationDefinition")
        // A definition carries its whole OpenAPI schema (tens of KiB): small pages keep the
        // initial list's peak low (docs/apidef-restarter.md, Scale).
        .page_size(DEFINITIONS_PAGE_SIZE)
        .strip(keep_name_and_spec)
        .cache(ctx, &definitions_changed);
    let deployment = Watch::<Deployment>::new(client.clone())
        .in_namespace(&config.namespace)
        .named(&config.deployment)
        .describe(&format!(
            "Deployment {}/{}",
            config.namespace, config.deployment
        ))
        .cache(ctx, &deployment_changed);
    let synced = {
        let (d, p) = (definitions.clone(), deployment.clone());
        move || d.is_synced() && p.is_synced()
    };
    let singleton = Singleton::new(COMPONENT, "config-hash", elector.clone())
        .on_change_debounced(&definitions_changed, config.debounce)
        .on_debounced_fires(metrics::record_definition_events)
        .on_change(&deployment_changed)
        // Followers hash too (metrics, and a warm start), but never write.
        .followers_evaluate()
        .when(synced);
    let work = restarter::Restarter::new(client.clone(), config, definitions, deployment);
    singleton.run(work, ctx.shutdown.clone())
}

/// Starts the daemon and runs it until SIGTERM/SIGINT.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let config = args.config();
    let daemon = Daemon::start(COMPONENT, &args.client, &args.admin, &args.log, &config).await?;
    let (elector, _work_leases) = daemon.leases(&args.lease, COMPONENT).await?;
    let work = restarter_loop(&daemon.client, config, elector, &daemon.watch_context());
    daemon.run(async move { Ok(work.await?) }).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent_and_default_to_upstream() {
        Args::command().debug_assert();
        let args = Args::parse_from(["apidef-restarter"]);
        let c = args.config();
        assert_eq!(
            (
                c.debounce,
                c.namespace.as_str(),
                c.deployment.as_str(),
                c.annotation.as_str()
            ),
            (
                Duration::from_secs(5),
                "cozy-system",
                "cozystack-api",
                "cozystack.io/config-hash"
            )
        );
        let args = Args::parse_from(["apidef-restarter", "--debounce", "1500ms"]);
        assert_eq!(args.debounce, Duration::from_millis(1500));
        assert!(Args::try_parse_from(["apidef-restarter", "--debounce", "5h3"]).is_err());
    }
}

/// The hash reads only each definition's name and spec: field ownership, labels, annotations (a
/// `kubectl apply` leaves a whole second copy there) and status are dropped on arrival.
fn keep_name_and_spec(o: &mut DynamicObject) {
    o.metadata.managed_fields = None;
    o.metadata.annotations = None;
    o.metadata.labels = None;
    if let Some(fields) = o.data.as_object_mut() {
        fields.retain(|k, _| k == "spec");
    }
}

#[cfg(test)]
mod strip_tests {
    use super::*;

    #[test]
    fn only_the_name_and_the_spec_are_kept() {
        let mut o: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
            "metadata": {"name": "postgres", "resourceVersion": "7", "labels": {"a": "b"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{…}"},
                         "managedFields": [{"manager": "kubectl"}]},
            "spec": {"application": {"kind": "Postgres"}},
            "status": {"observed": true},
        }))
        .unwrap();
        let before = decide::hash_of(&[std::sync::Arc::new(o.clone())]).unwrap();
        keep_name_and_spec(&mut o);
        assert_eq!(o.metadata.name.as_deref(), Some("postgres"));
        assert_eq!(o.metadata.resource_version.as_deref(), Some("7"));
        assert!(o.metadata.annotations.is_none() && o.metadata.managed_fields.is_none());
        assert_eq!(
            o.data,
            serde_json::json!({"spec": {"application": {"kind": "Postgres"}}})
        );
        assert_eq!(decide::hash_of(&[std::sync::Arc::new(o)]).unwrap(), before);
    }
}
