//! The internal lease service (docs/lease.md): replicas of a daemon agree on a leader, or
//! split work by per-object leases, through a small gRPC service that grants time-bound leases with
//! fencing tokens.
//!
//! ```text
//!   daemon replica                                  lease-server process
//!  ┌───────────────────────────────┐  gRPC         ┌──────────────────────────────────────┐
//!  │ LeaderElector ─┐              │ cozy.lease.v1 │ service::LeaseService (tonic glue,   │
//!  │ WorkLeases ────┼─ LeaseClient ├──────────────►│   metrics, Watch fan-out)            │
//!  │ Reachability ──┘  (net)       │               │   └─ state::LeaseTable (pure, clock  │
//!  └───────────────────────────────┘               │      injected; epoch + proof key     │
//!                                                  │      loaded by the binary at start)  │
//!                                                  └──────────────────────────────────────┘
//! ```
//!
//! Layers, bottom up: [`state`] (pure: no tonic, no I/O), [`pb`] (generated from
//! `proto/lease/v1/lease.proto`, checked in, guarded by `tests/protogen.rs`), [`service`] (server
//! glue), [`net`] and [`client`] (what daemons use). Invariants: fencing tokens strictly increase
//! per lease name, also across server restarts; a client stops acting on a lease at
//! `sent + ttl - margin` on its own monotonic clock, before the server can grant it to anyone else.

pub mod auth;
pub mod client;
pub mod net;
pub mod service;
pub mod state;

/// The generated protobuf messages and gRPC client/server of `cozy.lease.v1`
/// (regenerate with `hack/protogen.sh`).
#[allow(
    missing_docs,
    unreachable_pub,
    rust_2018_idioms,
    clippy::all,
    clippy::pedantic
)]
pub mod pb {
    include!("gen/cozy.lease.v1.rs");
}

pub use auth::{
    Authenticator, Authorization, CacheSettings, Guard, Review, ReviewError, TokenReviewer,
};
pub use client::{Attempt, LeaderElector, Leadership, LeaseError, WorkLease, WorkLeases};
pub use net::{ClientOptions, Freed, LeaseClient, Reachability, Security, TokenSource};
pub use service::LeaseService;
pub use state::{Epoch, LeaseTable, Limits, Now};
