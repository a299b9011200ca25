//! Local PostgreSQL processes and the barman-cloud commands around them, for the CNPG simulator.
//! Just over 1,000 lines, kept in one file because the instance directory, the process supervision
//! and the barman commands share one invariant (nothing started here outlives the simulator).
//!
//! ```text
//!  <data-dir>/pg/<namespace>/<cluster>/      owned by the unprivileged user, 0700
//!     data/            PGDATA (initdb, or barman-cloud-restore)
//!     run/             unix socket directory
//!     bin/archive-wal  archive_command: barman-cloud-wal-archive with archive.env
//!     bin/restore-wal  restore_command: barman-cloud-wal-restore with restore.env
//!     archive.env, restore.env   credentials and barman arguments (0600), rewritten on change
//! ```
//!
//! Invariants: PostgreSQL never runs as root (as root the simulator switches to the `postgres`
//! user, else `nobody`); every server listens on 127.0.0.1 on a free port and on a socket in its
//! own directory; instance-specific settings are passed as `-c` flags at each start, so a data
//! directory restored from another instance's backup carries none of that instance's paths. No
//! process started here outlives the simulator, however it ends ([`dying_with_parent`]):
//! - `postgres` runs in the foreground as a direct child, in a process group of its own (a signal
//!   to the simulator's group, e.g. Ctrl-C or `kill -TERM -<pgid>`, reaches the simulator, which
//!   stops the servers in order, not the servers themselves) and gets SIGQUIT the moment the
//!   simulator is gone, even SIGKILLed: PostgreSQL's immediate shutdown, in which the postmaster
//!   signals each child's process group, so its archiver and the barman command under it end too;
//! - every other command (initdb, psql, barman-cloud-*) runs in a process group of its own under
//!   a one-line shell ([`SUPERVISE`]) that kills the whole group when the simulator is gone, and
//!   [`Toolchain::run`] kills that group when the command is abandoned: barman-cloud-backup's
//!   upload workers (its own children) go with it, where they would otherwise wait forever.
//!
//! Credentials only ever go to 0600 files and child environments, never to logs or argv.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;

