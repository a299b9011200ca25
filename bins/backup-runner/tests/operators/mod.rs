//! The platform the operator-driver end-to-end tests run on (MariaDB, Etcd, Job, Altinity): the
//! real `backup-runner`, `strategy-renderer` and `credentials-projector` binaries, and
//! `operator-sims` with the COSI provisioner (the platform bucket and its credentials Secret) plus
//! the simulated operators under test; the application CRDs a tenant's apps need; and the waits
//! the tests share (over [`crate::support`], which the test declares next to this module).
#![allow(dead_code, unreachable_pub)]

use api::backups::{Backup, BackupJob};
use harness::dataplane::apply;
use harness::{Admin, DaemonSpec, Harness, eventually_within};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

use crate::support::{WAIT, bin, ready};

/// The platform bucket's endpoint as the renderer and the projector name it.
const ENDPOINT: &str = "http://s3.cozy.local";

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
                .args([format!("--endpoint={ENDPOINT}")]),
            WAIT,
        )
        .await
        .unwrap();
        if projector {
            h.spawn_ready(crate::support::projector(ENDPOINT), WAIT)
                .await
                .unwrap();
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

    /// MariaDB application `name` in `ns` and the operator MariaDB its chart renders
    /// (`mariadb-<name>`, carrying `annotations`).
    pub async fn mariadb(&self, ns: &str, name: &str, annotations: Value) {
        self.put::<api::thirdparty::apps::MariaDB>(
            ns,
            app("MariaDB", ns, name, json!({"replicas": 1})),
        )
        .await;
        self.mariadb_server(ns, name, annotations).await;
    }

    /// The operator MariaDB the chart renders for application `name` in `ns`.
    pub async fn mariadb_server(&self, ns: &str, name: &str, annotations: Value) {
        self.put::<api::thirdparty::mariadb::MariaDB>(
            ns,
            json!({"apiVersion": "k8s.mariadb.com/v1alpha1", "kind": "MariaDB",
                   "metadata": {"name": format!("mariadb-{name}"), "namespace": ns, "annotations": annotations},
                   "spec": {"replicas": 1}}),
        )
        .await;
    }

    /// Starts the credentials projector (when the platform started without it).
    pub async fn start_projector(&mut self) {
        self.h
            .spawn_ready(crate::support::projector(ENDPOINT), WAIT)
            .await
            .unwrap();
    }

    /// The BackupJobs of `ns`.
    pub fn jobs(&self, ns: &str) -> Api<BackupJob> {
        Api::namespaced(self.h.client(), ns)
    }

    /// Creates BackupJob `name` in `ns` for `kind`/`app` through `class`.
    pub async fn backup(&self, ns: &str, name: &str, kind: &str, app: &str, class: &str) {
        crate::support::backup_job(&self.h, ns, name, kind, app, class).await;
    }

    /// Waits for the job's Ready condition to have `reason`, returning the job.
    pub async fn reason(&self, ns: &str, name: &str, reason: &str) -> BackupJob {
        crate::support::reason(&self.jobs(ns), name, reason, WAIT).await
    }

    /// Waits for the job to wait for strategy `strategy` named by BackupClass `class` (upstream's
    /// words asserted), returning the job.
    pub async fn strategy_not_ready(
        &self,
        ns: &str,
        name: &str,
        strategy: &str,
        class: &str,
    ) -> BackupJob {
        crate::support::strategy_not_ready(&self.jobs(ns), name, strategy, class).await
    }

    /// Waits for the job to wait for the credentials projection, returning the job.
    pub async fn projection_pending(&self, ns: &str, name: &str) -> BackupJob {
        crate::support::projection_pending(&self.jobs(ns), name).await
    }

    /// Waits for a terminal phase.
    pub async fn terminal(&self, ns: &str, name: &str) -> BackupJob {
        crate::support::terminal(&self.jobs(ns), name, WAIT).await
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
        crate::support::class(&self.h, name, app_kind, kind, strategy, parameters).await;
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
        crate::support::owned(&self.h.dynamic::<K>(ns), job).await
    }

    /// No credential value of the projected Secret in `ns` reached the runner's log, the job
    /// Events (`kubectl describe`) or the metrics; and every API call the runner made is allowed by
    /// `deploy/backup-runner/rbac.yaml`.
    pub async fn assert_clean(&mut self, ns: &str, job: &str) {
        crate::support::assert_clean(&mut self.h, &self.runner, ns, job).await;
    }
}

/// Starts the lease-server (its epoch in its own namespace, where its Role allows it; leases of
/// at most `max_ttl`); returns its gRPC endpoint.
pub async fn lease_server(h: &mut Harness, max_ttl: &str) -> String {
    h.spawn_lease_server(
        DaemonSpec::new("lease-server", bin("lease-server")).args([
            "--namespace",
            "cozy-backup-controller",
            "--max-ttl",
            max_ttl,
        ]),
        WAIT,
    )
    .await
    .unwrap()
}

/// Runner replica `who` sharing the work through the lease-server at `grpc`, with `extra` args.
pub fn replica(who: &str, grpc: &str, extra: &[&str]) -> DaemonSpec {
    DaemonSpec::new(who, bin("backup-runner"))
        .args(["--lease-endpoint", grpc, "--identity", who])
        .args(extra.iter().copied())
}

/// A Kind the runner has no cache for, to back up through the Job strategy (served from a CRD, as
/// any operator's application kind would be).
pub const NOTEBOOK: &str = "Notebook";

/// Permissive CRDs for the application kinds of these tests (on a real cluster the aggregated
/// cozystack-api serves them).
pub async fn install_app_crds(h: &Harness) {
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
