//! Lease-server benchmark (not a test; `hack/bench/lease/run.sh`): the real `lease-server` binary
//! against the in-process kube emulator, 1,000 leases spread over 50 clients (one gRPC connection
//! each), measuring
//!
//! 1. grants: every client loops Acquire + Release over its own 20 names for `--seconds`;
//! 2. renewals: every client holds its 20 leases and loops Renew over them for `--seconds`;
//!
//! and printing throughput, p50/p99 latency of each call kind, and the server's RSS (current with
//! 1,000 leases held, and peak).

use std::time::{Duration, Instant};

use clap::Parser;
use harness::{DaemonSpec, Harness};
use lease::pb;
use lease::pb::lease_service_client::LeaseServiceClient;
use tonic::transport::Channel;

/// Lease-server benchmark.
#[derive(Parser, Debug)]
struct Args {
    /// Concurrent clients (one connection each).
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Leases in total, split evenly over the clients.
    #[arg(long, default_value_t = 1000)]
    leases: usize,
    /// Seconds per phase.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
}

const TTL_MS: u64 = 3000;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn report(what: &str, mut latencies: Vec<Duration>, elapsed: Duration) {
    latencies.sort();
    println!(
        "{what:<9} {:>9.0}/s  ({} calls in {:.1} s)  p50 {:>7.3} ms  p99 {:>7.3} ms  max {:>7.3} ms",
        latencies.len() as f64 / elapsed.as_secs_f64(),
        latencies.len(),
        elapsed.as_secs_f64(),
        percentile(&latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&latencies, 0.99).as_secs_f64() * 1e3,
        latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn names(client: usize, per_client: usize) -> Vec<String> {
    (0..per_client)
        .map(|i| format!("bench/Lease/ns-{client}/lease-{i}"))
        .collect()
}

async fn acquire(
    rpc: &mut LeaseServiceClient<Channel>,
    name: &str,
    holder: &str,
) -> pb::AcquireResponse {
    rpc.acquire(pb::AcquireRequest {
        name: name.into(),
        holder: holder.into(),
        ttl_ms: TTL_MS,
    })
    .await
    .expect("acquire")
    .into_inner()
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let per_client = args.leases / args.clients;
    let phase = Duration::from_secs(args.seconds);
    let mut h = Harness::start_with(harness::EmulatorMode::InProcess, None).await?;
    let bin = harness::locate_binary("lease-server")?;
    println!("lease-server: {}", bin.display());
    let spec = DaemonSpec::new("lease-server", bin)
        .args(["--namespace", "default"])
        .args(["--max-ttl", &format!("{TTL_MS}ms"), "--log-level", "warn"]);
    let grpc = h.spawn_lease_server(spec, Duration::from_secs(60)).await?;
    let pid = h.daemon("lease-server")?.pid().expect("running");
    let (rss_idle, _) = rss_kib(pid);

    let mut clients = Vec::new();
    for _ in 0..args.clients {
        clients.push(LeaseServiceClient::connect(format!("http://{grpc}")).await?);
    }
    // Wait out the quiet period of the fresh server.
    let mut probe = clients[0].clone();
    while !acquire(&mut probe, "bench/probe", "probe").await.acquired {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Phase 1: grants (Acquire + Release loops).
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, rpc) in clients.iter().enumerate() {
        let mut rpc = rpc.clone();
        let names = names(c, per_client);
        tasks.push(tokio::spawn(async move {
            let holder = format!("client-{c}");
            let mut lat = Vec::new();
            'run: loop {
                for name in &names {
                    if started.elapsed() >= phase {
                        break 'run;
                    }
                    let t = Instant::now();
                    let a = acquire(&mut rpc, name, &holder).await;
                    lat.push(t.elapsed());
                    let token = a.lease.expect("granted").token;
                    rpc.release(pb::ReleaseRequest {
                        name: name.clone(),
                        holder: holder.clone(),
                        token,
                    })
                    .await
                    .expect("release");
                }
            }
            lat
        }));
    }
    let mut grants = Vec::new();
    for t in tasks {
        grants.extend(t.await?);
    }
    let grant_elapsed = started.elapsed();

    // Phase 2: renewals of 1,000 held leases.
    let mut held = Vec::new();
    for (c, rpc) in clients.iter_mut().enumerate() {
        let holder = format!("client-{c}");
        let mut mine = Vec::new();
        for name in names(c, per_client) {
            let a = acquire(rpc, &name, &holder).await;
            assert!(a.acquired, "{name} is free");
            mine.push((name, a.lease.expect("granted").token));
        }
        held.push(mine);
    }
    let (rss_held, _) = rss_kib(pid);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for (c, (rpc, mine)) in clients.iter().zip(held).enumerate() {
        let mut rpc = rpc.clone();
        tasks.push(tokio::spawn(async move {
            let holder = format!("client-{c}");
            let mut lat = Vec::new();
            'run: loop {
                for (name, token) in &mine {
                    if started.elapsed() >= phase {
                        break 'run;
                    }
                    let t = Instant::now();
                    rpc.renew(pb::RenewRequest {
                        name: name.clone(),
                        holder: holder.clone(),
                        token: *token,
                        ttl_ms: TTL_MS,
                        proof: Vec::new(),
                    })
                    .await
                    .expect("renew");
                    lat.push(t.elapsed());
                }
            }
            lat
        }));
    }
    let mut renewals = Vec::new();
    for t in tasks {
        renewals.extend(t.await?);
    }
    let renew_elapsed = started.elapsed();
    let (rss_after, rss_peak) = rss_kib(pid);

    println!(
        "lease-server benchmark: {} leases, {} clients, {} s per phase",
        per_client * args.clients,
        args.clients,
        args.seconds
    );
    report("grants", grants, grant_elapsed);
    report("renewals", renewals, renew_elapsed);
    println!(
        "server RSS: {:.1} MiB idle, {:.1} MiB with {} leases held, {:.1} MiB after the renewal phase, {:.1} MiB peak",
        rss_idle as f64 / 1024.0,
        rss_held as f64 / 1024.0,
        per_client * args.clients,
        rss_after as f64 / 1024.0,
        rss_peak as f64 / 1024.0
    );
    h.cleanup().await?;
    Ok(())
}