/// Errors of the PostgreSQL and barman-cloud layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be written or a process started.
    #[error("{what}: {source}")]
    Io {
        /// What was attempted.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A command ran and failed; `output` is its last lines of stderr (never secrets).
    #[error("{command} failed: {output}")]
    Command {
        /// The command name.
        command: String,
        /// What it printed last.
        output: String,
    },
    /// A command's output could not be understood.
    #[error("unexpected output from {command}: {message}")]
    Output {
        /// The command name.
        command: String,
        /// What was wrong.
        message: String,
    },
    /// PostgreSQL did not come up.
    #[error("PostgreSQL did not start: {0}")]
    Start(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// The unprivileged account processes run as (None: the current, non-root user).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunAs {
    /// User id.
    pub uid: u32,
    /// Group id.
    pub gid: u32,
}

/// Looks up `name` in a passwd file's text.
pub fn passwd_entry(passwd: &str, name: &str) -> Option<RunAs> {
    passwd.lines().find_map(|line| {
        let mut f = line.split(':');
        (f.next()? == name).then_some(())?;
        let _password = f.next()?;
        Some(RunAs {
            uid: f.next()?.parse().ok()?,
            gid: f.next()?.parse().ok()?,
        })
    })
}

/// Whom to run PostgreSQL as: nobody special when not root; as root, `preferred` (normally
/// `postgres`, created by the Debian package), else `nobody`.
pub fn resolve_run_as(preferred: &str) -> Option<RunAs> {
    if !rustix::process::geteuid().is_root() {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    passwd_entry(&passwd, preferred)
        .or_else(|| passwd_entry(&passwd, "nobody"))
        .or(Some(RunAs {
            uid: 65534,
            gid: 65534,
        }))
}

/// Where the PostgreSQL binaries are and whom they run as.
#[derive(Clone, Debug)]
pub struct Toolchain {
    /// Directory of `postgres`, `initdb`, `pg_ctl`, `psql`.
    pub bin_dir: PathBuf,
    /// Unprivileged account, when running as root.
    pub run_as: Option<RunAs>,
}

/// The program every child is started through: util-linux's `setpriv --pdeathsig <signal> --`
/// makes the child receive `signal` when this process ends, however it ends (`PR_SET_PDEATHSIG`,
/// kept across the exec of the real program; the workspace forbids the `unsafe` a `pre_exec`
/// would need). It runs after the user switch, which would clear the setting.
///
/// The kernel sends the signal when the *thread* that forked the child exits, not the process:
/// children are spawned only from threads that live as long as the process (a tokio runtime's
/// worker threads end only with the runtime; never spawn from a `spawn_blocking` thread, which
/// ends after idling).
pub const SETPRIV: &str = "setpriv";

/// A command that runs `program` and gets `signal` (`KILL`, `QUIT`, `TERM`, …) when this process
/// ends.
pub fn dying_with_parent(program: impl AsRef<std::ffi::OsStr>, signal: &str) -> Command {
    let mut cmd = Command::new(SETPRIV);
    cmd.args(["--pdeathsig", signal, "--"]).arg(program);
    cmd
}

/// The shell every command but `postgres` runs under (`sh -c SUPERVISE sh <program> <args…>`, in
/// a process group of its own, sent SIGTERM when the simulator ends): it runs the program and, on
/// SIGTERM, kills its whole process group, the program and everything the program started.
/// Without it a SIGKILL would end only the program: barman-cloud-backup's upload workers
/// (`multiprocessing` children blocked on a queue) would live on, orphaned.
pub const SUPERVISE: &str = r#"trap 'kill -KILL 0' TERM; "$@" & wait $!"#;

impl Toolchain {
    /// `program` under [`SUPERVISE`] in a process group of its own, as the unprivileged user;
    /// arguments added to the command go to `program`.
    pub(crate) fn command(&self, program: impl AsRef<std::ffi::OsStr>, home: &Path) -> Command {
        let mut cmd = self.with_environment(dying_with_parent("/bin/sh", "TERM"), home);
        cmd.args(["-c", SUPERVISE, "sh"])
            .arg(program)
            .process_group(0);
        cmd
    }

    /// `command` with the instance's environment, as the unprivileged user, killed when dropped.
    pub(crate) fn with_environment(&self, mut cmd: Command, home: &Path) -> Command {
        cmd.env("HOME", home)
            .env("TZ", "UTC")
            .env("LC_ALL", "C.UTF-8")
            .env_remove("PGPASSWORD")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(r) = self.run_as {
            cmd.uid(r.uid).gid(r.gid);
        }
        cmd
    }

    fn pg(&self, name: &str) -> PathBuf {
        self.bin_dir.join(name)
    }

    /// Runs a command of [`Self::command`] to completion; a failure carries the tail of its
    /// stderr. When this future is dropped before the command ends (its instance stopped, the
    /// simulator shutting down), the command's whole process group is killed.
    pub(crate) async fn run(&self, mut cmd: Command, name: &str) -> Result<String, Error> {
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io(format!("running {name}")))?;
        let mut group = GroupKiller(
            child
                .id()
                .and_then(|p| rustix::process::Pid::from_raw(p as i32)),
        );
        let out = child
            .wait_with_output()
            .await
            .map_err(io(format!("running {name}")))?;
        // Ended by itself: its process group id may be reused from now on.
        group.0 = None;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(Error::Command {
                command: name.to_owned(),
                output: tail(&String::from_utf8_lossy(&out.stderr), 3),
            })
        }
    }
}

/// Kills the process group it names when dropped (unless cleared).
struct GroupKiller(Option<rustix::process::Pid>);

impl Drop for GroupKiller {
    fn drop(&mut self) {
        if let Some(pgid) = self.0 {
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
        }
    }
}

/// The last `n` non-empty lines of `text`, joined by "; ".
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join("; ")
}

/// A free loopback TCP port.
pub fn free_port() -> Result<u16, Error> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(io("finding a free port"))
}

/// Quotes a value for a POSIX shell.
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// Where barman-cloud reaches an object store, and with which credentials.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct BarmanTarget {
    /// `s3://bucket/path/`.
    pub destination_path: String,
    /// The barman server name (the S3 prefix under the destination path).
    pub server_name: String,
    /// `--endpoint-url`, if any.
    pub endpoint_url: Option<String>,
    /// Extra arguments (compression, jobs).
    pub args: Vec<String>,
    /// Environment: AWS credentials, `AWS_CA_BUNDLE`, sidecar env.
    pub env: BTreeMap<String, String>,
}

