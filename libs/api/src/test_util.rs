//! Builders that make test fixtures read like specifications (behind the `test-util` feature):
//!
//! ```
//! use api::backups::BackupJob;
//! let job = BackupJob::test("ad-hoc")
//!     .namespace("tenant-acme")
//!     .for_app("Postgres", "orders-db")
//!     .class("cozy-default")
//!     .build();
//! assert_eq!(job.spec.application_ref.name, "orders-db");
//! ```

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::ObjectMeta;

use crate::backups::{
    ApplicationSelector, Backup, BackupClass, BackupClassSpec, BackupClassStrategy, BackupJob,
    BackupJobSpec, BackupSpec, Plan, PlanSchedule, PlanSpec, RestoreJob, RestoreJobSpec,
};
use crate::contract::groups;
use crate::{LocalObjectReference, TypedLocalObjectReference};

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

fn app_ref(kind: &str, name: &str) -> TypedLocalObjectReference {
    TypedLocalObjectReference::new(crate::contract::DEFAULT_APPLICATION_API_GROUP, kind, name)
}

/// Builds a [`BackupJob`].
#[derive(Debug, Clone)]
pub struct BackupJobBuilder(BackupJob);

impl BackupJob {
    /// A BackupJob `name` for `Postgres/db` through `cozy-default`, in no namespace yet.
    pub fn test(name: &str) -> BackupJobBuilder {
        BackupJobBuilder(BackupJob {
            metadata: meta(name),
            spec: BackupJobSpec {
                plan_ref: None,
                application_ref: app_ref("Postgres", "db"),
                backup_class_name: crate::contract::names::DEFAULT_BACKUP_CLASS.into(),
            },
            status: None,
        })
    }
}

impl BackupJobBuilder {
    /// In `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.0.metadata.namespace = Some(namespace.into());
        self
    }
    /// For application `kind`/`name` in `apps.cozystack.io`.
    pub fn for_app(mut self, kind: &str, name: &str) -> Self {
        self.0.spec.application_ref = app_ref(kind, name);
        self
    }
    /// For an application reference exactly as given (e.g. without an apiGroup).
    pub fn app_ref(mut self, r: TypedLocalObjectReference) -> Self {
        self.0.spec.application_ref = r;
        self
    }
    /// Through BackupClass `class`.
    pub fn class(mut self, class: &str) -> Self {
        self.0.spec.backup_class_name = class.into();
        self
    }
    /// Created by Plan `plan`.
    pub fn plan(mut self, plan: &str) -> Self {
        self.0.spec.plan_ref = Some(LocalObjectReference::new(plan));
        self
    }
    /// The job.
    pub fn build(self) -> BackupJob {
        self.0
    }
}

/// Builds a [`BackupClass`].
#[derive(Debug, Clone)]
pub struct BackupClassBuilder(BackupClass);

impl BackupClass {
    /// A BackupClass `name` without routes.
    pub fn test(name: &str) -> BackupClassBuilder {
        BackupClassBuilder(BackupClass {
            metadata: meta(name),
            spec: BackupClassSpec::default(),
            status: None,
        })
    }
}

impl BackupClassBuilder {
    /// Routes applications of `app_kind` (in `apps.cozystack.io`) to the platform strategy
    /// `strategy_kind`/`strategy_name`.
    pub fn route(self, app_kind: &str, strategy_kind: &str, strategy_name: &str) -> Self {
        self.route_to(
            app_kind,
            groups::STRATEGY,
            strategy_kind,
            strategy_name,
            &[],
        )
    }
    /// Routes `app_kind` to a strategy of any group, with parameters.
    pub fn route_to(
        mut self,
        app_kind: &str,
        strategy_group: &str,
        strategy_kind: &str,
        strategy_name: &str,
        parameters: &[(&str, &str)],
    ) -> Self {
        self.0.spec.strategies.push(BackupClassStrategy {
            strategy_ref: TypedLocalObjectReference::new(
                strategy_group,
                strategy_kind,
                strategy_name,
            ),
            application: ApplicationSelector {
                api_group: Some(crate::contract::DEFAULT_APPLICATION_API_GROUP.into()),
                kind: app_kind.into(),
            },
            parameters: (!parameters.is_empty()).then(|| {
                parameters
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect()
            }),
        });
        self
    }
    /// The class.
    pub fn build(self) -> BackupClass {
        self.0
    }
}

