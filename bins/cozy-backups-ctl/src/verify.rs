//! `verify BACKUP [--wait]`: asks the restore-orchestrator for one restore drill of a Backup now
//! (the annotation `backups.cozystack.io/verify-requested`, docs/drills.md) and, with `--wait`,
//! follows the Backup until the drill's result is recorded.

use std::io::Write;
use std::time::Duration;

use anyhow::Context as _;
use api::backups::Backup;
use api::contract::{drills, phases};
use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::{Exit, exit};

/// The drill's outcome as recorded on the Backup, if it was recorded at or after `since`.
fn recorded(b: &Backup, since: Timestamp) -> Option<(String, String)> {
    if b.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(drills::REQUEST_ANNOTATION))
    {
        return None;
    }
    let v = b.status.as_ref()?.verification.as_ref()?;
    let at = v.last_verified_at.as_ref()?.0;
    (at.as_second() >= since.as_second()).then(|| {
        (
            v.result.clone().unwrap_or_default(),
            v.message.clone().unwrap_or_default(),
        )
    })
}

/// Requests the drill; with `wait`, follows it until the result is recorded or `timeout` passes.
pub async fn verify(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    wait: bool,
    timeout: Duration,
    now: Timestamp,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let api: Api<Backup> = Api::namespaced(client.clone(), namespace);
    let backup = api
        .get_opt(name)
        .await
        .map_err(crate::platform_error::<Backup>)
        .with_context(|| format!("get Backup {namespace}/{name}"))?
        .ok_or_else(|| Exit::not_found(format!("Backup {namespace}/{name} not found")))?;
    let phase = backup.status.as_ref().and_then(|s| s.phase.clone());
    if phase.as_deref() != Some(phases::READY) {
        anyhow::bail!(
            "Backup {namespace}/{name} is not Ready (phase {}): only a Ready Backup can be verified",
            phase.as_deref().unwrap_or("none")
        );
    }
    let patch = json!({"metadata": {"annotations": {drills::REQUEST_ANNOTATION: now.to_string()}}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("annotate Backup {namespace}/{name}"))?;
    writeln!(
        out,
        "backup.backups.cozystack.io/{name}: restore drill requested"
    )?;
    if !wait {
        return Ok(());
    }
    out.flush()?;
    let mut stream = kube::runtime::watcher::watch_object(api, name).boxed();
    let follow = async {
        while let Some(event) = stream.next().await {
            let Some(b) = event.with_context(|| format!("watch Backup {namespace}/{name}"))? else {
                anyhow::bail!("Backup {namespace}/{name} was deleted while its drill ran");
            };
            if let Some((result, message)) = recorded(&b, now) {
                writeln!(
                    out,
                    "backup.backups.cozystack.io/{name}: {result}: {message}"
                )?;
                if result == drills::PASSED {
                    return Ok(());
                }
                return Err(Exit {
                    code: exit::JOB_FAILED,
                    message: format!(
                        "the restore drill of Backup {namespace}/{name} failed: {message}"
                    ),
                }
                .into());
            }
        }
        anyhow::bail!("the watch of Backup {namespace}/{name} ended")
    };
    match tokio::time::timeout(timeout, follow).await {
        Ok(result) => result,
        Err(_) => Err(Exit {
            code: exit::TIMED_OUT,
            message: format!(
                "the restore drill of Backup {namespace}/{name} is not finished after --timeout {}; it goes on in the cluster",
                drivers::status::go_duration(timeout)
            ),
        }
        .into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use api::backups::{BackupStatus, BackupVerification};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn only_a_result_recorded_after_the_request_answers_it() {
        let mut b = Backup::test("b").build();
        let since = at("2026-01-02T00:00:00Z");
        assert_eq!(recorded(&b, since), None);
        b.status = Some(BackupStatus {
            verification: Some(BackupVerification {
                last_verified_at: Some(Time(at("2026-01-01T00:00:00Z"))),
                result: Some("Passed".into()),
                message: Some("old".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(recorded(&b, since), None, "an earlier drill's result");
        b.status
            .as_mut()
            .unwrap()
            .verification
            .as_mut()
            .unwrap()
            .last_verified_at = Some(Time(at("2026-01-02T00:05:00Z")));
        assert_eq!(recorded(&b, since), Some(("Passed".into(), "old".into())));
        b.metadata.annotations =
            Some([(drills::REQUEST_ANNOTATION.to_owned(), "x".to_owned())].into());
        assert_eq!(recorded(&b, since), None, "the request is still pending");
    }
}
