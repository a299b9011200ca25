//! The platform the operator-driver end-to-end tests run on (MariaDB, Etcd, Job, Altinity): the
//! real `backup-runner`, `strategy-renderer` and `credentials-projector` binaries, and
//! `operator-sims` with the COSI provisioner (the platform bucket and its credentials Secret) plus
//! the simulated operators under test; the application CRDs a tenant's apps need; and the waits
//! the tests share.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::time::Duration;

use api::backups::{Backup, BackupClass, BackupJob};
use harness::dataplane::apply;
use harness::{Admin, DaemonSpec, Harness, eventually_within};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

/// How long a step may take (daemons start, watches list, a job runs through its driver).
pub const WAIT: Duration = Duration::from_secs(60);
/// The annotation that makes a simulated operator fail a backup.
pub const FAIL: &str = "operator-sims.cozy-backups.io/fail-backup";
/// The annotation that makes a simulated operator hold a backup where it is.
pub const HANG: &str = "operator-sims.cozy-backups.io/hang";

/// A built binary of the workspace.
pub fn bin(name: &str) -> PathBuf {
    harness::locate_binary(name).unwrap_or_else(|e| panic!("{e}"))
}

/// The running platform.
pub struct Platform {
    /// The emulator and the daemons.
    pub h: Harness,
    /// The (first) runner's admin server.
    pub runner: Admin,
    /// Every runner's name and admin server.
    pub runners: Vec<(String, Admin)>,
}

impl Platform {
    /// Starts the platform with `namespaces` for tenants, the simulators `sims` (besides COSI) and
    /// the runner with `runner_args`; the credentials projector only when `projector`.
    pub async fn start(
        namespaces: &[&str],
        sims: &str,
        runner_args: &[&str],
        projector: bool,
    ) -> Platform {
        let runner = DaemonSpec::new("backup-runner", bin("backup-runner"))
            .args(runner_args.iter().copied());
        Self::start_with(
            namespaces,
            sims,
            async |_: &mut Harness| vec![runner],
            projector,
        )
        .await
    }

    /// As [`Platform::start`], with the runners `runners` returns (given the harness, e.g. to start
    /// a lease server first).
    pub async fn start_with(
        namespaces: &[&str],
        sims: &str,
        runners: impl AsyncFnOnce(&mut Harness) -> Vec<DaemonSpec>,
        projector: bool,
    ) -> Platform {
        let mut h = Harness::start().await.unwrap();
        let mut all = vec!["tenant-root", "cozy-velero", "cozy-backup-controller"];
        all.extend_from_slice(namespaces);
        h.create_namespaces(&all).await.unwrap();
        install_app_crds(&h).await;
        h.spawn_dataplane(&format!("cosi,{sims}"), &["--cosi-delay-ms=10"])
            .await
            .unwrap();
        h.spawn_ready(
            DaemonSpec::new("strategy-renderer", bin("strategy-renderer"))
                .args(["--endpoint=http://s3.cozy.local"]),
            WAIT,
        )
        .await
        .unwrap();
        if projector {
            h.spawn_ready(projector_spec(), WAIT).await.unwrap();
        }
        let mut admins = Vec::new();
        for spec in runners(&mut h).await {
            let name = spec.name.clone();
            let admin = h
                .spawn_ready(spec, WAIT)
                .await
                .unwrap()
                .admin()
                .await
                .unwrap();
            admins.push((name, admin));
        }
        Platform {
            h,
            runner: admins[0].1.clone(),
            runners: admins,
        }
    }

    /// Starts the credentials projector (when the platform started without it).
    pub async fn start_projector(&mut self) {
        self.h.spawn_ready(projector_spec(), WAIT).await.unwrap();
    }

    /// The BackupJobs of `ns`.
    pub fn jobs(&self, ns: &str) -> Api<BackupJob> {
        Api::namespaced(self.h.client(), ns)
    }

    /// Creates BackupJob `name` in `ns` for `kind`/`app` through `class`.
    pub async fn backup(&self, ns: &str, name: &str, kind: &str, app: &str, class: &str) {
        let job = BackupJob::test(name)
            .for_app(kind, app)
            .class(class)
            .build();
        self.h.create(ns, &job).await;
    }

