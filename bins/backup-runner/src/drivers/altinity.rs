//! The Altinity driver's backup path (clickhouse-backup for ClickHouse applications): the Job
//! driver's mechanics ([`super::job`]) behind a gate on the application kind, waiting for its
//! strategy like the other drivers.
//!
//! ```text
//!  app ref ClickHouse? ─► startedAt + phase Running (first pass only) ─► Altinity strategy
//!  (StrategyNotReady, 30 min) ─► batch Job <job>-backup (ClickHouse app missing: Failed)
//!  ─► Complete ─► catalog Backup + Succeeded │ Failed ─► Failed │ otherwise wait (backup deadline)
//! ```

use std::ops::ControlFlow;

use drivers::job as d;

use super::job::{Observed, decide_batch, observe};
use super::{Run, Step};
use crate::context::{Context, Error};

/// Cache label of ClickHouse applications.
pub const APPS: &str = "apps.ClickHouse";

/// One step of the driver.
pub async fn step(ctx: &Context, run: &Run<'_>) -> Result<Step, Error> {
    if let Err(message) = drivers::altinity::validate_app_ref(&run.job.spec.application_ref) {
        return Ok(run.fail(message));
    }
    let o = observe(ctx, run, "Altinity", &d::ALTINITY).await?;
    Ok(decide(run, &o))
}

/// The pure decision.
pub fn decide(run: &Run<'_>, o: &Observed) -> Step {
    if let ControlFlow::Break(step) = run.opening(
        drivers::altinity::validate_app_ref,
        true,
        o.template.as_ref(),
    ) {
        return step;
    }
    decide_batch(run, o, &d::ALTINITY, || {
        format!(
            "ClickHouse application not found: {}/{}",
            run.namespace(),
            run.job.spec.application_ref.name
        )
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use pretty_assertions::assert_eq;
    use serde_json::json;

    use super::*;
    use crate::drivers::job::App;
    use crate::drivers::testkit::{Fixture, summary};

    fn observed() -> Observed {
        Observed {
            template: Some(
                json!({"spec": {"containers": [{"name": "clickhouse-backup", "image": "altinity/clickhouse-backup:2",
                "args": ["create_remote", "{{ .Release.Name }}-{{ .Mode }}"]}]}}),
            ),
            batch_job: None,
            app: App::Found(json!({"metadata": {"name": "events"}, "spec": {}})),
        }
    }

    #[test]
    fn gate_strategy_and_application() {
        let wrong = Fixture::new("Postgres", "db", "Altinity", &[]);
        assert_eq!(
            summary(&decide(&wrong.run(None), &observed())),
            (
                Some("Failed".into()),
                "BackupFailed".into(),
                "altinity strategy supports applicationRef.kind=\"ClickHouse\", got \"Postgres\""
                    .into()
            )
        );
        let fresh = Fixture::new("ClickHouse", "events", "Altinity", &[]);
        let first = decide(&fresh.run(None), &observed());
        assert_eq!(summary(&first).0.as_deref(), Some("Running"));
        let f = Fixture::new("ClickHouse", "events", "Altinity", &[("bucket", "b")])
            .started(Duration::from_secs(5), Some("Running"));
        let run = f.run(None);
        assert_eq!(
            summary(&decide(
                &run,
                &Observed {
                    template: None,
                    ..observed()
                }
            ))
            .1,
            "StrategyNotReady",
            "unlike the Job driver, Altinity waits for its strategy"
        );
        assert_eq!(
            summary(&decide(
                &run,
                &Observed {
                    app: App::Missing,
                    ..observed()
                }
            ))
            .2,
            "ClickHouse application not found: tenant-a/events"
        );
        let Step::Create { body, .. } = decide(&run, &observed()) else {
            panic!("expected the batch Job");
        };
        assert_eq!(
            body["metadata"]["labels"]["altinity.strategy.backups.cozystack.io/mode"],
            "backup"
        );
        assert_eq!(
            body["spec"]["template"]["spec"]["containers"][0]["args"][1],
            "events-backup"
        );
        let done = Observed {
            batch_job: Some(json!({"metadata": {"name": "nightly-backup"},
                "status": {"conditions": [{"type": "Complete", "status": "True"}]}})),
            app: App::NotNeeded,
            ..observed()
        };
        let step = decide(&run, &done);
        assert_eq!(summary(&step).2, "clickhouse-backup Job completed");
        let Step::Complete { backup, .. } = step else {
            unreachable!()
        };
        assert_eq!(
            serde_json::to_value(backup.as_ref()).unwrap()["spec"]["driverMetadata"],
            json!({"altinity.strategy.backups.cozystack.io/parameter/bucket": "b"})
        );
        let failed = Observed {
            batch_job: Some(json!({"metadata": {"name": "nightly-backup"},
                "status": {"conditions": [{"type": "Failed", "status": "True"}]}})),
            app: App::NotNeeded,
            ..observed()
        };
        assert_eq!(
            summary(&decide(&run, &failed)).2,
            "clickhouse-backup Job reported Failed"
        );
    }
}
