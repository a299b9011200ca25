//! Between two harnesses of one test process on the shared real control plane: the server is put
//! back to the state of a fresh start, so that a test that relies on fixed names (`tenant-root`,
//! the `cozy-default` BackupClass, the daemons' own namespaces) or counts cluster-scoped objects
//! sees only what it makes itself, while the control plane's start is paid once per test binary
//! run.
//!
//! ```text
//!  1 every instance of every CRD ─► finalizers cleared, deleted (the daemons that owned them are
//!    gone); ClusterRoles/ClusterRoleBindings that are not kube-apiserver's bootstrap policy ─► deleted
//!  2 every namespace but default and kube-* ─► its `kubernetes` finalizer dropped, deleted,
//!    emptied by the harness, deleted again, waited for
//!  3 CRDs the control plane did not start with (simulators', tests') ─► deleted, waited for
//! ```
//! The CRDs go last: while one is being removed, discovery fails for its group (and the emptying
//! of the namespaces with it).

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::try_join_all;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use tokio::time::Instant;

use crate::Error;

/// Namespaces kube-apiserver and kube-controller-manager keep; never deleted.
const SYSTEM_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];
/// The label key of kube-apiserver's bootstrap RBAC policy (`cluster-admin`, `system:*`, `view`, …).
const BOOTSTRAP_LABEL: &str = "kubernetes.io/bootstrapping";
/// How long the whole reset may take.
const DEADLINE: Duration = Duration::from_secs(120);

/// The names of the CRDs the server has now (taken right after the control plane's start).
pub(crate) async fn crd_names(client: &kube::Client) -> Result<BTreeSet<String>, Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect())
}

/// Puts the server back to its state right after the start (`baseline`: the CRDs it had then);
/// answers when each phase ended, counted from the start of the reset.
pub(crate) async fn reset(
    client: &kube::Client,
    baseline: &BTreeSet<String>,
) -> Result<String, Error> {
    let started = Instant::now();
    let deadline = started + DEADLINE;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let all = crds.list(&ListParams::default()).await?.items;
    let kinds: Vec<ApiResource> = all.iter().filter_map(api_resource).collect();
    let extra: Vec<String> = all
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .filter(|n| !baseline.contains(n))
        .collect();

    // 1: custom objects and cluster RBAC.
    try_join_all(kinds.iter().map(|ar| delete_all(client, ar, true))).await?;
    let not_bootstrap = ListParams::default().labels(&format!("!{BOOTSTRAP_LABEL}"));
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let role_names = roles.list(&not_bootstrap).await?.items;
    let binding_names = bindings.list(&not_bootstrap).await?.items;
    try_join_all(
        role_names
            .iter()
            .map(|r| delete(&roles, r.metadata.name.as_deref())),
    )
    .await?;
    try_join_all(
        binding_names
            .iter()
            .map(|b| delete(&bindings, b.metadata.name.as_deref())),
    )
    .await?;
    let objects_done = started.elapsed();

    // 2: namespaces. kube-controller-manager's namespace controller empties a terminating
    // namespace that holds its `kubernetes` finalizer by name, one resource type after another,
    // for seconds; were it still at work when the next test creates a namespace of the same name,
    // it would delete that test's objects. So the finalizer goes first, while the namespace is
    // active: the controller then never starts on it, and the harness empties it instead, many
    // requests at a time. A namespace a test left terminating (the controller may be at work on
    // it already) is emptied too but left for the controller to finalize, and waited for.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let doomed = |n: &Namespace| {
        n.metadata
            .name
            .as_deref()
            .filter(|name| !SYSTEM_NAMESPACES.contains(name))
            .map(str::to_owned)
    };
    let listed = namespaces.list(&ListParams::default()).await?.items;
    let names: Vec<String> = listed.iter().filter_map(doomed).collect();
    let active: Vec<String> = listed
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter_map(doomed)
        .collect();
    try_join_all(active.iter().map(|name| drop_finalizers(&namespaces, name))).await?;
    // The first delete only marks a namespace terminating (it then takes no new objects).
    try_join_all(active.iter().map(|name| delete(&namespaces, Some(name)))).await?;
    empty(client, &names).await?;
    loop {
        let counts = try_join_all(kinds.iter().map(|ar| delete_all(client, ar, false))).await?;
        let left_namespaces: Vec<Namespace> = namespaces
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|n| doomed(n).is_some())
            .collect();
        // A terminating namespace without finalizers goes on the next delete.
        try_join_all(
            left_namespaces
                .iter()
                .filter(|n| without_finalizers(n))
                .map(|n| delete(&namespaces, n.metadata.name.as_deref())),
        )
        .await?;
        let mut left: Vec<String> = left_namespaces.iter().filter_map(doomed).collect();
        left.extend(
            kinds
                .iter()
                .zip(counts)
                .filter(|(_, n)| *n > 0)
                .map(|(ar, _)| ar.plural.clone()),
        );
        if left.is_empty() {
            break;
        }
        wait_or_fail(deadline, &left).await?;
    }
    let namespaces_done = started.elapsed();

    // 3: the CRDs the start did not have.
    try_join_all(extra.iter().map(|n| delete(&crds, Some(n)))).await?;
    loop {
        let left: Vec<String> = crds
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter_map(|c| c.metadata.name)
            .filter(|n| extra.contains(n))
            .collect();
        if left.is_empty() {
            break;
        }
        wait_or_fail(deadline, &left).await?;
    }
    let crds_done = started.elapsed();

    let secs = |d: Duration| d.as_secs_f64();
    Ok(format!(
        "custom objects and cluster RBAC deleted at {:.1} s, namespaces gone at {:.1} s, {} extra \
         CRDs gone at {:.1} s",
        secs(objects_done),
        secs(namespaces_done),
        extra.len(),
        secs(crds_done)
    ))
}

