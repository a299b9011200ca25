//! Simulated third-party operators live here: small controllers that move foreign objects (CNPG clusters
//! and backups, Flux HelmReleases, COSI buckets, Velero backups/restores, MariaDB/etcd/FoundationDB/Percona
//! operator objects) through the same status transitions the real operators do, against the kube emulator.
//!
//! Data flow: each simulator watches its kinds through a `kube::Client` pointed at the emulator and
//! server-side-applies status under its own field manager, exactly as the real operator would.
//! Invariants: simulators never touch objects they do not own, and every transition they make is one a real
//! operator can make. Later issues add one module per operator as they need it; none exists yet.
