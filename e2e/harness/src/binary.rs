//! Finding a workspace binary for a test to spawn, and never spawning an out-of-date one.
//!
//! Cargo builds the binaries of the package under test before its integration tests run (and
//! points `CARGO_BIN_EXE_<name>` at them), but not the binaries of *other* packages a test
//! starts: the lease server in a daemon's failover test, every daemon in deploy-checks. Those are
//! looked up in the target directory, where an earlier build may have left a copy that predates
//! the sources — a daemon without the TLS client then speaks plaintext HTTP/2 to a TLS lease
//! server, and the test fails with a protocol error far from the cause.
//!
//! ```text
//!  CARGO_BIN_EXE_<name> set ──────────────────────────────► that file (cargo built it)
//!  else <target>/<profile>/<name>
//!        │ cargo's dep-info <name>.d: every source file the binary was built from
//!        ├─ present and no source newer ───────────────────► that file
//!        └─ missing, or a source newer than it
//!             ├─ run by cargo (CARGO set: test, nextest, run) ─► `cargo build --bin <name>` into the
//!             │                                                  same target dir and profile, once
//!             │                                                  per process ─► that file
//!             └─ otherwise ────────────────────────────────────► Error::StaleBinary / BinaryNotFound
//! ```
//! The dep-info lists source files only: a change of a dependency's version or of features
//! alone is not seen (`cargo build --bins` after such a change).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::Error;

/// Binaries already checked (or built) by this process.
static CHECKED: Mutex<Option<HashMap<String, PathBuf>>> = Mutex::new(None);

/// The profile directories a test binary may sit in: the one above `deps/` (or `examples/`) of
/// the running executable first, then `<target>/debug` and `<target>/release`.
fn profile_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Ok(exe) = std::env::current_exe()
        && let Some(dir) = exe.parent()
    {
        // A test binary sits in `<profile>/deps`, an example (the benchmarks) in
        // `<profile>/examples`: the binaries of its own profile come first.
        if dir
            .file_name()
            .is_some_and(|n| n == "deps" || n == "examples")
            && let Some(profile) = dir.parent()
        {
            dirs.push(profile.to_path_buf());
        }
        // A binary run from the profile directory itself (devcluster).
        dirs.push(dir.to_path_buf());
    }
    dirs.push(crate::target_dir().join("debug"));
    dirs.push(crate::target_dir().join("release"));
    dirs.dedup();
    dirs
}

/// The source files cargo recorded for `bin` in its dep-info `<bin>.d` (next to the binary).
/// `None` when there is no dep-info (a binary not built by cargo here).
fn sources_of(bin: &Path) -> Option<Vec<PathBuf>> {
    let info = std::fs::read_to_string(bin.with_extension("d")).ok()?;
    // `<target>: <dep> <dep> …`, spaces inside a path escaped as `\ `.
    let (_, deps) = info.split_once(": ")?;
    let mut out = Vec::new();
    let mut current = String::new();
    let mut chars = deps.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&' ') => {
                current.push(' ');
                chars.next();
            }
            ' ' | '\n' => {
                if !current.is_empty() {
                    out.push(PathBuf::from(std::mem::take(&mut current)));
                }
            }
            c => current.push(c),
        }
    }
    if !current.is_empty() {
        out.push(PathBuf::from(current));
    }
    Some(out)
}

/// Why `bin` is out of date: the first source newer than it (or gone), if any.
pub(crate) fn stale_because(bin: &Path) -> Option<String> {
    let built = std::fs::metadata(bin).and_then(|m| m.modified()).ok()?;
    for source in sources_of(bin)? {
        match std::fs::metadata(&source).and_then(|m| m.modified()) {
            Ok(changed) if changed > built => {
                return Some(format!("{} changed after it was built", source.display()));
            }
            Ok(_) => {}
            Err(_) => return Some(format!("{} is gone", source.display())),
        }
    }
    None
}

