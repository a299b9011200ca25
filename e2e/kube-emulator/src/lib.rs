//! A Kubernetes API server emulator on loopback HTTP, faithful enough that kube-rs 5 clients,
//! kube-runtime watchers/controllers/finalizers and the installed `kubectl` work against it unmodified.
//! What it emulates and what it does not: `docs/kube-emulator.md`.
//!
//! ```text
//!  kube::Client / kubectl ──HTTP/1.1 or TLS──► server (authentication, RBAC, routing, negotiation,
//!                                                 audit, faults)
//!                                          │
//!                                          ▼
//!            store::State (one mutex): kinds table ◄─ CRDs, objects, rv counter, watch history
//!                │ write pipeline (patch engines, SSA, defaults, no-op detection)
//!                ├──► broadcast ──► watch streams (one JSON line per event, bookmarks, 410 in-stream)
//!                └──► controllers (GC, namespace termination, CRD cleanup), asynchronously
//! ```
//! Invariants: one global, strictly increasing resourceVersion; exactly one watch event per persisted
//! change and none for no-op writes; discovery and OpenAPI are derived from the current kinds table so they
//! never list a group-version that cannot be served.
//!
//! Module layers (each depends only on layers above it, so there are no module cycles):
//! `json`, `kinds` (leaves) → `selector`, `error`, `printers`, `openapi` → `schema`, `validation`,
//! `patch`, `ssa`, `table`, `discovery`, `protobuf`, `tls` → `store` → `auth` (tokens, RBAC, reviews),
//! `chaos`, `admin`, `shared` (the state behind the HTTP server and the controllers) →
//! `server`, `controllers` → `emulator` → `cli`.
//!
//! Use from tests: `let emu = Emulator::start(Config::default()).await?; let client = emu.client();`.

mod admin;
mod auth;
mod chaos;
pub mod cli;
mod controllers;
mod discovery;
mod emulator;
mod error;
mod json;
mod kinds;
mod openapi;
mod patch;
mod printers;
mod protobuf;
mod schema;
mod selector;
mod server;
mod shared;
mod ssa;
mod store;
mod table;
mod tls;
mod validation;

pub use admin::{Fault, Hold};
pub use auth::ADMIN_USER;
pub use chaos::{Chaos, ChaosCounts, Mix};
pub use emulator::{
    Auth, Config, Emulator, Error, Running, client_for, read_manifests, write_kubeconfig,
};
pub use error::ApiError;
