//! The binary as a kubectl plugin: the real `kubectl` finds `kubectl-cozy_backups` on PATH and
//! runs it for `kubectl cozy-backups …`, against the harness's API server (the emulator, or
//! kube-apiserver in the real-API suites), with kubectl 1.33 and 1.27.

use crate::common;

use common::{NOW, fixture, golden};
use harness::Harness;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The pinned kubectls from the Google Cloud SDK (`dpkg -L kubectl`).
const PINNED: &str = "/usr/lib/google-cloud-sdk/bin";

/// A pinned kubectl from the Google Cloud SDK when present, else the one on PATH.
fn kubectl() -> PathBuf {
    ["kubectl.1.33", "kubectl.1.31"]
        .iter()
        .map(|v| Path::new(PINNED).join(v))
        .find(|p| p.exists())
        .unwrap_or_else(|| PathBuf::from("kubectl"))
}

/// The oldest pinned kubectl (1.27), when this machine has it.
fn oldest_kubectl() -> Option<PathBuf> {
    Some(Path::new(PINNED).join("kubectl.1.27")).filter(|p| p.exists())
}

/// A directory holding only the symlink `kubectl-cozy_backups` → the built binary.
fn plugin_dir(h: &Harness) -> PathBuf {
    let dir = h.work_dir().join("plugins");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("kubectl-cozy_backups");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_cozy-backups-ctl"), &link).unwrap();
    dir
}

async fn run(h: &Harness, dir: &Path, kubeconfig: &Path, args: &[&str]) -> Output {
    run_with(&kubectl(), h, dir, kubeconfig, args).await
}

async fn run_with(
    kubectl: &Path,
    h: &Harness,
    dir: &Path,
    kubeconfig: &Path,
    args: &[&str],
) -> Output {
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    tokio::process::Command::new(kubectl)
        .args(args)
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .env("COZY_BACKUPS_CTL_NOW", NOW)
        .current_dir(h.work_dir())
        .output()
        .await
        .expect("run kubectl")
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[tokio::test]
async fn kubectl_runs_the_plugin() {
    let h = Harness::start().await.unwrap();
    fixture(&h, "tenant-acme").await;
    let dir = plugin_dir(&h);
    let kc = h.kubeconfig_path().to_path_buf();

    // kubectl finds it.
    let list = stdout(&run(&h, &dir, &kc, &["plugin", "list"]).await);
    assert!(
        list.contains(&dir.join("kubectl-cozy_backups").display().to_string()),
        "{list}"
    );

    // `kubectl cozy-backups window` prints what the binary prints, through the newest pinned
    // kubectl and the oldest (1.27; its plugin discovery is the same, which this shows).
    let newest = kubectl();
    for k in std::iter::once(newest).chain(oldest_kubectl()) {
        let list = stdout(&run_with(&k, &h, &dir, &kc, &["plugin", "list"]).await);
        assert!(
            list.contains("kubectl-cozy_backups"),
            "{}: {list}",
            k.display()
        );
        let text = stdout(
            &run_with(
                &k,
                &h,
                &dir,
                &kc,
                &["cozy-backups", "window", "-n", "tenant-acme", "orders-db"],
            )
            .await,
        );
        assert_eq!(
            text,
            "application  tenant-acme/orders-db (Postgres)\nserver       postgres-orders-db\n\
             recoverable  2026-12-01T02:00:00Z … 2026-12-02T02:00:00Z\nbase backups 2 in the catalog\n\
             \x20 orders-db-nightly-1  stopped 2026-12-01T02:00:00Z\n\
             \x20 orders-db-nightly-2  stopped 2026-12-02T02:00:00Z\n",
            "{}",
            k.display()
        );
    }
    let json = stdout(
        &run(
            &h,
            &dir,
            &kc,
            &[
                "cozy-backups",
                "window",
                "orders-db",
                "-n",
                "tenant-acme",
                "-o",
                "json",
            ],
        )
        .await,
    );
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["from"], "2026-12-01T02:00:00Z");

    // --context picks a context, and its namespace is the default for -n.
    let text = std::fs::read_to_string(&kc).unwrap();
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .unwrap_or_else(|| panic!("no {key} in the harness kubeconfig"))
            .to_owned()
    };
    // The emulator serves HTTPS with its own CA and wants a bearer token: carry both over.
    let (server, ca, token) = (
        field("server: "),
        field("certificate-authority-data: "),
        field("token: "),
    );
    let two = h.work_dir().join("two-contexts");
    std::fs::write(
        &two,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: emu\n  cluster:\n    server: {server}\n\
             \x20   certificate-authority-data: {ca}\n\
             contexts:\n- name: plain\n  context:\n    cluster: emu\n    user: emu\n\
             - name: acme\n  context:\n    cluster: emu\n    user: emu\n    namespace: tenant-acme\n\
             current-context: plain\nusers:\n- name: emu\n  user:\n    token: {token}\n"
        ),
    )
    .unwrap();
    let table = stdout(
        &run(
            &h,
            &dir,
            &two,
            &["cozy-backups", "--context", "acme", "status"],
        )
        .await,
    );
    golden("status.txt", &table);
    // The current context has no namespace: `default`, where there is nothing.
    let out = run(&h, &dir, &two, &["cozy-backups", "status"]).await;
    assert_eq!(stdout(&out), "");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("found in default namespace"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // --kubeconfig wins over $KUBECONFIG.
    let table = stdout(
        &run(
            &h,
            &dir,
            Path::new("/nonexistent"),
            &[
                "cozy-backups",
                "status",
                "-n",
                "tenant-acme",
                "--kubeconfig",
                two.to_str().unwrap(),
            ],
        )
        .await,
    );
    golden("status.txt", &table);

    // Errors keep their exit codes through kubectl.
    let out = run(
        &h,
        &dir,
        &kc,
        &[
            "cozy-backups",
            "restore",
            "-n",
            "tenant-acme",
            "--from",
            "gone",
        ],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Help and completion name the plugin as the user calls it.
    let help = stdout(&run(&h, &dir, &kc, &["cozy-backups", "--help"]).await);
    assert!(help.contains("Usage: kubectl cozy-backups"), "{help}");
    let bash = stdout(&run(&h, &dir, &kc, &["cozy-backups", "completion", "bash"]).await);
    assert!(
        bash.contains("kubectl-cozy_backups") && bash.contains("restore"),
        "{bash}"
    );
}

#[tokio::test]
async fn completion_scripts_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef cozy-backups-ctl"),
        ("fish", "complete -c cozy-backups-ctl"),
    ] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_cozy-backups-ctl"))
            .args(["completion", shell])
            .output()
            .unwrap();
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(
            out.status.success() && script.contains(marker),
            "{shell}: {script}"
        );
        for sub in ["status", "window", "backup", "restore", "find-kind"] {
            assert!(script.contains(sub), "{shell} lacks {sub}");
        }
    }
}
