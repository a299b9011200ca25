//! What the end-to-end tests of the operator-object restores share (MariaDB, MongoDB,
//! FoundationDB, Etcd, Velero, Job, Altinity): the emulator, `operator-sims` with the simulated
//! operators under test, the real `credentials-projector` (projecting `cozy-backups-creds` from a
//! hand-made platform bucket Secret), the real `backup-runner` (which takes the Backups the restores
//! read) and the real `restore-orchestrator`; helpers for strategies, routes, applications,
//! BackupJobs, RestoreJobs, their waits and Events; and the closing checks (every API call of the
//! orchestrator allowed by its RBAC, no credential in its log, Events or metrics).
#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use api::backups::{Backup, RestoreJob};
use harness::dataplane::apply;
use harness::{DaemonSpec, Harness, eventually_within};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

/// How long a step may take (daemons start, watches list, a job runs through its driver).
pub const WAIT: Duration = Duration::from_secs(60);
/// The tenant namespace of every test.
pub const TENANT: &str = "tenant-acme";
/// The annotation that makes a simulated operator fail a restore (its value: the operator's word).
pub const FAIL_RESTORE: &str = "operator-sims.cozy-backups.io/fail-restore";
/// The annotation that holds a simulated operator's restore in progress.
pub const HANG_RESTORE: &str = "operator-sims.cozy-backups.io/hang-restore";
/// The annotation that makes a simulated operator (or the Job controller) fail a backup Job.
pub const FAIL: &str = "operator-sims.cozy-backups.io/fail-backup";
/// The annotation that holds a simulated operator's (or the Job controller's) work in progress.
pub const HANG: &str = "operator-sims.cozy-backups.io/hang";
/// The platform bucket's secret key: it must never show up in the orchestrator's output.
const SECRET_KEY: &str = "sEcReTkEyNoBodyMaySeeInALogOrEvent0001";
const ACCESS_KEY: &str = "AKTESTACCESSKEY00001";

