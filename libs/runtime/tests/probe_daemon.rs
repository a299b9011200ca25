//! Proves the shared runtime end to end with the `runtime-probe` binary against a stub API server
//! whose initial list the test releases on demand:
//! `/ready` is 503 until the watch delivered its initial list, `/metrics` shows the reconcile
//! metrics, and SIGTERM makes the process exit cleanly.

use axum::{Router, extract::Query, response::IntoResponse, routing::get};
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, watch};

struct Stub {
    list_requested: watch::Sender<bool>,
    release_list: Notify,
}

async fn configmaps(
    Query(q): Query<HashMap<String, String>>,
    axum::extract::State(stub): axum::extract::State<Arc<Stub>>,
) -> axum::response::Response {
    if q.get("watch").map(String::as_str) == Some("true") {
        // A watch that stays open and silent, as an idle real watch does.
        let body = axum::body::Body::from_stream(futures::stream::pending::<
            Result<Vec<u8>, std::io::Error>,
        >());
        return ([("content-type", "application/json")], body).into_response();
    }
    stub.list_requested.send_replace(true);
    stub.release_list.notified().await;
    let list = serde_json::json!({
        "kind": "ConfigMapList", "apiVersion": "v1",
        "metadata": {"resourceVersion": "10"},
        "items": [{"metadata": {"name": "a", "namespace": "default", "resourceVersion": "9", "uid": "u1"}}],
    });
    axum::Json(list).into_response()
}

async fn get_text(url: &str) -> (u16, String) {
    match reqwest::get(url).await {
        Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
        Err(_) => (0, String::new()),
    }
}

use harness::eventually_within as eventually;

/// Kills the daemon if the test fails before it exited, so no orphan outlives the test.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running `runtime-probe` whose kubeconfig points at `api_addr`.
struct Probe {
    child: KillOnDrop,
    admin: String,
    dir: std::path::PathBuf,
}

impl Probe {
    /// Writes a kubeconfig for `api_addr` into a private directory and starts the probe with it.
    fn start(name: &str, api_addr: std::net::SocketAddr) -> Self {
        Self::start_with(name, api_addr, &[])
    }

    /// [`Probe::start`] with extra arguments.
    fn start_with(name: &str, api_addr: std::net::SocketAddr, extra: &[&str]) -> Self {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        let config = format!(
            "apiVersion: v1\nkind: Config\n\
             clusters:\n- name: c\n  cluster: {{server: 'http://{api_addr}'}}\n\
             users:\n- name: u\n  user: {{}}\n\
             contexts:\n- name: x\n  context: {{cluster: c, user: u}}\n\
             current-context: x\n"
        );
        std::fs::write(&kubeconfig, config).unwrap();
        let mut child = KillOnDrop(
            Command::new(env!("CARGO_BIN_EXE_runtime-probe"))
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(["--admin-addr", "127.0.0.1:0"])
                .args(extra)
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        let stdout = child.0.stdout.take().unwrap();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let admin = line
            .trim()
            .strip_prefix("listening ")
            .expect("probe prints its admin address");
        Self {
            admin: admin.to_owned(),
            child,
            dir,
        }
    }

    /// Sends SIGTERM and waits, bounded, for a successful exit.
    async fn terminate_cleanly(mut self) {
        let pid = self.child.0.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let child = &mut self.child.0;
        // Bounded by the runtime's shutdown grace period (10 s) plus start-up slack.
        let exit = eventually("exit after SIGTERM", Duration::from_secs(60), || {
            let status = child.try_wait().unwrap();
            async move { status }
        })
        .await;
        assert!(exit.success(), "probe exited with {exit}");
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

#[tokio::test]
async fn ready_after_initial_list_metrics_and_clean_sigterm() {
    let (tx, mut list_requested) = watch::channel(false);
    let stub = Arc::new(Stub {
        list_requested: tx,
        release_list: Notify::new(),
    });
    let app = Router::new()
        .route("/api/v1/configmaps", get(configmaps))
        .with_state(stub.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let api_addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let probe = Probe::start("runtime-probe", api_addr);
    let admin = probe.admin.clone();

    // The daemon is now blocked on its initial list: it must not claim readiness.
    tokio::time::timeout(Duration::from_secs(20), list_requested.wait_for(|r| *r))
        .await
        .expect("the probe lists ConfigMaps")
        .unwrap();
    let (code, body) = get_text(&format!("http://{admin}/ready")).await;
    assert_eq!(
        (code, body.as_str()),
        (503, "not ready watch ConfigMap: pending\n")
    );
    assert_eq!(
        get_text(&format!("http://{admin}/live")).await,
        (200, "ok\n".into())
    );

    stub.release_list.notify_one();
    let body = eventually("ready", Duration::from_secs(20), || async {
        let (code, body) = get_text(&format!("http://{admin}/ready")).await;
        (code == 200).then_some(body)
    })
    .await;
    assert_eq!(body, "ok watch ConfigMap\n");

    let metrics = eventually("reconcile metrics", Duration::from_secs(20), || async {
        let (_, body) = get_text(&format!("http://{admin}/metrics")).await;
        body.contains(
            r#"cozy_backups_runtime_probe_reconcile_runs_total{controller="configmaps"} 1"#,
        )
        .then_some(body)
    })
    .await;
    assert!(
        metrics.contains(r#"cozy_backups_runtime_probe_reconcile_duration_seconds_count{controller="configmaps"} 1"#),
        "{metrics}"
    );

    probe.terminate_cleanly().await;
}

/// A controller whose first list never succeeds (API unreachable) does not stop on its own; the
/// runtime's shutdown grace period still ends the process cleanly after SIGTERM.
#[tokio::test]
async fn sigterm_ends_a_daemon_whose_api_is_unreachable() {
    // A port nothing listens on: bind, note it, drop the listener.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let probe = Probe::start("runtime-probe-dead", dead);
    let (code, _) = get_text(&format!("http://{}/ready", probe.admin)).await;
    assert_eq!(code, 503, "never ready without an API server");
    probe.terminate_cleanly().await;
}

/// A daemon whose leader elector ends (its lease client's tasks are gone) cannot know whether it
/// leads any more: its singleton loop ends with an error and the process exits non-zero, so that
/// Kubernetes restarts it.
#[tokio::test]
async fn a_daemon_whose_elector_ends_exits_non_zero() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut probe = Probe::start_with(
        "runtime-probe-elector",
        dead,
        &["--elector-ends-after", "500ms"],
    );
    let child = &mut probe.child.0;
    let exit = eventually(
        "exit after the elector ended",
        Duration::from_secs(60),
        || {
            let status = child.try_wait().unwrap();
            async move { status }
        },
    )
    .await;
    assert!(!exit.success(), "probe exited with {exit}");
    std::fs::remove_dir_all(&probe.dir).ok();
}
