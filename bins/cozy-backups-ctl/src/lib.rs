//! `cozy-backups-ctl`, also installed as the kubectl plugin `kubectl-cozy_backups`: the tenant's
//! and the operator's command line for the backup platform. Each subcommand is one function over a
//! kube client that writes what it prints into the writers it is given, so tests call it directly
//! and the binary streams it to stdout/stderr.
//!
//! ```text
//!  kubectl cozy-backups … ──(kubectl execs kubectl-cozy_backups with the remaining args)──┐
//!  cozy-backups-ctl …  ─────────────────────────────────────────────────────────────────────┤
//!        KubeArgs (--kubeconfig, --context, -n) ─► kube::Config (+ the context's namespace) │
//!        ├─ status [-A] [APP]  Backups + BackupJobs + Plans ─► one row per application      │
//!        │                     (Postgres rows: window::compute, the restore pre-flight's)   │
//!        ├─ window APP         window::compute ─► text/json                                 │
//!        ├─ backup APP         create BackupJob <app>-xxxxx  [--wait: watch its phase]      │
//!        ├─ restore --from B   get Backup ─► place --at in the window ─► create RestoreJob   │
//!        ├─ verify B           annotate Backup verify-requested [--wait: watch its result]  │
//!        ├─ find-kind KIND     appdef::KindCache ─► yaml/json                               │
//!        └─ completion SHELL   clap_complete                                                │
//!  exit codes: 0 ok, 1 error, 3 not found, 4 job Failed, 5 --wait timed out ◄──────────────┘
//! ```
//!
//! Invariants: nothing is created before every check on the input passed (a `--at` before the
//! recoverable window creates nothing); a CLI is short-lived, so it caches the
//! ApplicationDefinition list for its lifetime; errors name the flag or object that was wrong.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::jiff::Timestamp;

pub mod catalog;
mod jobs;
mod render;
pub mod status;
pub mod verify;
pub mod window;

pub use window::window;

/// Exit codes of the command line (documented in docs/cozy-backups-ctl.md).
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// Any error: bad input, an API error, a refused request.
    pub const ERROR: i32 = 1;
    /// An object named on the command line (namespace, Backup) does not exist.
    pub const NOT_FOUND: i32 = 3;
    /// `--wait`: the job ended in phase Failed.
    pub const JOB_FAILED: i32 = 4;
    /// `--wait`: the job was not terminal within `--timeout`.
    pub const TIMED_OUT: i32 = 5;
}

/// An error that chooses the process's exit code.
#[derive(Debug)]
pub struct Exit {
    /// One of [`exit`]'s codes.
    pub code: i32,
    /// What went wrong.
    pub message: String,
}