/// Builds a [`Backup`].
#[derive(Debug, Clone)]
pub struct BackupBuilder(Backup);

impl Backup {
    /// A Backup `name` of `Postgres/db` made by the platform CNPG strategy `cozy-default-cnpg`.
    pub fn test(name: &str) -> BackupBuilder {
        BackupBuilder(Backup {
            metadata: meta(name),
            spec: BackupSpec {
                application_ref: app_ref("Postgres", "db"),
                plan_ref: None,
                strategy_ref: TypedLocalObjectReference::new(
                    groups::STRATEGY,
                    "CNPG",
                    "cozy-default-cnpg",
                ),
                taken_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-01-02T03:04:05Z".parse().expect("a valid timestamp"),
                ),
                driver_metadata: None,
            },
            status: None,
        })
    }
}

impl BackupBuilder {
    /// In `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.0.metadata.namespace = Some(namespace.into());
        self
    }
    /// Of application `kind`/`name`.
    pub fn for_app(mut self, kind: &str, name: &str) -> Self {
        self.0.spec.application_ref = app_ref(kind, name);
        self
    }
    /// Made by strategy `group`/`kind`/`name`.
    pub fn strategy(mut self, group: &str, kind: &str, name: &str) -> Self {
        self.0.spec.strategy_ref = TypedLocalObjectReference::new(group, kind, name);
        self
    }
    /// With these driver metadata entries.
    pub fn driver_metadata(mut self, entries: &[(&str, &str)]) -> Self {
        self.0.spec.driver_metadata = Some(
            entries
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        self
    }
    /// The backup.
    pub fn build(self) -> Backup {
        self.0
    }
}

/// Builds a [`RestoreJob`].
#[derive(Debug, Clone)]
pub struct RestoreJobBuilder(RestoreJob);

impl RestoreJob {
    /// A RestoreJob `name` restoring Backup `backup` in place.
    pub fn test(name: &str, backup: &str) -> RestoreJobBuilder {
        RestoreJobBuilder(RestoreJob {
            metadata: meta(name),
            spec: RestoreJobSpec {
                backup_ref: LocalObjectReference::new(backup),
                target_application_ref: None,
                options: None,
            },
            status: None,
        })
    }
}

impl RestoreJobBuilder {
    /// In `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.0.metadata.namespace = Some(namespace.into());
        self
    }
    /// Into application `kind`/`name` (a copy restore).
    pub fn to_app(mut self, kind: &str, name: &str) -> Self {
        self.0.spec.target_application_ref = Some(app_ref(kind, name));
        self
    }
    /// With `spec.options`.
    pub fn options(mut self, options: serde_json::Value) -> Self {
        self.0.spec.options = Some(options);
        self
    }
    /// The job.
    pub fn build(self) -> RestoreJob {
        self.0
    }
}

/// Builds a [`Plan`].
#[derive(Debug, Clone)]
pub struct PlanBuilder(Plan);

impl Plan {
    /// A Plan `name` backing up `Postgres/db` through `cozy-default` on `cron`.
    pub fn test(name: &str, cron: &str) -> PlanBuilder {
        PlanBuilder(Plan {
            metadata: meta(name),
            spec: PlanSpec {
                application_ref: app_ref("Postgres", "db"),
                backup_class_name: crate::contract::names::DEFAULT_BACKUP_CLASS.into(),
                schedule: PlanSchedule {
                    type_: Some("cron".into()),
                    cron: Some(cron.into()),
                },
                ..Default::default()
            },
            status: None,
        })
    }
}

impl PlanBuilder {
    /// In `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.0.metadata.namespace = Some(namespace.into());
        self
    }
    /// For application `kind`/`name`.
    pub fn for_app(mut self, kind: &str, name: &str) -> Self {
        self.0.spec.application_ref = app_ref(kind, name);
        self
    }
    /// Through BackupClass `class`.
    pub fn class(mut self, class: &str) -> Self {
        self.0.spec.backup_class_name = class.into();
        self
    }
    /// The plan.
    pub fn build(self) -> Plan {
        self.0
    }
}

/// The system bucket's credentials Secret as the bucket chart writes it (flat keys), named
/// `name`, with `data` as plain strings.
pub fn source_secret(name: &str, namespace: &str, data: &[(&str, &str)]) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(
                "apps.cozystack.io/user-secret".into(),
                "true".into(),
            )])),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    }
}
