//! Local MariaDB servers and the dump and restore the mariadb-operator's Jobs run, for the
//! mariadb simulator's data plane (see `docs/dataplane.md`).
//!
//! ```text
//!  <data-dir>/mariadb/<namespace>/<mariadb>-<uid>/   0700, owned by the simulator's user
//!     data/         datadir (mariadb-install-db)
//!     run/          unix socket (elsewhere when that path is too long for one), pid file
//!     tmp/          the server's tmpdir (not the shared /tmp: concurrent bootstraps trip over
//!                   each other's temporary tables there)
//!     client.cnf    [client] user=root, password, socket (0600): every client reads it
//!     error.log     the server's log
//!     jobs/<uid>/   one dump or restore: the dump file, compressed or downloaded
//!
//!  dump:    mariadb-dump (--databases … | --all-databases but mysql) ─► gzip/bzip2
//!           ─► PUT s3://<bucket>/<prefix>/backup.<UTC time>[.<compression>].sql ─► prune by maxRetention
//!  restore: list <prefix> ─► newest dump at or before the target time ─► GET ─► gunzip/bunzip2
//!           ─► mariadb < dump
//! ```
//!
//! Invariants: a server listens on 127.0.0.1 on a free port and on a unix socket in its own directory
//! (in the system temporary directory when that path is too long for a socket address);
//! it runs as the simulator's user (as root with `--user=root`, so no other account needs to reach
//! the directory); no process started here outlives the simulator ([`pg::dying_with_parent`],
//! [`pg::SUPERVISE`]). The root password only ever goes to 0600 files, the Secret and the SQL that
//! sets it, never to argv or logs.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use backup_storage::s3::{Got, S3Client};
use chrono::{DateTime, Utc};
use tokio::process::Child;

use crate::pg::{self, Error, Toolchain};

/// The server.
pub const MARIADBD: &str = "/usr/sbin/mariadbd";
/// Initialises a data directory.
pub const INSTALL_DB: &str = "/usr/bin/mariadb-install-db";
/// The command-line client (what a restore Job pipes the dump into).
pub const CLIENT: &str = "/usr/bin/mariadb";
/// The logical dump tool.
pub const DUMP: &str = "/usr/bin/mariadb-dump";

/// The largest dump a restore downloads.
const MAX_DUMP_BYTES: u64 = 1 << 30;
/// How long a new server may take to accept connections.
const START_DEADLINE: Duration = Duration::from_secs(60);

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// How commands run: as the simulator's own user, under [`pg::SUPERVISE`].
pub fn toolchain() -> Toolchain {
    Toolchain {
        bin_dir: PathBuf::from("/usr/bin"),
        run_as: None,
    }
}

fn as_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// The directory of one server.
#[derive(Clone, Debug)]
pub struct ServerDir {
    /// The directory itself.
    pub root: PathBuf,
    /// The unix socket.
    pub socket: PathBuf,
}

impl ServerDir {
    /// The directory `root` with its socket in `run/`, or in the system temporary directory
    /// (named after `id`) when that path would be longer than a socket address allows.
    pub fn new(root: PathBuf, id: &str) -> Self {
        let socket = root.join("run").join("mysqld.sock");
        let socket = if socket.as_os_str().len() <= 100 {
            socket
        } else {
            std::env::temp_dir().join(format!("operator-sims-mariadb-{id}.sock"))
        };
        ServerDir { root, socket }
    }
    /// The datadir.
    pub fn data(&self) -> PathBuf {
        self.root.join("data")
    }
    /// The client options file (user, password, socket).
    pub fn client_cnf(&self) -> PathBuf {
        self.root.join("client.cnf")
    }
    /// The working directory of one job.
    pub fn job(&self, id: &str) -> PathBuf {
        self.root.join("jobs").join(id)
    }
    /// The last lines of the server's log.
    pub fn log_tail(&self, n: usize) -> String {
        pg::tail(
            &std::fs::read_to_string(self.root.join("error.log")).unwrap_or_default(),
            n,
        )
    }
}

