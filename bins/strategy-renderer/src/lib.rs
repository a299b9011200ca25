//! The `strategy-renderer` daemon: keeps the platform default backup objects equal to what
//! `strategy_render::render` computes from the configuration and the live bucket state.
//!
//! ```text
//!  inputs (runtime caches, event-driven)           Singleton "defaults" (leader writes)
//!  ConfigMap <cfg-ns>/<cfg-name> (values.yaml) ──┐
//!  BucketClaim <ns>/bucket-<bucketName> ─────────┤   plan::next_config ─► render ─► plan::plan
//!  Secret <ns>/<systemSecretName> (endpoint) ────┼─► ─► apply / prune (renderer.rs)
//!  Bucket, BackupClass, 7 strategy kinds, BSL ───┘   ─► plan::ready_status ─► BackupClass Ready + gauge
//!          (the rendered objects: drift/deletes)
//! ```
//!
//! Modules: [`args`] (flags), [`inputs`] (watches and the snapshot an evaluation reads), [`plan`]
//! (every decision, pure), [`renderer`] (the executor), [`metrics`].
//!
//! Invariants:
//! * Nothing is evaluated before every watch has delivered its initial list, so a restart never
//!   mistakes "not listed yet" for "absent" (no pruning or re-creation after kill -9).
//! * Writes are server-side applies under [`FIELD_MANAGER`] with force; an object already holding
//!   every rendered value is not written at all.
//! * Only objects labelled `app.kubernetes.io/managed-by=strategy-renderer` are ever deleted, and a
//!   `Bucket` never is (it holds the backups); sibling BackupClasses and admin strategies are
//!   never touched.
//! * An invalid configuration never changes the cluster: the last good one stays in force, and the
//!   error (naming the key) goes to the log, a Warning Event on the ConfigMap and `/ready`.
//! * The Secret watch keeps only the `endpoint` value; no credential is held, logged or reported.

pub mod args;
pub mod inputs;
pub mod metrics;
pub mod plan;
pub mod renderer;

use std::time::Duration;

use runtime::{Singleton, Trigger};

pub use args::{Args, RenderArgs};

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "strategy-renderer";
/// Component name (logs, metrics prefix, Event reporter).
pub const COMPONENT: &str = "strategy-renderer";

/// Runs the daemon until SIGTERM.
pub async fn run(args: Args) -> anyhow::Result<()> {
    let defaults = args.render.defaults();
    let daemon = runtime::Daemon::start(
        COMPONENT,
        &args.client,
        &args.admin,
        &args.log,
        &serde_json::json!({
            "configMap": format!("{}/{}", args.render.config_namespace, args.render.config_name),
            "defaults": &defaults,
            "leaseEndpoint": args.lease.lease_endpoint,
        }),
    )
    .await?;
    let (leader, _work) = daemon.leases(&args.lease, COMPONENT).await?;
    metrics::describe();
    let changed = Trigger::new();
    let inputs = inputs::Inputs::start(
        &daemon.client,
        &daemon.watch_context(),
        (&args.render.config_namespace, &args.render.config_name),
        &defaults,
        &changed,
    );
    let synced = inputs.synced_gate();
    let renderer = renderer::Renderer {
        recorder: runtime::events::recorder(&daemon.client, COMPONENT, &args.lease),
        client: daemon.client.clone(),
        inputs,
        defaults,
        config_ref: (
            args.render.config_namespace.clone(),
            args.render.config_name.clone(),
        ),
        config_ready: daemon.readiness.register("configuration"),
        memory: plan::ConfigMemory::default(),
        last_applied: Default::default(),
    };
    let evaluation = Singleton::new(COMPONENT, "defaults", leader)
        .on_change(&changed)
        // Followers evaluate too: their configuration readiness stays current and their caches
        // follow the configuration, so a failover starts warm. Only the leader writes.
        .followers_evaluate()
        .when(synced)
        .backoff(Duration::from_millis(250), Duration::from_secs(60))
        .run(renderer, daemon.shutdown.clone());
    daemon.run(async move { Ok(evaluation.await?) }).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};
    use strategy_render::RenderConfig;

    #[test]
    fn args_are_consistent_and_default_to_upstream_values() {
        Args::command().debug_assert();
        let args = Args::parse_from(["strategy-renderer"]);
        assert_eq!(args.render.defaults(), RenderConfig::default());
        let args = Args::parse_from([
            "strategy-renderer",
            "--velero-bsl-enabled=false",
            "--system-namespaces=a,b",
            "--bind-foundationdb",
        ]);
        let d = args.render.defaults();
        assert!(!d.velero.bsl_enabled && d.bind_foundationdb);
        assert_eq!(d.backup_storage.system_namespaces, ["a", "b"]);
    }
}
