//! Command line and environment: the shared runtime groups plus the projection configuration, with
//! upstream's `BACKUP_STORAGE_*` variable names as the environment fallbacks.

use backup_storage::credentials::ProjectionConfig;
use clap::Parser;
use runtime::{AdminArgs, ClientArgs, LeaseArgs, LogArgs};
use serde::Serialize;
use std::time::Duration;

/// Projects the system bucket credentials into tenant and system namespaces.
#[derive(Parser, Debug, Clone)]
#[command(name = "credentials-projector", version, about)]
pub struct Args {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub admin: AdminArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub log: LogArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub projection: ProjectionArgs,
}

/// What to project, from where, and where to.
#[derive(clap::Args, Debug, Clone)]
pub struct ProjectionArgs {
    /// Namespace of the system credentials Secret (the source).
    #[arg(long, env = "BACKUP_STORAGE_SECRET_NAMESPACE", default_value = "")]
    pub source_namespace: String,
    /// Name of the system credentials Secret (the source).
    #[arg(long, env = "BACKUP_STORAGE_SECRET_NAME", default_value = "")]
    pub source_name: String,
    /// Name of the projected Secret in every target namespace.
    #[arg(long, env = "BACKUP_STORAGE_CREDS_SECRET_NAME", default_value = api::contract::names::CREDENTIALS_SECRET)]
    pub target_name: String,
    /// Fallback S3 endpoint (full URL) used when the source Secret has none; projected scheme-stripped.
    #[arg(long, env = "BACKUP_STORAGE_ENDPOINT", default_value = "")]
    pub endpoint: String,
    /// Fallback region used when the source Secret has none.
    #[arg(long, env = "BACKUP_STORAGE_REGION", default_value = "")]
    pub region: String,
    /// Value of the projected `forcePathStyle` key (`"true"`/`"false"`), written verbatim; empty removes it.
    #[arg(long, env = "BACKUP_STORAGE_FORCE_PATH_STYLE", default_value = "")]
    pub force_path_style: String,
    /// Comma-separated system namespaces that always hold a copy (e.g. `cozy-velero`).
    #[arg(long, env = "BACKUP_STORAGE_SYSTEM_NAMESPACES", default_value = "")]
    pub system_namespaces: String,
    /// Interval of safety rounds of the system/rotation loop (besides the event-driven rounds),
    /// e.g. `60s`, `5m`.
    #[arg(long, env = "SYSTEM_TICK", value_parser = runtime::duration::parse, conflicts_with = "system_tick_seconds")]
    pub system_tick: Option<Duration>,
    /// Deprecated spelling of `--system-tick`: a bare number is seconds.
    #[arg(long, env = "SYSTEM_TICK_SECONDS", hide = true, value_parser = runtime::duration::seconds)]
    pub system_tick_seconds: Option<Duration>,
}

/// The default safety tick of the system/rotation loop.
pub const DEFAULT_SYSTEM_TICK: Duration = Duration::from_secs(60);

/// The validated configuration the daemon runs with.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Config {
    /// Upstream's `BackupCredentialsConfig`.
    pub projection: ProjectionConfig,
    /// System namespaces (trimmed, empties dropped, in flag order).
    pub system_namespaces: Vec<String>,
    /// Safety tick of the system/rotation loop.
    #[serde(serialize_with = "runtime::duration::serialize")]
    pub system_tick: Duration,
}

/// Upstream `NewSystemCredentialsProjector`'s CSV rule: split on `,`, trim, drop empties.
pub fn split_namespaces(csv: &str) -> Vec<String> {
    csv.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

impl ProjectionArgs {
    /// The configuration, or an error when projection would be disabled (upstream's `IsEnabled`
    /// false: a projector without a source has nothing to do, so it refuses to start).
    pub fn config(&self) -> anyhow::Result<Config> {
        let projection = ProjectionConfig {
            source_namespace: self.source_namespace.clone(),
            source_name: self.source_name.clone(),
            target_name: self.target_name.clone(),
            endpoint: self.endpoint.clone(),
            region: self.region.clone(),
            force_path_style: self.force_path_style.clone(),
        };
        anyhow::ensure!(
            projection.is_enabled(),
            "projection is disabled: set --source-namespace (BACKUP_STORAGE_SECRET_NAMESPACE), --source-name (BACKUP_STORAGE_SECRET_NAME) and --target-name (BACKUP_STORAGE_CREDS_SECRET_NAME)"
        );
        let system_tick = self
            .system_tick
            .or(self.system_tick_seconds)
            .unwrap_or(DEFAULT_SYSTEM_TICK);
        anyhow::ensure!(
            !system_tick.is_zero(),
            "--system-tick must be longer than zero"
        );
        Ok(Config {
            projection,
            system_namespaces: split_namespaces(&self.system_namespaces),
            system_tick,
        })
    }
}

impl Config {
    /// The configuration as logged on start: the fallback endpoint with any URL userinfo redacted
    /// (an endpoint is not a secret, but a `user:password@` in it would be).
    pub fn loggable(&self) -> Config {
        let mut c = self.clone();
        c.projection.endpoint = redact_userinfo(&c.projection.endpoint);
        c
    }
}

fn redact_userinfo(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://<redacted>@{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn args_are_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn system_namespaces_are_trimmed_and_empties_dropped() {
        assert_eq!(
            split_namespaces(" cozy-velero, ,other ,,"),
            ["cozy-velero", "other"]
        );
        assert!(split_namespaces("").is_empty());
    }

    #[test]
    fn flags_build_the_config_and_disabled_projection_is_refused() {
        let args = Args::parse_from([
            "credentials-projector",
            "--source-namespace",
            "tenant-root",
            "--source-name",
            "bucket-cozy-backups-system-credentials",
            "--endpoint",
            "https://user:pw@s3.example.com:8333/x",
            "--system-namespaces",
            "cozy-velero",
        ]);
        let config = args.projection.config().unwrap();
        assert_eq!(config.projection.target_name, "cozy-backups-creds");
        assert_eq!(config.system_namespaces, ["cozy-velero"]);
        assert_eq!(config.system_tick, Duration::from_secs(60));
        assert_eq!(
            config.loggable().projection.endpoint,
            "https://<redacted>@s3.example.com:8333/x"
        );
        let disabled = Args::parse_from(["credentials-projector", "--source-name", "x"]);
        assert!(disabled.projection.config().is_err());
        let tick = |flags: &[&str]| {
            let mut argv = vec![
                "credentials-projector",
                "--source-namespace=a",
                "--source-name=b",
            ];
            argv.extend_from_slice(flags);
            Args::try_parse_from(argv).map(|a| a.projection.config().map(|c| c.system_tick))
        };
        assert_eq!(
            tick(&["--system-tick=5m"]).unwrap().unwrap(),
            Duration::from_secs(300)
        );
        assert_eq!(
            tick(&["--system-tick-seconds=90"]).unwrap().unwrap(),
            Duration::from_secs(90),
            "the old flag keeps working"
        );
        assert!(tick(&["--system-tick=1m", "--system-tick-seconds=90"]).is_err());
        assert!(tick(&["--system-tick=0s"]).unwrap().is_err());
    }
}
