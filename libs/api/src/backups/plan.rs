use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::meta::{Condition, TypedLocalObjectReference};

/// Plan creates BackupJobs for an application on a cron schedule.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "backups.cozystack.io",
    version = "v1alpha1",
    kind = "Plan",
    namespaced,
    status = "PlanStatus",
    shortname = "bplan",
    category = "cozy-backups",
    derive = "PartialEq",
    derive = "Default",
    doc = "Plan creates BackupJobs for an application on a cron schedule.",
    printcolumn(
        name = "Application",
        type_ = "string",
        json_path = ".spec.applicationRef.name"
    ),
    printcolumn(
        name = "Class",
        type_ = "string",
        json_path = ".spec.backupClassName",
        priority = 1
    ),
    printcolumn(name = "Schedule", type_ = "string", json_path = ".spec.schedule.cron"),
    printcolumn(name = "Last", type_ = "date", json_path = ".status.lastScheduleTime"),
    printcolumn(
        name = "Next",
        type_ = "string",
        json_path = ".status.nextScheduleTime"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    selectable = ".spec.applicationRef.apiGroup",
    selectable = ".spec.applicationRef.kind",
    selectable = ".spec.applicationRef.name",
    annotation("options.cozystack.io/source.applicationRef.kind", "appkind"),
    annotation("options.cozystack.io/source.backupClassName", "backupclass")
)]
#[serde(rename_all = "camelCase")]
pub struct PlanSpec {
    /// The application to back up.
    pub application_ref: TypedLocalObjectReference,
    /// The BackupClass used by the jobs this Plan creates.
    pub backup_class_name: String,
    /// When to create jobs.
    pub schedule: PlanSchedule,
    /// How many Backups of this Plan to keep (new; upstream Plans have no retention). Unset keeps
    /// everything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_policy: Option<RetentionPolicy>,
    /// What a due schedule slot does while an earlier job of this Plan still runs: `Allow`
    /// (upstream's behaviour, the default) starts another job, `Forbid` skips the slot with an Event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["Allow", "Forbid"]))]
    pub concurrency_policy: Option<String>,
    /// Restore drills (new; upstream has none): how often the restore-orchestrator restores one of
    /// this Plan's Backups into a scratch copy and checks the data (`docs/drills.md`). Unset runs
    /// no drill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<PlanVerification>,
}

/// A Plan's restore drills: exactly one of `every` and `schedule` says when one is due.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{"rule": "has(self.every) != has(self.schedule)", "message": "exactly one of verification.every and verification.schedule must be set"}]))]
pub struct PlanVerification {
    /// A drill is due once this many successful Backups of the Plan were taken since the last
    /// verified one (1: every Backup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub every: Option<i32>,
    /// A drill is due at each slot of this cron expression (the Plan's dialect: 5 fields or a
    /// descriptor, optionally `CRON_TZ=<zone> `); it verifies the newest successful Backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub schedule: Option<String>,
    /// PostgreSQL: a query that must return at least one row in the restored application
    /// database (e.g. `SELECT 1 FROM orders LIMIT 1`). Unset: the server accepts connections and
    /// `pg_database` lists the application's database.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub sql: Option<String>,
    /// The deadline of one drill (restore and check), in seconds; 3600 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub timeout_seconds: Option<i64>,
}

/// A Plan's schedule.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanSchedule {
    /// Schedule type; only `cron` exists (and is assumed when empty).
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// A standard 5-field cron expression, a descriptor such as `@daily`, optionally prefixed by
    /// `CRON_TZ=<zone> `.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
}

/// Retention of a Plan's Backups. A Backup is kept when any rule keeps it (restic/borg semantics);
/// `maxAge` then removes anything older regardless.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetentionPolicy {
    /// Keep the N most recent successful Backups.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_last: Option<i32>,
    /// Keep the newest Backup of each of the last N days that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_daily: Option<i32>,
    /// Keep the newest Backup of each of the last N ISO weeks that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_weekly: Option<i32>,
    /// Keep the newest Backup of each of the last N calendar months that have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_monthly: Option<i32>,
    /// Delete Backups older than this duration (Go duration syntax, e.g. `720h`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"))]
    pub max_age: Option<String>,
    /// Keep the N most recent failed BackupJobs of this Plan for diagnosis; older failed ones are
    /// deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub keep_failed: Option<i32>,
}

/// Observed state of a Plan.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlanStatus {
    /// The newest schedule slot the Plan has dealt with: a BackupJob was created for it, or it was
    /// skipped (missed beyond the starting deadline, or forbidden by `concurrencyPolicy`) and
    /// reported by an Event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// The next schedule slot (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_schedule_time: Option<Time>,
    /// Conditions, keyed by type (`Error` tells whether the cron spec parses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "crate::meta::conditions_schema")]
    pub conditions: Vec<Condition>,
}
