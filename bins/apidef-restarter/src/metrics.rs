//! The daemon's metrics (`cozy_backups_apidef_restarter_*`), registered at zero on start so they
//! are visible before the first event.

/// Hash computations of the definition set.
pub const HASH_COMPUTATIONS: &str = "cozy_backups_apidef_restarter_hash_computations_total";
/// Merge patches of the Deployment's pod-template annotation.
pub const PATCHES: &str = "cozy_backups_apidef_restarter_patches_total";
/// Evaluations that found the annotation already equal to the hash (no write).
pub const SKIPS: &str = "cozy_backups_apidef_restarter_skips_total";
/// Definition events that arrived while a debounce window was already pending.
pub const COALESCED: &str = "cozy_backups_apidef_restarter_debounce_coalesced_events_total";
/// Definition events (create/update/delete, and the end of each full list).
pub const DEFINITION_EVENTS: &str = "cozy_backups_apidef_restarter_definition_events_total";
/// `{hash="…"} 1` for the current hash of the set (earlier hashes drop to 0).
pub const CONFIG_HASH_INFO: &str = "cozy_backups_apidef_restarter_config_hash_info";
/// 1 while the last evaluation found no Deployment to patch.
pub const DEPLOYMENT_MISSING: &str = "cozy_backups_apidef_restarter_deployment_missing";
/// Failed evaluations, by static error kind.
pub const ERRORS: &str = "cozy_backups_apidef_restarter_errors_total";

/// Describes every metric and registers the counters at zero.
pub fn register() {
    for (name, help) in [
        (
            HASH_COMPUTATIONS,
            "Hash computations of the ApplicationDefinition set.",
        ),
        (
            PATCHES,
            "Merge patches of the config-hash annotation (each rolls the Deployment).",
        ),
        (
            SKIPS,
            "Evaluations that found the annotation equal to the hash; nothing written.",
        ),
        (
            COALESCED,
            "Definition events coalesced into an already pending debounce window.",
        ),
        (
            DEFINITION_EVENTS,
            "ApplicationDefinition watch events (changes and completed lists).",
        ),
    ] {
        metrics::describe_counter!(name, help);
        metrics::counter!(name).absolute(0);
    }
    metrics::describe_counter!(ERRORS, "Failed evaluations, by error kind.");
    metrics::describe_gauge!(
        CONFIG_HASH_INFO,
        "The current config hash of the ApplicationDefinition set (value 1; earlier hashes 0)."
    );
    metrics::describe_gauge!(
        DEPLOYMENT_MISSING,
        "1 while the target Deployment does not exist (the daemon waits for it)."
    );
    metrics::gauge!(DEPLOYMENT_MISSING).set(0.0);
}

/// Counts definition changes seen by the debounced trigger: `fires` events, of which `coalesced`
/// joined an already pending window.
pub fn record_definition_events(fires: u64, coalesced: u64) {
    metrics::counter!(DEFINITION_EVENTS).increment(fires);
    metrics::counter!(COALESCED).increment(coalesced);
}
