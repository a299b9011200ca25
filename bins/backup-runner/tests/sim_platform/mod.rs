//! Shared by the end-to-end tests of the drivers whose operators are simulated (FoundationDB,
//! Velero, MongoDB): the emulator, the selected `operator-sims`, the real `credentials-projector`
//! (projecting `cozy-backups-creds` from the platform bucket's Secret, as upstream does before every
//! dispatch) and the real `backup-runner`; helpers for strategies, routes, jobs, annotations,
//! Events and the catalog (over [`crate::support`], which the test declares next to this module).

#![allow(dead_code)]

use api::backups::BackupJob;
use harness::dataplane::apply;
use harness::{Admin, DaemonSpec, Harness, eventually_within};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::support::{WAIT, bin};

/// The tenant namespace of every test.
pub(crate) const TENANT: &str = "tenant-acme";

/// The platform of one test.
pub(crate) struct Platform {
    /// The harness (emulator and daemons).
    pub(crate) h: Harness,
    /// The runner's admin endpoint.
    pub(crate) runner: Admin,
}

/// The credentials projector as the platform runs it.
pub(crate) fn projector() -> DaemonSpec {
    crate::support::projector("http://seaweedfs-s3.tenant-root.svc:8333")
}

impl Platform {
    /// Starts the emulator (namespaces `tenant-root`, `cozy-velero` and the tenant's),
    /// `operator-sims --sims=<sims>`, the projector and the runner (with `--projection-grace=1s`
    /// and `runner_args`).
    pub(crate) async fn start(sims: &str, runner_args: &[&str]) -> Platform {
        Self::start_in(&["tenant-root", "cozy-velero", TENANT], sims, runner_args).await
    }

    /// [`Platform::start`] with only these namespaces (`tenant-root` and the tenant's among them).
    pub(crate) async fn start_in(
        namespaces: &[&str],
        sims: &str,
        runner_args: &[&str],
    ) -> Platform {
        let mut h = Harness::start().await.unwrap();
        h.create_namespaces(namespaces).await.unwrap();
        h.create(
            "tenant-root",
            &api::test_util::source_secret(
                "bucket-cozy-backups-system-credentials",
                "tenant-root",
                &[
                    ("accessKey", "AKTESTACCESSKEY00001"),
                    ("secretKey", "sEcReTkEyNoBodyMaySeeInALogOrEvent0001"),
                    ("endpoint", "s3.example.com"),
                    ("bucketName", "bucket-cozy-backups"),
                ],
            ),
        )
        .await;
        h.spawn_ready(
            DaemonSpec::new("operator-sims", bin("operator-sims")).args([format!("--sims={sims}")]),
            WAIT,
        )
        .await
        .unwrap();
        h.spawn_ready(projector(), WAIT).await.unwrap();
        let mut args = vec!["--projection-grace=1s".to_owned()];
        args.extend(runner_args.iter().map(|a| (*a).to_owned()));
        let runner = h
            .spawn_ready(
                DaemonSpec::new("backup-runner", bin("backup-runner")).args(args),
                WAIT,
            )
            .await
            .unwrap()
            .admin()
            .await
            .unwrap();
        Platform { h, runner }
    }

