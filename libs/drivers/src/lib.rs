//! The strategy drivers' pure logic, shared by the `backup-runner` (backup paths) and the
//! `restore-orchestrator` (restore paths): no Kubernetes client, no clock.
//!
//! ```text
//!  template   Go text/template rendering of strategy templates (gtmpl + the Sprig helpers in use)
//! ```

pub mod template;