    /// Waits for the job's Ready condition to have `reason`, returning the job.
    pub async fn reason(&self, ns: &str, name: &str, reason: &str) -> BackupJob {
        eventually_within(
            &format!("BackupJob {ns}/{name} Ready reason {reason}"),
            WAIT,
            || async {
                let j = self.jobs(ns).get_opt(name).await.ok()??;
                (ready(&j)?.reason == reason).then_some(j)
            },
        )
        .await
    }

    /// Waits for a terminal phase.
    pub async fn terminal(&self, ns: &str, name: &str) -> BackupJob {
        eventually_within(&format!("BackupJob {ns}/{name} terminal"), WAIT, || async {
            let j = self.jobs(ns).get_opt(name).await.ok()??;
            api::contract::phases::is_terminal(j.status.as_ref()?.phase.as_deref()).then_some(j)
        })
        .await
    }

    /// Waits for the job to fail and returns its message (asserting the Ready condition says the
    /// same).
    pub async fn failed(&self, ns: &str, name: &str) -> String {
        let j = self.terminal(ns, name).await;
        let status = j.status.clone().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Failed"), "{status:?}");
        let r = ready(&j).unwrap();
        assert_eq!(r.reason, "BackupFailed");
        let message = status.message.unwrap();
        assert_eq!(r.message, message);
        message
    }

    /// Waits for the job to succeed with `ready_message`, and returns it with its catalog Backup.
    pub async fn succeeded(
        &self,
        ns: &str,
        name: &str,
        ready_message: &str,
    ) -> (BackupJob, Backup) {
        let j = self.terminal(ns, name).await;
        let status = j.status.clone().unwrap();
        assert_eq!(status.phase.as_deref(), Some("Succeeded"), "{status:?}");
        assert_eq!(status.backup_ref.as_ref().unwrap().name, name);
        assert!(status.started_at.is_some() && status.completed_at.is_some());
        let r = ready(&j).unwrap();
        assert_eq!(
            (r.reason.as_str(), r.message.as_str()),
            ("BackupCompleted", ready_message)
        );
        let backup: Backup = Api::namespaced(self.h.client(), ns)
            .get(name)
            .await
            .unwrap();
        assert!(
            backup.metadata.owner_references.is_none(),
            "a Backup outlives its job"
        );
        assert!(backup.metadata.labels.is_none());
        (j, backup)
    }

    /// A BackupClass `name` routing `app_kind` to strategy `kind`/`strategy` with `parameters`.
    pub async fn class(
        &self,
        name: &str,
        app_kind: &str,
        kind: &str,
        strategy: &str,
        parameters: &[(&str, &str)],
    ) {
        let class = BackupClass::test(name)
            .route_to(
                app_kind,
                api::contract::groups::STRATEGY,
                kind,
                strategy,
                parameters,
            )
            .build();
        self.h.create_cluster(&class).await;
    }

    /// Server-side applies strategy `kind`/`name` with `template`.
    pub async fn strategy<K: kube::Resource<DynamicType = ()>>(&self, name: &str, template: Value) {
        let ar = ApiResource::erase::<K>(&());
        let api: Api<DynamicObject> = Api::all_with(self.h.client(), &ar);
        apply(
            &api,
            json!({"apiVersion": ar.api_version, "kind": ar.kind,
                   "metadata": {"name": name}, "spec": {"template": template}}),
        )
        .await;
    }

    /// The platform strategy of kind `K` (`cozy-default-…`) once the renderer has written it.
    pub async fn platform_strategy<K: kube::Resource<DynamicType = ()>>(
        &self,
        name: &str,
    ) -> Value {
        let api: Api<DynamicObject> = Api::all_with(self.h.client(), &ApiResource::erase::<K>(&()));
        eventually_within(&format!("strategy {name}"), WAIT, || async {
            api.get_opt(name).await.ok()?.map(|o| o.data)
        })
        .await
    }

    /// Server-side applies a namespaced object of kind `K` in `ns`.
    pub async fn put<K: kube::Resource<DynamicType = ()>>(
        &self,
        ns: &str,
        body: Value,
    ) -> DynamicObject {
        apply(&self.h.dynamic::<K>(ns), body).await
    }

