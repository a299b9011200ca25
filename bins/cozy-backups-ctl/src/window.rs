//! The recoverable window of a Postgres application's archive, computed from the same inputs as
//! the restore-orchestrator's pre-flight: its Cluster `postgres-<app>`, the ObjectStore of that
//! name and the namespace's catalog Backups, through `drivers::restore::cnpg::recoverable_window`.
//!
//! A cluster without CloudNativePG or its Barman Cloud plugin does not serve those kinds at all;
//! such a kind counts as no object (the window then comes from the catalog alone), and
//! [`Computed::unserved`] names it so that the commands can say why.

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
    /// The kinds looked at that the API server does not serve (`plural.group/version`).
    pub unserved: Vec<String>,
}

impl Computed {
    /// A sentence naming the kinds the API server does not serve, if any.
    pub fn unserved_note(&self) -> Option<String> {
        (!self.unserved.is_empty()).then(|| {
            format!(
                "the API server does not serve {} (CloudNativePG or its Barman Cloud plugin is \
                 not installed), so the window comes from the catalog Backups alone",
                self.unserved.join(" or ")
            )
        })
    }
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
        .map_err(crate::platform_error::<Backup>)
        .with_context(|| format!("list Backups in {namespace}"))?
        .items)
}

/// What a GET of one object of a kind the API server may not serve found.
enum Lookup {
    /// The object.
    Found(Value),
    /// The kind is served; no object of that name.
    Absent,
    /// The API server does not serve the kind.
    Unserved,
}

impl Lookup {
    fn object(&self) -> Option<&Value> {
        match self {
            Lookup::Found(v) => Some(v),
            Lookup::Absent | Lookup::Unserved => None,
        }
    }
}

async fn get(
    client: &kube::Client,
    namespace: &str,
    resource: &ApiResource,
    name: &str,
) -> anyhow::Result<Lookup> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, resource);
    match api.get(name).await {
        Ok(obj) => Ok(Lookup::Found(serde_json::to_value(obj).context("encode")?)),
        Err(e) if crate::kind_not_served(&e) => Ok(Lookup::Unserved),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Lookup::Absent),
        Err(e) => Err(e).with_context(|| format!("get {} {namespace}/{name}", resource.kind)),
    }
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
    let cluster_kind = ApiResource::erase::<cnpg::Cluster>(&());
    let store_kind = ApiResource::erase::<barman::ObjectStore>(&());
    let cluster = get(client, namespace, &cluster_kind, &cluster_name).await?;
    let store = get(client, namespace, &store_kind, &cluster_name).await?;
    let unserved = [(&cluster, &cluster_kind), (&store, &store_kind)]
        .into_iter()
        .filter(|(l, _)| matches!(l, Lookup::Unserved))
        .map(|(_, r)| crate::resource_name(r))
        .collect();
    let (cluster, store) = (cluster.object(), store.object());
    let server = server
        .map(str::to_owned)
        .or_else(|| cluster.and_then(live_server_name))
        .or_else(|| {
            catalog
                .iter()
                .filter(|b| of_app(b, app) && server_of(b).is_some())
                .max_by_key(|b| b.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .and_then(server_of)
        })
        .unwrap_or_else(|| cluster_name.clone());
    let window = drivers::restore::cnpg::recoverable_window(&server, store, cluster, catalog);
    Ok(Computed {
        server,
        cluster: cluster_name,
        window,
        unserved,
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
    let computed = compute(&client, namespace, app, None, &catalog).await?;
    let note = computed.unserved_note();
    let Computed {
        server,
        cluster: cluster_name,
        window,
        ..
    } = computed;
    let window = window.with_context(|| {
        let why = note.map(|n| format!("; {n}")).unwrap_or_default();
        format!(
            "no recoverable window known for Postgres {namespace}/{app} (server {server:?}): \
             no recovery window in ObjectStore {namespace}/{cluster_name}'s status and no \
             catalog Backup of that server{why}"
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