/// A value for a MySQL option file (double-quoted).
fn option_value(v: &str) -> String {
    format!("\"{}\"", v.replace('\\', "\\\\").replace('"', "\\\""))
}

/// A string literal for SQL.
pub fn sql_string(v: &str) -> String {
    format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
}

fn write_private(path: &Path, text: &str) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).map_err(io(format!("writing {}", tmp.display())))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o600))
        .map_err(io(format!("chmod {}", tmp.display())))?;
    std::fs::rename(&tmp, path).map_err(io(format!("writing {}", path.display())))
}

/// A running `mariadbd`.
#[derive(Debug)]
pub struct Server {
    /// Its directory.
    pub dir: ServerDir,
    /// TCP port on 127.0.0.1.
    pub port: u16,
    child: Child,
}

impl Server {
    /// Initialises `dir` (`mariadb-install-db`), starts `mariadbd` on a free loopback port and
    /// sets the root password (for `localhost`, `127.0.0.1` and `::1`) to `password`.
    pub async fn init_and_start(dir: ServerDir, password: &str) -> Result<Server, Error> {
        use std::os::unix::fs::PermissionsExt as _;
        let tc = toolchain();
        // A failed attempt may have left a half-initialised datadir behind.
        let _ = std::fs::remove_dir_all(dir.data());
        let tmp = dir.root.join("tmp");
        for d in [
            dir.root.clone(),
            dir.root.join("run"),
            dir.root.join("jobs"),
            tmp.clone(),
        ] {
            std::fs::create_dir_all(&d).map_err(io(format!("creating {}", d.display())))?;
        }
        std::fs::set_permissions(&dir.root, std::fs::Permissions::from_mode(0o700))
            .map_err(io(format!("chmod {}", dir.root.display())))?;
        let mut install = tc.command(INSTALL_DB, &dir.root);
        install
            .arg("--no-defaults")
            .arg(format!("--datadir={}", dir.data().display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .args(["--auth-root-authentication-method=normal", "--skip-test-db"]);
        if as_root() {
            install.arg("--user=root");
        }
        tc.run(install, "mariadb-install-db").await?;
        let port = pg::free_port()?;
        let mut cmd = tc.with_environment(pg::dying_with_parent(MARIADBD, "TERM"), &dir.root);
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", dir.data().display()))
            .arg(format!("--socket={}", dir.socket.display()))
            .arg(format!("--tmpdir={}", tmp.display()))
            .arg(format!(
                "--pid-file={}",
                dir.root.join("run").join("mariadbd.pid").display()
            ))
            .arg(format!(
                "--log-error={}",
                dir.root.join("error.log").display()
            ))
            .arg(format!("--port={port}"))
            .args([
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--innodb-buffer-pool-size=16M",
                "--innodb-flush-log-at-trx-commit=2",
                "--max-connections=50",
            ])
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if as_root() {
            cmd.arg("--user=root");
        }
        let child = cmd.spawn().map_err(io("starting mariadbd"))?;
        let mut server = Server { dir, port, child };
        // Freshly installed: root has no password over the socket yet.
        let bootstrap = server.dir.root.join("bootstrap.cnf");
        write_private(
            &bootstrap,
            &format!(
                "[client]\nuser=root\nsocket={}\n",
                option_value(&server.dir.socket.display().to_string())
            ),
        )?;
        let deadline = tokio::time::Instant::now() + START_DEADLINE;
        loop {
            if let Some(code) = server.exit_code() {
                return Err(Error::Command {
                    command: "mariadbd".into(),
                    output: format!("exited with code {code}: {}", server.dir.log_tail(2)),
                });
            }
            if sql_with(&server.dir, &bootstrap, "SELECT 1").await.is_ok() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Command {
                    command: "mariadbd".into(),
                    output: format!(
                        "no connection within {START_DEADLINE:?}: {}",
                        server.dir.log_tail(2)
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let pw = sql_string(password);
        let set = ["localhost", "127.0.0.1", "::1"]
            .iter()
            .map(|h| format!("ALTER USER 'root'@'{h}' IDENTIFIED BY {pw};"))
            .collect::<String>();
        // Through a 0600 file, not `-e`: the password stays out of every command line.
        let script = server.dir.root.join("set-password.sql");
        write_private(&script, &set)?;
        let result = source(&server.dir, &bootstrap, &script).await;
        let _ = std::fs::remove_file(&script);
        result?;
        let _ = std::fs::remove_file(&bootstrap);
        write_private(
            &server.dir.client_cnf(),
            &format!(
                "[client]\nuser=root\npassword={}\nsocket={}\n",
                option_value(password),
                option_value(&server.dir.socket.display().to_string())
            ),
        )?;
        Ok(server)
    }

    /// Whether the process has exited (and with which code).
    pub fn exit_code(&mut self) -> Option<i32> {
        match self.child.try_wait() {
            Ok(Some(s)) => Some(s.code().unwrap_or(-1)),
            _ => None,
        }
    }

    /// SIGTERM (a clean shutdown), then SIGKILL after 20 s.
    pub async fn stop(mut self) {
        if self.exit_code().is_some() {
            return;
        }
        if let Some(pid) = self
            .child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
    }
}

/// Runs SQL as root over the socket of the server in `dir` (tab-separated, no column names).
pub async fn sql(dir: &ServerDir, sql: &str) -> Result<String, Error> {
    sql_with(dir, &dir.client_cnf(), sql).await
}

async fn sql_with(dir: &ServerDir, cnf: &Path, sql: &str) -> Result<String, Error> {
    let tc = toolchain();
    let mut cmd = tc.command(CLIENT, &dir.root);
    cmd.arg(format!("--defaults-extra-file={}", cnf.display()))
        .args(["--batch", "--skip-column-names", "-e", sql]);
    tc.run(cmd, "mariadb").await.map(|s| s.trim().to_owned())
}

/// Pipes the SQL file `script` into `mariadb` (client options from `cnf`).
async fn source(dir: &ServerDir, cnf: &Path, script: &Path) -> Result<(), Error> {
    let tc = toolchain();
    // The supervising shell runs the command in the background, where stdin is /dev/null: the
    // file is redirected inside.
    let mut cmd = tc.command("/bin/sh", &dir.root);
    cmd.args(["-c", r#"f=$1; shift; exec "$@" < "$f""#, "sh"])
        .arg(script)
        .arg(CLIENT)
        .arg(format!("--defaults-extra-file={}", cnf.display()));
    tc.run(cmd, "mariadb").await.map(|_| ())
}

/// The compression of a Backup (`spec.compression`): `none` when empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Plain SQL.
    None,
    /// `gzip`.
    Gzip,
    /// `bzip2`.
    Bzip2,
}

impl Compression {
    /// Parses `spec.compression`.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "" | "none" => Ok(Compression::None),
            "gzip" => Ok(Compression::Gzip),
            "bzip2" => Ok(Compression::Bzip2),
            other => Err(format!("unsupported compression algorithm: {other:?}")),
        }
    }
    fn name(self) -> Option<&'static str> {
        match self {
            Compression::None => None,
            Compression::Gzip => Some("gzip"),
            Compression::Bzip2 => Some("bzip2"),
        }
    }
    /// The program and the suffix it adds.
    fn tool(self) -> Option<(&'static str, &'static str)> {
        match self {
            Compression::None => None,
            Compression::Gzip => Some(("gzip", "gz")),
            Compression::Bzip2 => Some(("bzip2", "bz2")),
        }
    }
}

/// The object name the operator gives a dump taken at `at`:
/// `backup.<YYYY-MM-DDTHH:MM:SSZ>.sql`, or `backup.<time>.<compression>.sql` when compressed.
pub fn artifact_name(at: DateTime<Utc>, compression: Compression) -> String {
    let t = at.format("%Y-%m-%dT%H:%M:%SZ");
    match compression.name() {
        Some(c) => format!("backup.{t}.{c}.sql"),
        None => format!("backup.{t}.sql"),
    }
}

/// The time and compression of a dump's object name (its last path segment).
pub fn parse_artifact(key: &str) -> Option<(DateTime<Utc>, Compression)> {
    let name = key.rsplit('/').next()?;
    let rest = name.strip_prefix("backup.")?.strip_suffix(".sql")?;
    // The time contains no dot; a compression name may follow it.
    let (time, compression) = match rest.split_once('.') {
        Some((t, c)) => (t, Compression::parse(c).ok()?),
        None => (rest, Compression::None),
    };
    let at = DateTime::parse_from_rfc3339(time).ok()?.with_timezone(&Utc);
    Some((at, compression))
}

/// Parses a Go duration (`720h`, `1h30m`, `90s`, `1.5h`): what `metav1.Duration` holds.
pub fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut rest = s;
    let mut total = 0f64;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..num_end].parse().ok()?;
        rest = &rest[num_end..];
        let unit_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        total += value * seconds;
        rest = &rest[unit_end..];
    }
    Some(Duration::from_secs_f64(total))
}

