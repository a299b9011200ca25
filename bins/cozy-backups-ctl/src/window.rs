//! The recoverable window of a Postgres application's archive, computed from the same inputs as
//! the restore-orchestrator's pre-flight: its Cluster `postgres-<app>`, the ObjectStore of that
//! name and the namespace's catalog Backups, through `drivers::restore::cnpg::recoverable_window`.

use anyhow::Context as _;
use api::backups::{Backup, RecoverableWindow};
use drivers::cnpg::{cluster_name, keys, live_server_name};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use serde_json::Value;

use crate::WindowOutput;

/// What the window of one server is computed from, and the result.
#[derive(Debug, Clone)]
pub struct Computed {
    /// The archive's server name the window belongs to.
    pub server: String,
    /// `postgres-<app>`: the Cluster and ObjectStore looked at.
    pub cluster: String,
    /// The window; `None` when no start is known.
    pub window: Option<RecoverableWindow>,
}

/// The server name a catalog Backup was taken of.
pub fn server_of(b: &Backup) -> Option<String> {
    b.spec
        .driver_metadata
        .as_ref()
        .and_then(|m| m.get(keys::SERVER_NAME))
        .cloned()
}

/// Lists the namespace's catalog Backups.
pub async fn catalog(client: &kube::Client, namespace: &str) -> anyhow::Result<Vec<Backup>> {
    Ok(Api::<Backup>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("list Backups in {namespace}"))?
        .items)
}

async fn get(
    client: &kube::Client,
    namespace: &str,
    resource: ApiResource,
    name: &str,
) -> anyhow::Result<Option<Value>> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
    api.get_opt(name)
        .await
        .with_context(|| format!("get {} {namespace}/{name}", resource.kind))?
        .map(serde_json::to_value)
        .transpose()
        .context("encode")
}

/// The window of Postgres `app` in `namespace`. `server` names the archive's server (a restore
/// uses its Backup's); without it, the live Cluster's server, else the newest catalog Backup's of
/// the application, else the Cluster's name. `catalog` is the namespace's Backups.
pub async fn compute(
    client: &kube::Client,
    namespace: &str,
    app: &str,
    server: Option<&str>,
    catalog: &[Backup],
) -> anyhow::Result<Computed> {
    use api::thirdparty::{barman, cnpg};
    let cluster_name = cluster_name(app);
    let cluster = get(
        client,
        namespace,
        ApiResource::erase::<cnpg::Cluster>(&()),
        &cluster_name,
    )
    .await?;
    let store = get(
        client,
        namespace,
        ApiResource::erase::<barman::ObjectStore>(&()),
        &cluster_name,
    )
    .await?;
    let server = server
        .map(str::to_owned)
        .or_else(|| cluster.as_ref().and_then(live_server_name))
        .or_else(|| {
            catalog
                .iter()
                .filter(|b| of_app(b, app) && server_of(b).is_some())
                .max_by_key(|b| b.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .and_then(server_of)
        })
        .unwrap_or_else(|| cluster_name.clone());
    let window = drivers::restore::cnpg::recoverable_window(
        &server,
        store.as_ref(),
        cluster.as_ref(),
        catalog,
    );
    Ok(Computed {
        server,
        cluster: cluster_name,
        window,
    })
}

fn of_app(b: &Backup, app: &str) -> bool {
    b.spec.application_ref.name == app && b.spec.application_ref.kind == "Postgres"
}

/// RFC 3339 text of a time, as the API serialises it.
pub fn rfc3339(t: &Option<Time>) -> Option<String> {
    t.as_ref()
        .and_then(|t| serde_json::to_value(t).ok())
        .and_then(|v| v.as_str().map(str::to_owned))
}

/// `window`: the recoverable window of a Postgres application's archive, computed as the
/// restore-orchestrator's pre-flight computes it.
pub async fn window(
    client: kube::Client,
    namespace: &str,
    app: &str,
    output: WindowOutput,
) -> anyhow::Result<String> {
    let catalog: Vec<Backup> = catalog(&client, namespace)
        .await?
        .into_iter()
        .filter(|b| of_app(b, app))
        .collect();
    let Computed {
        server,
        cluster: cluster_name,
        window,
    } = compute(&client, namespace, app, None, &catalog).await?;
    let window = window.with_context(|| {
        format!(
            "no recoverable window known for Postgres {namespace}/{app} (server {server:?}): \
             no recovery window in ObjectStore {namespace}/{cluster_name}'s status and no \
             catalog Backup of that server"
        )
    })?;
    let backups: Vec<(String, Option<String>)> = catalog
        .iter()
        .filter(|b| server_of(b).as_deref() == Some(server.as_str()))
        .map(|b| {
            let stopped = b
                .spec
                .driver_metadata
                .as_ref()
                .and_then(|m| m.get(keys::STOPPED_AT))
                .cloned();
            (b.metadata.name.clone().unwrap_or_default(), stopped)
        })
        .collect();
    let (from, to) = (rfc3339(&window.from), rfc3339(&window.to));
    Ok(match output {
        WindowOutput::Json => {
            let value = serde_json::json!({
                "namespace": namespace,
                "application": app,
                "server": server,
                "from": from,
                "to": to,
                "backups": backups.iter().map(|(name, stopped)| {
                    serde_json::json!({"name": name, "stoppedAt": stopped})
                }).collect::<Vec<_>>(),
            });
            serde_json::to_string_pretty(&value).context("render JSON")? + "\n"
        }
        WindowOutput::Text => {
            let mut out = format!(
                "application  {namespace}/{app} (Postgres)\nserver       {server}\nrecoverable  {} … {}\n",
                from.as_deref().unwrap_or("?"),
                to.as_deref().unwrap_or("unknown (archiving may be behind)"),
            );
            out += &format!("base backups {} in the catalog\n", backups.len());
            for (name, stopped) in &backups {
                out += &format!("  {name}  stopped {}\n", stopped.as_deref().unwrap_or("?"));
            }
            out
        }
    })
}