impl Exit {
    /// A not-found error.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self {
            code: exit::NOT_FOUND,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Exit {}

/// The exit code for `err`: the code of an [`Exit`] anywhere in its chain, else 1.
pub fn exit_code(err: &anyhow::Error) -> i32 {
    err.chain()
        .find_map(|e| e.downcast_ref::<Exit>())
        .map_or(exit::ERROR, |e| e.code)
}

/// Backup platform command line: status, on-demand backups, restores, recoverable windows.
/// Installed as `kubectl-cozy_backups` it runs as `kubectl cozy-backups …`.
#[derive(Parser, Debug)]
#[command(name = "cozy-backups-ctl", version, about, propagate_version = true)]
pub struct Args {
    /// How to reach the Kubernetes API, as kubectl's flags.
    #[command(flatten)]
    pub kube: KubeArgs,
    /// The current time for rendered ages (RFC 3339); for reproducible output.
    #[arg(long, global = true, hide = true, env = "COZY_BACKUPS_CTL_NOW", value_parser = parse_now)]
    pub now: Option<Timestamp>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// kubectl's connection flags.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct KubeArgs {
    /// Path of the kubeconfig file; without it `$KUBECONFIG`, `~/.kube/config`, then the
    /// in-cluster configuration.
    #[arg(long, global = true)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use instead of the current one.
    #[arg(long, global = true, alias = "kube-context")]
    pub context: Option<String>,
    /// Namespace; default: the namespace of the kubeconfig context, else `default`.
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Backup state of each application that has Backups, BackupJobs or Plans: last successful
    /// backup, recoverable window (Postgres), running jobs, last failure.
    Status {
        /// List applications in every namespace.
        #[arg(short = 'A', long)]
        all_namespaces: bool,
        /// Only this application (by name).
        app: Option<String>,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = Format::Table)]
        output: Format,
    },
    /// Print the point-in-time recoverable window of a Postgres application: from the oldest base
    /// backup still in its archive to the newest archived point known. A RestoreJob's
    /// `recoveryTime` before the window is refused.
    Window {
        /// The Postgres application's name.
        app: String,
        /// Output format.
        #[arg(short, long, value_enum, default_value_t = WindowOutput::Text)]
        output: WindowOutput,
    },
    /// Request a backup now: create a BackupJob for the application.
    Backup {
        /// The application's name.
        app: String,
        /// The application's kind (as in `spec.applicationRef.kind`).
        #[arg(long, default_value = "Postgres")]
        kind: String,
        /// The BackupClass routing the application to a strategy.
        #[arg(long, default_value = "cozy-default")]
        class: String,
        /// Follow the job's phase until it is Succeeded or Failed.
        #[arg(long)]
        wait: bool,
        /// With --wait: how long to wait (e.g. 30s, 10m, 1h).
        #[arg(long, default_value = "10m", value_parser = runtime::duration::parse)]
        timeout: Duration,
        /// Print the created BackupJob instead of a one-line confirmation.
        #[arg(short, long, value_enum)]
        output: Option<ObjectOutput>,
    },
    /// Restore from a Backup: create a RestoreJob, in place or into another application.
    Restore {
        /// The Backup to restore from (in the namespace).
        #[arg(long = "from", value_name = "BACKUP")]
        from: String,
        /// Restore into this application (same kind) instead of the backup's own.
        #[arg(long, value_name = "APP")]
        to: Option<String>,
        /// Point in time to recover to (RFC 3339, e.g. 2026-12-01T12:00:00Z); Postgres and
        /// MongoDB backups. For Postgres it is checked against the recoverable window first.
        #[arg(long, value_name = "RFC3339", value_parser = parse_at)]
        at: Option<String>,
        /// Follow the job's phase until it is Succeeded or Failed.
        #[arg(long)]
        wait: bool,
        /// With --wait: how long to wait (e.g. 30s, 10m, 1h).
        #[arg(long, default_value = "30m", value_parser = runtime::duration::parse)]
        timeout: Duration,
        /// Print the created RestoreJob instead of a one-line confirmation.
        #[arg(short, long, value_enum)]
        output: Option<ObjectOutput>,
    },
    /// Run one restore drill of a Backup now (docs/drills.md): the restore-orchestrator restores
    /// it into a scratch copy, checks it and records `status.verification` on the Backup.
    Verify {
        /// The Backup to verify (in the namespace).
        backup: String,
        /// Follow the drill until its result is recorded (exit 4 when it failed).
        #[arg(long)]
        wait: bool,
        /// With --wait: how long to wait (e.g. 30s, 10m, 1h).
        #[arg(long, default_value = "1h", value_parser = runtime::duration::parse)]
        timeout: Duration,
    },
    /// Print the ApplicationDefinition whose spec.application.kind is KIND (exact, case-sensitive;
    /// e.g. HTTPCache, whose definition is named http-cache).
    FindKind {
        /// The tenant-facing kind, e.g. `HTTPCache`.
        kind: String,
        /// Output format.
        #[arg(short, long, env = "COZY_BACKUPS_CTL_OUTPUT", value_enum, default_value_t = Output::Yaml)]
        output: Output,
    },
    /// The Backup catalog's signed records in the system bucket (disaster recovery): status,
    /// sync --dry-run, export. Needs `get` on the bucket's credentials and the key Secret.
    Catalog {
        /// What to do.
        #[command(subcommand)]
        command: catalog::CatalogCommand,
    },
    /// Print a shell completion script (source it, or install it where the shell looks).
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
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

/// Output formats of `find-kind`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// YAML.
    Yaml,
    /// Pretty-printed JSON.
    Json,
}

/// Output formats of `status`.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// A table with fixed columns.
    Table,
    /// Pretty-printed JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Output formats of the object a command created.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum ObjectOutput {
    /// `<resource>/<name>`.
    Name,
    /// Pretty-printed JSON.
    Json,
    /// YAML.
    Yaml,
}

fn parse_now(s: &str) -> Result<Timestamp, String> {
    drivers::restore::options::parse_rfc3339(s)
}

/// `--at`: kept as typed (the restore passes it on verbatim), checked to be RFC 3339 here.
fn parse_at(s: &str) -> Result<String, String> {
    drivers::restore::options::parse_rfc3339(s)
        .map(|_| s.to_owned())
        .map_err(|e| format!("not an RFC 3339 timestamp ({e}), e.g. 2026-12-01T12:00:00Z"))
}

/// The clap command, named after how the binary was invoked: `kubectl cozy-backups` when run as
/// the plugin `kubectl-cozy_backups` (so help and errors show what the user typed).
pub fn command_for(argv0: &str) -> clap::Command {
    use clap::CommandFactory;
    let invoked = std::path::Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let cmd = Args::command();
    if invoked.starts_with("kubectl-") {
        cmd.bin_name("kubectl cozy-backups")
    } else {
        cmd
    }
}