impl std::fmt::Debug for BarmanTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The environment holds credentials: show only its keys.
        f.debug_struct("BarmanTarget")
            .field("destination_path", &self.destination_path)
            .field("server_name", &self.server_name)
            .field("endpoint_url", &self.endpoint_url)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl BarmanTarget {
    /// Arguments before the destination (endpoint, extra args).
    pub fn leading_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(e) = &self.endpoint_url {
            a.push("--endpoint-url".to_owned());
            a.push(e.clone());
        }
        a.extend(self.args.iter().cloned());
        a
    }

    /// `--endpoint-url` only: what the read commands (list, show, restore) accept.
    pub fn endpoint_args(&self) -> Vec<String> {
        match &self.endpoint_url {
            Some(e) => vec!["--endpoint-url".to_owned(), e.clone()],
            None => vec![],
        }
    }

    /// The env file the archive/restore scripts source.
    pub fn env_file(&self, delay_seconds: Option<f64>) -> String {
        let mut out = String::from("# written by operator-sims (cnpg); do not edit\n");
        for (k, v) in &self.env {
            out.push_str(&format!("export {k}={}\n", shell_quote(v)));
        }
        out.push_str(&format!(
            "BARMAN_ARGS={}\n",
            shell_quote(&self.leading_args().join(" "))
        ));
        out.push_str(&format!(
            "DESTINATION={}\n",
            shell_quote(&self.destination_path)
        ));
        out.push_str(&format!("SERVER_NAME={}\n", shell_quote(&self.server_name)));
        if let Some(d) = delay_seconds {
            out.push_str(&format!("ARCHIVE_DELAY_SECONDS={d}\n"));
        }
        out
    }
}

const ARCHIVE_WAL: &str = r#"#!/bin/sh
# archive_command of this instance (written by operator-sims). Without a WAL archiver (no
# barman-cloud plugin entry) the segment is not kept, as CloudNativePG does.
dir=$(dirname "$0")/..
wal=$(basename "$1")
[ -f "$dir/archive.env" ] || exit 0
. "$dir/archive.env"
# Runs "$@" and waits for it while the postmaster lives (its pid is the first line of
# postmaster.pid in the data directory, the archiver's working directory). A server that is
# killed outright does not end its archiver's command, so a slow or stuck one would otherwise
# outlive the server and wait here for ever.
while_the_server_lives() {
  pm=$(head -n 1 postmaster.pid 2>/dev/null)
  "$@" &
  child=$!
  while kill -0 "$child" 2>/dev/null; do
    if [ -n "$pm" ] && ! kill -0 "$pm" 2>/dev/null; then
      kill -TERM "$child" 2>/dev/null
      echo "cnpg-sim: the server is gone; not archiving $wal" >&2
      exit 1
    fi
    sleep 0.2
  done
  wait "$child"
}
if [ -n "$ARCHIVE_DELAY_SECONDS" ]; then
  echo "cnpg-sim: slow archiver: waiting ${ARCHIVE_DELAY_SECONDS}s before archiving $wal" >&2
  while_the_server_lives sleep "$ARCHIVE_DELAY_SECONDS" || exit 1
fi
# shellcheck disable=SC2086
if while_the_server_lives barman-cloud-wal-archive $BARMAN_ARGS "$DESTINATION" "$SERVER_NAME" "$1"; then
  echo "cnpg-sim: archived WAL file $wal" >&2
else
  rc=$?
  echo "cnpg-sim: failed to archive WAL file $wal (exit code $rc)" >&2
  exit "$rc"
fi
"#;

const RESTORE_WAL: &str = r#"#!/bin/sh
# restore_command of this instance (written by operator-sims).
dir=$(dirname "$0")/..
. "$dir/restore.env"
# shellcheck disable=SC2086
exec barman-cloud-wal-restore $BARMAN_ARGS "$DESTINATION" "$SERVER_NAME" "$1" "$2"
"#;

/// The directory of one instance.
#[derive(Clone, Debug)]
pub struct InstanceDir {
    /// The directory itself.
    pub root: PathBuf,
}

impl InstanceDir {
    /// PGDATA.
    pub fn data(&self) -> PathBuf {
        self.root.join("data")
    }
    /// The socket directory: `run/` inside the instance's directory, or, when a socket there
    /// would pass the 107 bytes a unix socket path may hold (a long data directory, namespace or
    /// Cluster name, such as a restore drill's scratch copy), a directory under the temporary
    /// directory named by a hash of the instance's path.
    pub fn run(&self) -> PathBuf {
        use std::hash::{Hash as _, Hasher as _};
        let inside = self.root.join("run");
        // The socket is `<dir>/.s.PGSQL.<port>`: up to 16 more bytes.
        if inside.as_os_str().len() + 16 <= 107 {
            return inside;
        }
        // SipHash with fixed keys: the same directory for the same instance in every process.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.root.hash(&mut h);
        std::env::temp_dir().join(format!("cozy-pg-{:016x}", h.finish()))
    }

