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
