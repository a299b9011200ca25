//! `runtime-probe`: the smallest daemon built on the runtime, used by its tests to prove the shared
//! plumbing end to end (readiness after the initial watch list, reconcile metrics, SIGTERM exit).
//!
//! It watches ConfigMaps in every namespace and counts them; it never writes. With
//! `--elector-ends-after`, it also runs a singleton loop whose leader elector ends after that
//! delay, to prove that a daemon whose elector is gone exits non-zero.

use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::ResourceExt;
use kube::runtime::{Controller, controller::Action};
use runtime::{AdminArgs, Backoff, ClientArgs, ControllerMetrics, Daemon, LogArgs, Watch};
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
    /// Run a singleton loop whose leader elector ends after this delay (e.g. `1s`).
    #[arg(long, value_parser = runtime::duration::parse)]
    elector_ends_after: Option<Duration>,
}

/// The singleton loop's work: nothing (the test is about the loop ending).
struct Idle;

impl runtime::Evaluate for Idle {
    type Outcome = ();
    type Error = Error;
    async fn evaluate(&mut self, _pass: &runtime::Pass) -> Result<(), Error> {
        Ok(())
    }
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
    let (reader, objects) =
        Watch::<ConfigMap>::new(daemon.client.clone()).reflect(&daemon.watch_context());
    let controller =
        Controller::for_stream(objects, reader).graceful_shutdown_on(daemon.shutdown.signaled());
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
    let singleton = args.elector_ends_after.map(|after| {
        let (tx, rx) = tokio::sync::watch::channel(lease::Leadership::Leading { token: 1 });
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            drop(tx);
        });
        runtime::Singleton::new(
            "runtime-probe",
            "idle",
            lease::LeaderElector::from_receiver(rx),
        )
        .run(Idle, daemon.shutdown.clone())
    });
    daemon
        .run(async move {
            match singleton {
                Some(singleton) => tokio::select! {
                    () = run => {}
                    ended = singleton => ended?,
                },
                None => run.await,
            }
            Ok(())
        })
        .await
}