/// `prefix` as the operator uses it: with a trailing `/`, or empty.
pub fn normalized_prefix(prefix: &str) -> String {
    let p = prefix.trim_start_matches('/');
    if p.is_empty() || p.ends_with('/') {
        p.to_owned()
    } else {
        format!("{p}/")
    }
}

/// Dumps the server in `server` into `job/backup.sql` and compresses it; returns the file.
pub async fn dump(
    server: &ServerDir,
    job: &Path,
    databases: &[String],
    compression: Compression,
) -> Result<PathBuf, Error> {
    let tc = toolchain();
    std::fs::create_dir_all(job).map_err(io(format!("creating {}", job.display())))?;
    let out = job.join("backup.sql");
    let mut cmd = tc.command(DUMP, &server.root);
    cmd.arg(format!(
        "--defaults-extra-file={}",
        server.client_cnf().display()
    ))
    .args([
        "--single-transaction",
        "--events",
        "--routines",
        "--skip-add-locks",
    ])
    .arg(format!("--result-file={}", out.display()));
    if databases.is_empty() {
        // Every database but the system ones (mariadb-dump itself skips information_schema,
        // performance_schema and sys).
        cmd.args(["--all-databases", "--ignore-database=mysql"]);
    } else {
        cmd.arg("--databases").args(databases);
    }
    tc.run(cmd, "mariadb-dump").await?;
    let Some((program, suffix)) = compression.tool() else {
        return Ok(out);
    };
    let mut cmd = tc.command(program, job);
    cmd.arg("-f").arg(&out);
    tc.run(cmd, program).await?;
    Ok(job.join(format!("backup.sql.{suffix}")))
}