    /// Sets (or with `None` removes) an annotation on `K` `ns/name`.
    pub async fn annotate<K: kube::Resource<DynamicType = ()>>(
        &self,
        ns: &str,
        name: &str,
        key: &str,
        value: Option<&str>,
    ) {
        self.h
            .dynamic::<K>(ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {key: value}}})),
            )
            .await
            .unwrap();
    }

    /// The objects of `K` in `ns` labelled as owned by BackupJob `job`.
    pub async fn owned<K: kube::Resource<DynamicType = ()>>(
        &self,
        ns: &str,
        job: &str,
    ) -> Vec<DynamicObject> {
        let selector = format!("backups.cozystack.io/owned-by.BackupJobName={job}");
        self.h
            .dynamic::<K>(ns)
            .list(&kube::api::ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
    }

    /// No credential value of the projected Secret in `ns` reached the runner's log, the job
    /// Events (`kubectl describe`) or the metrics; and every API call the runner made is allowed by
    /// `deploy/backup-runner/rbac.yaml`.
    pub async fn assert_clean(&mut self, ns: &str, job: &str) {
        harness::rbac::assert_allowed(&self.h.audit(), "backup-runner");
        let creds = self
            .h
            .secret_data(ns, api::contract::names::CREDENTIALS_SECRET)
            .await
            .expect("the projected credentials");
        let described = self.h.kubectl(&["-n", ns, "describe", "backupjob", job]);
        let log = self.h.daemon("backup-runner").unwrap().log();
        let metrics = self.runner.metrics();
        harness::leak::assert_no_leaks(
            &[
                ("runner log", &log),
                ("describe", &described),
                ("metrics", metrics.text()),
            ],
            &[&creds["AWS_SECRET_ACCESS_KEY"], &creds["AWS_ACCESS_KEY_ID"]],
        );
    }
}

/// The job's Ready condition.
pub fn ready(job: &BackupJob) -> Option<api::Condition> {
    job.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Ready")
        .cloned()
}

fn projector_spec() -> DaemonSpec {
    DaemonSpec::new("credentials-projector", bin("credentials-projector")).args([
        "--source-namespace=tenant-root",
        "--source-name=bucket-cozy-backups-system-credentials",
        "--endpoint=http://s3.cozy.local",
        "--region=us-east-1",
        "--force-path-style=true",
        "--system-namespaces=cozy-velero",
    ])
}

/// A Kind the runner has no cache for, to back up through the Job strategy (served from a CRD, as
/// any operator's application kind would be).
pub const NOTEBOOK: &str = "Notebook";

/// Permissive CRDs for the application kinds of these tests (on a real cluster the aggregated
/// cozystack-api serves them).
async fn install_app_crds(h: &Harness) {
    use api::thirdparty::{apps, permissive_crd};
    let mut crds = vec![
        permissive_crd::<apps::MariaDB>(true),
        permissive_crd::<apps::Etcd>(true),
        permissive_crd::<apps::ClickHouse>(true),
    ];
    let mut notebook = permissive_crd::<apps::Etcd>(true);
    notebook.metadata.name = Some("notebooks.apps.cozystack.io".into());
    notebook.spec.names.kind = NOTEBOOK.into();
    notebook.spec.names.list_kind = Some(format!("{NOTEBOOK}List"));
    notebook.spec.names.plural = "notebooks".into();
    notebook.spec.names.singular = Some("notebook".into());
    crds.push(notebook);
    let api: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(h.client());
    for crd in crds {
        api.create(&Default::default(), &crd).await.unwrap();
    }
}

/// An application of `kind` (`apps.cozystack.io/v1alpha1`) with `spec`.
pub fn app(kind: &str, ns: &str, name: &str, spec: Value) -> Value {
    json!({"apiVersion": "apps.cozystack.io/v1alpha1", "kind": kind,
           "metadata": {"name": name, "namespace": ns}, "spec": spec})
}

/// A Backup as JSON without the fields the API server and the finalizer controller add.
pub fn catalog_json(backup: &Backup) -> Value {
    let mut v = serde_json::to_value(backup).unwrap();
    let meta = v["metadata"].as_object_mut().unwrap();
    for k in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "generation",
        "managedFields",
        "finalizers",
    ] {
        meta.remove(k);
    }
    v
}
