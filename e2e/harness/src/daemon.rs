//! Daemon processes under test: spawn with the emulator's kubeconfig, capture logs, probe `/ready`,
//! kill -9 and restart.
//!
//! A daemon binds its admin server on `127.0.0.1:0` and writes the bound address to the file named
//! by `ADMIN_ADDR_FILE` (see the runtime's `AdminArgs`); the harness reads it, so no port is ever
//! picked by binding and releasing (which races with other processes).

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use crate::Error;

/// How to run one daemon.
#[derive(Debug, Clone)]
pub struct DaemonSpec {
    /// Name used in logs and for kill/restart.
    pub name: String,
    /// The binary (see [`crate::locate_binary`]).
    pub bin: PathBuf,
    /// Extra arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
    /// Readiness path on the admin address (`/ready`).
    pub ready_path: String,
    /// How the process reports where it listens.
    pub address: AddressReport,
    /// Whom it authenticates as (see [`Identity`]).
    pub identity: Identity,
}

/// Whom a spawned daemon authenticates to the emulator as.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Identity {
    /// The component named like the binary's file, when `deploy/<file name>/rbac.yaml` exists
    /// (its own ServiceAccount and RBAC); otherwise the admin.
    #[default]
    Auto,
    /// The ServiceAccount and RBAC of `deploy/<component>/`, whatever the binary is called.
    Component(String),
    /// The emulator's admin (`system:masters`): for processes that are not the project's
    /// components (simulated operators, probes), or a test that must bypass RBAC.
    Admin,
}

/// How a spawned process tells the harness its listening address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AddressReport {
    /// A daemon built on the runtime: `ADMIN_ADDR=127.0.0.1:0` and `ADMIN_ADDR_FILE`.
    AdminAddrFile,
    /// The emulator binary: `--port 0`; the URL is read from the kubeconfig it writes to this path.
    Kubeconfig(PathBuf),
}

impl DaemonSpec {
    /// A daemon binary found by name, probed on `/ready`.
    pub fn new(name: &str, bin: PathBuf) -> Self {
        DaemonSpec {
            name: name.into(),
            bin,
            args: Vec::new(),
            env: Vec::new(),
            ready_path: "/ready".into(),
            address: AddressReport::AdminAddrFile,
            identity: Identity::Auto,
        }
    }

    /// Runs as the ServiceAccount of `deploy/<component>/` (for a binary whose file name is not
    /// the component's).
    pub fn identity(mut self, component: &str) -> Self {
        self.identity = Identity::Component(component.into());
        self
    }

    /// Runs as the emulator's admin, bypassing RBAC. Only for tests that must; say why where it
    /// is called.
    pub fn as_admin(mut self) -> Self {
        self.identity = Identity::Admin;
        self
    }

    /// The project component whose ServiceAccount this daemon runs as, if any: the explicit one,
    /// or the binary's file name when `deploy/<name>/rbac.yaml` exists.
    pub fn component(&self) -> Option<String> {
        match &self.identity {
            Identity::Admin => None,
            Identity::Component(c) => Some(c.clone()),
            Identity::Auto => {
                let name = self.bin.file_name()?.to_str()?;
                crate::workspace_root()
                    .join("deploy")
                    .join(name)
                    .join("rbac.yaml")
                    .is_file()
                    .then(|| name.to_owned())
            }
        }
    }

    /// Adds arguments.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }
}

/// A spawned daemon.
#[derive(Debug)]
pub struct Daemon {
    /// What it was started with.
    pub spec: DaemonSpec,
    /// `127.0.0.1:PORT` of its admin server, once reported (empty before; see [`Daemon::admin`]).
    pub admin_addr: String,
    addr_file: PathBuf,
    /// Combined stdout/stderr of every run.
    pub log_path: PathBuf,
    /// How many times it was (re)started.
    pub starts: u32,
    /// The kubeconfig it runs with (its own identity's, or the admin's).
    pub kubeconfig: PathBuf,
    child: Option<tokio::process::Child>,
}

impl Daemon {
    /// Spawns a daemon with this kubeconfig, logging to `<work_dir>/<name>.log`.
    pub fn spawn(
        spec: DaemonSpec,
        kubeconfig: &std::path::Path,
        work_dir: &std::path::Path,
    ) -> Result<Self, Error> {
        let log_path = work_dir.join(format!("{}.log", spec.name));
        let addr_file = work_dir.join(format!("{}.admin-addr", spec.name));
        let mut d = Daemon {
            spec,
            admin_addr: String::new(),
            addr_file,
            log_path,
            starts: 0,
            kubeconfig: kubeconfig.to_path_buf(),
            child: None,
        };
        d.start()?;
        Ok(d)
    }

    pub(crate) fn start(&mut self) -> Result<(), Error> {
        self.admin_addr.clear();
        let stale = match &self.spec.address {
            AddressReport::AdminAddrFile => &self.addr_file,
            AddressReport::Kubeconfig(path) => path,
        };
        // A report left by an earlier run must not be mistaken for this one's.
        let _ = std::fs::remove_file(stale);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .map_err(|source| Error::Process {
                what: format!("opening {}", self.log_path.display()),
                source,
            })?;
        let err = log.try_clone().map_err(|source| Error::Process {
            what: "cloning log handle".into(),
            source,
        })?;
        let mut cmd = tokio::process::Command::new(&self.spec.bin);
        cmd.args(&self.spec.args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("ADMIN_ADDR", "127.0.0.1:0")
            .env("ADMIN_ADDR_FILE", &self.addr_file)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true);
        if matches!(self.spec.address, AddressReport::Kubeconfig(_)) {
            cmd.args(["--port", "0"]);
        }
        for (k, v) in &self.spec.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().map_err(|source| Error::Process {
            what: format!("spawning {}", self.spec.bin.display()),
            source,
        })?;
        self.child = Some(child);
        self.starts += 1;
        Ok(())
    }

