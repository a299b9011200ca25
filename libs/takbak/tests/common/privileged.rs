//! Helpers for the tests that need root (tmpfs mounts, running a tool as "nobody", device nodes),
//! shared by the takbak tests and, through `#[path]`, by the two tools' binary tests.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The unprivileged user the permission tests run the tools as.
pub const NOBODY: u32 = 65534;

/// Whether a test that needs root can run here. Elsewhere it returns early, except when
/// `TAKBAK_PRIVILEGED_TESTS=required` (set by `.ci/run`, which runs as root), where missing
/// privilege fails the test instead of skipping it.
pub fn privileged(available: bool) -> bool {
    assert!(
        available || std::env::var("TAKBAK_PRIVILEGED_TESTS").as_deref() != Ok("required"),
        "TAKBAK_PRIVILEGED_TESTS=required but this process lacks the privilege"
    );
    available
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A small tmpfs mounted on a directory for one test and unmounted (lazily) when dropped.
pub struct SmallFs(PathBuf);

impl SmallFs {
    /// Mounts `size` (e.g. `"512k"`) of tmpfs on `dir`, creating it; `None` where this process
    /// may not mount.
    pub fn mount(dir: &Path, size: &str) -> Option<Self> {
        std::fs::create_dir_all(dir).ok()?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        ok.then(|| Self(dir.to_path_buf()))
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Lets [`NOBODY`] traverse `dir` (mode 0755) and gives them the named entries in it.
pub fn open_to_nobody(dir: &Path, give: &[&str]) {
    use std::os::unix::fs::{PermissionsExt, chown};
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for name in give {
        chown(dir.join(name), Some(NOBODY), Some(NOBODY)).unwrap();
    }
}

/// A command running a copy of `exe` (placed in `dir`: the build directory may not be reachable
/// for "nobody") as [`NOBODY`].
pub fn as_nobody(exe: &str, dir: &Path) -> Command {
    use std::os::unix::process::CommandExt;
    let copy = dir.join(Path::new(exe).file_name().unwrap_or_default());
    std::fs::copy(exe, &copy).unwrap();
    let mut c = Command::new(copy);
    c.uid(NOBODY).gid(NOBODY);
    c
}