/// A client and the namespace to work in (`-n`, else the context's, else `default`).
pub async fn connect(args: &KubeArgs) -> anyhow::Result<(kube::Client, String)> {
    use kube::config::{KubeConfigOptions, Kubeconfig};
    let options = KubeConfigOptions {
        context: args.context.clone(),
        ..Default::default()
    };
    let mut config = match &args.kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("read --kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("load --kubeconfig {}", path.display()))?
        }
        None if args.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .context("load the kubeconfig ($KUBECONFIG or ~/.kube/config)")?,
        None => kube::Config::infer()
            .await
            .context("infer the Kubernetes client configuration (no kubeconfig found)")?,
    };
    if let Ok(agent) =
        http::HeaderValue::from_str(&format!("cozy-backups-ctl/{}", env!("CARGO_PKG_VERSION")))
    {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    let namespace = args
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = runtime::retry::client(config).context("build the Kubernetes client")?;
    Ok((client, namespace))
}

pub use runtime::api::kind_not_served;

/// `plural.group/version` of a resource, as a user finds it in `kubectl api-resources`.
pub fn resource_name(r: &kube::core::ApiResource) -> String {
    if r.group.is_empty() {
        format!("{} (v1)", r.plural)
    } else {
        format!("{}.{}/{}", r.plural, r.group, r.version)
    }
}

/// The error for a kind of the backup platform that the API server does not serve.
pub fn platform_not_installed(r: &kube::core::ApiResource) -> anyhow::Error {
    anyhow::anyhow!(
        "the API server does not serve {}: the backup platform is not installed in this cluster \
         (its CustomResourceDefinitions are missing)",
        resource_name(r)
    )
}

/// `err`, or [`platform_not_installed`] when it says that the platform's kind `K` is not served.
pub fn platform_error<K>(err: kube::Error) -> anyhow::Error
where
    K: kube::Resource<DynamicType = ()>,
{
    if kind_not_served(&err) {
        platform_not_installed(&kube::core::ApiResource::erase::<K>(&()))
    } else {
        err.into()
    }
}

/// Fails with a not-found [`Exit`] when `namespace` does not exist. A caller that may not read
/// namespaces (a tenant) gets no verdict, and the command goes on.
pub async fn require_namespace(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    if namespace.is_empty() {
        anyhow::bail!("--namespace must not be empty");
    }
    match kube::Api::<Namespace>::all(client.clone())
        .get_opt(namespace)
        .await
    {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(Exit::not_found(format!("namespace {namespace:?} not found")).into()),
        Err(kube::Error::Api(e)) if e.code == 403 || e.code == 401 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("get namespace {namespace:?}")),
    }
}

/// Runs the command, writing results to `out` and warnings and progress notes to `err`.
pub async fn run(args: Args, out: &mut dyn Write, err: &mut dyn Write) -> anyhow::Result<()> {
    let now = args.now.unwrap_or_else(Timestamp::now);
    match args.command {
        Command::Completion { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(shell, &mut Args::command(), completion_name(), out);
            Ok(())
        }
        Command::Catalog { command } => {
            let (client, ns) = connect(&args.kube).await?;
            catalog::run(client, &ns, command, out).await
        }
        Command::FindKind { kind, output } => {
            let (client, _) = connect(&args.kube).await?;
            write!(out, "{}", find_kind(client, &kind, output).await?)?;
            Ok(())
        }
        Command::Window { app, output } => {
            let (client, ns) = connect(&args.kube).await?;
            require_namespace(&client, &ns).await?;
            write!(out, "{}", window(client, &ns, &app, output).await?)?;
            Ok(())
        }
        Command::Status {
            all_namespaces,
            app,
            output,
        } => {
            let (client, ns) = connect(&args.kube).await?;
            let scope = if all_namespaces {
                None
            } else {
                require_namespace(&client, &ns).await?;
                Some(ns.as_str())
            };
            let rows = status::collect(&client, scope, app.as_deref(), err).await?;
            if rows.is_empty() && output == Format::Table {
                let what = app.map(|a| format!(" named {a:?}")).unwrap_or_default();
                match scope {
                    Some(ns) => writeln!(
                        err,
                        "No applications{what} with Backups, BackupJobs or Plans found in {ns} namespace."
                    )?,
                    None => writeln!(
                        err,
                        "No applications{what} with Backups, BackupJobs or Plans found."
                    )?,
                }
                return Ok(());
            }
            write!(
                out,
                "{}",
                status::render(&rows, output, scope.is_none(), now)?
            )?;
            Ok(())
        }
        Command::Backup {
            app,
            kind,
            class,
            wait,
            timeout,
            output,
        } => {
            let (client, ns) = connect(&args.kube).await?;
            require_namespace(&client, &ns).await?;
            let request = jobs::BackupRequest {
                namespace: &ns,
                app: &app,
                kind: &kind,
                class: &class,
            };
            let job = jobs::create_backup_job(&client, &request).await?;
            jobs::print_created(&job, output, out)?;
            if wait {
                jobs::wait_backup_job(&client, &ns, &job, timeout, out).await?;
            }
            Ok(())
        }
        Command::Verify {
            backup,
            wait,
            timeout,
        } => {
            let (client, ns) = connect(&args.kube).await?;
            require_namespace(&client, &ns).await?;
            verify::verify(&client, &ns, &backup, wait, timeout, now, out).await
        }
        Command::Restore {
            from,
            to,
            at,
            wait,
            timeout,
            output,
        } => {
            let (client, ns) = connect(&args.kube).await?;
            require_namespace(&client, &ns).await?;
            let request = jobs::RestoreRequest {
                namespace: &ns,
                backup: &from,
                to: to.as_deref(),
                at: at.as_deref(),
            };
            let job = jobs::create_restore_job(&client, &request, err).await?;
            jobs::print_created(&job, output, out)?;
            if wait {
                jobs::wait_restore_job(&client, &ns, &job, timeout, out).await?;
            }
            Ok(())
        }
    }
}

