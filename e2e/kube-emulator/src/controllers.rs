//! The controller-manager jobs the emulator bundles, run asynchronously after writes (as upstream, where
//! they live outside the apiserver): owner-reference garbage collection (background, foreground, orphan),
//! namespace termination, and CRD instance cleanup.
//!
//! Every pass works through the same delete/write paths as API requests, so finalizers are honoured and
//! watchers see the usual events.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::shared::Inner;
use crate::ssa::Scope;
use crate::store::{DeleteOpts, State, WriteOpts, to_view};

/// Runs until shutdown: wakes on every write (and every 250 ms), then reconciles until nothing changes.
pub(crate) async fn run(inner: Arc<Inner>) {
    let mut shutdown = inner.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = inner.changed.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
            _ = shutdown.changed() => return,
        }
        // A short delay so clients cannot come to depend on synchronous cascades.
        tokio::time::sleep(Duration::from_millis(20)).await;
        for _ in 0..100 {
            let progressed = {
                let mut st = inner.st();
                let before = st.rv;
                reconcile(&mut st);
                st.rv != before
            };
            if !progressed {
                break;
            }
            tokio::task::yield_now().await;
        }
    }
}

struct Info {
    storage: String,
    ns: String,
    name: String,
    uid: String,
    owners: Vec<String>,
    deleting: bool,
    finalizers: Vec<String>,
}

fn infos(st: &State) -> Vec<Info> {
    let mut out = Vec::new();
    for (storage, objs) in &st.objects {
        for ((ns, name), o) in objs {
            let m = &o["metadata"];
            out.push(Info {
                storage: storage.clone(),
                ns: ns.clone(),
                name: name.clone(),
                uid: m["uid"].as_str().unwrap_or_default().into(),
                owners: m["ownerReferences"]
                    .as_array()
                    .map(|rs| {
                        rs.iter()
                            .filter_map(|r| r["uid"].as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
                deleting: m["deletionTimestamp"].is_string(),
                finalizers: m["finalizers"]
                    .as_array()
                    .map(|fs| {
                        fs.iter()
                            .filter_map(|f| f.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
    }
    out
}

fn delete(st: &mut State, storage: &str, ns: &str, name: &str) {
    if let Some(kind) = st.kind_for_storage(storage) {
        let nsopt = (!ns.is_empty()).then_some(ns);
        let _ = st.delete(&kind, nsopt, name, &DeleteOpts::default());
    }
}

/// One reconciliation pass over the whole store.
pub(crate) fn reconcile(st: &mut State) {
    let all = infos(st);
    let uids: HashSet<&str> = all.iter().map(|i| i.uid.as_str()).collect();

    // Background GC: dependents whose owners are all gone are deleted; dependents that still have an
    // owner lose the references to the owners that are gone (upstream's "dangling references").
    for i in &all {
        if i.owners.is_empty() || i.deleting {
            continue;
        }
        let gone: Vec<&String> = i
            .owners
            .iter()
            .filter(|o| !uids.contains(o.as_str()))
            .collect();
        if gone.len() == i.owners.len() {
            delete(st, &i.storage, &i.ns, &i.name);
        } else {
            for owner in gone {
                strip_owner(st, i, owner);
            }
        }
    }
    for owner in all.iter().filter(|i| i.deleting) {
        let dependents: Vec<&Info> = all
            .iter()
            .filter(|d| d.owners.contains(&owner.uid))
            .collect();
        if owner.finalizers.iter().any(|f| f == "foregroundDeletion") {
            for d in &dependents {
                if !d.deleting {
                    delete(st, &d.storage, &d.ns, &d.name);
                }
            }
            if dependents.is_empty() {
                st.remove_finalizer(&owner.storage, &owner.ns, &owner.name, "foregroundDeletion");
            }
        }
        if owner.finalizers.iter().any(|f| f == "orphan") {
            for d in &dependents {
                strip_owner(st, d, &owner.uid);
            }
            st.remove_finalizer(&owner.storage, &owner.ns, &owner.name, "orphan");
        }
    }

    // Namespace termination: delete content, then the namespace.
    for ns in all
        .iter()
        .filter(|i| i.storage == "core/namespaces" && i.deleting)
    {
        let content: Vec<&Info> = all
            .iter()
            .filter(|i| i.ns == ns.name && i.storage != "core/namespaces")
            .collect();
        for c in &content {
            if !c.deleting {
                delete(st, &c.storage, &c.ns, &c.name);
            }
        }
        if content.is_empty()
            && ns.finalizers.is_empty()
            && let Some(kind) = st.kind_for_storage("core/namespaces")
        {
            st.remove_now(&kind, None, &ns.name);
        }
    }

    // CRD deletion: delete every instance, then release the cleanup finalizer.
    for crd in all
        .iter()
        .filter(|i| i.storage == "apiextensions.k8s.io/customresourcedefinitions" && i.deleting)
    {
        let Some((plural, group)) = crd.name.split_once('.') else {
            continue;
        };
        let storage = format!("{group}/{plural}");
        let instances: Vec<&Info> = all.iter().filter(|i| i.storage == storage).collect();
        for c in &instances {
            if !c.deleting {
                delete(st, &c.storage, &c.ns, &c.name);
            }
        }
        if instances.is_empty() {
            st.remove_finalizer(
                &crd.storage,
                "",
                &crd.name,
                "customresourcecleanup.apiextensions.k8s.io",
            );
        }
    }
}

fn strip_owner(st: &mut State, d: &Info, owner_uid: &str) {
    let Some(kind) = st.kind_for_storage(&d.storage) else {
        return;
    };
    let nsopt = (!d.ns.is_empty()).then_some(d.ns.as_str());
    let Some(old) = st.stored(&kind, nsopt, &d.name).map(|o| to_view(&kind, o)) else {
        return;
    };
    let mut new = old.clone();
    let refs: Vec<Value> = old["metadata"]["ownerReferences"]
        .as_array()
        .map(|rs| {
            rs.iter()
                .filter(|r| r["uid"] != owner_uid)
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    new["metadata"]["ownerReferences"] = json!(refs);
    let opts = WriteOpts {
        dry_run: false,
        manager: "kube-controller-manager".into(),
        field_validation: crate::schema::FieldValidation::Ignore,
    };
    let scope = if kind.status_subresource {
        Scope::NoStatus
    } else {
        Scope::All
    };
    let _ = st.write(&kind, nsopt, &d.name, old, new, scope, &opts, false, false);
}
