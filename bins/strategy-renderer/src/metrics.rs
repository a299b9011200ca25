//! The renderer's own metrics (`cozy_backups_strategy_renderer_*`); the upstream-compatible gauge
//! `cozystack_backup_default_objects_missing{backupclass}` is named in `api::contract::metrics`.

/// Counter: evaluations that completed (inputs read, objects compared and written as needed).
pub const RENDERS: &str = "cozy_backups_strategy_renderer_renders_total";
/// Counter `{kind}`: server-side applies issued.
pub const APPLIES: &str = "cozy_backups_strategy_renderer_applies_total";
/// Counter `{kind}`: applies that reverted a change made by someone else.
pub const DRIFT_REVERTS: &str = "cozy_backups_strategy_renderer_drift_reverts_total";
/// Counter `{kind}`: objects deleted because they are no longer desired.
pub const PRUNES: &str = "cozy_backups_strategy_renderer_prunes_total";
/// Gauge: 1 when the current ConfigMap parses and validates, else 0.
pub const CONFIG_VALID: &str = "cozy_backups_strategy_renderer_config_valid";
/// Counter: rejected configurations (counted once per distinct error).
pub const CONFIG_ERRORS: &str = "cozy_backups_strategy_renderer_config_errors_total";

/// Describes every metric and registers the evaluation counter at zero.
pub fn describe() {
    metrics::describe_counter!(RENDERS, "Completed evaluations of the default objects.");
    metrics::describe_counter!(APPLIES, "Server-side applies of default objects, by kind.");
    metrics::describe_counter!(
        DRIFT_REVERTS,
        "Applies that reverted an outside change of a default object, by kind."
    );
    metrics::describe_counter!(
        PRUNES,
        "Default objects deleted as no longer desired, by kind."
    );
    metrics::describe_gauge!(CONFIG_VALID, "1 when the configuration ConfigMap is valid.");
    metrics::describe_counter!(CONFIG_ERRORS, "Rejected configurations.");
    metrics::describe_gauge!(
        api::contract::metrics::DEFAULT_OBJECTS_MISSING,
        "Default objects cozy-default routes to that do not exist (upstream-compatible): while the \
         system credentials Secret is absent or the bucket name unknown, 1 (the Secret)."
    );
    metrics::counter!(RENDERS).absolute(0);
}