/// Replays the dump `bytes` (named `key`, which tells its compression) into the server in
/// `server` with `mariadb`, working in `job`.
pub async fn replay(server: &ServerDir, job: &Path, key: &str, bytes: &[u8]) -> Result<(), Error> {
    let tc = toolchain();
    std::fs::create_dir_all(job).map_err(io(format!("creating {}", job.display())))?;
    let compression = parse_artifact(key).map_or(Compression::None, |(_, c)| c);
    let plain = job.join("restore.sql");
    match compression.tool() {
        None => std::fs::write(&plain, bytes).map_err(io("writing the dump"))?,
        Some((program, suffix)) => {
            let packed = job.join(format!("restore.sql.{suffix}"));
            std::fs::write(&packed, bytes).map_err(io("writing the dump"))?;
            let mut cmd = tc.command(program, job);
            cmd.args(["-d", "-f"]).arg(&packed);
            tc.run(cmd, program).await?;
        }
    }
    source(server, &server.client_cnf(), &plain).await
}

/// Every key under `prefix`.
pub async fn list_all(s3: &S3Client, prefix: &str) -> Result<Vec<String>, String> {
    let mut keys = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = s3
            .list_page(prefix, token.as_deref())
            .await
            .map_err(|e| e.to_string())?;
        keys.extend(page.objects.into_iter().map(|o| o.key));
        match page.next {
            Some(t) => token = Some(t),
            None => return Ok(keys),
        }
    }
}

