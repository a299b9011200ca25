//! A stand-in daemon for the harness's own tests: it follows the daemon contract (kubeconfig from
//! `KUBECONFIG`, admin server on `ADMIN_ADDR` with the bound address written to `ADMIN_ADDR_FILE`,
//! `/ready` true after its first successful list) and records a ConfigMap per start so restarts are
//! observable.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = std::env::var("ADMIN_ADDR")?;
    let client = kube::Client::try_default().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let n = namespaces.list(&ListParams::default()).await?.items.len();
    let pid = std::process::id().to_string();
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "harness-probe"}, "data": {"pid": pid}});
    cms.patch(
        "harness-probe",
        &PatchParams::apply("harness-probe").force(),
        &Patch::Apply(&body),
    )
    .await?;
    println!("harness-probe-daemon pid {pid} saw {n} namespaces; serving {addr}");
    let app = axum::Router::new()
        .route("/ready", axum::routing::get(|| async { "ready" }))
        .route("/live", axum::routing::get(|| async { "live" }));
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    if let Ok(file) = std::env::var("ADMIN_ADDR_FILE") {
        std::fs::write(file, listener.local_addr()?.to_string())?;
    }
    axum::serve(listener, app).await?;
    Ok(())
}
