//! `apply_conditions` against the API emulator: two field managers own different condition types of
//! one BackupJob and never clobber each other; re-applying an unchanged set does not write.

use api::backups::{BackupJob, BackupJobSpec};
use api::{Condition, ConditionStatus, TypedLocalObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ObjectMeta, PostParams};
use runtime::conditions::apply_conditions;

fn condition(type_: &str, status: ConditionStatus, reason: &str, message: &str) -> Condition {
    Condition::new(
        type_,
        status,
        reason,
        message,
        Time(Timestamp::from_second(1_800_000_000).unwrap()),
    )
}

fn summary(job: &BackupJob) -> Vec<(String, ConditionStatus, String)> {
    let mut list: Vec<_> = job
        .status
        .as_ref()
        .map(|s| {
            s.conditions
                .iter()
                .map(|c| (c.type_.clone(), c.status, c.reason.clone()))
                .collect()
        })
        .unwrap_or_default();
    list.sort_by(|a, b| a.0.cmp(&b.0));
    list
}

#[tokio::test]
async fn two_managers_own_different_conditions_of_one_object() {
    let mut h = harness::Harness::start().await.expect("emulator starts");
    let ns = h.temp_namespace("conditions").await.unwrap();
    let jobs: Api<BackupJob> = Api::namespaced(h.client(), &ns);
    let job = BackupJob {
        metadata: ObjectMeta {
            name: Some("job".into()),
            ..Default::default()
        },
        spec: BackupJobSpec {
            plan_ref: None,
            application_ref: TypedLocalObjectReference::new("apps.cozystack.io", "Postgres", "db"),
            backup_class_name: "cozy-default".into(),
        },
        status: None,
    };
    jobs.create(&PostParams::default(), &job).await.unwrap();

    let projected = condition(
        "CredentialsProjected",
        ConditionStatus::True,
        "Projected",
        "ok",
    );
    apply_conditions(&jobs, "job", "projector", std::slice::from_ref(&projected))
        .await
        .unwrap();
    let ready = condition(
        "Ready",
        ConditionStatus::False,
        "CredentialsProjectionPending",
        "waiting",
    );
    let after = apply_conditions(&jobs, "job", "runner", &[ready])
        .await
        .unwrap();
    assert_eq!(
        summary(&after),
        [
            (
                "CredentialsProjected".into(),
                ConditionStatus::True,
                "Projected".into()
            ),
            (
                "Ready".into(),
                ConditionStatus::False,
                "CredentialsProjectionPending".into()
            ),
        ]
    );

    // Re-applying the same set is a no-op: no new resourceVersion.
    let again = apply_conditions(&jobs, "job", "projector", &[projected])
        .await
        .unwrap();
    assert_eq!(
        again.metadata.resource_version,
        after.metadata.resource_version
    );

    // The projector changes its condition: the runner's Ready is untouched.
    let failed = condition(
        "CredentialsProjected",
        ConditionStatus::False,
        "SourceSecretMissing",
        "gone",
    );
    let changed = apply_conditions(&jobs, "job", "projector", &[failed])
        .await
        .unwrap();
    assert_eq!(
        summary(&changed),
        [
            (
                "CredentialsProjected".into(),
                ConditionStatus::False,
                "SourceSecretMissing".into()
            ),
            (
                "Ready".into(),
                ConditionStatus::False,
                "CredentialsProjectionPending".into()
            ),
        ]
    );

    // Applying an empty set removes only what that manager owned.
    let removed = apply_conditions(&jobs, "job", "projector", &[])
        .await
        .unwrap();
    assert_eq!(
        summary(&removed),
        [(
            "Ready".into(),
            ConditionStatus::False,
            "CredentialsProjectionPending".into()
        )]
    );
    h.cleanup().await.unwrap();
}
