//! After the purge: record it, resume the HelmRelease, succeed on a healthy recovery Cluster, or
//! past the deadline diagnose from the recovery pods' logs.

use api::ConditionStatus;
use api::backups::RestoreJobStatus;
use api::contract::{condition_types, event_reasons, reasons};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value as Json, json};

use super::{
    LogRead, Pass, RECOVERY_CONTAINER, RECOVERY_LOG_TAIL, RECOVERY_PODS, TARGET_NOT_REACHED,
    remaining, set,
};
use crate::cnpg::{self as driver};
use crate::restore::skeleton::{self, fail, failed};
use crate::restore::{Action, Event, OnError, Step, elapsed, write_or_wait};
use crate::status::go_duration;

/// The recovery pods to inspect: those with a `full-recovery` container, newest first, at most 5.
pub fn recovery_pods(pods: &[Json]) -> Vec<String> {
    let mut found: Vec<(Option<Time>, String)> = pods
        .iter()
        .filter(|p| {
            p["spec"]["containers"]
                .as_array()
                .is_some_and(|cs| cs.iter().any(|c| c["name"] == RECOVERY_CONTAINER))
        })
        .map(|p| {
            (
                crate::catalog::time(&p["metadata"]["creationTimestamp"]),
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    found.sort_by(|a, b| {
        b.0.as_ref()
            .map(|t| t.0)
            .cmp(&a.0.as_ref().map(|t| t.0))
            .then(a.1.cmp(&b.1))
    });
    found
        .into_iter()
        .take(RECOVERY_PODS)
        .map(|(_, n)| n)
        .collect()
}

/// The log verdict: the newest pod whose log shows the FATAL, and whether any read was Forbidden.
pub fn classify(logs: &[(String, LogRead)]) -> (Option<String>, bool) {
    let unreachable = logs
        .iter()
        .find(|(_, r)| matches!(r, LogRead::Lines(l) if l.contains(TARGET_NOT_REACHED)))
        .map(|(p, _)| p.clone());
    let forbidden = logs.iter().any(|(_, r)| *r == LogRead::Forbidden);
    (unreachable, forbidden)
}

/// 13–16: the purge recorded once, the HelmRelease resumed on every pass, health before the
/// deadline, then the deadline classified from the recovery logs when a recoveryTime was asked for.
pub(super) fn converge(p: &Pass<'_>, status: &mut RestoreJobStatus) -> Step {
    let Pass {
        o,
        now,
        current,
        started,
        options,
        t,
        release,
        suspended,
        purged,
        recovery,
        ..
    } = p;
    if !purged {
        set(
            status,
            condition_types::TARGET_PURGED,
            ConditionStatus::True,
            reasons::CLUSTER_PURGED,
            &format!(
                "Cluster {}/{} deleted; awaiting chart-rendered re-bootstrap",
                t.namespace, t.cluster
            ),
            now,
        );
        return Step::Status {
            status: status.clone(),
            events: Vec::new(),
            requeue: None,
        };
    }
    // 14. Resume the HelmRelease on every pass that gets here.
    if *suspended {
        return skeleton::resume(release.clone());
    }
    // 15. Health wins over the deadline.
    let healthy = recovery.is_some()
        && o.cluster
            .is_some_and(|c| c["status"]["phase"] == json!(driver::HEALTHY_PHASE));
    if healthy {
        set(
            status,
            condition_types::RECOVERY_CONVERGED,
            ConditionStatus::True,
            reasons::RECOVERY_CONVERGED,
            &format!(
                "target cnpg.io Cluster {}/{} reached a healthy state",
                t.namespace, t.cluster
            ),
            now,
        );
        crate::status::restore_succeeded(
            status,
            Some("target cnpg.io Cluster reached healthy state"),
            now,
        );
        return Step::Status {
            status: status.clone(),
            events: Vec::new(),
            requeue: None,
        };
    }
    // 16. The deadline, classified from the recovery logs when a recoveryTime was asked for.
    if elapsed(started, now) <= options.restore_timeout {
        return write_or_wait(
            current,
            status.clone(),
            Vec::new(),
            Some(remaining(started, options.restore_timeout, now)),
        );
    }
    let deadline = go_duration(options.restore_timeout);
    let rt = &options.recovery_time;
    let (unreachable, forbidden) = if rt.is_empty() {
        (None, false)
    } else {
        match o.logs {
            Some(logs) => classify(logs),
            None => {
                let pods = recovery_pods(o.pods);
                if !pods.is_empty() {
                    return Step::Act {
                        action: Action::ReadLogs {
                            namespace: t.namespace.clone(),
                            pods,
                            container: RECOVERY_CONTAINER,
                            tail_lines: RECOVERY_LOG_TAIL,
                        },
                        events: Vec::new(),
                        on_error: OnError {
                            prefix: "failed to read recovery pod logs",
                            resume: None,
                        },
                    };
                }
                (None, false)
            }
        }
    };
    if let Some(pod) = unreachable {
        let message = format!(
            "point-in-time recovery target {rt} is past the latest WAL archived to object storage: over the {deadline} restore window recovery kept replaying all available WAL without reaching it and PostgreSQL gave up (\"{TARGET_NOT_REACHED}\"; most recent recovery pod: {pod}). Pick a recoveryTime inside the recoverable window - see the PITR docs on discovering the earliest/latest restorable time."
        );
        set(
            status,
            condition_types::RECOVERY_CONVERGED,
            ConditionStatus::False,
            reasons::RECOVERY_TARGET_UNREACHABLE,
            &message,
            now,
        );
        return Step::Status {
            status: failed(status, reasons::RECOVERY_TARGET_UNREACHABLE, &message, now),
            events: Vec::new(),
            requeue: None,
        };
    }
    let mut message = format!(
        "RestoreJob exceeded {deadline} deadline before target Cluster reached a healthy state (override via spec.options.restoreTimeoutSeconds)"
    );
    if !rt.is_empty() {
        message.push_str(&format!(
            "; spec.options.recoveryTime {rt} may be past the recoverable window, or the source may be large enough to need a longer restoreTimeoutSeconds"
        ));
    }
    let mut events = Vec::new();
    if forbidden {
        message.push_str(". NOTE: could not read recovery pod logs to classify this failure - the controller's pods/log RBAC grant appears to be missing, so a RecoveryTargetUnreachable diagnosis was unavailable");
        events.push(Event::warning(
            event_reasons::RECOVERY_CLASSIFICATION_FORBIDDEN,
            format!(
                "cannot read recovery pod logs (pods/log RBAC grant missing); unable to diagnose whether recoveryTime {rt} is past the recoverable window"
            ),
        ));
    }
    fail(status, &message, events, now)
}