/// Deletes the dumps under `prefix` older than `max_retention` before `now` (never `keep`);
/// returns the keys deleted.
pub async fn prune(
    s3: &S3Client,
    prefix: &str,
    max_retention: Duration,
    now: DateTime<Utc>,
    keep: &str,
) -> Result<Vec<String>, String> {
    let cutoff = now - chrono::Duration::from_std(max_retention).map_err(|e| e.to_string())?;
    let mut deleted = Vec::new();
    for key in list_all(s3, prefix).await? {
        // Only the dumps directly under the prefix, as the operator lists them.
        if key == keep || key[prefix.len()..].contains('/') {
            continue;
        }
        if let Some((at, _)) = parse_artifact(&key)
            && at < cutoff
        {
            s3.delete(&key).await.map_err(|e| e.to_string())?;
            deleted.push(key);
        }
    }
    Ok(deleted)
}

/// The newest dump under `prefix` taken at or before `target`, and its bytes.
pub async fn fetch_latest(
    s3: &S3Client,
    prefix: &str,
    target: DateTime<Utc>,
) -> Result<(String, Vec<u8>), String> {
    let key = list_all(s3, prefix)
        .await?
        .into_iter()
        .filter(|k| !k[prefix.len()..].contains('/'))
        .filter_map(|k| parse_artifact(&k).map(|(at, _)| (at, k)))
        .filter(|(at, _)| *at <= target)
        .max()
        .map(|(_, k)| k)
        .ok_or_else(|| {
            format!(
                "no valid backup files were found under {:?} before {}",
                prefix,
                target.format("%Y-%m-%dT%H:%M:%SZ")
            )
        })?;
    match s3
        .get_capped(&key, MAX_DUMP_BYTES)
        .await
        .map_err(|e| e.to_string())?
    {
        Got::Bytes(b) => Ok((key, b)),
        Got::TooLarge => Err(format!("{key} is larger than {MAX_DUMP_BYTES} bytes")),
        Got::Missing => Err(format!("{key} disappeared")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_names_round_trip() {
        let at = DateTime::parse_from_rfc3339("2026-12-06T23:55:01Z")
            .unwrap()
            .to_utc();
        assert_eq!(
            artifact_name(at, Compression::None),
            "backup.2026-12-06T23:55:01Z.sql"
        );
        assert_eq!(
            artifact_name(at, Compression::Gzip),
            "backup.2026-12-06T23:55:01Z.gzip.sql"
        );
        for c in [Compression::None, Compression::Gzip, Compression::Bzip2] {
            assert_eq!(
                parse_artifact(&format!("ns/app/{}", artifact_name(at, c))),
                Some((at, c))
            );
        }
        assert_eq!(parse_artifact("ns/app/notes.txt"), None);
        assert_eq!(parse_artifact("backup.yesterday.sql"), None);
        assert_eq!(Compression::parse("gzip"), Ok(Compression::Gzip));
        assert_eq!(Compression::parse(""), Ok(Compression::None));
        assert!(Compression::parse("zstd").is_err());
    }

    #[test]
    fn durations_and_prefixes() {
        assert_eq!(
            parse_go_duration("720h"),
            Some(Duration::from_secs(720 * 3600))
        );
        assert_eq!(
            parse_go_duration("1h30m5s"),
            Some(Duration::from_secs(5405))
        );
        assert_eq!(parse_go_duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_go_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_go_duration("5 days"), None);
        assert_eq!(parse_go_duration(""), None);
        assert_eq!(normalized_prefix("tenant-acme/shop"), "tenant-acme/shop/");
        assert_eq!(normalized_prefix("tenant-acme/shop/"), "tenant-acme/shop/");
        assert_eq!(normalized_prefix(""), "");
    }

    #[test]
    fn quoting() {
        assert_eq!(sql_string(r"it's \"), r"'it\'s \\'");
        assert_eq!(option_value(r#"a"b\"#), r#""a\"b\\""#);
    }
}