    /// Removes the instance's directories (its socket directory too, when that lies outside).
    pub fn remove_all(&self) {
        let _ = std::fs::remove_dir_all(self.run());
        let _ = std::fs::remove_dir_all(&self.root);
    }
    fn bin(&self, name: &str) -> PathBuf {
        self.root.join("bin").join(name)
    }

    /// Creates the directory tree and scripts, owned by the run-as user.
    pub fn create(&self, tc: &Toolchain) -> Result<(), Error> {
        use std::os::unix::fs::PermissionsExt as _;
        for d in [self.root.clone(), self.run(), self.root.join("bin")] {
            std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
        }
        for (name, text) in [("archive-wal", ARCHIVE_WAL), ("restore-wal", RESTORE_WAL)] {
            let p = self.bin(name);
            std::fs::write(&p, text).map_err(io(format!("writing {}", p.display())))?;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
                .map_err(io(format!("chmod {}", p.display())))?;
        }
        std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700))
            .map_err(io(format!("chmod {}", self.root.display())))?;
        if let (false, Some(r)) = (self.run().starts_with(&self.root), tc.run_as) {
            std::os::unix::fs::chown(self.run(), Some(r.uid), Some(r.gid))
                .map_err(io(format!("chown {}", self.run().display())))?;
        }
        self.chown_tree(tc)
    }

    fn chown_tree(&self, tc: &Toolchain) -> Result<(), Error> {
        let Some(r) = tc.run_as else { return Ok(()) };
        for entry in walk(&self.root) {
            std::os::unix::fs::chown(&entry, Some(r.uid), Some(r.gid))
                .map_err(io(format!("chown {}", entry.display())))?;
        }
        Ok(())
    }

    /// Writes a 0600 file owned by the run-as user.
    pub fn write_private(&self, tc: &Toolchain, name: &str, text: &str) -> Result<PathBuf, Error> {
        use std::os::unix::fs::PermissionsExt as _;
        let p = self.root.join(name);
        let tmp = self.root.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, text).map_err(io(format!("writing {}", tmp.display())))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
            .map_err(io(format!("chmod {}", tmp.display())))?;
        if let Some(r) = tc.run_as {
            std::os::unix::fs::chown(&tmp, Some(r.uid), Some(r.gid))
                .map_err(io(format!("chown {}", tmp.display())))?;
        }
        std::fs::rename(&tmp, &p).map_err(io(format!("writing {}", p.display())))?;
        Ok(p)
    }

    /// Removes a file written by [`Self::write_private`] (absent is fine).
    pub fn remove(&self, name: &str) {
        let _ = std::fs::remove_file(self.root.join(name));
    }

    /// Runs `initdb` (superuser `postgres`, local trust, host scram-sha-256).
    pub async fn initdb(&self, tc: &Toolchain) -> Result<(), Error> {
        let mut cmd = tc.command(tc.pg("initdb"), &self.root);
        cmd.arg("-D").arg(self.data()).args([
            "-U",
            "postgres",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        tc.run(cmd, "initdb").await.map(|_| ())
    }

    /// Restores a base backup into `data/` with `barman-cloud-restore`.
    pub async fn restore_base_backup(
        &self,
        tc: &Toolchain,
        target: &BarmanTarget,
        backup_id: &str,
    ) -> Result<(), Error> {
        let _ = std::fs::remove_dir_all(self.data());
        let mut cmd = tc.command("barman-cloud-restore", &self.root);
        cmd.args(target.endpoint_args())
            .arg(&target.destination_path)
            .arg(&target.server_name)
            .arg(backup_id)
            .arg(self.data())
            .envs(&target.env);
        tc.run(cmd, "barman-cloud-restore").await?;
        // barman restores what it found; PostgreSQL insists on 0700.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(self.data(), std::fs::Permissions::from_mode(0o700))
            .map_err(io("chmod data"))?;
        std::fs::write(self.data().join("recovery.signal"), "")
            .map_err(io("writing recovery.signal"))?;
        self.chown_tree(tc)
    }
}

/// Whether every ancestor of `path` lets other users through (mode `o+x`), which an
/// unprivileged PostgreSQL needs to reach a data directory below it.
pub fn traversable_by_others(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    path.ancestors()
        .skip(1)
        .all(|p| std::fs::metadata(p).is_ok_and(|m| m.permissions().mode() & 0o001 != 0))
}

fn walk(root: &Path) -> Vec<PathBuf> {
    let mut out = vec![root.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        let p = out[i].clone();
        i += 1;
        if p.is_dir()
            && !p.is_symlink()
            && let Ok(rd) = std::fs::read_dir(&p)
        {
            out.extend(rd.flatten().map(|e| e.path()));
        }
    }
    out
}

/// One line of server output.
pub type LogLine = String;

/// A running PostgreSQL server.
#[derive(Debug)]
pub struct Server {
    /// Its directory.
    pub dir: InstanceDir,
    /// TCP port on 127.0.0.1.
    pub port: u16,
    child: Child,
}

/// How to start a server.
#[derive(Clone, Debug, Default)]
pub struct StartOptions {
    /// Extra `-c name=value` settings.
    pub settings: Vec<(String, String)>,
}

impl Server {
    /// Starts `postgres` in the foreground, in a process group of its own, stopped with SIGQUIT
    /// when this process ends ([`dying_with_parent`]); returns the server and its log lines (the
    /// channel ends when the server exits).
    pub fn start(
        tc: &Toolchain,
        dir: &InstanceDir,
        port: u16,
        options: &StartOptions,
    ) -> Result<(Self, mpsc::UnboundedReceiver<LogLine>), Error> {
        // SIGQUIT when the simulator is gone: PostgreSQL's immediate shutdown, in which the
        // postmaster ends its children (and their process groups: the archiver's barman command)
        // and exits.
        let mut cmd = tc.with_environment(dying_with_parent(tc.pg("postgres"), "QUIT"), &dir.root);
        cmd.arg("-D").arg(dir.data()).process_group(0);
        let mut settings = vec![
            ("port".to_owned(), port.to_string()),
            ("listen_addresses".to_owned(), "127.0.0.1".to_owned()),
            (
                "unix_socket_directories".to_owned(),
                dir.run().display().to_string(),
            ),
            ("logging_collector".to_owned(), "off".to_owned()),
            ("log_destination".to_owned(), "stderr".to_owned()),
            ("wal_level".to_owned(), "replica".to_owned()),
            ("fsync".to_owned(), "off".to_owned()),
            ("max_connections".to_owned(), "50".to_owned()),
            ("shared_buffers".to_owned(), "16MB".to_owned()),
            // CloudNativePG keeps PostgreSQL's 0.9: a base backup's spread checkpoint then paces
            // its writes over minutes. The simulator checkpoints as fast as it can instead.
            ("checkpoint_completion_target".to_owned(), "0".to_owned()),
        ];
        settings.extend(options.settings.iter().cloned());
        for (k, v) in settings {
            cmd.arg("-c").arg(format!("{k}={v}"));
        }
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(io("starting postgres"))?;
        let (tx, rx) = mpsc::unbounded_channel();
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stream).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
        }
        Ok((
            Server {
                dir: dir.clone(),
                port,
                child,
            },
            rx,
        ))
    }

    /// Whether the process has exited (and with which code).
    pub fn exit_code(&mut self) -> Option<i32> {
        match self.child.try_wait() {
            Ok(Some(s)) => Some(s.code().unwrap_or(-1)),
            _ => None,
        }
    }

    /// Waits for the process to exit.
    pub async fn wait(&mut self) -> i32 {
        self.child
            .wait()
            .await
            .ok()
            .and_then(|s| s.code())
            .unwrap_or(-1)
    }

    /// Fast shutdown (SIGINT to the postmaster), then an immediate one (SIGQUIT) after 20 s, then
    /// SIGKILL after 10 s more. Signalled directly, without `pg_ctl`: no helper process that a
    /// signal to the simulator's process group could end half-way. (`_tc` is kept for callers
    /// that pass it.)
    pub async fn stop(mut self, _tc: &Toolchain) {
        use rustix::process::Signal;
        for (signal, patience) in [
            (Signal::INT, Duration::from_secs(20)),
            (Signal::QUIT, Duration::from_secs(10)),
        ] {
            if self.exit_code().is_some() {
                return;
            }
            if let Some(pid) = self
                .child
                .id()
                .and_then(|p| rustix::process::Pid::from_raw(p as i32))
            {
                let _ = rustix::process::kill_process(pid, signal);
            }
            if tokio::time::timeout(patience, self.child.wait())
                .await
                .is_ok()
            {
                return;
            }
            tracing::debug!(?signal, "PostgreSQL did not stop in time; escalating");
        }
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// Runs SQL as the superuser over the unix socket; returns unaligned, tuples-only output.
    pub async fn psql(&self, tc: &Toolchain, db: &str, sql: &str) -> Result<String, Error> {
        psql(tc, &self.dir, self.port, db, sql).await
    }

    /// Takes a base backup of this server (see [`take_backup`]).
    pub async fn backup(
        &self,
        tc: &Toolchain,
        target: &BarmanTarget,
        name: &str,
    ) -> Result<BackupInfo, Error> {
        take_backup(tc, &self.dir, self.port, target, name).await
    }
}

