//! `runtime-probe`: the smallest daemon built on the runtime, used by its tests to prove the shared
//! plumbing end to end (readiness after the initial watch list, reconcile metrics, SIGTERM exit).
//!
//! It watches ConfigMaps in every namespace and counts them; it never writes.

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{Controller, WatchStreamExt, controller::Action, reflector, watcher};
use kube::{Api, ResourceExt};
use runtime::{AdminArgs, Backoff, ClientArgs, ControllerMetrics, Daemon, LogArgs};
use std::sync::Arc;
use std::time::Duration;

/// Watch ConfigMaps and expose the runtime's admin endpoints.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Args {
    #[command(flatten)]
    client: ClientArgs,
    #[command(flatten)]
    admin: AdminArgs,
    #[command(flatten)]
    log: LogArgs,
}

struct Context {
    metrics: ControllerMetrics,
    backoff: Backoff<ConfigMap>,
}

#[derive(Debug, thiserror::Error)]
enum Error {}

impl runtime::ReconcileError for Error {
    fn kind(&self) -> &'static str {
        match *self {}
    }
    fn class(&self) -> runtime::ErrorClass {
        match *self {}
    }
}

async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Context>) -> Result<Action, Error> {
    let timer = ctx.metrics.start();
    tracing::info!(
        namespace = cm.namespace().unwrap_or_default(),
        name = cm.name_any(),
        "seen"
    );
    timer.finish(None);
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(cm: Arc<ConfigMap>, err: &Error, ctx: Arc<Context>) -> Action {
    ctx.backoff
        .action_for(kube::runtime::reflector::ObjectRef::from(cm.as_ref()), err)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let daemon = Daemon::start("runtime-probe", &args.client, &args.admin, &args.log, &()).await?;
    println!("listening {}", daemon.admin_addr());
    // Readiness follows the watcher's initial list: `/ready` stays 503 until it is complete.
    let ready = daemon.readiness.register("watch ConfigMap");
    let (reader, writer) = reflector::store();
    let events = runtime::watch::mark_ready_on_init(
        watcher(
            Api::<ConfigMap>::all(daemon.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff(),
        ready,
    );
    let controller = Controller::for_stream(
        reflector::reflector(writer, events).applied_objects(),
        reader,
    )
    .graceful_shutdown_on(daemon.shutdown.signaled());
    let ctx = Arc::new(Context {
        metrics: ControllerMetrics::new("runtime-probe", "configmaps"),
        backoff: Backoff::default(),
    });
    let run = controller
        .run(reconcile, error_policy, ctx)
        .for_each(|item| {
            runtime::controller::log_item("configmaps", &item);
            futures::future::ready(())
        });
    daemon
        .run(async move {
            run.await;
            Ok(())
        })
        .await
}
