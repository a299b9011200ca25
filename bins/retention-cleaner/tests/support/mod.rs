//! What the retention-cleaner's end-to-end tests share: an emulator with the tenant namespace (and
//! any third-party CRDs a test needs), the real `retention-cleaner` binary, builders for Plans and
//! their slot-named Backups, failed BackupJobs and Backups (their status written through the status
//! subresource, as the backup-runner would), RestoreJobs, and the readings a test asserts on: the
//! objects left, the Events, the sweep metrics and the cleaner's deletes in the audit log.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeSet;
use std::time::Duration;

use api::LocalObjectReference;
use api::backups::{Backup, BackupJob, Plan, RestoreJob, RetentionPolicy};
use chrono::{DateTime, Utc};
use harness::{Audit, DaemonSpec, Harness, Metrics};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The component (binary, user agent prefix, RBAC directory).
pub const COMPONENT: &str = "retention-cleaner";
/// The tenant namespace of every test.
pub const NS: &str = "tenant-retention";
/// How long a daemon may take to become ready.
pub const READY: Duration = Duration::from_secs(60);
/// Sweep passes (the runtime's reconcile counter of the `sweep` loop).
pub const RUNS: &str = "cozy_backups_retention_cleaner_reconcile_runs_total";

/// An emulator with [`NS`] and `crds` installed.
pub async fn start(crds: Vec<CustomResourceDefinition>) -> Harness {
    let h = Harness::start().await.expect("harness");
    h.create_namespaces(&[NS]).await.expect("namespace");
    let api: Api<CustomResourceDefinition> = Api::all(h.client());
    for crd in crds {
        api.create(&PostParams::default(), &crd)
            .await
            .expect("create CRD");
    }
    h
}

/// The operators' kinds a failed BackupJob may leave behind (the cleaner lists each before the job
/// goes), as a cluster with those operators installed serves them. Installed by the tests that
/// delete failed BackupJobs: the emulator records a request to a kind it does not serve as a `get`
/// of the collection, which the RBAC check would (wrongly) flag instead of the `list` it is.
pub fn leftover_crds() -> Vec<CustomResourceDefinition> {
    use api::thirdparty::{cnpg, etcd, mariadb, percona, permissive_crd, velero};
    vec![
        permissive_crd::<cnpg::Backup>(true),
        permissive_crd::<mariadb::Backup>(true),
        permissive_crd::<etcd::EtcdSnapshot>(true),
        permissive_crd::<percona::PerconaServerMongoDBBackup>(true),
        permissive_crd::<velero::Backup>(true),
        permissive_crd::<velero::DeleteBackupRequest>(true),
    ]
}

/// Spawns the cleaner with a short debounce and `args`, waiting until it is ready.
pub async fn spawn_cleaner(h: &mut Harness, args: &[&str]) {
    let bin = harness::locate_binary(COMPONENT).unwrap_or_else(|e| panic!("{e}"));
    let spec = DaemonSpec::new(COMPONENT, bin)
        .args(["--debounce=200ms", "--lease-endpoint=none"])
        .args(args.iter().copied());
    h.spawn_ready(spec, READY).await.expect("cleaner ready");
}

/// The cleaner's metrics now.
pub async fn metrics(h: &mut Harness) -> Metrics {
    h.metrics_of(COMPONENT)
        .await
        .expect("the cleaner's metrics")
}

/// Completed sweep passes so far.
pub async fn sweeps(h: &mut Harness) -> f64 {
    metrics(h).await.value(RUNS, &[("controller", "sweep")])
}

/// Waits until at least `n` sweep passes have completed.
pub async fn wait_sweeps(h: &mut Harness, n: f64) {
    let deadline = tokio::time::Instant::now() + harness::DEADLINE;
    loop {
        let done = sweeps(h).await;
        if done >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {n} sweeps (saw {done})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A Kubernetes time.
pub fn time(t: DateTime<Utc>) -> Time {
    Time(t.to_rfc3339().parse().expect("rfc3339"))
}

/// RFC 3339 with seconds, as a status field carries it.
pub fn rfc3339(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `t` truncated to the minute (slots are whole minutes).
pub fn minute(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp().div_euclid(60) * 60, 0).expect("a valid minute")
}

/// The name Plan `plan` gives the job (and Backup) of the slot at `t`: `<plan>-<unix minutes>`.
pub fn slot_name(plan: &str, t: DateTime<Utc>) -> String {
    let name = format!("{plan}-{}", t.timestamp().div_euclid(60));
    assert!(
        retention::attribution::is_slot_name(plan, &name),
        "{name} is a slot name of {plan}"
    );
    name
}

/// A keepLast policy.
pub fn keep_last(n: i32) -> RetentionPolicy {
    RetentionPolicy {
        keep_last: Some(n),
        ..Default::default()
    }
}

/// Creates Plan `name` of `Postgres/db` with `policy`.
pub async fn plan(h: &Harness, name: &str, policy: Option<RetentionPolicy>) -> Plan {
    let mut p = Plan::test(name, "0 2 * * *").build();
    p.spec.retention_policy = policy;
    h.create(NS, &p).await
}

/// Creates a successful (`Ready`) Backup of `Postgres/db` from Plan `plan`'s slot at `taken`.
pub async fn ok_backup(h: &Harness, plan: &str, taken: DateTime<Utc>) -> String {
    let taken = minute(taken);
    let name = slot_name(plan, taken);
    let mut b = Backup::test(&name).build();
    b.spec.plan_ref = Some(LocalObjectReference::new(plan));
    b.spec.taken_at = time(taken);
    h.create(NS, &b).await;
    backup_status(h, &name, json!({"phase": "Ready"})).await;
    name
}

/// `n` successful Backups of `plan`, one an hour, the newest an hour ago; newest first.
pub async fn ok_backups(h: &Harness, plan: &str, n: i64) -> Vec<String> {
    let now = Utc::now();
    let mut names = Vec::new();
    for i in 1..=n {
        names.push(ok_backup(h, plan, now - chrono::Duration::hours(i)).await);
    }
    names
}

/// Writes a Backup's status (the Backup CRD has no status subresource: the backup-runner writes
/// it with the object).
pub async fn backup_status(h: &Harness, name: &str, status: serde_json::Value) {
    Api::<Backup>::namespaced(h.client(), NS)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": status })),
        )
        .await
        .unwrap_or_else(|e| panic!("status of Backup {name}: {e}"));
}

/// Deletes a catalog Backup as a user would.
pub async fn delete_backup(h: &Harness, name: &str) {
    Api::<Backup>::namespaced(h.client(), NS)
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("delete Backup {name}: {e}"));
}