/// Takes a base backup of the server on `port` with `barman-cloud-backup --name <name>` and
/// returns barman's description of it (`barman-cloud-backup-show --format json`).
pub async fn take_backup(
    tc: &Toolchain,
    dir: &InstanceDir,
    port: u16,
    target: &BarmanTarget,
    name: &str,
) -> Result<BackupInfo, Error> {
    let mut cmd = tc.command("barman-cloud-backup", &dir.root);
    cmd.args(target.leading_args())
        .args(["--name", name, "--host"])
        .arg(dir.run())
        .args(["--port", &port.to_string(), "--user", "postgres"])
        .arg(&target.destination_path)
        .arg(&target.server_name)
        .envs(&target.env);
    tc.run(cmd, "barman-cloud-backup").await?;
    show_backup(tc, &dir.root, target, name).await
}

/// Runs SQL as the superuser over the instance's socket.
pub async fn psql(
    tc: &Toolchain,
    dir: &InstanceDir,
    port: u16,
    db: &str,
    sql: &str,
) -> Result<String, Error> {
    let mut cmd = tc.command(tc.pg("psql"), &dir.root);
    cmd.arg("-h")
        .arg(dir.run())
        .args(["-p", &port.to_string(), "-U", "postgres", "-d", db])
        .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]);
    tc.run(cmd, "psql").await.map(|s| s.trim().to_owned())
}

