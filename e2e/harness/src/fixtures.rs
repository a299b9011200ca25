//! Creating fixtures: any typed object, in one call (the builders themselves are on the API types,
//! `api::backups::BackupJob::test(..)` etc., behind the `test-util` feature of `libs/api`).

use kube::api::{Api, PostParams};
use kube::core::NamespaceResourceScope;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::Harness;

/// A typed object kind that fixtures can create.
pub trait Fixture:
    kube::Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug
{
}

impl<K> Fixture for K where
    K: kube::Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug
{
}

impl Harness {
    /// Creates BackupClass `name` routing `app_kind` (in `apps.cozystack.io`) to the strategy
    /// `strategy_kind`/`strategy` with `parameters`.
    pub async fn backup_class(
        &self,
        name: &str,
        app_kind: &str,
        strategy_kind: &str,
        strategy: &str,
        parameters: &[(&str, &str)],
    ) {
        let class = api::backups::BackupClass::test(name)
            .route_to(
                app_kind,
                api::contract::groups::STRATEGY,
                strategy_kind,
                strategy,
                parameters,
            )
            .build();
        self.create_cluster(&class).await;
    }

    /// The Events about object `name` in `namespace` (any kind): `(type, reason, note)`, oldest
    /// first.
    pub async fn events_about(&self, namespace: &str, name: &str) -> Vec<(String, String, String)> {
        let api: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client(), namespace);
        let mut events: Vec<_> = api
            .list(&Default::default())
            .await
            .unwrap_or_else(|e| panic!("list Events in {namespace}: {e}"))
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
            .collect();
        events.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        events
            .into_iter()
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Creates a namespaced object in `namespace` (its own namespace field is overridden).
    pub async fn create<K>(&self, namespace: &str, obj: &K) -> K
    where
        K: Fixture + kube::Resource<Scope = NamespaceResourceScope>,
    {
        let mut obj = obj.clone();
        obj.meta_mut().namespace = Some(namespace.into());
        Api::<K>::namespaced(self.client(), namespace)
            .create(&PostParams::default(), &obj)
            .await
            .unwrap_or_else(|e| panic!("create {} in {namespace}: {e}", K::kind(&())))
    }

    /// Runs BackupJob `name` of application `kind`/`app` in `namespace` through BackupClass
    /// `class` until it ends (within `deadline`), asserts it `Succeeded`, and returns the catalog
    /// Backup it wrote.
    pub async fn backup_succeeded(
        &self,
        namespace: &str,
        name: &str,
        (kind, app): (&str, &str),
        class: &str,
        deadline: std::time::Duration,
    ) -> api::backups::Backup {
        use api::backups::{Backup, BackupJob};
        let job = BackupJob::test(name)
            .for_app(kind, app)
            .class(class)
            .build();
        self.create(namespace, &job).await;
        let jobs: Api<BackupJob> = Api::namespaced(self.client(), namespace);
        let done = crate::eventually_within(
            &format!("BackupJob {namespace}/{name} ended"),
            deadline,
            || async {
                let j = jobs.get_opt(name).await.ok()??;
                api::contract::phases::is_terminal(j.status.as_ref()?.phase.as_deref()).then_some(j)
            },
        )
        .await;
        assert_eq!(
            done.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded"),
            "BackupJob {namespace}/{name}: {:?}",
            done.status
        );
        Api::<Backup>::namespaced(self.client(), namespace)
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("the Backup of BackupJob {namespace}/{name}: {e}"))
    }

    /// Creates a cluster-scoped object.
    pub async fn create_cluster<K>(&self, obj: &K) -> K
    where
        K: Fixture + kube::Resource<Scope = kube::core::ClusterResourceScope>,
    {
        Api::<K>::all(self.client())
            .create(&PostParams::default(), obj)
            .await
            .unwrap_or_else(|e| panic!("create {}: {e}", K::kind(&())))
    }
}
