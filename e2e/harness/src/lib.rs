//! End-to-end test harness shared by every daemon's end-to-end tests (and the dev control plane).
//!
//! ```text
//! Harness::start()  ──► kube emulator (in-process or a `kube-emulator` process) with deploy/crds/ loaded,
//!      │                 or with COZY_E2E_API=real the process's shared kube-apiserver + etcd +
//!      │                 kube-controller-manager (real module, docs/real-api.md), reset to its
//!      │                 freshly started state between two harnesses (reset module)
//!      │                 └─ kubeconfig in a private work dir
//!      ├─ temp_namespace("backup")      generateName'd namespaces, deleted by cleanup()
//!      ├─ spawn(DaemonSpec)             daemon binary with KUBECONFIG, ADMIN_ADDR=127.0.0.1:0 and
//!      │    │                           ADMIN_ADDR_FILE; stdout/stderr → log file
//!      │    └─ wait_ready() / admin()   reads the reported address, polls GET {admin}/ready until 200
//!      ├─ kill(name) / restart(name)    SIGKILL and respawn on demand; terminate(name): SIGTERM and
//!      │                                wait for a graceful exit
//!      ├─ failover::Failover            N replicas of a daemon on a real lease-server: who leads,
//!      │                                how long a takeover took, were there ever two leaders
//!      ├─ kubectl(args) / apply_yaml()  the real kubectl against the emulator
//!      ├─ audit()                       the emulator's request log, parsed (write counting)
//!      ├─ set_chaos() / api_server_outage()  seeded API faults; API server down and up on the same port
//!      │                                (emulator only: Error::Unsupported on the real API server)
//!      └─ on panic (Drop)               prints objects in the test's namespaces, the audit log, daemon logs
//!
//!  faults: the fixed chaos schedule, request-rate bound, survival checks
//!  test kit: eventually()/until() (polling with a deadline), Admin + Metrics (/ready, /metrics),
//!            leak::assert_no_leaks (secret values in any form), fixtures (resource builders),
//!            bad_input (a table row's wait for its named end; the daemon-survived check)
//! ```
//! Invariants: every daemon binds a loopback port of its own choosing and reports it; each harness has
//! its own emulator (or, on the real backend, a server reset to its freshly started state) and work
//! directory, so tests never share state; daemons are killed when the harness is dropped.

mod admin;
pub mod audit;
pub mod bad_input;
mod binary;
pub mod crds;
mod daemon;
pub mod dataplane;
mod emulator;
pub mod failover;
pub mod faults;
pub mod fixtures;
mod http;
pub mod identity;
mod kubectl;
pub mod leak;
pub mod lease;
mod poll;
pub mod rbac;
pub mod real;
mod reset;
pub mod usage;

use std::path::{Path, PathBuf};

pub use admin::{Admin, Metrics, Sample};
pub use audit::{Audit, Request};
pub use daemon::{AddressReport, Daemon, DaemonSpec, Identity};
pub use dataplane::DataPlane;
pub use emulator::EmulatorMode;
pub use kube_emulator::{Chaos, ChaosCounts, Fault, Hold, Mix};
pub use lease::{ComponentLease, LEASE_AUDIENCE, LeaseTls, SecureLeaseServer};
pub use poll::{DEADLINE, eventually, eventually_within, until};
pub use real::{ApiBackend, ControlPlane};

/// Errors of the harness.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The emulator failed to start.
    #[error("starting the emulator: {0}")]
    Emulator(#[from] kube_emulator::Error),
    /// A process could not be spawned or signalled.
    #[error("{what}: {source}")]
    Process {
        /// What was attempted.
        what: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A binary could not be found.
    #[error(
        "binary {0} not found (set CARGO_BIN_EXE_{0} or build it with `cargo build --bin {0}`)"
    )]
    BinaryNotFound(String),
    /// A binary older than its sources that could not be rebuilt.
    #[error(
        "binary {} is out of date ({why}): rebuild it with `cargo build --bins`",
        path.display()
    )]
    StaleBinary {
        /// The binary.
        path: PathBuf,
        /// The newer source and why building failed.
        why: String,
    },
    /// Something did not happen in time.
    #[error("timed out waiting for {0}")]
    Timeout(String),
    /// A Kubernetes API call failed.
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// The operation needs another emulator mode.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The real control plane (COZY_E2E_API=real) could not be started or used.
    #[error("real API server: {0}")]
    ControlPlane(String),
    /// No daemon of that name.
    #[error("no daemon named {0}")]
    UnknownDaemon(String),
}

/// The workspace root (two levels above this crate).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// The project's CRD directory, `deploy/crds/`.
pub fn crd_dir() -> PathBuf {
    workspace_root().join("deploy/crds")
}

/// The cargo target directory in use (`CARGO_TARGET_DIR` or `<workspace>/target`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

/// Finds a binary built by cargo: `CARGO_BIN_EXE_<name>` first, then the target dir's profile
/// directories; a copy older than its sources is rebuilt first (`cargo build --bin <name>`) when
/// run by cargo, else refused with [`Error::StaleBinary`] — a test never runs outdated code.
pub fn locate_binary(name: &str) -> Result<PathBuf, Error> {
    binary::locate(name)
}

pub use emulator::Harness;

/// A process's resident memory as `/proc/<pid>/status` reports it, for benchmarks:
/// `VmRSS <now> (peak VmHWM <peak>)` ("?" for what cannot be read).
pub fn rss(pid: Option<u32>) -> String {
    let status = pid
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .map(|l| l[name.len()..].trim().to_owned())
            .unwrap_or_else(|| "?".into())
    };
    format!("VmRSS {} (peak VmHWM {})", field("VmRSS:"), field("VmHWM:"))
}