/// What barman knows about one base backup (the fields the simulator reports).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Deserialize)]
pub struct BackupInfo {
    /// barman's id (`YYYYMMDDTHHMMSS`).
    pub backup_id: String,
    /// The `--name` given.
    #[serde(default)]
    pub backup_name: Option<String>,
    /// `DONE`, `FAILED`, …
    pub status: String,
    /// First WAL file.
    #[serde(default)]
    pub begin_wal: Option<String>,
    /// Last WAL file.
    #[serde(default)]
    pub end_wal: Option<String>,
    /// Start LSN.
    #[serde(default)]
    pub begin_xlog: Option<String>,
    /// End LSN.
    #[serde(default)]
    pub end_xlog: Option<String>,
    /// Start time, ctime format in UTC (`Tue Dec  1 15:16:08 2026`).
    #[serde(default)]
    pub begin_time: Option<String>,
    /// End time, same format.
    #[serde(default)]
    pub end_time: Option<String>,
    /// Timeline.
    #[serde(default)]
    pub timeline: Option<u32>,
}

impl BackupInfo {
    /// `begin_time` as a UTC timestamp.
    pub fn begun(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.begin_time.as_deref().and_then(parse_ctime)
    }
    /// `end_time` as a UTC timestamp.
    pub fn ended(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        self.end_time.as_deref().and_then(parse_ctime)
    }
}

/// Parses barman's ctime-style timestamps (printed with TZ=UTC).
pub fn parse_ctime(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let collapsed = s.split_whitespace().collect::<Vec<_>>().join(" ");
    chrono::NaiveDateTime::parse_from_str(&collapsed, "%a %b %d %H:%M:%S %Y")
        .ok()
        .map(|n| n.and_utc())
}

async fn show_backup(
    tc: &Toolchain,
    home: &Path,
    target: &BarmanTarget,
    name: &str,
) -> Result<BackupInfo, Error> {
    let mut cmd = tc.command("barman-cloud-backup-show", home);
    cmd.args(target.endpoint_args())
        .args(["--format", "json"])
        .arg(&target.destination_path)
        .arg(&target.server_name)
        .arg(name)
        .envs(&target.env);
    let out = tc.run(cmd, "barman-cloud-backup-show").await?;
    let map: BTreeMap<String, BackupInfo> =
        serde_json::from_str(&out).map_err(|e| Error::Output {
            command: "barman-cloud-backup-show".into(),
            message: e.to_string(),
        })?;
    map.into_values().next().ok_or_else(|| Error::Output {
        command: "barman-cloud-backup-show".into(),
        message: "no backup in the output".into(),
    })
}

