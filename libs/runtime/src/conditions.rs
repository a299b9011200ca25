//! Server-side apply of the status conditions one daemon owns.
//!
//! Conditions are list-maps keyed by `type` in our CRDs, so each field manager owns only the
//! entries it applies; applying `[CredentialsProjected]` never touches another daemon's `Ready`.

use api::Condition;
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;

/// Applies `conditions` to `name`'s `/status` as `field_manager`, forcing ownership of exactly
/// those condition entries. Entries previously applied by this manager and absent from
/// `conditions` are removed by the API server (SSA semantics).
pub async fn apply_conditions<K>(
    api: &Api<K>,
    name: &str,
    field_manager: &str,
    conditions: &[Condition],
) -> kube::Result<K>
where
    K: kube::Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": { "conditions": conditions },
    });
    api.patch_status(
        name,
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(&patch),
    )
    .await
}