    /// A dynamic API of `resource` in `namespace` (or cluster-wide).
    pub(crate) fn api(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
    ) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.h.client(), ns, resource),
            None => Api::all_with(self.h.client(), resource),
        }
    }

    /// Server-side applies `body` (its namespace, if any, from the body).
    pub(crate) async fn apply(&self, resource: &ApiResource, body: Value) -> DynamicObject {
        let ns = body["metadata"]["namespace"].as_str().map(str::to_owned);
        apply(&self.api(resource, ns.as_deref()), body).await
    }

    /// The object as JSON, if it exists.
    pub(crate) async fn get(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        self.api(resource, namespace)
            .get_opt(name)
            .await
            .unwrap()
            .map(|o| serde_json::to_value(o).unwrap())
    }

    /// The objects of `resource` in `namespace` labelled as owned by BackupJob `job`, as JSON.
    pub(crate) async fn owned(
        &self,
        resource: &ApiResource,
        namespace: &str,
        job: &str,
    ) -> Vec<Value> {
        crate::support::owned(&self.api(resource, Some(namespace)), job)
            .await
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }

    /// Every object of `resource` in `namespace`, as JSON.
    pub(crate) async fn list(&self, resource: &ApiResource, namespace: &str) -> Vec<Value> {
        self.api(resource, Some(namespace))
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }

    /// Sets (or, with `None`, removes) an annotation.
    pub(crate) async fn annotate(
        &self,
        resource: &ApiResource,
        namespace: &str,
        name: &str,
        key: &str,
        value: Option<&str>,
    ) {
        self.api(resource, Some(namespace))
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .unwrap();
    }

    /// A strategy CR of `kind` named `name` with this template.
    pub(crate) async fn strategy(&self, resource: &ApiResource, name: &str, template: Value) {
        self.apply(
            resource,
            json!({"apiVersion": "strategy.backups.cozystack.io/v1alpha1", "kind": resource.kind,
                   "metadata": {"name": name}, "spec": {"template": template}}),
        )
        .await;
    }

    /// A BackupClass routing `app_kind` to the platform strategy `strategy_kind`/`strategy`.
    pub(crate) async fn class(
        &self,
        name: &str,
        app_kind: &str,
        strategy_kind: &str,
        strategy: &str,
        parameters: &[(&str, &str)],
    ) {
        crate::support::class(&self.h, name, app_kind, strategy_kind, strategy, parameters).await;
    }

    /// The BackupClasses `name` and `<name>-quick` (a 5 s backup deadline) routing `kind` to the
    /// strategy `kind`/`strategy`.
    pub(crate) async fn classes(&self, name: &str, kind: &str, strategy: &str) {
        self.class(name, kind, kind, strategy, &[]).await;
        self.class(
            &format!("{name}-quick"),
            kind,
            kind,
            strategy,
            &[("backupDeadline", "5s")],
        )
        .await;
    }

    /// Creates BackupJob `name` for `kind`/`app` through `class` in the tenant namespace.
    pub(crate) async fn job(&self, name: &str, kind: &str, app: &str, class: &str) {
        crate::support::backup_job(&self.h, TENANT, name, kind, app, class).await;
    }

    /// The tenant's BackupJobs.
    pub(crate) fn jobs(&self) -> Api<BackupJob> {
        Api::namespaced(self.h.client(), TENANT)
    }

    /// Waits for the job's `Ready` condition to have `reason` (any phase).
    pub(crate) async fn reason(&self, name: &str, reason: &str) -> BackupJob {
        crate::support::reason(&self.jobs(), name, reason, WAIT).await
    }

    /// Waits for the job to wait for strategy `strategy` named by BackupClass `class` (upstream's
    /// words asserted), returning the job.
    pub(crate) async fn strategy_not_ready(
        &self,
        name: &str,
        strategy: &str,
        class: &str,
    ) -> BackupJob {
        crate::support::strategy_not_ready(&self.jobs(), name, strategy, class).await
    }

    /// The projector down: BackupJob `name` for `kind`/`app` through `class` waits for the
    /// credentials projection with nothing of `created` made for it in `namespace`; the projector
    /// back: the job succeeds.
    pub(crate) async fn waits_for_the_projector(
        &mut self,
        name: &str,
        kind: &str,
        app: &str,
        class: &str,
        created: &ApiResource,
        namespace: &str,
    ) {
        self.h.kill("credentials-projector").await.unwrap();
        self.job(name, kind, app, class).await;
        crate::support::projection_pending(&self.jobs(), name).await;
        assert!(self.owned(created, namespace, name).await.is_empty());
        self.h.restart("credentials-projector", WAIT).await.unwrap();
        let job = self.succeeded(name).await;
        // The wait is over: no driver, not even Velero's (which writes no Ready condition of its
        // own), leaves the job saying it waits for the projector.
        assert_ne!(
            crate::support::ready(&job).map(|c| c.reason),
            Some("CredentialsProjectionPending".to_owned()),
            "{:?}",
            job.status
        );
    }

    /// Waits for a terminal phase.
    pub(crate) async fn terminal(&self, name: &str) -> BackupJob {
        crate::support::terminal(&self.jobs(), name, WAIT).await
    }

    /// Waits for `Succeeded`, panicking with the job's status if it failed.
    pub(crate) async fn succeeded(&self, name: &str) -> BackupJob {
        let job = self.terminal(name).await;
        let status = job.status.clone().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
        job
    }

    /// Waits for `Failed` and returns the job's message.
    pub(crate) async fn failed(&self, name: &str) -> String {
        let job = self.terminal(name).await;
        let status = job.status.clone().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Failed"), "{status:?}");
        status.message.unwrap_or_default()
    }

    /// The catalog Backup `name`: `metadata` reduced to name and namespace (after asserting it has
    /// no ownerReferences and no labels), `spec` and `status` whole.
    pub(crate) async fn catalog(&self, name: &str) -> Value {
        let backup: api::backups::Backup = Api::namespaced(self.h.client(), TENANT)
            .get(name)
            .await
            .unwrap();
        assert!(
            backup.metadata.owner_references.is_none(),
            "a Backup outlives its job"
        );
        assert!(backup.metadata.labels.is_none(), "a Backup has no labels");
        let mut v = serde_json::to_value(&backup).unwrap();
        v["metadata"] =
            json!({"name": backup.metadata.name, "namespace": backup.metadata.namespace});
        v
    }

    /// The Events about the job `(type, reason, note)`, oldest first.
    pub(crate) async fn events(&self, job: &str) -> Vec<(String, String, String)> {
        self.h.events_about(TENANT, job).await
    }

    /// Waits for an Event about the job with `reason`, returning its note.
    pub(crate) async fn event(&self, job: &str, reason: &str) -> String {
        eventually_within(&format!("Event {reason} on {job}"), WAIT, || async {
            self.events(job)
                .await
                .into_iter()
                .find(|(_, r, _)| r == reason)
                .map(|(_, _, note)| note)
        })
        .await
    }

    /// Asserts that every API call the runner made is allowed by `deploy/backup-runner/rbac.yaml`.
    pub(crate) fn assert_rbac(&self) {
        harness::rbac::assert_allowed(&self.h.audit(), "backup-runner");
    }

    /// Asserts that every API call the runner made is allowed by `deploy/backup-runner/rbac.yaml`,
    /// and that no credential of the platform bucket reached the runner's log, the job's Events or
    /// the metrics.
    pub(crate) async fn assert_clean(&mut self, job: &str) {
        harness::rbac::assert_allowed(&self.h.audit(), "backup-runner");
        let events = format!("{:?}", self.events(job).await);
        let log = self.h.daemon("backup-runner").unwrap().log();
        harness::leak::assert_no_leaks(
            &[
                ("runner log", &log),
                ("events", &events),
                ("metrics", self.runner.metrics().text()),
            ],
            &[
                "sEcReTkEyNoBodyMaySeeInALogOrEvent0001",
                "AKTESTACCESSKEY00001",
            ],
        );
        self.h.assert_no_secret_leaks(
            &[
                "sEcReTkEyNoBodyMaySeeInALogOrEvent0001",
                "AKTESTACCESSKEY00001",
            ],
            &[],
        );
    }
}

/// An RFC 3339 time of the job's status.
pub(crate) fn time(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    t.as_ref().expect("a time").0.to_string()
}
