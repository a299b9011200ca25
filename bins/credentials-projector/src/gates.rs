//! The gates upstream applies before a tenant projection, as pure functions over values
//! (docs/credentials-projector.md, "Tenant path: gates and the condition"). Order matters and is upstream's: terminal
//! phase, then BackupClass resolution (Backup lookup for a RestoreJob), then the strategy apiGroup,
//! then the supported kind — and only then projection. Projecting earlier would leak the credentials
//! into namespaces whose jobs this platform does not run, and could trip the ownership guard on
//! third-party jobs.
//!
//! A gated job gets no Secret and no `CredentialsProjected` condition: the runner/orchestrator apply
//! the same gates and own the verdict (`Ready`, phase); a foreign-group job belongs to another
//! controller, which upstream deliberately leaves untouched.

use api::TypedLocalObjectReference;
use api::backups::{BackupClassSpec, BackupSpec};
use api::contract::{SUPPORTED_STRATEGY_KINDS, groups, phases};

/// What to do with a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every gate passed: project into the job's namespace.
    Project,
    /// A gate stopped the job: no Secret, no condition.
    Skip(Skip),
}

/// Which gate stopped a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Skip {
    /// `Succeeded` or `Failed`: nobody acts on the job any more.
    Terminal,
    /// The BackupClass does not exist (yet); re-evaluated when a BackupClass appears.
    BackupClassNotFound,
    /// The BackupClass has no route for the application's group and kind.
    NoMatchingStrategy,
    /// The resolved strategyRef has no apiGroup.
    NilStrategyGroup,
    /// The strategyRef names another group: a third-party driver owns the job.
    ForeignStrategyGroup(String),
    /// The strategy kind is not one of the eight built-in drivers.
    UnsupportedKind(String),
    /// RestoreJob: the Backup it names does not exist (upstream fails the job terminally).
    BackupNotFound,
}

impl Skip {
    /// A static label for logs.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Terminal => "terminal",
            Self::BackupClassNotFound => "backup_class_not_found",
            Self::NoMatchingStrategy => "no_matching_strategy",
            Self::NilStrategyGroup => "nil_strategy_group",
            Self::ForeignStrategyGroup(_) => "foreign_strategy_group",
            Self::UnsupportedKind(_) => "unsupported_kind",
            Self::BackupNotFound => "backup_not_found",
        }
    }
}

/// Gate 1, checked before any read: a terminal phase stops everything.
pub fn is_terminal(phase: Option<&str>) -> bool {
    phases::is_terminal(phase)
}

/// Gates 3 and 4 on a strategyRef: a nil or foreign apiGroup, then an unsupported kind.
pub fn strategy_gate(strategy: &TypedLocalObjectReference) -> Verdict {
    match strategy.api_group.as_deref() {
        None => Verdict::Skip(Skip::NilStrategyGroup),
        Some(g) if g != groups::STRATEGY => Verdict::Skip(Skip::ForeignStrategyGroup(g.into())),
        Some(_) if !SUPPORTED_STRATEGY_KINDS.contains(&strategy.kind.as_str()) => {
            Verdict::Skip(Skip::UnsupportedKind(strategy.kind.clone()))
        }
        Some(_) => Verdict::Project,
    }
}

/// Every BackupJob gate in order. `class` is the BackupClass named by the job (`None`: NotFound).
pub fn backup_job(
    phase: Option<&str>,
    class: Option<&BackupClassSpec>,
    application: &TypedLocalObjectReference,
) -> Verdict {
    if is_terminal(phase) {
        return Verdict::Skip(Skip::Terminal);
    }
    let Some(class) = class else {
        return Verdict::Skip(Skip::BackupClassNotFound);
    };
    match class.resolve(application) {
        None => Verdict::Skip(Skip::NoMatchingStrategy),
        Some(resolved) => strategy_gate(&resolved.strategy_ref),
    }
}