/// The name completions are generated for: `kubectl-cozy_backups` when that is how the binary runs
/// (kubectl's own completion delegates to that name), else `cozy-backups-ctl`.
fn completion_name() -> String {
    let argv0 = std::env::args().next().unwrap_or_default();
    let invoked = std::path::Path::new(&argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if invoked.starts_with("kubectl-") {
        invoked.to_owned()
    } else {
        "cozy-backups-ctl".to_owned()
    }
}

/// `find-kind`: the whole definition of `kind`, rendered.
pub async fn find_kind(client: kube::Client, kind: &str, output: Output) -> anyhow::Result<String> {
    let cache = appdef::KindCache::for_process(client);
    let def = match cache.find(kind).await {
        Ok(def) => def,
        Err(appdef::FindError::List(e)) if kind_not_served(&e) => anyhow::bail!(
            "find-kind {kind:?}: {}: the API server does not serve that resource (Cozystack's \
             ApplicationDefinitions are not installed in this cluster)",
            appdef::FindError::List(e)
        ),
        Err(e) => return Err(e).with_context(|| format!("find-kind {kind:?}")),
    };
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
        assert_eq!(args.kube.namespace.as_deref(), Some("tenant-acme"));
        match args.command {
            Command::Window { app, output } => {
                assert_eq!((app.as_str(), output), ("orders-db", WindowOutput::Text))
            }
            other => panic!("parsed {other:?}"),
        }
    }

    #[test]
    fn kubectl_style_flags_go_anywhere_after_the_plugin_name() {
        let args = Args::parse_from([
            "kubectl-cozy_backups",
            "--context",
            "prod",
            "status",
            "-A",
            "--kubeconfig",
            "/tmp/kc",
        ]);
        assert_eq!(args.kube.context.as_deref(), Some("prod"));
        assert_eq!(
            args.kube.kubeconfig.as_deref(),
            Some(std::path::Path::new("/tmp/kc"))
        );
        assert!(matches!(
            args.command,
            Command::Status {
                all_namespaces: true,
                app: None,
                output: Format::Table
            }
        ));
    }

    #[test]
    fn bad_values_name_the_flag() {
        let err = Args::try_parse_from(["c", "restore", "--from", "b", "--at", "yesterday noon"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--at <RFC3339>") && err.contains("not an RFC 3339 timestamp"),
            "{err}"
        );
        let err = Args::try_parse_from(["c", "backup", "db", "--timeout", "soon"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--timeout <TIMEOUT>"), "{err}");
        let args = Args::parse_from(["c", "backup", "db", "--timeout", "90s", "--wait"]);
        assert!(matches!(
            args.command,
            Command::Backup { timeout, wait: true, .. } if timeout == Duration::from_secs(90)
        ));
    }

    #[test]
    fn help_names_the_plugin_when_run_as_one() {
        let help = command_for("/usr/local/bin/kubectl-cozy_backups")
            .render_usage()
            .to_string();
        assert!(help.contains("kubectl cozy-backups"), "{help}");
        let help = command_for("cozy-backups-ctl").render_usage().to_string();
        assert!(help.contains("cozy-backups-ctl"), "{help}");
    }

    #[test]
    fn exit_codes_survive_context() {
        let err = anyhow::Error::from(Exit::not_found("backup \"x\" not found")).context("restore");
        assert_eq!(exit_code(&err), exit::NOT_FOUND);
        assert_eq!(exit_code(&anyhow::anyhow!("plain")), exit::ERROR);
    }
}
