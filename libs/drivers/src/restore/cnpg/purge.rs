//! The purge: suspend the HelmRelease while anything remains, patch the target application, delete
//! the Cluster and its PVCs, and wait (bounded by the restore deadline) until they are gone.

use std::ops::ControlFlow;

use api::backups::RestoreJobStatus;
use api::contract::labels;

use super::patch::{app_patch, merge_patch_apply};
use super::{Pass, deleting, remaining};
use crate::cnpg::{self as driver};
use crate::restore::skeleton::{self, fail};
use crate::restore::{Action, ObjectRef, OnError, Selection, Step, elapsed, write_or_wait};
use crate::status::go_duration;

/// 12b–e: suspend, patch, delete, wait for the Cluster and its volumes to go.
pub(super) fn purge(p: &Pass<'_>, status: &mut RestoreJobStatus) -> ControlFlow<Step> {
    let Pass {
        o,
        now,
        current,
        started,
        options,
        t,
        app,
        server,
        metadata,
        snapshot,
        rendered,
        release,
        suspended,
        ..
    } = p;
    let remains = o.cluster.is_some() || !o.pvcs.is_empty();
    if remains && o.helm_release.is_some() && !suspended {
        return ControlFlow::Break(Step::Act {
            action: Action::SetSuspend {
                release: release.clone(),
                suspend: true,
            },
            events: Vec::new(),
            on_error: OnError {
                prefix: "failed to suspend HelmRelease",
                resume: None,
            },
        });
    }
    // 12c. Patch the target application (only when it would change something).
    let patch = app_patch(
        app,
        server,
        metadata,
        rendered,
        snapshot,
        &options.recovery_time,
    );
    if merge_patch_apply(app, &patch) != **app {
        return ControlFlow::Break(Step::Act {
            action: Action::MergePatch {
                target: ObjectRef {
                    api_version: "apps.cozystack.io/v1alpha1",
                    kind: driver::APP_KIND,
                    namespace: t.namespace.clone(),
                    name: t.app.clone(),
                },
                patch,
                field_manager: driver::FIELD_MANAGER,
            },
            events: Vec::new(),
            on_error: OnError {
                prefix: "failed to patch Postgres app spec",
                resume: Some(release.clone()),
            },
        });
    }
    // 12d. Purge the Cluster and its volumes.
    let on_purge_error = OnError {
        prefix: "failed to purge existing cluster",
        resume: Some(release.clone()),
    };
    if o.cluster.is_some_and(|c| !deleting(c)) {
        return ControlFlow::Break(Step::Act {
            action: Action::Delete(ObjectRef {
                api_version: "postgresql.cnpg.io/v1",
                kind: "Cluster",
                namespace: t.namespace.clone(),
                name: t.cluster.clone(),
            }),
            events: Vec::new(),
            on_error: on_purge_error,
        });
    }
    if o.pvcs.iter().any(|p| !deleting(p)) {
        return ControlFlow::Break(Step::Act {
            action: Action::DeleteAll(Selection {
                api_version: "v1",
                kind: "PersistentVolumeClaim",
                namespace: t.namespace.clone(),
                labels: vec![(labels::CNPG_CLUSTER.to_owned(), t.cluster.clone())],
            }),
            events: Vec::new(),
            on_error: on_purge_error,
        });
    }
    // 12e. Wait for them to go, the HelmRelease still suspended. Ours: the restore deadline
    //      bounds this wait too (a stuck finalizer would otherwise wait forever).
    if remains {
        if elapsed(started, now) > options.restore_timeout {
            if *suspended {
                return ControlFlow::Break(skeleton::resume(release.clone()));
            }
            return ControlFlow::Break(fail(
                status,
                &format!(
                    "purge of cnpg.io Cluster {}/{} did not finish within {} ({} still present; check their finalizers) (override via spec.options.restoreTimeoutSeconds)",
                    t.namespace,
                    t.cluster,
                    go_duration(options.restore_timeout),
                    if o.cluster.is_some() {
                        "the Cluster is"
                    } else {
                        "PersistentVolumeClaims are"
                    }
                ),
                Vec::new(),
                now,
            ));
        }
        return ControlFlow::Break(write_or_wait(
            current,
            status.clone(),
            Vec::new(),
            Some(remaining(started, options.restore_timeout, now)),
        ));
    }
    ControlFlow::Continue(())
}