    /// The reported listening address, if the process reported it yet.
    fn reported_addr(&self) -> Option<String> {
        match &self.spec.address {
            AddressReport::AdminAddrFile => std::fs::read_to_string(&self.addr_file)
                .ok()
                .map(|a| a.trim().to_owned())
                .filter(|a| !a.is_empty()),
            AddressReport::Kubeconfig(path) => {
                let text = std::fs::read_to_string(path).ok()?;
                text.lines()
                    .find_map(|l| l.trim().strip_prefix("server:"))
                    .map(|s| {
                        s.trim()
                            .trim_matches(['\'', '"'])
                            .trim_start_matches("http://")
                            .trim_start_matches("https://")
                    })
                    .map(str::to_owned)
            }
        }
    }

    /// The daemon's admin server, waiting (bounded) for the address report.
    pub async fn admin(&mut self) -> Result<crate::Admin, Error> {
        self.resolve_addr(Duration::from_secs(30)).await?;
        Ok(crate::Admin::new(self.admin_addr.clone()))
    }

    async fn resolve_addr(&mut self, timeout: Duration) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.admin_addr.is_empty() {
            if let Some(addr) = self.reported_addr() {
                self.admin_addr = addr;
                break;
            }
            self.check_alive("report its admin address")?;
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Timeout(format!(
                    "{} to report its admin address",
                    self.spec.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    fn check_alive(&mut self, what: &str) -> Result<(), Error> {
        if let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            return Err(Error::Timeout(format!(
                "{} to {what}: it exited with {status}; log: {}",
                self.spec.name,
                self.log_path.display()
            )));
        }
        Ok(())
    }

    /// Polls `GET {admin}{ready_path}` until 200, failing if the process exits or the deadline passes.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        self.resolve_addr(timeout).await?;
        loop {
            self.check_alive("become ready")?;
            let addr = self.admin_addr.clone();
            let path = self.spec.ready_path.clone();
            let probe = tokio::task::spawn_blocking(move || crate::http::get(&addr, &path)).await;
            if let Ok(Ok((200, _))) = probe {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                // What the daemon said last names the checks that held it back.
                let said = match probe {
                    Ok(Ok((code, body))) => format!("{code} {}", body.trim()),
                    Ok(Err(e)) => e.to_string(),
                    Err(e) => e.to_string(),
                };
                return Err(Error::Timeout(format!(
                    "{} to become ready; its {} answered: {said}",
                    self.spec.name, self.spec.ready_path
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL and reap.
    /// Panics unless the daemon is still running, was started once and never panicked: what
    /// every bad-input and API-fault scenario asserts at its end.
    pub fn assert_unharmed(&mut self) {
        let name = self.spec.name.clone();
        assert!(self.is_running(), "{name} exited:\n{}", self.log());
        assert_eq!(self.starts, 1, "{name} was restarted");
        let log = self.log();
        assert!(!log.contains("panicked"), "{name} panicked:\n{log}");
    }

    pub async fn kill(&mut self) -> Result<(), Error> {
        if let Some(mut c) = self.child.take() {
            c.start_kill().map_err(|source| Error::Process {
                what: format!("killing {}", self.spec.name),
                source,
            })?;
            let _ = c.wait().await;
        }
        Ok(())
    }

    /// SIGTERM, then wait (bounded by `deadline`) for the process to exit on its own; answers its
    /// exit status. A process that outlives the deadline is killed and the answer is an error, so
    /// a test asserting a graceful shutdown fails rather than hangs.
    pub async fn terminate(
        &mut self,
        deadline: Duration,
    ) -> Result<std::process::ExitStatus, Error> {
        self.send_sigterm()?;
        self.wait_exit(deadline).await
    }

    /// Sends SIGTERM without waiting (see [`Daemon::wait_exit`]).
    pub fn send_sigterm(&mut self) -> Result<(), Error> {
        let pid = self
            .child
            .as_ref()
            .and_then(|c| c.id())
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
            .ok_or_else(|| {
                Error::Timeout(format!(
                    "{} to be signalled: it is not running",
                    self.spec.name
                ))
            })?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM).map_err(|e| {
            Error::Process {
                what: format!("sending SIGTERM to {}", self.spec.name),
                source: e.into(),
            }
        })
    }

    /// Waits (bounded by `deadline`) for the process to exit by itself and answers its status; a
    /// process still running at the deadline is killed and the answer is an error.
    pub async fn wait_exit(
        &mut self,
        deadline: Duration,
    ) -> Result<std::process::ExitStatus, Error> {
        let Some(mut child) = self.child.take() else {
            return Err(Error::Timeout(format!(
                "{} to exit: it is not running",
                self.spec.name
            )));
        };
        match tokio::time::timeout(deadline, child.wait()).await {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(source)) => Err(Error::Process {
                what: format!("waiting for {} to exit", self.spec.name),
                source,
            }),
            Err(_) => {
                let _ = child.start_kill();
                let _ = child.wait().await;
                Err(Error::Timeout(format!(
                    "{} to exit within {deadline:?} of SIGTERM (killed)",
                    self.spec.name
                )))
            }
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// Everything the daemon logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The lines of a daemon run with `--log-format=json` whose message is `message`, parsed
    /// (fields at the top level, as the daemons log them).
    pub fn json_lines(&self, message: &str) -> Vec<serde_json::Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["message"] == message)
            .collect()
    }
}
