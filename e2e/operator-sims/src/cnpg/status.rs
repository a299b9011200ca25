//! Status writes: merge patches of a watched object's status, and one Cluster condition at a time.

use api::thirdparty::cnpg::Cluster;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use super::FIELD_MANAGER;
use super::shared::Shared;

impl Shared {
    pub(super) async fn patch_status<K>(&self, ns: &str, name: &str, status: Value)
    where
        K: kube::Resource<DynamicType = ()>,
    {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), ns, &ApiResource::erase::<K>(&()));
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        if let Err(e) = api
            .patch_status(name, &params, &Patch::Merge(&json!({ "status": status })))
            .await
        {
            tracing::debug!(namespace = ns, name, kind = K::kind(&()).as_ref(), error = %e, "status update failed");
        }
    }

    /// Sets one condition of a Cluster (list-map by type), keeping the others.
    pub(super) async fn set_condition(&self, ns: &str, name: &str, cond: Value) {
        let Some(cluster) = self.clusters.get(ns, name) else {
            return;
        };
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let Some(conditions) =
            crate::conditions::with_condition(&cluster["status"]["conditions"], cond, &now)
        else {
            return;
        };
        self.patch_status::<Cluster>(ns, name, json!({ "conditions": conditions }))
            .await;
    }
}
