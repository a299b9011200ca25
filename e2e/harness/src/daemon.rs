//! Daemon processes under test: spawn with the emulator's kubeconfig and a fresh admin port, capture logs,
//! probe `/ready`, kill -9 and restart.

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
    /// Pass the admin address as `--port <port>` instead of `ADMIN_ADDR` (for the emulator binary).
    pub admin_as_port_flag: bool,
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
            admin_as_port_flag: false,
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
    /// `127.0.0.1:PORT` of its admin server.
    pub admin_addr: String,
    /// Combined stdout/stderr of every run.
    pub log_path: PathBuf,
    /// How many times it was (re)started.
    pub starts: u32,
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
        let mut d = Daemon {
            spec,
            admin_addr: String::new(),
            log_path,
            starts: 0,
            child: None,
        };
        d.start(kubeconfig)?;
        Ok(d)
    }

    pub(crate) fn start(&mut self, kubeconfig: &std::path::Path) -> Result<(), Error> {
        let port = crate::free_port();
        self.admin_addr = format!("127.0.0.1:{port}");
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
            .env("KUBECONFIG", kubeconfig)
            .env("ADMIN_ADDR", &self.admin_addr)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .kill_on_drop(true);
        if self.spec.admin_as_port_flag {
            cmd.args(["--port", &port.to_string()]);
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

    /// Polls `GET {admin}{ready_path}` until 200, failing if the process exits or the deadline passes.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                return Err(Error::Timeout(format!(
                    "{} to become ready: it exited with {status}; log: {}",
                    self.spec.name,
                    self.log_path.display()
                )));
            }
            let addr = self.admin_addr.clone();
            let path = self.spec.ready_path.clone();
            let probe = tokio::task::spawn_blocking(move || crate::http::get(&addr, &path)).await;
            if let Ok(Ok((200, _))) = probe {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                return Err(Error::Timeout(format!(
                    "{} to become ready",
                    self.spec.name
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILL and reap.
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
}
