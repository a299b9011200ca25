//! The internal lease service (issue 4): replicas of a daemon agree on a leader, or split work by
//! per-object leases, through a small gRPC service that grants time-bound leases with fencing tokens.
//!
//! This crate currently holds the client-facing API every daemon codes against ([`client`]), with
//! the single-replica mode (`--lease-endpoint=none`: always leader, every work lease granted). The
//! gRPC protocol, the server state machine and the networked client come with the lease-server.

pub mod client;

pub use client::{LeaderElector, Leadership, LeaseError, WorkLease, WorkLeases};