/// Deletes everything in the namespaces `names` (clearing finalizers first), as the namespace
/// controller would once they are deleted, but many requests at a time: left to the controller
/// alone, which lists and deletes each resource type in turn, emptying took seconds.
async fn empty(client: &kube::Client, names: &[String]) -> Result<(), Error> {
    use futures::StreamExt as _;
    use kube::discovery::{Discovery, Scope, verbs};
    let discovery = Discovery::new(client.clone()).run().await?;
    let kinds: Vec<ApiResource> = discovery
        .groups()
        .flat_map(|g| g.recommended_resources())
        .filter(|(_, caps)| {
            caps.scope == Scope::Namespaced
                && caps.supports_operation(verbs::DELETE_COLLECTION)
                && caps.supports_operation(verbs::LIST)
        })
        .map(|(ar, _)| ar)
        .collect();
    let work: Vec<(String, ApiResource)> = names
        .iter()
        .flat_map(|ns| kinds.iter().map(move |ar| (ns.clone(), ar.clone())))
        .collect();
    let results: Vec<Result<(), Error>> = futures::stream::iter(work)
        .map(|(ns, ar)| async move {
            let api = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &ar);
            let objects = match api.list(&ListParams::default()).await {
                Ok(l) => l.items,
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(Error::from(e)),
            };
            if objects.is_empty() {
                return Ok(());
            }
            for o in objects.iter().filter(|o| {
                o.metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| !f.is_empty())
            }) {
                let name = o.metadata.name.clone().unwrap_or_default();
                let clear = serde_json::json!({"metadata": {"finalizers": null}});
                ignore_not_found(
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&clear))
                        .await
                        .map(|_| ()),
                )?;
            }
            ignore_not_found(
                api.delete_collection(&DeleteParams::default(), &ListParams::default())
                    .await
                    .map(|_| ()),
            )
        })
        .buffer_unordered(32)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Empties the `spec.finalizers` of an active namespace through its `finalize` subresource,
/// retrying on a conflict (kube-controller-manager may write the namespace meanwhile).
async fn drop_finalizers(api: &Api<Namespace>, name: &str) -> Result<(), Error> {
    loop {
        let Some(mut ns) = api.get_opt(name).await? else {
            return Ok(());
        };
        if without_finalizers(&ns) {
            return Ok(());
        }
        if let Some(spec) = ns.spec.as_mut() {
            spec.finalizers = Some(Vec::new());
        }
        match api
            .replace_subresource("finalize", name, &Default::default(), &ns)
            .await
        {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// True when a namespace holds no finalizer of either kind (so a delete removes it).
fn without_finalizers(ns: &Namespace) -> bool {
    ns.spec
        .as_ref()
        .and_then(|s| s.finalizers.as_ref())
        .is_none_or(|f| f.is_empty())
        && ns.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty())
}

/// Sleeps a moment, or fails naming what is `left` once the `deadline` has passed.
async fn wait_or_fail(deadline: Instant, left: &[String]) -> Result<(), Error> {
    if Instant::now() > deadline {
        return Err(Error::Timeout(format!(
            "the shared control plane's reset between tests; still there: {}",
            left.join(", ")
        )));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    Ok(())
}

/// Clears the finalizers of every object of kind `ar` and deletes it (`again`: also those already
/// being deleted); answers how many were still there.
async fn delete_all(client: &kube::Client, ar: &ApiResource, again: bool) -> Result<usize, Error> {
    let all = Api::<DynamicObject>::all_with(client.clone(), ar);
    let objects = match all.list(&ListParams::default()).await {
        Ok(l) => l.items,
        // A CRD deleted meanwhile has no instances left to list.
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let count = objects.len();
    try_join_all(objects.into_iter().map(|o| {
        let api = match o.metadata.namespace.as_deref() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
            None => all.clone(),
        };
        async move {
            let name = o.metadata.name.clone().unwrap_or_default();
            if o.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty())
            {
                let clear = serde_json::json!({"metadata": {"finalizers": null}});
                ignore_not_found(
                    api.patch(&name, &PatchParams::default(), &Patch::Merge(&clear))
                        .await
                        .map(|_| ()),
                )?;
            }
            if again || o.metadata.deletion_timestamp.is_none() {
                delete(&api, Some(&name)).await?;
            }
            Ok::<_, Error>(())
        }
    }))
    .await?;
    Ok(count)
}

/// Deletes `name` of `api`; gone already is fine.
async fn delete<K>(api: &Api<K>, name: Option<&str>) -> Result<(), Error>
where
    K: Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(name) = name else { return Ok(()) };
    ignore_not_found(api.delete(name, &DeleteParams::default()).await.map(|_| ()))
}

/// The served storage version of a CRD as an [`ApiResource`].
fn api_resource(crd: &CustomResourceDefinition) -> Option<ApiResource> {
    let version = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage && v.served)
        .or_else(|| crd.spec.versions.iter().find(|v| v.served))?;
    let gvk = GroupVersionKind::gvk(&crd.spec.group, &version.name, &crd.spec.names.kind);
    Some(ApiResource::from_gvk_with_plural(
        &gvk,
        &crd.spec.names.plural,
    ))
}

/// `Ok` for a NotFound answer (deleted by someone else meanwhile).
fn ignore_not_found(r: Result<(), kube::Error>) -> Result<(), Error> {
    match r {
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        other => other.map_err(Into::into),
    }
}
