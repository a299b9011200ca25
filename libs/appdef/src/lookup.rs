//! Resolving a tenant-facing kind (`HTTPCache`) to its ApplicationDefinition.
//!
//! `metadata.name` is not a function of `spec.application.kind` (`http-cache` vs `HTTPCache`,
//! `tcp-balancer` vs `TCPBalancer`), so a Get by the lower-cased kind finds nothing. The lookup
//! lists every definition and matches `spec.application.kind` exactly, returning the whole object.
//! The list is untyped (`DynamicObject`) so one malformed item cannot fail it; items whose kind is
//! missing or not a string are skipped.

use kube::api::{Api, DynamicObject, ListParams};
use kube::core::ApiResource;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Group of ApplicationDefinition.
pub const GROUP: &str = "cozystack.io";
/// Version of ApplicationDefinition.
pub const VERSION: &str = "v1alpha1";
/// Resource (plural) of ApplicationDefinition.
pub const RESOURCE: &str = "applicationdefinitions";

/// The `ApiResource` of ApplicationDefinition, for untyped (`DynamicObject`) access.
pub fn api_resource() -> ApiResource {
    ApiResource::erase::<api::appdef::ApplicationDefinition>(&())
}

/// Errors of [`find_by_kind`] and [`KindCache`].
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    /// The caller asked for an empty kind.
    #[error("kind must not be empty")]
    EmptyKind,
    /// Listing the definitions failed (wrong group after a CRD rename, RBAC, API down, …).
    #[error("list {GROUP}/{VERSION}/{RESOURCE}")]
    List(#[source] kube::Error),
    /// No definition declares this kind.
    #[error(
        "no ApplicationDefinition with spec.application.kind {kind:?} found under {GROUP}/{VERSION}/{RESOURCE}"
    )]
    NoSuchKind {
        /// The kind asked for.
        kind: String,
    },
}

/// `spec.application.kind` of a definition, when present and a string.
pub fn application_kind(obj: &DynamicObject) -> Option<&str> {
    obj.data
        .get("spec")?
        .get("application")?
        .get("kind")
        .and_then(Value::as_str)
}

/// Lists every ApplicationDefinition (following `continue` tokens) as untyped objects.
pub async fn list_all(client: &kube::Client) -> Result<Vec<DynamicObject>, FindError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &api_resource());
    let mut items = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await.map_err(FindError::List)?;
        items.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(items)
}

/// Picks the definition whose `spec.application.kind` equals `kind` exactly (case-sensitive).
pub fn select_by_kind<'a, I>(items: I, kind: &str) -> Result<DynamicObject, FindError>
where
    I: IntoIterator<Item = &'a DynamicObject>,
{
    if kind.is_empty() {
        return Err(FindError::EmptyKind);
    }
    items
        .into_iter()
        .find(|o| application_kind(o) == Some(kind))
        .cloned()
        .ok_or_else(|| FindError::NoSuchKind { kind: kind.into() })
}

/// Finds the ApplicationDefinition of `kind` with one fresh list.
pub async fn find_by_kind(client: &kube::Client, kind: &str) -> Result<DynamicObject, FindError> {
    if kind.is_empty() {
        return Err(FindError::EmptyKind);
    }
    let items = list_all(client).await?;
    select_by_kind(&items, kind)
}

/// A cached [`find_by_kind`], following the guidance for ApplicationDefinition clients:
/// short-lived processes (CLIs, scripts) cache the list for their whole lifetime
/// ([`KindCache::for_process`]); long-lived ones (dashboards, controllers) re-list every few minutes
/// ([`KindCache::refreshing`], [`KindCache::DEFAULT_REFRESH`]). Definitions change rarely, so a
/// watch is not worth it; a definition created after the last list is found after the next refresh.
pub struct KindCache {
    client: kube::Client,
    max_age: Option<Duration>,
    state: tokio::sync::Mutex<Option<Snapshot>>,
}

impl std::fmt::Debug for KindCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KindCache")
            .field("max_age", &self.max_age)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone)]
struct Snapshot {
    fetched: Instant,
    items: Arc<Vec<DynamicObject>>,
}

impl KindCache {
    /// The refresh period for long-lived processes.
    pub const DEFAULT_REFRESH: Duration = Duration::from_secs(180);