/// Every RestoreJob gate in order. `backup` is the Backup named by `spec.backupRef` (`None`: not
/// found); its `strategyRef` decides, with the same group and kind rules.
pub fn restore_job(phase: Option<&str>, backup: Option<&BackupSpec>) -> Verdict {
    if is_terminal(phase) {
        return Verdict::Skip(Skip::Terminal);
    }
    match backup {
        None => Verdict::Skip(Skip::BackupNotFound),
        Some(b) => strategy_gate(&b.strategy_ref),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::backups::{ApplicationSelector, BackupClassStrategy};

    fn class(routes: &[(&str, &str, &str)]) -> BackupClassSpec {
        BackupClassSpec {
            strategies: routes
                .iter()
                .map(|(app_kind, group, kind)| BackupClassStrategy {
                    strategy_ref: TypedLocalObjectReference::new(group, kind, "s"),
                    application: ApplicationSelector {
                        api_group: None,
                        kind: (*app_kind).into(),
                    },
                    parameters: None,
                })
                .collect(),
        }
    }

    fn app(kind: &str) -> TypedLocalObjectReference {
        TypedLocalObjectReference {
            api_group: None,
            kind: kind.into(),
            name: "db".into(),
        }
    }

    const S: &str = "strategy.backups.cozystack.io";

    #[test]
    fn backup_job_gates_in_upstream_order() {
        let c = class(&[
            ("Postgres", S, "CNPG"),
            ("Foreign", "example.org", "CNPG"),
            ("Odd", S, "Tape"),
        ]);
        let cases: [(Option<&str>, Option<&BackupClassSpec>, &str, Verdict); 9] = [
            (None, Some(&c), "Postgres", Verdict::Project),
            (Some(""), Some(&c), "Postgres", Verdict::Project),
            (Some("Running"), Some(&c), "Postgres", Verdict::Project),
            // Terminal wins over everything, even a missing class.
            (
                Some("Succeeded"),
                None,
                "Postgres",
                Verdict::Skip(Skip::Terminal),
            ),
            (
                Some("Failed"),
                Some(&c),
                "Postgres",
                Verdict::Skip(Skip::Terminal),
            ),
            (
                None,
                None,
                "Postgres",
                Verdict::Skip(Skip::BackupClassNotFound),
            ),
            (
                None,
                Some(&c),
                "MariaDB",
                Verdict::Skip(Skip::NoMatchingStrategy),
            ),
            (
                None,
                Some(&c),
                "Foreign",
                Verdict::Skip(Skip::ForeignStrategyGroup("example.org".into())),
            ),
            (
                None,
                Some(&c),
                "Odd",
                Verdict::Skip(Skip::UnsupportedKind("Tape".into())),
            ),
        ];
        for (phase, class, kind, want) in cases {
            assert_eq!(
                backup_job(phase, class, &app(kind)),
                want,
                "{phase:?} {kind}"
            );
        }
    }

    #[test]
    fn every_builtin_kind_passes_and_a_nil_group_is_skipped() {
        for kind in SUPPORTED_STRATEGY_KINDS {
            assert_eq!(
                strategy_gate(&TypedLocalObjectReference::new(S, kind, "x")),
                Verdict::Project
            );
        }
        let nil = TypedLocalObjectReference {
            api_group: None,
            kind: "CNPG".into(),
            name: "x".into(),
        };
        assert_eq!(strategy_gate(&nil), Verdict::Skip(Skip::NilStrategyGroup));
        // The group check precedes the kind check.
        assert_eq!(
            strategy_gate(&TypedLocalObjectReference::new("example.org", "Tape", "x")),
            Verdict::Skip(Skip::ForeignStrategyGroup("example.org".into()))
        );
    }

    #[test]
    fn restore_job_uses_the_backups_strategy_ref() {
        let backup = |group: &str, kind: &str| BackupSpec {
            application_ref: app("Postgres"),
            plan_ref: None,
            strategy_ref: TypedLocalObjectReference::new(group, kind, "s"),
            taken_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
            driver_metadata: None,
        };
        assert_eq!(
            restore_job(None, Some(&backup(S, "CNPG"))),
            Verdict::Project
        );
        assert_eq!(
            restore_job(Some("Failed"), Some(&backup(S, "CNPG"))),
            Verdict::Skip(Skip::Terminal)
        );
        assert_eq!(restore_job(None, None), Verdict::Skip(Skip::BackupNotFound));
        assert_eq!(
            restore_job(None, Some(&backup("velero.io", "Velero"))),
            Verdict::Skip(Skip::ForeignStrategyGroup("velero.io".into()))
        );
        assert_eq!(
            restore_job(None, Some(&backup(S, "Tape"))),
            Verdict::Skip(Skip::UnsupportedKind("Tape".into()))
        );
    }
}
