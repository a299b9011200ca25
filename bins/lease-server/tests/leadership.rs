//! Multi-process proof of the lease service: the real `lease-server` binary against the kube
//! emulator (its epoch ConfigMap), three `lease-contender` processes contending for `x/leader`.
//! Authentication is on as in production: the server serves TLS and reviews every caller's token
//! with the emulator's TokenReview; each contender (and the load client) runs as a ServiceAccount
//! of its own, with a token from TokenRequest, and `--authorize` gives those accounts `x/` (the
//! load `load/`).
//!
//! 1. kill -9 the holder → another contender leads within TTL + 1 s;
//! 2. kill -9 and restart the lease server while a load of work leases runs → afterwards someone
//!    leads again, the epoch advanced;
//! 3. over the whole run, read from the contenders' append-only transition logs (system-wide
//!    monotonic timestamps): no two contenders ever believed they led at the same instant, and
//!    leader tokens never went backwards.
//!
//! Every spawned process is killed when the harness is dropped (also on a failed assertion), and the
//! harness then dumps every process log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use harness::{DaemonSpec, Harness, LEASE_AUDIENCE, SecureLeaseServer};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use lease::pb::lease_service_client::LeaseServiceClient;

const TTL_MS: u64 = 3000;
const CONTENDERS: [&str; 3] = ["c1", "c2", "c3"];

fn monotonic_ns() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Transition {
    Leading(u64),
    Following,
}

#[derive(Debug, Clone)]
struct Line {
    at: u128,
    who: String,
    what: Transition,
}

fn read_log(path: &Path) -> Vec<Line> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            let what = match parts[2] {
                "LEADING" => Transition::Leading(parts[3].parse().unwrap()),
                "FOLLOWING" => Transition::Following,
                other => panic!("unexpected transition {other} in {l:?}"),
            };
            Line {
                at: parts[0].parse().unwrap(),
                who: parts[1].to_owned(),
                what,
            }
        })
        .collect()
}

fn log_path(dir: &Path, who: &str) -> PathBuf {
    dir.join(format!("{who}.transitions"))
}

/// The live contender (not in `dead`) that currently believes it leads, with its token, if any.
fn current_leader(dir: &Path, dead: &[&str]) -> Option<(String, u64)> {
    let live = CONTENDERS.iter().filter(|who| !dead.contains(who));
    live.into_iter()
        .find_map(|who| match read_log(&log_path(dir, who)).last() {
            Some(Line {
                what: Transition::Leading(token),
                ..
            }) => Some((who.to_string(), *token)),
            _ => None,
        })
}