/// Lists the base backups under a server name (`barman-cloud-backup-list --format json`).
pub async fn list_backups(
    tc: &Toolchain,
    home: &Path,
    target: &BarmanTarget,
) -> Result<Vec<BackupInfo>, Error> {
    #[derive(serde::Deserialize)]
    struct List {
        backups_list: Vec<BackupInfo>,
    }
    let mut cmd = tc.command("barman-cloud-backup-list", home);
    cmd.args(target.endpoint_args())
        .args(["--format", "json"])
        .arg(&target.destination_path)
        .arg(&target.server_name)
        .envs(&target.env);
    let out = tc.run(cmd, "barman-cloud-backup-list").await?;
    let list: List = serde_json::from_str(&out).map_err(|e| Error::Output {
        command: "barman-cloud-backup-list".into(),
        message: e.to_string(),
    })?;
    Ok(list.backups_list)
}

/// The newest completed backup that ended at or before `target` (any, without a target).
pub fn choose_backup(
    backups: &[BackupInfo],
    target: Option<chrono::DateTime<chrono::Utc>>,
) -> Option<&BackupInfo> {
    backups
        .iter()
        .filter(|b| b.status == "DONE")
        .filter(|b| match (target, b.ended()) {
            (None, _) => true,
            (Some(t), Some(end)) => end <= t,
            (Some(_), None) => false,
        })
        .max_by_key(|b| b.ended())
}

