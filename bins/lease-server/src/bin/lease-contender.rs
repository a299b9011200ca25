//! `lease-contender`: a test client for the multi-process lease tests. It contends for one leader
//! lease through the real client ([`lease::LeaseClient::elector`]) and appends every transition it
//! observes to a log file, one line each:
//!
//! ```text
//! <CLOCK_MONOTONIC ns> <identity> LEADING <token>
//! <CLOCK_MONOTONIC ns> <identity> FOLLOWING
//! ```
//!
//! The timestamp is taken the moment the transition is observed, on the system-wide monotonic
//! clock, so logs of several processes can be merged to check that no two of them ever believed
//! they led at the same instant. It never exits by itself; tests kill it.

use std::io::Write as _;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use lease::{ClientOptions, Leadership, LeaseClient};

/// Contend for a leader lease and log every transition.
#[derive(Parser, Debug)]
#[command(name = "lease-contender", version, about)]
struct Args {
    /// Lease server endpoint (`host:port`, `http://host:port`, or `https://host:port` with
    /// `--ca-file` and `--token-file`).
    #[arg(long, env = "LEASE_ENDPOINT")]
    endpoint: String,
    /// CA that verifies the server (https endpoints).
    #[arg(long, env = "LEASE_CA_FILE")]
    ca_file: Option<std::path::PathBuf>,
    /// Name the server's certificate must carry (default: the endpoint's host).
    #[arg(long, env = "LEASE_SERVER_NAME")]
    server_name: Option<String>,
    /// Bearer token file (https endpoints).
    #[arg(long, env = "LEASE_TOKEN_FILE")]
    token_file: Option<std::path::PathBuf>,
    /// This contender's identity.
    #[arg(long, env = "POD_NAME")]
    identity: String,
    /// The lease to contend for.
    #[arg(long, env = "LEASE_NAME", default_value = "x/leader")]
    name: String,
    /// Lease TTL (e.g. `2s`; a bare number is milliseconds).
    #[arg(long, alias = "ttl-ms", env = "LEASE_TTL", default_value = "2000", value_parser = runtime::duration::millis)]
    ttl: Duration,
    /// File the transitions are appended to.
    #[arg(long, env = "TRANSITION_LOG")]
    log: std::path::PathBuf,
}

fn monotonic_ns() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&args.log)
        .with_context(|| format!("open {}", args.log.display()))?;
    let options = ClientOptions::with_ttl(args.ttl);
    let security = lease::Security {
        ca_file: args.ca_file.clone(),
        server_name: args.server_name.clone(),
        token_file: args.token_file.clone(),
    };
    let client =
        LeaseClient::connect_lazy_with(&args.endpoint, &args.identity, options, &security)?;
    let elector = client.elector(&args.name);
    let mut rx = elector.subscribe();
    let mut last = Leadership::Following;
    loop {
        let now = *rx.borrow_and_update();
        if now != last {
            let at = monotonic_ns();
            let line = match now {
                Leadership::Leading { token } => {
                    format!("{at} {} LEADING {token}\n", args.identity)
                }
                Leadership::Following => format!("{at} {} FOLLOWING\n", args.identity),
            };
            log.write_all(line.as_bytes())
                .context("append to the transition log")?;
            last = now;
        }
        rx.changed().await.context("the elector stopped")?;
    }
}