/// `cargo build --bin <name>` for the profile whose directory is `profile_dir`.
fn cargo_build(name: &str, profile_dir: &Path) -> Result<(), String> {
    let cargo = std::env::var_os("CARGO").ok_or("not run by cargo (CARGO unset)")?;
    let target = profile_dir
        .parent()
        .ok_or("the profile directory has no parent")?;
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or("the profile directory has no UTF-8 name")?;
    let mut cmd = std::process::Command::new(cargo);
    cmd.current_dir(crate::workspace_root())
        .args(["build", "--quiet", "--bin", name, "--target-dir"])
        .arg(target);
    match profile {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    let out = cmd.output().map_err(|e| format!("running cargo: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "cargo build --bin {name} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// See the module documentation.
pub(crate) fn locate(name: &str) -> Result<PathBuf, Error> {
    if let Some(p) = std::env::var_os(format!("CARGO_BIN_EXE_{name}")) {
        return Ok(PathBuf::from(p));
    }
    let mut checked = CHECKED.lock().unwrap_or_else(|e| e.into_inner());
    let checked = checked.get_or_insert_with(HashMap::new);
    if let Some(p) = checked.get(name) {
        return Ok(p.clone());
    }
    let dirs = profile_dirs();
    let found = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file());
    let (path, why) = match &found {
        Some(p) => match stale_because(p) {
            None => {
                checked.insert(name.to_owned(), p.clone());
                return Ok(p.clone());
            }
            Some(why) => (p.clone(), why),
        },
        None => (dirs[0].join(name), "it was never built".to_owned()),
    };
    let started = std::time::Instant::now();
    if let Err(e) = cargo_build(name, path.parent().unwrap_or(Path::new("."))) {
        return Err(match found {
            Some(_) => Error::StaleBinary {
                path,
                why: format!("{why}; {e}"),
            },
            None => Error::BinaryNotFound(name.to_owned()),
        });
    }
    match stale_because(&path) {
        Some(still) if path.is_file() => {
            return Err(Error::StaleBinary {
                path,
                why: format!("still after `cargo build --bin {name}`: {still}"),
            });
        }
        _ if !path.is_file() => return Err(Error::BinaryNotFound(name.to_owned())),
        _ => {}
    }
    tracing::info!(
        binary = name,
        why,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "built an out-of-date binary before spawning it"
    );
    checked.insert(name.to_owned(), path.clone());
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn touch(path: &Path, at: SystemTime) {
        std::fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(at)
            .unwrap();
    }

    #[test]
    fn a_binary_older_than_a_source_in_its_dep_info_is_stale() {
        let dir = std::env::temp_dir().join(format!("harness-binary-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("with space")).unwrap();
        let bin = dir.join("daemon");
        let a = dir.join("a.rs");
        let b = dir.join("with space/b.rs");
        for f in [&bin, &a, &b] {
            std::fs::write(f, "x").unwrap();
        }
        std::fs::write(
            dir.join("daemon.d"),
            format!(
                "{}: {} {}\n",
                bin.display(),
                a.display(),
                b.display().to_string().replace(' ', "\\ ")
            ),
        )
        .unwrap();
        assert_eq!(sources_of(&bin).unwrap(), vec![a.clone(), b.clone()]);
        let now = SystemTime::now();
        touch(&a, now - Duration::from_secs(60));
        touch(&b, now - Duration::from_secs(60));
        touch(&bin, now - Duration::from_secs(30));
        assert_eq!(stale_because(&bin), None);

        touch(&b, now);
        let why = stale_because(&bin).unwrap();
        assert!(why.contains("with space/b.rs changed"), "{why}");

        touch(&b, now - Duration::from_secs(60));
        std::fs::remove_file(&a).unwrap();
        assert!(stale_because(&bin).unwrap().ends_with("a.rs is gone"));

        // No dep-info: nothing to compare with, taken as it is.
        std::fs::remove_file(dir.join("daemon.d")).unwrap();
        assert_eq!(stale_because(&bin), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
