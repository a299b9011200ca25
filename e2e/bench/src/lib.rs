//! The project's benchmark programs: one binary per daemon (`src/bin/<daemon>-bench.rs`), the scale
//! benchmark over every daemon (`src/bin/scale-bench.rs`, with its pure parts in [`scale`]) and the
//! TAKBAK1 benchmark's dataset generator (`src/bin/takbak-datasets.rs`). None of them is a test;
//! each is run through its `hack/bench/<component>/run.sh`, which builds what it needs and prints
//! figures with ratios against a baseline measured in the same invocation.
//!
//! ```text
//!  hack/bench/<component>/run.sh ──► cargo build the daemon(s) + this crate's binary
//!        └─► <component>-bench ──► harness (emulator, daemons as processes, simulated operators)
//!                                  └─► figures and ratios on stdout
//! ```
//!
//! They live here, beside the test harness, rather than in the daemons' crates: a daemon's own code
//! (library, binaries, examples) never depends on the test platform in `e2e/`; only its integration
//! tests do. Two benchmarks reuse a daemon's integration-test kit (the runner's operator platform,
//! the orchestrator's data plane) by including those modules by path.

#[cfg(feature = "daemons")]
pub mod scale;