/// Creates a failed Backup `name` (no Plan) whose Ready condition says `message`.
pub async fn failed_backup(h: &Harness, name: &str, message: &str) {
    h.create(NS, &Backup::test(name).build()).await;
    backup_status(
        h,
        name,
        json!({"phase": "Failed", "conditions": [{
            "type": "Ready", "status": "False", "reason": "BackupFailed", "message": message,
            "lastTransitionTime": rfc3339(Utc::now()),
        }]}),
    )
    .await;
}

/// Creates BackupJob `name` of `Postgres/db` (from Plan `plan`, if any) that failed with
/// `message` at `completed`.
pub async fn failed_job(
    h: &Harness,
    name: &str,
    plan: Option<&str>,
    completed: DateTime<Utc>,
    message: &str,
) {
    let mut b = BackupJob::test(name);
    if let Some(p) = plan {
        b = b.plan(p);
    }
    h.create(NS, &b.build()).await;
    Api::<BackupJob>::namespaced(h.client(), NS)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {
                "phase": "Failed",
                "startedAt": rfc3339(completed - chrono::Duration::minutes(10)),
                "completedAt": rfc3339(completed),
                "message": message,
            }})),
        )
        .await
        .unwrap_or_else(|e| panic!("status of BackupJob {name}: {e}"));
}

/// Creates RestoreJob `name` of Backup `backup` (status unset: not terminal).
pub async fn restore(h: &Harness, name: &str, backup: &str) {
    h.create(NS, &RestoreJob::test(name, backup).build()).await;
}

/// Sets a RestoreJob's status phase.
pub async fn restore_phase(h: &Harness, name: &str, phase: &str) {
    Api::<RestoreJob>::namespaced(h.client(), NS)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": phase}})),
        )
        .await
        .unwrap_or_else(|e| panic!("status of RestoreJob {name}: {e}"));
}

/// The names of the Backups in [`NS`].
pub async fn backups(h: &Harness) -> BTreeSet<String> {
    Api::<Backup>::namespaced(h.client(), NS)
        .list(&ListParams::default())
        .await
        .expect("list Backups")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect()
}

/// The names of the BackupJobs in [`NS`].
pub async fn jobs(h: &Harness) -> BTreeSet<String> {
    Api::<BackupJob>::namespaced(h.client(), NS)
        .list(&ListParams::default())
        .await
        .expect("list BackupJobs")
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect()
}

/// Events in [`NS`] regarding an object named `regarding` with `reason`, oldest first.
pub async fn events(h: &Harness, regarding: &str, reason: &str) -> Vec<Event> {
    let mut out: Vec<Event> = Api::<Event>::namespaced(h.client(), NS)
        .list(&ListParams::default())
        .await
        .expect("list Events")
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(regarding)
        })
        .collect();
    out.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
    out
}

/// Waits for an Event about `regarding` with `reason` whose note passes `matches`.
pub async fn wait_event(
    h: &Harness,
    regarding: &str,
    reason: &str,
    matches: impl Fn(&str) -> bool,
) -> Event {
    harness::eventually(&format!("{reason} Event about {regarding}"), || async {
        events(h, regarding, reason)
            .await
            .into_iter()
            .find(|e| matches(e.note.as_deref().unwrap_or_default()))
    })
    .await
}

/// The name of an Event's related object.
pub fn related(e: &Event) -> Option<&str> {
    e.related.as_ref().and_then(|r| r.name.as_deref())
}

/// The note of an Event.
pub fn note(e: &Event) -> &str {
    e.note.as_deref().unwrap_or_default()
}

/// Delete requests the cleaner made on `resource` in group `group`: `(name, succeeded)`, in order.
pub fn cleaner_deletes(audit: &Audit, group: &str, resource: &str) -> Vec<(String, bool)> {
    audit
        .requests
        .iter()
        .filter(|r| {
            r.verb == "delete"
                && r.group == group
                && r.resource == resource
                && r.user_agent.starts_with(&format!("{COMPONENT}/"))
        })
        .map(|r| (r.name.clone().unwrap_or_default(), r.succeeded()))
        .collect()
}

/// Successful deletes of catalog objects (Backups and BackupJobs) by the cleaner, in order.
pub fn catalog_deletes(audit: &Audit) -> Vec<String> {
    let group = "backups.cozystack.io";
    let mut out: Vec<String> = cleaner_deletes(audit, group, "backupjobs")
        .into_iter()
        .chain(cleaner_deletes(audit, group, "backups"))
        .filter(|(_, ok)| *ok)
        .map(|(n, _)| n)
        .collect();
    out.sort();
    out
}

/// The closing check of every test: the RBAC allows every call the cleaner made.
pub fn assert_rbac(h: &Harness) {
    harness::rbac::assert_allowed(&Audit::parse(&h.audit_log()), COMPONENT);
}
