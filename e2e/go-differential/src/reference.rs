//! The Go reference program (`e2e/go-reference`): built once per version of its sources into a
//! cache outside the work tree, then run once per subject with every case on its standard input.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

/// A built reference program.
#[derive(Clone, Debug)]
pub struct Reference {
    binary: PathBuf,
}

/// The directory of the Go sources.
pub fn source_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../go-reference")
}

impl Reference {
    /// The cached binary for the current sources, built with `go build` when missing. Fails with
    /// a message saying what to install when Go is not on `PATH`.
    pub fn build() -> Result<Self, String> {
        let src = source_dir();
        let mut digest = Sha256::new();
        for file in ["go.mod", "go.sum", "main.go"] {
            let bytes = std::fs::read(src.join(file))
                .map_err(|e| format!("reading {}: {e}", src.join(file).display()))?;
            digest.update(file.as_bytes());
            digest.update((bytes.len() as u64).to_le_bytes());
            digest.update(&bytes);
        }
        let version = hex::encode(digest.finalize());
        let dir = cache_root().join(&version[..16]);
        let binary = dir.join("go-reference");
        if binary.is_file() {
            return Ok(Self { binary });
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        // Several test processes may want it at once: one builds, the others wait for it.
        let lock = std::fs::File::create(dir.join(".lock"))
            .map_err(|e| format!("creating the build lock in {}: {e}", dir.display()))?;
        lock.lock()
            .map_err(|e| format!("locking {}: {e}", dir.display()))?;
        if binary.is_file() {
            return Ok(Self { binary });
        }
        let go = which_go().ok_or_else(|| {
            "the Go toolchain (`go`) is not on PATH: the differential tests compare this project \
             with Go's own libraries and need Go 1.26 or newer to build e2e/go-reference \
             (install it from https://go.dev/dl/ and put its bin directory on PATH)"
                .to_owned()
        })?;
        let partial = dir.join("go-reference.partial");
        // Only the committed go.sum is trusted (`-mod=readonly`: go.mod and go.sum are never
        // rewritten); modules come from the Go module proxy. With every module's checksum in
        // go.sum the checksum database is not needed, so a machine that cannot reach it builds
        // again without it.
        let build = |sumdb_off: bool| {
            let mut cmd = Command::new(&go);
            cmd.current_dir(&src)
                .env("GOFLAGS", "-mod=readonly -buildvcs=false")
                .args(["build", "-trimpath", "-o"])
                .arg(&partial)
                .arg(".");
            if sumdb_off {
                cmd.env("GOSUMDB", "off");
            }
            cmd.output().map_err(|e| format!("running go build: {e}"))
        };
        let mut out = build(false)?;
        if !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("sum.golang.org")
        {
            out = build(true)?;
        }
        if !out.status.success() {
            return Err(format!(
                "go build of {} failed:\n{}",
                src.display(),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        std::fs::rename(&partial, &binary).map_err(|e| format!("installing the binary: {e}"))?;
        Ok(Self { binary })
    }

    /// Go's answers, one JSON value per input line, in order.
    pub fn answer(&self, mode: &str, cases: &[String]) -> Result<Vec<serde_json::Value>, String> {
        // The local zone is UTC on both sides (the daemons run with TZ unset), whatever the
        // machine's zone.
        let mut child = Command::new(&self.binary)
            .env("TZ", "UTC")
            .arg(mode)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting {}: {e}", self.binary.display()))?;
        let mut stdin = child.stdin.take().expect("piped stdin");
        let input: String = cases.iter().map(|c| format!("{c}\n")).collect();
        let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
        let stdout = child.stdout.take().expect("piped stdout");
        let mut answers = Vec::with_capacity(cases.len());
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| format!("reading the reference's answers: {e}"))?;
            answers.push(
                serde_json::from_str(&line)
                    .map_err(|e| format!("the reference wrote {line:?}: {e}"))?,
            );
        }
        let status = child.wait().map_err(|e| e.to_string())?;
        let _ = writer.join();
        if !status.success() || answers.len() != cases.len() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut err);
            }
            return Err(format!(
                "the reference ({mode}) answered {} of {} cases ({status}): {err}",
                answers.len(),
                cases.len()
            ));
        }
        Ok(answers)
    }
}

fn cache_root() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("cozy-backups").join("go-reference")
}

fn which_go() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("go"))
        .find(|p| p.is_file())
}
