//! Upstream's gate on a job's application reference, shared by the drivers bound to one
//! application kind (CNPG, MariaDB, Etcd, FoundationDB, MongoDB, Altinity): the raw (not
//! normalised) reference must name that kind, in the `apps.cozystack.io` group or with no group.
//! The messages name the strategy the way each upstream driver spells it.

use api::TypedLocalObjectReference;
use api::contract::groups;

/// `Ok` when `r` names `app_kind` in `apps.cozystack.io` (or no group); else the message of
/// `strategy`'s driver (e.g. `CNPG strategy supports applicationRef.kind="Postgres", got "Etcd"`).
pub fn validate(
    strategy: &str,
    app_kind: &str,
    r: &TypedLocalObjectReference,
) -> Result<(), String> {
    if r.kind != app_kind {
        return Err(format!(
            "{strategy} strategy supports applicationRef.kind={app_kind:?}, got {:?}",
            r.kind
        ));
    }
    let group = r.api_group.as_deref().unwrap_or("");
    if !group.is_empty() && group != groups::APPS {
        return Err(format!(
            "{strategy} strategy supports applicationRef.apiGroup={:?}, got {group:?}",
            groups::APPS
        ));
    }
    Ok(())
}