    /// Lists once and keeps the result for the lifetime of the process.
    pub fn for_process(client: kube::Client) -> Self {
        Self {
            client,
            max_age: None,
            state: tokio::sync::Mutex::new(None),
        }
    }

    /// Re-lists when the cached list is older than `every`.
    pub fn refreshing(client: kube::Client, every: Duration) -> Self {
        Self {
            client,
            max_age: Some(every),
            state: tokio::sync::Mutex::new(None),
        }
    }

    /// The definition of `kind`, from the cache when it is fresh enough.
    pub async fn find(&self, kind: &str) -> Result<DynamicObject, FindError> {
        if kind.is_empty() {
            return Err(FindError::EmptyKind);
        }
        let items = self.items().await?;
        select_by_kind(items.iter(), kind)
    }

    /// Drops the cached list; the next lookup lists again.
    pub async fn invalidate(&self) {
        *self.state.lock().await = None;
    }

    async fn items(&self) -> Result<Arc<Vec<DynamicObject>>, FindError> {
        // Holding the lock across the list makes concurrent callers share one request.
        let mut state = self.state.lock().await;
        if let Some(s) = state.as_ref()
            && !is_stale(s.fetched, Instant::now(), self.max_age)
        {
            return Ok(s.items.clone());
        }
        let items = Arc::new(list_all(&self.client).await?);
        tracing::debug!(count = items.len(), "listed ApplicationDefinitions");
        *state = Some(Snapshot {
            fetched: Instant::now(),
            items: items.clone(),
        });
        Ok(items)
    }
}

/// Whether a list fetched at `fetched` must be refreshed at `now` (never, without a maximum age).
pub fn is_stale(fetched: Instant, now: Instant, max_age: Option<Duration>) -> bool {
    max_age.is_some_and(|age| now.saturating_duration_since(fetched) >= age)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(name: &str, spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cozystack.io/v1alpha1", "kind": "ApplicationDefinition",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn selects_by_exact_kind_and_skips_malformed_items() {
        let items = [
            def("a-number", json!({"application": {"kind": 7}})),
            def("b-missing", json!({"application": {}})),
            def("c-null", json!({"application": {"kind": null}})),
            def(
                "tcp-balancer",
                json!({"application": {"kind": "TCPBalancer"}}),
            ),
            def("http-cache", json!({"application": {"kind": "HTTPCache"}})),
            def("vm-disk", json!({"application": {"kind": "VMDisk"}})),
        ];
        for (kind, name) in [
            ("TCPBalancer", "tcp-balancer"),
            ("HTTPCache", "http-cache"),
            ("VMDisk", "vm-disk"),
        ] {
            let found = select_by_kind(&items, kind).unwrap();
            assert_eq!(
                found,
                items
                    .iter()
                    .find(|o| o.metadata.name.as_deref() == Some(name))
                    .unwrap()
                    .clone()
            );
        }
        assert!(matches!(
            select_by_kind(&items, "7"),
            Err(FindError::NoSuchKind { .. })
        ));
        assert!(matches!(
            select_by_kind(&items, "tcpbalancer"),
            Err(FindError::NoSuchKind { .. })
        ));
        assert!(matches!(
            select_by_kind(&items, ""),
            Err(FindError::EmptyKind)
        ));
    }

    #[test]
    fn staleness_follows_the_policy() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(181);
        assert!(
            !is_stale(t0, later, None),
            "process-lifetime cache never expires"
        );
        assert!(is_stale(t0, later, Some(KindCache::DEFAULT_REFRESH)));
        assert!(!is_stale(
            t0,
            t0 + Duration::from_secs(10),
            Some(KindCache::DEFAULT_REFRESH)
        ));
        assert!(is_stale(t0, t0, Some(Duration::ZERO)));
    }

    #[test]
    fn error_messages_name_what_failed() {
        assert_eq!(FindError::EmptyKind.to_string(), "kind must not be empty");
        assert_eq!(
            FindError::NoSuchKind {
                kind: "HTTPCache".into()
            }
            .to_string(),
            "no ApplicationDefinition with spec.application.kind \"HTTPCache\" found under cozystack.io/v1alpha1/applicationdefinitions"
        );
    }
}
