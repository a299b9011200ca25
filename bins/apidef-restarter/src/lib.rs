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

pub mod debounce;
pub mod decide;
pub mod metrics;
pub mod restarter;

use clap::Parser;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use runtime::{AdminArgs, ClientArgs, Daemon, LeaseArgs, LogArgs};
use serde::Serialize;
use std::time::Duration;

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
    #[arg(long, env = "APIDEF_DEBOUNCE", default_value = "5s", value_parser = parse_duration)]
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
    #[serde(serialize_with = "as_millis")]
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

fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{}ms", d.as_millis()))
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

/// Parses `500ms`, `5s`, `2m` or a bare number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit() && c != '.') {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid duration {s:?}: expected e.g. 500ms, 5s or 2m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        _ => return Err(format!("invalid duration unit in {s:?}: use ms, s or m")),
    };
    Duration::try_from_secs_f64(secs).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// The two watches the restarter consumes, each marking its readiness check once its initial list
/// is complete: every ApplicationDefinition (untyped, so a malformed one cannot break the stream),
/// and the one Deployment.
pub fn watch_streams(
    client: &kube::Client,
    config: &Config,
    readiness: &runtime::Readiness,
) -> (
    impl futures::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>> + use<>,
    impl futures::Stream<Item = Result<watcher::Event<Deployment>, watcher::Error>> + use<>,
) {
    let definitions = runtime::watch::mark_ready_on_init(
        watcher(
            Api::<DynamicObject>::all_with(client.clone(), &appdef::api_resource()),
            watcher::Config::default(),
        )
        .default_backoff(),
        readiness.register("watch ApplicationDefinition"),
    );
    // RBAC grants this Deployment by name only, which the API server honours for list/watch when
    // the request carries the matching field selector.
    let deployment = runtime::watch::mark_ready_on_init(
        watcher(
            Api::<Deployment>::namespaced(client.clone(), &config.namespace),
            watcher::Config::default().fields(&format!("metadata.name={}", config.deployment)),
        )
        .default_backoff(),
        readiness.register(&format!(
            "watch Deployment {}/{}",
            config.namespace, config.deployment
        )),
    );
    (definitions, deployment)
}

/// Starts the daemon and runs it until SIGTERM/SIGINT.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let config = args.config();
    let daemon = Daemon::start(COMPONENT, &args.client, &args.admin, &args.log, &config).await?;
    let (elector, _work_leases) = daemon.leases(&args.lease, COMPONENT).await?;
    let client = daemon.client.clone();

    let (definitions, deployment) = watch_streams(&client, &config, &daemon.readiness);
    let shutdown = daemon.shutdown.clone();
    let restarter = restarter::Restarter::new(client, config, elector);
    daemon
        .run(restarter.run(definitions, deployment, shutdown))
        .await
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
    }

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("5h").is_err());
        assert!(parse_duration("fast").is_err());
    }
}