async fn poll<T>(what: &str, timeout: Duration, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Leadership intervals `[start, end)` per contender; an interval still open ends at `ends[who]`
/// (the instant the contender was killed, or the end of the test).
fn intervals(lines: &[Line], end_of: impl Fn(&str) -> u128) -> Vec<(u128, u128, String, u64)> {
    let mut out = Vec::new();
    for who in CONTENDERS {
        let mut open: Option<(u128, u64)> = None;
        for l in lines.iter().filter(|l| l.who == who) {
            match (&l.what, open) {
                (Transition::Leading(token), None) => open = Some((l.at, *token)),
                (Transition::Leading(token), Some((start, old))) => {
                    // Leading with a new token without Following in between: one belief, two tokens.
                    out.push((start, l.at, who.to_string(), old));
                    open = Some((l.at, *token));
                }
                (Transition::Following, Some((start, token))) => {
                    out.push((start, l.at, who.to_string(), token));
                    open = None;
                }
                (Transition::Following, None) => {}
            }
        }
        if let Some((start, token)) = open {
            out.push((start, end_of(who), who.to_string(), token));
        }
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_survives_holder_and_server_kills_without_overlap() {
    let mut h = Harness::start_with(harness::EmulatorMode::InProcess, None)
        .await
        .unwrap();
    // The server's own namespace, where its Role lets it keep the epoch ConfigMap (created with
    // its ServiceAccount when it is spawned).
    let ns = "cozy-backup-controller".to_owned();
    let dir = h.work_dir().to_path_buf();
    let mut server = DaemonSpec::new(
        "lease-server",
        PathBuf::from(env!("CARGO_BIN_EXE_lease-server")),
    )
    .args(["--namespace", &ns])
    .args(["--max-ttl", &format!("{TTL_MS}ms")]);
    for (account, prefix) in CONTENDERS
        .iter()
        .map(|c| (*c, "x/"))
        .chain([("observer", "x/"), ("load", "load/")])
    {
        server = server.args([
            "--authorize".to_string(),
            format!("system:serviceaccount:{ns}:{account}={prefix}"),
        ]);
    }
    let server = h
        .spawn_secure_lease_server(server, Duration::from_secs(60))
        .await
        .unwrap();

    for who in CONTENDERS {
        let token = h
            .service_account_token(&ns, who, LEASE_AUDIENCE)
            .await
            .unwrap();
        let spec = DaemonSpec::new(who, PathBuf::from(env!("CARGO_BIN_EXE_lease-contender")))
            .args(["--identity", who, "--name", "x/leader"])
            .args(["--ttl-ms", &TTL_MS.to_string()])
            .args([
                "--log".to_string(),
                log_path(&dir, who).display().to_string(),
            ]);
        h.spawn(server.client(spec, &token)).unwrap();
    }
    let observer = h
        .service_account_token(&ns, "observer", LEASE_AUDIENCE)
        .await
        .unwrap();

    // The fresh server is in its quiet period for one max TTL, then exactly one contender leads.
    let (first, first_token) = poll("a first leader", Duration::from_secs(30), async || {
        current_leader(&dir, &[])
    })
    .await;

    // 1. kill -9 the holder: another contender takes over within TTL + 1 s.
    h.kill(&first).await.unwrap();
    let killed_at = monotonic_ns();
    let mut ends = std::collections::HashMap::new();
    ends.insert(first.clone(), killed_at);
    let (second, second_token) = poll("a takeover", Duration::from_secs(30), async || {
        current_leader(&dir, &[first.as_str()])
    })
    .await;
    let took_over_at = read_log(&log_path(&dir, &second))
        .iter()
        .find(|l| l.at > killed_at && l.what == Transition::Leading(second_token))
        .expect("the takeover is logged")
        .at;
    let takeover = Duration::from_nanos((took_over_at - killed_at) as u64);
    assert!(
        takeover <= Duration::from_millis(TTL_MS) + Duration::from_secs(1),
        "takeover took {takeover:?}, more than TTL + 1 s"
    );
    assert!(second_token > first_token);

    // The server's metrics tell the same story: two grants at least, the dead holder's expiry, one
    // lease held.
    let admin = h.daemon("lease-server").unwrap().admin().await.unwrap();
    let metrics = admin.metrics();
    for (metric, at_least) in [
        ("cozy_backups_lease_server_grants_total", 2.0),
        ("cozy_backups_lease_server_expirations_total", 1.0),
        ("cozy_backups_lease_server_leases_held", 1.0),
        ("cozy_backups_lease_server_epoch", 1.0),
    ] {
        let value = metrics.value(metric, &[]);
        assert!(
            value >= at_least,
            "{metric} = {value}, expected at least {at_least}:\n{}",
            metrics.text()
        );
    }
    assert!(admin.is_ready());
    // Every contender was authenticated (by a review, then from the cache) and nothing refused.
    assert!(
        metrics.value(
            "cozy_backups_lease_server_token_reviews_total",
            &[("result", "authenticated")]
        ) >= CONTENDERS.len() as f64,
        "{}",
        metrics.text()
    );
    assert_eq!(
        metrics.sum("cozy_backups_lease_server_auth_refusals_total", &[]),
        0.0,
        "{}",
        metrics.text()
    );
    assert!(
        metrics.value(
            "cozy_backups_lease_server_grpc_requests_total",
            &[("code", "OK"), ("method", "Acquire")]
        ) >= 2.0,
        "{}",
        metrics.text()
    );
    assert!(
        metrics.value(
            "cozy_backups_lease_server_grpc_request_duration_seconds_count",
            &[("method", "Acquire")]
        ) >= 1.0,
        "{}",
        metrics.text()
    );

    // 2. kill -9 and restart the lease server under a load of work-lease churn.
    let load_token = h
        .service_account_token(&ns, "load", LEASE_AUDIENCE)
        .await
        .unwrap();
    let load_client = lease::LeaseClient::connect_lazy_with(
        &server.endpoint,
        "load",
        lease::ClientOptions::with_ttl(Duration::from_millis(TTL_MS)),
        &lease::Security {
            ca_file: Some(server.tls.ca_file.clone()),
            server_name: None,
            token_file: Some(load_token),
        },
    )
    .unwrap();
    let stop_load = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let granted = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut load = Vec::new();
    for worker in 0..8 {
        let leases = load_client.work_leases();
        let (stop, granted) = (stop_load.clone(), granted.clone());
        load.push(tokio::spawn(async move {
            use std::sync::atomic::Ordering::Relaxed;
            // Bounded: the test stops it; each round is one Acquire and one Release.
            for i in 0..1_000_000u64 {
                if stop.load(Relaxed) {
                    break;
                }
                match leases
                    .try_acquire(&format!("load/{worker}/{}", i % 16))
                    .await
                {
                    Ok(Some(lease)) => {
                        granted.fetch_add(1, Relaxed);
                        drop(lease);
                    }
                    Ok(None) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        }));
    }
    let granted_now = || granted.load(std::sync::atomic::Ordering::Relaxed);
    poll("the load to run", Duration::from_secs(30), async || {
        (granted_now() >= 200).then_some(())
    })
    .await;

    // 2a. Restart at once: the holder is still within its deadline and may restore its lease with
    // its proof; nobody else can be granted it during the quiet period.
    let epoch_before = epoch(&h, &ns).await;
    h.kill("lease-server").await.unwrap();
    let server_killed_at = monotonic_ns();
    h.restart("lease-server", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        epoch(&h, &ns).await,
        epoch_before + 1,
        "the restart advanced the epoch"
    );
    let dead = [first.as_str()];
    let (_, third_token) = leader_agreed_by_server(&dir, &dead, &server, &observer).await;
    assert!(third_token >= second_token, "tokens never go backwards");

    // 2b. Kill it again and keep it down until every contender's deadline passed: all follow.
    h.kill("lease-server").await.unwrap();
    poll(
        "every contender to stop leading",
        Duration::from_secs(30),
        async || current_leader(&dir, &dead).is_none().then_some(()),
    )
    .await;
    let granted_while_down = granted_now();
    h.restart("lease-server", Duration::from_secs(60))
        .await
        .unwrap();
    let epoch_now = epoch(&h, &ns).await;
    assert_eq!(epoch_now, epoch_before + 2);
    let (leader, token) = leader_agreed_by_server(&dir, &dead, &server, &observer).await;
    assert!(token > third_token, "tokens never go backwards");
    assert_eq!(
        lease::state::token_epoch(token),
        epoch_now,
        "a fresh grant of the new epoch"
    );
    poll("the load to resume", Duration::from_secs(30), async || {
        (granted_now() > granted_while_down).then_some(())
    })
    .await;

    stop_load.store(true, std::sync::atomic::Ordering::Relaxed);
    for task in load {
        task.await.unwrap();
    }
    let granted = granted_now();

    // 3. The logs: no overlap at any instant, tokens never backwards.
    for who in CONTENDERS {
        if who != first {
            h.kill(who).await.unwrap();
        }
    }
    let end = monotonic_ns();
    let mut lines: Vec<Line> = CONTENDERS
        .iter()
        .flat_map(|who| read_log(&log_path(&dir, who)))
        .collect();
    lines.sort_by_key(|l| l.at);
    let spans = intervals(&lines, |who| ends.get(who).copied().unwrap_or(end));
    println!(
        "takeover after kill -9 of {first}: {takeover:?}; server killed at {server_killed_at}; \
         {granted} work leases granted under load; leadership spans (start, end, who, token): {spans:#?}"
    );
    for pair in spans.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert!(
            a.1 <= b.0,
            "{} (token {}) and {} (token {}) both believed they led between {} and {}; all spans: {spans:#?}",
            a.2,
            a.3,
            b.2,
            b.3,
            b.0,
            a.1
        );
        assert!(
            a.3 < b.3 || (a.3 == b.3 && a.2 == b.2),
            "token went backwards or was shared: {spans:#?}"
        );
    }
    assert!(
        spans.iter().any(|s| s.0 < server_killed_at)
            && spans.iter().any(|s| s.1 > server_killed_at),
        "leadership was observed before and after the server restart: {spans:#?}"
    );
    assert!(spans.iter().any(|s| s.2 == leader));
    h.cleanup().await.unwrap();
}

/// Waits until one live contender leads and the server's grant of `x/leader` names it with the
/// same token, the server's quiet period (one max TTL from now at the latest) being over. The
/// server is asked over TLS with the observer's token.
async fn leader_agreed_by_server(
    dir: &Path,
    dead: &[&str],
    server: &SecureLeaseServer,
    token_file: &Path,
) -> (String, u64) {
    let ca = std::fs::read(&server.tls.ca_file).unwrap();
    let channel = tonic::transport::Channel::from_shared(server.endpoint.clone())
        .unwrap()
        .tls_config(
            tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca)),
        )
        .unwrap()
        .connect_lazy();
    let mut rpc = LeaseServiceClient::new(channel);
    let bearer: tonic::metadata::MetadataValue<_> = format!(
        "Bearer {}",
        std::fs::read_to_string(token_file).unwrap().trim()
    )
    .parse()
    .unwrap();
    let quiet_over = monotonic_ns() + u128::from(TTL_MS) * 1_000_000;
    poll(
        "a leader the server agrees on",
        Duration::from_secs(30),
        async || {
            if monotonic_ns() < quiet_over {
                return None;
            }
            let (who, token) = current_leader(dir, dead)?;
            let mut request = tonic::Request::new(lease::pb::GetRequest {
                name: "x/leader".into(),
            });
            request
                .metadata_mut()
                .insert("authorization", bearer.clone());
            let lease = rpc.get(request).await.ok()?.into_inner().lease?;
            (lease.holder == who && lease.token == token).then_some((who, token))
        },
    )
    .await
}

async fn epoch(h: &Harness, ns: &str) -> u64 {
    let cms: Api<ConfigMap> = Api::namespaced(h.client(), ns);
    let cm = cms.get("lease-server-epoch").await.unwrap();
    cm.data.unwrap()["epoch"].parse().unwrap()
}