/// Converts a recovery target time as users write it (RFC 3339, or PostgreSQL's own format) to
/// the form PostgreSQL's `recovery_target_time` accepts (no `T`, no `Z` abbreviation).
pub fn postgres_target_time(value: &str) -> Option<(String, chrono::DateTime<chrono::Utc>)> {
    let v = value.trim();
    let parsed = chrono::DateTime::parse_from_rfc3339(v)
        .ok()
        .or_else(|| chrono::DateTime::parse_from_str(v, "%Y-%m-%d %H:%M:%S%.f%#z").ok())
        .or_else(|| chrono::DateTime::parse_from_str(v, "%Y-%m-%d %H:%M:%S%#z").ok())?;
    let utc = parsed.with_timezone(&chrono::Utc);
    Some((utc.format("%Y-%m-%d %H:%M:%S%.6f+00").to_string(), utc))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_path_always_fits_in_a_unix_socket_address() {
        let short = InstanceDir {
            root: PathBuf::from("/d/pg/tenant-root/db"),
        };
        assert_eq!(short.run(), PathBuf::from("/d/pg/tenant-root/db/run"));
        let long = InstanceDir {
            root: PathBuf::from(format!(
                "/tmp/e2e-harness-123456-7/dataplane/pg/tenant-{}/orders-db-verify-0a1b2c3d",
                "x".repeat(40)
            )),
        };
        let run = long.run();
        assert!(
            run.as_os_str().len() + ".s.PGSQL.65535".len() < 107,
            "{run:?}"
        );
        assert_eq!(run, long.run(), "the same instance gets the same directory");
        let other = InstanceDir {
            root: long.root.with_file_name("orders-db-verify-ffffffff"),
        };
        assert_ne!(run, other.run());
    }

    #[test]
    fn passwd_lookup() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\npostgres:x:101:104::/var/lib/postgresql:/bin/bash\nbroken\n";
        assert_eq!(
            passwd_entry(passwd, "postgres"),
            Some(RunAs { uid: 101, gid: 104 })
        );
        assert_eq!(passwd_entry(passwd, "nobody"), None);
        assert_eq!(passwd_entry(passwd, "broken"), None);
    }

    #[test]
    fn target_times_in_both_spellings() {
        for (input, want) in [
            ("2026-07-21T09:30:00Z", "2026-07-21 09:30:00.000000+00"),
            (
                "2026-07-21T09:30:00.123456Z",
                "2026-07-21 09:30:00.123456+00",
            ),
            ("2026-07-21T11:30:00+02:00", "2026-07-21 09:30:00.000000+00"),
            (
                "2020-11-26 15:22:00.00000+00",
                "2020-11-26 15:22:00.000000+00",
            ),
        ] {
            assert_eq!(
                postgres_target_time(input).map(|t| t.0).as_deref(),
                Some(want),
                "{input}"
            );
        }
        assert_eq!(postgres_target_time("yesterday"), None);
    }

    #[test]
    fn ctime_and_backup_choice() {
        assert_eq!(
            parse_ctime("Tue Dec  1 15:16:08 2026").map(|t| t.to_rfc3339()),
            Some("2026-12-01T15:16:08+00:00".into())
        );
        let b = |id: &str, end: &str, status: &str| BackupInfo {
            backup_id: id.into(),
            status: status.into(),
            end_time: Some(end.into()),
            ..Default::default()
        };
        let list = [
            b("a", "Tue Dec  1 10:00:00 2026", "DONE"),
            b("b", "Tue Dec  1 11:00:00 2026", "DONE"),
            b("c", "Tue Dec  1 12:00:00 2026", "FAILED"),
        ];
        let at = |s: &str| Some(chrono::DateTime::parse_from_rfc3339(s).unwrap().to_utc());
        assert_eq!(choose_backup(&list, None).unwrap().backup_id, "b");
        assert_eq!(
            choose_backup(&list, at("2026-12-01T10:30:00Z"))
                .unwrap()
                .backup_id,
            "a"
        );
        assert_eq!(
            choose_backup(&list, at("2026-12-01T11:00:00Z"))
                .unwrap()
                .backup_id,
            "b"
        );
        assert!(choose_backup(&list, at("2026-12-01T09:00:00Z")).is_none());
    }

    #[test]
    fn env_files_quote_values_and_never_debug_print_them() {
        let t = BarmanTarget {
            destination_path: "s3://b/p/".into(),
            server_name: "srv".into(),
            endpoint_url: Some("https://127.0.0.1:9".into()),
            args: vec!["--gzip".into()],
            env: [("AWS_SECRET_ACCESS_KEY".to_owned(), "it's".to_owned())].into(),
        };
        let text = t.env_file(Some(1.5));
        assert!(
            text.contains("export AWS_SECRET_ACCESS_KEY='it'\\''s'\n"),
            "{text}"
        );
        assert!(text.contains("BARMAN_ARGS='--endpoint-url https://127.0.0.1:9 --gzip'\n"));
        assert!(text.contains("ARCHIVE_DELAY_SECONDS=1.5\n"));
        assert!(!format!("{t:?}").contains("it's"));
    }

    /// Processes whose environment carries `marker` (a command's children inherit it).
    fn carrying(marker: &str) -> Vec<String> {
        let needle = format!("SUPERVISE_TEST={marker}");
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                std::fs::read(e.path().join("environ"))
                    .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
            })
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// Polls until `carrying(marker)` has `want(n)` processes, for up to 20 s.
    async fn until_carrying(marker: &str, want: impl Fn(usize) -> bool) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let now = carrying(marker);
            if want(now.len()) {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!("processes carrying {marker}: {now:?}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A command abandoned half-way (its instance stopped) is killed with everything it started,
    /// not only itself: here a shell and its two `sleep`s, as barman-cloud-backup and its upload
    /// workers.
    #[tokio::test]
    async fn an_abandoned_command_takes_its_children_along() {
        let marker = format!("abandoned-{}", std::process::id());
        let home = std::env::temp_dir();
        let tc = Toolchain {
            bin_dir: PathBuf::from("/nonexistent"),
            run_as: None,
        };
        let mut cmd = tc.command("/bin/sh", &home);
        cmd.args(["-c", "sleep 300 & sleep 300"])
            .env("SUPERVISE_TEST", &marker);
        let running = tokio::spawn(async move { tc.run(cmd, "sh").await });
        // The supervising shell and the two sleeps (the command's shell may become the last).
        until_carrying(&marker, |n| n >= 3).await.unwrap();
        running.abort();
        assert!(running.await.unwrap_err().is_cancelled());
        until_carrying(&marker, |n| n == 0).await.unwrap();
    }

    /// When the process that started a command dies, even SIGKILLed, the command and everything it
    /// started die too. The dying parent here is a shell standing in for the simulator.
    #[tokio::test]
    async fn a_command_dies_with_its_parent() {
        let marker = format!("orphaned-{}", std::process::id());
        let mut parent = tokio::process::Command::new("/bin/sh");
        parent
            .args([
                "-c",
                r#"setpriv --pdeathsig TERM -- /bin/sh -c "$0" sh /bin/sh -c 'sleep 300 & sleep 300' & wait"#,
                SUPERVISE,
            ])
            .env("SUPERVISE_TEST", &marker)
            // A group of its own: what `Toolchain::command` gives every command, and what
            // `kill -KILL 0` in SUPERVISE ends.
            .process_group(0)
            .kill_on_drop(true);
        let mut parent = parent.spawn().unwrap();
        // The parent, the supervising shell and the two sleeps.
        until_carrying(&marker, |n| n >= 4).await.unwrap();
        parent.start_kill().unwrap();
        parent.wait().await.unwrap();
        until_carrying(&marker, |n| n == 0).await.unwrap();
    }
}
