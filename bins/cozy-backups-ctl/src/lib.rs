//! `cozy-backups-ctl`: the operator CLI of the backup platform. Each subcommand is one module-level
//! function over a kube client that returns the text to print, so tests call it directly and other
//! issues add subcommands beside it.
//!
//! ```text
//!  cozy-backups-ctl [--kubeconfig …] find-kind HTTPCache [-o yaml|json]
//!      └─► appdef::KindCache::for_process (one list, exact spec.application.kind match) ─► yaml/json
//!  cozy-backups-ctl window -n NS APP [-o text|json]
//!      └─► Cluster + ObjectStore postgres-<APP>, catalog Backups of APP
//!          ─► drivers::restore::cnpg::recoverable_window ─► text/json
//! ```
//!
//! Invariants: a CLI is short-lived, so it caches the ApplicationDefinition list for its lifetime
//! (the seed's guidance); errors name what failed (the kind, the group/version/resource listed).

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use runtime::ClientArgs;

/// Operator CLI of the cozy-backups platform.
#[derive(Parser, Debug)]
#[command(name = "cozy-backups-ctl", version, about)]
pub struct Args {
    /// How to reach the Kubernetes API.
    #[command(flatten)]
    pub client: ClientArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Print the ApplicationDefinition whose spec.application.kind is KIND (exact, case-sensitive;
    /// e.g. HTTPCache, whose definition is named http-cache).
    FindKind {
        /// The tenant-facing kind, e.g. `HTTPCache`.
        kind: String,
        /// Output format.
        #[arg(short, long, env = "COZY_BACKUPS_CTL_OUTPUT", value_enum, default_value_t = Output::Yaml)]
        output: Output,
    },
    /// Print the point-in-time recoverable window of a Postgres application: from the oldest base
    /// backup still in its archive to the newest archived point known. A RestoreJob's
    /// `recoveryTime` before the window is refused.
    Window {
        /// The application's namespace.
        #[arg(short, long)]
        namespace: String,
        /// The Postgres application's name.
        app: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = WindowOutput::Text)]
        output: WindowOutput,
    },
}

/// Output formats of `window`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowOutput {
    /// Lines for a person.
    Text,
    /// Pretty-printed JSON (`server`, `from`, `to`, `backups`).
    Json,
}

/// Output formats.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// YAML.
    Yaml,
    /// Pretty-printed JSON.
    Json,
}

/// Runs the command and returns what to print.
pub async fn run(args: Args) -> anyhow::Result<String> {
    match args.command {
        Command::FindKind { kind, output } => {
            let client = runtime::client(&args.client).await?;
            find_kind(client, &kind, output).await
        }
        Command::Window {
            namespace,
            app,
            output,
        } => {
            let client = runtime::client(&args.client).await?;
            window(client, &namespace, &app, output).await
        }
    }
}

/// `window`: the recoverable window of a Postgres application's archive, computed as the
/// restore-orchestrator's pre-flight computes it.
pub async fn window(
    client: kube::Client,
    namespace: &str,
    app: &str,
    output: WindowOutput,
) -> anyhow::Result<String> {
    use api::thirdparty::{barman, cnpg};
    use drivers::cnpg::{cluster_name, keys, live_server_name};
    use kube::api::{Api, DynamicObject, ListParams};
    use kube::core::ApiResource;

    let get = |resource: ApiResource, name: String| {
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        async move {
            api.get_opt(&name)
                .await
                .with_context(|| format!("get {} {namespace}/{name}", resource.kind))?
                .map(serde_json::to_value)
                .transpose()
                .context("encode")
        }
    };
    let cluster_name = cluster_name(app);
    let cluster = get(
        ApiResource::erase::<cnpg::Cluster>(&()),
        cluster_name.clone(),
    )
    .await?;
    let store = get(
        ApiResource::erase::<barman::ObjectStore>(&()),
        cluster_name.clone(),
    )
    .await?;
    let catalog: Vec<api::backups::Backup> = Api::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("list Backups in {namespace}"))?
        .items
        .into_iter()
        .filter(|b: &api::backups::Backup| {
            b.spec.application_ref.name == app && b.spec.application_ref.kind == "Postgres"
        })
        .collect();
    let server_of = |b: &api::backups::Backup| {
        b.spec
            .driver_metadata
            .as_ref()
            .and_then(|m| m.get(keys::SERVER_NAME))
            .cloned()
    };
    // The live Cluster's server name; without a Cluster, the newest catalog Backup's.
    let server = cluster
        .as_ref()
        .and_then(live_server_name)
        .or_else(|| {
            catalog
                .iter()
                .filter(|b| server_of(b).is_some())
                .max_by_key(|b| b.metadata.creation_timestamp.as_ref().map(|t| t.0))
                .and_then(server_of)
        })
        .unwrap_or_else(|| cluster_name.clone());
    let window = drivers::restore::cnpg::recoverable_window(
        &server,
        store.as_ref(),
        cluster.as_ref(),
        &catalog,
    )
    .with_context(|| {
        format!(
            "no recoverable window known for Postgres {namespace}/{app} (server {server:?}): \
             no recovery window in ObjectStore {namespace}/{cluster_name}'s status and no \
             catalog Backup of that server"
        )
    })?;
    let time = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.as_ref()
            .and_then(|t| serde_json::to_value(t).ok())
            .and_then(|v| v.as_str().map(str::to_owned))
    };
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
    let (from, to) = (time(&window.from), time(&window.to));
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

/// `find-kind`: the whole definition of `kind`, rendered.
pub async fn find_kind(client: kube::Client, kind: &str, output: Output) -> anyhow::Result<String> {
    let cache = appdef::KindCache::for_process(client);
    let def = cache
        .find(kind)
        .await
        .with_context(|| format!("find-kind {kind:?}"))?;
    Ok(match output {
        Output::Yaml => serde_yaml::to_string(&def).context("render YAML")?,
        Output::Json => serde_json::to_string_pretty(&def).context("render JSON")? + "\n",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent() {
        Args::command().debug_assert();
        let args = Args::parse_from(["cozy-backups-ctl", "find-kind", "HTTPCache", "-o", "json"]);
        match args.command {
            Command::FindKind { kind, output } => {
                assert_eq!((kind.as_str(), output), ("HTTPCache", Output::Json));
            }
            other => panic!("parsed {other:?}"),
        }
        let args = Args::parse_from([
            "cozy-backups-ctl",
            "window",
            "-n",
            "tenant-acme",
            "orders-db",
        ]);
        match args.command {
            Command::Window {
                namespace,
                app,
                output,
            } => assert_eq!(
                (namespace.as_str(), app.as_str(), output),
                ("tenant-acme", "orders-db", WindowOutput::Text)
            ),
            other => panic!("parsed {other:?}"),
        }
    }
}