fn bin(name: &str) -> std::path::PathBuf {
    harness::locate_binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The platform of one test.
pub struct Platform {
    /// The emulator and the daemons.
    pub h: Harness,
}

/// A permissive CRD for `group/version` `kind` (plural `plural`), for kinds the project has no
/// type for (KubeVirt's, CDI's, a tenant's own application kind).
pub fn crd(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
) -> CustomResourceDefinition {
    let mut crd = api::thirdparty::permissive_crd::<api::thirdparty::apps::Etcd>(true);
    crd.metadata.name = Some(format!("{plural}.{group}"));
    crd.spec.group = group.into();
    crd.spec.names.kind = kind.into();
    crd.spec.names.list_kind = Some(format!("{kind}List"));
    crd.spec.names.plural = plural.into();
    crd.spec.names.singular = Some(kind.to_lowercase());
    crd.spec.names.short_names = None;
    crd.spec.scope = if namespaced { "Namespaced" } else { "Cluster" }.into();
    for v in &mut crd.spec.versions {
        v.name = version.into();
    }
    crd
}

impl Platform {
    /// Starts the emulator (namespaces `tenant-root`, `cozy-velero`, the tenant's and `extra`),
    /// installs `crds`, then `operator-sims --sims=<sims>`, the projector, the runner and the
    /// orchestrator.
    pub async fn start(
        sims: &str,
        extra: &[&str],
        crds: Vec<CustomResourceDefinition>,
    ) -> Platform {
        let mut h = Harness::start().await.unwrap();
        let mut namespaces = vec!["tenant-root", "cozy-velero", TENANT];
        namespaces.extend_from_slice(extra);
        h.create_namespaces(&namespaces).await.unwrap();
        let api: Api<CustomResourceDefinition> = Api::all(h.client());
        for crd in crds {
            api.create(&PostParams::default(), &crd).await.unwrap();
        }
        h.create(
            "tenant-root",
            &api::test_util::source_secret(
                "bucket-cozy-backups-system-credentials",
                "tenant-root",
                &[
                    ("accessKey", ACCESS_KEY),
                    ("secretKey", SECRET_KEY),
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
        h.spawn_ready(
            DaemonSpec::new("credentials-projector", bin("credentials-projector")).args([
                "--source-namespace=tenant-root",
                "--source-name=bucket-cozy-backups-system-credentials",
                "--endpoint=http://seaweedfs-s3.tenant-root.svc:8333",
                "--region=us-east-1",
                "--force-path-style=true",
                "--system-namespaces=cozy-velero",
            ]),
            WAIT,
        )
        .await
        .unwrap();
        h.spawn_ready(
            DaemonSpec::new("backup-runner", bin("backup-runner")).args(["--projection-grace=1s"]),
            WAIT,
        )
        .await
        .unwrap();
        h.spawn_ready(
            DaemonSpec::new("restore-orchestrator", bin("restore-orchestrator")),
            WAIT,
        )
        .await
        .unwrap();
        Platform { h }
    }

    /// A dynamic API of `resource` in `namespace` (or cluster-wide).
    pub fn api(&self, resource: &ApiResource, namespace: Option<&str>) -> Api<DynamicObject> {
        match namespace {
            Some(ns) => Api::namespaced_with(self.h.client(), ns, resource),
            None => Api::all_with(self.h.client(), resource),
        }
    }

    /// Server-side applies `body` (its namespace, if any, from the body).
    pub async fn apply(&self, resource: &ApiResource, body: Value) -> DynamicObject {
        let ns = body["metadata"]["namespace"].as_str().map(str::to_owned);
        apply(&self.api(resource, ns.as_deref()), body).await
    }

    /// The object as JSON, if it exists.
    pub async fn get(
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

    /// The objects of `resource` in `namespace` labelled as owned by RestoreJob `job`, as JSON (a
    /// restore reuses the BackupJob ownership label keys, as upstream does).
    pub async fn restored_by(
        &self,
        resource: &ApiResource,
        namespace: &str,
        job: &str,
    ) -> Vec<Value> {
        let selector = format!("backups.cozystack.io/owned-by.BackupJobName={job}");
        self.api(resource, Some(namespace))
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }

    /// The one object of `resource` in `namespace` RestoreJob `job` made.
    pub async fn one_restored_by(
        &self,
        resource: &ApiResource,
        namespace: &str,
        job: &str,
    ) -> Value {
        let mut all = self.restored_by(resource, namespace, job).await;
        if all.len() != 1 {
            let every = self
                .api(resource, Some(namespace))
                .list(&ListParams::default())
                .await
                .unwrap();
            let jobs = self
                .restores(namespace)
                .list(&ListParams::default())
                .await
                .unwrap();
            panic!(
                "one {} for {job}, not {}: every one: {:?}; the RestoreJobs: {:?}",
                resource.kind,
                all.len(),
                every.items,
                jobs.items
                    .iter()
                    .map(|j| (&j.metadata.name, &j.status))
                    .collect::<Vec<_>>()
            );
        }
        all.remove(0)
    }

    /// Sets (or, with `None`, removes) an annotation.
    pub async fn annotate(
        &self,
        resource: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        key: &str,
        value: Option<&str>,
    ) {
        self.api(resource, namespace)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .unwrap();
    }

    /// A strategy CR of `kind` named `name` with this template.
    pub async fn strategy(&self, resource: &ApiResource, name: &str, template: Value) {
        self.apply(
            resource,
            json!({"apiVersion": "strategy.backups.cozystack.io/v1alpha1", "kind": resource.kind,
                   "metadata": {"name": name}, "spec": {"template": template}}),
        )
        .await;
    }

    /// A BackupClass `name` routing `app_kind` to strategy `strategy_kind`/`strategy`.
    pub async fn class(
        &self,
        name: &str,
        app_kind: &str,
        strategy_kind: &str,
        strategy: &str,
        parameters: &[(&str, &str)],
    ) {
        self.h
            .backup_class(name, app_kind, strategy_kind, strategy, parameters)
            .await;
    }

    /// An application of `kind` (`apps.cozystack.io/v1alpha1`) in the tenant namespace.
    pub async fn app<K: kube::Resource<DynamicType = ()>>(&self, name: &str, spec: Value) {
        let ar = ApiResource::erase::<K>(&());
        self.app_of(&ar, TENANT, name, spec).await;
    }

    /// An application of the kind `resource` in `namespace`.
    pub async fn app_of(&self, resource: &ApiResource, namespace: &str, name: &str, spec: Value) {
        self.apply(
            resource,
            json!({"apiVersion": resource.api_version, "kind": resource.kind,
                   "metadata": {"name": name, "namespace": namespace}, "spec": spec}),
        )
        .await;
    }

    /// Runs BackupJob `name` of `kind`/`app` in `namespace` through `class` to `Succeeded` and
    /// returns the catalog Backup it wrote.
    pub async fn backup(
        &self,
        namespace: &str,
        name: &str,
        kind: &str,
        app: &str,
        class: &str,
    ) -> Backup {
        self.h
            .backup_succeeded(namespace, name, (kind, app), class, WAIT)
            .await
    }

    /// The RestoreJobs of `namespace`.
    pub fn restores(&self, namespace: &str) -> Api<RestoreJob> {
        Api::namespaced(self.h.client(), namespace)
    }

    /// Creates RestoreJob `name` in `namespace` from Backup `backup`, into `target` (`(kind,
    /// name)` in `apps.cozystack.io`; in place when `None`) with `options` (none when null).
    pub async fn restore(
        &self,
        namespace: &str,
        name: &str,
        backup: &str,
        target: Option<(&str, &str)>,
        options: Value,
    ) {
        let mut spec = json!({"backupRef": {"name": backup}});
        if !options.is_null() {
            spec["options"] = options;
        }
        if let Some((kind, app)) = target {
            spec["targetApplicationRef"] =
                json!({"apiGroup": "apps.cozystack.io", "kind": kind, "name": app});
        }
        let job: RestoreJob = serde_json::from_value(json!({
            "apiVersion": "backups.cozystack.io/v1alpha1", "kind": "RestoreJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}))
        .unwrap();
        self.restores(namespace)
            .create(&PostParams::default(), &job)
            .await
            .unwrap();
    }

    /// Waits for RestoreJob `name` to reach a terminal phase.
    /// On a timeout it panics with the job's last status.
    pub async fn terminal(&self, namespace: &str, name: &str) -> RestoreJob {
        let api = self.restores(namespace);
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let job = api.get_opt(name).await.ok().flatten();
            if let Some(j) = job.as_ref().filter(|j| j.is_terminal()) {
                return j.clone();
            }
            if tokio::time::Instant::now() > deadline {
                panic!(
                    "RestoreJob {namespace}/{name} did not finish within {WAIT:?}: {:?}",
                    job.and_then(|j| j.status)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits for RestoreJob `name` to have a Ready condition with `reason` (any phase).
    pub async fn reason(&self, namespace: &str, name: &str, reason: &str) -> RestoreJob {
        let api = self.restores(namespace);
        eventually_within(
            &format!("RestoreJob {name} Ready reason {reason}"),
            WAIT,
            || async {
                let j = api.get_opt(name).await.ok()??;
                (ready(&j)?.0 == reason).then_some(j)
            },
        )
        .await
    }

    /// Waits for `Succeeded` and returns the job (with `startedAt` and `completedAt`).
    pub async fn succeeded(&self, namespace: &str, name: &str) -> RestoreJob {
        let j = self.terminal(namespace, name).await;
        let status = j.status.clone().unwrap();
        assert_eq!(
            status.phase.as_deref(),
            Some("Succeeded"),
            "{name}: {status:?}"
        );
        assert!(
            status.started_at.is_some() && status.completed_at.is_some(),
            "{status:?}"
        );
        j
    }

    /// Waits for `Failed` and returns `(Ready reason, message)`, asserting that the Ready
    /// condition carries the job's message.
    pub async fn failed(&self, namespace: &str, name: &str) -> (String, String) {
        let j = self.terminal(namespace, name).await;
        let status = j.status.clone().unwrap();
        assert_eq!(
            status.phase.as_deref(),
            Some("Failed"),
            "{name}: {status:?}"
        );
        assert!(status.completed_at.is_some(), "{status:?}");
        let message = status.message.unwrap_or_default();
        let (reason, ready_message) = ready(&j).expect("a Ready condition");
        assert_eq!(ready_message, message, "{name}");
        (reason, message)
    }

    /// The Events about RestoreJob `job` in `namespace`: `(type, reason, note)`, oldest first.
    pub async fn events(&self, namespace: &str, job: &str) -> Vec<(String, String, String)> {
        self.h.events_about(namespace, job).await
    }

    /// Waits for an Event about `job` with `reason`; returns `(type, note)`.
    pub async fn event(&self, namespace: &str, job: &str, reason: &str) -> (String, String) {
        eventually_within(&format!("Event {reason} on {job}"), WAIT, || async {
            self.events(namespace, job)
                .await
                .into_iter()
                .find(|(_, r, _)| r == reason)
                .map(|(t, _, note)| (t, note))
        })
        .await
    }

    /// The closing checks: every API call the orchestrator made is allowed by
    /// `deploy/restore-orchestrator/rbac.yaml`, and no credential of the platform bucket reached its
    /// log, the Events of `namespaces` or its metrics; then the platform stops.
    pub async fn finish(mut self, namespaces: &[&str]) {
        harness::rbac::assert_allowed(&self.h.audit(), "restore-orchestrator");
        let mut events = String::new();
        for ns in namespaces {
            let api: Api<k8s_openapi::api::events::v1::Event> =
                Api::namespaced(self.h.client(), ns);
            events.push_str(&format!(
                "{:?}",
                api.list(&Default::default()).await.unwrap().items
            ));
        }
        let daemon = self.h.daemon("restore-orchestrator").unwrap();
        let log = daemon.log();
        let metrics = daemon.admin().await.unwrap().metrics();
        harness::leak::assert_no_leaks(
            &[
                ("orchestrator log", &log),
                ("events", &events),
                ("metrics", metrics.text()),
            ],
            &[SECRET_KEY, ACCESS_KEY],
        );
        self.h
            .assert_no_secret_leaks(&[SECRET_KEY, ACCESS_KEY], &[]);
        self.h.cleanup().await.unwrap();
    }
}

/// The job's Ready condition `(reason, message)`.
pub fn ready(job: &RestoreJob) -> Option<(String, String)> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

/// The job's condition `type_` as `(status, reason, message)`.
pub fn condition(job: &RestoreJob, type_: &str) -> Option<(String, String, String)> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| {
            (
                format!("{:?}", c.status),
                c.reason.clone(),
                c.message.clone(),
            )
        })
}

/// The name of an object as JSON.
pub fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or_default()
}

/// Polls `check` until it returns `Some` (up to [`WAIT`]).
pub async fn eventually<T>(
    p: &Platform,
    what: &str,
    check: impl AsyncFn(&Platform) -> Option<T>,
) -> T {
    eventually_within(what, WAIT, || check(p)).await
}
